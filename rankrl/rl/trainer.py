"""The GRPO loop every task shares.

sample prompts -> G completions each -> task rewards -> group-relative advantages -> clipped
policy-gradient update(s) -> push weights to the rollout engine -> log, checkpoint, evaluate.
The loop knows nothing about papers: a task supplies prompts, rewards and (optionally) per-token
advantages through ``rankrl.tasks.base.Task``.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import get_scheduler

from rankrl import distributed as ddp
from rankrl.rl.advantages import get_advantage_fn
from rankrl.rl.batch import PolicyBatch, to_policy_batch, token_logprobs
from rankrl.rl.checkpoint import PromptOrder, latest_checkpoint, load_checkpoint, save_checkpoint
from rankrl.rl.config import TrainerConfig
from rankrl.rl.losses import count_loss_items, policy_loss
from rankrl.rollout.base import RolloutEngine
from rankrl.tasks.base import Task
from rankrl.tracking import RunLogger

log = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """Raised when a loss or gradient norm is NaN/inf; the last good checkpoint is left untouched."""


class GRPOTrainer:
    """Trains ``policy`` on ``task`` with GRPO.

    Args:
        policy: the causal LM being trained (a peft model for LoRA).
        tokenizer: its tokenizer (for padding).
        engine: the rollout engine; it is told about new weights after every update.
        task: prompts, rewards, optional ``token_advantages`` hook.
        cfg: trainer settings.
        run_dir: the run folder (checkpoints, logs).
        logger: where per-step metrics go.
        seed: seeds the prompt order.
        ref_model: frozen reference for the KL term; None with LoRA uses the base weights (adapter off).
        evaluate: called as ``evaluate(step)`` every ``cfg.eval_every`` steps; returns metrics to log.
    """

    def __init__(
        self,
        policy: torch.nn.Module,
        tokenizer: Any,
        engine: RolloutEngine,
        task: Task,
        cfg: TrainerConfig,
        run_dir: str | Path,
        logger: RunLogger,
        seed: int = 0,
        ref_model: torch.nn.Module | None = None,
        evaluate: Callable[[int], dict[str, float]] | None = None,
    ) -> None:
        self.policy, self.tokenizer, self.engine, self.task, self.cfg = policy, tokenizer, engine, task, cfg
        self.run_dir, self.logger, self.ref_model, self.evaluate = Path(run_dir), logger, ref_model, evaluate
        self.examples = task.train_examples()
        if not self.examples:
            raise ValueError("the task produced no training examples")
        self.order = PromptOrder(len(self.examples), seed)
        # the module that runs forward/backward: DDP around the policy, or the policy itself sharded by FSDP
        self.model = ddp.wrap(policy, cfg.strategy)
        params = [p for p in policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.scheduler = get_scheduler(
            cfg.lr_scheduler,
            self.optimizer,
            num_warmup_steps=cfg.warmup_steps,
            num_training_steps=cfg.max_steps * cfg.num_iterations,
        )
        self.advantage_fn = get_advantage_fn(cfg.advantage)
        self.step = 0
        self.ckpt_root = self.run_dir / "checkpoints"

    # ---------------------------------------------------------------- checkpoints
    def save(self) -> Path:
        """Checkpoint the run (every rank calls this: under FSDP the state is gathered from all of them)."""
        state = {"step": self.step, "order": self.order.state(), "scheduler": self.scheduler.state_dict()}
        return save_checkpoint(self.ckpt_root, self.step, self.policy, self.optimizer, state,
                               self.cfg.keep_checkpoints)

    def maybe_resume(self) -> bool:
        ckpt = latest_checkpoint(self.ckpt_root)
        if not self.cfg.resume or ckpt is None:
            return False
        state = load_checkpoint(ckpt, self.policy, self.optimizer)
        self.scheduler.load_state_dict(state["scheduler"])
        self.order.epoch, self.order.index = state["order"]["epoch"], state["order"]["index"]
        self.step = state["step"]
        self.logger.truncate_after(self.step)
        self.engine.sync_weights(self.policy)
        log.info("resumed from %s at step %d", ckpt, self.step)
        return True

    # ---------------------------------------------------------------- the loop
    def train(self) -> dict[str, float]:
        """Run until ``cfg.max_steps``; returns the last step's metrics."""
        self.maybe_resume()
        metrics: dict[str, float] = {}
        while self.step < self.cfg.max_steps:
            metrics = self.train_step()
            self.step += 1
            if (
                self.cfg.eval_every
                and self.step % self.cfg.eval_every == 0
                and self.step < self.cfg.max_steps
                and self.evaluate is not None
            ):
                metrics.update({f"eval/{k}": v for k, v in self.evaluate(self.step).items()})
            if ddp.is_main():
                self.logger.log(metrics, step=self.step)
            every = self.cfg.save_every and self.step % self.cfg.save_every == 0
            if every or self.step == self.cfg.max_steps:
                self.save()
        return metrics

    def train_step(self) -> dict[str, float]:
        cfg = self.cfg
        t0 = time.perf_counter()
        idx = ddp.split(self.order.take(cfg.prompts_per_step))
        examples = [self.examples[i] for i in idx]
        rollouts = self.engine.generate(
            [ex.messages for ex in examples], n=cfg.group_size, sampling=cfg.sampling
        )
        t_gen = time.perf_counter() - t0

        rows = [ex for ex in examples for _ in range(cfg.group_size)]
        scores = self.task.score(rows, rollouts.texts)
        batch = to_policy_batch(rollouts, self.tokenizer.pad_token_id)
        advantages = self._advantages(scores, rollouts, batch)
        t_score = time.perf_counter() - t0 - t_gen

        update_stats = self._update(batch, advantages)
        self.engine.sync_weights(self.policy)
        t_all = time.perf_counter() - t0

        n_tokens = int(batch.response_mask.sum())
        lengths = batch.response_mask.sum(-1)
        return {
            "reward/mean": scores.rewards.float().mean().item(),
            "reward/std": scores.rewards.float().std().item() if len(rows) > 1 else 0.0,
            **{f"reward/{k}": v.float().mean().item() for k, v in scores.components.items()},
            "advantage/mean": advantages.mean().item(),
            "advantage/abs_mean": advantages.abs().mean().item(),
            "format_error_rate": 1.0 - scores.format_ok.float().mean().item(),
            "completion_length/mean": lengths.mean().item(),
            "completion_length/max": lengths.max().item(),
            "lr": self.scheduler.get_last_lr()[0],
            "time/generate_s": t_gen,
            "time/reward_s": t_score,
            "time/update_s": t_all - t_gen - t_score,
            "time/step_s": t_all,
            "tokens_per_s": n_tokens / max(t_gen, 1e-9),
            **update_stats,
            **{f"task/{k}": v for k, v in scores.metrics.items()},
            # one completion per step, to read what the policy writes (W&B shows it as text)
            "sample/completion": rollouts.texts[0],
            "sample/reward": scores.rewards[0].item(),
        }

    # ---------------------------------------------------------------- pieces
    def _advantages(self, scores, rollouts, batch: PolicyBatch) -> torch.Tensor:
        """(N,) or (N, T) advantages; a task may give token spans their own advantages."""
        rewards = ddp.gather_rows(scores.rewards.float())  # batch-level estimators need every rank's rewards
        adv = ddp.local_rows(self.advantage_fn(rewards, self.cfg.group_size), len(scores.rewards))
        hook = getattr(self.task, "token_advantages", None)
        if hook is not None:
            return hook(
                scores=scores,
                rollouts=rollouts,
                response_mask=batch.response_mask,
                advantage_fn=self.advantage_fn,
                group_size=self.cfg.group_size,
                sequence_advantages=adv,
            )
        return adv

    @torch.no_grad()
    def _frozen_logprobs(self, batch: PolicyBatch, reference: bool) -> torch.Tensor:
        temperature = self.cfg.sampling.temperature
        out = []
        for start in range(0, len(batch), self.cfg.micro_batch_size):
            micro = batch.rows(start, start + self.cfg.micro_batch_size)
            if not reference:
                out.append(token_logprobs(self.policy, micro, temperature))
            elif self.ref_model is not None:
                out.append(token_logprobs(self.ref_model, micro, temperature))
            else:  # LoRA: the reference is the base model, i.e. the policy with its adapter off
                with self.policy.disable_adapter():
                    out.append(token_logprobs(self.policy, micro, temperature))
        return torch.cat(out)

    def _update(self, batch: PolicyBatch, advantages: torch.Tensor) -> dict[str, float]:
        cfg = self.cfg
        self.model.train()
        # With one update per batch the sampling policy *is* the current policy: ratio = 1 (as TRL).
        old = self._frozen_logprobs(batch, reference=False) if cfg.num_iterations > 1 else None
        ref = self._frozen_logprobs(batch, reference=True) if cfg.beta > 0 else None
        sums: dict[str, float] = {}
        for it in range(cfg.num_iterations):
            try:
                stats = backward_batch(self.model, batch, advantages, cfg, old=old, ref=ref)
            except NonFiniteLossError as err:
                self.optimizer.zero_grad(set_to_none=True)
                raise NonFiniteLossError(
                    f"{err} at step {self.step + 1}; nothing was saved after the last good checkpoint "
                    f"{latest_checkpoint(self.ckpt_root)}. Lower trainer.lr or check the rewards.") from None
            if it > 0:
                stats.pop("sampler_logprob_gap")  # only meaningful before the first update
            stats["grad_norm"] = self._optimizer_step()
            for k, v in stats.items():
                sums[k] = sums.get(k, 0.0) + v / (cfg.num_iterations if k != "sampler_logprob_gap" else 1)
        return sums

    def _optimizer_step(self) -> float:
        params = [p for p in self.policy.parameters() if p.requires_grad]
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else math.inf
        grad_norm = float(ddp.full_tensor(torch.nn.utils.clip_grad_norm_(params, max_norm)))
        if not math.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(
                f"non-finite gradient norm at step {self.step + 1}; last good checkpoint: "
                f"{latest_checkpoint(self.ckpt_root)}"
            )
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm


def backward_batch(model: torch.nn.Module, batch: PolicyBatch, advantages: torch.Tensor, cfg: TrainerConfig,
                   old: torch.Tensor | None = None, ref: torch.Tensor | None = None) -> dict[str, float]:
    """Accumulate the gradient of one pass over ``batch`` in micro-batches; returns batch-level stats.

    One denominator serves the whole step (every micro-batch, every rank), so the accumulated gradient
    equals the full batch's; DDP averages over ranks, so each rank's loss is scaled back by the world size.
    """
    num_items = ddp.global_sum(float(count_loss_items(cfg.loss_agg, batch.response_mask)))
    sums: dict[str, float] = {}
    for start in range(0, len(batch), cfg.micro_batch_size):
        stop = start + cfg.micro_batch_size
        micro = batch.rows(start, stop)
        with ddp.gradient_sync(model, sync=stop >= len(batch)):
            logps = token_logprobs(model, micro, cfg.sampling.temperature)
            loss, stats = policy_loss(
                logps, old[start:stop] if old is not None else logps.detach(), advantages[start:stop],
                micro.response_mask, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                ref_logprobs=ref[start:stop] if ref is not None else None, beta=cfg.beta,
                loss_agg=cfg.loss_agg, max_completion_length=cfg.sampling.max_new_tokens,
                num_items_in_batch=num_items)
            if not torch.isfinite(loss):
                raise NonFiniteLossError(f"non-finite loss ({loss.item()})")
            (loss * ddp.world_size()).backward()
        share = len(micro) / len(batch)
        # loss and pg_loss are already shares of the batch total; the rest are per-micro means
        sums["loss"] = sums.get("loss", 0.0) + float(loss.detach())
        for k, v in stats.items():
            sums[k] = sums.get(k, 0.0) + float(v) * (1.0 if k == "pg_loss" else share)
        sums["sampler_logprob_gap"] = sums.get("sampler_logprob_gap", 0.0) + share * _mean_gap(
            logps.detach(), micro.sampler_logprobs, micro.response_mask)
    return sums


def _mean_gap(logps: torch.Tensor, sampler_logps: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean |trainer - sampler| log-prob over completion tokens (0 = the engine samples the trained policy)."""
    return float(((logps - sampler_logps).abs() * mask).sum() / mask.sum().clamp(min=1))
