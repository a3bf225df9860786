"""Rollouts through a vLLM engine colocated with the trainer on the same GPU(s) (paper-scale runs).

The engine lives in the training process (``distributed_executor_backend="external_launcher"``, as TRL's
colocate mode), so new weights are pushed by a direct ``load_weights`` call on the engine's model, with
no copy through another process. To leave the GPU to the update, the engine sleeps after each
``generate`` (``sleep(level=1)``: weights offloaded to CPU, KV cache freed) and wakes up when it is next
needed: ``sync_weights`` wakes the weights only, ``generate`` wakes the rest.

Log-probs follow ``rankrl.rollout.hf``'s convention: ``logprobs_mode="processed_logprobs"`` makes vLLM
report the log-prob under the temperature-scaled, top-k/top-p filtered distribution it sampled from
(its default, ``raw_logprobs``, ignores the temperature). Sampling is seeded once, by ``seed`` at
construction, not by torch's global RNG.

vLLM is imported inside the class only: nothing else in rankrl (``rankrl.rl`` least of all) imports it.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Sequence

import torch

from rankrl.distributed import full_tensor
from rankrl.rollout.base import Messages, Rollouts, SamplingParams
from rankrl.errors import EnvironmentProblem
from rankrl.rollout.hf import render_prompts

GPU_HINT = "rollout=vllm needs a CUDA GPU and `pip install -e .[gpu]`; use rollout=hf on CPU"


def check_vllm_available() -> None:
    """Raise at once, with the fix, when vLLM cannot run here."""
    if importlib.util.find_spec("vllm") is None:
        raise EnvironmentProblem(f"vllm is not installed: {GPU_HINT}")
    if not torch.cuda.is_available():
        raise EnvironmentProblem(f"no CUDA GPU is visible: {GPU_HINT}")


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The policy inside a DistributedDataParallel wrapper (the module itself otherwise)."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def _is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "merge_adapter") and hasattr(model, "peft_config")


@contextmanager
def merged_lora(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """LoRA adapters folded into the base weights for the duration of the block (vLLM serves the plain
    architecture), then unfolded so training continues on the adapter alone."""
    if not _is_peft(model):
        yield model
        return
    model.merge_adapter()
    try:
        yield model
    finally:
        model.unmerge_adapter()


def vllm_named_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs under the Hugging Face names vLLM's ``load_weights`` expects.

    A peft model's names lose the ``base_model.model.`` prefix and ``.base_layer``; adapter tensors are
    skipped (call inside ``merged_lora``, where they are already folded in). Tied weights appear once.
    """
    peft = _is_peft(model)
    prefix = getattr(model, "prefix", "lora_")
    for name, param in model.named_parameters():
        if peft:
            if prefix in name or "original_module" in name:
                continue
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            name = name.replace("modules_to_save.default.", "")
        yield name, full_tensor(param.detach())  # FSDP shards are gathered one tensor at a time


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


