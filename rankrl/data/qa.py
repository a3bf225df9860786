"""Multi-hop QA passage selection for F-GRPO: MuSiQue and HotpotQA with 20 candidates per question.

Each question lists exactly ``num_candidates`` passage ids in ``extra['candidates']``, in the
order they are presented; the gold (supporting) passages are in the qrels.

- MuSiQue already gives 20 paragraphs per question (2-4 supporting). Passage ids are
  ``<question id>/<paragraph idx>``: the same text can recur across questions, but F-GRPO only
  ever ranks within a question's own pool.
- HotpotQA (distractor setting) gives 10 paragraphs (2 supporting). The pool is padded to 20 with
  passages drawn from the corpus file, excluding the question's own, and then shuffled: without
  the shuffle the gold passages would always sit among the first 10. Passage ids are Wikipedia titles.

The public files have no usable dev/test split for this setting, so questions are split by a
seeded shuffle (default 80/10/10 train/dev/test); ``max_questions`` subsamples first (F-GRPO
trains on 10,000 MuSiQue questions).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path

from rankrl.data.common import (
    iter_jsonl,
    keyed_rng,
    parsing,
    read_json,
    require,
    sample_negatives,
    split_ids,
)
from rankrl.data.errors import MalformedDataError
from rankrl.data.records import Benchmark, Document, Query

DEFAULT_FRACTIONS = {"train": 0.8, "dev": 0.1, "test": 0.1}
MUSIQUE_DIR = "musique"
HOTPOTQA_DIR = "hotpotqa"


def load_musique(
    data_dir: Path,
    file: str = "musique_train.json",
    max_questions: int | None = None,
    fractions: Mapping[str, float] = DEFAULT_FRACTIONS,
    seed: int = 0,
) -> Benchmark:
    """MuSiQue questions with their 20 paragraphs.

    Args:
        data_dir: the data folder; reads ``musique/<file>``: a JSON list (HippoRAG's subset) or the
            official ``musique_ans_v1.0_*.jsonl`` (same fields: ``id``, ``question``, ``paragraphs``
            with ``idx``/``title``/``paragraph_text``/``is_supporting``, ``answer``, ``answer_aliases``).
        max_questions: seeded subsample size (None: all).
        fractions: split name -> share of questions.
        seed: seeds the subsample and the split.
    """
    path = require(Path(data_dir) / MUSIQUE_DIR / file, "musique")
    records = list(iter_jsonl(path)) if ".jsonl" in path.name else _json_list(path)
    queries: dict[str, Query] = {}
    corpus: dict[str, Document] = {}
    qrels: dict[str, dict[str, int]] = {}
    for record in records:
        with parsing(path, f"question {record.get('id')!r}"):
            qid = str(record["id"])
            paragraphs = record["paragraphs"]
            docs = [Document(f"{qid}/{p['idx']}", p["paragraph_text"], p["title"]) for p in paragraphs]
            gold = [d.docid for d, p in zip(docs, paragraphs) if p["is_supporting"]]
            extra = {
                "candidates": [d.docid for d in docs],
                "answer": record.get("answer", ""),
                "answer_aliases": list(record.get("answer_aliases", [])),
            }
            queries[qid] = Query(qid, record["question"], extra)
        corpus.update((d.docid, d) for d in docs)
        qrels[qid] = {docid: 1 for docid in gold}
    return _finish("musique", queries, corpus, qrels, max_questions, fractions, seed)


def load_hotpotqa(
    data_dir: Path,
    file: str = "hotpotqa_train.json",
    corpus_file: str = "hotpotqa_train_corpus.json",
    num_candidates: int = 20,
    max_questions: int | None = None,
    fractions: Mapping[str, float] = DEFAULT_FRACTIONS,
    seed: int = 0,
) -> Benchmark:
    """HotpotQA distractor questions padded to ``num_candidates`` passages.

    Args:
        data_dir: the data folder; reads ``hotpotqa/<file>`` (the official distractor format:
            ``_id``, ``question``, ``answer``, ``context`` as ``[title, sentences]``,
            ``supporting_facts`` as ``[title, sentence index]``) and ``hotpotqa/<corpus_file>``
            (``{title: sentences}``, the padding pool).
        num_candidates: pool size after padding.
        max_questions, fractions, seed: as in ``load_musique``; ``seed`` also seeds the padding.
    """
    folder = Path(data_dir) / HOTPOTQA_DIR
    path = require(folder / file, "hotpotqa")
    corpus_path = require(folder / corpus_file, "hotpotqa")
    with parsing(corpus_path, "corpus"):
        corpus = {
            title: Document(title, "".join(sents), title) for title, sents in read_json(corpus_path).items()
        }
    # Sorted so the padding does not depend on the corpus file's key order.
    pad_pool = sorted(corpus)
    queries: dict[str, Query] = {}
    qrels: dict[str, dict[str, int]] = {}
    for record in _json_list(path):
        with parsing(path, f"question {record.get('_id')!r}"):
            qid = str(record["_id"])
            context = {title: "".join(sents) for title, sents in record["context"]}
            gold = {title for title, _ in record["supporting_facts"]}
            if not gold <= context.keys():
                raise ValueError(
                    f"supporting titles {sorted(gold - context.keys())} are not among its paragraphs"
                )
            extra = {k: record.get(k, "") for k in ("answer", "type", "level")}
            question = record["question"]
        rng = keyed_rng(seed, qid)
        candidates = list(context) + sample_negatives(
            rng, pad_pool, set(context), num_candidates - len(context)
        )
        rng.shuffle(candidates)
        queries[qid] = Query(qid, question, {"candidates": candidates, **extra})
        for title, text in context.items():
            corpus.setdefault(title, Document(title, text, title))
        qrels[qid] = {title: 1 for title in gold}
    return _finish("hotpotqa", queries, corpus, qrels, max_questions, fractions, seed)


def _json_list(path: Path) -> list[dict]:
    """A JSON file holding a list of objects (one per question)."""
    records = read_json(path)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise MalformedDataError(path, "expected a JSON list of question objects")
    return records


def _finish(
    name: str,
    queries: dict[str, Query],
    corpus: dict[str, Document],
    qrels: dict[str, dict[str, int]],
    max_questions: int | None,
    fractions: Mapping[str, float],
    seed: int,
) -> Benchmark:
    """Subsample (seeded), split (seeded) and package the questions."""
    qids = list(queries)
    if max_questions is not None and max_questions < len(qids):
        keep = set(random.Random(seed).sample(qids, max_questions))
        qids = [q for q in qids if q in keep]
        queries = {q: queries[q] for q in qids}
        qrels = {q: qrels[q] for q in qids}
        used = {d for q in queries.values() for d in q.extra["candidates"]}
        corpus = {d: doc for d, doc in corpus.items() if d in used}
    return Benchmark(name, queries, corpus, qrels, split_ids(qids, fractions, seed))
