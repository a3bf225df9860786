"""An inverted index over keyword sets, ranked by BM25 over the keyword bags.

An item is retrieved for a query when the query's keyword bag shares at least one term with the item's bag:
``(S_q ∪ own(q)) ∩ (S_i ∪ own(i)) ≠ ∅``, where ``S`` are generated keywords and ``own`` the fixed terms of
each side (e.g. the query string, an item's title). Keywords are whole phrases: ``"Sofa  Bed"`` and
``"sofa bed"`` are one term, ``"sofa"`` another. Retrieved items are ranked by BM25 over the bags (bm25s,
each phrase one term); set metrics only need the retrieved *set*.

Normalisation (``normalize_keyword``), applied to every keyword and own term on both sides:
- Unicode NFKC, then lower case (``casefold``), so "SOFA", "Sofa" and full-width letters match;
- punctuation and symbols at either end are dropped (``"sofa."``, ``'"sofa"'``, ``"- sofa"`` -> ``"sofa"``),
  inside ones are kept (``"all-clad"``, ``"7.5 qt"``, ``"rock & roll"``);
- runs of whitespace become one space.
A keyword that is empty after this is dropped; duplicates collapse (a bag is a set).
"""

from __future__ import annotations

import unicodedata
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping

from rankrl.data.records import Run
from rankrl.retrieval.bm25s_index import BM25S, rank_nonzero


def _strip_edges(text: str) -> str:
    """``text`` without the characters that are neither letters nor digits at its two ends (linear time)."""
    start, end = 0, len(text)
    while start < end and not text[start].isalnum():
        start += 1
    while end > start and not text[end - 1].isalnum():
        end -= 1
    return text[start:end]


def normalize_keyword(keyword: str) -> str:
    """The canonical form of a keyword phrase (see the module docstring); ``""`` when nothing is left."""
    return " ".join(_strip_edges(unicodedata.normalize("NFKC", keyword).casefold()).split())


def keyword_bag(keywords: Iterable[str]) -> frozenset[str]:
    """The set of normalised, non-empty keywords."""
    if isinstance(keywords, str):
        raise TypeError("expected a collection of keywords, got one string; wrap it in a list")
    return frozenset(k for k in map(normalize_keyword, keywords) if k)


def invert(bags: Mapping[str, Collection[str]]) -> dict[str, set[str]]:
    """Postings: term -> ids of the bags that contain it."""
    postings: dict[str, set[str]] = defaultdict(set)
    for owner, bag in bags.items():
        for term in bag:
            postings[term].add(owner)
    return dict(postings)


def set_f1(predicted: Collection[str], relevant: Collection[str]) -> float:
    """Set F1 (rankrl.eval.metrics.set_prf, imported here so the index loads without the eval stack)."""
    from rankrl.eval.metrics import set_prf

    return set_prf(predicted, relevant)[2]


class KeywordIndex:
    """Items' keyword bags in an inverted index, ranked by BM25 over the bags.

    Args:
        item_keywords: item id -> generated keywords (the part a generator rewrites).
        item_terms: item id -> fixed terms that always belong to the item (e.g. its title).
        k1, b: BM25 parameters of the ranking (Lucene's defaults).
    """

    def __init__(
        self,
        item_keywords: Mapping[str, Iterable[str]],
        item_terms: Mapping[str, Iterable[str]] | None = None,
        *,
        k1: float = 1.2,
        b: float = 0.75,
    ) -> None:
        item_terms = item_terms or {}
        unknown = set(item_terms) - set(item_keywords)
        if unknown:
            raise KeyError(f"item_terms for items without keywords: {sorted(unknown)[:5]}")
        self.keywords = {i: keyword_bag(kw) for i, kw in item_keywords.items()}
        self.own_terms = {i: keyword_bag(item_terms.get(i, ())) for i in self.keywords}
        self.k1, self.b = k1, b
        self.bags = {i: self.keywords[i] | self.own_terms[i] for i in self.keywords}
        self.postings = invert(self.bags)
        self._bm25: BM25S | None = None  # built on the first ranked search: set retrieval needs none

    def _ranker(self) -> BM25S:
        if self._bm25 is None:
            # Terms go in already cut (one keyword phrase = one term), so the text analyzer is never used.
            self._bm25 = BM25S(k1=self.k1, b=self.b, stemmer=None)
            ids = list(self.bags)
            self._bm25.index_terms(ids, [sorted(self.bags[i]) for i in ids])
        return self._bm25

    def bag_of(self, item_id: str) -> frozenset[str]:
        """All terms of an item (keywords and own terms)."""
        if item_id not in self.bags:
            raise KeyError(f"unknown item {item_id!r} ({len(self.bags)} items indexed)")
        return self.bags[item_id]

    def retrieve_bag(self, query_bag: Iterable[str]) -> set[str]:
        """Items sharing at least one term with a normalised query bag."""
        found: set[str] = set()
        for term in query_bag:
            found |= self.postings.get(term, set())
        return found

    def retrieve_set(self, query_keywords: Iterable[str], query_terms: Iterable[str] = ()) -> set[str]:
        """The retrieved set for a query's keywords plus its own terms (e.g. the query string)."""
        return self.retrieve_bag(keyword_bag(query_keywords) | keyword_bag(query_terms))

    def rank_bag(self, query_bag: Iterable[str]) -> list[tuple[str, float]]:
        """The items a normalised query bag retrieves, with BM25 scores over keyword bags, best first."""
        bm25 = self._ranker()
        hits = rank_nonzero(bm25.scores_of_terms(sorted(query_bag)), len(self.bags))
        return [(bm25.docids[i], s) for i, s in hits]

    def retrieve(
        self, query_keywords: Iterable[str], query_terms: Iterable[str] = ()
    ) -> list[tuple[str, float]]:
        """The retrieved items with BM25 scores over keyword bags, best first."""
        return self.rank_bag(keyword_bag(query_keywords) | keyword_bag(query_terms))

    def search(self, queries: Mapping[str, Iterable[str]], k: int | None = None) -> Run:
        """qid -> item -> BM25 score for keyword queries; every retrieved item when ``k`` is None."""
        return {qid: dict(self.retrieve(kw)[:k]) for qid, kw in queries.items()}

    def f1(
        self, query_keywords: Iterable[str], relevant: Collection[str], query_terms: Iterable[str] = ()
    ) -> float:
        """Set F1 of the retrieved set against the relevant items."""
        return set_f1(self.retrieve_set(query_keywords, query_terms), relevant)

    def with_keywords(self, item_id: str, new_keywords: Iterable[str]) -> KeywordIndex:
        """A new index, built from scratch, with only ``item_id``'s keywords replaced (own terms stay)."""
        self.bag_of(item_id)
        keywords = {i: (new_keywords if i == item_id else kw) for i, kw in self.keywords.items()}
        return KeywordIndex(keywords, self.own_terms, k1=self.k1, b=self.b)
