"""What a query of a retrieval benchmark is ranked against: its relevant items present in a gallery, the
items its protocol keeps out of its ranking, and the check that a gallery's images are on disk.

A gallery is the set of documents a split's queries are ranked over (an image benchmark's split, or a
shared text corpus). These are facts of the benchmarks (their qrels, relevance level and protocol, CIRR's
reference image), shared by any method that ranks over a whole gallery (GRAPE's rank reward, its
evaluation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from rankrl.data.errors import MissingDataError
from rankrl.data.records import Benchmark, Document, Query


def gold_items(benchmark: Benchmark, qid: str, gallery: Mapping[str, Document]) -> list[str]:
    """The items of ``gallery`` relevant to ``qid`` (grade >= the benchmark's relevance level)."""
    grades = benchmark.qrels.get(qid, {})
    return [d for d, g in grades.items() if g >= benchmark.relevance_level and d in gallery]


def excluded_items(query: Query, gallery: Mapping[str, Document]) -> list[str]:
    """Items a query must not be ranked against: CIRR removes the reference image from its ranking."""
    reference = query.extra.get("reference_image")
    return [reference] if reference is not None and reference in gallery else []


def require_images(benchmark: str, docs: Iterable[Document]) -> None:
    """Stop with the data layer's error when an image of the gallery is not on disk (one stat per image)."""
    for doc in docs:
        path = doc.extra.get("image_path")
        if path is not None and not Path(path).is_file():
            raise MissingDataError(
                path,
                benchmark,
                hint=(
                    "images are not in the shared data copy; "
                    "rankrl/data/images.py and images_web.py say where "
                    "each benchmark's come from"
                ),
            )
