"""open_clip text -> image retrieval with a randomly initialised model on generated images.

ViT-S-32 (open_clip's smallest ViT config) keeps the file fast on two cores; the code path is the one
ViT-B-16 / ViT-B-32 with real weights take (RANKRL_TEST_CLIP_ARCH=ViT-B-32 runs the same tests on it).
"""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
import torch
from PIL import Image

from rankrl.data.records import Document

N_IMAGES = 8
ARCH = os.environ.get("RANKRL_TEST_CLIP_ARCH", "ViT-S-32")


def random_images(n: int, seed: int = 0) -> list[Image.Image]:
    """n distinct RGB images: random noise plus a colour block, so embeddings differ."""
    rng = np.random.default_rng(seed)
    images = []
    for i in range(n):
        pixels = rng.integers(0, 256, size=(64, 64, 3), dtype=np.uint8)
        pixels[: 8 * (i + 1), :, i % 3] = 255
        images.append(Image.fromarray(pixels))
    return images


@pytest.fixture(scope="module")
def clip():
    from rankrl.retrieval.clip import ClipRetriever

    torch.manual_seed(0)
    retriever = ClipRetriever(arch=ARCH, pretrained=None, batch_size=4)
    retriever.index_images([f"img{i}" for i in range(N_IMAGES)], random_images(N_IMAGES))
    return retriever


TEXTS = ["a red square", "a photo of a dog", "blue stripes on grey"]


def test_rank_of_matches_brute_force(clip) -> None:
    targets = ["img0", "img3", "img7"]
    text_vecs = clip.encode_texts(TEXTS)  # (3, d), unit length
    scores = text_vecs @ clip.image_vectors.T  # (3, N)
    rows = [int(t[3:]) for t in targets]
    expected = [
        int((scores[b] >= scores[b, r]).sum()) for b, r in enumerate(rows)
    ]  # ties count against the target
    ranks = clip.rank_of(TEXTS, targets)
    assert ranks == expected
    assert all(1 <= r <= N_IMAGES for r in ranks)
    assert np.allclose(clip.similarity(TEXTS, targets), scores[np.arange(3), rows], atol=1e-5)


def test_every_image_has_a_distinct_rank_for_one_query(clip) -> None:
    ids = [f"img{i}" for i in range(N_IMAGES)]
    ranks = clip.rank_of([TEXTS[0]] * N_IMAGES, ids)
    assert sorted(ranks) == list(range(1, N_IMAGES + 1))  # a permutation: ranks are over the whole corpus


def test_search_agrees_with_rank_of(clip) -> None:
    run = clip.search({"q": TEXTS[1]}, k=N_IMAGES)
    order = list(run["q"])
    assert len(order) == N_IMAGES
    assert clip.rank_of([TEXTS[1]] * N_IMAGES, order) == list(range(1, N_IMAGES + 1))


def test_index_from_image_documents(clip, tmp_path) -> None:
    images = random_images(3, seed=1)
    paths = []
    for i, img in enumerate(images):
        paths.append(tmp_path / f"{i}.png")
        img.save(paths[-1])
    docs = [Document(f"p{i}", "", extra={"image_path": str(p)}) for i, p in enumerate(paths)]
    retriever = copy.copy(clip)  # same model, its own index
    retriever.index(docs)
    assert sorted(retriever.rank_of(["x"] * 3, ["p0", "p1", "p2"])) == [1, 2, 3]
    with pytest.raises(KeyError, match="image_path"):
        retriever.index([Document("t", "text only")])
    with pytest.raises(FileNotFoundError, match="'gone'"):
        retriever.index([Document("gone", "", extra={"image_path": str(tmp_path / "missing.jpg")})])


def test_unknown_arch_lists_choices() -> None:
    from rankrl.retrieval.clip import ClipRetriever

    with pytest.raises(ValueError, match="ViT-B-32"):
        ClipRetriever(arch="ViT-Nope")
