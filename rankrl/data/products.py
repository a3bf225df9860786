"""WANDS (Wayfair ANnotation DataSet) product search, CoGR's benchmark.

Three tab-separated files with a header line (``wayfair/WANDS``, ``dataset/``):
- ``query.csv``: ``query_id, query, query_class`` (480 queries);
- ``product.csv``: ``product_id, product_name, product_class, category_hierarchy,
  product_description, product_features, rating_count, average_rating, review_count`` (42,994);
- ``label.csv``: ``id, query_id, product_id, label`` with label ``Exact``, ``Partial`` or ``Irrelevant``.

Grades: Exact = 2, Partial = 1, Irrelevant = 0; binary measures and CoGR's set F1 count both Exact
and Partial as relevant (``relevance_level=1``). Queries are split 430 train / 50 test by a seeded
shuffle, the sizes CoGR uses (its exact query ids are not published).
"""

from __future__ import annotations

from pathlib import Path

from rankrl.data.common import parsing, require, split_ids
from rankrl.data.errors import MalformedDataError
from rankrl.data.records import Benchmark, Document, Query

WANDS_DIR = "wands"
LABEL_GRADES = {"Exact": 2, "Partial": 1, "Irrelevant": 0}
PRODUCT_COLUMNS = (
    "product_id",
    "product_name",
    "product_class",
    "category_hierarchy",
    "product_description",
    "product_features",
    "rating_count",
    "average_rating",
    "review_count",
)
_WANDS_HINT = (
    "product.csv and label.csv come from github.com/wayfair/WANDS (dataset/); they are not in the shared copy"
)


def load_wands(data_dir: Path, num_test: int = 50, seed: int = 0) -> Benchmark:
    """WANDS queries, products and graded labels; splits ``train`` and ``test`` (``num_test`` queries)."""
    folder = Path(data_dir) / WANDS_DIR
    query_file = require(folder / "query.csv", "wands")
    product_file = require(folder / "product.csv", "wands", _WANDS_HINT)
    label_file = require(folder / "label.csv", "wands", _WANDS_HINT)
    query_rows = _read_table(query_file, ("query_id", "query", "query_class"))
    queries = {
        r["query_id"]: Query(r["query_id"], r["query"], {"query_class": r["query_class"]}) for r in query_rows
    }
    corpus = {r["product_id"]: _product(r) for r in _read_table(product_file, PRODUCT_COLUMNS)}
    qrels: dict[str, dict[str, int]] = {qid: {} for qid in queries}
    for r in _read_table(label_file, ("query_id", "product_id", "label")):
        if r["label"] not in LABEL_GRADES:
            raise MalformedDataError(label_file, f"label {r['label']!r} is not one of {sorted(LABEL_GRADES)}")
        if r["query_id"] not in queries or r["product_id"] not in corpus:
            raise MalformedDataError(
                label_file, f"label for unknown query {r['query_id']} or product {r['product_id']}"
            )
        qrels[r["query_id"]][r["product_id"]] = LABEL_GRADES[r["label"]]
    if not 0 < num_test < len(queries):
        raise ValueError(f"num_test must be between 1 and {len(queries) - 1}, got {num_test}")
    splits = split_ids(
        list(queries), {"train": 1 - num_test / len(queries), "test": num_test / len(queries)}, seed
    )
    return Benchmark("wands", queries, corpus, qrels, splits, relevance_level=1)


def _product(row: dict[str, str]) -> Document:
    """A product: the name is the title, the description the text; the rest goes to ``extra``."""
    extra = {
        "product_class": row["product_class"],
        "category_hierarchy": [c.strip() for c in row["category_hierarchy"].split("/") if c.strip()],
        "features": row["product_features"],
        "rating_count": row["rating_count"],
        "average_rating": row["average_rating"],
        "review_count": row["review_count"],
    }
    return Document(row["product_id"], row["product_description"], row["product_name"], extra)


def _read_table(path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    """Rows of a WANDS tab-separated file as dicts of strings, checking the needed columns exist.

    Read with pandas as in WANDS's own notebook (``pd.read_csv(path, sep='\\t')``): descriptions
    hold quoted text that a plain split would get wrong.
    """
    import pandas as pd  # lazy: only WANDS needs it

    with parsing(path, "tab-separated table"):
        frame = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
    # Copies of the files spell some headers with a space ("category hierarchy"), others with "_".
    frame.columns = [str(c).strip().replace(" ", "_") for c in frame.columns]
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise MalformedDataError(path, f"columns {missing} missing; found {list(frame.columns)}")
    return frame[list(columns)].to_dict("records")
