"""Writers of small files in real formats for the data tests.

The real data comes from the ``data_dir`` fixture (tests/conftest.py): the folder `make data` prepared.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path


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
