"""One GRPO step, ours against TRL's ``GRPOTrainer``, on the identical configuration.

Both sides: SmolLM2-135M-Instruct, float32, CPU; 4 prompts x G=4 completions of at most 32 new tokens from
transformers ``generate`` (temperature 1.0, top_p 1.0, no top_k); the vowels reward (``rankrl.tasks.vowels``);
group mean/std advantages (TRL ``scale_rewards="group"``); DAPO token-mean loss (TRL ``loss_type="dapo"``),
eps 0.2, beta 0 (no reference model); one update per batch in one micro-batch of 16 rows; torch AdamW
(lr 1e-5, no weight decay, constant schedule, clip 1.0; TRL would default to the fused AdamW, hence
``optim="adamw_torch"``); no gradient checkpointing, no vLLM.

Each side runs in its own worker process (same model folder, seed and torch threads) that waits for the
parent's go before each step: steps alternate ours, TRL, ours, TRL, ... and never overlap; one warm-up step
each is not counted. Time: wall clock from the step's start to the end of its optimizer step, ours around
``TrainLoop.step_once()``, TRL's from ``on_step_begin`` to ``on_step_end`` (its dataloader fetch of 16
prompt rows comes just before and is not counted). Memory: the worker's peak resident set size during the
step, ``VmHWM`` reset through /proc/self/clear_refs at the step start (model and optimizer state included).

Shapes (``--shape``): ``vowels`` (the above) and ``rankr1``: the CPU-scale Rank-R1 GRPO step, 2 training
prompts of ~365 tokens (``rankrl.benchmarks.rollouts.rankr1_task``) x G=8 completions of at most 64 tokens
(T=1.0, no stop string on either side), rewarded by the Rank-R1 reward, micro-batches of one group (8 rows).
There our side generates with vLLM's CPU engine and computes each prompt once in the update
(``trainer.shared_prefix``); a third worker, ``ours_unshared``, is our step with G copies of each prompt, so
the update's gain is measured on its own. TRL generates with transformers (its vLLM path needs CUDA).

CLI:
``python -m rankrl.benchmarks.grpo_step [--shape vowels|rankr1] [--model PATH] [--repeats N] [--out FILE]``
(``make bench``). The last line reads ``grpo step (<shape> shape): ours/trl time ratio R``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rankrl.benchmarks import argument_parser
from rankrl.tasks.vowels import VowelWordsTask, vowel_word_reward

# The target for our step time relative to TRL's on the identical configuration: the purpose-built loop
# has to be clearly faster than the general one to earn its keep, by more than run-to-run CPU noise.
GOAL_RATIO = 0.8
# the rankr1 shape's goals (issue "one prompt forward per group"): the step against TRL's, and the shared
# update against the unshared one
GOAL_RATIO_RANKR1 = 0.35
GOAL_UPDATE_RATIO = 0.4
SIDES = ("ours", "trl")
SHAPES = ("vowels", "rankr1")
PROTOCOL = "BENCH "  # prefix of the worker's protocol lines on stdout (libraries may print too)
PHASES = ("generate_s", "reward_s", "update_s")
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "WANDB_MODE": "offline",
}


@dataclass(frozen=True)
class BenchConfig:
    """What both sides run.

    Args:
        model: a model folder or a name ``rankrl.models.load_policy`` resolves (``smollm2-135m``, ``tiny``).
        prompts: B prompts per step.
        group_size: G completions per prompt (one micro-batch of B*G rows).
        max_new_tokens: completion budget.
        lr: AdamW learning rate.
        repeats: timed steps per side.
        warmup: untimed steps per side before the first timed one.
        threads: torch intra-op threads in each worker.
        seed: seeds both sides.
    """

    model: str = "smollm2-135m"
    prompts: int = 4
    group_size: int = 4
    max_new_tokens: int = 32
    lr: float = 1e-5
    repeats: int = 5
    warmup: int = 1
    threads: int = len(os.sched_getaffinity(0))
    seed: int = 0
    shape: str = "vowels"

    @classmethod
    def for_shape(cls, shape: str, **kwargs: Any) -> BenchConfig:
        """The defaults of ``shape`` (``SHAPES``), then ``kwargs``."""
        if shape not in SHAPES:
            raise ValueError(f"--shape {shape!r}; valid: {', '.join(SHAPES)}")
        defaults = (
            {"prompts": 2, "group_size": 8, "max_new_tokens": 64, "repeats": 3} if shape == "rankr1" else {}
        )
        return cls(shape=shape, **{**defaults, **kwargs})

    @property
    def micro_batch_size(self) -> int:
        """Rows per forward/backward: every row at once (vowels), one group per micro-batch (rankr1: 16 rows
        of ~430 tokens at once put three workers' activations past 24 GB, measured: the TRL worker was
        killed)."""
        return self.group_size if self.shape == "rankr1" else self.prompts * self.group_size

    @property
    def sides(self) -> tuple[str, ...]:
        return ("ours", "ours_unshared", "trl") if self.shape == "rankr1" else SIDES

    @property
    def goal_ratio(self) -> float:
        return GOAL_RATIO_RANKR1 if self.shape == "rankr1" else GOAL_RATIO

    @property
    def name(self) -> str:
        rollout = (
            "ours vLLM (CPU) + shared prefix, TRL transformers" if self.shape == "rankr1" else "rollout=hf"
        )
        return (
            f"GRPO step ({self.shape} shape): {self.prompts} prompts x G={self.group_size}, "
            f"{self.max_new_tokens} new tokens, {rollout}, T=1.0 top_p=1.0 no top_k, loss dapo + group-std "
            f"advantages, eps 0.2, beta 0, micro-batch {self.micro_batch_size}, AdamW lr {self.lr:g}, "
            f"fp32 CPU, {self.threads} threads"
        )


# ---------------------------------------------------------------- measurement (inside a worker)
def _proc_status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def _exact_rss_kib() -> int:
    """Resident size from a walk of the page tables: VmRSS comes from per-CPU counters that recent kernels
    fold in lazily, so it can miss a fresh allocation entirely."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            return int(re.search(r"^Rss:\s+(\d+) kB", f.read(), re.M).group(1))
    except (OSError, AttributeError):
        return _proc_status_kib("VmRSS")