class VLLMEngine:
    """``RolloutEngine`` over a colocated ``vllm.LLM`` (one engine per training process).

    Args:
        model: the policy (plain, peft or DDP-wrapped); the engine loads its folder, then its live weights.
        tokenizer: the policy's tokenizer (prompts are rendered with its chat template).
        gpu_memory_utilization: share of GPU memory vLLM may take (weights + KV cache).
        tensor_parallel_size: GPUs per engine; > 1 needs a torchrun launch with a multiple of it as world
            size, and the ranks of one group sample their gathered prompts together.
        enable_sleep_mode: sleep after each ``generate`` so the update has the GPU to itself.
        max_model_len: prompt + completion budget in tokens.
        dtype: vLLM's weight dtype (``auto`` follows the model's config).
        seed: the engine's sampling seed.
        chat_template_kwargs: extra template arguments (e.g. ``{"enable_thinking": False}`` for Qwen3).
        **llm_kwargs: any other ``vllm.LLM`` argument (e.g. ``enforce_eager``, ``max_num_seqs``).
    """

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, gpu_memory_utilization: float = 0.35,
                 tensor_parallel_size: int = 1, enable_sleep_mode: bool = True, max_model_len: int | None = 4096,
                 dtype: str = "auto", seed: int = 0, chat_template_kwargs: dict | None = None,
                 **llm_kwargs: Any) -> None:
        check_vllm_available()
        from vllm import LLM

        _external_launcher_env()
        self.tokenizer, self.chat_template_kwargs = tokenizer, chat_template_kwargs
        self.enable_sleep_mode, self.tp = enable_sleep_mode, tensor_parallel_size
        self.tp_group = _tp_group(tensor_parallel_size)
        path = _model_path(model)
        self.llm = LLM(model=path, tokenizer=path, tensor_parallel_size=tensor_parallel_size,
                       gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len, dtype=dtype,
                       enable_sleep_mode=enable_sleep_mode, distributed_executor_backend="external_launcher",
                       logprobs_mode="processed_logprobs", seed=seed + _rank() // tensor_parallel_size,
                       **llm_kwargs)
        self._asleep: set[str] = set()
        self.sync_weights(model)  # the policy may already differ from its folder (a resumed checkpoint)

    # ---------------------------------------------------------------- RolloutEngine
    def generate(self, prompts: Sequence[Messages], n: int, sampling: SamplingParams) -> Rollouts:
        """Sample ``n`` completions per prompt; rows are prompt-major (row i*n+g is sample g of prompt i)."""
        from vllm import SamplingParams as VLLMSamplingParams

        start = time.perf_counter()
        self._wake(("weights", "kv_cache"))
        params = VLLMSamplingParams(
            n=n, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or -1,
            max_tokens=sampling.max_new_tokens, stop=list(sampling.stop) or None,
            include_stop_str_in_output=True, logprobs=0)
        local_ids = render_prompts(self.tokenizer, prompts, self.chat_template_kwargs)
        all_ids, share = self._gather_group(local_ids)
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in all_ids], sampling_params=params,
                                    use_tqdm=False)
        out = rollouts_from_outputs(all_ids[share], outputs[share], n)
        if self.enable_sleep_mode:
            self.llm.sleep(level=1)
            self._asleep = {"weights", "kv_cache"}
        seconds = time.perf_counter() - start
        tokens = sum(len(c) for c in out.completion_ids)
        out.stats = {"tokens": float(tokens), "seconds": seconds, "tokens_per_s": tokens / max(seconds, 1e-9)}
        return out

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Copy the policy's current weights into the engine (LoRA merged), then drop cached prefixes,
        whose KV entries were computed with the old weights."""
        self._wake(("weights",))
        runner = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        with merged_lora(unwrap(model)) as policy:
            runner.load_weights(vllm_named_weights(policy))
        self.llm.reset_prefix_cache()

    # ---------------------------------------------------------------- pieces
    def _wake(self, tags: Iterable[str]) -> None:
        tags = [t for t in tags if t in self._asleep]
        if tags:
            torch.cuda.empty_cache()  # hand the trainer's freed cache back before vLLM re-maps its memory
            self.llm.wake_up(tags=tags)
            self._asleep -= set(tags)

    def _gather_group(self, ids: list[list[int]]) -> tuple[list[list[int]], slice]:
        """With tensor parallelism every rank of a group must run the same requests: gather the group's
        prompts (rank order) and return the slice that belongs to this rank."""
        if self.tp == 1:
            return ids, slice(None)
        parts: list[Any] = [None] * self.tp
        torch.distributed.all_gather_object(parts, ids, group=self.tp_group)
        me = torch.distributed.get_rank(group=self.tp_group)
        start = sum(len(p) for p in parts[:me])
        return [row for p in parts for row in p], slice(start, start + len(ids))


def _model_path(model: torch.nn.Module) -> str:
    base = unwrap(model)
    base = base.get_base_model() if _is_peft(base) else base
    path = getattr(base, "name_or_path", None) or getattr(base.config, "_name_or_path", "")
    if not path:
        raise ValueError("the policy does not say which folder or hub name it was loaded from (name_or_path)")
    return str(path)


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _external_launcher_env() -> None:
    """vLLM's in-process executor joins torch.distributed; a single process needs the variables torchrun
    would set."""
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])


def _tp_group(tp: int) -> Any:
    """This rank's tensor-parallel group: consecutive ranks [0..tp-1], [tp..2tp-1], ..."""
    if tp == 1:
        return None
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world % tp or not torch.distributed.is_initialized():
        raise RuntimeError(f"tensor_parallel_size={tp} needs a torchrun launch whose world size ({world}) "
                           f"is a multiple of it, with torch.distributed initialized")
    group, _ = torch.distributed.new_subgroups_by_enumeration([list(range(i, i + tp)) for i in range(0, world, tp)])
    return group
