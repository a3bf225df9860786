"""The one interface every frozen retriever follows, and helpers shared by all of them.

A retriever is built over a corpus of `Document`s (in its constructor or with ``index``), then answers
``search(queries, k) -> Run``: qid -> docid -> score, the shape ir_measures reads. Retrievers that serve a
rank reward (CLIP over an image gallery) also answer ``rank_of``: the 1-based rank of a target item over the
whole corpus.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from rankrl.data.records import Document, Run


@runtime_checkable
class Retriever(Protocol):
    """A frozen first-stage retriever over one corpus."""

    def index(self, docs: Sequence[Document]) -> None:
        """Build (or load from cache) the index over ``docs``; replaces any previous corpus."""
        ...

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        """Top-``k`` documents per query: qid -> docid -> score (higher is better)."""
        ...


@runtime_checkable
class RankingRetriever(Retriever, Protocol):
    """A retriever that can place a given target in the ranking of the whole corpus (rank rewards)."""

    def rank_of(self, queries: Sequence[str], target_ids: Sequence[str]) -> list[int]:
        """1-based rank of ``target_ids[i]`` for ``queries[i]`` over the whole corpus (1 = first)."""
        ...


def drop_excluded(run: Run, excluded: Mapping[str, Collection[str]]) -> Run:
    """Remove each query's excluded docids from its ranking (BRIGHT's ``excluded_ids``).

    BRIGHT lists, per query, documents that must not count (e.g. the question's own source page); the
    official evaluation drops them from the run before scoring. Queries absent from ``excluded`` stay as is.
    """
    out: Run = {}
    for qid, ranking in run.items():
        banned = set(excluded.get(qid, ()))
        out[qid] = {docid: score for docid, score in ranking.items() if docid not in banned}
    return out


def top_k(run: Run, k: int) -> Run:
    """Keep the ``k`` highest-scoring documents per query (ties broken by docid, as trec_eval does)."""
    return {
        qid: dict(sorted(ranking.items(), key=lambda kv: (-kv[1], kv[0]))[:k]) for qid, ranking in run.items()
    }


def search_excluding(
    retriever: Retriever,
    queries: Mapping[str, str],
    k: int,
    excluded: Mapping[str, Collection[str]],
    refill: bool = True,
) -> Run:
    """Search, drop excluded docids, and still return ``k`` documents per query where the corpus allows.

    Asks the retriever for ``k`` plus the largest exclusion list, so dropping never leaves a query short.
    ``refill=False``: the top ``k`` with the excluded docids dropped, so a query keeps fewer than ``k`` (what
    a run searched to depth k and then filtered holds).
    """
    extra = max((len(v) for v in excluded.values()), default=0) if refill else 0
    return top_k(drop_excluded(retriever.search(queries, k + extra), excluded), k)


def check_k(k: int) -> int:
    """Validate a cut-off ``k`` (a positive int)."""
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    return k


def check_unique_ids(docids: Iterable[str]) -> list[str]:
    """The docids as a list; raises if there are none or one repeats."""
    ids = list(docids)
    if not ids:
        raise ValueError("cannot index an empty corpus: pass at least one Document")
    dups = [docid for docid, n in Counter(ids).items() if n > 1]
    if dups:
        raise ValueError(f"docids must be unique; repeated: {dups[:5]}")
    return ids


def document_text(doc: Document) -> str:
    """The text a retriever indexes: title and body, as pyserini's BEIR/BRIGHT collections join them."""
    return f"{doc.title} {doc.text}".strip() if doc.title else doc.text


def corpus_fingerprint(
    docs: Iterable[Document], settings: Mapping[str, object], extra_fields: Sequence[str] = ()
) -> str:
    """A content hash of the corpus (ids, titles, texts, in order) and the index settings.

    Order is part of the hash because Lucene breaks score ties by internal document number.
    ``extra_fields`` adds ``doc.extra`` entries that carry the content, e.g. ``image_path`` for images.
    """
    h = hashlib.sha256(json.dumps(dict(settings), sort_keys=True, default=str).encode())
    for d in docs:
        for part in (d.docid, d.title, d.text, *(str(d.extra.get(f, "")) for f in extra_fields)):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
    return h.hexdigest()[:20]


def default_cache_dir() -> Path:
    """The one cache folder, as ``paths.cache_dir`` in conf/paths: ``$RANKRL_CACHE_DIR``, else
    ``<repo>/.cache``.

    Entry points pass ``paths.cache_dir`` explicitly; this default serves library use outside them.
    """
    root = os.environ.get("RANKRL_CACHE_DIR")
    return Path(root).expanduser() if root else Path(__file__).resolve().parents[2] / ".cache"
