"""Exact inner-product search over L2-normalised vectors (faiss ``IndexFlatIP``): cosine similarity.

Shared by the text dual encoder and CLIP. Besides top-k search it answers what GRAPE's reward needs: the rank
of a given target among all N corpus items, and the cosine of a query with its target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import faiss
import numpy as np

from rankrl.data.records import Run


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Row-normalise a (B, d) matrix to unit length, as float32 (faiss' dtype); zero rows stay zero."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


class VectorIndex:
    """Normalised corpus vectors behind a faiss flat inner-product index.

    Args:
        ids: the N item ids, in the row order of ``vectors``.
        vectors: (N, d) item embeddings; normalised here.
    """

    def __init__(self, ids: Sequence[str], vectors: np.ndarray) -> None:
        if vectors.ndim != 2 or len(ids) != vectors.shape[0]:
            raise ValueError(f"need one row per id: {len(ids)} ids, vectors of shape {vectors.shape}")
        self.ids = list(ids)
        self.row = {docid: i for i, docid in enumerate(self.ids)}
        self.vectors = l2_normalize(vectors)  # (N, d)
        self.faiss = faiss.IndexFlatIP(self.vectors.shape[1])
        self.faiss.add(self.vectors)

    def __len__(self) -> int:
        return len(self.ids)

    def search(self, qids: Sequence[str], query_vectors: np.ndarray, k: int) -> Run:
        """Top-``k`` items per query by cosine similarity.

        Args:
            qids: B query ids.
            query_vectors: (B, d) query embeddings (normalised here).
        """
        scores, rows = self.faiss.search(l2_normalize(query_vectors), min(k, len(self.ids)))  # (B, k) each
        return {
            qid: {self.ids[r]: float(s) for r, s in zip(row_ids, row_scores) if r >= 0}
            for qid, row_ids, row_scores in zip(qids, rows, scores)
        }

    def target_rows(self, target_ids: Sequence[str]) -> np.ndarray:
        """(B,) corpus rows of the targets; raises naming the first unknown id."""
        missing = [t for t in target_ids if t not in self.row]
        if missing:
            raise KeyError(f"target ids not in the corpus: {missing[:5]} (corpus has {len(self.ids)} items)")
        return np.array([self.row[t] for t in target_ids], dtype=np.int64)

    def similarity(self, query_vectors: np.ndarray, target_ids: Sequence[str]) -> np.ndarray:
        """(B,) cosine similarity of each query with its own target."""
        if len(query_vectors) != len(target_ids):
            raise ValueError(f"{len(query_vectors)} queries but {len(target_ids)} targets")
        targets = self.vectors[self.target_rows(target_ids)]  # (B, d)
        return np.einsum("bd,bd->b", l2_normalize(query_vectors), targets)

    def rank_of(self, query_vectors: np.ndarray, target_ids: Sequence[str]) -> np.ndarray:
        """(B,) 1-based rank of each query's target among all N items (1 = most similar).

        Rank = 1 + the number of items strictly more similar than the target, so exact ties resolve in the
        target's favour. Scores come from one matrix product with the stored vectors, the numbers faiss'
        flat index ranks by.
        """
        queries = l2_normalize(query_vectors)  # (B, d)
        if len(queries) != len(target_ids):
            raise ValueError(f"{len(queries)} queries but {len(target_ids)} targets")
        scores = queries @ self.vectors.T  # (B, N)
        target_scores = scores[np.arange(len(queries)), self.target_rows(target_ids)]  # (B,)
        return 1 + (scores > target_scores[:, None]).sum(axis=1)


def split_queries(queries: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Split a qid -> text mapping into aligned lists of qids and texts."""
    qids = list(queries)
    return qids, [queries[q] for q in qids]
