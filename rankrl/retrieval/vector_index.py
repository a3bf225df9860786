"""Exact inner-product search over L2-normalised vectors: cosine similarity, and the rank of a target.

Shared by the text dual encoder and CLIP. Besides top-k search (faiss ``IndexFlatIP``) it answers what a
rank reward needs: the rank of a given target among all N corpus items, from one matrix product with the
stored vectors (the numbers faiss' flat index ranks by), and the similarities the score-inflation monitor
reads (gold, best non-gold, corpus mean).

Ties count against the target (pessimistic): rank = the number of items scoring at least as high as the
target, itself included. A rewrite that collapses every score onto one value (an empty query embeds to the
zero vector) then ranks its target last, not first.

Corpus vectors are computed once and cached on disk (``cached_vectors``): ``<cache_dir>/vectors/<key>/``
holds ``vectors.npy`` (float32, normalised) and ``ids.json``, written beside the final folder and renamed
into place so a half-written cache is never read. A cached index is opened memory-mapped: nothing is copied
into RAM until a search builds the faiss index, so rank rewards over a 100k-item corpus cost one matmul.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from rankrl.data.records import Run

log = logging.getLogger(__name__)

VECTORS_FILE, IDS_FILE = "vectors.npy", "ids.json"


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Row-normalise a (B, d) matrix to unit length, as float32 (faiss' dtype); zero rows stay zero."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


@dataclass
class ProbeScores:
    """What one matmul tells about B queries and their targets (all arrays (B,)).

    Args:
        rank: 1-based pessimistic rank of the best-ranked target among the N items (excluded items dropped).
        size: N for each query: the corpus size minus its excluded items (the rank reward's N).
        gold: cosine of the query with its best-ranked target.
        best_other: the highest cosine with any item that is neither a target nor excluded (-inf if none).
        mean: the mean cosine with all N corpus items (= query . corpus centroid).
        owner, target_rank, target_score: per target of every query (T = all targets, flattened in order),
            the query it belongs to, its own pessimistic rank and its cosine (for rewards over every
            relevant item, not only the best-ranked one).
    """

    rank: np.ndarray
    size: np.ndarray
    gold: np.ndarray
    best_other: np.ndarray
    mean: np.ndarray
    owner: np.ndarray | None = None
    target_rank: np.ndarray | None = None
    target_score: np.ndarray | None = None

    def per_query_mean(self, values: np.ndarray) -> np.ndarray:
        """(B,) the mean of per-target ``values`` (T,) over each query's targets."""
        counts = np.bincount(self.owner, minlength=len(self.rank))
        return np.bincount(self.owner, weights=values, minlength=len(self.rank)) / np.maximum(counts, 1)


class VectorIndex:
    """Normalised corpus vectors; a faiss flat inner-product index over them is built on first search.

    Args:
        ids: the N item ids, in the row order of ``vectors``.
        vectors: (N, d) item embeddings; normalised here unless ``normalized`` (e.g. a memory-mapped cache).
        normalized: trust that the rows are already unit length (or zero) and use ``vectors`` as they are.
    """

    def __init__(self, ids: Sequence[str], vectors: np.ndarray, normalized: bool = False) -> None:
        if vectors.ndim != 2 or len(ids) != vectors.shape[0]:
            raise ValueError(f"need one row per id: {len(ids)} ids, vectors of shape {vectors.shape}")
        self.ids = list(ids)
        self.row = {docid: i for i, docid in enumerate(self.ids)}
        if len(self.row) != len(self.ids):
            raise ValueError("item ids must be unique")
        # a memmap stays a (read-only) view: ascontiguousarray of a float32 C-order memmap copies nothing
        self.vectors = np.asarray(vectors, dtype=np.float32) if normalized else l2_normalize(vectors)
        self._faiss: faiss.IndexFlatIP | None = None
        self._centroid: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def faiss(self) -> faiss.IndexFlatIP:
        """The flat inner-product index (copies the vectors into faiss on first use)."""
        if self._faiss is None:
            self._faiss = faiss.IndexFlatIP(self.vectors.shape[1])
            self._faiss.add(np.ascontiguousarray(self.vectors))
        return self._faiss

    @property
    def centroid(self) -> np.ndarray:
        """(d,) the mean item vector: a query's mean cosine with the corpus is its dot product with this."""
        if self._centroid is None:
            self._centroid = self.vectors.mean(axis=0, dtype=np.float64).astype(np.float32)
        return self._centroid

    def search(
        self,
        qids: Sequence[str],
        query_vectors: np.ndarray,
        k: int,
        excluded: Mapping[str, Sequence[str]] | None = None,
    ) -> Run:
        """Top-``k`` items per query by cosine similarity, each query's ``excluded`` items left out.

        Args:
            qids: B query ids.
            query_vectors: (B, d) query embeddings (normalised here).
            excluded: qid -> item ids that must not be returned (CIRR drops the reference image).
        """
        excluded = excluded or {}
        extra = max((len(v) for v in excluded.values()), default=0)
        depth = min(k + extra, len(self.ids))
        scores, rows = self.faiss.search(l2_normalize(query_vectors), depth)  # (B, depth) each
        run: Run = {}
        for qid, row_ids, row_scores in zip(qids, rows, scores):
            banned = set(excluded.get(qid, ()))
            hits = [(self.ids[r], float(s)) for r, s in zip(row_ids, row_scores) if r >= 0]
            run[qid] = dict([(d, s) for d, s in hits if d not in banned][:k])
        return run

    def target_rows(self, target_ids: Sequence[str]) -> np.ndarray:
        """(B,) corpus rows of the targets; raises naming the first unknown id."""
        missing = [t for t in target_ids if t not in self.row]
        if missing:
            raise KeyError(f"target ids not in the corpus: {missing[:5]} (corpus has {len(self.ids)} items)")
        return np.array([self.row[t] for t in target_ids], dtype=np.int64)

    def scores(self, query_vectors: np.ndarray) -> np.ndarray:
        """(B, N) cosine of every query with every item: the one matrix product everything here reads."""
        return l2_normalize(query_vectors) @ self.vectors.T

    def similarity(self, query_vectors: np.ndarray, target_ids: Sequence[str]) -> np.ndarray:
        """(B,) cosine similarity of each query with its own target."""
        if len(query_vectors) != len(target_ids):
            raise ValueError(f"{len(query_vectors)} queries but {len(target_ids)} targets")
        targets = self.vectors[self.target_rows(target_ids)]  # (B, d)
        return np.einsum("bd,bd->b", l2_normalize(query_vectors), targets)

    def rank_of(
        self,
        query_vectors: np.ndarray,
        target_ids: Sequence[str],
        excluded: Sequence[Sequence[str]] | None = None,
    ) -> np.ndarray:
        """(B,) 1-based rank of each query's target among all N items (1 = most similar), ties pessimistic.

        Rank = the number of items at least as similar as the target (itself included), minus excluded
        items at least as similar. One matrix product, then one comparison per score.
        """
        if len(query_vectors) != len(target_ids):
            raise ValueError(f"{len(query_vectors)} queries but {len(target_ids)} targets")
        scores = self.scores(query_vectors)  # (B, N)
        target = scores[np.arange(len(scores)), self.target_rows(target_ids)]  # (B,)
        rank = (scores >= target[:, None]).sum(axis=1)
        return rank - self._excluded_above(scores, target, excluded)

    def best_rank_of(
        self,
        query_vectors: np.ndarray,
        target_sets: Sequence[Sequence[str]],
        excluded: Sequence[Sequence[str]] | None = None,
    ) -> np.ndarray:
        """(B,) rank of the best-ranked of each query's targets (several relevant items), ties pessimistic."""
        return self.probe(query_vectors, target_sets, excluded, others=False).rank

    def probe(
        self,
        query_vectors: np.ndarray,
        target_sets: Sequence[Sequence[str]],
        excluded: Sequence[Sequence[str]] | None = None,
        others: bool = True,
        every_target: bool = False,
    ) -> ProbeScores:
        """Rank and similarities of each query's best target, from one matrix product.

        Args:
            query_vectors: (B, d) query embeddings.
            target_sets: B non-empty lists of target ids (the relevant items of each query).
            excluded: B lists of item ids that do not take part in the ranking (or None).
            others: also find the best non-target similarity (costs a copy of the score matrix).
            every_target: also rank every target on its own (``owner``, ``target_rank``, ``target_score``).
        """
        if len(query_vectors) != len(target_sets):
            raise ValueError(f"{len(query_vectors)} queries but {len(target_sets)} target sets")
        if any(len(t) == 0 for t in target_sets):
            raise ValueError("every query needs at least one target")
        scores = self.scores(query_vectors)  # (B, N)
        b = len(scores)
        lengths = np.array([len(t) for t in target_sets])
        owner = np.repeat(np.arange(b), lengths)  # query of each flattened target
        rows = self.target_rows([t for ts in target_sets for t in ts])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        gold = np.maximum.reduceat(scores[owner, rows], starts)  # (B,)
        below = self._excluded_above(scores, gold, excluded)
        rank = (scores >= gold[:, None]).sum(axis=1) - below
        size = len(self.ids) - np.array([len(set(e)) for e in excluded] if excluded else [0] * b)
        best_other = np.full(b, -np.inf, dtype=np.float32)
        if others:
            masked = scores.copy()
            masked[owner, rows] = -np.inf
            if excluded:
                ex_owner, ex_rows = self._excluded_rows(excluded)
                masked[ex_owner, ex_rows] = -np.inf
            best_other = masked.max(axis=1)
        mean = l2_normalize(query_vectors) @ self.centroid  # (B,)
        if not every_target:
            return ProbeScores(rank, size, gold, best_other, mean)
        target_score = scores[owner, rows]  # (T,)
        target_rank = (scores[owner] >= target_score[:, None]).sum(axis=1)  # (T,), one comparison row each
        if excluded:
            ex_owner, ex_rows = self._excluded_rows(excluded)
            for t, (b, s) in enumerate(zip(owner, target_score)):
                target_rank[t] -= int((scores[b, ex_rows[ex_owner == b]] >= s).sum())
        return ProbeScores(rank, size, gold, best_other, mean, owner, target_rank, target_score)

    def _excluded_rows(self, excluded: Sequence[Sequence[str]]) -> tuple[np.ndarray, np.ndarray]:
        sets = [sorted(set(e)) for e in excluded]
        owner = np.repeat(np.arange(len(sets)), [len(e) for e in sets])
        return owner, self.target_rows([x for e in sets for x in e])

    def _excluded_above(
        self, scores: np.ndarray, target: np.ndarray, excluded: Sequence[Sequence[str]] | None
    ) -> np.ndarray:
        """(B,) how many of each query's excluded items score at least as high as its target."""
        out = np.zeros(len(scores), dtype=np.int64)
        if not excluded:
            return out
        if len(excluded) != len(scores):
            raise ValueError(f"{len(scores)} queries but {len(excluded)} excluded lists")
        owner, rows = self._excluded_rows(excluded)
        np.add.at(out, owner, scores[owner, rows] >= target[owner])
        return out


def split_queries(queries: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Split a qid -> text mapping into aligned lists of qids and texts."""
    qids = list(queries)
    return qids, [queries[q] for q in qids]


# ---------------------------------------------------------------------------------------------- the cache


def load_vectors(folder: Path) -> VectorIndex:
    """A cached index, its vectors memory-mapped read-only."""
    ids = json.loads((folder / IDS_FILE).read_text())
    vectors = np.load(folder / VECTORS_FILE, mmap_mode="r")
    return VectorIndex(ids, vectors, normalized=True)


def save_vectors(
    folder: Path,
    ids: Sequence[str],
    encode: Callable[[range], np.ndarray],
    batch_size: int,
    desc: str = "encoding",
) -> None:
    """Encode items batch by batch straight into ``folder/vectors.npy`` (normalised float32), with a
    progress bar, then write ``ids.json``. ``encode(positions)`` returns the (b, d) vectors of the items at
    those positions. The folder appears only when complete (built beside it, then renamed)."""
    from tqdm.auto import tqdm

    if not ids:
        raise ValueError("cannot index an empty corpus")
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-building-"))
    try:
        out = None
        for start in tqdm(range(0, len(ids), batch_size), desc=desc, unit="batch", mininterval=5):
            positions = range(start, min(start + batch_size, len(ids)))
            vectors = l2_normalize(encode(positions))  # (b, d)
            if out is None:  # the width is known once the first batch is encoded
                out = np.lib.format.open_memmap(
                    work / VECTORS_FILE, mode="w+", dtype=np.float32, shape=(len(ids), vectors.shape[1])
                )
            out[positions.start : positions.stop] = vectors
        out.flush()
        del out
        (work / IDS_FILE).write_text(json.dumps(list(ids)))
        try:
            os.replace(work, folder)
        except OSError:
            if not (folder / IDS_FILE).exists():  # a concurrent build that finished first is as good as ours
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cached_vectors(
    cache_dir: str | Path | None,
    key: str,
    ids: Sequence[str],
    encode: Callable[[range], np.ndarray],
    batch_size: int = 64,
    desc: str = "encoding",
) -> VectorIndex:
    """The index of ``ids`` under ``<cache_dir>/vectors/<key>``, encoded once (see ``save_vectors``).

    ``key`` must identify the encoder and the corpus content (e.g. ``clip-ViT-B-16-openai-<corpus hash>``).
    ``cache_dir=None`` encodes into memory and caches nothing.
    """
    if cache_dir is None:
        vectors = np.concatenate(
            [encode(range(s, min(s + batch_size, len(ids)))) for s in range(0, len(ids), batch_size)]
        )
        return VectorIndex(ids, vectors)
    folder = Path(cache_dir) / "vectors" / key
    if not (folder / IDS_FILE).exists():
        log.info("encoding %d items into %s", len(ids), folder)
        save_vectors(folder, ids, encode, batch_size, desc)
    index = load_vectors(folder)
    if index.ids != list(ids):
        raise RuntimeError(f"cached index {folder} holds other ids than the corpus; delete the folder")
    return index