class StepMeter:
    """Wall time and peak RSS of one step of this process."""

    def start(self) -> None:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
        self.rss_before = _exact_rss_kib() / 1024
        self.t0 = time.perf_counter()

    def stop(self) -> dict[str, float]:
        step_s = time.perf_counter() - self.t0
        # the kernel raises VmHWM lazily, so memory still held at the end of the step may not show in it:
        # the peak is at least the exact current resident size
        peak = max(_proc_status_kib("VmHWM"), _exact_rss_kib()) / 1024
        return {"step_s": step_s, "peak_rss_mib": peak, "rss_before_mib": self.rss_before}


def _return_freed_memory() -> None:
    """Hand the heap a finished step freed back to the OS (glibc ``malloc_trim``). The workers take turns;
    without this each idle one kept its last step's peak resident (7-10 GB on the rankr1 shape, measured), and
    three of them together were killed for memory on 24 GB."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to trim with
        pass


class Channel:
    """The worker's side of the protocol: block until the parent says go, report one JSON line."""

    def wait_go(self) -> None:
        _return_freed_memory()
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("bench worker: the parent went away")

    def send(self, **record: Any) -> None:
        print(PROTOCOL + json.dumps(record), flush=True)


def vowel_reward(completions: list, **_: Any) -> list[float]:
    """TRL reward function: ``rankrl.tasks.vowels.vowel_word_reward`` of each completion's text."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [vowel_word_reward(t)[0] for t in texts]


class FirstExamples:
    """A task restricted to its first ``count`` training prompts, so that every step takes all of them."""

    def __init__(self, task: Any, count: int) -> None:
        self.task, self.examples = task, task.train_examples()[:count]

    def train_examples(self) -> list:
        return self.examples

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)


def _task(cfg: BenchConfig) -> Any:
    if cfg.shape == "rankr1":
        from rankrl.benchmarks.rollouts import rankr1_task

        return FirstExamples(rankr1_task(), cfg.prompts)
    # every step takes all B prompts
    return VowelWordsTask(num_train_prompts=cfg.prompts, num_eval_prompts=16)


def _trl_reward(cfg: BenchConfig, task: Any) -> Callable[..., list[float]]:
    """TRL's reward function: the vowels reward, or the task's own scores of the rows' examples."""
    if cfg.shape != "rankr1":
        return vowel_reward
    examples = task.train_examples()

    def rank_r1_reward(completions: list, index: list[int], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return task.score([examples[i] for i in index], texts).rewards.float().tolist()

    return rank_r1_reward


# ---------------------------------------------------------------- the two sides
def run_ours(cfg: BenchConfig, run_dir: Path, channel: Channel, shared_prefix: bool = True) -> None:
    """Our training loop with the GRPO step (``rollout=hf``; vLLM on the rankr1 shape); ``step_once()`` is one
    step (nothing is saved)."""
    import torch

    from rankrl.models import load_policy
    from rankrl.rl.config import TrainerConfig
    from rankrl.rl.trainer import make_loop
    from rankrl.rollout.base import SamplingParams
    from rankrl.rollout.hf import HFEngine
    from rankrl.tracking import RunLogger

    torch.manual_seed(cfg.seed)
    policy, tok = load_policy(cfg.model, dtype="float32", device="cpu")
    config = TrainerConfig(
        max_steps=cfg.warmup + cfg.repeats,
        prompts_per_step=cfg.prompts,
        group_size=cfg.group_size,
        micro_batch_size=cfg.micro_batch_size,
        lr=cfg.lr,
        lr_scheduler="constant",
        max_grad_norm=1.0,
        advantage="grpo",
        loss_agg="dapo",
        eps_low=0.2,
        eps_high=0.2,
        beta=0.0,
        save_every=0,
        shared_prefix=shared_prefix,
        sampling=SamplingParams(max_new_tokens=cfg.max_new_tokens, temperature=1.0, top_p=1.0, top_k=0),
    )
    if cfg.shape == "rankr1":
        from rankrl.rollout.vllm import VLLMEngine

        engine = VLLMEngine(policy, tok)
    else:
        engine = HFEngine(policy, tok, batch_size=16)
    trainer = make_loop(
        policy, tok, _task(cfg), config, run_dir, RunLogger(run_dir), engine=engine, seed=cfg.seed
    )
    channel.send(event="ready", threads=torch.get_num_threads())
    meter = StepMeter()
    for _ in range(config.max_steps):
        channel.wait_go()
        meter.start()
        metrics = trainer.step_once()
        record = meter.stop()
        channel.send(
            event="step",
            **record,
            **{p: metrics[f"time/{p}"] for p in PHASES},
            completion_length=metrics["completion_length/mean"],
            reward=metrics["reward/mean"],
        )


def _timed(fn: Callable, totals: dict[str, float], key: str) -> Callable:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            totals[key] = totals.get(key, 0.0) + time.perf_counter() - t0

    return wrapper


def _trl_args(cfg: BenchConfig, out_dir: Path):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(out_dir),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        seed=cfg.seed,
        max_steps=cfg.warmup + cfg.repeats,
        per_device_train_batch_size=cfg.micro_batch_size,
        # one generation of all B*G rows per optimizer step, updated in micro-batches (steps_per_generation
        # defaults to the accumulation steps)
        gradient_accumulation_steps=cfg.prompts * cfg.group_size // cfg.micro_batch_size,
        num_generations=cfg.group_size,
        max_completion_length=cfg.max_new_tokens,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=cfg.lr,
        lr_scheduler_type="constant",
        optim="adamw_torch",
        weight_decay=0.0,
        max_grad_norm=1.0,
        loss_type="dapo",
        scale_rewards="group",
        epsilon=0.2,
        beta=0.0,
        num_iterations=1,
        dataloader_num_workers=0,
    )


