"""bm25s with a Lucene-like analyzer: its own behaviour, and agreement with pyserini on real DL19 passages."""

from __future__ import annotations

import numpy as np
import pytest

from rankrl.data.records import Document
from rankrl.retrieval.bm25s_index import BM25S, LUCENE_STOPWORDS, LuceneLikeTokenizer, rank_nonzero

DOCS = [
    Document("d1", "The cat sat on the mat."),
    Document("d2", "Dogs are running in the park", title="Parks"),
    Document("d3", "A cat and a dog run together"),
    Document("d4", "Nothing in common"),
]


def mean_jaccard(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> float:
    """Mean over queries of the Jaccard overlap of two runs' document sets."""
    return float(np.mean([len(set(a[q]) & set(b[q])) / max(1, len(set(a[q]) | set(b[q]))) for q in a]))


def test_rank_nonzero_orders_and_drops_zeros() -> None:
    scores = np.array([0.0, 2.0, 1.0, 2.0, 0.0], dtype=np.float32)
    assert rank_nonzero(scores, 10) == [(1, 2.0), (3, 2.0), (2, 1.0)]
    assert rank_nonzero(scores, 2) == [(1, 2.0), (3, 2.0)]


def test_search_returns_only_matching_documents() -> None:
    run = BM25S(DOCS, stemmer=None).search({"q1": "cat", "q2": "the of", "q3": "park"}, k=10)
    assert set(run["q1"]) == {"d1", "d3"}
    assert run["q2"] == {}  # stopwords only
    assert list(run["q3"]) == ["d2"]


def test_k_is_a_cut_and_must_be_positive() -> None:
    retriever = BM25S(DOCS, stemmer=None)
    assert len(retriever.search({"q": "cat dog mat"}, k=1)["q"]) == 1
    with pytest.raises(ValueError, match="positive"):
        retriever.search({"q": "cat"}, k=0)


def test_tokenizer_matches_lucene_conventions() -> None:
    terms = LuceneLikeTokenizer(stemmer=None)(["The Cats, and a DOG's 3 toys!"])[0]
    assert terms == ["cats", "dog", "s", "3", "toys"]
    assert len(LUCENE_STOPWORDS) == 33 and "the" in LUCENE_STOPWORDS


def test_porter_stemming_joins_word_forms() -> None:
    run = BM25S(DOCS, stemmer="porter").search({"q": "running dogs"}, k=10)
    assert set(run["q"]) == {"d2", "d3"}  # "run" and "dog" match after stemming


def test_porter_without_pystemmer_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_stemmer(name, *args, **kwargs):
        if name == "Stemmer":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_stemmer)
    with pytest.raises(ImportError, match="pip install PyStemmer"):
        BM25S(DOCS, stemmer="porter")
    assert BM25S(DOCS, stemmer="auto").tokenize.stem is None


def test_stopwords_are_lucenes(lucene_bm25) -> None:
    from jnius import autoclass

    lucene = autoclass("org.apache.lucene.analysis.en.EnglishAnalyzer").ENGLISH_STOP_WORDS_SET.toString()
    assert set(lucene.strip("[]").split(", ")) == set(LUCENE_STOPWORDS)


def test_top10_close_to_pyserini_without_stemming(lucene_bm25, dl19_sample) -> None:
    queries, docs, _ = dl19_sample
    overlap = mean_jaccard(BM25S(docs, stemmer=None).search(queries, 10), lucene_bm25.search(queries, 10))
    print(f"bm25s (no stemmer) vs pyserini top-10 mean Jaccard: {overlap:.3f}")
    assert overlap >= 0.55  # measured 0.63: Lucene stems, this does not


def test_top10_matches_pyserini_with_porter(lucene_bm25, dl19_sample) -> None:
    queries, docs, _ = dl19_sample
    overlap = mean_jaccard(BM25S(docs, stemmer="porter").search(queries, 10), lucene_bm25.search(queries, 10))
    print(f"bm25s (Porter) vs pyserini top-10 mean Jaccard: {overlap:.3f}")
    assert overlap >= 0.85  # measured 0.95
