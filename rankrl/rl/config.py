"""Typed configuration of the training loop and its step types: the one source of every default.

``conf/trainer/*.yaml`` extend a schema stored from these classes in Hydra's ConfigStore
(``register_schemas``) and override only what differs from these defaults, so a wrong type
(``trainer.lr=abc``) stops at composition, naming the key, the expected type and the value. ``_target_``
says which class, and so which step type, a node builds.

``STEP_TYPES`` is the one registry of step types: the class each one builds and the task methods it calls.
The loop builds a step from it (``rankrl.rl.steps.build_step``), the config checks read a step's kind from
it before torch loads, and a task trains with a step type exactly when it has that step's methods
(``rankrl.rl.task.TaskBase``). A new step type is a class in ``rankrl.rl.steps``, an entry here and a YAML
file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rankrl.errors import ConfigError
from rankrl.rollout.base import SamplingParams

LR_SCHEDULERS = ("constant", "constant_with_warmup", "linear", "cosine")
# the schedulers whose rate at a step does not depend on the run's length: only under these does a run resumed
# with another trainer.max_steps follow the rates an unbroken run of that length would
LENGTH_FREE_SCHEDULERS = ("constant", "constant_with_warmup")


@dataclass(frozen=True)
class StepType:
    """One step type of the loop.

    Args:
        target: the step class, as a trainer config's ``_target_`` names it.
        task_methods: what the step calls on its task: a task trains with this step type exactly when it
            has them all.
    """

    target: str
    task_methods: tuple[str, ...]


# kind (``trainer.kind``, a task's ``trains``) -> step type
STEP_TYPES: dict[str, StepType] = {
    "grpo": StepType("rankrl.rl.steps.GRPOStep", ("train_examples", "score")),
    "sft": StepType("rankrl.rl.steps.SFTStep", ("sft_examples",)),
}


def step_kind(target: str | None) -> str | None:
    """The kind of the step type whose class ``target`` names (``grpo`` or ``sft``); None if none does."""
    return next((kind for kind, step in STEP_TYPES.items() if step.target == target), None)


@dataclass
class TrainerConfig:
    """The training loop and its step type. ``_target_`` names the step type; keys of the other step type
    are ignored, so a task's scale file can size GRPO and a pipeline's SFT stage still composes.

    The loop (every step type):
        max_steps: optimizer steps to run (one step = one batch of B prompts x G completions for GRPO).
        micro_batch_size: rows per forward/backward; gradients accumulate over the step's rows.
        lr: peak learning rate (AdamW).
        weight_decay: AdamW weight decay.
        lr_scheduler: one of ``LR_SCHEDULERS`` (transformers' ``get_scheduler`` names).
        warmup_steps: scheduler warm-up in optimizer steps.
        max_grad_norm: gradient clipping threshold (0 disables).
        save_every: checkpoint every N steps (0 = only at the end).
        eval_every: run the full evaluation every N steps (0 = only at the end).
        monitor_every: evaluate the task's fixed probe set every N steps and at step 0 (0 = never); logged
            as ``monitor/<name>``, separate from the full evaluation and from ``eval_limit``.
        keep_checkpoints: how many step checkpoints to keep on disk while the run trains.
        keep_checkpoints_when_done: false: once the run has finished, keep only what later stages need,
            the final checkpoint without its optimizer state (2x the weights for AdamW); true: keep the
            checkpoints as training left them, to extend the run exactly with more steps.
        resume: continue from the run folder's newest intact checkpoint if there is one.
        strategy: under ``torchrun``, ``ddp`` (a full replica per rank) or ``fsdp`` (sharded).

    GRPO (``rankrl.rl.steps.GRPOStep``):
        prompts_per_step: B, prompts sampled per step.
        group_size: G, completions per prompt.
        num_iterations: policy updates per batch; the sampling policy's log-probs are kept as "old".
        advantage: estimator name (``rankrl.rl.advantages`` registry); spans use it too.
        loss_agg: loss aggregation name (``rankrl.rl.losses`` registry).
        eps_low / eps_high: clip range of the ratio (eps_high > eps_low is DAPO's clip-higher).
        beta: weight of the k3 KL to the frozen reference policy; 0 loads no reference.
        span_weights: lambda_k per span name when the task scores spans (1.0 for spans not named).
        sampling: rollout sampling settings.
        shared_prefix: compute each group's prompt once in the update's forwards (policy, old and reference
            log-probs), its keys and values shared by the group's G completions (``rankrl.rl.batch``); false:
            G full copies of each prompt, as TRL. Equal up to float rounding; needs gradient checkpointing
            off.

    SFT (``rankrl.rl.steps.SFTStep``):
        examples_per_step: SFT pairs per optimizer step.
        epochs: when set, ``max_steps`` becomes ceil(epochs * pairs / examples_per_step).
    """

    _target_: str = STEP_TYPES["grpo"].target
    max_steps: int = 20
    micro_batch_size: int = 8
    lr: float = 1e-5
    weight_decay: float = 0.0
    lr_scheduler: str = "constant_with_warmup"
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    save_every: int = 10
    eval_every: int = 0
    monitor_every: int = 0
    keep_checkpoints: int = 2
    keep_checkpoints_when_done: bool = False
    resume: bool = False
    strategy: str = "ddp"
    prompts_per_step: int = 4
    group_size: int = 4
    num_iterations: int = 1
    advantage: str = "grpo"
    loss_agg: str = "grpo"
    eps_low: float = 0.2
    eps_high: float = 0.2
    beta: float = 0.0
    span_weights: dict[str, float] = field(default_factory=dict)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    shared_prefix: bool = True
    examples_per_step: int = 8
    epochs: float | None = None

    @property
    def kind(self) -> str:
        """``grpo`` or ``sft``: the step type ``_target_`` names."""
        kind = step_kind(self._target_)
        assert kind is not None, self._target_  # __post_init__ checked it
        return kind

    @property
    def rows_per_step(self) -> int:
        """N = B * G completions scored per GRPO step."""
        return self.prompts_per_step * self.group_size

    @property
    def optimizer_steps(self) -> int:
        """Scheduler length: optimizer steps over the whole run."""
        return self.max_steps * (self.num_iterations if self.kind == "grpo" else 1)

    def __post_init__(self) -> None:
        if isinstance(self.sampling, dict):  # built without Hydra
            self.sampling = SamplingParams(**self.sampling)
        if not isinstance(self.sampling.stop, tuple):
            self.sampling = replace(self.sampling, stop=tuple(self.sampling.stop))
        if step_kind(self._target_) is None:
            valid = ", ".join(step.target for step in STEP_TYPES.values())
            raise ConfigError(f"trainer._target_={self._target_!r}; valid: {valid}")
        positive = (
            "max_steps",
            "micro_batch_size",
            "prompts_per_step",
            "group_size",
            "num_iterations",
            "examples_per_step",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"trainer.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("save_every", "eval_every", "monitor_every", "warmup_steps"):
            if getattr(self, name) < 0:
                raise ConfigError(f"trainer.{name} must be >= 0, got {getattr(self, name)}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ConfigError(f"trainer.lr must be a positive number, got {self.lr}")
        if self.lr_scheduler not in LR_SCHEDULERS:
            raise ConfigError(
                f"trainer.lr_scheduler={self.lr_scheduler!r}; valid: {', '.join(LR_SCHEDULERS)}"
            )
        if not (0 <= self.eps_low < 1 and self.eps_high >= 0):
            raise ConfigError(
                f"trainer.eps_low must be in [0, 1) and eps_high >= 0, got {self.eps_low}, {self.eps_high}"
            )
        if self.beta < 0:
            raise ConfigError(f"trainer.beta must be >= 0, got {self.beta}")
        if self.epochs is not None and not self.epochs > 0:
            raise ConfigError(f"trainer.epochs must be > 0 or null, got {self.epochs}")
        from rankrl.rl.advantages import get_advantage_fn
        from rankrl.rl.losses import get_loss_agg

        try:
            from rankrl.distributed import check_strategy  # torch: imported when a run is built

            check_strategy(self.strategy)
            get_advantage_fn(self.advantage)
            get_loss_agg(self.loss_agg)
        except ValueError as err:
            raise ConfigError(f"trainer: {err}") from None

    def with_epochs(self, num_examples: int) -> TrainerConfig:
        """This config with ``max_steps`` derived from ``epochs`` (unchanged when epochs is null)."""
        if self.epochs is None:
            return self
        return replace(self, max_steps=max(1, math.ceil(self.epochs * num_examples / self.examples_per_step)))


def _schema_fields(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def typed_node(node: DictConfig | dict, cls: type, prefix: str, keep_target: bool = False) -> dict[str, Any]:
    """Check ``node`` against the dataclass ``cls`` (types, unknown keys) and return it as plain values.

    Raises ``ConfigError`` naming the key, the expected type and the value, e.g.
    ``trainer.lr: expected float, got 'abc'``.
    """
    plain = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    target = plain.pop("_target_", None)
    sampling = plain.pop("sampling", None)
    unknown = sorted(set(plain) - set(_schema_fields(cls)))
    if unknown:
        raise ConfigError(
            f"{prefix}: unknown key(s) {unknown} for {cls.__name__}; valid: {', '.join(_schema_fields(cls))}"
        )
    schema = OmegaConf.structured(cls)
    for key, value in plain.items():
        try:
            OmegaConf.update(schema, key, value, merge=True)
        except OmegaConfBaseException:
            expected = getattr(
                cls.__dataclass_fields__[key].type, "__name__", cls.__dataclass_fields__[key].type
            )
            raise ConfigError(
                f"{prefix + '.' if prefix else ''}{key}: expected {expected}, got {value!r}"
            ) from None
    out = OmegaConf.to_container(schema, resolve=True)
    out.pop("sampling", None)
    if sampling is not None:
        sampling.pop("_target_", None)
        out["sampling"] = SamplingParams(**typed_node(sampling, SamplingParams, f"{prefix}.sampling"))
    if keep_target and target is not None:
        out["_target_"] = target
    return out


def register_schemas() -> None:
    """Store the trainer schema in Hydra's ConfigStore: ``conf/trainer/*.yaml`` extend it, so every key
    exists with its default and type before any override is applied (``trainer.lr=abc`` fails there)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(group="trainer", name="schema", node=TrainerConfig)


def build_trainer_config(node: DictConfig | dict) -> TrainerConfig:
    """The typed trainer config of a composed ``trainer`` node."""
    return TrainerConfig(**typed_node(node, TrainerConfig, "trainer", keep_target=True))


def eval_sampling(cfg: DictConfig, role: str | None = None) -> SamplingParams:
    """``cfg.evaluation.sampling`` (greedy by default), with a role's own ``sampling`` over it."""
    node = OmegaConf.to_container(cfg.evaluation.sampling, resolve=True)
    role_node = ((cfg.get("roles") or {}).get(role) or {}) if role else {}
    if role_node.get("sampling"):
        node.update(OmegaConf.to_container(role_node.sampling, resolve=True))
    return SamplingParams(**typed_node(node, SamplingParams, "evaluation.sampling"))