def run_trl(cfg: BenchConfig, run_dir: Path, channel: Channel) -> None:
    """TRL's ``GRPOTrainer.train()``; a callback holds each step until the parent says go, then times it."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from rankrl.models import load_policy

    torch.manual_seed(cfg.seed)
    policy, tok = load_policy(cfg.model, dtype="float32", device="cpu")
    task = _task(cfg)
    prompts = [ex.messages for ex in task.train_examples()]
    task_reward = _trl_reward(cfg, task)
    totals: dict[str, float] = {}
    samples: dict[str, float] = {}

    def reward(completions: list, completion_ids: list, **kwargs: Any) -> list[float]:
        rewards = task_reward(completions, **kwargs)
        samples.update(
            completion_length=sum(map(len, completion_ids)) / len(completion_ids),
            reward=sum(rewards) / len(rewards),
        )
        return rewards

    reward.__name__ = task_reward.__name__  # TRL names its logged reward columns after the function
    meter = StepMeter()

    class Timer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):  # the optimizer exists by now
            channel.send(event="ready", threads=torch.get_num_threads())

        def on_step_begin(self, args, state, control, **kwargs):
            channel.wait_go()
            totals.clear()
            meter.start()

        def on_step_end(self, args, state, control, **kwargs):
            record = meter.stop()
            generated, scored = totals.get("generate", 0.0), totals.get("generate_and_score", 0.0)
            phases = {
                "generate_s": generated,
                "reward_s": scored - generated,
                "update_s": record["step_s"] - scored,
            }
            channel.send(event="step", **record, **phases, **samples)

    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=reward,
        args=_trl_args(cfg, run_dir),
        train_dataset=Dataset.from_dict({"prompt": prompts, "index": list(range(len(prompts)))}),
        processing_class=tok,
        callbacks=[Timer()],
    )
    trainer._generate = _timed(trainer._generate, totals, "generate")
    trainer._generate_and_score_completions = _timed(
        trainer._generate_and_score_completions, totals, "generate_and_score"
    )
    trainer.train()


def worker_main(side: str, cfg: BenchConfig) -> None:
    """Entry point of a worker process (``--worker``)."""
    import torch

    torch.set_num_threads(cfg.threads)
    with tempfile.TemporaryDirectory(prefix=f"rankrl-bench-{side}-") as tmp:
        if side == "trl":
            run_trl(cfg, Path(tmp), Channel())
        else:
            run_ours(cfg, Path(tmp), Channel(), shared_prefix=side == "ours")


# ---------------------------------------------------------------- the parent
class Worker:
    """A worker process seen from the parent: start it, run one step, read its report."""

    def __init__(self, side: str, cfg: BenchConfig) -> None:
        self.side, self.log = side, tempfile.TemporaryFile(mode="w+")  # stderr, shown if the worker fails
        cmd = [
            sys.executable,
            "-m",
            "rankrl.benchmarks.grpo_step",
            "--worker",
            side,
            "--worker-config",
            json.dumps(asdict(cfg)),
        ]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env={**os.environ, **OFFLINE_ENV},
        )

    def read(self) -> dict[str, Any]:
        """The worker's next protocol record; its other stdout lines are skipped."""
        for line in self.proc.stdout:
            if line.startswith(PROTOCOL):
                return json.loads(line[len(PROTOCOL) :])
        self.proc.wait()
        self.log.seek(0)
        killed = (
            " (SIGKILL: most likely out of memory; see dmesg)"
            if self.proc.returncode == -signal.SIGKILL
            else ""
        )
        raise RuntimeError(
            f"the {self.side} bench worker exited with code {self.proc.returncode}{killed}:\n"
            f"{self.log.read()[-3000:]}"
        )

    def step(self) -> dict[str, Any]:
        try:
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # it died between steps; read() says how
            pass
        return self.read()

    def close(self, kill: bool = False) -> None:
        """Let the worker finish (it has run all its steps), or kill it when the benchmark failed."""
        try:
            self.proc.stdin.close()
        except BrokenPipeError:  # already gone
            pass
        try:
            self.proc.wait(timeout=1 if kill else 60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def run_benchmark(cfg: BenchConfig) -> dict[str, Any]:
    """Warm-up, then ``cfg.repeats`` rounds of one step each, ours then TRL; returns the summary."""
    if cfg.repeats < 1 or cfg.warmup < 0:
        raise ValueError(f"repeats must be >= 1 and warmup >= 0, got {cfg.repeats}, {cfg.warmup}")
    load_before = os.getloadavg()[0]
    workers = {side: Worker(side, cfg) for side in cfg.sides}  # all load at once; no step has started yet
    failed = True
    try:
        threads = {side: w.read()["threads"] for side, w in workers.items()}
        steps: dict[str, list[dict]] = {side: [] for side in cfg.sides}
        for round_ in range(cfg.warmup + cfg.repeats):
            for side in cfg.sides:
                record = workers[side].step()
                record.pop("event")
                if round_ >= cfg.warmup:
                    steps[side].append(record)
        failed = False
    finally:
        for w in workers.values():
            w.close(kill=failed)
    return summarize(cfg, steps, threads, load_before)


def _side_summary(records: list[dict]) -> dict[str, Any]:
    def med(key: str) -> float:
        return statistics.median(r[key] for r in records)

    return {
        "median_step_s": med("step_s"),
        **{f"median_{p}": med(p) for p in PHASES},
        "peak_rss_mib": max(r["peak_rss_mib"] for r in records),
        "peak_growth_mib": max(r["peak_rss_mib"] - r["rss_before_mib"] for r in records),  # above step start
        "completion_length_mean": statistics.fmean(r["completion_length"] for r in records),
        "reward_mean": statistics.fmean(r["reward"] for r in records),
        "steps": records,
    }


def summarize(
    cfg: BenchConfig, steps: dict[str, list[dict]], threads: dict[str, int], load_before: float
) -> dict[str, Any]:
    """The result record: configuration, versions, machine, both sides and the ratio against the goal."""
    import torch
    import transformers
    import trl

    sides = {side: _side_summary(records) for side, records in steps.items()}
    ratio = sides["ours"]["median_step_s"] / sides["trl"]["median_step_s"]
    shared = {}
    if "ours_unshared" in sides:
        update_ratio = sides["ours"]["median_update_s"] / sides["ours_unshared"]["median_update_s"]
        shared = {
            "ours_unshared": sides["ours_unshared"],
            "update_ratio_shared_over_unshared": update_ratio,
            "update_goal": {
                "max_ratio": GOAL_UPDATE_RATIO,
                "met": update_ratio <= GOAL_UPDATE_RATIO,
                "peak_rss_not_grown": sides["ours"]["peak_rss_mib"] <= sides["ours_unshared"]["peak_rss_mib"],
            },
        }
    return {
        "configuration": cfg.name,
        "config": asdict(cfg),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
        },
        "machine": {
            "nproc": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)),
            "cpu": _cpu_model(),
            "torch_threads": threads,
            "loadavg_1min_before": load_before,
            "loadavg_1min_after": os.getloadavg()[0],
        },
        "method": {
            "time": "median wall-clock seconds per step, steps alternating ours/TRL in two worker "
            "processes, after warm-up",
            "memory": "per-step peak RSS of the worker (VmHWM after a reset via /proc/self/clear_refs "
            "at step start), max over timed steps; includes model and optimizer state",
        },
        "ours": sides["ours"],
        "trl": sides["trl"],
        **shared,
        "ratio_ours_over_trl": ratio,
        "goal": {"max_ratio": cfg.goal_ratio, "met": ratio <= cfg.goal_ratio},
    }


