"""The training loop with its two step types: it learns, SFT lowers the loss, both resume exactly after
kill -9, a corrupted newest checkpoint falls back to the older one, a non-finite loss stops cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from rankrl.rl import steps as steps_module
from rankrl.rl.batch import to_policy_batch, token_logprobs
from rankrl.rl.checkpoint import latest_checkpoint
from rankrl.rl.config import TrainerConfig
from rankrl.rl.steps import NonFiniteLossError
from rankrl.rl.trainer import TrainLoop, make_loop
from rankrl.rollout.base import SamplingParams
from rankrl.rollout.hf import HFEngine
from rankrl.tasks.vowels import VowelWordsTask
from rankrl.tracking import RunLogger

FAST = SamplingParams(max_new_tokens=8, temperature=1.0, top_k=20)
SFT = "rankrl.rl.steps.SFTStep"


def _log(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "train_log.jsonl").read_text().splitlines()]


def _train_cmd(run_dir: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rankrl.train",
        "model=tiny",
        "logger=none",
        f"hydra.run.dir={run_dir}",
        "task.num_eval_prompts=4",
        *overrides,
    ]


def _strip(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "tokens_per_s"))} for r in rows]


def vowels_loop(model_dir: Path, run_dir: Path, **cfg) -> TrainLoop:
    """The tiny model on the vowels task, 3 steps of 2 prompts x 4 by default; ``cfg`` overrides any of it."""
    from rankrl.models import load_policy

    torch.manual_seed(0)
    policy, tok = load_policy(
        str(model_dir / "tiny"), dtype="float32", lora=cfg.pop("lora", None), device="cpu"
    )
    config = TrainerConfig(
        **{
            "max_steps": 3,
            "prompts_per_step": 2,
            "group_size": 4,
            "micro_batch_size": 4,
            "lr": 3e-3,
            "sampling": FAST,
            "save_every": 1,
            **cfg,
        }
    )
    task = VowelWordsTask(num_train_prompts=8, num_eval_prompts=16)
    return make_loop(
        policy, tok, task, config, run_dir, RunLogger(run_dir), engine=HFEngine(policy, tok), seed=0
    )


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
    assert metrics["train"]["trainer"] == "grpo" and metrics["train"]["steps"] == 15


def test_one_grpo_step_scores_prompts_times_group_completions(tmp_path, model_dir):
    loop = vowels_loop(
        model_dir, tmp_path, prompts_per_step=3, group_size=5, micro_batch_size=15, max_steps=1
    )
    seen = []
    score = loop.step_fn.task.score
    loop.step_fn.task.score = lambda examples, completions: (
        seen.append(len(completions)) or score(examples, completions)
    )
    loop.train()
    assert seen == [15]


def test_sft_lowers_the_loss_and_teaches_the_targets(tmp_path, model_dir):
    """SFT on the vowels task's targets (vowel words only): the NLL falls and the greedy reward rises."""
    out = subprocess.run(
        _train_cmd(
            tmp_path, "trainer=sft", "trainer.max_steps=12", "trainer.lr=3e-3", "trainer.monitor_every=6"
        ),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    log = _log(tmp_path)
    losses = [r["loss"] for r in log if "loss" in r]
    assert len(losses) == 12 and losses[-1] < 0.7 * losses[0], losses
    monitor = [r["monitor/vowel_share"] for r in log if "monitor/vowel_share" in r]
    assert len(monitor) == 3 and monitor[-1] > monitor[0], monitor  # steps 0, 6, 12
    record = json.loads((tmp_path / "metrics.json").read_text())
    assert record["train"]["trainer"] == "sft"


def _kill_after(run_dir: Path, cmd: list[str], step: int) -> None:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        ckpt = latest_checkpoint(run_dir / "checkpoints")
        if ckpt is not None and ckpt.name >= f"step_{step:06d}":
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "metrics.json").exists()


