"""Passage ranking benchmarks of Rank-R1: TREC DL 2019/2020, MS MARCO training queries, BRIGHT.

TREC DL is evaluated by reranking BM25's top 100 from the full MS MARCO index; the corpus here is
exactly those passages (with text, from rank_llm's first-stage file), so no 8.8M-passage
collection is needed. Binary measures on DL count grades >= 2 as relevant.

MS MARCO training data follows Rank-R1's ``create_dataset.py``: Tevatron's ``msmarco-passage``
``train.jsonl.gz``, one line per query with its judged positives and BM25 negatives (text
included); each query gets 1 positive + 19 negatives, shuffled.

BRIGHT topics and qrels are small; its document collections are not (one parquet file per task on
the Hugging Face dataset ``xlangai/BRIGHT``, ``documents/<task>-00000-of-00001.parquet``,
fetched by ``python -m rankrl.data.prepare --only bright-<task>``). Without it the corpus is an
``UnavailableCorpus`` that raises when a retriever uses it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from rankrl.data.common import (
    UnavailableCorpus,
    iter_jsonl,
    keyed_rng,
    parsing,
    read_json,
    read_rows,
    read_trec_qrels,
    read_trec_run,
    require,
)
from rankrl.data.errors import MalformedDataError, MissingDataError
from rankrl.data.records import Benchmark, Document, Query

TREC_DL_DIR = "trec_dl"
# benchmark -> (topics, qrels, first-stage hits with text, first-stage run)
TREC_DL_FILES = {
    "dl19": (
        "topics.dl19-passage.txt",
        "qrels.dl19-passage.txt",
        "bm25_retrieve_results_dl19.json",
        "bm25_trec_results_dl19.txt",
    ),
    "dl20": (
        "topics.dl20.txt",
        "qrels.dl20-passage.txt",
        "bm25_retrieve_results_dl20.json",
        "bm25_trec_results_dl20.txt",
    ),
}
MSMARCO_DIR = "msmarco"
MSMARCO_TRAIN_FILE = "train.jsonl.gz"
BRIGHT_DIR = "bright"
BRIGHT_TASKS = (
    "aops",
    "biology",
    "earth-science",
    "economics",
    "leetcode",
    "pony",
    "psychology",
    "robotics",
    "stackoverflow",
    "sustainable-living",
    "theoremqa-questions",
    "theoremqa-theorems",
)


def bright_documents_file(task: str) -> str:
    """The Hugging Face file name of a task's documents (the hub spells tasks with ``_``)."""
    return f"{task.replace('-', '_')}-00000-of-00001.parquet"


def load_trec_dl(data_dir: Path, name: str) -> Benchmark:
    """TREC DL ``dl19`` or ``dl20``: judged queries (split ``test``), BM25 top-100 run and its passages."""
    folder = Path(data_dir) / TREC_DL_DIR
    topics, qrels_file, hits_file, run_file = (require(folder / f, name) for f in TREC_DL_FILES[name])
    qrels = read_trec_qrels(qrels_file)
    # DL20's topic file lists all 200 topics; only the 54 judged ones are evaluated.
    queries = {qid: Query(qid, text.strip()) for qid, text, *_ in read_rows(topics, 2) if qid in qrels}
    if len(queries) != len(qrels):
        unknown = sorted(set(qrels) - set(queries))[:3]
        raise MalformedDataError(topics, f"judged queries {unknown} have no topic in this file")
    corpus = _passages_from_hits(hits_file)
    run = read_trec_run(run_file)
    without_text = {d for ranking in run.values() for d in ranking} - corpus.keys()
    if without_text:
        raise MalformedDataError(
            hits_file, f"{len(without_text)} passages of {run_file.name} have no text here"
        )
    return Benchmark(name, queries, corpus, qrels, {"test": list(queries)}, {"bm25": run}, relevance_level=2)


def _passages_from_hits(path: Path) -> dict[str, Document]:
    """Passages of rank_llm's ``[{query, hits: [{qid, docid, rank, score, content}]}]`` file."""
    corpus: dict[str, Document] = {}
    with parsing(path, "first-stage hits"):
        for entry in read_json(path):
            for hit in entry["hits"]:
                docid = str(hit["docid"])
                corpus[docid] = Document(docid, hit["content"])
    return corpus


