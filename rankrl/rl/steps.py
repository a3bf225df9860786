"""Step types of the training loop: one optimizer step of GRPO, or of supervised fine-tuning.

A step takes the indices of its examples, runs forward/backward in micro-batches, calls the loop's
``optimizer_step`` and returns its metrics. The loop (``rankrl.rl.trainer``) owns everything else. Step types
are registered in one place, ``rankrl.rl.config.STEP_TYPES`` (torch-free, so the config checks read it
before a model loads), and selected by a trainer config's ``_target_`` (``trainer=grpo|dr_grpo|dapo|sft``):
a new one is a class here, an entry there and a YAML file, with no change to the loop.

- ``GRPOStep``: G completions per prompt -> the task's rewards -> group-relative advantages (per span when
  the task scores spans) -> clipped ratio loss -> update(s) -> new weights to the rollout engine.
- ``SFTStep``: masked NLL of the task's SFT completions; prompt tokens are masked, and the loss is the mean
  over every completion token of the step (all micro-batches and ranks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import torch

from rankrl import distributed as ddp
from rankrl.rl.advantages import flat_group_share, get_advantage_fn
from rankrl.rl.batch import (
    PolicyBatch,
    completion_logits,
    gather_logprobs,
    model_device,
    prefix_cache_selectable,
    sampled_distribution_logprobs,
    to_policy_batch,
    token_logprobs,
)
from rankrl.rl.config import STEP_TYPES, TrainerConfig
from rankrl.rl.losses import count_loss_items, policy_loss
from rankrl.rl.spans import SpanBatch, span_advantages, span_masks, span_weights
from rankrl.rl.task import SFTExample, TrainTask
from rankrl.rollout.base import RolloutEngine, Rollouts
from rankrl.rollout.hf import render_prompts

log = logging.getLogger(__name__)

Metrics = dict[str, Any]
OptimizerStep = Callable[[], float]


class NonFiniteLossError(RuntimeError):
    """A loss or gradient norm was NaN/inf; the last good checkpoint is left untouched."""


class Step(Protocol):
    """What the loop calls once per optimizer step."""

    num_examples: int
    examples_per_step: int

    def __call__(self, indices: Sequence[int], optimizer_step: OptimizerStep) -> Metrics: ...

    def weights_changed(self) -> None:
        """The policy's weights were replaced (resume): refresh whatever copies them."""


def build_step(cfg: TrainerConfig, **parts: Any) -> Step:
    """The step type ``cfg._target_`` names (``STEP_TYPES``, which ``TrainerConfig`` checked it against),
    built from ``parts`` (policy, model, tokenizer, task, ...)."""
    from hydra.utils import get_class

    return get_class(STEP_TYPES[cfg.kind].target)(cfg=cfg, **parts)


# ---------------------------------------------------------------------------------------------------- GRPO


