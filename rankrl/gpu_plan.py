"""GPU plan: the memory and GPU-hours of every paper-scale training stage, estimated from its composed config
and from the token counts its smoke run measured.

    python -m rankrl.report.gpu_plan rankr1  # prints the table, writes experiments/rankr1/gpu_plan.md
    python -m rankrl.report.gpu_plan rankr1 --gpus 8 --gpu h100-80gb

The stages are the ``rankrl.train`` and ``rankrl.pipeline`` rows that ``experiments/<paper>/reproduce.sh``
runs at ``PROFILE=paper`` (read from its ``DRY_RUN=1`` listing, so the plan cannot drift from the script).

Formula, per training stage of S steps on N GPUs (B prompts x G completions per step, C completion tokens at
most, L prompt tokens: the smoke run's ``prompt_length/mean``; P the model's parameters, counted from its
architecture in ``rankrl.models.PAPER_CONFIGS``):

    update tokens   T = B L + B G C                 each prompt once per group (trainer.shared_prefix)
    update FLOPs    k P T   k = 6 full fine-tuning, 4 LoRA (no weight gradients), + 2 for a KL reference (a
                    forward of the frozen copy, or of the policy with its LoRA adapter off)
    generation      2 P B (L + G C) FLOPs of prefill and decode, and C decode steps that each read the
                    weights once: C x 2P bytes / HBM bandwidth (decoding is memory-bound)
    hours           S x [update FLOPs / (N peak MFU) + prefill FLOPs / (N peak MFU) + C 2P / BW] / 3600
    GPU-hours       hours x N
    memory / GPU    policy 2P (bf16) + full fine-tuning: gradients 2P, AdamW's two moments 4P and, with a
                    KL term, the reference 2P, divided by N under FSDP (trainer.strategy=fsdp) + vLLM's copy
                    2P + its KV cache
                    (rollout.gpu_memory_utilization x GPU memory - 2P); activations are not included

vLLM's KV cache: its share of the GPU less its own bf16 copy of the weights, in tokens of the model's
``rankrl.models.kv_bytes_per_token`` (layers x key-value heads x head size x 2 x 2 bytes). A GRPO step keeps a
group in flight, L + G C tokens (the prompt once, its blocks shared); where the cache holds less, the table
names the ``rollout.gpu_memory_utilization`` that would hold it: (2P + (L + G C) x KV per token) / memory.

Evaluations (every ``rankrl.evaluate`` row, and the final evaluation of every training run or stage), from
the smoke run of the same row, whose evaluation's ``cost`` says what it asked of the LLM for its first few
queries (``eval_limit``) and how many the whole split has:

    scale           s = queries_total / queries          (the smoke evaluates the first few queries)
    prompts         n = s x llm_prompts                  (Setwise comparisons, rewrites, answers)
    tokens          s x prompt_tokens + n x C             C: the evaluation's max new tokens, an upper bound
    hours           2 P tokens / (peak MFU) + R x C x 2P / BW      R: the smoke's sequential generate calls
                    (heap-sort rounds, chunks), not scaled: all queries advance together
    GPU-hours       hours x the GPUs the run holds (1 for an evaluation row, N for a training run's own)

Where the smoke evaluates a data set of its own in place of the paper's (GRAPE's ten photographs), its
queries_total is not the benchmark's: the ``gpu_plan:`` node's ``per_queries: N`` then sizes every evaluation
for N queries (s = N / queries), to multiply by the split's size. A row the smoke did not run reads the smoke
run of its stand-in (``smoke_stand_ins``) or of another point of its benchmark sweep, and is marked.

C is an upper bound (completions stop at their stop string), and L is counted with the smoke model's
tokenizer (SmolLM2's; Qwen's may differ by ~15%). These are estimates to size a job, not measurements:
``experiments/engine/gpu_speed.sh`` measures a GPU's real tokens/s and step time (after ``make gpu-check``).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rankrl.config import REPO_ROOT

GPUS = {  # dense bf16 peak FLOP/s, HBM bytes/s, memory bytes (vendor data sheets)
    "h100-80gb": (989e12, 3.35e12, 80 * 2**30),
    "h200-141gb": (989e12, 4.8e12, 141 * 2**30),
    "a100-80gb": (312e12, 2.0e12, 80 * 2**30),
}
MFU = 0.3  # assumed model FLOP utilisation of the update and of prefill


@dataclass(frozen=True)
class Stage:
    """One paper-scale training stage: what its config says and what its smoke run measured."""

    row: str
    model: str
    params: int
    lora: bool
    steps: int
    prompts: int
    group: int
    completion: int
    prompt_len: float | None
    beta: float
    fsdp: bool
    vllm_share: float
    sft: bool = False
    kv_per_token: int = 0  # vLLM's KV-cache bytes per token (rankrl.models.kv_bytes_per_token)


def estimate(stage: Stage, gpus: int, gpu: str) -> dict[str, float]:
    """Memory per GPU (GiB) and GPU-hours of ``stage`` on ``gpus`` GPUs of kind ``gpu`` (the module's
    formula)."""
    peak, bandwidth, memory = GPUS[gpu]
    p, length = stage.params, stage.prompt_len or 0.0
    if stage.sft:  # supervised pairs: one forward/backward over prompt + target, no generation
        tokens, k, gen_flops, decode_s = (
            stage.prompts * (length + stage.completion),
            (4 if stage.lora else 6),
            0.0,
            0.0,
        )
    else:
        tokens = stage.prompts * length + stage.prompts * stage.group * stage.completion
        # the KL reference is one more forward per token: a frozen copy, or the policy with its adapter off
        k = (4 if stage.lora else 6) + (2 if stage.beta > 0 else 0)
        gen_flops = 2 * p * stage.prompts * (length + stage.group * stage.completion)
        decode_s = stage.completion * 2 * p / bandwidth
    step_s = (k * p * tokens + gen_flops) / (gpus * peak * MFU) + decode_s
    train_bytes = 2 * p if stage.lora else (2 + 2 + 4) * p  # weights (+ gradients + AdamW's two moments)
    if stage.beta > 0 and not stage.lora and not stage.sft:
        train_bytes += 2 * p  # the frozen reference copy (LoRA's reference is the policy, adapter off)
    if stage.fsdp and not stage.lora:
        train_bytes /= gpus
    vllm_bytes = max(stage.vllm_share * memory, 2 * p) if not stage.sft else 0.0
    return {
        "memory_gib": (train_bytes + vllm_bytes) / 2**30,
        "hours": stage.steps * step_s / 3600,
        "gpu_hours": stage.steps * step_s / 3600 * gpus,
        **(
            {}
            if stage.sft
            else kv_cache(stage.vllm_share, memory, p, stage.kv_per_token, group_tokens(stage))
        ),
    }


def group_tokens(stage: Stage) -> float:
    """Tokens of one GRPO group in vLLM's cache: its prompt once (shared blocks), G completions of C."""
    return (stage.prompt_len or 0.0) + stage.group * stage.completion


