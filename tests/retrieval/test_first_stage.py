"""First stages: BRIGHT-style BM25 over a task's own documents, each query's excluded_ids dropped; and the
cutoff baselines (rankrl/tasks/first_stage.py), a ranking over a whole catalog cut at the depth that maximises
training F1."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from rankrl.data import load_benchmark
from rankrl.data.errors import MissingDataError
from rankrl.eval.metrics import set_prf
from rankrl.retrieval.first_stage import ensure_run
from rankrl.tasks.first_stage import CutoffBaselineTask, best_cutoff, mean_f1_at_cutoffs
from tests.data.conftest import toy_catalog


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


def test_without_refill_excluded_documents_leave_their_places_empty(tmp_path, data_dir):
    """Rank-R1's official BRIGHT candidates (Rank-R1/bright/search.sh then filter_run.py): BM25's top k with
    each query's excluded_ids dropped afterwards, so a query keeps fewer than k; refill=True (the default)
    searches deeper and keeps k."""
    bright = tmp_path / "bright"
    (bright / "documents").mkdir(parents=True)
    for name in ("topics.bright-leetcode-original.jsonl.gz", "qrels.bright-leetcode.txt"):
        shutil.copy(data_dir / "bright" / name, bright / name)
    queries = list(load_benchmark("bright-leetcode", tmp_path).queries.values())[:3]
    assert all(q.extra["excluded_ids"] for q in queries)  # LeetCode excludes each problem's own solutions
    docs = {}
    for i, q in enumerate(queries):
        docs[f"doc-{i}"] = q.text
        docs[q.extra["excluded_ids"][0]] = q.text + " " + q.text  # would rank first if it were not excluded
    docs.update({f"filler-{i}": f"unrelated filler text number {i}" for i in range(20)})
    pd.DataFrame({"id": list(docs), "content": list(docs.values())}).to_parquet(
        bright / "documents" / "leetcode-00000-of-00001.parquet"
    )
    bench = load_benchmark("bright-leetcode", tmp_path)
    refilled = ensure_run(bench, depth=2, cache_dir=tmp_path / "cache")
    unrefilled = ensure_run(bench, depth=2, cache_dir=tmp_path / "cache", refill=False)
    assert ensure_run(bench, refill=False) is unrefilled and unrefilled is not refilled
    for i, q in enumerate(queries):
        assert q.extra["excluded_ids"][0] not in unrefilled[q.qid]
        assert list(unrefilled[q.qid]) == [f"doc-{i}"]  # the excluded top document left its place empty
        assert len(refilled[q.qid]) == 2 and next(iter(refilled[q.qid])) == f"doc-{i}"


# ---- cutoff baselines --------------------------------------------------------------------------------------


def test_cutoff_maximises_mean_training_f1():
    run = {"a": {"x": 3.0, "y": 2.0, "z": 1.0}, "b": {"y": 3.0, "x": 2.0}}
    relevant = {"a": {"x", "y"}, "b": {"y"}}
    curve = mean_f1_at_cutoffs(run, relevant, 3)
    assert curve[0] == pytest.approx((set_prf({"x"}, {"x", "y"})[2] + 1.0) / 2)
    assert curve[1] == pytest.approx((1.0 + set_prf({"y", "x"}, {"y"})[2]) / 2)
    assert curve[2] == pytest.approx(
        (set_prf({"x", "y", "z"}, {"x", "y"})[2] + set_prf({"x", "y"}, {"y"})[2]) / 2
    )
    assert best_cutoff(run, relevant, 3) == (1, curve[0]) == (1, pytest.approx(5 / 6))


class FakeRetriever:
    def __init__(self, docs, cache_dir=None) -> None:
        self.docs = docs

    def search(self, queries, k):  # word overlap, then id: a deterministic toy ranking
        out = {}
        for qid, text in queries.items():
            scores = {
                d.docid: len(set(text.split()) & set(f"{d.title} {d.text}".lower().split()))
                for d in self.docs
            }
            out[qid] = {d: float(s) for d, s in sorted(scores.items(), key=lambda kv: -kv[1])[:k] if s > 0}
        return out


def test_cutoff_baseline_reports_validation_f1_at_the_training_cutoff():
    task = CutoffBaselineTask(toy_catalog(), retriever=FakeRetriever, max_depth=4)
    result = task.evaluate({}, "validation")
    metrics = result["metrics"]
    assert metrics["cutoff"] >= 1 and metrics["num_items"] == 6.0
    assert metrics["f1"] == 0.0  # "couch" shares no word with any item
    assert result["per_query"]["f1"].tolist() == [0.0] and result["per_query"].index.tolist() == ["q4"]
    with pytest.raises(ValueError, match="retriever=bm25"):
        CutoffBaselineTask(toy_catalog(), retriever={"name": "none"})
    with pytest.raises(ValueError, match="'train' or 'validation'"):
        task.evaluate({}, "test")


def test_missing_wands_products_stop_the_cutoff_baseline_with_the_fetch_command(tmp_path, data_dir):
    (tmp_path / "wands").mkdir()
    shutil.copy(data_dir / "wands" / "query.csv", tmp_path / "wands")
    task = CutoffBaselineTask("wands", tmp_path, retriever=FakeRetriever)  # the catalog loads on first use
    with pytest.raises(MissingDataError, match="--only wands"):
        task.evaluate({}, "validation")
