"""The seam between the shared GRPO loop and a paper's method.

A task supplies training prompts, scores completions, and runs its own inference procedure for
evaluation. The trainer and evaluator only see this interface; tasks are built from Hydra
``_target_``s, so the core never names a paper.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import torch

from rankrl.rollout.base import Generator, Messages


@dataclass(frozen=True)
class Example:
    """One training prompt.

    Args:
        uid: stable identifier (used for grouping and for the data position in checkpoints).
        messages: the chat prompt.
        target: whatever the reward needs (a gold label, a relevant set ...).
    """

    uid: str
    messages: Messages
    target: Any = None


@dataclass
class Scores:
    """Rewards for N completions (N = examples x group size, prompt-major).

    Args:
        rewards: (N,) scalar reward used for the sequence-level advantage.
        format_ok: (N,) bool, whether the completion parsed.
        components: named (N,) reward parts, for logging and for tasks that give token spans
            their own advantages.
        metrics: task metrics to log for this batch (already averaged).
    """

    rewards: torch.Tensor
    format_ok: torch.Tensor
    components: dict[str, torch.Tensor] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


class Task(Protocol):
    """A paper's method as the loop sees it."""

    def train_examples(self) -> list[Example]:
        """The training prompts, in a fixed order (the trainer shuffles them with its own seed)."""

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> Scores:
        """Reward each completion; ``examples[i]`` is the prompt of ``completions[i]``."""

    def evaluate(self, generate: Generator, split: str) -> dict[str, Any]:
        """Run the task's inference on a split and return ``{"metrics": {...}, ...}``."""
