"""The shared retriever helpers: exclusion (BRIGHT), top-k, corpus fingerprints, interface conformance."""

from __future__ import annotations

import pytest

from rankrl.data.records import Document
from rankrl.retrieval.base import (
    Retriever,
    check_unique_ids,
    corpus_fingerprint,
    document_text,
    drop_excluded,
    search_excluding,
    top_k,
)
from rankrl.retrieval.bm25s_index import BM25S


def test_drop_excluded_removes_only_listed_ids() -> None:
    run = {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}, "q2": {"a": 1.0}}
    assert drop_excluded(run, {"q1": ["b", "zz"]}) == {"q1": {"a": 3.0, "c": 1.0}, "q2": {"a": 1.0}}
    assert run["q1"] == {"a": 3.0, "b": 2.0, "c": 1.0}  # input untouched


def test_top_k_breaks_ties_by_docid() -> None:
    assert list(top_k({"q": {"b": 1.0, "a": 1.0, "c": 2.0}}, 2)["q"]) == ["c", "a"]


def test_search_excluding_keeps_k_results() -> None:
    docs = [Document(f"d{i}", f"apple {'pear ' * i}") for i in range(6)]
    retriever = BM25S(docs, stemmer=None)
    assert isinstance(retriever, Retriever)
    full = retriever.search({"q": "apple"}, 6)["q"]
    run = search_excluding(retriever, {"q": "apple"}, 3, {"q": list(full)[:2]})
    assert list(run["q"]) == list(full)[2:5]
    # no refill: the top 3 less the two excluded, as a depth-3 run filtered afterwards (Rank-R1's BRIGHT)
    unrefilled = search_excluding(retriever, {"q": "apple"}, 3, {"q": list(full)[:2]}, refill=False)
    assert list(unrefilled["q"]) == list(full)[2:3]


def test_fingerprint_follows_content_order_and_settings() -> None:
    docs = [Document("a", "x"), Document("b", "y", title="t")]
    base = corpus_fingerprint(docs, {"k": 1})
    assert base == corpus_fingerprint(list(docs), {"k": 1})
    assert base != corpus_fingerprint(docs[::-1], {"k": 1})
    assert base != corpus_fingerprint([docs[0], Document("b", "y", title="u")], {"k": 1})
    assert base != corpus_fingerprint(docs, {"k": 2})


def test_document_text_and_ids() -> None:
    assert document_text(Document("a", "body", title="Title")) == "Title body"
    assert document_text(Document("a", "body")) == "body"
    with pytest.raises(ValueError, match=r"repeated: \['a'\]"):
        check_unique_ids(["a", "b", "a"])
