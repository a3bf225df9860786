"""What the READMEs tell a user to type names things that exist: every ``experiment=<name>`` composes, and
every experiment or run folder written as ``<paper>/<name>`` is an experiment file (or a stage of one)."""

from __future__ import annotations

import re
from fnmatch import fnmatch

import pytest

from rankrl.config import REPO_ROOT
from tests.conftest import compose, experiment_names

READMES = sorted([REPO_ROOT / "README.md", *REPO_ROOT.glob("experiments/*/README.md")])
PAPERS = ("rankr1", "grape", "fgrpo", "cogr", "core")
# bad-input examples the README shows on purpose (they must fail, and tests/config checks that they do)
ON_PURPOSE = {"rankr1/nope"}
ASSIGNED = re.compile(r"experiment=([A-Za-z0-9_.\-/]+)")
# a backticked name that starts like an experiment: `rankr1/setwise_dl19`, `fgrpo/fgrpo_movielens/sft`
QUOTED = re.compile(r"`((?:{})/[^`\s]+)`".format("|".join(PAPERS)))


def _named(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """(readme, name) of every match; placeholders such as `experiment=...` name nothing and are left out."""
    found = {
        (path.relative_to(REPO_ROOT).as_posix(), m.group(1).rstrip(".,:;)"))
        for path in READMES
        for m in pattern.finditer(path.read_text())
    }
    return sorted((readme, name) for readme, name in found if "/" in name)


def test_the_readmes_are_read():
    # the parametrized tests below run once per name found: none found would pass them all unseen
    assert len(READMES) >= 5 and len(_named(ASSIGNED)) >= 10 and len(_named(QUOTED)) >= 5


@pytest.mark.parametrize("readme,name", [n for n in _named(ASSIGNED) if n[1] not in ON_PURPOSE])
def test_every_experiment_a_readme_assigns_composes(readme: str, name: str):
    assert name in experiment_names(), (
        f"{readme} names experiment={name}, which is no file in conf/experiment/"
    )
    compose("train", [f"experiment={name}"])


@pytest.mark.parametrize("readme,name", _named(QUOTED))
def test_every_quoted_experiment_or_stage_exists(readme: str, name: str):
    """`<experiment>` or `<experiment>/<stage or sweep value>` (a run folder's name), a pattern that matches
    one (`grape/cpu_*`, `fgrpo/{zeroshot,twostep}`), or a path in the repo."""
    assert names_something(name, experiment_names() + _report_names()), (
        f"{readme} names `{name}`, which is neither an experiment in conf/experiment/, a run folder of one, "
        "a pattern matching one, a run the tables read, nor a path in the repository"
    )


def names_something(name: str, known: list[str]) -> bool:
    """Whether a name a README quotes is a path in the repo, a known experiment or a run folder of one, or a
    pattern (``*``, ``{a,b}``) every expansion of which matches one."""
    if (REPO_ROOT / name).exists():
        return True
    if any(ch in name for ch in "*{"):
        return all(any(fnmatch(k, p) for k in known) for p in _braces(name))
    parts = name.split("/")
    return any("/".join(parts[:k]) in known for k in range(2, len(parts) + 1))


def _braces(pattern: str) -> list[str]:
    """Shell brace expansion of the first ``{a,b}`` (recursively), the way a README reader types it."""
    found = re.search(r"\{([^{}]*)\}", pattern)
    if found is None:
        return [pattern]
    head, tail = pattern[: found.start()], pattern[found.end() :]
    return [x for alt in found.group(1).split(",") for x in _braces(head + alt + tail)]


def _report_names() -> list[str]:
    """Run names the tables and figures read (sweep points such as fgrpo/sweep_lam/lam0.5 are runs of their
    own)."""
    specs = [*REPO_ROOT.glob("experiments/*/tables.yaml"), *REPO_ROOT.glob("experiments/*/figures.yaml")]
    return sorted(
        {m.group(1) for p in specs for m in re.finditer(r"experiments?: ([\w./-]+)", p.read_text())}
        | {
            m.group(1)
            for p in specs
            for m in re.finditer(r": ((?:{})/[\w./-]+)".format("|".join(PAPERS)), p.read_text())
        }
    )


def test_a_pattern_in_a_readme_must_match_an_experiment():
    """Patterns like `grape/cpu_*` are allowed where a README quotes one, but they must match something:
    the check on its own, since no README quotes one today (it was a loop over an empty list)."""
    known = experiment_names()
    assert names_something("grape/cpu_*", known) and names_something("fgrpo/{zeroshot,twostep}", known)
    assert not names_something("grape/nothing_*", known)
    assert not names_something("fgrpo/{zeroshot,nothing}", known)  # every expansion must match
    assert _braces("a/{b,c}_{d,e}") == ["a/b_d", "a/b_e", "a/c_d", "a/c_e"]
