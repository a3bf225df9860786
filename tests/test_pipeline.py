"""Pipelines as a user runs them: stages in fixed folders, finished ones skipped, a killed stage resumed,
two roles trained in alternating rounds without touching each other's weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rankrl.pipeline import Stage, expand, plan
from rankrl.rl.checkpoint import OPTIMIZER_FILE, latest_checkpoint

SEED_DIR = Path("cpu-tiny") / "seed0"


def _pipeline(log_dir: Path, experiment: str, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rankrl.pipeline",
        f"experiment={experiment}",
        "model=tiny",
        # the transformers engine: these tests check stages, weight provenance and resume, not the engine
        # (tests/rollout/test_vllm.py and the trainer's resume tests run vLLM); every stage is a process of
        # its own, and vLLM's import and start in each one made these the suite's two slowest tests
        "rollout=hf",
        "logger=none",
        f"paths.log_dir={log_dir}",
        *overrides,
    ]


def _record(folder: Path) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def _steps(folder: Path) -> list[dict]:
    """A stage's train_log.jsonl without its timings (wall clock differs between any two runs)."""
    rows = [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "tokens_per_s"))} for r in rows]


def test_expand_and_plan_resolve_each_roles_latest_stage():
    spec = [
        {"name": "sft_q", "role": "q"},
        {"name": "sft_i", "role": "i"},
        {"repeat": 2, "stages": [{"name": "q", "role": "q"}, {"name": "i", "role": "i"}]},
        {"name": "eval", "entry": "evaluate"},
    ]
    stages = plan(expand(spec), ["q", "i"])
    assert [s.name for s in stages] == ["sft_q", "sft_i", "q_r1", "i_r1", "q_r2", "i_r2", "eval"]
    starts = {s.name: s.starts for s in stages}
    assert starts["q_r1"] == {"q": "sft_q", "i": "sft_i"}
    assert starts["i_r1"] == {"q": "q_r1", "i": "sft_i"}
    assert starts["i_r2"] == {"q": "q_r2", "i": "i_r1"}
    assert starts["eval"] == {"q": "q_r2", "i": "i_r2"}
    assert plan([Stage("x", init_from="none")], ["policy"])[0].starts == {"policy": None}


def test_bad_pipeline_specs_are_named():
    from rankrl.errors import ConfigError

    with pytest.raises(ConfigError, match="entry"):
        expand([{"name": "a", "entry": "deploy"}])
    with pytest.raises(ConfigError, match="repeat"):
        expand([{"name": "a"}, {"name": "a"}])
    with pytest.raises(ConfigError, match="role"):
        plan(expand([{"name": "a", "role": "ghost"}]), ["policy"])


