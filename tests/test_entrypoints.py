"""The entry points as a user runs them: run folders, metrics.json, sweeps, the report, W&B failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from rankrl.runs import SCHEMA


def _run(*args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return out


def test_a_run_records_the_commit_it_started_with(monkeypatch):
    """A checkout during a long run (another commit, or files edited) must not relabel the run: metrics.json
    is written at the end, and the commit it names is the one read at start-up."""
    from rankrl import runs

    runs.git_commit.cache_clear()
    started = runs.git_commit()

    def checked_out_since(args, **kwargs):
        return subprocess.CompletedProcess(args, 0, stdout="feedbeef\n" if "rev-parse" in args else " M x\n")

    monkeypatch.setattr(runs.subprocess, "run", checked_out_since)
    assert runs.git_commit() == started != "feedbeef-dirty"
    runs.git_commit.cache_clear()
    assert runs.git_commit() == "feedbeef-dirty"  # what a fresh process would read now
    monkeypatch.undo()
    runs.git_commit.cache_clear()


@pytest.mark.parametrize("benchmark,ndcg", [("dl19", 0.5058), ("dl20", 0.4796)])
def test_bm25_rows_are_exact(tmp_path, data_dir, benchmark, ndcg):
    _run(
        "rankrl.evaluate",
        "experiment=rankr1/bm25",
        f"benchmark={benchmark}",
        f"hydra.run.dir={tmp_path}",
        "logger=none",
    )
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["schema"] == SCHEMA and record["paper"] == "rankr1"
    assert round(record["metrics"]["nDCG@10"], 4) == ndcg
    assert record["model"] is None  # no LLM in a first-stage row
    assert record["scale"] == "cpu" and record["git_commit"] != ""
    assert (tmp_path / "config.yaml").exists()
    per_query = pd.read_csv(tmp_path / "per_query.csv", dtype={"qid": str})  # what a paired test reads
    assert round(per_query["nDCG@10"].mean(), 4) == ndcg and per_query["qid"].is_unique


def test_data_dir_override_is_used(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rankrl.evaluate",
            "experiment=rankr1/bm25",
            f"paths.data_dir={tmp_path / 'nowhere'}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert str(tmp_path / "nowhere") in out.stderr and "make data" in out.stderr


def test_submitit_local_multirun(tmp_path, data_dir):
    _run(
        "rankrl.evaluate",
        "-m",
        "experiment=rankr1/bm25",
        "benchmark=dl19,dl20",
        "task.benchmark=${benchmark.name}",
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=10",
        f"hydra.sweep.dir={tmp_path}",
    )
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.rglob("metrics.json"))]
    assert sorted(r["benchmark"] for r in records) == ["dl19", "dl20"]
    assert sorted(round(r["metrics"]["nDCG@10"], 4) for r in records) == [0.4796, 0.5058]


@pytest.mark.parametrize("nproc,tasks", [(None, 1), ("8", 8)])
def test_slurm_launcher_gives_each_job_nproc_tasks_and_gpus(monkeypatch, nproc, tasks):
    """hydra/launcher=slurm (the paper scripts' sweeps): NPROC tasks and GPUs per job, the tasks its ranks."""
    from tests.conftest import compose

    if nproc is None:
        monkeypatch.delenv("NPROC", raising=False)
    else:
        monkeypatch.setenv("NPROC", nproc)
    launcher = compose("train", ["hydra/launcher=slurm"], hydra_cfg=True).hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.tasks_per_node == launcher.gpus_per_node == tasks


def test_report_regenerates_tables_from_runs(tmp_path, data_dir):
    runs = tmp_path / "runs"
    _run("rankrl.evaluate", "experiment=rankr1/bm25", f"hydra.run.dir={runs / 'a'}")
    _run("rankrl.report", "paper=rankr1", f"runs_dir={runs}", f"out_dir={tmp_path / 'tables'}")
    table = (tmp_path / "tables" / "trec_dl.md").read_text()
    bm25 = next(line for line in table.splitlines() if line.startswith("| BM25") and "ours" in line)
    assert "0.5058" in bm25 and "missing" in bm25  # DL20 was not run: missing, never a number
    assert "theirs (P)" in table and "0.5060" in table
    csv = (tmp_path / "tables" / "trec_dl.csv").read_text()
    assert "missing" in csv


def test_wandb_failure_warns_once_and_training_goes_on(tmp_path, model_dir, monkeypatch, caplog):
    import wandb

    from rankrl.tracking import RunLogger

    def broken(**kwargs):
        raise RuntimeError("no network")

    monkeypatch.setattr(wandb, "init", broken)
    logger = RunLogger(tmp_path, {"enabled": True, "mode": "online", "project": "x"}, config={}, name="t")
    for step in range(3):
        logger.log({"reward/mean": 0.5}, step=step)
    logger.finish()
    warnings = [r for r in caplog.records if "W&B" in r.getMessage()]
    assert len(warnings) == 1
    assert len((tmp_path / "train_log.jsonl").read_text().splitlines()) == 3


def test_wandb_offline_run_is_written(tmp_path, model_dir):
    _run(
        "rankrl.train",
        "model=tiny",
        "trainer.max_steps=1",
        "task.num_eval_prompts=2",
        f"hydra.run.dir={tmp_path}",
        "experiment_name=core/wandb_check",
    )
    offline = list((tmp_path / "wandb").glob("offline-run-*"))
    assert offline, list(tmp_path.iterdir())
    # what a dashboard shows beside the curves: the evaluation per query and the run's own curve
    media = offline[0] / "files" / "media"
    assert list(media.glob("table/eval/per_query_*.table.json")), sorted(media.rglob("*"))
    assert list(media.glob("images/figures/reward_curve_*.png")), sorted(media.rglob("*"))
    assert (tmp_path / "reward_curve.png").exists() and (tmp_path / "per_query.csv").exists()


def _user_error_command(tmp_path, overrides: list[str]) -> list[str]:
    entry = "rankrl.evaluate" if any("bm25" in o for o in overrides) else "rankrl.train"
    return [sys.executable, "-m", entry, *overrides, "logger=none", f"hydra.run.dir={tmp_path}"]


@pytest.mark.parametrize(
    "overrides,said",
    [
        (["model=tiny", "rollout.kv_cache_gib=100000"], "set rollout.kv_cache_gib"),
        (["model.path=/nowhere/model", "model.name=ghost"], "is not available offline"),
        (["experiment=rankr1/bm25", "paths.data_dir=/nowhere/data"], "make data"),
    ],
)
def test_user_errors_end_in_one_line_without_traceback(tmp_path, model_dir, overrides, said):
    """Errors a user can fix print one `error:` line and exit 2."""
    out = subprocess.run(_user_error_command(tmp_path, overrides), capture_output=True, text=True)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 2 and len(errors) == 1 and said in errors[0], out.stderr[-2000:]
    assert "Traceback" not in out.stderr


def test_hydra_full_error_brings_the_traceback_back(tmp_path):
    """HYDRA_FULL_ERROR=1 (Hydra's own switch) shows the traceback that the one `error:` line hides. One
    case stands for all: every entry point reports user errors through the same rankrl.cli wrapper, and the
    cheapest of them (a missing data folder) stops before torch loads."""
    cmd = _user_error_command(tmp_path, ["experiment=rankr1/bm25", "paths.data_dir=/nowhere/data"])
    full = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HYDRA_FULL_ERROR": "1"})
    assert full.returncode != 0 and "Traceback" in full.stderr and "make data" in full.stderr


def test_entry_points_import_without_torch():
    """`--help` and `--cfg job` answer in about half a second because the entry points load torch,
    transformers and peft only when a run starts (a fresh interpreter: other tests' imports do not count)."""
    code = (
        "import sys, rankrl.train, rankrl.evaluate, rankrl.pipeline, rankrl.report.__main__\n"
        "heavy = [m for m in ('torch', 'transformers', 'peft', 'vllm') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