class GRPOStep:
    """One GRPO step.

    Args:
        cfg: GRPO settings.
        policy: the trained module (its parameters are what the engine samples).
        model: the module that runs forward/backward (DDP around the policy, or the policy).
        tokenizer: the policy's tokenizer.
        engine: samples from the policy; told after every update.
        task: prompts and rewards (already bound to its role).
        ref_model: frozen reference for the KL term; None with LoRA uses the adapter-off policy.
    """

    def __init__(
        self,
        cfg: TrainerConfig,
        policy: torch.nn.Module,
        model: torch.nn.Module,
        tokenizer: Any,
        engine: RolloutEngine,
        task: TrainTask,
        ref_model: torch.nn.Module | None = None,
    ) -> None:
        if engine is None:
            raise ValueError("GRPO samples its completions: pass a rollout engine")
        self.cfg, self.policy, self.model, self.tokenizer = cfg, policy, model, tokenizer
        self.engine, self.task, self.ref_model = engine, task, ref_model
        self.examples = task.train_examples()
        self.num_examples, self.examples_per_step = len(self.examples), cfg.prompts_per_step
        self.advantage_fn = get_advantage_fn(cfg.advantage)
        if cfg.shared_prefix and not prefix_cache_selectable(policy):
            log.info(
                "trainer.shared_prefix: this model's linear-attention layers keep no cache to share, so "
                "every row computes its prompt (same log-probs, more memory and time)"
            )

    def weights_changed(self) -> None:
        self.engine.sync_weights(self.policy)

    def __call__(self, indices: Sequence[int], optimizer_step: OptimizerStep) -> Metrics:
        cfg = self.cfg
        t0 = time.perf_counter()
        examples = [self.examples[i] for i in indices]
        rollouts = self.engine.generate(
            [ex.messages for ex in examples], n=cfg.group_size, sampling=cfg.sampling
        )
        t_gen = time.perf_counter() - t0

        rows = [ex for ex in examples for _ in range(cfg.group_size)]
        scores = self.task.score(rows, rollouts.texts)
        batch = to_policy_batch(rollouts, self.tokenizer.pad_token_id)
        advantages = self.advantages(scores, rollouts, batch)
        t_score = time.perf_counter() - t0 - t_gen

        stats = self.update(batch, advantages, optimizer_step)
        self.engine.sync_weights(self.policy)
        t_all = time.perf_counter() - t0
        metrics = {
            **self.batch_metrics(scores, rollouts, batch, advantages),
            **stats,
            "time/generate_s": t_gen,
            "time/reward_s": t_score,
            "time/update_s": t_all - t_gen - t_score,
            "time/step_s": t_all,
            "tokens_per_s": float(batch.response_mask.sum()) / max(t_gen, 1e-9),
        }
        return ddp.combine_metrics(metrics, combined_over_ranks)

    def advantages(self, scores, rollouts: Rollouts, batch: PolicyBatch) -> torch.Tensor | SpanBatch:
        """(N,) sequence advantages, or a ``SpanBatch`` when the task scores spans."""
        n = len(scores.rewards)
        if not scores.spans:
            rewards = ddp.gather_rows(scores.rewards.float())  # batch-level estimators need every rank
            return ddp.local_rows(self.advantage_fn(rewards, self.cfg.group_size), n)
        gathered = {
            k: replace(s, rewards=ddp.gather_rows(s.rewards.float())) for k, s in scores.spans.items()
        }
        adv = {
            k: ddp.local_rows(v, n)
            for k, v in span_advantages(gathered, self.cfg.advantage, self.cfg.group_size).items()
        }
        masks = span_masks(
            scores.spans,
            rollouts.completion_ids,
            rollouts.texts,
            self.tokenizer,
            batch.response_mask.shape[1],
        )
        return SpanBatch(
            adv,
            {k: m * batch.response_mask for k, m in masks.items()},
            span_weights(list(scores.spans), self.cfg.span_weights),
        )

    @torch.no_grad()
    def _frozen_logprobs(self, batch: PolicyBatch, reference: bool) -> torch.Tensor:
        temperature = self.cfg.sampling.temperature
        out, shared = [], self.cfg.shared_prefix
        device = model_device(self.policy)
        for start in range(0, len(batch), self.cfg.micro_batch_size):
            micro = batch.rows(start, start + self.cfg.micro_batch_size).to(device)
            if not reference:
                out.append(token_logprobs(self.policy, micro, temperature, shared))
            elif self.ref_model is not None:
                out.append(token_logprobs(self.ref_model, micro, temperature, shared))
            else:  # LoRA: the reference is the base model, i.e. the policy with its adapter off
                with self.policy.disable_adapter():
                    out.append(token_logprobs(self.policy, micro, temperature, shared))
        return torch.cat(out)

    def update(
        self, batch: PolicyBatch, advantages: torch.Tensor | SpanBatch, optimizer_step: OptimizerStep
    ) -> Metrics:
        cfg = self.cfg
        self.model.train()
        # With one update per batch the sampling policy *is* the current policy: ratio = 1 (as TRL).
        old = self._frozen_logprobs(batch, reference=False) if cfg.num_iterations > 1 else None
        ref = self._frozen_logprobs(batch, reference=True) if cfg.beta > 0 else None
        sums: Metrics = {}
        for it in range(cfg.num_iterations):
            stats = backward_batch(self.model, batch, advantages, cfg, old=old, ref=ref)
            gap = {k: stats.pop(k) for k in SAMPLER_GAP_KEYS}
            if it == 0:  # engine vs trainer is only meaningful before the first update
                sums.update(gap)
            stats["grad_norm"] = optimizer_step()
            for k, v in stats.items():
                sums[k] = sums.get(k, 0.0) + v / cfg.num_iterations
        return sums

    def batch_metrics(
        self, scores, rollouts: Rollouts, batch: PolicyBatch, advantages: torch.Tensor | SpanBatch
    ) -> Metrics:
        lengths = batch.response_mask.sum(-1)
        token_adv = advantages.token_advantages() if isinstance(advantages, SpanBatch) else advantages
        spans = scores.spans or {}
        rewards = ddp.gather_rows(scores.rewards.float())  # every rank's: the std is not a mean of stds
        return {
            "reward/mean": rewards.mean().item(),
            "reward/std": rewards.std().item() if len(rewards) > 1 else 0.0,
            "reward/flat_group_share": flat_group_share(scores.rewards, self.cfg.group_size),
            **{f"reward/{k}": v.float().mean().item() for k, v in scores.components.items()},
            **{f"reward/span_{k}": s.rewards.float().mean().item() for k, s in spans.items()},
            "advantage/mean": token_adv.mean().item(),
            "advantage/abs_mean": token_adv.abs().mean().item(),
            "format_error_rate": 1.0 - scores.format_ok.float().mean().item(),
            "completion_length/mean": lengths.mean().item(),
            "completion_length/max": lengths.max().item(),
            # prompt tokens per completion (the prompt is computed once per group, see rankrl.rl.batch)
            "prompt_length/mean": float(
                sum(map(len, rollouts.prompt_ids)) / max(len(rollouts.prompt_ids), 1)
            ),
            "prompt_length/max": float(max(map(len, rollouts.prompt_ids), default=0)),
            **{f"task/{k}": v for k, v in scores.metrics.items()},
            # one completion per step, to read what the policy writes (W&B shows it as text)
            "sample/completion": rollouts.texts[0],
            "sample/reward": scores.rewards[0].item(),
        }