def _cpu_model() -> str:
    found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
    return found.group(1).strip() if found else platform.processor() or "unknown"


def format_report(result: dict[str, Any]) -> str:
    """The markdown table and the lines around it that ``main`` prints."""
    import pandas as pd

    columns = {
        "median_step_s": "s/step (median)",
        "median_generate_s": "generate s",
        "median_reward_s": "reward s",
        "median_update_s": "update s",
        "peak_rss_mib": "peak RSS MiB",
        "peak_growth_mib": "growth in step MiB",
        "completion_length_mean": "mean completion tokens",
    }
    labels = {
        "ours": "ours (rankrl)",
        "ours_unshared": "ours, prompt copied G times",
        "trl": f"TRL {result['versions']['trl']}",
    }
    rows = {
        labels[side]: {name: result[side][key] for key, name in columns.items()}
        for side in labels
        if side in result
    }
    table = pd.DataFrame.from_dict(rows, orient="index").to_markdown(floatfmt=".2f")
    goal, v, m = result["goal"], result["versions"], result["machine"]
    verdict = "met" if goal["met"] else "NOT met"
    return "\n".join(
        [
            f"# {result['configuration']}",
            f"model: {result['config']['model']}; {result['config']['repeats']} timed steps each after "
            f"{result['config']['warmup']} warm-up, alternating",
            "",
            table,
            "",
            f"ratio ours/TRL (median s/step): {result['ratio_ours_over_trl']:.3f} "
            f"-> goal <= {goal['max_ratio']}: {verdict}",
            f"torch {v['torch']}, transformers {v['transformers']}, trl {v['trl']}, python {v['python']}",
            f"machine: nproc {m['nproc']}, {m['cpu']}, torch threads {m['torch_threads']}, "
            f"load avg {m['loadavg_1min_before']:.2f} -> {m['loadavg_1min_after']:.2f}",
            f"memory: {result['method']['memory']}",
            *_update_lines(result),
            f"grpo step ({result['config']['shape']} shape): "
            f"ours/trl time ratio {result['ratio_ours_over_trl']:.3f}",
        ]
    )


