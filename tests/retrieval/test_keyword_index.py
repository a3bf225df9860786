"""CoGR's keyword inverted index: retrieval semantics, BM25 ranking, and the incremental item reward."""

from __future__ import annotations

import random

import pytest

from rankrl.eval.metrics import set_prf
from rankrl.retrieval.keyword_index import ItemCounterfactual, KeywordIndex, keyword_bag


def test_overlap_retrieves_and_phrases_match_whole() -> None:
    index = KeywordIndex(
        {"a": ["Sofa  Bed", "grey"], "b": ["sofa", "bed"], "c": ["lamp"]}, {"c": ["Desk Lamp"]}
    )
    assert index.retrieve_set(["sofa bed"]) == {"a"}  # a phrase is one term, not "sofa" + "bed"
    assert index.retrieve_set(["SOFA"]) == {"b"}
    assert index.retrieve_set(["desk lamp"]) == {"c"}  # the item's own terms count
    assert index.retrieve_set(["chair"], query_terms=["grey"]) == {"a"}  # so do the query's
    assert index.retrieve_set([]) == set()


def test_ranking_is_bm25_over_the_retrieved_set() -> None:
    index = KeywordIndex({"a": ["x", "y"], "b": ["x"], "c": ["x", "y", "z", "w", "v"], "d": ["q"]})
    ranked = index.retrieve(["x", "y"])
    assert {i for i, _ in ranked} == index.retrieve_set(["x", "y"]) == {"a", "b", "c"}
    assert ranked[0][0] == "a"  # both terms in the shortest bag
    scores = [s for _, s in ranked]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    assert index.search({"q": ["x", "y"]}, k=2) == {"q": dict(ranked[:2])}


def test_f1_uses_the_retrieved_set() -> None:
    index = KeywordIndex({"a": ["x"], "b": ["x"], "c": ["y"]})
    assert index.f1(["x"], relevant={"a", "c"}) == pytest.approx(set_prf({"a", "b"}, {"a", "c"})[2])


def test_bad_input_is_named() -> None:
    with pytest.raises(TypeError, match="one string"):
        keyword_bag("sofa")
    with pytest.raises(KeyError, match="without keywords"):
        KeywordIndex({"a": ["x"]}, {"b": ["y"]})
    with pytest.raises(KeyError, match="unknown item"):
        KeywordIndex({"a": ["x"]}).with_keywords("zz", ["y"])


def random_setup(seed: int) -> tuple[KeywordIndex, dict, dict, dict, random.Random]:
    rng = random.Random(seed)
    vocab = [f"kw{i}" for i in range(30)]
    items = {f"i{n}": rng.sample(vocab, rng.randint(0, 5)) for n in range(50)}
    own = {i: [f"title {i}"] for i in items if rng.random() < 0.3}
    queries = {f"q{n}": rng.sample(vocab, rng.randint(1, 4)) for n in range(25)}
    query_terms = {q: [f"title i{rng.randrange(50)}"] for q in queries if rng.random() < 0.3}
    relevant = {q: set(rng.sample(sorted(items), rng.randint(0, 6))) for q in queries}
    return KeywordIndex(items, own), queries, query_terms, relevant, rng


def brute_force_total_f1(index: KeywordIndex, queries: dict, query_terms: dict, relevant: dict) -> float:
    return sum(index.f1(kw, relevant[q], query_terms.get(q, ())) for q, kw in queries.items())


@pytest.mark.parametrize("seed", range(5))
def test_incremental_gain_equals_brute_force(seed: int) -> None:
    index, queries, query_terms, relevant, rng = random_setup(seed)
    counterfactual = ItemCounterfactual(index, queries, relevant, query_terms)
    reference = brute_force_total_f1(index, queries, query_terms, relevant)
    assert counterfactual.total_f1() == pytest.approx(reference)
    vocab = [f"kw{i}" for i in range(30)]
    for _ in range(20):
        item = rng.choice(sorted(index.bags))
        new = rng.sample(vocab, rng.randint(0, 6))
        replaced = index.with_keywords(item, new)
        expected = brute_force_total_f1(replaced, queries, query_terms, relevant) - reference
        assert counterfactual.gain(item, new) == pytest.approx(expected, abs=1e-9)
        changed = {
            q
            for q, kw in queries.items()
            if replaced.retrieve_set(kw, query_terms.get(q, ()))
            != index.retrieve_set(kw, query_terms.get(q, ()))
        }
        assert changed <= set(counterfactual.affected_queries(item, new))


def test_affected_queries_touch_only_old_or_new_terms() -> None:
    index = KeywordIndex({"a": ["x"], "b": ["y"]})
    counterfactual = ItemCounterfactual(index, {"q1": ["x"], "q2": ["y"], "q3": ["z"]}, {"q1": {"a"}})
    assert counterfactual.affected_queries("a", ["z"]) == ["q1", "q3"]
    assert counterfactual.affected_queries("a", ["x"]) == ["q1"]
    assert counterfactual.gain("a", ["x"]) == 0.0
    # q1 loses its only relevant item (1 -> 0); q3, with nothing relevant, now retrieves "a" (1 -> 0).
    assert counterfactual.gain("a", ["z"]) == pytest.approx(-2.0)
