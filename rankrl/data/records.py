"""Common records that every benchmark loader produces.

One shape for every data set keeps retrieval, tasks and evaluation free of per-benchmark branches:
queries and documents carry their text plus a free-form ``extra`` mapping for what only some
benchmarks have (image paths, BRIGHT's ``excluded_ids``, a user's history, candidate pools).
Relevance judgements use the ``{qid: {docid: grade}}`` shape that ir_measures and pytrec_eval take.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Qrels = dict[str, dict[str, int]]
Run = dict[str, dict[str, float]]


@dataclass(frozen=True)
class Query:
    """A query (or a user, a question, a caption) to retrieve for.

    Args:
        qid: identifier, unique within its benchmark.
        text: what the model reads.
        extra: benchmark-specific fields, e.g. ``excluded_ids`` (BRIGHT), ``history`` (MovieLens),
            ``reference_image`` (CIRR), ``candidates`` (a fixed candidate pool, in presented order).
    """

    qid: str
    text: str
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Document:
    """An item of the corpus: a passage, a product, a movie, an image (``extra['image_path']``)."""

    docid: str
    text: str
    title: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class Benchmark:
    """Queries, corpus, relevance and splits of one data set.

    Args:
        name: the benchmark's config name (``dl19``, ``bright-biology``, ``musique`` ...).
        queries: qid -> Query, for every split.
        corpus: docid -> Document. May be empty where only a first-stage run with text exists.
        qrels: qid -> docid -> graded relevance (ir_measures format).
        splits: split name -> ordered list of qids.
        runs: name -> first-stage run (qid -> docid -> score), e.g. ``{"bm25": ...}``.
        relevance_level: minimum grade counted as relevant by binary measures (2 on TREC DL).
    """

    name: str
    queries: dict[str, Query]
    corpus: dict[str, Document]
    qrels: Qrels
    splits: dict[str, list[str]]
    runs: dict[str, Run] = field(default_factory=dict)
    relevance_level: int = 1

    def split(self, name: str) -> list[Query]:
        """The queries of one split, in the split's order."""
        if name not in self.splits:
            raise KeyError(f"benchmark {self.name!r} has no split {name!r}; valid: {sorted(self.splits)}")
        return [self.queries[q] for q in self.splits[name]]
