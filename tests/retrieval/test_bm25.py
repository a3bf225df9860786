"""pyserini BM25 on ~200 real DL19 passages: index caching, search, parameters, BRIGHT-style exclusion."""

from __future__ import annotations

import pytest

from rankrl.data.records import Document
from rankrl.retrieval.base import search_excluding
from rankrl.retrieval.bm25 import PyseriniBM25, build_lucene_index


def test_index_holds_every_passage(lucene_bm25, dl19_sample) -> None:
    assert lucene_bm25.num_docs == len(dl19_sample[1]) >= 150


def test_second_build_reuses_the_cached_index(lucene_bm25, dl19_sample, index_cache) -> None:
    again = build_lucene_index(dl19_sample[1], index_cache, "dl19-sample")
    assert again == lucene_bm25.index_dir
    assert len(list((index_cache / "lucene").glob("dl19-sample-*"))) == 1
    changed = [*dl19_sample[1][:-1], Document(docid="extra", text="a different corpus")]
    assert build_lucene_index(changed[:5], index_cache, "dl19-sample") != lucene_bm25.index_dir


def test_each_query_finds_its_own_passages(lucene_bm25, dl19_sample) -> None:
    queries, _, pools = dl19_sample
    run = lucene_bm25.search(queries, k=10)
    assert set(run) == set(queries)
    for qid, ranking in run.items():
        scores = list(ranking.values())
        assert len(ranking) == 10 and scores == sorted(scores, reverse=True)
        assert next(iter(ranking)) in pools[qid], f"top-1 of {qid} is not one of its BM25 passages"
    own = sum(d in pools[q] for q, r in run.items() for d in r) / sum(len(r) for r in run.values())
    assert own >= 0.9


def test_bm25_parameters_reach_lucene(lucene_bm25, dl19_sample, index_cache) -> None:
    queries = dict(list(dl19_sample[0].items())[:3])
    other = PyseriniBM25(dl19_sample[1], k1=1.2, b=0.75, cache_dir=index_cache, name="dl19-sample")
    assert other.index_dir == lucene_bm25.index_dir  # same corpus, same index; only scoring differs
    assert other.search(queries, 5) != lucene_bm25.search(queries, 5)


def test_queries_without_known_terms_get_nothing(lucene_bm25) -> None:
    assert lucene_bm25.search({"empty": "", "unknown": "zzqqxxv"}, 5) == {"empty": {}, "unknown": {}}


def test_long_queries_pass_lucenes_clause_limit(lucene_bm25, dl19_sample) -> None:
    qid, text = next(iter(dl19_sample[0].items()))
    long_query = text + " " + " ".join(f"zzterm{i}" for i in range(3000))  # 3,000+ distinct terms
    assert list(lucene_bm25.search({"q": long_query}, 5)["q"]) == list(
        lucene_bm25.search({qid: text}, 5)[qid]
    )


def test_excluded_ids_are_dropped_and_k_kept(lucene_bm25, dl19_sample) -> None:
    queries = dict(list(dl19_sample[0].items())[:4])
    full = lucene_bm25.search(queries, 10)
    excluded = {q: list(r)[:2] for q, r in full.items()}  # ban each query's two best passages
    run = search_excluding(lucene_bm25, queries, 10, excluded)
    assert len(queries) == 4 and set(run) == set(queries)  # every query answered: the loop checks each
    for qid, ranking in run.items():
        assert len(ranking) == 10 and not set(excluded[qid]) & set(ranking)
        assert list(ranking)[:8] == list(full[qid])[2:]


def test_bad_corpus_is_refused(index_cache) -> None:
    with pytest.raises(ValueError, match="empty corpus"):
        build_lucene_index([], index_cache)
    with pytest.raises(ValueError, match="unique"):
        build_lucene_index([Document("a", "x"), Document("a", "y")], index_cache)


def test_search_before_index_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match="call index"):
        PyseriniBM25().search({"q": "x"}, 3)
