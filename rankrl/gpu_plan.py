"""GPU plan: the memory per GPU and the GPU-hours of every paper-scale run a paper's script makes, from the
config each run composes and the token counts its smoke run measured; and, where a run does not fit the GPU,
which setting to turn and to what.

    python -m rankrl.gpu_plan <paper>                     # writes experiments/<paper>/gpu_plan.md
    python -m rankrl.gpu_plan <paper> --gpus 8 --gpu h200-141gb

**Why it lives here.** It is a planner: it reads what a run *will* ask of a GPU before any run exists, from
the same composed config the entry points run and the same launch commands the paper script prints. It
reports no result (``rankrl.report`` builds tables from finished runs), and it is no part of training. So it
sits at the top of the package, beside the tools it works with: ``rankrl.pipeline`` (whose stage commands it
composes) and ``rankrl.gpu_check`` (which checks on a GPU what this module estimates).

**Which runs.** ``experiments/<paper>/reproduce.sh`` is the one list of a paper's rows; its dry run
(``DRY_RUN=1 PROFILE=paper``, what ``make -n reproduce-<paper> PROFILE=paper`` prints) names every command.
Each printed command is read as its entry point (the ``rankrl.<entry>`` after ``-m``) and its arguments, and
the arguments are parsed by Hydra's own override parser: a multirun is expanded into its jobs by Hydra's
sweeper (``BasicSweeper.split_arguments``), ``hydra.*`` and ``experiment_name`` name where a run writes and
are left out, and a value the dry run cannot know yet, written ``<...>`` (a number an earlier row measures),
is left to the experiment's default. A ``rankrl.pipeline`` command is expanded into its stages by the pipeline
itself (``rankrl.pipeline.plan`` and ``stage_command``: each stage's command as the pipeline would launch it,
``train_role`` and ``init_from`` included). Every command is then composed by Hydra's compose API for its
entry point (``conf/train.yaml`` or ``conf/evaluate.yaml``), and everything below is read from that config:
nothing is re-derived from the printed text.

**Time** (unchanged by the memory model below). Per training stage of S steps on N GPUs, B prompts x G
completions per step, C completion tokens at most, L prompt tokens (the smoke run's ``prompt_length/mean``),
P the model's parameters (counted from its architecture in ``rankrl.models.PAPER_CONFIGS``):

    update tokens   T = B L + B G C                 each prompt once per group (trainer.shared_prefix)
    update FLOPs    k P T   k = 6 full fine-tuning, 4 LoRA (no weight gradients), + 2 for a KL reference
    generation      2 P B (L + G C) FLOPs, and C decode steps that each read the weights: C x 2P bytes / HBM
                    bandwidth (decoding is memory-bound)
    hours           S x [(update + generation FLOPs) / (N peak MFU) + C 2P / BW] / 3600;  GPU-hours = N hours

Evaluations are sized from the smoke run of the same row, whose ``cost`` records what it asked of the LLM for
its first few queries and the size of the split: scale s = queries_total / queries; prompts n = s x
llm_prompts; hours = 2P (s x prompt_tokens + n C) / (peak MFU) + R C 2P / BW, R the smoke's sequential
generate calls (not scaled: all queries advance together); GPU-hours = hours x the GPUs the run holds.

**Memory per GPU** (bytes; N GPUs, shards n = N under ``trainer.strategy=fsdp``, else 1; A the LoRA adapter's
parameters, r x (in + out) per adapted matrix; h, q, kv, I, V, layers the architecture's hidden size, query
and key-value widths, MLP width, vocabulary and depth):

    trainer (rankrl.precision, commit bdb5195: a fully fine-tuned bf16 policy holds float32 masters)
      weights       full: 4P / n (float32 masters); LoRA: 2P (bf16 base) + 4A (float32 adapter)
      gradients     float32, of what trains: 4P / n, or 4A; x2 under DDP on N > 1 (its gradient buckets are a
                    second copy: torch's DistributedDataParallel default, gradient_as_bucket_view=False)
      AdamW         two float32 moments: 8P / n, or 8A
      reference     2P / n, a bf16 copy, for the KL term of a full fine-tuning (LoRA's: the adapter off)
      frozen roles  2P each, in bf16 (the roles a stage does not train; on the host under FSDP, N > 1)
      activations   the update's largest micro-batch of m rows (trainer.micro_batch_size), no gradient
                    checkpointing (trainer.shared_prefix needs it off): tokens t = p L + m C, p the most
                    prompts a micro-batch holds (each once: shared prefix; 1 where m divides G); per token
                    and layer 16h + 4q + 4kv + 8I bytes (the norms' float32 input and bf16 output
                    2 x (4h + 2h), the linears' bf16 inputs 2 x 2h, attention's q, k, v and output
                    4q + 4kv, the MLP's gate, SiLU, up and product 4 x 2I); plus 10V bytes per completion
                    token for the logits (bf16, their float32 copy, the float32 log-softmax) and the
                    prompt's keys and values copied to each row, m L x KV per token. An estimate of what
                    autograd keeps; the first GPU run's torch.cuda.max_memory_allocated measures it
      FSDP gathers  under FSDP, the bf16 gather of the root unit (embeddings and an untied head, V h each)
                    and of two decoder layers (the one computing and the one prefetched)
      CUDA context  1 GiB per process (the CUDA context, cuBLAS and NCCL buffers: an allowance, the order
                    vLLM's memory_profiling docstring gives for non-torch memory)

    vLLM, one colocated engine per role (rankrl.rollout.vllm; vLLM 0.32, requirements/gpu.txt)
      budget        rollout.gpu_memory_utilization x the GPU's memory: vLLM's requested_memory, which its
                    worker checks is free when the engine starts (vllm/v1/worker/utils.py request_memory),
                    whatever kv_cache_gib says
      weights       2P (the engine's dtype, the model's compute dtype)
      profile peak  the dummy forward and sampler run at start (gpu_model_runner.profile_run), kept as
                    headroom for generation: max(2 T (3I + 4h), 4 x 4 S V), T = max_num_batched_tokens and S =
                    max_num_seqs, vLLM's defaults for the LLM class (16,384 and 1,024 on a >= 70 GiB GPU other
                    than an A100, 8,192 and 256 otherwise: vllm/engine/arg_utils.py get_batch_defaults): a
                    decoder layer's gate|up output, SiLU-and-mul output and hidden buffers for T tokens, or
                    the sampler's float32 (S, V) logits, log-probs, probabilities and noise
                    (vllm/v1/sample/ops/topk_topp_sampler.py, logprobs_mode processed_logprobs)
      CUDA graphs   51 capture sizes (vLLM's default list up to 512: [1, 2, 4] + 8..248 by 8 + 256..512 by 16,
                    vllm/config/compilation.py) x 26 MiB, the per-size cost vLLM logged for piecewise graphs
                    (vllm-project/vllm#22897); none with rollout.enforce_eager=true. vLLM 0.32 measures them
                    at start (gpu_worker.determine_available_memory -> profile_cudagraph_memory) and takes
                    them from the KV cache (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, on since v0.21)
      KV cache      rollout.kv_cache_gib when set, else budget - weights - profile peak - CUDA graphs; in
                    tokens of layers x 2 x key-value heads x head size x 2 bytes. vLLM refuses to start
                    unless it holds one sequence of max_model_len
                    (kv_cache_utils.check_enough_kv_cache_memory; max_model_len null: the model's context)
      asleep        with rollout.enable_sleep_mode an engine sleeps once started and after each generation
                    or push (level 1: weights offloaded, KV cache freed); its CUDA graphs stay
                    (sleep_mode_offload_cudagraph is off by default, vllm/config/model.py). Without sleep
                    mode it holds all of the above always

    phases of a training run, each a sum of the parts it holds; the plan's memory is the largest
      start         context + weights + reference + frozen roles, and the engines as each starts (the
                    earlier ones asleep, each asleep once started), each needing its whole budget free
      rollout       start's parts + AdamW + one engine awake + the others asleep
      update        rollout's trainer parts + gradients + activations + FSDP gathers + every engine asleep

An evaluation holds the policy in bf16 (2P), its engine and the context. Memory is given in GiB of the GPU's
memory as torch.cuda reports it (an 80 GB H100 or A100 about 79.1 GiB, an H200 about 139.8 GiB), which is
also what gpu_memory_utilization is a share of.

**What to turn.** Where a run's largest phase exceeds the GPU, or vLLM could not start, the plan names the
setting and the value that make it fit, tried in this order: the engine's share where the cache cannot hold
max_model_len (``rollout.gpu_memory_utilization``, else a lower ``rollout.max_model_len``); for the update,
the largest ``trainer.micro_batch_size`` that fits, then ``trainer.strategy=fsdp`` over the run's N GPUs
(NPROC=N) for a full fine-tuning; for start and rollout, the largest ``rollout.gpu_memory_utilization`` that
fits and still holds max_model_len (a model file may set its own share: ``gpu_memory_utilization`` in
conf/model/<model>.yaml, which the rollout node reads). Where one group (L + G C tokens, the prompt's blocks
shared) does not fit the KV cache, vLLM runs its sequences in turn: slower, not wrong; the KV column names
the share that would hold one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rankrl.config import REPO_ROOT
from rankrl.errors import ConfigError

GIB = 2**30
ENTRY_POINTS = ("train", "evaluate", "pipeline")  # the entry points whose runs a plan sizes


@dataclass(frozen=True)
class GPU:
    """One GPU kind: dense bf16 peak FLOP/s and HBM bytes/s (vendor data sheets), memory in bytes as
    torch.cuda reports it, and the batch defaults vLLM picks for it (vllm/engine/arg_utils.py)."""

    peak: float
    bandwidth: float
    memory: float
    vllm_batched_tokens: int
    vllm_max_seqs: int


GPUS = {
    "h100-80gb": GPU(989e12, 3.35e12, 79.1 * GIB, 16384, 1024),
    "h200-141gb": GPU(989e12, 4.8e12, 139.8 * GIB, 16384, 1024),
    "a100-80gb": GPU(312e12, 2.0e12, 79.1 * GIB, 8192, 256),
}
MFU = 0.3  # assumed model FLOP utilisation of the update and of prefill
CUDA_CONTEXT = 1 * GIB  # per process: CUDA context, cuBLAS and NCCL buffers (an allowance; module docstring)
CUDA_GRAPH_SIZES = (
    51  # vLLM's default capture sizes up to 512: [1, 2, 4] + range(8, 256, 8) + range(256, 513, 16)
)
CUDA_GRAPH_BYTES_PER_SIZE = 26 * 2**20  # per captured size, as vLLM logged it (vllm-project/vllm#22897)
SAMPLER_COPIES = (
    4  # float32 (S, V) tensors of vLLM's dummy sampler run: logits, log-probs, probabilities, noise
)
LOGIT_BYTES = 2 + 4 + 4  # per vocabulary entry of a scored token: bf16 logits, float32 copy, log-softmax
KEY_SHAPES = {  # LoRA target -> (in, out) as functions of the architecture
    "q_proj": lambda a: (a.hidden, a.q_dim),
    "k_proj": lambda a: (a.hidden, a.kv_dim),
    "v_proj": lambda a: (a.hidden, a.kv_dim),
    "o_proj": lambda a: (a.q_dim, a.hidden),
    "gate_proj": lambda a: (a.hidden, a.intermediate),
    "up_proj": lambda a: (a.hidden, a.intermediate),
    "down_proj": lambda a: (a.intermediate, a.hidden),
}


# ---------------------------------------------------------------------------------------------------- memory


@dataclass(frozen=True)
class Arch:
    """The shape of a decoder-only model that memory depends on."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    q_dim: int  # attention heads x head size
    kv_dim: int  # key-value heads x head size
    max_len: int  # the model's own context (vLLM's max_model_len when the rollout sets none)
    tied: bool = False

    @classmethod
    def of(cls, name: str) -> Arch:
        """A paper model's shape from ``rankrl.models.PAPER_CONFIGS``; a ValueError names the known ones."""
        from rankrl.models import paper_parameters, recorded_architecture

        f = recorded_architecture(name)
        head = f.get("head_dim") or f["hidden_size"] // f["num_attention_heads"]
        return cls(
            params=paper_parameters(name),
            layers=f["num_hidden_layers"],
            hidden=f["hidden_size"],
            intermediate=f["intermediate_size"],
            vocab=f["vocab_size"],
            q_dim=f["num_attention_heads"] * head,
            kv_dim=(f.get("num_key_value_heads") or f["num_attention_heads"]) * head,
            max_len=f["max_position_embeddings"],
            tied=bool(f.get("tie_word_embeddings")),
        )

    @property
    def kv_per_token(self) -> int:
        """vLLM's bf16 KV-cache bytes per token: keys and values of every layer's key-value heads."""
        return self.layers * 2 * self.kv_dim * 2

    @property
    def activation_per_token_layer(self) -> int:
        """Bytes autograd keeps per token and decoder layer (module docstring): 16h + 4q + 4kv + 8I."""
        return 16 * self.hidden + 4 * self.q_dim + 4 * self.kv_dim + 8 * self.intermediate

    def lora_params(self, r: int, targets: list[str]) -> int:
        """Parameters of a rank-``r`` LoRA adapter on ``targets`` of every layer: r x (in + out) each."""
        unknown = sorted(set(targets) - set(KEY_SHAPES))
        if unknown:
            raise ConfigError(f"LoRA target(s) {unknown}: the plan knows {', '.join(KEY_SHAPES)}")
        return self.layers * sum(r * sum(KEY_SHAPES[t](self)) for t in targets)


