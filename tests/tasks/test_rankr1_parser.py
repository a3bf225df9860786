"""Rank-R1's answer parser: the linear scan gives exactly the official regex's result, and stays fast on
degenerate outputs (``python -m rankrl.benchmarks.rankr1_parser`` measures it; nothing here asserts on
time)."""

from __future__ import annotations

import random
import re

import pytest

from rankrl.tasks import rankr1
from rankrl.tasks.rankr1 import (
    OFFICIAL_PATTERN,
    OFFICIAL_PLAIN_PATTERN,
    PROMPTS,
    parse_answer,
    rank_r1_reward,
)

UNIT = "<think>x</think><answer>"
PIECES = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",  # whole tags
    "<",
    ">",
    "/",
    "think",
    "answer",
    "<think",
    "</think",
    "<answer",
    "</answer",
    "think>",
    "answer>",
    "<THINK>",
    "</Think>",
    "<ANSWER>",
    "</ANSWER>",  # case: the lower-cased search sees these as tags
    "[",
    "]",
    "[3]",
    "[12]",
    "(",
    ")",
    ".*",
    "\\s",
]
# whitespace (ASCII and Unicode: \s), digits, letters; "\u0130" and the Kelvin sign change length or letter
# when lower-cased
CHARS = list(" \t\n\r\f\v\x1c\x85\xa0\u2028\u3000") + list("0123456789") + list("xyzXYZ\u0130\u212a")


def official_span(text: str, reasoning: bool, lower: bool) -> str | None:
    """What the module did before the linear scan: group 1 of re.search, stripped."""
    pattern = OFFICIAL_PATTERN if reasoning else OFFICIAL_PLAIN_PATTERN
    match = re.search(pattern, text.lower() if lower else text, re.DOTALL)
    return match.group(1).strip() if match else None


def official_parse(text: str, num_candidates: int, reasoning: bool) -> int | None:
    span = official_span(text, reasoning, lower=True)
    labels = [f"[{i + 1}]" for i in range(num_candidates)]
    return labels.index(span) if span in labels else None


def official_reward(text: str, gold_index: int, reasoning: bool) -> float:
    return float(official_span(text, reasoning, lower=False) == f"[{gold_index + 1}]")


def fuzz_strings(n: int, seed: int) -> list[str]:
    """Half free sequences of pieces and characters, half the tag skeleton ``<think> </think> <answer>
    </answer>`` with random fillers and each tag dropped, swapped or doubled now and then (near misses)."""
    rng = random.Random(seed)

    def filler(k: int, tag_share: float) -> str:
        return "".join(
            rng.choice(PIECES) if rng.random() < tag_share else rng.choice(CHARS)
            for _ in range(rng.randrange(k))
        )

    out = []
    for i in range(n):
        tag_share = rng.choice([0.1, 0.3, 0.6, 0.9])
        if i % 2:
            out.append(filler(24, tag_share))
            continue
        parts = [filler(3, tag_share)]
        for tag in ("<think>", "</think>", "<answer>", "</answer>"):
            roll = rng.random()
            tag = "" if roll < 0.07 else rng.choice(PIECES) if roll < 0.14 else tag * 2 if roll < 0.2 else tag
            parts += [tag, filler(4, tag_share)]
        out.append("".join(parts))
    return out


def test_official_patterns_are_the_prompts_ones():
    assert PROMPTS[True]["pattern"] == OFFICIAL_PATTERN
    assert PROMPTS[False]["pattern"] == OFFICIAL_PLAIN_PATTERN


