"""Text -> image retrieval with a frozen open_clip model: a frozen retriever and the source of a rank reward.

Images are encoded once into a faiss flat inner-product index over normalised embeddings; a (rewritten) query
is encoded as text and scored against every image, so ``rank_of`` gives the target's rank over the whole
corpus.
``pretrained=None`` builds a randomly initialised model (enough to test the code path on a machine without
weights); real runs name open_clip weights, e.g. ``arch="ViT-B-16", pretrained="openai"``. Weights that are
not on the machine stop the run with the command that downloads them (``ClipWeightsMissing``).

With ``cache_dir`` the image vectors are encoded once per (model, corpus: ids and image paths) and reopened
memory-mapped afterwards (``rankrl.retrieval.vector_index.cached_vectors``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rankrl.conf_defaults import conf_default
from rankrl.data.records import Document, Run
from rankrl.errors import EnvironmentProblem
from rankrl.retrieval.base import check_k, check_unique_ids, corpus_fingerprint
from rankrl.retrieval.vector_index import VectorIndex, cached_vectors, split_queries


class ClipWeightsMissing(EnvironmentProblem):
    """open_clip weights that are neither in the weights folder nor reachable (no internet)."""


def download_command(arch: str, pretrained: str, weights_dir: str | Path | None) -> str:
    """The command that fetches open_clip weights into ``weights_dir`` on a machine with internet."""
    cache = f", cache_dir={str(weights_dir)!r}" if weights_dir else ""
    return (
        f'python -c "import open_clip; open_clip.create_model_and_transforms({arch!r}, '
        f'pretrained={pretrained!r}{cache})"'
    )


def batched(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    """Consecutive slices of ``items`` of at most ``size`` elements."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def load_image(doc: Document) -> Any:
    """The PIL image of an image document: ``extra['image']`` (a PIL image) or ``extra['image_path']``."""
    from PIL import Image

    if "image" in doc.extra:
        return doc.extra["image"]
    if "image_path" in doc.extra:
        path = Path(doc.extra["image_path"])
        if not path.is_file():
            raise FileNotFoundError(
                f"image of {doc.docid!r} not found at {path}: fetch the benchmark's images"
            )
        with Image.open(path) as img:
            return img.convert("RGB")
    raise KeyError(f"document {doc.docid!r} has neither extra['image'] nor extra['image_path']")


