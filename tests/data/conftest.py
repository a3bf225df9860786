"""Fixtures of the data tests: the shared real-data copy, and writers of small files in real formats."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

SHARED_DEFAULT = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The read-only shared data copy (``RANKRL_SHARED_DATA`` overrides ``../shared/data``)."""
    path = Path(os.environ.get("RANKRL_SHARED_DATA", SHARED_DEFAULT))
    if not (path / "trec_dl").is_dir():
        pytest.skip(f"no shared data copy at {path} (set RANKRL_SHARED_DATA)")
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    """Write JSON lines (gzipped when the name ends in .gz)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def write_text(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding=encoding)
    return path
