"""SPLADE through pyserini: learned sparse retrieval over a Lucene impact index (a SPLADE-v2 baseline).

Documents are encoded by pyserini's ``SpladeDocumentEncoder`` (a term weight per vocabulary entry,
log(1 + relu(MLM logit)) max-pooled over the text, quantised to an integer as pyserini quantises it,
round(w / 5 * 256)), written as an Anserini ``JsonVectorCollection`` and indexed with ``-impact
-pretokenized``: the weights are the index's term frequencies, with no analyzer and no BM25 length norms
(pyserini's docs/experiments-spladev2.md). Queries are encoded by ``SpladeQueryEncoder`` and searched by
``LuceneImpactSearcher``: a document scores the sum over the query's terms of query weight times document
weight. (That searcher drops query terms whose idf is not above 0, i.e. terms of every document.)

The default model is SPLADE v2's DistilSPLADE-max, ``naver/splade_v2_distil`` (the model of pyserini's
SPLADE v2 page). It loads from a local folder or from the Hugging Face cache: runs are offline
(``rankrl.config``), so a model that is not on this machine stops with one line naming the fetch. An index is
cached under ``<cache_dir>/lucene/<name>-<hash of the corpus, the model and the settings>``, so encoding the
corpus (the slow part: a forward pass per document) happens once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rankrl.conf_defaults import conf_default
from rankrl.data.records import Document
from rankrl.retrieval.base import (
    document_text,
)
from rankrl.retrieval.bm25 import MAX_QUERY_TERMS, LuceneSearch, cached_lucene_index, run_anserini_indexer
from rankrl.retrieval.java import anserini_jar, start_jvm

log = logging.getLogger(__name__)

# the settings' one home is conf/retriever/splade-v2.yaml (rankrl.conf_defaults)
SPLADE_V2 = conf_default("retriever/splade-v2", "model_path")
IMPACT_OPTIONS = ("-impact", "-pretokenized", "-storeRaw")


def load_encoder(factory: Callable[..., Any], model_path: str, **kwargs: Any) -> Any:
    """One of pyserini's SPLADE encoders; a hub name that is not on this machine stops with one line."""
    try:
        return factory(model_path, **kwargs)
    except OSError as err:
        if Path(model_path).is_dir():
            raise
        from rankrl.models import ModelNotAvailableError

        raise ModelNotAvailableError(
            f"SPLADE model {model_path!r} is not on this machine: fetch it where the hub is reachable "
            f"(`hf download {model_path}`, into the Hugging Face cache) or set retriever.model_path=<its "
            f"folder> ({type(err).__name__})"
        ) from None


def positive(weights: Mapping[str, int]) -> dict[str, int]:
    """The terms an impact index keeps: weights that stayed above 0 after quantisation."""
    return {t: int(w) for t, w in weights.items() if w > 0}


