"""BM25 through pyserini (Lucene/Anserini), the first stage of the TREC DL and BRIGHT reranking runs.

The index is built by Anserini's ``IndexCollection`` (what ``python -m pyserini.index.lucene`` runs) in a
child JVM started from the ``java`` binary that ``rankrl.retrieval.java`` found: its options are then ours,
not pyserini's, and an indexing crash cannot take the training process with it. Searching uses pyserini's
``LuceneSearcher`` in-process with ``set_bm25(k1, b)`` and ``batch_search``.

An index folder is named by a content hash of the corpus, so a second call with the same documents reuses it.
BRIGHT evaluates each task on its own corpus: build one retriever per task, e.g.
``{task: PyseriniBM25(docs, name=f"bright-{task}") for task, docs in corpora.items()}``, and drop each
query's ``excluded_ids`` with ``rankrl.retrieval.base.search_excluding``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rankrl.conf_defaults import conf_default
from rankrl.data.records import Document, Run
from rankrl.retrieval.base import (
    check_k,
    check_unique_ids,
    corpus_fingerprint,
    default_cache_dir,
    document_text,
)
from rankrl.retrieval.java import anserini_jar, configure_java, jvm_options, start_jvm

if TYPE_CHECKING:
    from pyserini.search.lucene import LuceneSearcher

log = logging.getLogger(__name__)

_META = "rankrl_index.json"
MAX_QUERY_TERMS = 1 << 20


def write_json_collection(docs: Sequence[Document], folder: Path) -> Path:
    """Write ``docs`` as an Anserini JsonCollection (one ``{"id", "contents"}`` object per line)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "docs.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps({"id": doc.docid, "contents": document_text(doc)}, ensure_ascii=False) + "\n")
    return path


BM25_INDEX_OPTIONS = ("-storePositions", "-storeDocvectors", "-storeRaw")


def run_anserini_indexer(
    collection_dir: Path,
    index_dir: Path,
    threads: int,
    collection: str = "JsonCollection",
    options: Sequence[str] = BM25_INDEX_OPTIONS,
) -> None:
    """Index a collection folder with Anserini: by default a JsonCollection with its default English analyzer
    (Porter stemming, stopwords); ``collection="JsonVectorCollection"`` with ``-impact -pretokenized``
    indexes learned term weights as they are (SPLADE: rankrl.retrieval.splade)."""
    home = configure_java()
    cmd = [
        str(home / "bin" / "java"),
        *jvm_options(home),
        "-cp",
        str(anserini_jar()),
        "io.anserini.index.IndexCollection",
        "-collection", collection,
        "-generator", "DefaultLuceneDocumentGenerator",
        "-input", str(collection_dir),
        "-index", str(index_dir),
        "-threads", str(threads),
        *options,
    ]  # fmt: skip
    log.info("indexing: %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy(), check=False)
    if proc.returncode != 0 or not any(index_dir.glob("segments_*")):
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-20:])
        raise RuntimeError(f"Anserini indexing failed (exit {proc.returncode}) for {collection_dir}:\n{tail}")


def cached_lucene_index(
    docs: Sequence[Document],
    cache_dir: str | Path | None,
    name: str,
    settings: dict[str, Any],
    build: Callable[[Path], None],
) -> Path:
    """The Lucene index of ``docs`` under ``<cache_dir>/lucene/<name>-<hash of docs and settings>``: reused
    when complete, else made by ``build(work)``, which writes an Anserini index into ``work / "index"``.

    The folder appears only once complete (built beside it, then renamed), so an interrupted build is never
    mistaken for a finished one, and two processes building the same corpus do not corrupt each other.
    """
    check_unique_ids(d.docid for d in docs)
    root = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "lucene"
    final = root / f"{name}-{corpus_fingerprint(docs, settings)}"
    if (final / _META).exists():
        log.info("reusing Lucene index %s", final)
        return final
    root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}-building-"))
    try:
        build(work)
        (work / "index" / _META).write_text(json.dumps({"num_docs": len(docs), "name": name, **settings}))
        try:
            os.replace(work / "index", final)
        except OSError:
            if not (final / _META).exists():  # a concurrent build that finished first is as good as ours
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final


