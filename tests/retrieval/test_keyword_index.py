"""The keyword inverted index: overlap retrieval, normalisation, BM25 ranking over keyword bags."""

from __future__ import annotations

import pytest

from rankrl.eval.metrics import set_prf
from rankrl.retrieval.keyword_index import KeywordIndex, keyword_bag, normalize_keyword


def test_overlap_retrieves_and_phrases_match_whole() -> None:
    index = KeywordIndex(
        {"a": ["Sofa  Bed", "grey"], "b": ["sofa", "bed"], "c": ["lamp"]}, {"c": ["Desk Lamp"]}
    )
    assert index.retrieve_set(["sofa bed"]) == {"a"}  # a phrase is one term, not "sofa" + "bed"
    assert index.retrieve_set(["SOFA"]) == {"b"}
    assert index.retrieve_set(["desk lamp"]) == {"c"}  # the item's own terms count
    assert index.retrieve_set(["chair"], query_terms=["grey"]) == {"a"}  # so do the query's
    assert index.retrieve_set([]) == set()


@pytest.mark.parametrize(
    "raw,canonical",
    [
        ("Sofa  Bed", "sofa bed"),
        ('"sofa."', "sofa"),
        ("- sofa", "sofa"),
        ("(Sofa)!", "sofa"),
        ("all-clad", "all-clad"),
        ("7.5 qt", "7.5 qt"),
        ("rock & roll", "rock & roll"),
        ("ＳＯＦＡ", "sofa"),
        ("sofa \t\n bed", "sofa bed"),
        ("...", ""),
        ("   ", ""),
        ("", ""),
    ],
)
def test_normalisation_of_case_punctuation_and_space(raw: str, canonical: str) -> None:
    assert normalize_keyword(raw) == canonical


def test_a_bag_drops_empty_keywords_and_duplicates() -> None:
    assert keyword_bag(["Sofa", "sofa.", " SOFA ", "", "!!", "bed"]) == {"sofa", "bed"}
    assert keyword_bag([]) == frozenset()


def test_normalisation_is_linear_on_long_punctuation_runs() -> None:
    assert normalize_keyword("!" * 100_000 + "a!b" + "?" * 100_000) == "a!b"


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


def test_with_keywords_replaces_one_item_only() -> None:
    index = KeywordIndex({"a": ["x"], "b": ["x"]}, {"a": ["title a"]})
    moved = index.with_keywords("a", ["y"])
    assert moved.retrieve_set(["x"]) == {"b"} and moved.retrieve_set(["y"]) == {"a"}
    assert moved.bag_of("a") == {"y", "title a"} and index.bag_of("a") == {"x", "title a"}


def test_bad_input_is_named() -> None:
    with pytest.raises(TypeError, match="one string"):
        keyword_bag("sofa")
    with pytest.raises(KeyError, match="without keywords"):
        KeywordIndex({"a": ["x"]}, {"b": ["y"]})
    with pytest.raises(KeyError, match="unknown item"):
        KeywordIndex({"a": ["x"]}).with_keywords("zz", ["y"])