@pytest.mark.parametrize(
    "kind,args,kill_at",
    [
        # vLLM's CPU engine, the default; a GRPO stage on the reference engine is killed and resumed in
        # tests/test_pipeline.py, with the same assertions
        ("grpo", ("trainer.max_steps=8", "trainer.save_every=2"), 4),
        (  # 40 examples, 16 a step: epochs end inside steps 3, 5, 8 and 10, so the resume at step 6
            # must continue the reshuffled order mid-epoch; the reference engine only serves its evaluation
            "sft",
            (
                "trainer=sft",
                "trainer.max_steps=12",
                "trainer.save_every=2",
                "trainer.examples_per_step=16",
                "trainer.micro_batch_size=8",
                "task.num_train_prompts=40",
                "rollout=hf",
            ),
            6,
        ),
    ],
)
def test_resume_after_kill_matches_an_unbroken_run(tmp_path, model_dir, kind, args, kill_at):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert subprocess.run(_train_cmd(whole, *args), capture_output=True).returncode == 0
    _kill_after(broken, _train_cmd(broken, *args), kill_at)
    out = subprocess.run(_train_cmd(broken, *args, "trainer.resume=true"), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resumed from" in out.stdout + out.stderr
    assert _strip(_log(broken)) == _strip(_log(whole))
    if kind == "grpo":  # every step, the resumed ones first of all, sampled the weights the trainer scored:
        # an engine still serving the base weights after the resume would be ~1e-1 off
        assert max(r["sampler_logprob_gap_max"] for r in _log(broken)) < 1e-3
    final = [json.loads((d / "metrics.json").read_text()) for d in (whole, broken)]
    assert final[0]["metrics"] == final[1]["metrics"]
    assert final[0]["roles"]["policy"]["weights_end"] == final[1]["roles"]["policy"]["weights_end"]


def test_corrupted_newest_checkpoint_resumes_from_the_older_one(tmp_path, model_dir):
    """Truncate the newest checkpoint's state: resume warns, goes on from the older one, ends as unbroken."""
    # the shorter run's checkpoints must stay as training left them: it is extended below
    args = (  # checkpoints, not the engine: the reference engine (a vLLM start per run made this slow)
        "trainer.max_steps=6",
        "trainer.save_every=2",
        "trainer.keep_checkpoints=3",
        "trainer.keep_checkpoints_when_done=true",
        "rollout=hf",
    )
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    assert subprocess.run(_train_cmd(whole, *args), capture_output=True).returncode == 0
    assert (
        subprocess.run(_train_cmd(broken, *args, "trainer.max_steps=4"), capture_output=True).returncode == 0
    )
    state = broken / "checkpoints" / "step_000004" / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    out = subprocess.run(_train_cmd(broken, *args, "trainer.resume=true"), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    said = out.stdout + out.stderr
    assert any("step_000004" in line and "WARNING" in line for line in said.splitlines()), said[-2000:]
    assert "step_000002" in [line for line in said.splitlines() if "resumed from" in line][0]
    assert _strip(_log(broken)) == _strip(_log(whole))
    final = [json.loads((d / "metrics.json").read_text())["metrics"] for d in (whole, broken)]
    assert final[0] == final[1]


def _refused_resume(run_dir: Path, *args: str) -> str:
    """`trainer.resume=true` in ``run_dir``, which must stop: exit 2, one ``error:`` line, no traceback."""
    out = subprocess.run(_train_cmd(run_dir, *args, "trainer.resume=true"), capture_output=True, text=True)
    assert out.returncode == 2, out.stderr[-3000:]
    error = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    return error[0]


def test_resume_over_only_damaged_checkpoints_stops_and_sets_nothing_aside(tmp_path, model_dir):
    """Every checkpoint damaged: `trainer.resume=true` ends with one line naming each and why, exit 2, and
    neither trains from step 0 nor moves the damaged checkpoints aside (a restart would hide the damage)."""
    args = ("trainer.save_every=1", "trainer.keep_checkpoints=2", "trainer.keep_checkpoints_when_done=true")
    args += ("rollout=hf",)  # checkpoints, not the engine
    first = subprocess.run(_train_cmd(tmp_path, *args, "trainer.max_steps=2"), capture_output=True)
    assert first.returncode == 0, first.stderr[-3000:]
    ckpts = sorted((tmp_path / "checkpoints").glob("step_*"))
    assert [c.name for c in ckpts] == ["step_000001", "step_000002"]
    for ckpt in ckpts:
        state = ckpt / "trainer_state.pt"
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    log_before = (tmp_path / "train_log.jsonl").read_text()
    error = _refused_resume(tmp_path, *args, "trainer.max_steps=4")
    assert "step_000001" in error and "step_000002" in error and "the manifest says" in error, error
    assert "trainer.resume=false" in error  # the way out, which keeps the damaged ones aside
    assert sorted(p.name for p in tmp_path.glob("checkpoints*")) == ["checkpoints"]  # nothing set aside
    assert sorted((tmp_path / "checkpoints").glob("step_*")) == ckpts
    assert (tmp_path / "train_log.jsonl").read_text() == log_before  # no step trained, the log untouched


def test_resuming_at_another_length_under_a_decaying_schedule_stops_with_the_way_out(tmp_path, model_dir):
    """Raising trainer.max_steps to extend a finished run equals the longer unbroken run under a constant rate
    (the corrupted-checkpoint test above extends 4 steps to 6); under a linear decay the resumed steps would
    take rates no unbroken run has, so the resume stops with one line, before any step."""
    args = ("trainer.save_every=1", "trainer.keep_checkpoints_when_done=true", "trainer.lr_scheduler=linear")
    args += ("rollout=hf",)  # checkpoints, not the engine
    first = subprocess.run(_train_cmd(tmp_path, *args, "trainer.max_steps=2"), capture_output=True)
    assert first.returncode == 0, first.stderr[-3000:]
    log_before = (tmp_path / "train_log.jsonl").read_text()
    error = _refused_resume(tmp_path, *args, "trainer.max_steps=4")
    assert "step_000002" in error and "2 optimizer steps" in error, error
    assert "trainer.lr_scheduler=linear" in error and "trainer.max_steps" in error, error
    assert (tmp_path / "train_log.jsonl").read_text() == log_before  # no step trained


def test_a_bfloat16_policy_moves_at_a_small_learning_rate(tmp_path, model_dir):
    """One SFT step at lr 1e-6 of a model that computes in bfloat16, through the training entry point. Pure
    bfloat16 weights would keep ~0 of its updates (Adam's step ~ the lr, below half the spacing of bfloat16 at
    the weights' magnitude): float32 master weights keep them all, while the forward computes in bfloat16."""
    from safetensors.torch import load_file

    args = ("model.dtype=bfloat16", "trainer=sft", "trainer.lr=1e-6", "trainer.max_steps=1", "rollout=hf")
    out = subprocess.run(_train_cmd(tmp_path, *args), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    start = load_file(str(model_dir / "tiny" / "model.safetensors"))
    trained = load_file(str(latest_checkpoint(tmp_path / "checkpoints") / "policy" / "model.safetensors"))
    layers = [name for name, w in start.items() if w.dim() == 2 and "embed" not in name]
    for name in layers:  # every matrix of the decoder layers had a gradient
        assert trained[name].dtype == torch.float32, name
        moved = (trained[name] != start[name].float()).float().mean().item()
        assert moved > 0.9, (name, moved)


def test_a_trained_bfloat16_policy_keeps_float32_weights_and_computes_in_bfloat16(model_dir):
    from rankrl.models import load_policy
    from rankrl.precision import compute_dtype
    from rankrl.rl.batch import completion_logits

    policy, tok = load_policy(str(model_dir / "tiny"), dtype="bfloat16", trainable=True)
    frozen, _ = load_policy(str(model_dir / "tiny"), dtype="bfloat16")
    lora, _ = load_policy(str(model_dir / "tiny"), dtype="bfloat16", trainable=True, lora={"r": 2})
    assert {p.dtype for p in policy.parameters()} == {torch.float32} and compute_dtype(
        policy
    ) == torch.bfloat16
    assert {p.dtype for p in frozen.parameters()} == {torch.bfloat16}  # nothing steps it
    assert {p.dtype for n, p in lora.named_parameters() if "lora_" in n} == {torch.float32}
    assert {p.dtype for n, p in lora.named_parameters() if "lora_" not in n} == {torch.bfloat16}
    engine = HFEngine(policy, tok)
    batch = to_policy_batch(engine.generate([[{"role": "user", "content": "Hi"}]], 2, FAST), tok.pad_token_id)
    assert completion_logits(policy, batch).dtype == torch.bfloat16
    assert completion_logits(policy, batch, shared_prefix=True).dtype == torch.bfloat16


def test_a_batch_padded_on_the_cpu_moves_whole_to_the_policys_device(model_dir):
    """Rollouts are padded on the CPU and a GPU policy computes on its device: every micro-batch of the
    update moves there (the GPU check, rankrl.gpu_check, runs the steps on CUDA); the meta device stands in
    for another device here."""
    from rankrl.models import load_policy
    from rankrl.rl.batch import model_device

    policy, tok = load_policy(str(model_dir / "tiny"))
    batch = to_policy_batch(HFEngine(policy, tok).generate([[{"role": "user", "content": "Hi"}]], 2, FAST), 0)
    assert batch.to(model_device(policy)) is batch  # on its device already: no copy
    moved = batch.to(model_device(policy.to("meta")))
    tensors = (moved.input_ids, moved.attention_mask, moved.response_mask, moved.sampler_logprobs)
    assert all(t.device.type == "meta" for t in tensors) and moved.prompt_len == batch.prompt_len


class OnMeta(torch.nn.Module):
    """A causal LM's forward on the meta device (logits of the right shape there): the meta device stands in
    for CUDA, since an op mixing a meta and a CPU tensor raises as one mixing CUDA and CPU does. (A
    transformers model cannot run on meta: its mask code reads values.)"""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.weight = torch.nn.Parameter(torch.zeros(1, device="meta"))

    def forward(self, input_ids, attention_mask, position_ids, logits_to_keep, **_):
        assert {t.device.type for t in (input_ids, attention_mask, position_ids)} == {"meta"}
        rows = input_ids.shape[0]
        return types.SimpleNamespace(logits=torch.zeros(rows, logits_to_keep, self.vocab, device="meta"))


def test_token_logprobs_of_a_batch_padded_on_the_cpu_compute_on_the_policys_device(model_dir):
    """The GPU check found it on an H100: the forward moved the batch to the policy's device but the gather
    read the completion tokens and the mask from the CPU batch ('index is on cpu, different from other
    tensors on cuda:0'), so an SFT or log-prob call with a batch padded on the CPU stopped."""
    from rankrl.models import load_policy

    policy, tok = load_policy(str(model_dir / "tiny"))
    batch = to_policy_batch(HFEngine(policy, tok).generate([[{"role": "user", "content": "Hi"}]], 2, FAST), 0)
    logps = token_logprobs(OnMeta(policy.config.vocab_size), batch)
    assert logps.device.type == "meta" and tuple(logps.shape) == tuple(batch.response_mask.shape)


def test_fresh_start_keeps_an_earlier_runs_checkpoints_aside(tmp_path, model_dir):
    for _ in range(2):  # checkpoint folders, not the entry point: the loop decides it
        vowels_loop(model_dir, tmp_path, max_steps=2, save_every=1).train()
    assert (tmp_path / "checkpoints.earlier-1" / "step_000002").is_dir()
    assert [r["step"] for r in _log(tmp_path)] == [1, 2]  # the log starts anew, not appended


def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(tmp_path, model_dir, monkeypatch):
    loop = vowels_loop(model_dir, tmp_path, micro_batch_size=8)  # one loss call per step
    real = steps_module.policy_loss
    calls = {"n": 0}

    def poisoned(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        calls["n"] += 1
        return (loss * float("nan") if calls["n"] > 2 else loss), stats  # steps 1-2 fine, step 3 NaN

    monkeypatch.setattr(steps_module, "policy_loss", poisoned)
    with pytest.raises(NonFiniteLossError, match="step 3"):
        loop.train()
    assert latest_checkpoint(tmp_path / "checkpoints").name == "step_000002"
    assert len(_log(tmp_path)) == 2


def test_lora_kl_and_several_iterations_update_only_the_adapter(tmp_path, model_dir):
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    loop = vowels_loop(
        model_dir, tmp_path, lora=lora, beta=0.04, num_iterations=2, max_steps=1, micro_batch_size=3
    )
    before = {n: p.detach().clone() for n, p in loop.policy.named_parameters()}
    metrics = loop.train()
    changed = {n for n, p in loop.policy.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    # the reference is the adapter-off policy: the second pass, after one update, sees the adapter move it
    assert "kl" in metrics and metrics["kl"] > 0.0
    # ratio/max is the mean over the two passes: the first is on-policy (exactly 1), so a mean above 1
    # means the second pass, after one update, saw the policy move
    assert metrics["ratio/max"] > 1.0


def test_monitor_runs_on_its_cadence(tmp_path, model_dir):
    calls = []
    loop = vowels_loop(model_dir, tmp_path, max_steps=4, monitor_every=2, save_every=0)
    loop.monitor = lambda step: calls.append(step) or {"probe": float(step)}
    loop.train()
    assert calls == [0, 2, 4]
    logged = {r["step"]: r["monitor/probe"] for r in _log(tmp_path) if "monitor/probe" in r}
    assert logged == {0: 0.0, 2: 2.0, 4: 4.0}


def test_sft_masks_the_prompt(model_dir):
    """Only completion tokens (the target and the end of turn) enter the SFT loss."""
    from rankrl.models import load_policy
    from rankrl.rl.steps import sft_token_ids
    from rankrl.rl.task import SFTExample

    _, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    prompt, completion = sft_token_ids(
        tok, SFTExample("x", [{"role": "user", "content": "Say hi"}], "an owl")
    )
    assert tok.decode(completion) == "an owl" + tok.eos_token
    assert "Say hi" in tok.decode(prompt) and tok.decode(prompt).rstrip().endswith("assistant")
