"""CoGR's retrieval: an inverted index over generated keyword sets, and the item-side counterfactual reward.

An item i is retrieved for a query q when ``(S_q ∪ {q}) ∩ (S_i ∪ {i}) ≠ ∅``: the query's keywords (plus its
own terms, e.g. the query string) share a term with the item's keywords (plus its own terms, e.g. its title).
Keywords are whole phrases: ``"Sofa  Bed"`` and ``"sofa bed"`` are one term, ``"sofa"`` another. Retrieved
items are ranked by BM25 over the keyword bags (bm25s); the reward only needs the retrieved *set* and its F1.

The item reward compares the sum of F1 over all queries with item i's keywords replaced against the same sum
on the reference index. Replacing one item's keywords can only move that one item in or out of a query's set,
and only for queries that share a term with its old or new bag, so ``ItemCounterfactual`` re-scores only
those.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping

from rankrl.data.records import Run
from rankrl.retrieval.bm25s_index import BM25S, rank_nonzero


def normalize_keyword(keyword: str) -> str:
    """Lowercase and collapse whitespace, so equal phrases match however they were typed."""
    return " ".join(keyword.lower().split())


def keyword_bag(keywords: Iterable[str]) -> frozenset[str]:
    """The set of normalised, non-empty keywords."""
    if isinstance(keywords, str):
        raise TypeError("expected a collection of keywords, got one string; wrap it in a list")
    return frozenset(k for k in map(normalize_keyword, keywords) if k)


def invert(bags: Mapping[str, frozenset[str]]) -> dict[str, set[str]]:
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
        item_keywords: item id -> generated keywords (the part the item-side generator rewrites).
        item_terms: item id -> fixed terms that always belong to the item (its title, or its text tokens).
        k1, b: BM25 parameters of the ranking (Lucene's defaults; CoGR does not state its own).
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
        # Terms go in already cut (one keyword phrase = one term), so the text analyzer is never used.
        self._bm25 = BM25S(k1=k1, b=b, stemmer=None)
        ids = list(self.bags)
        self._bm25.index_terms(ids, [sorted(self.bags[i]) for i in ids])

    def bag_of(self, item_id: str) -> frozenset[str]:
        """All terms of an item (keywords and own terms)."""
        if item_id not in self.bags:
            raise KeyError(f"unknown item {item_id!r} ({len(self.bags)} items indexed)")
        return self.bags[item_id]

    def retrieve_bag(self, query_bag: frozenset[str]) -> set[str]:
        """Items sharing at least one term with a normalised query bag."""
        found: set[str] = set()
        for term in query_bag:
            found |= self.postings.get(term, set())
        return found

    def retrieve_set(self, query_keywords: Iterable[str], query_terms: Iterable[str] = ()) -> set[str]:
        """The retrieved set I_ret(q) for a query's keywords plus its own terms (e.g. the query string)."""
        return self.retrieve_bag(keyword_bag(query_keywords) | keyword_bag(query_terms))

    def retrieve(
        self, query_keywords: Iterable[str], query_terms: Iterable[str] = ()
    ) -> list[tuple[str, float]]:
        """The retrieved items with BM25 scores over keyword bags, best first."""
        bag = keyword_bag(query_keywords) | keyword_bag(query_terms)
        hits = rank_nonzero(self._bm25.scores_of_terms(sorted(bag)), len(self.bags))
        return [(self._bm25.docids[i], s) for i, s in hits]

    def search(self, queries: Mapping[str, Iterable[str]], k: int | None = None) -> Run:
        """qid -> item -> BM25 score for keyword queries; every retrieved item when ``k`` is None."""
        return {qid: dict(self.retrieve(kw)[:k]) for qid, kw in queries.items()}

    def f1(
        self, query_keywords: Iterable[str], relevant: Collection[str], query_terms: Iterable[str] = ()
    ) -> float:
        """Set F1 of the retrieved set against the relevant items: CoGR's query reward (before the budget)."""
        return set_f1(self.retrieve_set(query_keywords, query_terms), relevant)

    def with_keywords(self, item_id: str, new_keywords: Iterable[str]) -> KeywordIndex:
        """A new index with only ``item_id``'s keywords replaced (own terms stay): the brute-force path."""
        self.bag_of(item_id)
        keywords = {i: (new_keywords if i == item_id else kw) for i, kw in self.keywords.items()}
        return KeywordIndex(keywords, self.own_terms, k1=self.k1, b=self.b)


class ItemCounterfactual:
    """The frozen query side against a reference item index: CoGR's incremental item reward.

    Args:
        index: the reference item index.
        query_keywords: qid -> the frozen query-side keywords.
        relevant: qid -> relevant item ids (missing qids have none).
        query_terms: qid -> the query's own terms (e.g. the query string), optional.
    """

    def __init__(
        self,
        index: KeywordIndex,
        query_keywords: Mapping[str, Iterable[str]],
        relevant: Mapping[str, Collection[str]],
        query_terms: Mapping[str, Iterable[str]] | None = None,
    ) -> None:
        query_terms = query_terms or {}
        self.index = index
        self.query_bags = {
            q: keyword_bag(kw) | keyword_bag(query_terms.get(q, ())) for q, kw in query_keywords.items()
        }
        self.relevant = {q: set(relevant.get(q, ())) for q in self.query_bags}
        self.reference_sets = {q: index.retrieve_bag(bag) for q, bag in self.query_bags.items()}
        self.reference_f1 = {q: set_f1(self.reference_sets[q], self.relevant[q]) for q in self.query_bags}
        self.query_postings = invert(self.query_bags)

    def total_f1(self) -> float:
        """Sum of F1 over all queries on the reference index."""
        return sum(self.reference_f1.values())

    def affected_queries(self, item_id: str, new_keywords: Iterable[str]) -> list[str]:
        """Queries whose retrieval of ``item_id`` can change: those sharing a term with its old or new bag."""
        old = self.index.bag_of(item_id)
        new = keyword_bag(new_keywords) | self.index.own_terms[item_id]
        touched: set[str] = set()
        for term in old | new:
            touched |= self.query_postings.get(term, set())
        return sorted(touched)

    def gain(self, item_id: str, new_keywords: Iterable[str]) -> float:
        """Sum over queries of F1 with ``item_id``'s keywords replaced, minus the reference sum.

        Only affected queries are re-scored; every other query's retrieved set is provably unchanged.
        """
        self.index.bag_of(item_id)  # names an unknown item before anything else
        new_keywords = list(new_keywords)
        new_bag = keyword_bag(new_keywords) | self.index.own_terms[item_id]
        delta = 0.0
        for qid in self.affected_queries(item_id, new_keywords):
            retrieved = set(self.reference_sets[qid])
            retrieved.discard(item_id)
            if self.query_bags[qid] & new_bag:
                retrieved.add(item_id)
            delta += set_f1(retrieved, self.relevant[qid]) - self.reference_f1[qid]
        return delta
