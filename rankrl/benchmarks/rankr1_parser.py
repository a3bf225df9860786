"""Rank-R1 answer parsing: the linear scan (``rankr1._find_answer``) against the official regex.

The input is the degenerate completion a looping policy writes, ``<think>x</think><answer>`` repeated with
no closing ``</answer>``: the official ``re.search(<think>.*?</think>\\s*<answer>(.*?)</answer>, DOTALL)``
backtracks over every (``<think>``, ``</think>``) pair and scans to the end for each, about cubic time.
Sizes are in SmolLM2 tokens (the tiny and smollm2-135m models' tokenizer): one repeat is 8 tokens.

The official regex runs only on the two shorter inputs (about 2.5 s together on one CPU core), or not at all
past ``--official-budget`` seconds; on the longer ones its time is extrapolated from those two by the fitted
power law and labelled so. Every input it runs on must give our result, or the benchmark fails.

CLI: ``python -m rankrl.benchmarks.rankr1_parser [--repeats N] [--official-budget SECONDS]``
"""

from __future__ import annotations

import math
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from rankrl.benchmarks import argument_parser
from rankrl.tasks.rankr1 import OFFICIAL_PATTERN, _find_answer

UNIT = "<think>x</think><answer>"
TOKENS_PER_UNIT = 8  # measured: SmolLM2's tokenizer turns UNIT * 400 into 3,200 tokens
SIZES = (1_600, 3_200, 20_000)  # tokens
OFFICIAL_SIZES = (1_600, 3_200)  # where the official regex really runs


@dataclass
class Row:
    tokens: int
    chars: int
    ours_s: float
    official_s: float | None
    official_how: str  # "measured", "extrapolated" or "skipped"

    @property
    def ratio(self) -> float | None:
        return self.official_s / self.ours_s if self.official_s is not None and self.ours_s > 0 else None


def degenerate(tokens: int) -> str:
    return UNIT * (tokens // TOKENS_PER_UNIT)


def best_time(fn: Callable[[], object], repeats: int) -> float:
    best = math.inf
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def official(text: str) -> str | None:
    match = re.search(OFFICIAL_PATTERN, text, re.DOTALL)
    return match.group(1) if match else None


def run(repeats: int = 5, official_budget: float = 30.0) -> list[Row]:
    rows: list[Row] = []
    spent = 0.0
    for tokens in SIZES:
        text = degenerate(tokens)
        ours_s = best_time(lambda text=text: _find_answer(text, think=True), repeats)
        official_s, how = None, "skipped"
        if tokens in OFFICIAL_SIZES and spent < official_budget:
            start = time.perf_counter()
            expected = official(text)  # one run: it is the slow side
            official_s = time.perf_counter() - start
            spent += official_s
            how = "measured"
            got = _find_answer(text, think=True)
            if got != expected:
                raise AssertionError(f"linear scan {got!r} != official regex {expected!r} at {tokens} tokens")
        rows.append(Row(tokens, len(text), ours_s, official_s, how))
    measured = [r for r in rows if r.official_how == "measured"]
    if len(measured) >= 2:  # power law through the two largest measured sizes
        a, b = measured[-2], measured[-1]
        exponent = math.log(b.official_s / a.official_s) / math.log(b.tokens / a.tokens)
        for r in rows:
            if r.official_how == "skipped" and r.tokens > b.tokens:
                r.official_s = b.official_s * (r.tokens / b.tokens) ** exponent
                r.official_how = f"extrapolated (~n^{exponent:.1f})"
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        f"{'tokens':>7} {'chars':>7} {'ours (s)':>10} {'official regex (s)':>19} {'ratio':>10}  official",
        f"{'-' * 7} {'-' * 7} {'-' * 10} {'-' * 19} {'-' * 10}  {'-' * 24}",
    ]
    for r in rows:
        official_s = f"{r.official_s:.3g}" if r.official_s is not None else "-"
        ratio = f"{r.ratio:,.0f}x" if r.ratio is not None else "-"
        lines.append(
            f"{r.tokens:>7,} {r.chars:>7,} {r.ours_s:>10.2e} {official_s:>19} {ratio:>10}  {r.official_how}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser(__spec__, __doc__)
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of our parser (the best counts)")
    parser.add_argument(
        "--official-budget",
        type=float,
        default=30.0,
        help="seconds after which the official regex is not started again",
    )
    args = parser.parse_args(argv)
    print(f"input: {UNIT!r} repeated, no closing </answer>; {TOKENS_PER_UNIT} SmolLM2 tokens per repeat")
    print(table(run(args.repeats, args.official_budget)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