@dataclass(frozen=True)
class Engine:
    """One role's colocated vLLM engine, as ``conf/rollout/vllm.yaml`` composes it."""

    arch: Arch
    utilization: float  # rollout.gpu_memory_utilization
    kv_cache_gib: float | None = None
    max_model_len: int | None = None  # None: the model's own context
    cuda_graphs: bool = True  # rollout.enforce_eager null or false on a GPU
    sleeps: bool = True  # rollout.enable_sleep_mode
    dtype_bytes: int = 2

    @property
    def max_len(self) -> int:
        return self.max_model_len or self.arch.max_len


def engine_memory(engine: Engine, gpu: str) -> dict[str, float]:
    """Bytes of one vLLM engine on ``gpu`` (the module's formula): its parts, its budget, what it holds
    awake (``footprint``) and asleep, and its KV cache in tokens."""
    g, a = GPUS[gpu], engine.arch
    weights = a.params * engine.dtype_bytes
    tokens, seqs = g.vllm_batched_tokens, min(g.vllm_max_seqs, g.vllm_batched_tokens)
    forward = 2 * tokens * (3 * a.intermediate + 4 * a.hidden)
    sampler = SAMPLER_COPIES * seqs * a.vocab * 4
    peak = max(forward, sampler)
    graphs = CUDA_GRAPH_SIZES * CUDA_GRAPH_BYTES_PER_SIZE if engine.cuda_graphs else 0
    budget = engine.utilization * g.memory
    if engine.kv_cache_gib is not None:
        kv = engine.kv_cache_gib * GIB
    else:
        kv = max(budget - weights - peak - graphs, 0.0)
    footprint = weights + peak + graphs + kv
    return {
        "weights": weights,
        "profile_peak": peak,
        "cuda_graphs": graphs,
        "kv_cache": kv,
        "budget": budget,
        "footprint": footprint,
        "asleep": graphs if engine.sleeps else footprint,
        "kv_tokens": kv / a.kv_per_token,
    }


