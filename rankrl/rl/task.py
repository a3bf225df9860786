"""The contract between the shared training loop and a method.

A task is what a paper adds on top of the loop: its prompts, its SFT targets, its rewards and its own
inference procedure. The loop, the entry points and the pipeline runner see tasks only through the two
protocols below; tasks are built from Hydra ``_target_``s, so the core never names a paper.

- ``EvalTask``: anything with an inference procedure to score (a first-stage baseline needs no model).
- ``TrainTask``: an ``EvalTask`` that can also be trained, by GRPO (``train_examples`` + ``score``) or by
  SFT (``sft_examples``). ``TaskBase`` gives what every task shares (its roles and their binding).

Capabilities. A task trains with a step type exactly when it has the methods that step calls
(``rankrl.rl.config.STEP_TYPES``): ``TaskBase`` derives ``trains`` from the class, so the check a run's
config passes before anything loads (``rankrl.config.check_trainable``) is true by construction. A task
with fewer capabilities than another is not its subclass with stubs: it shares the other's pieces
(settings, data, module functions) and defines only what it serves.

Roles. A method may train several policies that serve each other (one writes query keywords, another item
keywords). Each is a *role* with its own model, weights and run folders. A stage trains one role; the
others are frozen and reach the task as ``Generator``s through ``bind``. A single-policy task has the one
role ``"policy"``.

Spans. ``Scores.spans`` lets one completion carry several reward signals on different stretches of its
text: each span names a reward (N,) and, per completion, the character range it covers. The loop turns the
ranges into token masks, gives each span its own group-relative advantage and sums the span losses
(``rankrl.rl.spans``). Tokens inside no span (delimiters) count in neither the loss nor its normaliser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only (from __future__): the pipeline and configs import this module
    import torch

from rankrl.rollout.base import Generator, Messages

DEFAULT_ROLE = "policy"

CharRange = tuple[int, int]  # [start, end) in a completion's text


@dataclass(frozen=True)
class Example:
    """One training prompt.

    Args:
        uid: stable identifier.
        messages: the chat prompt.
        target: whatever the reward needs (a gold label, a relevant set ...).
    """

    uid: str
    messages: Messages
    target: Any = None


@dataclass(frozen=True)
class SFTExample:
    """One supervised pair: the loss is the NLL of ``completion`` given ``messages`` (the prompt is masked).

    Args:
        uid: stable identifier.
        messages: the chat prompt.
        completion: the assistant's target text.
    """

    uid: str
    messages: Messages
    completion: str


@dataclass
class Span:
    """A named stretch of every completion with its own reward.

    Args:
        rewards: (N,) the span's reward per completion.
        ranges: N character ranges ``(start, end)`` into each completion's text, or None where the
            completion has no such span (its tokens then get no gradient from this span).
        end_of_turn: whether the span also drives the end of turn (the empty tokens after the text's last
            character, e.g. the eos) in each completion where it has a range: the decision to stop is then
            credited with this span's reward. By default the end of turn is in no span.
    """

    rewards: torch.Tensor
    ranges: Sequence[CharRange | None]
    end_of_turn: bool = False


@dataclass
class Scores:
    """Rewards for N completions (N = examples x group size, prompt-major).

    Args:
        rewards: (N,) the scalar reward (logged; the advantage when there are no spans).
        format_ok: (N,) bool, whether the completion parsed.
        components: named (N,) reward parts, logged as ``reward/<name>``.
        metrics: task metrics of this batch (already averaged), logged as ``task/<name>``.
        spans: name -> ``Span``; when given, each span's tokens are driven by that span's advantage only.
    """

    rewards: torch.Tensor
    format_ok: torch.Tensor
    components: dict[str, torch.Tensor] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    spans: dict[str, Span] | None = None


@runtime_checkable
class EvalTask(Protocol):
    """Something whose inference procedure can be scored on a split."""

    name: str
    uses_model: bool
    roles: tuple[str, ...]

    def evaluate(
        self, generators: Mapping[str, Generator], split: str, limit: int | None = None
    ) -> dict[str, Any]:
        """Run inference on ``split`` (its first ``limit`` queries when set; smoke runs only) with one
        generator per role; return ``{"metrics": {...}, ...}``."""


@runtime_checkable
class TrainTask(EvalTask, Protocol):
    """A task the loop can train."""

    def bind(self, role: str, generators: Mapping[str, Generator]) -> None:
        """Called before a stage trains ``role``; ``generators`` serve the frozen roles."""

    def train_examples(self) -> list[Example]:
        """GRPO prompts of the bound role, in a fixed order (the loop shuffles them with its own seed)."""

    def sft_examples(self) -> list[SFTExample]:
        """Supervised pairs of the bound role."""

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> Scores:
        """Reward each completion; ``examples[i]`` is the prompt of ``completions[i]``."""

    def monitor(self, generators: Mapping[str, Generator]) -> dict[str, float]:
        """Cheap metrics on a fixed probe set, logged every ``monitor_every`` steps as ``monitor/<name>``."""


def capabilities(cls: type) -> frozenset[str]:
    """The step types ``cls`` can train with: those whose task methods (``STEP_TYPES``) it has."""
    from rankrl.rl.config import STEP_TYPES

    return frozenset(
        kind
        for kind, step in STEP_TYPES.items()
        if all(callable(getattr(cls, method, None)) for method in step.task_methods)
    )


class TaskBase:
    """What every task shares: its name, its roles and the binding of a stage's role to the others'
    generators. It offers no training method: a subclass defines those it serves, and its ``trains`` is
    derived from them (``capabilities``)."""

    name: ClassVar[str] = "task"
    uses_model: ClassVar[bool] = True
    roles: ClassVar[tuple[str, ...]] = (DEFAULT_ROLE,)
    # the step types the task trains with ("grpo": train_examples + score; "sft": sft_examples), derived
    # from its methods when the class is defined; checked when a training run's config is built
    # (rankrl.config.check_trainable). A class may declare fewer (never more) than it has methods for
    trains: ClassVar[frozenset[str]] = frozenset()

    role: str = DEFAULT_ROLE
    generators: Mapping[str, Generator] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        served = capabilities(cls)
        declared = cls.__dict__.get("trains")
        if declared is None:
            cls.trains = served
        elif not frozenset(declared) <= served:
            missing = sorted(frozenset(declared) - served)
            raise TypeError(
                f"{cls.__name__} declares trains={sorted(declared)}, without the methods of {missing} "
                "(rankrl.rl.config.STEP_TYPES)"
            )

    def bind(self, role: str, generators: Mapping[str, Generator]) -> None:
        if role not in self.roles:
            raise ValueError(f"task {self.name!r} has no role {role!r}; its roles: {', '.join(self.roles)}")
        self.role, self.generators = role, dict(generators)

    def monitor(self, generators: Mapping[str, Generator]) -> dict[str, float]:
        """No probe metrics unless a task defines them."""
        return {}