def combined_over_ranks(key: str) -> str:
    """How a GRPO step's metric combines over ranks (``ddp.combine_metrics``; each rank scores and logs its
    share of the prompts): the losses are each rank's share of the batch total (one denominator for every
    rank) and throughput adds up; maxima and times (a step waits for its slowest rank) take the largest; the
    shown sample is the main rank's; everything else is a mean of equal shares."""
    if key == "loss" or key.startswith("pg_loss") or key == "tokens_per_s":
        return "sum"
    if key.endswith(("/max", "_max")) or "/max/" in key or key.startswith("time/"):
        return "max"
    return "main" if key.startswith("sample/") else "mean"


def _loss_terms(
    advantages: torch.Tensor | SpanBatch, mask: torch.Tensor
) -> list[tuple[str, float, torch.Tensor, torch.Tensor]]:
    """(name, weight, advantages, mask) of each loss term: one for sequence advantages, one per span."""
    if isinstance(advantages, SpanBatch):
        return [
            (k, advantages.weights[k], advantages.advantages[k], advantages.masks[k])
            for k in advantages.masks
        ]
    return [("", 1.0, advantages, mask)]


def backward_batch(
    model: torch.nn.Module,
    batch: PolicyBatch,
    advantages: torch.Tensor | SpanBatch,
    cfg: TrainerConfig,
    old: torch.Tensor | None = None,
    ref: torch.Tensor | None = None,
) -> dict[str, float]:
    """Accumulate the gradient of one pass over ``batch`` in micro-batches; returns batch-level stats.

    One denominator serves the whole step (every micro-batch, every rank), so the accumulated gradient
    equals the full batch's; DDP averages over ranks, so each rank's loss is scaled back by the world size.
    With spans, each span's loss has its own denominator over its own mask and the weighted span losses
    add up (``rankrl.rl.spans``). Rollouts are padded on the CPU; each micro-batch moves to the policy's
    device.
    """
    terms = _loss_terms(advantages, batch.response_mask)
    num_items = {
        name: ddp.global_sum(float(count_loss_items(cfg.loss_agg, mask))) for name, _, _, mask in terms
    }
    device = model_device(model)
    sums: dict[str, float] = {}
    for start in range(0, len(batch), cfg.micro_batch_size):
        stop = start + cfg.micro_batch_size
        micro = batch.rows(start, stop).to(device)
        with ddp.gradient_sync(model, sync=stop >= len(batch)):
            logits = completion_logits(model, micro, cfg.shared_prefix)
            logps = gather_logprobs(logits, micro, cfg.sampling.temperature)
            gap = _gap(
                sampled_distribution_logprobs(logits.detach(), micro, cfg.sampling),
                micro.sampler_logprobs,
                micro.response_mask,
            )
            del logits  # autograd keeps what backward needs; the full logits need not outlive this line
            total = 0.0
            for name, weight, adv, mask in terms:
                loss, stats = policy_loss(
                    logps,
                    old[start:stop].to(device) if old is not None else logps.detach(),
                    adv[start:stop].to(device),
                    mask[start:stop].to(device),
                    eps_low=cfg.eps_low,
                    eps_high=cfg.eps_high,
                    ref_logprobs=ref[start:stop].to(device) if ref is not None else None,
                    beta=cfg.beta,
                    loss_agg=cfg.loss_agg,
                    max_completion_length=cfg.sampling.max_new_tokens,
                    num_items_in_batch=num_items[name],
                )
                total = total + weight * loss
                _accumulate(sums, stats, len(micro) / len(batch), suffix=f"/{name}" if name else "")
            if not torch.isfinite(total):
                raise NonFiniteLossError(f"non-finite loss ({float(total.detach())})")
            (total * ddp.world_size()).backward()
        sums["loss"] = sums.get("loss", 0.0) + float(total.detach())  # shares of the batch total
        sums["sampler_logprob_gap"] = (
            sums.get("sampler_logprob_gap", 0.0) + len(micro) / len(batch) * gap.mean
        )
        sums["sampler_logprob_gap_max"] = max(sums.get("sampler_logprob_gap_max", 0.0), gap.max)
    return sums


