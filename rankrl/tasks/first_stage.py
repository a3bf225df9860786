"""Score a benchmark's first-stage run as it is: the BM25 (or other) baseline row of a ranking table.

No model is involved (``uses_model = False``), so evaluation entry points skip loading one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


class FirstStageTask:
    """Evaluate ``benchmark.runs[run]`` (built by BM25 over the corpus if not shipped) with the benchmark's
    relevance level.

    Args:
        benchmark: benchmark name (``rankrl.data.load_benchmark``).
        data_dir: where prepared data lives.
        run: which first-stage run of the benchmark to score.
        measures: ir_measures names.
        depth: cut the run to its top ``depth`` before scoring (None = as it is).
        benchmark_options: options of the benchmark's loader (``conf/benchmark/<name>.yaml``).
        retriever: builds the first stage when the benchmark ships no run: the ``retriever`` group's partial
            (e.g. ``PyseriniBM25`` with k1, b from conf/retriever/bm25.yaml); None = pyserini BM25 defaults.
        cache_dir: where built indexes are cached (``paths.cache_dir``).
    """

    name = "first_stage"
    uses_model = False
    roles: tuple[str, ...] = ()

    def __init__(
        self,
        benchmark: str,
        data_dir: str | Path,
        run: str = "bm25",
        measures: Sequence[str] = ("nDCG@10",),
        depth: int | None = None,
        benchmark_options: Mapping[str, Any] | None = None,
        retriever: Callable[..., Any] | Mapping[str, Any] | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        from rankrl.data import load_benchmark

        self.benchmark = load_benchmark(benchmark, data_dir, **dict(benchmark_options or {}))
        self.run_name, self.measures, self.depth = run, list(measures), depth
        # the `retriever: none` choice arrives as its plain node: no retriever configured
        self.retriever = retriever if callable(retriever) else None
        self.cache_dir = cache_dir

    def evaluate(
        self, generators: Mapping[str, Any], split: str = "test", limit: int | None = None
    ) -> dict[str, Any]:
        from rankrl.eval.metrics import scored_run
        from rankrl.retrieval.base import drop_excluded, top_k
        from rankrl.retrieval.first_stage import ensure_run

        qids = self.benchmark.splits[split][:limit] if limit else self.benchmark.splits[split]
        full = ensure_run(
            self.benchmark,
            self.run_name,
            depth=self.depth or 100,
            retriever=self.retriever,
            cache_dir=self.cache_dir,
        )
        run = {q: full.get(q, {}) for q in qids}
        excluded = {q: self.benchmark.queries[q].extra.get("excluded_ids", ()) for q in qids}
        run = drop_excluded(run, excluded)
        run = top_k(run, self.depth) if self.depth else run
        qrels = {q: self.benchmark.qrels[q] for q in qids if q in self.benchmark.qrels}
        metrics, table = scored_run(run, qrels, self.measures, relevance_level=self.benchmark.relevance_level)
        return {"metrics": metrics, "run": run, "num_queries": len(qrels), "per_query": table}