def utilization_for_tokens(engine: Engine, gpu: str, tokens: float) -> float:
    """The share of the GPU whose KV cache holds ``tokens`` (weights, profile peak and graphs first)."""
    e = engine_memory(engine, gpu)
    return (e["weights"] + e["profile_peak"] + e["cuda_graphs"] + tokens * engine.arch.kv_per_token) / (
        GPUS[gpu].memory
    )


@dataclass(frozen=True)
class Stage:
    """One paper-scale training stage: what its composed config says and what its smoke run measured."""

    row: str
    model: str
    arch: Arch
    steps: int
    prompts: int
    group: int
    completion: int
    prompt_len: float | None
    beta: float = 0.0
    fsdp: bool = False
    sft: bool = False
    lora_params: int = 0  # 0: full fine-tuning
    compute_bytes: int = 2  # the model's dtype: bf16
    micro_batch: int = 8
    shared_prefix: bool = True
    engines: tuple[Engine, ...] = ()  # one per role, in the order the run starts them
    frozen_params: int = 0  # the parameters of the roles this stage does not train

    @property
    def params(self) -> int:
        return self.arch.params

    @property
    def lora(self) -> bool:
        return self.lora_params > 0

    @property
    def held_bytes(self) -> int:
        """Bytes per weight the trained policy holds: float32 masters of a fully fine-tuned half-precision
        model (rankrl.precision.master_dtype), its compute dtype otherwise."""
        return 4 if not self.lora and self.compute_bytes == 2 else self.compute_bytes


def activation_bytes(stage: Stage, micro_batch: int | None = None) -> float:
    """What the update's largest micro-batch keeps for its backward (module docstring)."""
    a = stage.arch
    length = stage.prompt_len or 0.0
    if stage.sft:
        rows = min(micro_batch or stage.micro_batch, stage.prompts)
        tokens, copied_prompts = rows * (length + stage.completion), 0.0
    else:
        rows = min(micro_batch or stage.micro_batch, stage.prompts * stage.group)
        prompts = prompts_per_micro_batch(rows, stage.group, stage.prompts) if stage.shared_prefix else rows
        tokens = prompts * length + rows * stage.completion
        copied_prompts = rows * length if stage.shared_prefix else 0.0
    return (
        tokens * a.layers * a.activation_per_token_layer
        + rows * stage.completion * a.vocab * LOGIT_BYTES
        + copied_prompts * a.kv_per_token
    )