def load_msmarco_train(
    data_dir: Path, max_queries: int | None = None, num_negatives: int = 19, seed: int = 0
) -> Benchmark:
    """MS MARCO passage training queries for Rank-R1 (split ``train``).

    Args:
        data_dir: the data folder; reads ``msmarco/train.jsonl.gz`` (Tevatron format: ``query_id``,
            ``query``, ``positive_passages`` and ``negative_passages`` as ``{docid, title, text}``).
        max_queries: keep the first N queries of the file (None: all ~400k, several GB of RAM).
        num_negatives: BM25 negatives per query (19 gives Rank-R1's 20 candidates).
        seed: seeds the choice of negatives and the candidate order, per query.

    Each query's ``extra['candidates']`` holds its first positive and the sampled negatives in
    presented order; all judged positives are in the qrels. Only candidate passages enter the corpus.
    """
    path = require(Path(data_dir) / MSMARCO_DIR / MSMARCO_TRAIN_FILE, "msmarco-train")
    queries: dict[str, Query] = {}
    corpus: dict[str, Document] = {}
    qrels: dict[str, dict[str, int]] = {}
    for row in iter_jsonl(path):
        if max_queries is not None and len(queries) >= max_queries:
            break
        with parsing(path, f"query {row.get('query_id')!r}"):
            qid, text = str(row["query_id"]), row["query"]
            positives = [_tevatron_passage(p) for p in row["positive_passages"]]
            negatives = [_tevatron_passage(p) for p in row["negative_passages"]]
            if not positives:
                raise ValueError("no positive passage")
        positive_ids = {d.docid for d in positives}
        negatives = list({d.docid: d for d in negatives if d.docid not in positive_ids}.values())
        rng = keyed_rng(seed, qid)
        rng.shuffle(negatives)
        pool = [positives[0], *negatives[:num_negatives]]
        rng.shuffle(pool)
        corpus.update((d.docid, d) for d in pool)
        queries[qid] = Query(qid, text, {"candidates": [d.docid for d in pool]})
        qrels[qid] = {docid: 1 for docid in positive_ids}
    return Benchmark("msmarco-train", queries, corpus, qrels, {"train": list(queries)})


def _tevatron_passage(passage: dict) -> Document:
    """A Tevatron ``{docid, title, text}`` passage; MS MARCO v1 has no titles (Tevatron writes ``-``)."""
    title = passage.get("title") or ""
    return Document(str(passage["docid"]), passage["text"], "" if title == "-" else title)


def load_bright(data_dir: Path, task: str) -> Benchmark:
    """One BRIGHT task (split ``test``) with ``excluded_ids``, ``gold_ids``, ``reasoning`` kept per query.

    ``excluded_ids`` must be dropped from a ranking before scoring (BRIGHT's protocol, which
    Rank-R1 follows). The corpus is loaded when ``bright/documents/<task>-00000-of-00001.parquet``
    exists, else it is an ``UnavailableCorpus``.
    """
    if task not in BRIGHT_TASKS:
        raise ValueError(f"unknown BRIGHT task {task!r}; valid: {', '.join(BRIGHT_TASKS)}")
    name = f"bright-{task}"
    folder = Path(data_dir) / BRIGHT_DIR
    topics = require(folder / f"topics.bright-{task}-original.jsonl.gz", name)
    qrels = read_trec_qrels(require(folder / f"qrels.bright-{task}.txt", name))
    queries: dict[str, Query] = {}
    for row in iter_jsonl(topics):
        with parsing(topics, f"query {row.get('id')!r}"):
            qid = str(row["id"])
            extra = {
                "excluded_ids": _bright_ids(row.get("excluded_ids", [])),
                "gold_ids": _bright_ids(row["gold_ids"]),
                "reasoning": row.get("reasoning", ""),
                "gold_answer": row.get("gold_answer", ""),
            }
            queries[qid] = Query(qid, row["query"], extra)
    documents = folder / "documents" / bright_documents_file(task)
    if documents.is_file():
        corpus: dict[str, Document] = _bright_documents(documents)
    else:
        corpus = UnavailableCorpus(
            MissingDataError(
                documents,
                name,
                hint=(
                    "BRIGHT documents are not in the shared data copy; the download needs internet "
                    f"(Hugging Face dataset xlangai/BRIGHT, documents/{bright_documents_file(task)})"
                ),
            )
        )
    return Benchmark(name, queries, corpus, qrels, {"test": list(queries)})


def _bright_ids(value: list[str] | str) -> list[str]:
    """A BRIGHT id list (a list, or its Python repr in older dumps) without the ``N/A`` placeholder.

    Spaces become ``_`` as in the qrels and in Rank-R1's pyserini corpus.
    """
    ids = ast.literal_eval(value) if isinstance(value, str) else value
    return [str(i).replace(" ", "_") for i in ids if i != "N/A"]


def _bright_documents(path: Path) -> dict[str, Document]:
    """``id``/``content`` rows of a BRIGHT documents parquet file; the first of duplicate ids wins."""
    import pandas as pd  # lazy: pandas + pyarrow cost a second at import

    corpus: dict[str, Document] = {}
    with parsing(path, "BRIGHT documents"):
        frame = pd.read_parquet(path, columns=["id", "content"])
        for docid, content in zip(frame["id"], frame["content"]):
            docid = str(docid).replace(" ", "_")
            corpus.setdefault(docid, Document(docid, str(content)))
    return corpus
