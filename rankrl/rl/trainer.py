"""The training loop every step type shares.

    for each step: take the next examples -> step (GRPO or SFT: forward, backward, optimizer) -> log
                   -> monitor the probe set / evaluate / checkpoint on their cadences

The loop owns what must survive a kill: the optimizer, the scheduler, the data position, the RNG states and
the step counter, written as atomic checkpoints; ``resume`` continues from the newest intact one, and on the
CPU a resumed run ends with the same metrics as an unbroken one. A non-finite loss or gradient stops the
run and leaves the last good checkpoint untouched. What a step *does* lives in ``rankrl.rl.steps``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import get_scheduler

from rankrl import distributed as ddp
from rankrl.errors import ConfigError
from rankrl.rl.checkpoint import (
    PromptOrder,
    latest_checkpoint,
    load_checkpoint,
    resolve_resume_checkpoint,
    save_checkpoint,
)
from rankrl.rl.config import LENGTH_FREE_SCHEDULERS, TrainerConfig
from rankrl.rl.steps import NonFiniteLossError, Step, build_step
from rankrl.run_folders import CHECKPOINTS_DIR
from rankrl.tracking import RunLogger

log = logging.getLogger(__name__)
PROGRESS_KEYS = ("reward", "loss", "format_error_rate")  # shown on the progress bar when a step reports them

Metrics = dict[str, float]


class TrainLoop:
    """Runs ``step`` for ``cfg.max_steps`` optimizer steps over ``step.num_examples`` examples.

    Args:
        policy: the module being trained (a peft model for LoRA).
        model: the module that runs forward/backward (``distributed.wrap(policy)``).
        step: one step type (``GRPOStep``, ``SFTStep``), already bound to its task and engine.
        cfg: the trainer settings.
        run_dir: the run folder (checkpoints, ``train_log.jsonl``).
        logger: where per-step metrics go.
        seed: seeds the example order.
        evaluate: ``evaluate(step) -> metrics``, the full evaluation every ``cfg.eval_every`` steps.
        monitor: ``monitor(step) -> metrics``, the probe set every ``cfg.monitor_every`` steps (and at
            step 0).
    """

    def __init__(
        self,
        policy: torch.nn.Module,
        model: torch.nn.Module,
        step: Step,
        cfg: TrainerConfig,
        run_dir: str | Path,
        logger: RunLogger,
        seed: int = 0,
        evaluate: Callable[[int], Metrics] | None = None,
        monitor: Callable[[int], Metrics] | None = None,
    ) -> None:
        self.policy, self.model, self.step_fn, self.cfg = policy, model, step, cfg
        self.run_dir, self.logger = Path(run_dir), logger
        self.evaluate, self.monitor = evaluate, monitor
        if step.num_examples < 1:
            raise ValueError(f"the task produced no {cfg.kind} training examples")
        self.order = PromptOrder(step.num_examples, seed)
        params = [p for p in policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        self.scheduler = get_scheduler(
            cfg.lr_scheduler,
            self.optimizer,
            num_warmup_steps=cfg.warmup_steps,
            num_training_steps=cfg.optimizer_steps,
        )
        self.step = 0
        self.ckpt_root = self.run_dir / CHECKPOINTS_DIR

    # ---------------------------------------------------------------- checkpoints
    def save(self) -> Path:
        """Checkpoint the run (every rank calls this: under FSDP the state is gathered from all of them)."""
        state = {
            "step": self.step,
            "order": self.order.state(),
            "scheduler": self.scheduler.state_dict(),
            "optimizer_steps": self.cfg.optimizer_steps,  # the schedule's length (check_resumed_length)
        }
        return save_checkpoint(
            self.ckpt_root, self.step, self.policy, self.optimizer, state, self.cfg.keep_checkpoints
        )

    def maybe_resume(self) -> bool:
        """Continue from the newest intact checkpoint when ``cfg.resume``; else start from step 0.

        A folder whose checkpoints are all damaged raises ``CheckpointError`` (each one named with why)
        before anything is set aside: starting over there would bury the damage under a new run."""
        # the main rank picks (and verifies) the checkpoint for all: ranks that each chose could differ
        ckpt = ddp.from_main(lambda: resolve_resume_checkpoint(self.ckpt_root)) if self.cfg.resume else None
        if ckpt is None:
            self._set_aside_earlier_run()
            return False
        state = load_checkpoint(ckpt, self.policy, self.optimizer)
        check_resumed_length(self.cfg, state.get("optimizer_steps"), ckpt)
        self.scheduler.load_state_dict(state["scheduler"])
        self.order.epoch, self.order.index = state["order"]["epoch"], state["order"]["index"]
        self.step = state["step"]
        if ddp.is_main():  # one writer: every rank rewriting the same log could read another's half write
            self.logger.truncate_after(self.step)
        ddp.barrier()
        self.step_fn.weights_changed()
        log.info("resumed from %s at step %d", ckpt, self.step)
        return True

    def _set_aside_earlier_run(self) -> None:
        """A fresh start in a folder that holds an earlier run keeps that run's checkpoints under another
        name (nothing is deleted) and starts the log anew."""
        if ddp.is_main() and self.ckpt_root.is_dir() and any(self.ckpt_root.glob("step_*")):
            n = 1 + sum(1 for _ in self.run_dir.glob("checkpoints.earlier-*"))
            aside = self.run_dir / f"checkpoints.earlier-{n}"
            self.ckpt_root.rename(aside)
            log.warning(
                "trainer.resume=false in a run folder with checkpoints: starting over; the earlier "
                "checkpoints are kept in %s",
                aside,
            )
        if ddp.is_main():
            self.logger.truncate_after(-1)
        ddp.barrier()

    # ---------------------------------------------------------------- the loop
    def train(self) -> Metrics:
        """Run until ``cfg.max_steps``; returns the last step's metrics."""
        if not self.maybe_resume() and self.monitor is not None and self.cfg.monitor_every:
            self._log({f"monitor/{k}": v for k, v in self.monitor(0).items()}, step=0)
        metrics: Metrics = {}
        bar = tqdm(
            total=self.cfg.max_steps,
            initial=self.step,
            desc="train",
            unit="step",
            disable=not ddp.is_main(),
            dynamic_ncols=True,
        )
        while self.step < self.cfg.max_steps:
            metrics = self.step_once()
            metrics.update(self._cadenced())
            self._log(metrics, step=self.step)
            bar.update(1)
            bar.set_postfix(
                {k: f"{metrics[k]:.3g}" for k in PROGRESS_KEYS if isinstance(metrics.get(k), float)},
                refresh=False,
            )
            if (
                self.cfg.save_every and self.step % self.cfg.save_every == 0
            ) or self.step == self.cfg.max_steps:
                self.save()
        bar.close()
        return metrics

    def step_once(self) -> Metrics:
        """One optimizer step on the next examples (no logging, no checkpoint); advances ``self.step``."""
        idx = self.order.take(self.step_fn.examples_per_step)
        try:
            metrics = self.step_fn(ddp.split(idx), self._optimizer_step)
        except NonFiniteLossError as err:
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError(
                f"{err} at step {self.step + 1}; nothing was saved after the last good checkpoint "
                f"{latest_checkpoint(self.ckpt_root)}. Lower trainer.lr or check the rewards."
            ) from None
        self.step += 1
        metrics["lr"] = self.scheduler.get_last_lr()[0]
        return metrics

    def _cadenced(self) -> Metrics:
        out: Metrics = {}
        every = self.cfg.monitor_every
        if self.monitor is not None and every and self.step % every == 0:
            out.update({f"monitor/{k}": v for k, v in self.monitor(self.step).items()})
        every = self.cfg.eval_every
        if self.evaluate is not None and every and self.step % every == 0 and self.step < self.cfg.max_steps:
            out.update({f"eval/{k}": v for k, v in self.evaluate(self.step).items()})
        return out

    def _log(self, metrics: Metrics, step: int) -> None:
        if ddp.is_main():
            self.logger.log(metrics, step=step)

    def _optimizer_step(self) -> float:
        """Clip, step the optimizer and the scheduler; returns the gradient norm before clipping."""
        params = [p for p in self.policy.parameters() if p.requires_grad]
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm > 0 else math.inf
        grad_norm = float(ddp.full_tensor(torch.nn.utils.clip_grad_norm_(params, max_norm)))
        if not math.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            raise NonFiniteLossError("non-finite gradient norm")
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm


def check_resumed_length(cfg: TrainerConfig, saved_steps: int | None, ckpt: Path) -> None:
    """A run resumed with another length (``trainer.max_steps`` raised to extend a finished run, say) follows
    an unbroken run of the new length only when its rate does not depend on the length: under a decaying
    schedule the resumed steps would take rates that neither run has. Checkpoints written before the length
    was saved (``saved_steps`` None) are not checked."""
    if saved_steps in (None, cfg.optimizer_steps) or cfg.lr_scheduler in LENGTH_FREE_SCHEDULERS:
        return
    raise ConfigError(
        f"{ckpt} was written by a run of {saved_steps} optimizer steps under trainer.lr_scheduler="
        f"{cfg.lr_scheduler}, whose rate depends on the run's length; resuming it at {cfg.optimizer_steps} "
        f"would match no unbroken run. Resume with its own trainer.max_steps, or start over with "
        f"trainer.resume=false (a schedule that does not depend on the length: "
        f"{', '.join(LENGTH_FREE_SCHEDULERS)})"
    )


def make_loop(
    policy: torch.nn.Module,
    tokenizer,
    task,
    cfg: TrainerConfig,
    run_dir: str | Path,
    logger: RunLogger,
    engine=None,
    seed: int = 0,
    ref_model: torch.nn.Module | None = None,
    evaluate: Callable[[int], Metrics] | None = None,
    monitor: Callable[[int], Metrics] | None = None,
) -> TrainLoop:
    """The loop with the step type that ``cfg._target_`` names (GRPO or SFT)."""
    # the module that runs forward/backward: DDP around the policy, or the policy itself sharded by FSDP
    model = ddp.wrap(policy, cfg.strategy)
    step = build_step(
        cfg, policy=policy, model=model, tokenizer=tokenizer, engine=engine, task=task, ref_model=ref_model
    )
    return TrainLoop(policy, model, step, cfg, run_dir, logger, seed=seed, evaluate=evaluate, monitor=monitor)
