"""Writers of small files in real formats for the data tests, and a toy item catalog.

The real data comes from the ``data_dir`` fixture (tests/conftest.py): the folder `make data` prepared.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from rankrl.data.catalogs import Catalog
from rankrl.data.records import Document, Query


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


# ---- a toy item catalog (rankrl.data.catalogs), shared by the catalog, CoGR and cutoff-baseline tests ------

ITEMS = {
    "i1": Document("i1", "a grey sofa bed for small rooms", "Sofa Bed"),
    "i2": Document("i2", "leather sofa with recliner", "Leather Sofa"),
    "i3": Document("i3", "brass desk lamp", "Desk Lamp"),
    "i4": Document("i4", "floor lamp, arc shape", "Arc Floor Lamp"),
    "i5": Document("i5", "oak dining table", "Dining Table"),
    "i6": Document("i6", "passage without a title"),
}
QUERIES = {q: Query(q, t) for q, t in [("q1", "sofa bed"), ("q2", "lamp"), ("q3", "table"), ("q4", "couch")]}
RELEVANT = {
    "q1": frozenset({"i1"}),
    "q2": frozenset({"i3", "i4"}),
    "q3": frozenset({"i5"}),
    "q4": frozenset({"i1", "i2"}),
}
SPLITS = {"train": ["q1", "q2", "q3"], "validation": ["q4"]}


def toy_catalog() -> Catalog:
    """Six items (one without a title), three training queries and one validation query ("couch", which
    shares no word with any item)."""
    return Catalog("toy", dict(ITEMS), dict(QUERIES), dict(RELEVANT), {k: list(v) for k, v in SPLITS.items()})
