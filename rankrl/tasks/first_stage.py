"""First-stage retrieval scored as a baseline, with no model (``uses_model = False``), so evaluation entry
points skip loading one.

- ``FirstStageTask``: a benchmark's first-stage run as it is, the BM25 (or other) baseline row of a ranking
  table.
- ``CutoffBaselineTask``: a first-stage ranking over a whole item catalog (``rankrl.data.catalogs``) cut at
  the one depth that maximises mean set F1 on the training queries, the baseline rule of set retrieval
  (CoGR's BM25 and dense rows).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from rankrl.conf_defaults import conf_default
from rankrl.data import load_benchmark
from rankrl.data.catalogs import SPLITS, Catalog, CatalogOnDemand
from rankrl.data.records import Run
from rankrl.errors import ConfigError
from rankrl.eval.metrics import PRF_COLUMNS, prf_from_counts, scored_run, set_prf_table
from rankrl.retrieval.base import drop_excluded, top_k
from rankrl.retrieval.build import retriever_builder
from rankrl.retrieval.first_stage import ensure_run


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
        retriever: builds the first stage when the benchmark ships no run: the ``retriever`` group's choice
            (``rankrl.retrieval.build.retriever_builder``; e.g. ``PyseriniBM25`` with k1, b from
            conf/retriever/bm25.yaml); None or ``retriever=none`` = pyserini BM25 defaults.
        cache_dir: where built indexes are cached (``paths.cache_dir``).
    """

    name = "first_stage"
    uses_model = False
    roles: tuple[str, ...] = ()

    def __init__(
        self,
        benchmark: str,
        data_dir: str | Path,
        run: str = conf_default("task/first_stage", "run"),
        measures: Sequence[str] = conf_default("task/first_stage", "measures"),
        depth: int | None = None,
        benchmark_options: Mapping[str, Any] | None = None,
        retriever: Any = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        self.benchmark = load_benchmark(benchmark, data_dir, **dict(benchmark_options or {}))
        self.run_name, self.measures, self.depth = run, list(measures), depth
        self.retriever = retriever_builder(retriever)
        self.cache_dir = cache_dir

    def evaluate(
        self, generators: Mapping[str, Any], split: str = "test", limit: int | None = None
    ) -> dict[str, Any]:
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


# ---- A ranking over a whole catalog as a retrieved set: cut at the depth that maximises training F1 --------


def mean_f1_at_cutoffs(run: Run, relevant: Mapping[str, Collection[str]], max_k: int) -> list[float]:
    """Mean set F1 over ``relevant``'s queries of each query's top k, for k = 1..max_k (index k-1)."""
    if not relevant:
        raise ValueError("no queries to choose a cutoff on")
    totals = [0.0] * max_k
    for qid, rel in relevant.items():
        ranking = sorted(run.get(qid, {}).items(), key=lambda kv: (-kv[1], kv[0]))
        hits = 0
        for k in range(1, max_k + 1):
            if k <= len(ranking):
                hits += ranking[k - 1][0] in rel
            totals[k - 1] += prf_from_counts(hits, min(k, len(ranking)), len(rel))[2]
    return [t / len(relevant) for t in totals]


def best_cutoff(run: Run, relevant: Mapping[str, Collection[str]], max_k: int) -> tuple[int, float]:
    """The cutoff k in 1..max_k with the highest mean F1 (the smallest such k), and that F1."""
    curve = mean_f1_at_cutoffs(run, relevant, max_k)
    best = max(range(max_k), key=lambda i: (curve[i], -i))
    return best + 1, curve[best]


class CutoffBaselineTask(CatalogOnDemand):
    """A first-stage retriever over the catalog (title + description) whose ranking is cut at one depth for
    every query, the depth that maximises mean F1 on the training queries (CoGR's rule for every
    baseline); validation F1 at that depth. No model (``uses_model = False``).

    Args:
        benchmark / data_dir / benchmark_options: the catalog (a ``rankrl.data.catalogs.CATALOGS`` name, or
            a ``Catalog``), the data folder and the catalog loader's options.
        retriever: the ``retriever`` group's choice (``rankrl.retrieval.build.retriever_builder``; ``bm25``:
            pyserini; ``minilm``: MiniLM + faiss).
        cache_dir: where indexes and vectors are cached.
        max_depth: the deepest cutoff tried (capped at the catalog size).
    """

    name = "cogr_cutoff"
    uses_model = False
    roles: tuple[str, ...] = ()

    def __init__(
        self,
        benchmark: str | Catalog,
        data_dir: str | Path = "data",
        retriever: Any = None,
        benchmark_options: Mapping[str, Any] | None = None,
        cache_dir: str | Path | None = None,
        max_depth: int = conf_default("task/cogr_cutoff", "max_depth"),
    ) -> None:
        build = retriever_builder(retriever)
        if build is None:
            raise ConfigError(
                f"a cutoff baseline needs a retriever (retriever=bm25 or retriever=minilm), got {retriever!r}"
            )
        self.build = build
        self._catalog_args = (benchmark, data_dir, dict(benchmark_options or {}))
        self.cache_dir, self.max_depth = cache_dir, max_depth

    def evaluate(
        self, generators: Mapping[str, Any], split: str = "validation", limit: int | None = None
    ) -> dict[str, Any]:
        if split not in SPLITS:
            raise ValueError(f"a cutoff baseline evaluates split 'train' or 'validation', got {split!r}")
        docs = list(self.catalog.items.values())
        depth = max(1, min(self.max_depth, len(docs)))
        retriever = self.build(docs, cache_dir=self.cache_dir)
        train = self.catalog.split("train")
        evaluated = self.catalog.split(split)[:limit]
        texts = {q: self.catalog.queries[q].text for q in dict.fromkeys([*train, *evaluated])}
        run = retriever.search(texts, depth)
        k, train_f1 = best_cutoff(run, {q: self.catalog.relevant[q] for q in train}, depth)
        cut = {q: dict(sorted(run.get(q, {}).items(), key=lambda kv: (-kv[1], kv[0]))[:k]) for q in evaluated}
        table = set_prf_table(cut, {q: self.catalog.relevant[q] for q in evaluated})
        n = len(table)  # summed in query order: the same floats as mean_set_prf
        precision, recall, f1 = (sum(table[c].tolist()) / n for c in PRF_COLUMNS)
        metrics = {
            "f1": f1,
            "precision": precision,
            "recall": recall,
            "train_f1": train_f1,
            "cutoff": float(k),
            "num_queries": float(len(evaluated)),
            "num_items": float(len(docs)),
        }
        return {"metrics": metrics, "run": cut, "per_query": table}
