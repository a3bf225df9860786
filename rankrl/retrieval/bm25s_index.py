"""BM25 through bm25s (NumPy, in-process), for reward loops that query thousands of times per step.

Scores match pyserini's only when the text is cut into the same terms, so the tokenizer imitates Anserini's
default English analyzer: lowercase, Lucene's 33 English stopwords (bm25s' ``"en"`` list is that set), and the
Porter stemmer (PyStemmer's ``porter``; like Lucene's PorterStemmer it leaves words of one or two letters
alone). Without stemming, top-10 agreement with Lucene drops sharply (tests/retrieval/test_bm25s_index.py).
Documents or queries with no matching term get no result, as in Lucene, instead of bm25s' zero-score filler.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN
from bm25s.tokenization import Tokenizer

from rankrl.data.records import Document, Run
from rankrl.retrieval.base import check_k, check_unique_ids, document_text

log = logging.getLogger(__name__)

# Anserini's DefaultEnglishAnalyzer uses Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET; the same 33 words.
LUCENE_STOPWORDS: tuple[str, ...] = tuple(STOPWORDS_EN)
# Lucene's StandardTokenizer keeps one-letter and numeric tokens; \w+ is the closest regex split.
TOKEN_PATTERN = r"(?u)\b\w+\b"
StemmerChoice = Literal["auto", "porter"] | None


def porter_stemmer(required: bool) -> Callable[[str], str] | None:
    """PyStemmer's Porter stemmer, skipping words of <= 2 letters as Lucene's PorterStemmer does.

    Returns None (with a warning) when PyStemmer is missing and ``required`` is False.
    """
    try:
        import Stemmer
    except ImportError:
        if required:
            raise ImportError("stemmer='porter' needs PyStemmer: `pip install PyStemmer`") from None
        log.warning("PyStemmer is not installed: bm25s runs without stemming and differs more from Lucene")
        return None
    stem = Stemmer.Stemmer("porter").stemWord
    return lambda word: stem(word) if len(word) > 2 else word


def make_stemmer(choice: StemmerChoice) -> Callable[[str], str] | None:
    """``"porter"`` (needs PyStemmer), ``"auto"`` (porter if PyStemmer is installed), or None (none)."""
    if choice is None:
        return None
    if choice not in ("auto", "porter"):
        raise ValueError(f"stemmer must be 'auto', 'porter' or None, got {choice!r}")
    return porter_stemmer(required=choice == "porter")


class LuceneLikeTokenizer:
    """Lowercase, split on word characters, drop Lucene's stopwords, Porter-stem: text -> list of terms."""

    def __init__(self, stemmer: StemmerChoice = "auto") -> None:
        self.stem = make_stemmer(stemmer)
        self._tokenizer = Tokenizer(lower=True, splitter=TOKEN_PATTERN, stopwords=list(LUCENE_STOPWORDS))

    def __call__(self, texts: Sequence[str]) -> list[list[str]]:
        """Terms of each text (stopwords removed, stemmed); an empty list where nothing is left."""
        # Stemming here, not inside bm25s, so query and corpus share exactly one code path.
        tokens = self._tokenizer.tokenize(
            list(texts), update_vocab=True, return_as="string", show_progress=False
        )
        stem = self.stem or (lambda w: w)
        return [[stem(t) for t in doc if t] for doc in tokens]


def rank_nonzero(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Indices and scores of the ``k`` best positive scores, best first (ties: lower index first).

    Args:
        scores: (D,) scores of one query over D documents.
    """
    hits = np.flatnonzero(scores > 0)
    order = hits[np.lexsort((hits, -scores[hits]))][:k]
    return [(int(i), float(scores[i])) for i in order]


class BM25S:
    """In-process BM25 (bm25s, Lucene's formula) with a Lucene-like analyzer.

    Args:
        docs: corpus to index now; or call ``index`` later.
        k1, b: BM25 parameters (Anserini's MS MARCO defaults).
        stemmer: ``"auto"``, ``"porter"`` or None; see ``make_stemmer``.
        tokenizer: replaces the Lucene-like analyzer (e.g. a task's keyword bags pass pre-split terms).
    """

    def __init__(
        self,
        docs: Sequence[Document] | None = None,
        *,
        k1: float = 0.9,
        b: float = 0.4,
        stemmer: StemmerChoice = "auto",
        tokenizer: Callable[[Sequence[str]], list[list[str]]] | None = None,
    ) -> None:
        self.k1, self.b = k1, b
        self.tokenize = tokenizer or LuceneLikeTokenizer(stemmer)
        self.docids: list[str] = []
        self._bm25: bm25s.BM25 | None = None
        if docs is not None:
            self.index(docs)

    def index(self, docs: Sequence[Document]) -> None:
        """Tokenize and index ``docs`` (replaces any previous corpus)."""
        self.index_terms([d.docid for d in docs], self.tokenize([document_text(d) for d in docs]))

    def index_terms(self, docids: Sequence[str], corpus_terms: Sequence[Sequence[str]]) -> None:
        """Index documents already cut into terms: ``corpus_terms[i]`` are the terms of ``docids[i]``."""
        if len(corpus_terms) != len(docids):
            raise ValueError(f"{len(corpus_terms)} term lists for {len(docids)} docids")
        self.docids = check_unique_ids(docids)
        self._bm25 = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        # An empty document still needs a row: bm25s' empty token "" keeps the row count right.
        self._bm25.index([list(t) or [""] for t in corpus_terms], show_progress=False)

    def scores_of_terms(self, terms: Sequence[str]) -> np.ndarray:
        """(D,) BM25 scores of every document for one query given as terms; zeros where nothing matches."""
        bm25 = self._require()
        known = [t for t in terms if t and t in bm25.vocab_dict]
        if not known:
            return np.zeros(len(self.docids), dtype=np.float32)
        return bm25.get_scores(known)

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        """Top-``k`` documents per query: qid -> docid -> score; only documents sharing a term count."""
        check_k(k)
        qids = list(queries)
        run: Run = {}
        for qid, terms in zip(qids, self.tokenize([queries[q] for q in qids])):
            hits = rank_nonzero(self.scores_of_terms(terms), k)
            run[qid] = {self.docids[i]: s for i, s in hits}
        return run

    def _require(self) -> bm25s.BM25:
        if self._bm25 is None:
            raise RuntimeError("BM25S has no index: pass docs to the constructor or call index(docs)")
        return self._bm25
