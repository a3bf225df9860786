"""BRIGHT-style first stage: BM25 over a task's own documents, each query's excluded_ids dropped."""

from __future__ import annotations

import shutil

import pandas as pd

from rankrl.data import load_benchmark
from rankrl.retrieval.first_stage import ensure_run


def test_bm25_run_is_built_for_a_benchmark_without_one(tmp_path, data_dir):
    bright = tmp_path / "bright"
    (bright / "documents").mkdir(parents=True)
    for name in ("topics.bright-pony-original.jsonl.gz", "qrels.bright-pony.txt"):
        shutil.copy(data_dir / "bright" / name, bright / name)
    bench = load_benchmark("bright-pony", tmp_path)
    queries = list(bench.queries.values())[:3]
    docs = {}
    for i, q in enumerate(queries):
        docs[f"doc-{i}"] = q.text  # a perfect lexical match for query i
        for ex in q.extra.get("excluded_ids", ())[:1]:
            docs[ex] = q.text + " " + q.text  # would rank first if it were not excluded
    docs.update({f"filler-{i}": f"unrelated filler text number {i}" for i in range(20)})
    pd.DataFrame({"id": list(docs), "content": list(docs.values())}).to_parquet(
        bright / "documents" / "pony-00000-of-00001.parquet"
    )
    bench = load_benchmark("bright-pony", tmp_path)

    run = ensure_run(bench, depth=5, cache_dir=tmp_path / "cache")
    assert ensure_run(bench) is run  # built once, kept on the benchmark
    for i, q in enumerate(queries):
        ranked = sorted(run[q.qid], key=lambda d: -run[q.qid][d])
        assert ranked[0] == f"doc-{i}", ranked
        assert not set(q.extra.get("excluded_ids", ())) & set(ranked)
        assert 3 <= len(ranked) <= 5  # only documents sharing a term with the query are returned
