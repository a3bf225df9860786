"""Round figures (rankrl/report/rounds.py): a pipeline's stages read from metrics.json in the order they
finished, drawn per scale, model and seed, declared in a figures.yaml and drawn by the report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from rankrl.report.__main__ import report
from rankrl.report.rounds import draw_all_rounds, load_rounds, panel_metrics, read_records
from rankrl.runs import SCHEMA

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ROUNDS = {
    "pipeline": "demo/alternating",
    "title": "Demo rounds",
    "panels": [
        {"label": "F1", "ylim": [0, 1], "metrics": {"f1": "validation F1", "train_f1": "training F1"}},
        {"label": "set size", "metrics": {"size": "mean set size"}},
    ],
}


def write_spec(path: Path, spec: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def write_stage(
    runs_dir: Path,
    stage: str,
    n: int,
    *,
    seed: int = 0,
    role: str | None = None,
    metrics: dict | None = None,
    scale: str = "cpu",
) -> None:
    """A finished stage's metrics.json, created at second ``n``."""
    folder = runs_dir / scale / f"seed{seed}" / f"{stage}-{n}"
    folder.mkdir(parents=True)
    record = {
        "schema": SCHEMA,
        "paper": "demo",
        "experiment": f"demo/alternating/{stage}",
        "scale": scale,
        "model": "tiny",
        "seed": seed,
        "created": f"2026-01-01T00:00:{n:02d}",
        "train_role": role,
        "metrics": {"f1": 0.1 * n, "train_f1": 0.2 * n, "size": float(n)} if metrics is None else metrics,
    }
    (folder / "metrics.json").write_text(json.dumps(record))


def test_each_stage_is_read_in_the_order_it_finished(tmp_path):
    runs = tmp_path / "runs"
    for n, (stage, role) in enumerate([("sft", "b"), ("a_r1", "a"), ("b_r1", "b")]):
        write_stage(runs, stage, n, role=role)
    write_stage(runs, "eval", 3, metrics={"other": 1.0})  # none of the figure's metrics: not a stage of it
    spec = load_rounds(write_spec(tmp_path / "figures.yaml", {"rounds": [ROUNDS]}))
    written = draw_all_rounds(read_records(runs), tmp_path / "out", spec)
    assert [p.name for p in written] == ["rounds_alternating_cpu-tiny.png", "rounds_alternating_cpu-tiny.csv"]
    assert written[0].read_bytes()[:8] == PNG_MAGIC
    frame = pd.read_csv(written[1])
    assert list(frame.columns) == ["stage", "trained", "seed", "scale", "model", "f1", "train_f1", "size"]
    assert list(frame["stage"]) == ["sft", "a_r1", "b_r1"] and list(frame["trained"]) == ["b", "a", "b"]
    assert frame["f1"].tolist() == pytest.approx([0.0, 0.1, 0.2])


def test_newest_run_per_stage_one_figure_per_seed_and_one_stage_is_no_figure(tmp_path):
    runs = tmp_path / "runs"
    write_stage(runs, "sft", 1)
    write_stage(runs, "sft", 4)  # a rerun: replaces the first, and now finishes after a_r1
    write_stage(runs, "a_r1", 2)
    write_stage(runs, "sft", 1, seed=1)  # seed 1: one stage only
    write_stage(runs, "sft", 1, seed=2)
    write_stage(runs, "a_r1", 2, seed=2)
    (runs / "broken").mkdir()
    (runs / "broken" / "metrics.json").write_text("{")  # half written: skipped
    spec = load_rounds(write_spec(tmp_path / "figures.yaml", {"rounds": [ROUNDS]}))
    written = draw_all_rounds(read_records(runs), tmp_path / "out", spec)
    assert sorted(p.name for p in written) == [
        "rounds_alternating_cpu-tiny.csv",
        "rounds_alternating_cpu-tiny.png",
        "rounds_alternating_cpu-tiny_seed2.csv",
        "rounds_alternating_cpu-tiny_seed2.png",
    ]
    frame = pd.read_csv(tmp_path / "out" / "rounds_alternating_cpu-tiny.csv")
    assert list(frame["stage"]) == ["a_r1", "sft"] and frame["size"].tolist() == [2.0, 4.0]


@pytest.mark.parametrize(
    "entry,said",
    [
        ({"panels": ROUNDS["panels"]}, "needs a pipeline and panels"),
        ({**ROUNDS, "panels": []}, "no panels"),
        ({**ROUNDS, "colour": "red"}, "unknown keys"),
        ({**ROUNDS, "panels": [{"label": "F1", "metrics": {}}]}, "needs metrics"),
        ({**ROUNDS, "panels": [{"label": "F1", "series": "f1"}]}, "a panel is"),
        ({**ROUNDS, "panels": [{"label": "F1", "metrics": {"f1": "F1"}, "ylim": [1]}]}, "ylim"),
    ],
)
def test_an_error_in_the_spec_stops_with_the_pipeline(tmp_path, entry, said):
    with pytest.raises(ValueError, match=said):
        load_rounds(write_spec(tmp_path / "figures.yaml", {"rounds": [entry]}))


def test_panels_keep_their_order_and_a_spec_without_rounds_has_none(tmp_path):
    spec = load_rounds(write_spec(tmp_path / "figures.yaml", {"rounds": [ROUNDS]}))
    assert panel_metrics(spec[0]["panels"]) == ["f1", "train_f1", "size"]
    assert spec[0]["panels"][0] == ("F1", (("f1", "validation F1"), ("train_f1", "training F1")), (0.0, 1.0))
    assert load_rounds(write_spec(tmp_path / "other.yaml", {"figures": []})) == []


def test_the_report_draws_the_rounds_a_figures_yaml_declares(tmp_path):
    experiments = tmp_path / "experiments"
    write_spec(experiments / "demo" / "figures.yaml", {"rounds": [ROUNDS]})  # no `figures:` needed
    runs = tmp_path / "runs"
    write_stage(runs, "sft", 0, role="b")
    write_stage(runs, "a_r1", 1, role="a")
    cfg = OmegaConf.create({"paper": "demo", "runs_dir": str(runs), "out_dir": str(tmp_path / "out")})
    write_stage(runs, "sft", 2, role="b", scale="smoke")
    write_stage(runs, "a_r1", 3, role="a", scale="smoke")
    written = report(cfg, experiments)
    cpu_and_smoke = ["rounds_alternating_cpu-tiny", "rounds_alternating_smoke-tiny"]
    assert sorted({p.stem for p in written}) == cpu_and_smoke
    written = report(OmegaConf.create({**cfg, "skip_scales": ["smoke"]}), experiments)
    assert [p.name for p in written] == ["rounds_alternating_cpu-tiny.png", "rounds_alternating_cpu-tiny.csv"]
    assert written[0].parent == tmp_path / "out"