def test_sft_grpo_evaluate_pipeline_skips_finished_stages_and_resumes_a_killed_one(tmp_path, model_dir):
    args = ("trainer.max_steps=8", "trainer.save_every=2")
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    out = subprocess.run(_pipeline(whole, "core/vowels_pipeline", *args), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    root = whole / "core/vowels_pipeline" / SEED_DIR
    sft, grpo, ev = (_record(root / s) for s in ("sft", "grpo", "eval"))
    assert sft["train"]["trainer"] == "sft" and grpo["train"]["trainer"] == "grpo"
    # GRPO starts from the SFT stage's final weights, evaluation from GRPO's
    assert grpo["roles"]["policy"]["init_from"] == str(root / "sft")
    assert grpo["roles"]["policy"]["weights_start"] == sft["roles"]["policy"]["weights_end"]
    assert ev["roles"]["policy"]["weights"] == grpo["roles"]["policy"]["weights_end"]
    for stage in ("sft", "grpo"):  # a finished stage keeps its final weights, not its optimizer state
        kept = list((root / stage / "checkpoints").glob("step_*"))
        assert len(kept) == 1 and (kept[0] / "policy").is_dir() and not (kept[0] / OPTIMIZER_FILE).exists()

    again = subprocess.run(_pipeline(whole, "core/vowels_pipeline", *args), capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout.count(": done") == 3, again.stdout

    # the report draws the GRPO stage's monitor series from its log (experiments/core/figures.yaml)
    figures = tmp_path / "figures"
    drawn = subprocess.run(
        [sys.executable, "-m", "rankrl.report", "paper=core", f"runs_dir={whole}", f"out_dir={figures}"],
        capture_output=True,
        text=True,
    )
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    assert (figures / "vowels_pipeline_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import pandas as pd

    drawn_points = pd.read_csv(figures / "vowels_pipeline_curves.csv")
    probe = drawn_points[
        (drawn_points.series == "monitor/vowel_share") & drawn_points.line.str.startswith("seed")
    ]
    logged = [json.loads(line) for line in (root / "grpo" / "train_log.jsonl").read_text().splitlines()]
    expected = {r["step"]: r["monitor/vowel_share"] for r in logged if "monitor/vowel_share" in r}
    assert dict(zip(probe.step, probe.value)) == pytest.approx(expected) and len(expected) == 5  # 0,2,4,6,8

    # killed inside the GRPO stage: the rerun skips SFT and continues GRPO from its checkpoint
    proc = subprocess.Popen(
        _pipeline(broken, "core/vowels_pipeline", *args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    ckpts = broken / "core/vowels_pipeline" / SEED_DIR / "grpo" / "checkpoints"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        found = latest_checkpoint(ckpts) if ckpts.exists() else None
        if found is not None and found.name >= "step_000004":
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the pipeline ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = subprocess.run(_pipeline(broken, "core/vowels_pipeline", *args), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "sft (train, role policy): done" in resumed.stdout
    assert "resumed from" in resumed.stdout + resumed.stderr
    broken_root = broken / "core/vowels_pipeline" / SEED_DIR
    # the resumed stage logged every step as the unbroken one did (the transformers engine: the trainer's
    # resume tests run vLLM's)
    unbroken = _steps(root / "grpo")
    assert _steps(broken_root / "grpo") == unbroken and sum("reward/mean" in r for r in unbroken) == 8
    assert _record(broken_root / "eval")["metrics"] == ev["metrics"]
    assert (
        _record(broken_root / "grpo")["roles"]["policy"]["weights_end"]
        == grpo["roles"]["policy"]["weights_end"]
    )


def test_two_roles_alternate_and_each_changes_only_in_its_own_rounds(tmp_path, model_dir):
    out = subprocess.run(_pipeline(tmp_path, "core/vowel_relay_rounds"), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    root = tmp_path / "core/vowel_relay_rounds" / SEED_DIR
    order = ["sft_lead", "sft_follow", "lead_r1", "follow_r1", "lead_r2", "follow_r2"]
    latest = {}  # role -> fingerprint of its newest trained weights
    for name in order:
        record = _record(root / name)
        trained = record["train_role"]
        for role, info in record["roles"].items():
            if role in latest:  # every role starts from its own newest weights
                assert info["weights_start"] == latest[role], (name, role)
            if role == trained:
                assert info["weights_end"] != info["weights_start"], (name, role)  # its round moves it
            else:
                assert info["weights_end"] == info["weights_start"], (name, role)  # frozen: untouched
        latest[trained] = record["roles"][trained]["weights_end"]
        for role, info in record["roles"].items():
            latest.setdefault(role, info["weights_end"])
    final = _record(root / "eval")
    assert {r: i["weights"] for r, i in final["roles"].items()} == latest
    assert set(final["metrics"]) == {"lead_vowel_share", "follow_vowel_share"}


def test_a_missing_predecessor_names_the_command_that_makes_it(tmp_path, model_dir):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rankrl.train",
            "model=tiny",
            "logger=none",
            "init_from=core/never_run",
            f"paths.log_dir={tmp_path}",
            f"hydra.run.dir={tmp_path / 'r'}",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "python -m rankrl.train experiment=core/never_run seed=0" in out.stderr
    assert "Traceback" not in out.stderr
