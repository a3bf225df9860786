"""Results in the repository (rankrl.report.results): the report stores what it builds from in
experiments/<paper>/results/, and rebuilds every table, comparison and figure from there alone, byte for byte,
with no run folders. Run folders here are real files written by the code that writes them in a run
(rankrl.runs.write_run_files, rankrl.tracking.RunLogger), in temporary folders."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from omegaconf import OmegaConf

from rankrl.config import REPO_ROOT
from rankrl.report.__main__ import papers, report
from rankrl.report.results import RESULTS_DIR, read
from rankrl.runs import SCHEMA, write_run_files
from rankrl.tracking import RunLogger

QUERIES = [f"q{i}" for i in range(20)]
TABLES = {
    "metric": "nDCG@10",
    "digits": 4,
    "legend": "demo",
    "tables": [
        {
            "name": "main",
            "title": "Demo",
            "columns": ["dl19", "dl20"],
            "rows": [
                {"method": "BM25", "experiments": {"dl19": "demo/bm25", "dl20": "demo/bm25"}},
                {"method": "SFT", "experiments": {"dl19": "demo/pipe/sft"}},
                {"method": "GRPO", "experiments": {"dl19": "demo/pipe/grpo"}},
            ],
        },
        {
            "name": "metrics",
            "title": "Demo, two metrics",
            "benchmark": "dl19",
            "columns": ["nDCG@10", "R@1"],
            "rows": [{"method": "GRPO", "experiment": "demo/pipe/grpo"}],
        },
    ],
    "comparisons": [
        {
            "name": "grpo_vs_sft",
            "benchmark": "dl19",
            "a": {"experiment": "demo/pipe/grpo", "label": "GRPO"},
            "b": {"experiment": "demo/pipe/sft", "label": "SFT"},
        },
        {"name": "grpo_vs_bm25", "benchmark": "dl19", "a": "demo/pipe/grpo", "b": "demo/bm25"},
    ],
}
PUBLISHED = {
    "relative_gains": [
        {
            "benchmark": "dl19",
            "metric": "nDCG@10",
            "ours": "demo/pipe/grpo",
            "baseline": "demo/pipe/sft",
            "method": "GRPO",
            "over": "SFT",
            "paper": 5.0,
            "paper_model": "big",
        }
    ]
}
FIGURES = {
    "figures": [
        {
            "name": "demo_curve",
            "runs": [{"experiment": "demo/pipe/grpo", "label": "GRPO"}],
            "panels": ["reward/mean", {"series": "monitor/nDCG@10", "smooth": 2}],
        }
    ],
    "rounds": [{"pipeline": "demo/pipe", "panels": [{"label": "nDCG", "metrics": {"nDCG@10": "nDCG@10"}}]}],
}


def write_paper(experiments: Path) -> Path:
    paper = experiments / "demo"
    paper.mkdir(parents=True)
    for name, spec in (("tables", TABLES), ("published", PUBLISHED), ("figures", FIGURES)):
        (paper / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    return paper


def write_run(
    runs: Path,
    experiment: str,
    seed: int,
    *,
    benchmark: str = "dl19",
    model: str | None = "smollm2-135m",
    scale: str = "cpu",
    shift: float = 0.0,
    created: str = "2026-01-01T00:00:00+00:00",
    steps: int = 0,
    finished: bool = True,
    role: str | None = None,
) -> Path:
    """A run folder as train/evaluate leave it: config.yaml, per_query.csv and metrics.json
    (write_run_files), and for a training run its train_log.jsonl (RunLogger)."""
    folder = runs / experiment / f"{scale}-{model}" / f"seed{seed}" / benchmark / created[:10]
    cfg = OmegaConf.create(
        {
            "experiment_name": experiment,
            "paper": "demo",
            "seed": seed,
            "scale": scale,
            "model": {"name": model},
            "benchmark": {"name": benchmark},
        }
    )
    rng = np.random.default_rng(zlib.crc32(f"{experiment} {seed} {benchmark} {created}".encode()))
    logger = RunLogger(folder)
    for step in range(steps):
        line = {"reward/mean": shift + 0.01 * step + rng.normal(0, 0.01), "sample/completion": "<a>"}
        if step % 2 == 0:
            line["monitor/nDCG@10"] = 0.4 + shift + 0.001 * step
        logger.log(line, step=step)
    if not finished:
        (folder / ".hydra").mkdir(parents=True, exist_ok=True)
        (folder / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
        return folder
    base = np.linspace(0.2, 0.7, len(QUERIES))
    per_query = pd.DataFrame(
        {
            "nDCG@10": np.clip(base + shift + rng.normal(0, 0.05, len(QUERIES)), 0, 1),
            "R@1": (rng.random(len(QUERIES)) < 0.5 + shift).astype(float),
        },
        index=pd.Index(QUERIES, name="qid"),
    )
    record = {
        "schema": SCHEMA,
        "kind": "train" if steps else "evaluate",
        "paper": "demo",
        "experiment": experiment,
        "task": "demo",
        "benchmark": benchmark,
        "split": "test",
        "eval_limit": None,
        "model": model,
        "scale": scale,
        "seed": seed,
        "git_commit": "abc",
        "created": created,
        "train_role": role,
        "metrics": {k: float(v) for k, v in per_query.mean().items()},
    }
    write_run_files(folder, cfg, record, per_query)
    return folder


def write_runs(runs: Path) -> None:
    """Every kind of row the report reads: a model-free baseline on two benchmarks, a pipeline's stages
    over three seeds with training logs, an unfinished run still training, and runs the specs do not name
    (another experiment, a smoke run)."""
    for benchmark in ("dl19", "dl20"):
        write_run(runs, "demo/bm25", 0, benchmark=benchmark, model=None, shift=0.05)
    for seed in range(3):
        write_run(runs, "demo/pipe/sft", seed, shift=0.02 * seed, role="policy")
        created = f"2026-01-0{2 + seed}T00:00:00+00:00"
        write_run(runs, "demo/pipe/grpo", seed, shift=0.03, created=created, steps=6, role="policy")
    write_run(runs, "demo/pipe/grpo", 3, created="2026-01-09T00:00:00+00:00", steps=4, finished=False)
    write_run(runs, "demo/other", 0)
    write_run(runs, "demo/pipe/grpo", 0, scale="smoke", created="2026-02-01T00:00:00+00:00", steps=3)


def files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_the_report_rebuilds_byte_for_byte_from_results_alone(tmp_path):
    experiments, runs = tmp_path / "experiments", tmp_path / "outputs"
    paper = write_paper(experiments)
    write_runs(runs)
    cfg = OmegaConf.create({"paper": "all", "runs_dir": str(runs), "skip_scales": ["smoke"]})
    written = report(cfg, experiments)
    names = {p.name for p in written}
    assert {"main.md", "metrics.csv", "comparisons.md", "relative_gains.csv", "demo_curve.png"} <= names
    assert "rounds_pipe_cpu-smollm2-135m.png" in names
    built = files(paper)

    shutil.rmtree(runs)  # a fresh clone: no outputs/
    assert report(cfg, experiments) == written
    assert files(paper) == built  # tables, comparisons, figures and results, every byte

    # what results/ holds: the named experiments only, the newest run of each seed, no smoke run
    stored = read(paper / RESULTS_DIR)
    assert sorted(stored.runs["experiment"].unique()) == ["demo/bm25", "demo/pipe/grpo", "demo/pipe/sft"]
    assert set(stored.runs["scale"]) == {"cpu"} and len(stored.runs) == 2 * (2 + 3 + 3)
    grpo = paper / RESULTS_DIR / "demo/pipe/grpo/cpu-smollm2-135m"
    per_query = pd.read_csv(grpo / "per_query.csv")
    assert list(per_query.columns) == [
        "experiment",
        "benchmark",
        "scale",
        "model",
        "seed",
        "qid",
        "nDCG@10",
        "R@1",
    ]
    assert len(per_query) == 3 * len(QUERIES)
    assert (paper / RESULTS_DIR / "demo/bm25/cpu-no-model/per_query.csv").exists()
    log = pd.read_csv(grpo / "train_log.csv")
    assert list(log.columns) == [
        "experiment",
        "benchmark",
        "scale",
        "model",
        "seed",
        "step",
        "reward/mean",
        "monitor/nDCG@10",
    ]
    assert sorted(set(log["seed"])) == [0, 1, 2, 3]  # the unfinished seed 3 is drawn as far as it got
    curves = pd.read_csv(paper / RESULTS_DIR / "curves.csv")
    assert curves.set_index("seed")["finished"].to_dict() == {0: True, 1: True, 2: True, 3: False}

    # the comparisons read the stored per-query values: paired seeds, and the fixed model-free baseline
    tests = pd.read_csv(paper / "comparisons.csv").set_index("comparison")
    assert tests.loc["grpo_vs_sft", "test"] == "paired" and tests.loc["grpo_vs_bm25", "test"] == "fixed b"
    assert tests.loc["grpo_vs_sft", "per_seed_diff"].count(":") == 3


def test_a_rerun_of_one_seed_replaces_that_seed_only(tmp_path):
    experiments, runs = tmp_path / "experiments", tmp_path / "outputs"
    paper = write_paper(experiments)
    write_runs(runs)
    cfg = OmegaConf.create({"paper": "demo", "runs_dir": str(runs), "skip_scales": ["smoke"]})
    report(cfg, experiments)
    before = read(paper / RESULTS_DIR)

    shutil.rmtree(runs)  # a fresh clone reruns seed 1 of SFT, and an older copy of seed 2 turns up
    write_run(runs, "demo/pipe/sft", 1, shift=0.3, created="2026-03-01T00:00:00+00:00", role="policy")
    write_run(runs, "demo/pipe/sft", 2, shift=0.3, created="2025-12-01T00:00:00+00:00", role="policy")
    report(cfg, experiments)
    after = read(paper / RESULTS_DIR)

    def sft(results, table, by):
        frame = getattr(results, table)
        return frame[frame["experiment"] == "demo/pipe/sft"].set_index(["seed", by]).sort_index()

    changed = sft(after, "runs", "metric")["value"] != sft(before, "runs", "metric")["value"]
    assert set(changed[changed].index.get_level_values("seed")) == {1}  # seed 2's stored run is newer
    assert (sft(after, "runs", "metric").loc[1, "created"] == "2026-03-01T00:00:00+00:00").all()
    per_query_before, per_query_after = sft(before, "per_query", "qid"), sft(after, "per_query", "qid")
    assert per_query_after.loc[[0, 2]].equals(per_query_before.loc[[0, 2]])
    assert not per_query_after.loc[1].equals(per_query_before.loc[1])
    assert after.runs[after.runs["experiment"] != "demo/pipe/sft"].equals(
        before.runs[before.runs["experiment"] != "demo/pipe/sft"]
    )


def test_results_go_beside_the_tables_they_feed(tmp_path):
    """With out_dir (the smoke report's outputs/smoke/tables/<paper>), results go there too, and the
    committed ones are neither read nor written."""
    experiments, runs = tmp_path / "experiments", tmp_path / "outputs"
    paper = write_paper(experiments)
    write_runs(runs)
    cfg = {"paper": "demo", "runs_dir": str(runs), "skip_scales": []}
    report(OmegaConf.create({**cfg, "out_dir": str(tmp_path / "smoke")}), experiments)
    assert not (paper / RESULTS_DIR).exists() and not (paper / "main.md").exists()
    stored = read(tmp_path / "smoke" / RESULTS_DIR)
    assert set(stored.runs["scale"]) == {"cpu", "smoke"}


def test_without_results_or_runs_a_papers_tables_are_left_as_they_are(tmp_path):
    experiments = tmp_path / "experiments"
    paper = write_paper(experiments)
    (paper / "main.md").write_text("committed\n")
    cfg = OmegaConf.create({"paper": "demo", "runs_dir": str(tmp_path / "none")})
    assert report(cfg, experiments) == []
    assert (paper / "main.md").read_text() == "committed\n" and not (paper / RESULTS_DIR).exists()


def _feeds_a_table(paper_dir: Path) -> bool:
    spec = paper_dir / "tables.yaml"
    return spec.exists() and bool((yaml.safe_load(spec.read_text()) or {}).get("tables"))


def rebuilt_differently(experiments: Path, papers_with_results: list[str], tmp_path: Path) -> list[str]:
    """`make tables` in a fresh clone: copy ``experiments`` into ``tmp_path``, run ``python -m rankrl.report
    paper=all`` there with no run folders, and list what it wrote that differs from ``experiments``' file,
    or that ``experiments`` lacks; a paper with results must have written each of its tables."""
    copy = tmp_path / "clone" / "experiments"
    shutil.copytree(experiments, copy)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rankrl.report",
            "paper=all",
            f"experiments_dir={copy}",
            f"runs_dir={tmp_path / 'no-outputs'}",
            f"hydra.run.dir={tmp_path / 'hydra'}",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    written = [Path(line) for line in done.stdout.splitlines() if line.strip()]
    differ = []
    for paper in papers_with_results:
        ours = [p for p in written if p.parent == copy / paper]
        tables = yaml.safe_load((copy / paper / "tables.yaml").read_text())["tables"]
        differ += [
            f"{paper}/{t['name']}.md not built"
            for t in tables
            if copy / paper / f"{t['name']}.md" not in ours
        ]
        for path in ours:
            committed = experiments / paper / path.name
            if not committed.exists() or committed.read_bytes() != path.read_bytes():
                differ.append(f"{paper}/{path.name}")
    return differ


def test_the_rebuild_check_finds_a_table_that_differs(tmp_path):
    """The check below can fail: a paper's committed table that its results do not rebuild is named."""
    experiments, runs = tmp_path / "experiments", tmp_path / "outputs"
    paper = write_paper(experiments)
    write_runs(runs)
    report(OmegaConf.create({"paper": "all", "runs_dir": str(runs), "skip_scales": ["smoke"]}), experiments)
    shutil.rmtree(runs)
    assert rebuilt_differently(experiments, ["demo"], tmp_path / "first") == []
    (paper / "main.md").write_text((paper / "main.md").read_text().replace("0.", "1.", 1))
    (paper / "demo_curve.csv").unlink()
    differ = rebuilt_differently(experiments, ["demo"], tmp_path / "second")
    assert sorted(differ) == ["demo/demo_curve.csv", "demo/main.md"]


def test_make_tables_rebuilds_the_committed_tables_from_the_committed_results(tmp_path):
    """`make tables` in a fresh clone: every paper's committed results rebuild its committed tables,
    comparisons and figures byte for byte, with no outputs/. A paper whose tables.yaml feeds a table must
    have its results/ committed."""
    experiments = REPO_ROOT / "experiments"
    fed = [p for p in papers(experiments) if _feeds_a_table(experiments / p)]
    with_results = [p for p in fed if (experiments / p / RESULTS_DIR / "runs.csv").exists()]
    missing = sorted(set(fed) - set(with_results))
    assert not missing, f"{missing}: tables without committed results/ (run make tables with their outputs/)"
    assert with_results and rebuilt_differently(experiments, with_results, tmp_path) == []