def _update_lines(result: dict[str, Any]) -> list[str]:
    """The shared-prefix update against the unshared one (rankr1 shape only)."""
    if "update_goal" not in result:
        return []
    goal, ratio = result["update_goal"], result["update_ratio_shared_over_unshared"]
    line = (
        f"update, prompt once per group / G copies (median s): {ratio:.3f} "
        f"-> goal <= {goal['max_ratio']}: {'met' if goal['met'] else 'NOT met'}; peak RSS "
        f"{result['ours']['peak_rss_mib']:.0f} vs {result['ours_unshared']['peak_rss_mib']:.0f} MiB "
        f"({'not grown' if goal['peak_rss_not_grown'] else 'GROWN'})"
    )
    return [line]


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    parser = argument_parser(__spec__, __doc__)
    parser.add_argument(
        "--shape",
        default="vowels",
        choices=SHAPES,
        help="vowels: 4 prompts x G=4; rankr1: CPU-scale Rank-R1 prompts x G=8 (default: %(default)s)",
    )
    parser.add_argument(
        "--model",
        default=BenchConfig.model,
        help="model folder, or smollm2-135m / tiny (default: %(default)s)",
    )
    parser.add_argument("--repeats", type=int, help="timed steps per side (default: 5; rankr1 shape 3)")
    parser.add_argument("--warmup", type=int, help="untimed steps per side (default: 1)")
    parser.add_argument("--max-new-tokens", type=int, help="completion budget (default: 32; rankr1 shape 64)")
    parser.add_argument("--threads", type=int, default=BenchConfig.threads, help="torch threads per worker")
    parser.add_argument("--out", help="where the JSON goes (default: outputs/bench/grpo_step[_<shape>].json)")
    parser.add_argument("--worker", choices=("ours", "ours_unshared", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.worker, BenchConfig(**json.loads(args.worker_config)))
        return None
    from rankrl.models import resolve_model

    given = {"repeats": args.repeats, "warmup": args.warmup, "max_new_tokens": args.max_new_tokens}
    cfg = BenchConfig.for_shape(
        args.shape,
        model=resolve_model(args.model),
        threads=args.threads,
        **{k: v for k, v in given.items() if v is not None},
    )
    result = run_benchmark(cfg)
    out = Path(args.out or f"outputs/bench/grpo_step{'' if cfg.shape == 'vowels' else '_' + cfg.shape}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written: {out}")
    print(format_report(result))  # its last line is the ratio
    return result


if __name__ == "__main__":
    main()
