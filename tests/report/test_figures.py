"""Figures from run folders: logs read as numbers, the drawn data equals the log, missing runs skipped."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from rankrl.report.__main__ import report
from rankrl.report.figures import draw_figures, find_runs, load_spec, plot_figure, read_log
from rankrl.runs import SCHEMA

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _log_lines(steps: int, offset: float = 0.0) -> list[dict]:
    lines = []
    for step in range(1, steps + 1):
        line = {
            "step": step,
            "reward/mean": offset + 0.1 * step,
            "format_error_rate": 1.0 - 0.05 * step,
            "loss": "nan" if step == 3 else 0.01 * step,
            "sample/completion": f"<think>{step}</think>",
        }
        if step % 2 == 0:
            line["monitor/nDCG@10"] = offset + 0.3 + 0.01 * step
        lines.append(line)
    return lines


def make_run(
    root: Path,
    experiment: str,
    seed: int = 0,
    *,
    steps: int = 6,
    offset: float = 0.0,
    finished: bool = True,
    created: str = "2026-01-01T00:00:00+00:00",
    paper: str = "demo",
    scale: str = "cpu",
    model: str = "smollm2-135m",
    benchmark: str = "dl19",
) -> Path:
    """A run folder as train/evaluate leave it: train_log.jsonl, .hydra/config.yaml, and when finished
    config.yaml + metrics.json."""
    run = root / experiment / f"seed{seed}-{created[:19].replace(':', '-')}"
    (run / ".hydra").mkdir(parents=True)
    config = (
        f"experiment_name: {experiment}\npaper: {paper}\nseed: {seed}\nscale: {scale}\n"
        f"model:\n  name: {model}\n  path: ${{paths.model_dir}}/{model}\n"
        f"benchmark:\n  name: {benchmark}\n"
        "output_dir: ${hydra:runtime.output_dir}\n"
    )
    (run / ".hydra" / "config.yaml").write_text(config)
    (run / "train_log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in _log_lines(steps, offset)))
    if finished:
        (run / "config.yaml").write_text(config)
        record = {
            "schema": SCHEMA,
            "kind": "train",
            "paper": paper,
            "experiment": experiment,
            "task": "rankr1",
            "benchmark": benchmark,
            "split": "test",
            "eval_limit": None,
            "model": model,
            "scale": scale,
            "seed": seed,
            "git_commit": "abc",
            "created": created,
            "metrics": {"nDCG@10": 0.4},
        }
        (run / "metrics.json").write_text(json.dumps(record))
    return run


def write_spec(path: Path, figures: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"figures": figures}))  # JSON is YAML
    return path


def write_table_spec(paper_dir: Path, method: str, experiment: str) -> None:
    """A tables.yaml with one table ``t`` of one row (nDCG@10 on dl19), and an empty published.yaml."""
    paper_dir.mkdir(parents=True, exist_ok=True)
    table = {
        "name": "t",
        "title": "T",
        "benchmark": "dl19",
        "columns": ["nDCG@10"],
        "rows": [{"method": method, "experiment": experiment}],
    }
    (paper_dir / "tables.yaml").write_text(json.dumps({"metric": "nDCG@10", "tables": [table]}))
    (paper_dir / "published.yaml").write_text("{}\n")


CURVE = {
    "name": "curve",
    "title": "demo",
    "runs": ["demo/grpo"],
    "panels": [
        {"series": "reward/mean", "label": "mean reward"},
        "format_error_rate",
        {"series": "monitor/nDCG@10", "label": "probe nDCG@10"},
    ],
}


def test_read_log_keeps_numbers_only(tmp_path):
    run = make_run(tmp_path, "demo/grpo")
    with (run / "train_log.jsonl").open("a") as f:
        f.write('{"step": 7, "reward/me')  # the half-written last line of a running job
    frame = read_log(run)
    assert list(frame.index) == [1, 2, 3, 4, 5, 6] and frame.index.name == "step"
    assert "sample/completion" not in frame
    assert all(pd.api.types.is_float_dtype(dtype) for dtype in frame.dtypes)
    assert np.isnan(frame.loc[3, "loss"]) and frame.loc[4, "loss"] == pytest.approx(0.04)
    assert frame["monitor/nDCG@10"].dropna().index.tolist() == [2, 4, 6]
    assert frame["monitor/nDCG@10"].isna().sum() == 3


def test_figure_is_written_and_its_data_equals_the_log(tmp_path):
    runs_dir = tmp_path / "runs"
    run = make_run(runs_dir, "demo/grpo")
    spec = write_spec(tmp_path / "figures.yaml", [CURVE])
    written = draw_figures(find_runs(runs_dir), spec, tmp_path / "out")
    png, csv = tmp_path / "out" / "curve.png", tmp_path / "out" / "curve.csv"
    assert written == [png, csv]
    assert png.read_bytes()[:8] == PNG_MAGIC
    import matplotlib.image

    assert matplotlib.image.imread(png).shape[0] > 100
    data = pd.read_csv(csv)
    log = read_log(run)
    for panel, series in enumerate(["reward/mean", "format_error_rate", "monitor/nDCG@10"], start=1):
        mean = data[(data["panel"] == panel) & (data["line"] == "mean")]
        assert (mean["series"] == series).all() and (mean["run"] == "demo/grpo").all()
        expected = log[series].dropna()
        assert mean["step"].tolist() == expected.index.tolist()
        assert np.allclose(mean["value"], expected.to_numpy())
    assert set(data["line"]) == {"seed=0", "mean"}  # one seed: no band


def test_seeds_are_averaged_with_a_band_and_smoothing_is_a_rolling_mean(tmp_path):
    runs_dir = tmp_path / "runs"
    make_run(runs_dir, "demo/grpo", seed=0)
    make_run(runs_dir, "demo/grpo", seed=1, offset=1.0)
    spec = write_spec(
        tmp_path / "figures.yaml", [{**CURVE, "panels": [{"series": "reward/mean", "smooth": 3}]}]
    )
    draw_figures(find_runs(runs_dir), spec, tmp_path / "out")
    data = pd.read_csv(tmp_path / "out" / "curve.csv")

    def line(name):
        return data[data["line"] == name].set_index("step")["value"]

    assert np.allclose(line("mean"), (line("seed=0") + line("seed=1")) / 2)
    assert np.allclose(line("min"), line("seed=0")) and np.allclose(line("max"), line("seed=1"))
    assert np.allclose(line("mean_smoothed"), line("mean").rolling(3, min_periods=1).mean())
    assert {"min_smoothed", "max_smoothed"} <= set(data["line"])


def test_seeds_each_draws_every_seed_as_its_own_line_and_writes_only_those(tmp_path):
    """``seeds: each``: where seeds part ways a mean is a path no seed took, so each seed is drawn (and its
    CSV holds only the seed lines, the numbers drawn)."""
    runs_dir = tmp_path / "runs"
    make_run(runs_dir, "demo/grpo", seed=0)
    make_run(runs_dir, "demo/grpo", seed=1, offset=1.0)
    each = {**CURVE, "seeds": "each", "panels": ["reward/mean"]}
    spec = write_spec(tmp_path / "figures.yaml", [each])
    draw_figures(find_runs(runs_dir), spec, tmp_path / "out")
    data = pd.read_csv(tmp_path / "out" / "curve.csv")
    assert set(data["line"]) == {"seed=0", "seed=1"}
    seed1 = data[data["line"] == "seed=1"].set_index("step")["value"]
    assert np.allclose(seed1, [1.0 + 0.1 * step for step in seed1.index])

    figure = plot_figure(
        each,
        [{"experiment": "demo/grpo", "label": "demo/grpo"}],
        [{"series": "reward/mean", "label": "mean reward"}],
        data,
        "footer",
    )
    drawn = figure.axes[0].get_lines()
    assert [line.get_label() for line in drawn] == ["seed 0", "seed 1"]
    assert np.allclose(drawn[1].get_ydata(), seed1.to_numpy())
    assert drawn[0].get_linestyle() != drawn[1].get_linestyle()
    only_seed1 = plot_figure(
        each,
        [{"experiment": "demo/grpo", "label": "demo/grpo"}],
        [{"series": "reward/mean", "label": "r"}],
        data[data["line"] == "seed=1"],
        "footer",
    )
    assert (
        only_seed1.axes[0].get_lines()[0].get_linestyle() == drawn[1].get_linestyle()
    )  # by seed, not position


def test_seeds_zero_to_seven_each_have_their_own_dash_pattern():
    # with four patterns seeds 1 and 5 were drawn alike in F-GRPO's control curves (seeds 0, 1, 2, 5)
    from matplotlib.lines import Line2D

    from rankrl.report.figures import seed_linestyle

    patterns = [Line2D([], [], linestyle=seed_linestyle(seed))._dash_pattern for seed in range(8)]
    assert len({repr(p) for p in patterns}) == 8


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"seeds": "median"}, "valid: mean, each"),
        ({"seeds": "each", "panels": [{"series": "loss", "smooth": 3}]}, "no smooth"),
    ],
)
def test_a_bad_seeds_key_stops_at_the_spec_naming_the_choices(tmp_path, extra, message):
    spec = write_spec(tmp_path / "figures.yaml", [{**CURVE, **extra}])
    with pytest.raises(ValueError, match=message):
        load_spec(spec)


def test_a_figure_with_a_missing_run_is_skipped_and_not_written(tmp_path, caplog):
    runs_dir = tmp_path / "runs"
    make_run(runs_dir, "demo/grpo")
    absent = {**CURVE, "name": "absent", "runs": ["demo/grpo", "demo/not_run"]}
    spec = write_spec(tmp_path / "figures.yaml", [absent, CURVE])
    with caplog.at_level(logging.WARNING):
        written = draw_figures(find_runs(runs_dir), spec, tmp_path / "out")
    assert [p.name for p in written] == ["curve.png", "curve.csv"]
    assert not (tmp_path / "out" / "absent.png").exists() and not (tmp_path / "out" / "absent.csv").exists()
    assert any("absent" in r.getMessage() and "demo/not_run" in r.getMessage() for r in caplog.records)
    # no runs at all: nothing written, no error
    assert draw_figures(find_runs(tmp_path / "empty"), spec, tmp_path / "out2") == []


def test_two_runs_compared_in_one_panel(tmp_path):
    runs_dir = tmp_path / "runs"
    rank = make_run(runs_dir, "grape/rank_reward")
    sim = make_run(runs_dir, "grape/sim_reward", offset=0.5)
    figure = {
        "name": "fig5",
        "runs": [
            {"experiment": "grape/rank_reward", "label": "rank reward"},
            {"experiment": "grape/sim_reward", "label": "similarity reward"},
        ],
        "panels": [{"series": "monitor/nDCG@10", "label": "gold similarity"}, "reward/mean"],
    }
    written = draw_figures(find_runs(runs_dir), write_spec(tmp_path / "f.yaml", [figure]), tmp_path / "out")
    assert written[0].read_bytes()[:8] == PNG_MAGIC
    data = pd.read_csv(written[1])
    for label, run in [("rank reward", rank), ("similarity reward", sim)]:
        mean = data[(data["run"] == label) & (data["panel"] == 1) & (data["line"] == "mean")]
        assert np.allclose(mean["value"], read_log(run)["monitor/nDCG@10"].dropna().to_numpy())
    assert set(data["experiment"]) == {"grape/rank_reward", "grape/sim_reward"}


def test_a_figure_with_a_model_draws_that_models_runs_only(tmp_path):
    """The same experiment run for two models (F-GRPO's sweeps for Qwen3-4B and Qwen3.5-2B): without a
    model the newest run of either is drawn; a figure per model draws each model's own, never a mix."""
    runs_dir = tmp_path / "runs"
    old = make_run(runs_dir, "demo/grpo", model="qwen3-4b", created="2026-01-01T00:00:00+00:00")
    new = make_run(runs_dir, "demo/grpo", model="qwen3.5-2b", offset=0.5, created="2026-01-02T00:00:00+00:00")
    figures = [
        {**CURVE, "name": "any"},
        {**CURVE, "name": "four", "model": "qwen3-4b"},
        {**CURVE, "name": "none", "model": "smollm2-135m"},
        {**CURVE, "name": "each", "per_model": True},
    ]
    written = draw_figures(find_runs(runs_dir), write_spec(tmp_path / "f.yaml", figures), tmp_path / "out")
    assert sorted(p.name for p in written if p.suffix == ".csv") == [
        "any.csv",
        "each_qwen3-4b.csv",
        "each_qwen3.5-2b.csv",
        "four.csv",
    ]
    for name, run in [("any", new), ("four", old), ("each_qwen3-4b", old), ("each_qwen3.5-2b", new)]:
        mean = pd.read_csv(tmp_path / "out" / f"{name}.csv").query("panel == 1 and line == 'mean'")
        assert np.allclose(mean["value"], read_log(run)["reward/mean"].to_numpy()), name
    with pytest.raises(ValueError, match="not both"):
        draw_figures(
            find_runs(runs_dir),
            write_spec(tmp_path / "g.yaml", [{**CURVE, "model": "qwen3-4b", "per_model": True}]),
            tmp_path / "out",
        )


@pytest.mark.parametrize("finished", [True, False])
def test_a_figure_of_one_benchmark_draws_that_benchmarks_runs_only(tmp_path, finished: bool):
    """An experiment swept over benchmarks (GRAPE's grape_rank, one run folder per benchmark): the paper's
    Fig. 5 is Flickr30k-CN's run even when another benchmark's finished later, read from metrics.json or,
    for a run still training, from its config."""
    runs_dir = tmp_path / "runs"
    flickr = make_run(runs_dir, "demo/grpo", benchmark="flickr30k-cn", finished=finished)
    make_run(runs_dir, "demo/grpo", benchmark="cirr", offset=0.5, created="2026-01-02T00:00:00+00:00")
    figures = [
        {**CURVE, "name": "fig5", "benchmark": "flickr30k-cn"},
        {**CURVE, "name": "no", "benchmark": "x"},
    ]
    written = draw_figures(find_runs(runs_dir), write_spec(tmp_path / "f.yaml", figures), tmp_path / "out")
    assert [p.name for p in written if p.suffix == ".csv"] == ["fig5.csv"]  # no run on benchmark x: skipped
    mean = pd.read_csv(tmp_path / "out" / "fig5.csv").query("panel == 1 and line == 'mean'")
    assert np.allclose(mean["value"], read_log(flickr)["reward/mean"].to_numpy())


def test_unfinished_runs_are_found_and_the_newest_per_seed_is_drawn(tmp_path):
    runs_dir = tmp_path / "runs"
    make_run(runs_dir, "demo/grpo", created="2026-01-01T00:00:00+00:00")  # an older, finished run
    running = make_run(
        runs_dir, "demo/grpo", finished=False, steps=3, offset=5.0, created="2026-02-01T00:00:00+00:00"
    )
    hydra_cfg = running / ".hydra" / "config.yaml"
    os.utime(hydra_cfg, (1.9e9, 1.9e9))  # started in 2030, after the finished one
    runs = find_runs(runs_dir)
    assert len(runs) == 2 and sorted(runs["finished"]) == [False, True]
    row = runs[~runs["finished"]].iloc[0]
    identity = (row["experiment"], row["seed"], row["scale"], row["model"])
    assert identity == ("demo/grpo", 0, "cpu", "smollm2-135m")
    draw_figures(runs, write_spec(tmp_path / "f.yaml", [CURVE]), tmp_path / "out")
    data = pd.read_csv(tmp_path / "out" / "curve.csv")
    reward = data[(data["panel"] == 1) & (data["line"] == "mean")]
    assert reward["step"].tolist() == [1, 2, 3] and reward["value"].iloc[0] == pytest.approx(5.1)


def test_report_all_writes_every_papers_tables_and_figures(tmp_path):
    experiments = tmp_path / "experiments"
    write_spec(experiments / "demo" / "figures.yaml", [CURVE])
    (experiments / "engine").mkdir()  # no spec: not a paper
    runs_dir = tmp_path / "runs"
    make_run(runs_dir, "demo/grpo")
    cfg = OmegaConf.create({"paper": "all", "runs_dir": str(runs_dir), "out_dir": str(tmp_path / "out")})
    written = report(cfg, experiments)
    names = [p.relative_to(tmp_path / "out").as_posix() for p in written]
    assert names == ["demo/curve.png", "demo/curve.csv"]
    with pytest.raises(ValueError, match="valid: all, demo"):
        report(OmegaConf.create({**cfg, "paper": "engine"}), experiments)


def test_a_paper_without_finished_runs_keeps_its_tables(tmp_path, caplog):
    experiments = tmp_path / "experiments"
    write_table_spec(experiments / "demo", "A", "demo/a")
    committed = experiments / "demo" / "t.md"
    committed.write_text("| A | 0.5 |\n")
    runs_dir = tmp_path / "runs"
    make_run(runs_dir, "other/a", paper="other")  # another paper's run does not count
    cfg = OmegaConf.create({"paper": "demo", "runs_dir": str(runs_dir)})
    with caplog.at_level(logging.WARNING):
        assert report(cfg, experiments) == []
    assert committed.read_text() == "| A | 0.5 |\n"
    assert "no finished demo runs" in caplog.text
    make_run(runs_dir, "demo/a", paper="demo")
    assert [p.name for p in report(cfg, experiments)] == ["t.md", "t.csv"]
    assert "0.4000" in committed.read_text()


def test_smoke_runs_stay_out_of_a_papers_tables_and_figures_unless_asked_for(tmp_path):
    # outputs/ holds outputs/smoke/ too: a smoke run (tiny random model, two queries) is newer than the
    # cpu run of the same experiment, and must neither add rows to the committed tables nor replace the
    # cpu run's curve. The smoke report (skip_scales=[]) reads it.
    experiments = tmp_path / "experiments"
    write_spec(experiments / "demo" / "figures.yaml", [CURVE])
    write_table_spec(experiments / "demo", "GRPO", "demo/grpo")
    runs_dir = tmp_path / "runs"
    make_run(runs_dir, "demo/grpo")
    make_run(runs_dir / "smoke", "demo/grpo", offset=5.0, created="2026-02-01T00:00:00+00:00", scale="smoke")
    base = {"paper": "demo", "runs_dir": str(runs_dir)}

    report(
        OmegaConf.create({**base, "out_dir": str(tmp_path / "paper"), "skip_scales": ["smoke"]}), experiments
    )
    table = pd.read_csv(tmp_path / "paper" / "t.csv")
    assert table.loc[table["source"] == "ours", "scale"].tolist() == ["cpu"]
    curve = pd.read_csv(tmp_path / "paper" / "curve.csv")
    assert curve.loc[(curve["panel"] == 1) & (curve["line"] == "mean"), "value"].iloc[0] == pytest.approx(0.1)

    report(OmegaConf.create({**base, "out_dir": str(tmp_path / "smoke"), "skip_scales": []}), experiments)
    table = pd.read_csv(tmp_path / "smoke" / "t.csv")
    assert sorted(table.loc[table["source"] == "ours", "scale"]) == ["cpu", "smoke"]
    curve = pd.read_csv(tmp_path / "smoke" / "curve.csv")
    assert curve.loc[(curve["panel"] == 1) & (curve["line"] == "mean"), "value"].iloc[0] == pytest.approx(5.1)


def test_report_entry_point_runs_every_paper(tmp_path):
    runs_dir = tmp_path / "runs"
    make_run(runs_dir, "rankr1/warmstart_grpo_dl19/grpo", paper="rankr1")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rankrl.report",
            f"runs_dir={runs_dir}",
            f"out_dir={tmp_path / 'out'}",
            f"hydra.run.dir={tmp_path / 'hydra'}",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "out" / "rankr1" / "trec_dl.md").exists()
    assert (tmp_path / "out" / "rankr1" / "rankr1_reward_curve.png").read_bytes()[:8] == PNG_MAGIC
    bad = subprocess.run(
        [sys.executable, "-m", "rankrl.report", "paper=nope", f"hydra.run.dir={tmp_path / 'h'}"],
        capture_output=True,
        text=True,
    )
    # every paper with a report is listed (more papers join the list as they are added)
    assert bad.returncode != 0 and re.search(r"valid: all, .*rankr1", bad.stderr), bad.stderr[-2000:]
