"""SPLADE through real pyserini and Anserini: a Lucene impact index of real DL19 passages, encoded by
pyserini's SPLADE encoders with a tiny random masked LM (the real SPLADE-v2 weights are not on this machine).
What the index returns is checked against the definition of impact scoring, from the encoders' own output."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest

from rankrl.data.records import Document


def build_tiny_splade(folder: Path) -> Path:
    """A 1-layer BERT masked LM with MiniLM's real WordPiece tokenizer: its MLM head's bias is set low, so
    each text activates a few thousand of the 30,522 terms, as a sparse SPLADE encoder does."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    from rankrl.retrieval.dense import bundled_minilm_path

    if (folder / "config.json").exists():
        return folder
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        initializer_range=0.5,
    )
    model = BertForMaskedLM(config)
    with torch.no_grad():
        model.cls.predictions.bias.fill_(-6.0)
    model.save_pretrained(folder)
    tokenizer = bundled_minilm_path()
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tokenizer / name, folder / name)
    return folder


@pytest.fixture(scope="session")
def tiny_splade(tmp_path_factory) -> Path:
    return build_tiny_splade(tmp_path_factory.mktemp("models") / "tiny-splade")


@pytest.fixture(scope="module")
def corpus(dl19_sample) -> tuple[dict[str, str], list[Document]]:
    queries, docs, _ = dl19_sample
    return dict(list(queries.items())[:4]), docs[:24]


@pytest.fixture(scope="module")
def splade(tiny_splade, corpus, index_cache):
    from rankrl.retrieval.splade import SpladeRetriever

    return SpladeRetriever(corpus[1], model_path=tiny_splade, cache_dir=index_cache, batch_size=8)


def test_impact_scores_are_query_weight_times_document_weight(splade, corpus) -> None:
    """Every score Lucene returns is the sum over shared terms of the quantised query and document weights
    (pyserini's searcher leaves out terms found in every document: idf 0), and the top k are the k best."""
    queries, docs = corpus
    vectors = dict(zip((d.docid for d in docs), splade.encode_documents(docs)))
    df = Counter(t for v in vectors.values() for t in v)
    assert splade.num_docs == len(docs) and all(vectors.values())
    run = splade.search(queries, k=10)
    for qid, text in queries.items():
        weights = {t: w for t, w in splade.encode_query(text).items() if 0 < df[t] < len(docs)}
        expected = {d: sum(w * v.get(t, 0) for t, w in weights.items()) for d, v in vectors.items()}
        assert len(run[qid]) == 10
        for docid, score in run[qid].items():
            assert score == pytest.approx(expected[docid], rel=1e-6)
        tenth = sorted(expected.values(), reverse=True)[9]
        assert min(run[qid].values()) == pytest.approx(tenth, rel=1e-6)


def test_the_index_is_built_once_per_corpus_and_model(splade, corpus, tiny_splade, index_cache, monkeypatch):
    from rankrl.retrieval.splade import SpladeRetriever

    def no_encoding(self, docs):
        raise AssertionError("the cached index should have been reused")

    monkeypatch.setattr(SpladeRetriever, "encode_documents", no_encoding)
    again = SpladeRetriever(corpus[1], model_path=tiny_splade, cache_dir=index_cache, batch_size=8)
    assert again.index_dir == splade.index_dir
    assert again.search(corpus[0], 5) == splade.search(corpus[0], 5)


def test_a_splade_model_not_on_this_machine_stops_with_the_fetch(monkeypatch) -> None:
    from rankrl.models import ModelNotAvailableError
    from rankrl.retrieval.splade import SpladeRetriever

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableError, match="hf download naver/splade_v2_distil") as err:
        SpladeRetriever(model_path="naver/splade_v2_distil")
    assert "\n" not in str(err.value)
