"""Typed configuration of the GRPO trainer (one schema; YAML builds it through ``_target_``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rankrl.distributed import check_strategy
from rankrl.rollout.base import SamplingParams

LR_SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine")


@dataclass(frozen=True)
class TrainerConfig:
    """GRPO trainer settings.

    Args:
        max_steps: optimizer steps to run (one step = one batch of B prompts x G completions).
        prompts_per_step: B, prompts sampled per step.
        group_size: G, completions per prompt.
        micro_batch_size: rows per forward/backward; gradients accumulate over the B*G rows.
        num_iterations: policy updates per batch; the sampling policy's log-probs are kept as "old".
        lr: peak learning rate (AdamW).
        weight_decay: AdamW weight decay.
        lr_scheduler: one of ``LR_SCHEDULERS`` (transformers' ``get_scheduler`` names).
        warmup_steps: scheduler warm-up in optimizer steps.
        max_grad_norm: gradient clipping threshold (0 disables).
        advantage: advantage estimator name (``rankrl.rl.advantages`` registry).
        loss_agg: loss aggregation name (``rankrl.rl.losses`` registry).
        eps_low: lower clip range of the ratio.
        eps_high: upper clip range of the ratio (> eps_low is DAPO's clip-higher).
        beta: weight of the k3 KL to the frozen reference policy; 0 loads no reference.
        sampling: rollout sampling settings.
        save_every: checkpoint every N steps (0 = only at the end).
        eval_every: evaluate every N steps (0 = only at the end).
        keep_checkpoints: how many step checkpoints to keep on disk.
        resume: continue from the run folder's last checkpoint if there is one.
        strategy: how ranks share the work under ``torchrun``: ``ddp`` (a full replica per rank) or ``fsdp``
            (parameters, gradients and optimizer state sharded; for policies that do not fit on one GPU).
    """

    max_steps: int = 20
    prompts_per_step: int = 4
    group_size: int = 4
    micro_batch_size: int = 8
    num_iterations: int = 1
    lr: float = 1e-5
    weight_decay: float = 0.0
    lr_scheduler: str = "constant_with_warmup"
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    advantage: str = "grpo"
    loss_agg: str = "grpo"
    eps_low: float = 0.2
    eps_high: float = 0.2
    beta: float = 0.0
    sampling: SamplingParams = field(default_factory=SamplingParams)
    save_every: int = 10
    eval_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = False
    strategy: str = "ddp"

    def __post_init__(self) -> None:
        if isinstance(self.sampling, dict):  # built without Hydra's recursive instantiation
            object.__setattr__(self, "sampling", SamplingParams(**self.sampling))
        if not isinstance(self.sampling.stop, tuple):
            object.__setattr__(self, "sampling", _with_tuple_stop(self.sampling))
        positive = ("max_steps", "prompts_per_step", "group_size", "micro_batch_size", "num_iterations")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"trainer.{name} must be >= 1, got {getattr(self, name)}")
        if self.lr_scheduler not in LR_SCHEDULERS:
            raise ValueError(f"trainer.lr_scheduler={self.lr_scheduler!r}; valid: {', '.join(LR_SCHEDULERS)}")
        if not (0 <= self.eps_low < 1 and self.eps_high >= 0):
            raise ValueError(
                f"trainer.eps_low must be in [0, 1) and eps_high >= 0, got {self.eps_low}, {self.eps_high}"
            )
        if self.beta < 0:
            raise ValueError(f"trainer.beta must be >= 0, got {self.beta}")
        _check_registered(self.advantage, self.loss_agg)
        check_strategy(self.strategy)

    @property
    def rows_per_step(self) -> int:
        """N = B * G completions scored per step."""
        return self.prompts_per_step * self.group_size


def _with_tuple_stop(sampling: SamplingParams) -> SamplingParams:
    from dataclasses import replace

    return replace(sampling, stop=tuple(sampling.stop))


def _check_registered(advantage: str, loss_agg: str) -> None:
    from rankrl.rl.advantages import get_advantage_fn
    from rankrl.rl.losses import get_loss_agg

    get_advantage_fn(advantage)
    get_loss_agg(loss_agg)
