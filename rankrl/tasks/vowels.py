"""A synthetic task that shows the GRPO loop learns: reward = share of words that start with a vowel.

Not a paper. It needs no data and no retriever, a random policy already earns a little reward with
some spread inside each group (so advantages are non-zero), and the policy can raise it just by shifting
its output distribution, which a tiny model does within a few CPU steps.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rankrl.rollout.base import Generator
from rankrl.tasks.base import Example, Scores, SFTExample, TaskBase

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


_VOWEL_WORDS = ("an", "apple", "eats", "old", "owls", "under", "ice", "is", "open", "art", "ever", "up")


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


class VowelWordsTask(TaskBase):
    """Prompts "Write a few words about <topic>"; the reward is ``vowel_word_reward``.

    Args (no defaults for the counts: conf/task/vowels.yaml and vowel_relay.yaml hold them):
        num_train_prompts: training prompts (topics cycled, numbered so each prompt is distinct).
        num_eval_prompts: evaluation prompts, disjoint from the training ones.
        seed: shuffles the topic order.
    """

    trains = frozenset({"grpo", "sft"})

    name = "vowels"

    def __init__(self, num_train_prompts: int, num_eval_prompts: int, seed: int = 0) -> None:
        topics = list(_TOPICS)
        random.Random(seed).shuffle(topics)
        self._train = [f"{topics[i % len(topics)]} ({i})" for i in range(num_train_prompts)]
        self.seed = seed
        self._eval = [f"{topics[i % len(topics)]} (eval {i})" for i in range(num_eval_prompts)]

    def train_examples(self) -> list[Example]:
        return [Example(uid=f"train-{i}", messages=_prompt(t)) for i, t in enumerate(self._train)]

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> Scores:
        pairs = [vowel_word_reward(c) for c in completions]
        rewards = torch.tensor([r for r, _ in pairs], dtype=torch.float32)
        ok = torch.tensor([o for _, o in pairs], dtype=torch.bool)
        return Scores(rewards=rewards, format_ok=ok, metrics={"vowel_share": rewards.mean().item()})

    def sft_examples(self) -> list[SFTExample]:
        """Targets made only of vowel-initial words, so SFT alone raises the reward."""
        words = sorted(w for w in _VOWEL_WORDS)
        rng = random.Random(self.seed)
        return [
            SFTExample(uid=f"sft-{i}", messages=_prompt(t), completion=" ".join(rng.sample(words, 3)))
            for i, t in enumerate(self._train)
        ]

    def monitor(self, generators: Mapping[str, Generator]) -> dict[str, float]:
        """Vowel share of greedy completions on the first 4 evaluation prompts (a fixed probe set)."""
        gens = generators[self.role]([_prompt(t) for t in self._eval[:4]])
        return {"vowel_share": sum(vowel_word_reward(g.text)[0] for g in gens) / len(gens)}

    def evaluate(
        self, generators: Mapping[str, Generator], split: str = "test", limit: int | None = None
    ) -> dict[str, Any]:
        import pandas as pd

        topics = list(self._eval if split != "train" else self._train)[:limit]
        gens = generators[self.role]([_prompt(t) for t in topics])
        rewards = [vowel_word_reward(g.text)[0] for g in gens]
        return {
            "metrics": {"vowel_share": sum(rewards) / len(rewards)},
            "cost": {"calls": len(gens), "completion_tokens": sum(g.completion_tokens for g in gens)},
            "per_query": pd.DataFrame({"vowel_share": rewards}, index=pd.Index(topics, name="qid")),
        }


class VowelRelayTask(VowelWordsTask):
    """Two roles that serve each other, for checking multi-policy training: ``lead`` writes a few words about
    a topic, ``follow`` continues the lead's greedy text. Each role's reward is its own vowel share. Not a
    paper: it exercises roles, frozen generators and alternating stages on the tiny model.
    """

    name = "vowel_relay"
    roles = ("lead", "follow")

    def bind(self, role: str, generators: Mapping[str, Generator]) -> None:
        super().bind(role, generators)
        self._leads: dict[str, str] = {}
        if role == "follow":  # the frozen lead writes what the follower continues
            topics = list(self._train)
            self._leads = dict(
                zip(topics, (g.text for g in generators["lead"]([_prompt(t) for t in topics])))
            )

    def train_examples(self) -> list[Example]:
        if self.role == "lead":
            return super().train_examples()
        return [
            Example(uid=f"follow-{i}", messages=_follow_prompt(self._leads[t]))
            for i, t in enumerate(self._train)
        ]

    def sft_examples(self) -> list[SFTExample]:
        pairs = super().sft_examples()
        if self.role == "lead":
            return pairs
        return [SFTExample(p.uid, _follow_prompt(p.completion), p.completion) for p in pairs]

    def monitor(self, generators: Mapping[str, Generator]) -> dict[str, float]:
        return self.evaluate(generators, "test", limit=4)["metrics"]

    def evaluate(
        self, generators: Mapping[str, Generator], split: str = "test", limit: int | None = None
    ) -> dict[str, Any]:
        topics = (self._eval if split != "train" else self._train)[:limit]
        leads = [g.text for g in generators["lead"]([_prompt(t) for t in topics])]
        follows = [g.text for g in generators["follow"]([_follow_prompt(text) for text in leads])]
        share = lambda texts: sum(vowel_word_reward(t)[0] for t in texts) / max(len(texts), 1)  # noqa: E731
        return {"metrics": {"lead_vowel_share": share(leads), "follow_vowel_share": share(follows)}}


def _follow_prompt(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Continue this text: {text}"}]