def kv_cache(share: float, memory: float, params: int, per_token: int, needed: float) -> dict[str, float]:
    """vLLM's KV cache in tokens (its share less its bf16 weights), and the share that would hold
    ``needed`` tokens; nothing where the KV size per token is unknown."""
    if per_token <= 0:
        return {}
    return {
        "kv_tokens": max(share * memory - 2 * params, 0) / per_token,
        "share_needed": (2 * params + needed * per_token) / memory,
    }


def kv_cell(est: dict[str, float], needed: float) -> str:
    """The KV-cache column: tokens, and the share that would hold ``needed`` tokens where it is short."""
    if "kv_tokens" not in est:
        return ""
    tokens = est["kv_tokens"]
    cell = f"{tokens / 1e3:,.0f}k" if tokens >= 1e3 else f"{tokens:.0f}"
    if tokens < needed:
        share = math.ceil(est["share_needed"] * 100) / 100
        cell += f" (< {needed / 1e3:,.1f}k: gpu_memory_utilization {share}"
        cell += " would hold it)" if est["share_needed"] <= 1 else ", more than the GPU)"
    return cell


@dataclass(frozen=True)
class Evaluation:
    """One paper-scale evaluation: what its smoke run asked of the LLM, scaled to the whole split."""

    row: str
    model: str
    params: int
    gpus: int  # GPUs held while it runs: 1 for an evaluation row, all of a training run's for its own
    runs: int
    queries: int  # the whole split
    prompts: float
    prompt_tokens: float
    completion: int  # C: the evaluation's max new tokens
    rounds: int  # sequential generate calls
    vllm_share: float
    kv_per_token: int = 0
    stand_in: bool = False  # measured on the smoke run of a stand-in row

    @property
    def longest(self) -> float:
        """Tokens of one evaluation prompt and its completion (the mean prompt; C an upper bound)."""
        return self.prompt_tokens / max(self.prompts, 1) + self.completion


