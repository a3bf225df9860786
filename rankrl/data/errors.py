"""The two ways a data file can be wrong, each with a message that says how to fix it.

Loaders never let a ``KeyError`` from deep inside ``json`` or ``pandas`` escape: a user seeing
one cannot tell which of several files is broken. Both errors name the file.
"""

from __future__ import annotations

from pathlib import Path


def fetch_command(benchmark: str | None) -> str:
    """The command that (re)creates a benchmark's files under the data folder."""
    only = f" --only {benchmark}" if benchmark else ""
    return f"`make data` (or `python -m rankrl.data.prepare{only}`)"


class MissingDataError(FileNotFoundError):
    """A file a loader needs is not there.

    Args:
        path: the missing file.
        benchmark: the benchmark being loaded, for the ``--only`` hint.
        hint: extra advice, e.g. where files that no download step can fetch come from.
    """

    def __init__(self, path: str | Path, benchmark: str | None = None, hint: str = "") -> None:
        self.path, self.benchmark, self.hint = Path(path), benchmark, hint
        message = f"missing data file {self.path}; run {fetch_command(benchmark)} to fetch it"
        if hint:
            message += f". {hint}"
        super().__init__(message)
        self.filename = str(self.path)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self):
        # Rebuild from the parts, not from the message (pickling, multiprocessing, deepcopy).
        return type(self), (self.path, self.benchmark, self.hint)


class MalformedDataError(ValueError):
    """A file exists but cannot be parsed as the format its loader expects.

    Args:
        path: the broken file.
        problem: what was wrong (a missing column, a bad line number ...).
    """

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path, self.problem = Path(path), problem
        super().__init__(
            f"malformed data file {self.path}: {problem}. If it was cut short or replaced, delete it and "
            f"run {fetch_command(None)} again"
        )

    def __reduce__(self):
        return type(self), (self.path, self.problem)