def test_linear_scan_equals_official_regex_on_fuzzed_strings():
    """Differential test: 12,000 seeded short strings of tag pieces, whitespace, brackets, digits, letters."""
    matched = {True: 0, False: 0}
    for text in fuzz_strings(12_000, seed=1234):
        for reasoning in (True, False):
            for lower in (True, False):
                expected = official_span(text, reasoning, lower)
                assert rankr1._answer_span(text, reasoning, lower) == expected, (text, reasoning, lower)
                matched[reasoning] += expected is not None
            for c in (1, 3, 5, 20):
                assert parse_answer(text, c, reasoning) == official_parse(text, c, reasoning), (text, c)
            for gold in (0, 2, 11):
                assert rank_r1_reward(text, gold, reasoning) == official_reward(text, gold, reasoning), text
    assert min(matched.values()) > 1_000, matched  # the generator does reach the matching branches


def test_raw_group_equals_official_group_before_strip():
    """The unstripped group 1 too, with whitespace-heavy strings (``\\s`` vs ``str.strip`` differences)."""
    for text in fuzz_strings(3_000, seed=99):
        for reasoning, pattern in ((True, OFFICIAL_PATTERN), (False, OFFICIAL_PLAIN_PATTERN)):
            match = re.search(pattern, text, re.DOTALL)
            assert rankr1._find_answer(text, think=reasoning) == (match.group(1) if match else None), text


@pytest.mark.parametrize(
    "text, think, group",
    [
        ("<think>a</think> \n\t<answer> [2] </answer>", True, " [2] "),
        ("<think>a</think>\u3000<answer>[2]</answer>", True, "[2]"),  # \s is Unicode whitespace
        ("<think><think></think><answer>[1]</answer>", True, "[1]"),  # nested open: the first one starts
        ("<think>a</think>b</think><answer>[4]</answer>", True, "[4]"),  # a later </think> fits
        ("<think>a</think><answer><answer>[1]</answer></answer>", True, "<answer>[1]"),
        (
            "<think>a</think><answer>[1]<think>b</think><answer>[2]</answer>",
            True,
            "[1]<think>b</think><answer>[2]",
        ),
        ("<think></think><answer></answer>", True, ""),
        ("<think>a</think><answer>[1]", True, None),  # unclosed answer
        ("<think>a<answer>[1]</answer>", True, None),  # unclosed think
        ("</think><answer>[1]</answer><think>", True, None),  # tags in the wrong order
        ("<answer>[1]</answer><answer>[2]</answer>", False, "[1]"),
        ("<answer><answer>[1]</answer>", False, "<answer>[1]"),
    ],
)
def test_known_cases_match_the_regex(text, think, group):
    match = re.search(OFFICIAL_PATTERN if think else OFFICIAL_PLAIN_PATTERN, text, re.DOTALL)
    assert (match.group(1) if match else None) == group
    assert rankr1._find_answer(text, think) == group


def test_degenerate_completion_of_20k_tokens():
    """``<think>x</think><answer>`` x 5,000 (40,000 SmolLM2 tokens): the official regex would take minutes."""
    text = UNIT * 5_000
    assert parse_answer(text, 20) is None
    assert rank_r1_reward(text, 2) == 0.0
    closed = text + "[3]</answer>"  # closed at the very end: one huge answer, not a label
    assert rankr1._find_answer(closed, think=True) == UNIT * 4_999 + "[3]"
    assert parse_answer(closed, 20) is None and rank_r1_reward(closed, 2) == 0.0
    assert parse_answer("<answer>" * 5_000, 20, reasoning=False) is None  # quadratic for the plain regex


def test_long_valid_completion_parses_like_the_regex():
    """Many ``</think>`` that do not fit, then one that does: fast for the regex too, so compare directly."""
    text = "<think>x</think>" * 5_000 + " \n<answer> [3] </answer>" + UNIT * 100
    assert parse_answer(text, 20) == official_parse(text, 20, True) == 2
    assert rank_r1_reward(text, 2) == official_reward(text, 2, True) == 1.0


def test_never_raises_on_non_strings():
    for value in (None, 3, b"<think>x</think><answer>[1]</answer>", ["<answer>[1]</answer>"]):
        assert parse_answer(value, 5) is None  # type: ignore[arg-type]
        assert rank_r1_reward(value, 0) == 0.0  # type: ignore[arg-type]
