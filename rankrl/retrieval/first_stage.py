"""The first-stage run of a benchmark: the shipped one where it exists, else BM25 over its corpus.

TREC DL ships its BM25 top-100; BRIGHT ships only queries, qrels and (for users with internet) documents,
so its run is built here with one Lucene index per task, each query's ``excluded_ids`` dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rankrl.data.records import Benchmark, Run
from rankrl.retrieval.base import search_excluding
from rankrl.retrieval.build import RetrieverBuilder, retriever_builder


def ensure_run(
    benchmark: Benchmark,
    name: str = "bm25",
    depth: int = 100,
    retriever: Any = None,
    cache_dir: str | Path | None = None,
    refill: bool = True,
) -> Run:
    """``benchmark.runs[name]``, built over the corpus and cached on it if absent.

    A query's ``excluded_ids`` are dropped from the built run; ``refill`` (default) searches deeper so that
    ``depth`` documents remain, ``refill=False`` keeps the top ``depth`` less the excluded ones (cached as
    ``<name>:unrefilled``; the same run where no query excludes anything). A shipped run is returned as is.

    ``retriever`` builds the index: the ``retriever`` config group's choice in any form
    ``rankrl.retrieval.build.retriever_builder`` takes (e.g. pyserini BM25 with its k1 and b), called with
    the cache folder and the benchmark's name; None means pyserini BM25 with Anserini's defaults.

    Raises the data layer's ``MissingDataError`` (which names the fetch command) when the corpus is missing.
    """
    if refill and name in benchmark.runs:
        return benchmark.runs[name]
    excluded = {q.qid: tuple(q.extra.get("excluded_ids", ())) for q in benchmark.queries.values()}
    key = name if refill or not any(excluded.values()) else f"{name}:unrefilled"  # alike when none excluded
    if key in benchmark.runs:
        return benchmark.runs[key]
    if name != "bm25":
        raise ValueError(
            f"benchmark {benchmark.name!r} has no run {name!r} and only 'bm25' can be built; "
            f"shipped runs: {sorted(benchmark.runs) or 'none'}"
        )
    from rankrl.retrieval.bm25 import PyseriniBM25

    docs = list(benchmark.corpus.values())
    build = retriever_builder(retriever) or RetrieverBuilder(PyseriniBM25)
    retriever = build(docs, cache_dir=cache_dir, name=benchmark.name)
    queries = {q.qid: q.text for q in benchmark.queries.values()}
    benchmark.runs[key] = search_excluding(retriever, queries, depth, excluded, refill=refill)
    return benchmark.runs[key]