def _accumulate(sums: dict[str, float], stats: dict[str, torch.Tensor], share: float, suffix: str) -> None:
    # pg_loss is already a share of the batch total; the rest are per-micro-batch means
    for k, v in stats.items():
        key = k + suffix
        sums[key] = sums.get(key, 0.0) + float(v) * (1.0 if k == "pg_loss" else share)


# The engine/trainer mismatch, logged every step: mean and max |trainer - sampler| log-prob over completion
# tokens (0 = the engine samples exactly the policy the trainer scores). A growing gap is what GRPO collapses
# with vLLM rollouts were traced back to (vllm-project/vllm#14483): a stale push, a dtype or kernel change.
SAMPLER_GAP_KEYS = ("sampler_logprob_gap", "sampler_logprob_gap_max")


@dataclass(frozen=True)
class LogprobGap:
    mean: float
    max: float


def _gap(logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor) -> LogprobGap:
    diff = (logps - sampler_logps).abs() * mask
    return LogprobGap(
        mean=float(diff.sum() / mask.sum().clamp(min=1)), max=float(diff.max()) if diff.numel() else 0.0
    )


# ---------------------------------------------------------------------------------------------------- SFT


def sft_token_ids(
    tokenizer: Any, example: SFTExample, chat_template_kwargs: dict | None = None
) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) of an SFT pair under the model's chat template.

    The prompt is rendered exactly as for generation (assistant turn opened), so SFT teaches the tokens the
    policy will be asked to produce; the completion ends with the template's end of turn (the eos the
    engine stops on) and nothing after it.
    """
    prompt = render_prompts(tokenizer, [example.messages], chat_template_kwargs)[0]
    head = tokenizer.apply_chat_template(
        list(example.messages), tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
    )
    full = tokenizer.apply_chat_template(
        [*example.messages, {"role": "assistant", "content": example.completion}],
        tokenize=False,
        **(chat_template_kwargs or {}),
    )
    if not full.startswith(head):
        raise ValueError(
            "the chat template renders the prompt differently with an assistant turn; "
            "SFT cannot mask the prompt exactly"
        )
    tail = full[len(head) :]
    eos = tokenizer.eos_token
    if eos and eos in tail:
        tail = tail[: tail.index(eos) + len(eos)]
    return prompt, tokenizer(tail, add_special_tokens=False)["input_ids"]


class SFTStep:
    """One SFT step over ``cfg.examples_per_step`` examples.

    Args:
        cfg: SFT settings.
        policy: the trained module.
        model: the module that runs forward/backward.
        tokenizer: the policy's tokenizer (its chat template renders the pairs).
        task: supplies ``sft_examples()`` (already bound to its role).
        engine: told about new weights after each step, so monitors sample the current policy.
    """

    def __init__(
        self,
        cfg: TrainerConfig,
        policy: torch.nn.Module,
        model: torch.nn.Module,
        tokenizer: Any,
        task: TrainTask,
        engine: RolloutEngine | None = None,
        ref_model: Any = None,
    ) -> None:
        self.cfg, self.policy, self.model, self.tokenizer, self.engine = cfg, policy, model, tokenizer, engine
        self.pairs = [sft_token_ids(tokenizer, ex) for ex in task.sft_examples()]
        self.num_examples, self.examples_per_step = len(self.pairs), cfg.examples_per_step

    def weights_changed(self) -> None:
        if self.engine is not None:
            self.engine.sync_weights(self.policy)

    def __call__(self, indices: Sequence[int], optimizer_step: OptimizerStep) -> Metrics:
        t0 = time.perf_counter()
        pairs = [self.pairs[i] for i in indices]
        rollouts = Rollouts(
            prompt_ids=[p for p, _ in pairs],
            completion_ids=[c for _, c in pairs],
            logprobs=[[0.0] * len(c) for _, c in pairs],
            texts=[""] * len(pairs),
            group_size=1,
        )
        batch = to_policy_batch(rollouts, self.tokenizer.pad_token_id)
        self.model.train()
        n_tokens = ddp.global_sum(float(batch.response_mask.sum()))
        nll = 0.0
        device = model_device(self.model)
        for start in range(0, len(batch), self.cfg.micro_batch_size):
            stop = start + self.cfg.micro_batch_size
            micro = batch.rows(start, stop).to(device)
            with ddp.gradient_sync(self.model, sync=stop >= len(batch)):
                loss = -(token_logprobs(self.model, micro) * micro.response_mask).sum() / max(n_tokens, 1.0)
                if not torch.isfinite(loss):
                    raise NonFiniteLossError(f"non-finite loss ({loss.item()})")
                (loss * ddp.world_size()).backward()
            nll += float(loss.detach())
        grad_norm = optimizer_step()
        self.weights_changed()
        return {
            "loss": ddp.global_sum(nll) if ddp.world_size() > 1 else nll,
            "grad_norm": grad_norm,
            "sft/tokens": n_tokens,
            "time/step_s": time.perf_counter() - t0,
        }
