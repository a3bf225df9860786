"""The interface every generation engine implements.

The trainer needs token ids (to recompute log-probs under the policy) and the sampler's own log-probs
(for the importance ratio of the first update, and to measure the engine/trainer mismatch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # annotations only: configs import this module, and torch costs ~2 s to import
    import torch

Messages = list[dict[str, str]]


@dataclass
class SamplingParams:
    """How to sample completions.

    Args:
        max_new_tokens: completion budget in tokens.
        temperature: 0 means greedy.
        top_p: nucleus mass.
        top_k: 0 disables top-k.
        stop: strings that end a completion (the stop string is kept in the text).
    """

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()


@dataclass
class Rollouts:
    """G completions for each of B prompts, flattened prompt-major: row i*G+g is sample g of prompt i.

    Args:
        prompt_ids: B*G token-id lists (repeated per sample so rows align).
        completion_ids: B*G token-id lists, stop/eos included, no padding.
        logprobs: B*G lists of the sampler's log-prob of each completion token.
        texts: B*G decoded completions (special tokens removed).
        group_size: G.
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[list[float]]
    texts: list[str]
    group_size: int
    stats: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)


class RolloutEngine(Protocol):
    """Generates completions for chat prompts and follows the policy's weights."""

    def generate(self, prompts: Sequence[Messages], n: int, sampling: SamplingParams) -> Rollouts:
        """Sample ``n`` completions for each prompt."""

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Make the engine sample from ``model``'s current weights."""


@dataclass(frozen=True)
class Generation:
    """One completion returned to inference code, with its token cost."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Generator(Protocol):
    """What inference procedures (heap sort, slate+rank, rewriting) call: one completion per prompt.

    Sampling settings are bound when the generator is built (see ``engine_generator``), so task code
    never depends on an engine.
    """

    def __call__(self, prompts: Sequence[Messages]) -> list[Generation]: ...


def engine_generator(engine: RolloutEngine, sampling: SamplingParams) -> Generator:
    """Bind an engine and sampling settings into a ``Generator``."""

    def generate(prompts: Sequence[Messages]) -> list[Generation]:
        if not prompts:
            return []
        out = engine.generate(prompts, n=1, sampling=sampling)
        return [
            Generation(text=t, prompt_tokens=len(p), completion_tokens=len(c))
            for t, p, c in zip(out.texts, out.prompt_ids, out.completion_ids)
        ]

    return generate


def with_progress(generate: Generator, desc: str) -> Generator:
    """``generate`` with a progress bar on stderr that counts completions (an evaluation's total is often
    unknown in advance, e.g. a heap sort's comparisons, so the bar shows the count and the rate)."""
    from tqdm.auto import tqdm

    bar = None  # opened at the first call: a training run builds its generators long before it evaluates

    def counted(prompts: Sequence[Messages]) -> list[Generation]:
        nonlocal bar
        if bar is None:
            bar = tqdm(desc=desc, unit=" completions", mininterval=10, dynamic_ncols=True)
        out = generate(prompts)
        bar.update(len(out))
        return out

    return counted
