"""A synthetic task that shows the GRPO loop learns: reward = share of words that start with a vowel.

Not a paper. It needs no data and no retriever, a random policy already earns a little reward with
some spread inside each group (so advantages are non-zero), and the policy can raise it just by shifting
its output distribution, which a tiny model does within a few CPU steps.
"""

from __future__ import annotations

import random
import re
from typing import Any, Sequence

import torch

from rankrl.rollout.base import Generator
from rankrl.tasks.base import Example, Scores

VOWELS = frozenset("aeiou")
_WORD = re.compile(r"[A-Za-z]+")
_TOPICS = [
    "the sea",
    "a city",
    "music",
    "winter",
    "a garden",
    "old maps",
    "trains",
    "the moon",
    "bread",
    "rivers",
    "a library",
    "birds",
    "mountains",
    "coffee",
    "rain",
    "chess",
]


def vowel_word_reward(text: str) -> tuple[float, bool]:
    """Share of alphabetic words in ``text`` starting with a vowel, and whether there was any word.

    >>> vowel_word_reward("an owl eats mice")
    (0.75, True)
    >>> vowel_word_reward("123 !!")
    (0.0, False)
    """
    words = _WORD.findall(text)
    if not words:
        return 0.0, False
    return sum(w[0].lower() in VOWELS for w in words) / len(words), True


def _prompt(topic: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Write a few words about {topic}."}]


class VowelWordsTask:
    """Prompts "Write a few words about <topic>"; the reward is ``vowel_word_reward``.

    Args:
        num_train_prompts: training prompts (topics cycled, numbered so each prompt is distinct).
        num_eval_prompts: evaluation prompts, disjoint from the training ones.
        seed: shuffles the topic order.
    """

    name = "vowels"

    def __init__(self, num_train_prompts: int = 64, num_eval_prompts: int = 16, seed: int = 0) -> None:
        topics = list(_TOPICS)
        random.Random(seed).shuffle(topics)
        self._train = [f"{topics[i % len(topics)]} ({i})" for i in range(num_train_prompts)]
        self._eval = [f"{topics[i % len(topics)]} (eval {i})" for i in range(num_eval_prompts)]

    def train_examples(self) -> list[Example]:
        return [Example(uid=f"train-{i}", messages=_prompt(t)) for i, t in enumerate(self._train)]

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> Scores:
        pairs = [vowel_word_reward(c) for c in completions]
        rewards = torch.tensor([r for r, _ in pairs], dtype=torch.float32)
        ok = torch.tensor([o for _, o in pairs], dtype=torch.bool)
        return Scores(rewards=rewards, format_ok=ok, metrics={"vowel_share": rewards.mean().item()})

    def evaluate(self, generate: Generator, split: str = "test") -> dict[str, Any]:
        prompts = [_prompt(t) for t in (self._eval if split != "train" else self._train)]
        gens = generate(prompts)
        rewards = [vowel_word_reward(g.text)[0] for g in gens]
        return {
            "metrics": {"vowel_share": sum(rewards) / len(rewards)},
            "cost": {"calls": len(gens), "completion_tokens": sum(g.completion_tokens for g in gens)},
        }