def estimate_evaluation(ev: Evaluation, gpu: str) -> dict[str, float]:
    """Memory (GiB: vLLM's share, at least the weights) and GPU-hours of one evaluation on ``gpu``."""
    peak, bandwidth, memory = GPUS[gpu]
    p = ev.params
    seconds = 2 * p * (ev.prompt_tokens + ev.prompts * ev.completion) / (peak * MFU)
    seconds += ev.rounds * ev.completion * 2 * p / bandwidth
    return {
        "memory_gib": max(ev.vllm_share * memory, 2 * p) / 2**30,
        "hours": seconds / 3600,
        "gpu_hours": seconds / 3600 * ev.gpus,
        **kv_cache(ev.vllm_share, memory, p, ev.kv_per_token, ev.longest),
    }


def scaled_cost(cost: dict[str, Any], per_queries: int | None = None) -> dict[str, float] | None:
    """A smoke evaluation's LLM cost scaled to its whole split, or to ``per_queries`` queries where the
    smoke's data is not the benchmark's (the module's formula); None where the run recorded no split size
    (an evaluation without an LLM, or a task that does not report one)."""
    if not cost or not cost.get("queries") or "queries_total" not in cost or "llm_prompts" not in cost:
        return None
    queries = per_queries or cost["queries_total"]
    scale = queries / cost["queries"]
    return {
        "queries": float(queries),
        "prompts": scale * cost["llm_prompts"],
        "prompt_tokens": scale * cost.get("prompt_tokens", 0),
        "rounds": float(cost.get("generate_calls") or 1),
    }


# ---------------------------------------------------------------------------------------------------- stages


@functools.cache
def _composed(overrides: tuple[str, ...]) -> Any:
    """The train config of ``overrides``, composed once: ``rows`` and ``evaluations`` read the same
    commands, and a schedule's rounds repeat one stage's overrides. Read-only: every caller shares it."""
    from omegaconf import OmegaConf

    from rankrl.pipeline import compose

    cfg = compose(list(overrides))
    OmegaConf.set_readonly(cfg, True)
    return cfg


