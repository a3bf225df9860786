"""Benchmarks behind ``make bench``: each measures one piece against a named alternative in the same run
and reports the ratio. Run one with ``python -m rankrl.benchmarks.<name>``."""

from __future__ import annotations

import argparse
from importlib.machinery import ModuleSpec


def argument_parser(spec: ModuleSpec | None, doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line, named as it is run (``python -m <module>``) and described by the first line
    of its docstring; pass the module's ``__spec__`` and ``__doc__``."""
    return argparse.ArgumentParser(
        prog=f"python -m {spec.name}" if spec else None, description=doc.splitlines()[0]
    )