class ClipRetriever:
    """Frozen open_clip dual encoder over an image corpus.

    Args:
        docs: image documents to index now (``extra['image_path']`` or ``extra['image']``); or call ``index``.
        arch: open_clip model name, e.g. ``ViT-B-32``, ``ViT-B-16``, ``ViT-L-14``.
        pretrained: open_clip weight tag (``openai``, ``laion2b_s34b_b79k``, ...) or a checkpoint path;
            None = random initialisation.
        batch_size: images / texts per forward pass.
        device: torch device; None = CUDA when available.
        cache_dir: where image vectors are cached (``<cache_dir>/vectors/``); None = encode every time.
        weights_dir: where open_clip keeps downloaded weights (its ``cache_dir``); None = the hub cache.
    """

    def __init__(
        self,
        docs: Sequence[Document] | None = None,
        *,
        arch: str = conf_default("retriever/clip-vit-b32", "arch"),
        pretrained: str | None = None,  # random weights: the runs' files name theirs (openai)
        batch_size: int = conf_default("retriever/clip-vit-b16", "batch_size"),  # the clip-* files' one
        device: str | None = None,
        cache_dir: str | Path | None = None,
        weights_dir: str | Path | None = None,
    ) -> None:
        import open_clip

        if arch not in open_clip.list_models():
            raise ValueError(f"unknown open_clip arch {arch!r}; valid: {open_clip.list_models()}")
        self.arch, self.pretrained = arch, pretrained
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(
                arch, pretrained=pretrained, cache_dir=str(weights_dir) if weights_dir else None
            )
        except RuntimeError as err:  # open_clip's "Failed to download weights for tag ..."
            if pretrained is None or "download" not in str(err).lower():
                raise
            raise ClipWeightsMissing(
                f"open_clip weights {arch} pretrained={pretrained!r} are not on this machine and cannot be "
                "downloaded here; on a machine with internet run "
                f"`{download_command(arch, pretrained, weights_dir)}` "
                f"and copy the folder, or set retriever.pretrained=<path to the checkpoint file>"
            ) from None
        self.model = model.to(self.device).eval()
        self.preprocess = preprocess
        self.tokenizer = open_clip.get_tokenizer(arch)
        self.batch_size = batch_size
        self.cache_dir = cache_dir
        self._index: VectorIndex | None = None
        if docs is not None:
            self.index(docs)

    @torch.no_grad()
    def encode_images(self, images: Sequence[Any]) -> np.ndarray:
        """(B, d) unit-length embeddings of PIL images."""
        out = []
        for chunk in batched(images, self.batch_size):
            pixels = torch.stack([self.preprocess(img) for img in chunk]).to(self.device)  # (b, 3, H, W)
            out.append(self.model.encode_image(pixels, normalize=True).float().cpu().numpy())
        return np.concatenate(out)

    @torch.no_grad()
    def encode_texts(self, texts: Sequence[str]) -> np.ndarray:
        """(B, d) unit-length embeddings of texts (truncated to the model's context length)."""
        out = []
        for chunk in batched(list(texts), self.batch_size):
            tokens = self.tokenizer(list(chunk)).to(self.device)  # (b, context_length)
            out.append(self.model.encode_text(tokens, normalize=True).float().cpu().numpy())
        return np.concatenate(out)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """(B, d) text embeddings: queries go through CLIP's text tower."""
        return self.encode_texts(texts)

    def vector_index(self, docs: Sequence[Document]) -> VectorIndex:
        """The index of the images of ``docs``, from the cache when this model already encoded them.

        The cache key hashes the ids and image paths (not the pixels): replace a cached corpus's files in
        place and delete its folder under ``<cache_dir>/vectors/``.
        """
        ids = check_unique_ids(d.docid for d in docs)
        in_memory = any("image" in d.extra for d in docs)
        settings = {"arch": self.arch, "pretrained": self.pretrained}
        corpus = corpus_fingerprint(docs, settings, ["image_path"])
        key = f"clip-{self.arch}-{Path(str(self.pretrained)).name}-{corpus}"
        # random weights differ at every construction: nothing to reuse
        cache = None if in_memory or self.pretrained is None else self.cache_dir

        def encode(rows: range) -> np.ndarray:
            return self.encode_images([load_image(docs[i]) for i in rows])

        return cached_vectors(
            cache,
            key,
            ids,
            encode,
            batch_size=self.batch_size,
            desc=f"encoding {len(ids)} images with {self.arch}",
        )

    def index(self, docs: Sequence[Document]) -> None:
        """Encode the images of ``docs`` and index them; replaces any previous corpus."""
        self._index = self.vector_index(docs)

    def index_images(self, ids: Sequence[str], images: Sequence[Any]) -> None:
        """Index PIL images under ``ids`` directly (no Document wrapping, no cache)."""
        if len(ids) != len(images):
            raise ValueError(f"{len(ids)} ids but {len(images)} images")
        self._index = VectorIndex(ids, self.encode_images(images))

    def search(self, queries: Mapping[str, str], k: int) -> Run:
        """Top-``k`` images per text query by cosine similarity: qid -> image id -> score."""
        check_k(k)
        qids, texts = split_queries(queries)
        return self._require().search(qids, self.encode_texts(texts), k)

    def rank_of(self, texts: Sequence[str], target_ids: Sequence[str]) -> list[int]:
        """1-based rank of image ``target_ids[i]`` for ``texts[i]`` among all N indexed images (ties count
        against the target)."""
        return self._require().rank_of(self.encode_texts(texts), target_ids).tolist()

    def similarity(self, texts: Sequence[str], target_ids: Sequence[str]) -> list[float]:
        """Cosine of ``texts[i]`` with image ``target_ids[i]`` (a similarity reward)."""
        return self._require().similarity(self.encode_texts(texts), target_ids).tolist()

    @property
    def image_vectors(self) -> np.ndarray:
        """(N, d) normalised image embeddings, in index order."""
        return self._require().vectors

    def _require(self) -> VectorIndex:
        if self._index is None:
            raise RuntimeError("ClipRetriever has no index: pass docs to the constructor or call index(docs)")
        return self._index