def paper_commands(
    paper: str, entries: tuple[str, ...] = ("rankrl.train", "rankrl.pipeline")
) -> list[list[str]]:
    """The commands of ``experiments/<paper>/reproduce.sh`` at PROFILE=paper that start one of ``entries``
    (by default the training and pipeline rows)."""
    env = {**os.environ, "DRY_RUN": "1", "PROFILE": "paper"}
    out = subprocess.run(
        ["bash", f"experiments/{paper}/reproduce.sh"],
        cwd=REPO_ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    commands = [shlex.split(line) for line in out.splitlines() if line.strip()]
    return [c for c in commands if any(a in entries for a in c)]


def _overrides(command: list[str]) -> tuple[list[str], int]:
    """Hydra overrides of a command (multirun values counted, the first one kept) and its number of runs.

    A value the dry run cannot know, written ``<...>`` (GRAPE's compression control asks for as many words
    as the rank-reward run wrote), is left to the experiment's default: it sizes the prompt by a few words.
    """
    skipped = ("-", "hydra.", "init_from=", "roles.", "experiment_name=")  # flags, folders, run names
    args = [
        a
        for a in command
        if "=" in a and not a.startswith(skipped) and not a.partition("=")[2].startswith("<")
    ]
    runs, out = 1, []
    for arg in args:
        key, _, value = arg.partition("=")
        if "," in value and not value.startswith(("[", "{")):
            runs *= len(value.split(","))
            value = value.split(",")[0]
        out.append(f"{key}={value}")
    return out, runs


def _sweep_point(command: list[str]) -> str | None:
    """The benchmark of a command that runs one point of a benchmark sweep into the sweep's folder
    (``hydra.run.dir=.../sweep/benchmark=<b>``); None for a row whose run folder is its own, such as
    ``experiment=fgrpo/fgrpo benchmark=lastfm`` (``fgrpo/fgrpo_lastfm``)."""
    run_dir = next((a for a in command if a.startswith("hydra.run.dir=")), "")
    given = [a.split("=", 1)[1] for a in command if a.startswith("benchmark=")]  # the last one wins
    return given[-1] if given and f"/benchmark={given[-1]}" in run_dir else None


def smoke_stand_ins(paper: str) -> dict[str, Any]:
    """The paper's ``gpu_plan:`` node of ``experiments/<paper>/tables.yaml``: ``smoke_stand_ins`` maps a
    piece of a paper-scale experiment's name to the piece of the smoke run that stands in for it (a data set
    the build machines lack, a retriever whose prompts are the same), ``note`` says where a smoke's
    prompts are shorter than the paper's, and ``per_queries`` (with ``per_queries_why``) sizes evaluations
    for that many queries where the smoke's data is not the benchmark's. The table marks every row measured
    on a stand-in."""
    import yaml

    spec = yaml.safe_load((REPO_ROOT / "experiments" / paper / "tables.yaml").read_text()) or {}
    node = spec.get("gpu_plan") or {}
    return {
        "stand_ins": dict(node.get("smoke_stand_ins") or {}),
        "note": node.get("note", ""),
        "per_queries": node.get("per_queries"),
        "per_queries_why": node.get("per_queries_why", ""),
    }


def _mean_prompt_len(log: Path) -> float | None:
    values = [
        r["prompt_length/mean"]
        for r in map(json.loads, log.read_text().splitlines())
        if "prompt_length/mean" in r
    ]
    return sum(values) / len(values) if values else None


def stand_in_name(experiment: str, stand_ins: dict[str, str] | None) -> str:
    """The experiment whose smoke run stands in for ``experiment``: each declared piece replaced."""
    for a, b in (stand_ins or {}).items():
        experiment = experiment.replace(a, b)
    return experiment


def _smoke_prompt_len(
    runs_dir: Path,
    experiment: str,
    stage: str | None,
    benchmark: str | None = None,
    stand_ins: dict[str, str] | None = None,
) -> tuple[float | None, bool]:
    """Mean prompt tokens of a smoke run of ``experiment`` (any model and sweep point: they share the smoke
    tokenizer): its stage ``stage`` (a paper schedule's later rounds read the smoke's first round of the same
    stage), else any of its GRPO stages; and whether a stand-in experiment's run was used."""
    stand_in = stand_in_name(experiment, stand_ins)
    names = [experiment, stand_in]
    wanted = re.compile(re.sub(r"_r\d+$", lambda _: r"_r\d+", stage) + "$") if stage else None
    for name in names:
        logs = sorted((runs_dir / name).glob("smoke-*/**/train_log.jsonl"))
        preferred = [log for log in logs if wanted and wanted.match(log.parent.name)] or logs
        if benchmark:  # a sweep point: its own benchmark's run if the smoke ran it
            preferred = sorted(preferred, key=lambda log: f"benchmark={benchmark}" not in str(log))
        for log in preferred:
            length = _mean_prompt_len(log)
            if length is not None:
                return length, name != experiment or bool(
                    benchmark and f"benchmark={benchmark}" not in str(log)
                )
    return None, False


@dataclass
class Row:
    """One training or pipeline command of the paper's script: its stages and how many runs it makes."""

    experiment: str
    model: str
    runs: int
    stages: list[Stage]
    stand_in: bool = False


def rows(paper: str, smoke_runs: Path) -> list[Row]:
    from omegaconf import OmegaConf

    from rankrl.models import kv_bytes_per_token, paper_parameters
    from rankrl.pipeline import expand

    stand_ins = smoke_stand_ins(paper)["stand_ins"]
    found: list[Row] = []
    for command in paper_commands(paper):
        overrides, runs = _overrides(command)
        cfg = _composed(tuple(overrides))
        if "rankrl.pipeline" in command:
            plan = [
                (s.name, s.overrides)
                for s in expand(OmegaConf.to_container(cfg.pipeline, resolve=True))
                if s.entry == "train"
            ]
        else:
            plan = [(None, [])]
        swept = [b for b in [_sweep_point(command)] if b]
        axes = [
            a.split("=", 1)[0] for a in command if "," in a.partition("=")[2] and not a.startswith("hydra.")
        ]
        label = f" ({swept[0]})" if swept else f" (sweep over {', '.join(axes)})" if axes else ""
        row = Row(cfg.experiment_name + label, cfg.model.name, runs, [])
        found.append(row)
        try:
            params = paper_parameters(cfg.model.name)
        except ValueError:  # an architecture rankrl.models does not record (Qwen3.5's hybrid layers)
            continue
        for name, extra in plan:
            trainer = (_composed((*extra, *overrides)) if extra else cfg).trainer
            sft = str(trainer._target_).endswith("SFTStep")
            length, row.stand_in = _smoke_prompt_len(
                smoke_runs, cfg.experiment_name, name, swept[0] if swept else None, stand_ins
            )
            row.stages.append(
                Stage(
                    row=name or cfg.experiment_name,
                    model=cfg.model.name,
                    params=params,
                    lora=bool(cfg.model.lora),
                    steps=-1 if sft and trainer.get("epochs") else int(trainer.max_steps),
                    prompts=int(trainer.examples_per_step if sft else trainer.prompts_per_step),
                    group=int(trainer.group_size),
                    completion=int(trainer.sampling.max_new_tokens),
                    prompt_len=length,
                    beta=float(trainer.beta),
                    fsdp=trainer.strategy == "fsdp",
                    vllm_share=float(cfg.rollout.get("gpu_memory_utilization", 0.35)),
                    sft=sft,
                    kv_per_token=kv_bytes_per_token(cfg.model.name),
                )
            )
    return found


def _smoke_cost(
    smoke_runs: Path, experiment: str, where: str, stand_ins: dict[str, str] | None = None
) -> tuple[dict[str, Any] | None, bool]:
    """The evaluation cost in the smoke run's ``metrics.json`` at ``<experiment>/smoke-*/<where>``, else
    in the run of its stand-in experiment or of another point of its benchmark sweep (``where`` =
    ``sweep/benchmark=<b>[/<stage>]``); and whether such a stand-in was read."""
    stand_in = stand_in_name(experiment, stand_ins)
    other_point = re.sub(r"^sweep/benchmark=[^/]+", "sweep/benchmark=*", where)
    for name, folder in [
        (experiment, where),
        (stand_in, where),
        (experiment, other_point),
        (stand_in, other_point),
    ]:
        for metrics in sorted((smoke_runs / name).glob(f"smoke-*/{folder}/metrics.json")):
            return json.loads(metrics.read_text()).get("cost") or {}, (name, folder) != (experiment, where)
    return None, False


def evaluations(paper: str, smoke_runs: Path, gpus: int) -> list[Evaluation | tuple[str, str, str]]:
    """Every LLM evaluation of the paper's PROFILE=paper rows, estimated from its smoke run: an
    ``Evaluation``, or (row, model, why not) where it cannot be. A sweep's points (BRIGHT's tasks) keep the
    sweep's row name with the point in parentheses."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    from rankrl.models import kv_bytes_per_token, paper_parameters
    from rankrl.pipeline import expand

    entries = ("rankrl.train", "rankrl.pipeline", "rankrl.evaluate")
    node = smoke_stand_ins(paper)
    found: list[Evaluation | tuple[str, str, str]] = []
    for command in paper_commands(paper, entries):
        overrides, runs = _overrides(command)
        cfg = _composed(tuple(overrides))
        point = _sweep_point(command)
        folder = f"sweep/benchmark={point}" if point else "seed0"
        if "rankrl.pipeline" in command:
            spec = expand(OmegaConf.to_container(cfg.pipeline, resolve=True))
            stages = [(s.name, s.overrides, s.entry == "train") for s in spec]
        else:
            stages = [(None, [], "rankrl.train" in command)]
        for stage, extra, trains in stages:
            stage_cfg = _composed((*extra, *overrides)) if extra else cfg
            if not getattr(get_class(stage_cfg.task._target_), "uses_model", True):
                continue  # no LLM (BM25, raw query, most popular): nothing for a GPU to do
            row = cfg.experiment_name + (f"/{stage}" if stage else "") + (f" ({point})" if point else "")
            where = f"{folder}/{stage}" if stage else folder
            cost, stand_in = _smoke_cost(smoke_runs, cfg.experiment_name, where, node["stand_ins"])
            scaled = scaled_cost(cost, node["per_queries"]) if cost is not None else None
            try:
                params = paper_parameters(cfg.model.name)
            except ValueError:
                found.append((row, cfg.model.name, "its architecture is not in rankrl.models.PAPER_CONFIGS"))
                continue
            if scaled is None:
                why = "no smoke run measured it" if cost is None else "its evaluation records no split size"
                found.append((row, cfg.model.name, why))
                continue
            found.append(
                Evaluation(
                    row=row,
                    model=cfg.model.name,
                    params=params,
                    gpus=gpus if trains else 1,
                    runs=runs,
                    queries=int(scaled["queries"]),
                    prompts=scaled["prompts"],
                    prompt_tokens=scaled["prompt_tokens"],
                    completion=int(stage_cfg.evaluation.sampling.max_new_tokens),
                    rounds=int(scaled["rounds"]),
                    vllm_share=float(stage_cfg.rollout.get("gpu_memory_utilization", 0.35)),
                    kv_per_token=kv_bytes_per_token(cfg.model.name),
                    stand_in=stand_in,
                )
            )
    return found


def evaluation_table(paper: str, smoke_runs: Path, gpus: int, gpu: str) -> list[str]:
    spec = smoke_stand_ins(paper)
    per = spec["per_queries"]
    scaled_to = (
        f"scaled to {per:,} queries of each benchmark ({spec['per_queries_why']}: multiply by the split's "
        f"size / {per:,})"
        if per
        else "scaled to the whole split"
    )
    lines = [
        "",
        "Evaluations: every evaluation row, and each training run's own final evaluation (it holds the "
        f"run's {gpus} GPUs), on {gpu}; the LLM's work is the smoke run's (`make smoke-{paper}`, its first "
        f"few queries) {scaled_to}, every completion taken at its maximum C (formula in the "
        "module's docstring). BM25 and other rows without an LLM cost no GPU time and are not listed.",
        "",
        "| evaluation | model | params | runs | GPUs held | queries | LLM prompts | prompt tokens (M) | "
        "C (max) | memory/GPU (GiB) | vLLM KV cache (tokens) | GPU-hours (all runs) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[Evaluation | tuple[str, str, str]]] = {}
    for ev in evaluations(paper, smoke_runs, gpus):  # a sweep's points (BRIGHT's 12 tasks) make one row
        row, model = (ev[0], ev[1]) if isinstance(ev, tuple) else (ev.row, ev.model)
        groups.setdefault((row.split(" (")[0], model), []).append(ev)
    for (row, model), evs in groups.items():
        done = [e for e in evs if isinstance(e, Evaluation)]
        missing = [e for e in evs if isinstance(e, tuple)]
        label = f"{row} ({len(evs)} benchmarks)" if len(evs) > 1 else evs[0][0] if missing else done[0].row
        gap = f"not estimated: {missing[0][2]}" if missing else ""
        if not done:
            lines.append(f"| {label} | {model} | | | | | | | | | | {gap} |")
            continue
        if missing:
            gap = f" ({len(missing)} of {len(evs)} {gap})"
        est = [estimate_evaluation(e, gpu) for e in done]
        first = done[0]
        if any(e.stand_in for e in done):
            label += " *"
        lines.append(
            f"| {label} | {model} | {first.params / 1e9:.2f}B | {first.runs} | {first.gpus} | "
            f"{sum(e.queries for e in done)} | {round(sum(e.prompts for e in done)):,} | "
            f"{sum(e.prompt_tokens for e in done) / 1e6:.2f} | {first.completion} | "
            f"{math.ceil(max(x['memory_gib'] for x in est))} | "
            f"{kv_cell(est[0], max(e.longest for e in done))} | "
            f"{sum(x['gpu_hours'] for x in est) * first.runs:.2f}{gap} |"
        )
    if any(line.split(" | ")[0].endswith(" *") for line in lines):
        lines.append(
            "\n\\* measured, at least for some of its benchmarks, on the smoke run of a stand-in (another "
            "benchmark of the same sweep"
            + "".join(f", {b} for {a}" for a, b in spec["stand_ins"].items())
            + "): the smoke did not run it."
        )
    return lines


def table(paper: str, smoke_runs: Path, gpus: int, gpu: str) -> str:
    lines = [
        f"GPU plan for {paper}: every training row of `make reproduce-{paper} PROFILE=paper` "
        f"(evaluations below) on {gpus} x {gpu}, "
        f"MFU {MFU} assumed. Estimates by `python -m rankrl.report.gpu_plan {paper}` (the formula is in its "
        f"docstring), with the prompt lengths L that the smoke runs measured (`make smoke-{paper}`); SFT "
        "stages sized in epochs are not counted (their steps depend on the data size).",
        "",
        "| row | model | params | LoRA | runs | GRPO stages x steps | B x G | L (smoke) | C (max) | "
        "memory/GPU (GiB, no activations) | vLLM KV cache (tokens) | GPU-hours (all runs) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    found = rows(paper, smoke_runs)
    for row in found:
        if not row.stages:
            lines.append(
                f"| {row.experiment} | {row.model} | ? | | {row.runs} | | | | | | | not estimated: its "
                "architecture is not in rankrl.models.PAPER_CONFIGS |"
            )
            continue
        grpo = [s for s in row.stages if not s.sft and s.steps > 0]
        first = row.stages[0]
        if not grpo or grpo[0].prompt_len is None:
            why = "no smoke run measured L" if grpo else "SFT stages only, sized in epochs"
            lines.append(
                f"| {row.experiment} | {row.model} | {first.params / 1e9:.2f}B | "
                f"{'yes' if first.lora else 'no'} "
                f"| {row.runs} | {len(grpo)} | | | | | | not estimated: {why} |"
            )
            continue
        known = [s for s in row.stages if s.steps > 0 and s.prompt_len is not None]
        est = [estimate(s, gpus, gpu) for s in known]
        largest = max((s for s in grpo if s.prompt_len is not None), key=group_tokens)

        def distinct(values: list) -> str:  # e.g. CoGR's query and item stages: "9/840"
            return "/".join(dict.fromkeys(map(str, values)))

        lines.append(
            f"| {row.experiment} | {row.model} | {first.params / 1e9:.2f}B | "
            f"{'yes' if first.lora else 'no'} | "
            f"{row.runs} | {len(grpo)} x {distinct([s.steps for s in grpo])} | "
            f"{distinct([f'{s.prompts} x {s.group}' for s in grpo])} | "
            f"{distinct([round(s.prompt_len) for s in grpo if s.prompt_len])}"
            f"{' *' if row.stand_in else ''} | "
            f"{distinct([s.completion for s in grpo])} | "
            f"{math.ceil(max(e['memory_gib'] for e in est))} | "
            f"{kv_cell(estimate(largest, gpus, gpu), group_tokens(largest))} | "
            f"{sum(e['gpu_hours'] for e in est) * row.runs:.1f} |"
        )
    if any(r.stand_in for r in found):
        spec = smoke_stand_ins(paper)
        lines.append(
            "\n\\* L from the smoke run of a stand-in ("
            + ", ".join(f"{b} for {a}" for a, b in spec["stand_ins"].items())
            + ", or another benchmark of the same sweep): the smoke did not run this one."
            + (f" {spec['note']}" if spec["note"] else "")
        )
    lines += evaluation_table(paper, smoke_runs, gpus, gpu)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m rankrl.report.gpu_plan", description=__doc__.split("\n")[0]
    )
    from rankrl.report.__main__ import papers

    parser.add_argument("paper", choices=papers())
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--gpu", choices=sorted(GPUS), default="h100-80gb")
    parser.add_argument(
        "--smoke-runs",
        type=Path,
        default=REPO_ROOT / "outputs" / "smoke",
        help="the smoke runs (make smoke-<paper>) that measured the prompt lengths",
    )
    parser.add_argument("--out", type=Path, default=None, help="default: experiments/<paper>/gpu_plan.md")
    args = parser.parse_args(argv)
    text = table(args.paper, args.smoke_runs, args.gpus, args.gpu)
    out = args.out or REPO_ROOT / "experiments" / args.paper / "gpu_plan.md"
    out.write_text(text)
    print(text + f"\nwritten to {out}")


if __name__ == "__main__":
    main()
