"""Shared fixtures for the retriever tests: real TREC DL passages and a per-session index cache."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rankrl.data.records import Document
from tests.conftest import require_data

os.environ.setdefault("OPENAI_API_KEY", "dummy")  # `import pyserini.search` builds an OpenAI client

DL19_RUN = "trec_dl/bm25_retrieve_results_dl19.json"  # under the prepared data folder (`make data`)


@pytest.fixture(scope="session")
def dl19_sample() -> tuple[dict[str, str], list[Document], dict[str, set[str]]]:
    """10 DL19 queries, the union of their BM25 top-20 passages (~200), and each query's own pool."""
    rows = json.loads((require_data(DL19_RUN) / DL19_RUN).read_text())[:10]
    queries, docs, pools = {}, {}, {}
    for row in rows:
        hits = row["hits"][:20]
        qid = str(hits[0]["qid"])
        queries[qid] = row["query"]
        pools[qid] = {h["docid"] for h in hits}
        for h in hits:
            docs.setdefault(h["docid"], Document(docid=h["docid"], text=h["content"]))
    return queries, list(docs.values()), pools


@pytest.fixture(scope="session")
def index_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for the session, so tests that index the same corpus share the index."""
    return tmp_path_factory.mktemp("rankrl-cache")


@pytest.fixture(scope="session")
def lucene_bm25(dl19_sample, index_cache):
    """A pyserini BM25 index over the DL19 sample (built once per session)."""
    from rankrl.retrieval.bm25 import PyseriniBM25

    return PyseriniBM25(dl19_sample[1], cache_dir=index_cache, name="dl19-sample")