def build_lucene_index(
    docs: Sequence[Document],
    cache_dir: str | Path | None = None,
    name: str = "bm25",
    threads: int = 2,
) -> Path:
    """Build (or reuse) a BM25 Lucene index of ``docs`` (``cached_lucene_index``); returns its folder."""

    def build(work: Path) -> None:
        collection = write_json_collection(docs, work / "collection").parent
        run_anserini_indexer(collection, work / "index", threads)

    settings = {"analyzer": "anserini-default-english", "jar": anserini_jar().name}
    return cached_lucene_index(docs, cache_dir, name, settings, build)


def open_searcher(index_dir: Path, k1: float, b: float) -> LuceneSearcher:
    """A pyserini LuceneSearcher over ``index_dir`` with BM25(k1, b)."""
    start_jvm()  # before the first pyserini import, so the JVM gets options this JDK supports
    from jnius import autoclass
    from pyserini.search.lucene import LuceneSearcher

    # One clause per distinct query term: long queries (BRIGHT's, or LLM rewrites) pass Lucene's default
    # of 1,024 and would fail inside batch_search with an unhelpful "completedTaskCount" error.
    autoclass("org.apache.lucene.search.IndexSearcher").setMaxClauseCount(MAX_QUERY_TERMS)
    searcher = LuceneSearcher(str(index_dir))
    searcher.set_bm25(k1, b)
    return searcher


class LuceneSearch:
    """What a retriever over an open pyserini searcher (``self._searcher``: BM25's, SPLADE's impact one) does
    alike: count its documents and search queries in batches on ``self.threads`` threads."""

    _searcher: Any = None
    threads: int = 2

    @property
    def num_docs(self) -> int:
        """Documents in the open index (Anserini skips documents whose text is empty)."""
        return int(self._require().num_docs)

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        """Top-``k`` documents per query: qid -> docid -> score; a query that matches no term gets an empty
        ranking."""
        check_k(k)
        searcher = self._require()
        qids = list(queries)
        hits = searcher.batch_search([queries[q] for q in qids], qids, k=k, threads=self.threads)
        return {q: {h.docid: float(h.score) for h in hits.get(q, [])} for q in qids}

    def _require(self) -> Any:
        if self._searcher is None:
            raise RuntimeError(
                f"{type(self).__name__} has no index: pass docs to the constructor or call index(docs)"
            )
        return self._searcher


class PyseriniBM25(LuceneSearch):
    """BM25 over a Lucene index (Anserini defaults k1=0.9, b=0.4 as used for MS MARCO passage and BRIGHT).

    Args:
        docs: corpus to index now; or call ``index`` later (Hydra builds this with ``_partial_``).
        k1, b: BM25 parameters.
        threads: indexing and ``batch_search`` threads.
        cache_dir: index cache root (default ``$RANKRL_CACHE_DIR`` or ``~/.cache/rankrl``).
        name: prefix of the index folder, e.g. ``bright-biology`` for one of BRIGHT's per-task indexes.
    """

    def __init__(
        self,
        docs: Sequence[Document] | None = None,
        *,
        k1: float = conf_default("retriever/bm25", "k1"),  # one home: conf/retriever/bm25.yaml
        b: float = conf_default("retriever/bm25", "b"),
        threads: int = 2,
        cache_dir: str | Path | None = None,
        name: str = "bm25",
    ) -> None:
        self.k1, self.b, self.threads = k1, b, threads
        self.cache_dir, self.name = cache_dir, name
        self.index_dir: Path | None = None
        self._searcher: Any = None
        if docs is not None:
            self.index(docs)

    def index(self, docs: Sequence[Document]) -> None:
        """Build or reuse the index of ``docs`` and open a searcher on it."""
        self.load(build_lucene_index(docs, self.cache_dir, self.name, self.threads))

    def load(self, index_dir: str | Path) -> None:
        """Open an existing Lucene index (e.g. one built by Anserini elsewhere)."""
        self.index_dir = Path(index_dir)
        self._searcher = open_searcher(self.index_dir, self.k1, self.b)