def prompts_per_micro_batch(rows: int, group: int, prompts: int) -> int:
    """The most distinct prompts in one micro-batch of ``rows`` consecutive rows of a prompt-major batch of
    ``prompts`` groups of ``group`` (a micro-batch that straddles two groups computes both prompts)."""
    total = prompts * group
    return max((min(k + rows, total) - 1) // group - k // group + 1 for k in range(0, total, rows))


def trainer_memory(stage: Stage, gpus: int, micro_batch: int | None = None) -> dict[str, float]:
    """Bytes of the training process's own tensors per GPU (module docstring), part by part."""
    a = stage.arch
    shards = gpus if stage.fsdp and gpus > 1 else 1
    trainable = stage.lora_params if stage.lora else a.params / shards
    if stage.lora:
        weights = a.params * stage.compute_bytes + 4 * stage.lora_params
    else:
        weights = a.params * stage.held_bytes / shards
    root = a.vocab * a.hidden * (1 if a.tied else 2)
    layer = (a.params - root) / a.layers
    return {
        "weights": weights,
        "gradients": 4 * trainable * (2 if gpus > 1 and not stage.fsdp else 1),
        "optimizer": 8 * trainable,
        "reference": (
            a.params * stage.compute_bytes / shards
            if stage.beta > 0 and not stage.lora and not stage.sft
            else 0
        ),
        "frozen": 0 if shards > 1 else stage.frozen_params * stage.compute_bytes,
        "activations": activation_bytes(stage, micro_batch),
        "gathers": 2 * (root + 2 * layer) if shards > 1 else 0,
    }


def memory(stage: Stage, gpus: int, gpu: str, micro_batch: int | None = None) -> dict[str, Any]:
    """Bytes per GPU of each phase of ``stage`` (start, rollout, update), the largest (``peak``, ``phase``),
    and the parts they sum (``trainer``, ``engines``)."""
    t = trainer_memory(stage, gpus, micro_batch)
    engines = [engine_memory(e, gpu) for e in stage.engines]
    base = CUDA_CONTEXT + t["weights"] + t["reference"] + t["frozen"]
    held = base + t["optimizer"]
    asleep = sum(e["asleep"] for e in engines)
    # each engine starts with the earlier ones asleep (an engine sleeps once started), and needs its whole
    # budget free
    start = max(
        [
            base + sum(e["asleep"] for e in engines[:i]) + max(x["footprint"], x["budget"])
            for i, x in enumerate(engines)
        ]
        or [base]
    )
    awake = max((e["footprint"] - e["asleep"] for e in engines), default=0.0)
    phases = {
        "start": start,
        "rollout": held + asleep + awake,
        "update": held + t["gradients"] + t["activations"] + t["gathers"] + asleep,
    }
    phase = max(phases, key=phases.__getitem__)
    return {**phases, "peak": phases[phase], "phase": phase, "trainer": t, "engines": engines}


def group_tokens(stage: Stage) -> float:
    """Tokens of one GRPO group in vLLM's cache: its prompt once (shared blocks), G completions of C."""
    return (stage.prompt_len or 0.0) + stage.group * stage.completion


def _with_utilization(stage: Stage, share: float) -> Stage:
    return replace(stage, engines=tuple(replace(e, utilization=share) for e in stage.engines))


def _floor(x: float) -> float:
    return math.floor(x * 100 + 1e-9) / 100


def _ceil(x: float) -> float:
    return math.ceil(x * 100 - 1e-9) / 100


def fit(stage: Stage, gpus: int, gpu: str) -> tuple[list[str], Stage, dict[str, Any]]:
    """The settings that make ``stage`` fit ``gpu`` (empty where it fits as configured), the stage with
    them applied and its memory (module docstring, "What to turn"). Where nothing named fits, the last
    entry says so."""
    limit = GPUS[gpu].memory
    knobs: list[str] = []
    s = stage
    # 1. vLLM must hold one sequence of max_model_len, or it does not start
    for e in s.engines:
        tokens = engine_memory(e, gpu)["kv_tokens"]
        if tokens >= e.max_len:
            continue
        if e.kv_cache_gib is not None:
            need = _ceil(e.max_len * e.arch.kv_per_token / GIB)
            knobs.append(f"rollout.kv_cache_gib={need} (holds max_model_len {e.max_len:,})")
            s = replace(s, engines=tuple(replace(x, kv_cache_gib=need) for x in s.engines))
        else:
            share = _ceil(utilization_for_tokens(e, gpu, e.max_len))
            knobs.append(f"rollout.gpu_memory_utilization={share} (its KV cache then holds max_model_len)")
            s = _with_utilization(s, max(share, e.utilization))
        break
    for _ in range(3):
        mem = memory(s, gpus, gpu)
        if mem["peak"] <= limit:
            return knobs, s, mem
        if mem["phase"] == "update":
            smaller = next(
                (m for m in range(s.micro_batch - 1, 0, -1) if memory(s, gpus, gpu, m)["update"] <= limit),
                None,
            )
            if smaller is not None:
                knobs.append(f"trainer.micro_batch_size={smaller}")
                s = replace(s, micro_batch=smaller)
                continue
            if not s.lora and not s.fsdp and gpus > 1:
                knobs.append(f"trainer.strategy=fsdp (NPROC={gpus})")
                s = replace(s, fsdp=True)
                continue
            if s.micro_batch > 1:
                knobs.append("trainer.micro_batch_size=1")
                s = replace(s, micro_batch=1)
                continue
            break
        over = mem["peak"] - limit
        shares = {e.utilization for e in s.engines}
        if not shares:
            break
        share = _floor(max(shares) - over / limit)
        lowest = max(utilization_for_tokens(e, gpu, e.max_len) for e in s.engines)
        if share < lowest:
            if not s.lora and not s.fsdp and gpus > 1:
                knobs.append(f"trainer.strategy=fsdp (NPROC={gpus})")
                s = replace(s, fsdp=True)
                continue
            tokens = min(engine_memory(e, gpu)["kv_tokens"] for e in _with_utilization(s, share).engines)
            share = max(share, 0.0)
            knobs.append(
                f"rollout.gpu_memory_utilization={share} with rollout.max_model_len<={int(tokens):,}"
            )
            s = _with_utilization(s, max(share, 0.0))
            s = replace(s, engines=tuple(replace(e, max_model_len=max(int(tokens), 1)) for e in s.engines))
            continue
        knobs.append(f"rollout.gpu_memory_utilization={share}")
        s = _with_utilization(s, share)
    mem = memory(s, gpus, gpu)
    if mem["peak"] > limit:
        knobs.append(f"still {mem['peak'] / GIB:.0f} GiB in its {mem['phase']}: more GPUs or a smaller model")
    return knobs, s, mem


def estimate(stage: Stage, gpus: int, gpu: str) -> dict[str, Any]:
    """Memory per GPU (GiB, the largest phase) and GPU-hours of ``stage`` on ``gpus`` GPUs of kind ``gpu``
    (the module's formula), with the KV cache of its first engine in tokens."""
    g = GPUS[gpu]
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
        decode_s = stage.completion * 2 * p / g.bandwidth
    step_s = (k * p * tokens + gen_flops) / (gpus * g.peak * MFU) + decode_s
    mem = memory(stage, gpus, gpu)
    out: dict[str, Any] = {
        "memory_gib": mem["peak"] / GIB,
        "phase": mem["phase"],
        "memory": mem,
        "hours": stage.steps * step_s / 3600,
        "gpu_hours": stage.steps * step_s / 3600 * gpus,
    }
    if stage.engines:
        e = stage.engines[0]
        out["kv_tokens"] = mem["engines"][0]["kv_tokens"]
        out["share_needed"] = utilization_for_tokens(e, gpu, group_tokens(stage))
    return out


def kv_cell(est: dict[str, Any], needed: float) -> str:
    """The KV-cache column: tokens, and the share that would hold ``needed`` tokens where it is short (for
    an evaluation, first the share that holds ``max_model_len``, without which vLLM does not start)."""
    if "kv_tokens" not in est:
        return ""
    tokens = est["kv_tokens"]
    cell = f"{tokens / 1e3:,.0f}k" if tokens >= 1e3 else f"{tokens:.0f}"
    if tokens < est.get("max_len", 0):  # vLLM refuses to start (the module docstring)
        share = _ceil(est["share_max_len"])
        refused = f"< max_model_len {est['max_len']:,}: vLLM does not start"
        return f"{cell} ({refused}; gpu_memory_utilization {share} holds it)"
    if tokens < needed:
        share = _ceil(est["share_needed"])
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
    engine: Engine | None = None
    compute_bytes: int = 2
    stand_in: bool = False  # measured on the smoke run of a stand-in row
    group: str = ""  # the table's line: the row, without its sweep point or pipeline stage

    @property
    def longest(self) -> float:
        """Tokens of one evaluation prompt and its completion (the mean prompt; C an upper bound)."""
        return self.prompt_tokens / max(self.prompts, 1) + self.completion


def estimate_evaluation(ev: Evaluation, gpu: str) -> dict[str, float]:
    """Memory (GiB: the policy in its dtype, its engine at start, the context) and GPU-hours of one
    evaluation on ``gpu``."""
    g = GPUS[gpu]
    p = ev.params
    seconds = 2 * p * (ev.prompt_tokens + ev.prompts * ev.completion) / (g.peak * MFU)
    seconds += ev.rounds * ev.completion * 2 * p / g.bandwidth
    out = {"hours": seconds / 3600, "gpu_hours": seconds / 3600 * ev.gpus}
    held = CUDA_CONTEXT + p * ev.compute_bytes
    if ev.engine is None:
        return {**out, "memory_gib": held / GIB}
    e = engine_memory(ev.engine, gpu)
    return {
        **out,
        "memory_gib": (held + max(e["footprint"], e["budget"])) / GIB,
        "kv_tokens": e["kv_tokens"],
        "share_needed": utilization_for_tokens(ev.engine, gpu, ev.longest),
        "max_len": ev.engine.max_len,
        "share_max_len": utilization_for_tokens(ev.engine, gpu, ev.engine.max_len),
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


# ------------------------------------------------------------------------------------- commands and configs


@dataclass(frozen=True)
class Command:
    """One run a paper script starts, as Hydra reads its arguments: the entry point, the overrides of its
    first job, how many jobs its multirun makes, and what names its folder."""

    entry: str  # train, evaluate or pipeline
    overrides: tuple[str, ...]
    jobs: int = 1
    run_dir: str | None = None  # hydra.run.dir, where the script puts a sweep's point
    swept: tuple[str, ...] = ()  # the keys a multirun sweeps
    unknown: tuple[str, ...] = ()  # keys whose value the dry run cannot know (``<...>``)
    stage: str | None = None  # a pipeline's stage


def paper_commands(paper: str, entries: tuple[str, ...] = ENTRY_POINTS) -> list[Command]:
    """The runs of ``experiments/<paper>/reproduce.sh`` at PROFILE=paper (its dry run) that start one of
    ``entries``, each read by ``parse_command``."""
    env = {**os.environ, "DRY_RUN": "1", "PROFILE": "paper"}
    done = subprocess.run(
        ["bash", f"experiments/{paper}/reproduce.sh"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise ConfigError(
            f"the dry run of experiments/{paper}/reproduce.sh failed (exit {done.returncode}): "
            + (done.stderr.strip().splitlines() or ["no message"])[-1]
        )
    commands = [parse_command(printed_argv(line)) for line in done.stdout.splitlines() if line.strip()]
    return [c for c in commands if c is not None and c.entry in entries]


def printed_argv(line: str) -> list[str]:
    """The arguments of a command as the dry run prints them (experiments/lib.sh: ``echo "${cmd[*]}"``, the
    arguments joined by spaces): split at spaces, quotes kept as bash passes them on (``hydra.run.dir='...'``
    reaches Hydra quoted), a ``<...>`` placeholder of several words kept whole."""
    argv: list[str] = []
    for word in shlex.split(line, posix=False):
        if argv and "=<" in argv[-1] and not argv[-1].endswith(">"):
            argv[-1] += f" {word}"
        else:
            argv.append(word)
    return argv


def parse_command(argv: list[str]) -> Command | None:
    """A command line of a ``rankrl`` entry point (``ENTRY_POINTS``) read as Hydra reads it; None for any
    other command.

    The entry point is the ``rankrl.<entry>`` after the last ``-m`` (``python -m rankrl.train``, or
    torchrun's ``... -m rankrl.train``); what follows it are Hydra's flags and overrides. Overrides are parsed
    by Hydra's parser, a multirun expanded by Hydra's sweeper (the first job is planned, the jobs counted).
    ``hydra.*`` and ``experiment_name`` say where a run writes and are left out; a ``<...>`` value is one the
    dry run cannot know and is left to the experiment's default; anything else Hydra cannot parse is an
    error that names it."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    modules = [i + 1 for i, a in enumerate(argv[:-1]) if a == "-m" and argv[i + 1].startswith("rankrl.")]
    if not modules:
        return None
    entry = argv[modules[-1]].removeprefix("rankrl.")
    if entry not in ENTRY_POINTS:
        return None  # a data step, the report: not a run
    parser = OverridesParser.create()
    kept, unknown, run_dir = [], [], None
    for arg in argv[modules[-1] + 1 :]:
        if arg.startswith("-"):
            continue  # Hydra's flags (-m / --multirun): the sweeper counts the jobs
        key, _, value = arg.partition("=")
        if value.startswith("<") and value.endswith(">"):
            unknown.append(key)
            continue
        try:
            override = parser.parse_override(arg)
        except HydraException as err:
            raise ConfigError(
                f"an override of `{' '.join(argv)}` that Hydra cannot parse: {arg} ({err})"
            ) from err
        name = override.key_or_group
        if name == "hydra.run.dir":
            run_dir = override.value()
        if name.startswith("hydra.") or name == "experiment_name":
            continue
        kept.append(override)
    jobs = BasicSweeper.split_arguments(kept, None)[0] if kept else [[]]
    return Command(
        entry=entry,
        overrides=tuple(jobs[0]),
        jobs=len(jobs),
        run_dir=str(run_dir) if run_dir is not None else None,
        swept=tuple(o.key_or_group for o in kept if o.is_sweep_override()),
        unknown=tuple(unknown),
    )


def sweep_point(command: Command) -> str | None:
    """The benchmark of a command that runs one point of a benchmark sweep into the sweep's folder
    (``hydra.run.dir=.../sweep/benchmark=<b>``); None for a row whose run folder is its own (one experiment
    file per method, the benchmark an override)."""
    given = [o.split("=", 1)[1] for o in command.overrides if o.startswith("benchmark=")]  # the last one wins
    return given[-1] if given and command.run_dir and f"/benchmark={given[-1]}" in command.run_dir else None


class Composer:
    """Hydra's compose API for an entry point's config (``conf/<entry>.yaml``), once per command line; the
    configs are read-only and shared."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, tuple[str, ...]], Any] = {}

    def __call__(self, entry: str, overrides: tuple[str, ...]) -> Any:
        key = (entry, overrides)
        if key not in self._cache:
            from hydra import compose, initialize_config_dir
            from omegaconf import OmegaConf

            from rankrl.config import CONFIG_DIR

            with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
                cfg = compose("train" if entry == "pipeline" else entry, overrides=list(overrides))
            OmegaConf.set_readonly(cfg, True)
            self._cache[key] = cfg
        return self._cache[key]


def runs_of(command: Command, compose: Composer) -> list[tuple[Command, Any]]:
    """Each run ``command`` makes, with its composed config: itself, or a pipeline's stages as the pipeline
    launches them (``rankrl.pipeline.stage_command``: the stage's overrides, the command's, ``train_role``
    and the ``init_from`` of every role)."""
    if command.entry != "pipeline":
        return [(command, compose(command.entry, command.overrides))]
    from omegaconf import OmegaConf

    from rankrl.pipeline import expand, plan, stage_command
    from rankrl.rl.task import DEFAULT_ROLE

    cfg = compose("pipeline", command.overrides)
    roles = list(cfg.roles) if cfg.get("roles") else [DEFAULT_ROLE]
    found = []
    for stage in plan(expand(OmegaConf.to_container(cfg.pipeline, resolve=True)), roles):
        # the stage's folder does not matter here: a run's folders are left out of what is composed
        argv = stage_command(stage, Path("/pipeline"), roles, list(command.overrides), cfg.experiment_name)
        run = parse_command(argv)
        assert run is not None  # stage_command starts rankrl.train or rankrl.evaluate
        run = replace(run, jobs=command.jobs, swept=command.swept, unknown=command.unknown, stage=stage.name)
        found.append((run, compose(run.entry, run.overrides)))
    return found


def role_models(cfg: Any) -> list[tuple[str, Any]]:
    """(role, model node) of every role a run builds, in the order it builds them (rankrl.app.role_specs)."""
    from rankrl.rl.task import DEFAULT_ROLE

    roles = cfg.get("roles") or {}
    if not roles:
        return [(DEFAULT_ROLE, cfg.model)]
    return [(name, node.get("model") or cfg.model) for name, node in roles.items()]


def dtype_bytes(dtype: str) -> int:
    return 4 if str(dtype).removeprefix("torch.") in ("float32", "float") else 2


def engine_of(cfg: Any, model: Any) -> Engine | None:
    """The vLLM engine a run builds for a role of ``model`` (None where it rolls out through transformers:
    the policy generates itself)."""
    rollout = cfg.rollout
    if rollout.get("name") != "vllm":
        return None
    kv = rollout.get("kv_cache_gib")
    return Engine(
        arch=Arch.of(model.name),
        utilization=float(rollout.gpu_memory_utilization),
        kv_cache_gib=float(kv) if kv is not None else None,
        max_model_len=rollout.get("max_model_len"),
        cuda_graphs=not rollout.get("enforce_eager"),
        sleeps=bool(rollout.get("enable_sleep_mode", True)),
        dtype_bytes=dtype_bytes(model.dtype),
    )


def stage_of(cfg: Any, row: str, prompt_len: float | None) -> Stage:
    """The training stage a composed train config describes (``prompt_len`` from its smoke run)."""
    models = dict(role_models(cfg))
    trained = models[cfg.train_role]
    arch = Arch.of(trained.name)
    trainer = cfg.trainer
    sft = str(trainer._target_).endswith("SFTStep")
    lora = trained.get("lora")
    return Stage(
        row=row,
        model=trained.name,
        arch=arch,
        steps=-1 if sft and trainer.get("epochs") else int(trainer.max_steps),
        prompts=int(trainer.examples_per_step if sft else trainer.prompts_per_step),
        group=int(trainer.group_size),
        completion=int(trainer.sampling.max_new_tokens),
        prompt_len=prompt_len,
        beta=float(trainer.beta),
        fsdp=trainer.strategy == "fsdp",
        sft=sft,
        lora_params=arch.lora_params(int(lora.r), list(lora.target_modules)) if lora else 0,
        compute_bytes=dtype_bytes(trained.dtype),
        micro_batch=int(trainer.micro_batch_size),
        shared_prefix=bool(trainer.get("shared_prefix", True)),
        engines=tuple(e for e in (engine_of(cfg, m) for _, m in role_models(cfg)) if e is not None),
        frozen_params=sum(Arch.of(m.name).params for r, m in role_models(cfg) if r != cfg.train_role),
    )


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
    wanted = re.compile(re.sub(r"_r\d+$", lambda _: r"_r\d+", stage) + "$") if stage else None
    for name in [experiment, stand_in]:
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


# ------------------------------------------------------------------------------------------------ the rows


@dataclass
class Row:
    """One training or pipeline command of the paper's script: its stages and how many runs it makes."""

    experiment: str
    model: str
    runs: int
    stages: list[Stage] = field(default_factory=list)
    stand_in: bool = False
    missing: str = ""  # why it is not estimated


def _label(command: Command, experiment: str) -> str:
    point = sweep_point(command)
    if point:
        return f"{experiment} ({point})"
    return f"{experiment} (sweep over {', '.join(command.swept)})" if command.swept else experiment


def rows(paper: str, smoke_runs: Path, compose: Composer | None = None) -> list[Row]:
    """Every training and pipeline row of the paper's script, each training stage sized from its config."""
    compose = compose or Composer()
    stand_ins = smoke_stand_ins(paper)["stand_ins"]
    found: list[Row] = []
    for command in paper_commands(paper, ("train", "pipeline")):
        runs = runs_of(command, compose)
        head = compose(command.entry, command.overrides)
        row = Row(_label(command, head.experiment_name), head.model.name, command.jobs)
        found.append(row)
        for run, cfg in runs:
            if run.entry != "train":
                continue
            try:
                for _, model in role_models(cfg):
                    Arch.of(model.name)
            except ValueError:  # an architecture rankrl.models does not record (Qwen3.5's hybrid layers)
                row.missing = "its architecture is not in rankrl.models.PAPER_CONFIGS"
                break
            length, stand_in = _smoke_prompt_len(
                smoke_runs, head.experiment_name, run.stage, sweep_point(command), stand_ins
            )
            row.stand_in = row.stand_in or stand_in
            row.stages.append(stage_of(cfg, run.stage or head.experiment_name, length))
    return found


def evaluations(
    paper: str, smoke_runs: Path, gpus: int, compose: Composer | None = None
) -> list[Evaluation | tuple[str, str, str, str]]:
    """Every LLM evaluation of the paper's PROFILE=paper rows, estimated from its smoke run: an
    ``Evaluation``, or (row, model, why not, group) where it cannot be. A sweep's points (one benchmark
    each) and a pipeline's stages keep the row's name with the point or the stage in parentheses, and share
    its ``group`` (the table sums them into one line)."""
    from hydra.utils import get_class

    compose = compose or Composer()
    node = smoke_stand_ins(paper)
    found: list[Evaluation | tuple[str, str, str, str]] = []
    for command in paper_commands(paper):
        head = compose(command.entry, command.overrides)
        point = sweep_point(command)
        folder = f"sweep/benchmark={point}" if point else "seed0"
        for run, cfg in runs_of(command, compose):
            if not getattr(get_class(cfg.task._target_), "uses_model", True):
                continue  # no LLM (BM25, raw query, most popular): nothing for a GPU to do
            group = head.experiment_name + (
                f" (sweep over {', '.join(command.swept)})" if command.swept else ""
            )
            row = group + (f" (stage {run.stage})" if run.stage else "") + (f" ({point})" if point else "")
            where = f"{folder}/{run.stage}" if run.stage else folder
            cost, stand_in = _smoke_cost(smoke_runs, head.experiment_name, where, node["stand_ins"])
            scaled = scaled_cost(cost, node["per_queries"]) if cost is not None else None
            model = dict(role_models(cfg))[cfg.train_role] if run.entry == "train" else cfg.model
            try:
                arch = Arch.of(model.name)
            except ValueError:
                found.append(
                    (row, model.name, "its architecture is not in rankrl.models.PAPER_CONFIGS", group)
                )
                continue
            if scaled is None:
                why = "no smoke run measured it" if cost is None else "its evaluation records no split size"
                found.append((row, model.name, why, group))
                continue
            found.append(
                Evaluation(
                    row=row,
                    model=model.name,
                    params=arch.params,
                    gpus=gpus if run.entry == "train" else 1,
                    runs=command.jobs,
                    queries=int(scaled["queries"]),
                    prompts=scaled["prompts"],
                    prompt_tokens=scaled["prompt_tokens"],
                    completion=int(cfg.evaluation.sampling.max_new_tokens),
                    rounds=int(scaled["rounds"]),
                    engine=engine_of(cfg, model),
                    compute_bytes=dtype_bytes(model.dtype),
                    stand_in=stand_in,
                    group=group,
                )
            )
    return found


# ----------------------------------------------------------------------------------------------- the tables


def _gib(x: float) -> str:
    return f"{x / GIB:.1f}"


def fit_cell(stage: Stage, gpus: int, gpu: str) -> str:
    """The fit column: ``yes``, or the settings that make it fit and the memory they give."""
    knobs, _, mem = fit(stage, gpus, gpu)
    if not knobs:
        return "yes"
    return "no: " + "; ".join(knobs) + f" -> {mem['peak'] / GIB:.0f} GiB"


def memory_table(found: list[Row], gpus: int, gpu: str) -> list[str]:
    """Each estimated row's largest stage, part by part (GiB per GPU)."""
    lines = [
        "",
        f"Memory per GPU of each row's largest stage, part by part (GiB; {gpus} x {gpu}, "
        f"{GPUS[gpu].memory / GIB:.1f} GiB each; the formula and its sources are in the module's docstring). "
        "Trainer: weights as held (float32 masters of a full fine-tuning, bf16 base + float32 adapter "
        "with LoRA), gradients, AdamW's moments, the KL reference and frozen roles, the activations of one "
        "micro-batch of m rows. vLLM, per engine: weights, the profiling run's peak, CUDA graphs, KV cache. "
        "Phases: start (engines starting), rollout (one engine generating), update (engines asleep).",
        "",
        "| row | model | m | weights | gradients | AdamW | reference + frozen | activations | engines | "
        "vLLM weights | profile peak | CUDA graphs | KV cache | start | rollout | update |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in found:
        known = [s for s in row.stages if s.steps != 0 and s.prompt_len is not None]
        if not known:
            continue
        stage = max(known, key=lambda s: memory(s, gpus, gpu)["peak"])
        mem = memory(stage, gpus, gpu)
        t, es = mem["trainer"], mem["engines"]
        first = es[0] if es else {}
        lines.append(
            f"| {row.experiment} | {row.model} | {stage.micro_batch} | {_gib(t['weights'])} | "
            f"{_gib(t['gradients'])} | {_gib(t['optimizer'])} | {_gib(t['reference'] + t['frozen'])} | "
            f"{_gib(t['activations'])} | {len(es)} | "
            + " | ".join(
                _gib(first.get(k, 0)) for k in ("weights", "profile_peak", "cuda_graphs", "kv_cache")
            )
            + f" | {_gib(mem['start'])} | {_gib(mem['rollout'])} | {_gib(mem['update'])} |"
        )
    return lines


def evaluation_table(
    paper: str, smoke_runs: Path, gpus: int, gpu: str, compose: Composer | None = None
) -> list[str]:
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
        "module's docstring). Memory: the policy in bf16, its vLLM engine's budget and the CUDA context. "
        "BM25 and other rows without an LLM cost no GPU time and are not listed.",
        "",
        "| evaluation | model | params | runs | GPUs held | queries | LLM prompts | prompt tokens (M) | "
        "C (max) | memory/GPU (GiB) | vLLM KV cache (tokens) | GPU-hours (all runs) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[Evaluation | tuple[str, str, str, str]]] = {}
    # a sweep's points (one per benchmark) and a pipeline's stages make one line each
    for ev in evaluations(paper, smoke_runs, gpus, compose):
        group, model = (ev[3], ev[1]) if isinstance(ev, tuple) else (ev.group, ev.model)
        groups.setdefault((group, model), []).append(ev)
    for (row, model), evs in groups.items():
        done = [e for e in evs if isinstance(e, Evaluation)]
        missing = [e for e in evs if isinstance(e, tuple)]
        names = [e[0] if isinstance(e, tuple) else e.row for e in evs]
        unit = "stages" if all(" (stage " in name for name in names) else "benchmarks or stages"
        unit = "benchmarks" if not any(" (stage " in name for name in names) else unit
        label = f"{row} ({len(evs)} {unit})" if len(evs) > 1 else names[0]
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
            f"| {label} | {model} | {first.params / 1e9:.2f}B | {first.runs} | "
            f"{'/'.join(str(n) for n in sorted({e.gpus for e in done}))} | "
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
    compose = Composer()
    limit = GPUS[gpu].memory / GIB
    lines = [
        f"GPU plan for {paper}: every training row of `make reproduce-{paper} PROFILE=paper` "
        f"(evaluations below) on {gpus} x {gpu} ({limit:.1f} GiB each), MFU {MFU} assumed. Estimates by "
        f"`python -m rankrl.gpu_plan {paper}` (the formula and its sources are in its docstring), from each "
        "row's composed config and the prompt lengths L that the smoke runs measured "
        f"(`make smoke-{paper}`); SFT stages sized in epochs are not counted (their steps depend on the data "
        "size). Memory/GPU is the largest phase of the row's stages (trainer + vLLM; the parts are in the "
        "table after this one); where a row does not fit, the fit column names the settings that make it "
        "fit and the memory they give.",
        "",
        "| row | model | params | LoRA | runs | GRPO stages x steps | B x G | L (smoke) | C (max) | "
        f"memory/GPU (GiB, phase) | fits {limit:.1f} GiB? | vLLM KV cache (tokens) | GPU-hours (all runs) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    found = rows(paper, smoke_runs, compose)
    for row in found:
        if row.missing:
            cells = f"| {row.experiment} | {row.model} | ? | | {row.runs} | | | | | | | |"
            lines.append(f"{cells} not estimated: {row.missing} |")
            continue
        grpo = [s for s in row.stages if not s.sft and s.steps > 0]
        first = row.stages[0]
        lora = "yes" if first.lora else "no"
        if not grpo or grpo[0].prompt_len is None:
            why = "no smoke run measured L" if grpo else "SFT stages only, sized in epochs"
            lines.append(
                f"| {row.experiment} | {row.model} | {first.params / 1e9:.2f}B | {lora} | {row.runs} | "
                f"{len(grpo)} | | | | | | | not estimated: {why} |"
            )
            continue
        known = [s for s in row.stages if s.steps > 0 and s.prompt_len is not None]
        est = [estimate(s, gpus, gpu) for s in known]
        worst = max(range(len(known)), key=lambda i: est[i]["memory_gib"])
        largest = max((s for s in grpo if s.prompt_len is not None), key=group_tokens)

        def distinct(values: list) -> str:  # e.g. a schedule's two stage kinds: "9/840"
            return "/".join(dict.fromkeys(map(str, values)))

        lines.append(
            f"| {row.experiment} | {row.model} | {first.params / 1e9:.2f}B | {lora} | "
            f"{row.runs} | {len(grpo)} x {distinct([s.steps for s in grpo])} | "
            f"{distinct([f'{s.prompts} x {s.group}' for s in grpo])} | "
            f"{distinct([round(s.prompt_len) for s in grpo if s.prompt_len])}"
            f"{' *' if row.stand_in else ''} | "
            f"{distinct([s.completion for s in grpo])} | "
            f"{math.ceil(est[worst]['memory_gib'])} ({est[worst]['phase']}) | "
            f"{fit_cell(known[worst], gpus, gpu)} | "
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
    lines += memory_table(found, gpus, gpu)
    lines += evaluation_table(paper, smoke_runs, gpus, gpu, compose)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rankrl.gpu_plan", description=__doc__.split("\n")[0])
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
