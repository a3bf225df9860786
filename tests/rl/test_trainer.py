"""The GRPO loop: it learns, it resumes exactly after kill -9, it stops cleanly on a non-finite loss."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rankrl.rl import trainer as trainer_module
from rankrl.rl.checkpoint import latest_checkpoint
from rankrl.rl.config import TrainerConfig
from rankrl.rl.trainer import GRPOTrainer, NonFiniteLossError
from rankrl.rollout.base import SamplingParams
from rankrl.rollout.hf import HFEngine
from rankrl.tasks.vowels import VowelWordsTask
from rankrl.tracking import RunLogger

FAST = SamplingParams(max_new_tokens=8, temperature=1.0, top_k=20)


def _log(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]


def _train_cmd(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, "-m", "rankrl.train", "model=tiny", "logger=none", f"hydra.run.dir={run_dir}",
            "task.num_eval_prompts=4", *overrides]


def vowels_trainer(model_dir: Path, run_dir: Path, **cfg) -> GRPOTrainer:
    """The tiny model on the vowels task, 3 steps of 2 prompts x 4 by default; ``cfg`` overrides any of it."""
    from rankrl.models import load_policy

    torch.manual_seed(0)
    policy, tok = load_policy(str(model_dir / "tiny"), dtype="float32", lora=cfg.pop("lora", None), device="cpu")
    config = TrainerConfig(**{"max_steps": 3, "prompts_per_step": 2, "group_size": 4, "micro_batch_size": 4,
                              "lr": 3e-3, "sampling": FAST, "save_every": 1, **cfg})
    return GRPOTrainer(policy, tok, HFEngine(policy, tok), VowelWordsTask(num_train_prompts=8), config,
                       run_dir, RunLogger(run_dir), seed=0)


def test_the_loop_learns_the_synthetic_task(tmp_path, model_dir):
    """Mean reward rises clearly on the vowels task with the tiny model (about 0.2 -> near 1 in 15 steps)."""
    out = subprocess.run(_train_cmd(tmp_path), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    rewards = [r["reward/mean"] for r in _log(tmp_path)]
    assert len(rewards) == 15
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.3, rewards
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["model"] == "tiny" and metrics["scale"] == "cpu" and metrics["git_commit"]
    assert set(metrics["metrics"]) == {"vowel_share"}


def test_resume_after_kill_matches_an_unbroken_run(tmp_path, model_dir):
    args = ("trainer.max_steps=8", "trainer.save_every=2")
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert subprocess.run(_train_cmd(whole, *args), capture_output=True).returncode == 0

    proc = subprocess.Popen(_train_cmd(broken, *args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        ckpt = latest_checkpoint(broken / "checkpoints")
        if ckpt is not None and ckpt.name >= "step_000004":
            break
        time.sleep(0.2)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (broken / "metrics.json").exists()

    out = subprocess.run(_train_cmd(broken, *args, "trainer.resume=true"), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed from" in out.stdout + out.stderr
    strip = lambda rows: [{k: v for k, v in r.items() if not k.startswith(("time/", "tokens_per_s"))} for r in rows]
    assert strip(_log(broken)) == strip(_log(whole))
    final = [json.loads((d / "metrics.json").read_text())["metrics"] for d in (whole, broken)]
    assert final[0] == final[1]


def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(tmp_path, model_dir, monkeypatch):
    trainer = vowels_trainer(model_dir, tmp_path, micro_batch_size=8)  # one loss call per step
    real = trainer_module.policy_loss
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] > 2 else loss), stats  # steps 1-2 fine, step 3 NaN

    monkeypatch.setattr(trainer_module, "policy_loss", poisoned)
    with pytest.raises(NonFiniteLossError, match="step 3"):
        trainer.train()
    assert latest_checkpoint(tmp_path / "checkpoints").name == "step_000002"
    assert len(_log(tmp_path)) == 2


def test_lora_kl_and_several_iterations_update_only_the_adapter(tmp_path, model_dir):
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    trainer = vowels_trainer(model_dir, tmp_path, lora=lora, beta=0.04, num_iterations=2, max_steps=1,
                             micro_batch_size=3)
    before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters()}
    metrics = trainer.train()
    changed = {n for n, p in trainer.policy.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert "kl" in metrics and metrics["kl"] >= 0.0
    # the second pass over the batch is off-policy: the ratio moves away from 1
    assert metrics["ratio/max"] >= 1.0


def test_token_advantages_hook_reaches_the_loss(tmp_path, model_dir, monkeypatch):
    trainer = vowels_trainer(model_dir, tmp_path, max_steps=1)
    seen = {}

    def hook(*, scores, rollouts, response_mask, advantage_fn, group_size, sequence_advantages):
        adv = torch.zeros_like(response_mask)
        adv[:, 0] = sequence_advantages  # only the first token of each completion is credited
        seen["adv"] = adv
        return adv

    real = trainer_module.policy_loss

    def spy(logps, old, advantages, *args, **kwargs):
        seen.setdefault("loss_advantages", []).append(advantages)
        return real(logps, old, advantages, *args, **kwargs)

    monkeypatch.setattr(trainer.task, "token_advantages", hook, raising=False)
    monkeypatch.setattr(trainer_module, "policy_loss", spy)
    trainer.train()
    got = torch.cat(seen["loss_advantages"])
    assert got.dim() == 2 and torch.equal(got, seen["adv"])