def write_vector_collection(
    docs: Sequence[Document], vectors: Iterable[Mapping[str, int]], folder: Path
) -> Path:
    """``docs`` with their term weights as an Anserini JsonVectorCollection (``id``, ``contents``,
    ``vector``: one object per line)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "docs.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for doc, vector in zip(docs, vectors, strict=True):
            record = {"id": doc.docid, "contents": document_text(doc), "vector": positive(vector)}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


class QueryWeights:
    """What LuceneImpactSearcher calls to encode a query (``encode(text)``): here the retriever's own
    ``encode_query`` (pyserini's encoder, with the retriever's query length and no gradients)."""

    def __init__(self, encode: Callable[[str], dict[str, int]]) -> None:
        self._encode = encode

    def encode(self, text: str, **_: Any) -> dict[str, int]:
        return self._encode(text)


class SpladeRetriever(LuceneSearch):
    """SPLADE (v2 by default) over a Lucene impact index, through pyserini and Anserini.

    Args:
        docs: corpus to index now; or call ``index`` later (Hydra builds this with ``_partial_``).
        model_path: a local folder or a hub name of a SPLADE masked-LM checkpoint.
        batch_size: documents encoded per forward pass.
        device: torch device; None = CUDA when available, else the CPU.
        max_length: tokens of a document the encoder reads (pyserini's default, 512).
        query_max_length: tokens of a query (pyserini's default, 256).
        threads: indexing and ``batch_search`` threads.
        cache_dir: index cache root (default ``$RANKRL_CACHE_DIR`` or ``<repo>/.cache``).
        name: prefix of the index folder.
    """

    def __init__(
        self,
        docs: Sequence[Document] | None = None,
        *,
        model_path: str | Path = SPLADE_V2,
        batch_size: int = conf_default("retriever/splade-v2", "batch_size"),
        device: str | None = None,
        max_length: int = conf_default("retriever/splade-v2", "max_length"),
        query_max_length: int = conf_default("retriever/splade-v2", "query_max_length"),
        threads: int = 2,
        cache_dir: str | Path | None = None,
        name: str = "splade",
    ) -> None:
        import torch

        self.model_path = str(model_path)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.batch_size, self.max_length, self.query_max_length = batch_size, max_length, query_max_length
        self.threads, self.cache_dir, self.name = threads, cache_dir, name
        self.index_dir: Path | None = None
        self._searcher: Any = None
        self.query_encoder = self._query_encoder()  # loaded now: a missing model stops before any indexing
        if docs is not None:
            self.index(docs)

    def _query_encoder(self) -> Any:
        start_jvm()  # pyserini.encode starts pyserini's JVM on import: ours first (rankrl.retrieval.java)
        from pyserini.encode import SpladeQueryEncoder

        encoder = load_encoder(SpladeQueryEncoder, self.model_path, device=self.device)
        encoder.model.eval()
        return encoder

    def encode_documents(self, docs: Sequence[Document]) -> list[dict[str, int]]:
        """Each document's quantised term weights (pyserini's document encoder, title and text as the BM25
        index reads them)."""
        import torch
        from pyserini.encode import SpladeDocumentEncoder

        encoder = load_encoder(SpladeDocumentEncoder, self.model_path, device=self.device)
        encoder.model.eval()
        out: list[dict[str, int]] = []
        with torch.inference_mode():
            for start in range(0, len(docs), self.batch_size):
                batch = [document_text(d) for d in docs[start : start + self.batch_size]]
                out += [positive(v) for v in encoder.encode(batch, max_length=self.max_length)]
        return out

    def encode_query(self, text: str) -> dict[str, int]:
        """A query's quantised term weights, as the searcher sends them to Lucene (before its idf filter)."""
        import torch

        with torch.inference_mode():
            return positive(self.query_encoder.encode(text, max_length=self.query_max_length))

    def build_index(self, docs: Sequence[Document]) -> Path:
        """Build (or reuse) the impact index of ``docs`` (``cached_lucene_index``); returns its folder."""

        def build(work: Path) -> None:
            vectors = self.encode_documents(docs)
            collection = write_vector_collection(docs, vectors, work / "collection").parent
            run_anserini_indexer(
                collection, work / "index", self.threads, "JsonVectorCollection", IMPACT_OPTIONS
            )

        settings = {
            "model": self.model_path,
            "max_length": self.max_length,
            "weights": "pyserini-splade round(w/5*256)",
            "jar": anserini_jar().name,
        }
        return cached_lucene_index(docs, self.cache_dir, self.name, settings, build)

    def index(self, docs: Sequence[Document]) -> None:
        """Build or reuse the index of ``docs`` and open an impact searcher on it."""
        self.load(self.build_index(docs))

    def load(self, index_dir: str | Path) -> None:
        """Open an existing impact index (one built by this class, or by Anserini from the same model)."""
        start_jvm()
        from jnius import autoclass
        from pyserini.search.lucene import LuceneImpactSearcher

        # one clause per query term: SPLADE expands a query to many terms, and past Lucene's default of 1,024
        # batch_search fails with an unhelpful "completedTaskCount" error (as BM25 on long queries)
        autoclass("org.apache.lucene.search.IndexSearcher").setMaxClauseCount(MAX_QUERY_TERMS)
        self.index_dir = Path(index_dir)
        self._searcher = LuceneImpactSearcher(str(self.index_dir), QueryWeights(self.encode_query))
