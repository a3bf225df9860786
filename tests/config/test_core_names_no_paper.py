"""The shared core never names a paper (STYLE.md 5): a paper's words live in its task module
(rankrl/tasks/<paper>.py), its experiments and its data and report catalogs, and the core that every paper
runs on describes itself in its own terms. A docstring that says "so CoGR's rounds line up" reads as if
the tracker served one paper, and it stops being true the day a second one uses it."""

from __future__ import annotations

import re

from rankrl.config import REPO_ROOT

PACKAGE = REPO_ROOT / "rankrl"
# the core: the loop, rollouts, retrievers, metrics, and the entry points' own modules. data/ and report/
# hold per-paper catalogs (a benchmark's source, a table's rows), tasks/ the papers, benchmarks/ speed
# checks of one paper's hot path each
CORE_FOLDERS = ("rl", "rollout", "retrieval", "eval")
# top-level modules still naming a paper in their usage examples (issue 42, other owners): the lead removes
# each once its owner has rewritten it
NOT_YET: set[str] = set()  # core modules not yet scanned (none left)
PAPER = re.compile(r"CoGR|F-GRPO|FGRPO|GRAPE|Rank-R1|RankR1|Surana|\b(?:cogr|fgrpo|grape|rankr1)\b")


def core_modules() -> list:
    modules = [p for folder in CORE_FOLDERS for p in sorted((PACKAGE / folder).rglob("*.py"))]
    return modules + [p for p in sorted(PACKAGE.glob("*.py")) if p.name not in NOT_YET]


def test_the_core_names_no_paper() -> None:
    modules = core_modules()
    assert len(modules) > 30, [str(p) for p in modules]  # the folders exist: the scan reads something
    found = [
        f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}"
        for path in modules
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if PAPER.search(line)
    ]
    assert not found, "the shared core names a paper:\n" + "\n".join(found)


def test_the_scan_sees_a_paper_name() -> None:
    """The pattern matches the words it exists to find (a scan that matches nothing passes anything)."""
    for line in ("so CoGR's rounds line up", "F-GRPO's delimiters", "(GRAPE's CLIP)", "import rankr1"):
        assert PAPER.search(line), line
    assert not PAPER.search("a query and an item policy that serve each other")
