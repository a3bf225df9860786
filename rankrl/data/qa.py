"""Multi-hop QA passage selection for F-GRPO: MuSiQue and HotpotQA with 20 candidates per question.

Each question lists exactly ``num_candidates`` passage ids in ``extra['candidates']``, in the
order they are presented; the gold (supporting) passages are in the qrels.

- MuSiQue already gives 20 paragraphs per question (2-4 supporting). Passage ids are
  ``<question id>/<paragraph idx>``: the same text can recur across questions, but F-GRPO only
  ever ranks within a question's own pool.
- HotpotQA (distractor setting) gives 10 paragraphs (2 supporting). The pool is padded to 20 with
  passages drawn from the corpus file, excluding the question's own, and then shuffled: without
  the shuffle the gold passages would always sit among the first 10. Passage ids are Wikipedia titles.

Two ways to split:
- one file (the 100-question HippoRAG subsets of the CPU rows): ``max_questions`` subsamples, then a
  seeded shuffle splits the questions (default 80/10/10 train/dev/test);
- the official releases (``eval_file``, the paper profile): training questions come from the training file
  (``max_questions`` of them, seeded: F-GRPO subsamples 10,000), dev and test are disjoint seeded samples
  of ``dev_questions`` and ``test_questions`` from the validation file (F-GRPO, Appendix B.2: "disjoint
  validation and test subsets from validation data"; the official test sets have no labels). HotpotQA's
  padding then comes from the paragraphs of the same file's questions (``corpus_file=None``).
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
    fractions: Mapping[str, float] | None = None,
    seed: int = 0,
    eval_file: str | None = None,
    dev_questions: int | None = None,
    test_questions: int | None = None,
) -> Benchmark:
    """MuSiQue questions with their 20 paragraphs.

    Args:
        data_dir: the data folder; reads ``musique/<file>``: a JSON list (HippoRAG's subset) or the
            official ``musique_ans_v1.0_*.jsonl`` (same fields: ``id``, ``question``, ``paragraphs``
            with ``idx``/``title``/``paragraph_text``/``is_supporting``, ``answer``, ``answer_aliases``).
        max_questions: seeded subsample size of ``file`` (None: all).
        fractions: split name -> share of questions, one file only (default 80/10/10 train/dev/test).
        seed: seeds the subsample and the split.
        eval_file: the validation file (``musique_ans_v1.0_dev.jsonl``): ``file`` is then all training
            data and dev / test are drawn from this one (module docstring).
        dev_questions / test_questions: their sizes, with ``eval_file``.
    """
    name = "musique-full" if eval_file else "musique"
    path = require(Path(data_dir) / MUSIQUE_DIR / file, name)
    if eval_file is None:
        _one_file_only(dev_questions, test_questions)
        queries, corpus, qrels = _musique_questions(path, _musique_records(path))
        return _finish("musique", queries, corpus, qrels, max_questions, fractions, seed)
    _two_files_only(fractions)
    eval_path = require(Path(data_dir) / MUSIQUE_DIR / eval_file, name)
    train = _subsample(_musique_records(path), "id", max_questions, seed, path)
    dev, test = _dev_test(_musique_records(eval_path), "id", dev_questions, test_questions, seed, eval_path)
    parts = [_musique_questions(path, train), _musique_questions(eval_path, dev + test)]
    return _release("musique", parts, [train, dev, test], "id", eval_path)


def _musique_records(path: Path) -> list[dict]:
    return list(iter_jsonl(path)) if ".jsonl" in path.name else _json_list(path)


def _musique_questions(
    path: Path, records: list[dict]
) -> tuple[dict[str, Query], dict[str, Document], dict[str, dict[str, int]]]:
    """Queries, paragraphs and gold of MuSiQue records, each question's 20 paragraphs as its pool."""
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
    return queries, corpus, qrels


def load_hotpotqa(
    data_dir: Path,
    file: str = "hotpotqa_train.json",
    corpus_file: str | None = "hotpotqa_train_corpus.json",
    num_candidates: int = 20,
    max_questions: int | None = None,
    fractions: Mapping[str, float] | None = None,
    seed: int = 0,
    eval_file: str | None = None,
    dev_questions: int | None = None,
    test_questions: int | None = None,
) -> Benchmark:
    """HotpotQA distractor questions padded to ``num_candidates`` passages.

    Args:
        data_dir: the data folder; reads ``hotpotqa/<file>`` (the official distractor format:
            ``_id``, ``question``, ``answer``, ``context`` as ``[title, sentences]``,
            ``supporting_facts`` as ``[title, sentence index]``) and ``hotpotqa/<corpus_file>``
            (``{title: sentences}``, the padding pool); ``corpus_file=None`` pads from the paragraphs of
            the same file's questions (the official releases have no corpus file).
        num_candidates: pool size after padding.
        max_questions, fractions, seed, eval_file, dev_questions, test_questions: as in ``load_musique``
            (``hotpot_train_v1.1.json`` and ``hotpot_dev_distractor_v1.json`` for the official release);
            ``seed`` also seeds the padding.
    """
    name = "hotpotqa-full" if eval_file else "hotpotqa"
    folder = Path(data_dir) / HOTPOTQA_DIR
    path = require(folder / file, name)
    corpus_path = require(folder / corpus_file, name) if corpus_file else None
    if eval_file is None:
        _one_file_only(dev_questions, test_questions)
        records = _json_list(path)
        corpus = _hotpotqa_padding(corpus_path, path, records)
        queries, qrels = _hotpotqa_questions(path, records, corpus, num_candidates, seed)
        return _finish("hotpotqa", queries, corpus, qrels, max_questions, fractions, seed)
    _two_files_only(fractions)
    eval_path = require(folder / eval_file, name)
    train = _subsample(_json_list(path), "_id", max_questions, seed, path)
    dev, test = _dev_test(_json_list(eval_path), "_id", dev_questions, test_questions, seed, eval_path)
    parts = []
    for part_path, records in ((path, train), (eval_path, dev + test)):
        corpus = _hotpotqa_padding(corpus_path, part_path, records)
        queries, qrels = _hotpotqa_questions(part_path, records, corpus, num_candidates, seed)
        parts.append((queries, corpus, qrels))
    return _release("hotpotqa", parts, [train, dev, test], "_id", eval_path)


def _hotpotqa_padding(corpus_path: Path | None, path: Path, records: list[dict]) -> dict[str, Document]:
    """The padding pool as documents: the corpus file's passages, or (None) every paragraph of the
    records' contexts, the first text of a title kept."""
    if corpus_path is not None:
        with parsing(corpus_path, "corpus"):
            return {
                title: Document(title, "".join(sents), title)
                for title, sents in read_json(corpus_path).items()
            }
    corpus: dict[str, Document] = {}
    for record in records:
        with parsing(path, f"question {record.get('_id')!r}"):
            for title, sents in record["context"]:
                corpus.setdefault(title, Document(title, "".join(sents), title))
    return corpus


def _hotpotqa_questions(
    path: Path, records: list[dict], corpus: dict[str, Document], num_candidates: int, seed: int
) -> tuple[dict[str, Query], dict[str, dict[str, int]]]:
    """Each question's pool: its own paragraphs plus passages of ``corpus`` (seeded), shuffled; the
    question's paragraphs join ``corpus`` where their title is new."""
    # Sorted so the padding does not depend on the corpus file's key order.
    pad_pool = sorted(corpus)
    queries: dict[str, Query] = {}
    qrels: dict[str, dict[str, int]] = {}
    for record in records:
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
    return queries, qrels


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
    fractions: Mapping[str, float] | None,
    seed: int,
) -> Benchmark:
    """One file: subsample (seeded), split (seeded) and package the questions."""
    qids = list(queries)
    if max_questions is not None and max_questions < len(qids):
        keep = set(random.Random(seed).sample(qids, max_questions))
        qids = [q for q in qids if q in keep]
        queries = {q: queries[q] for q in qids}
        qrels = {q: qrels[q] for q in qids}
        used = {d for q in queries.values() for d in q.extra["candidates"]}
        corpus = {d: doc for d, doc in corpus.items() if d in used}
    return Benchmark(name, queries, corpus, qrels, split_ids(qids, fractions or DEFAULT_FRACTIONS, seed))


# ---- the official releases: training questions from one file, dev and test from the validation file ------


def _one_file_only(dev_questions: int | None, test_questions: int | None) -> None:
    if dev_questions is not None or test_questions is not None:
        raise ValueError(
            "dev_questions / test_questions draw from a validation file: pass eval_file too "
            "(one file is split by fractions instead)"
        )


def _two_files_only(fractions: Mapping[str, float] | None) -> None:
    if fractions is not None:
        raise ValueError(
            "fractions split one file; with eval_file the splits are the training file (max_questions) "
            "and dev_questions / test_questions of the validation file: drop fractions"
        )


def _ids(records: list[dict], key: str, path: Path) -> list[str]:
    with parsing(path, "question ids"):
        return [str(r[key]) for r in records]


def _subsample(records: list[dict], key: str, size: int | None, seed: int, path: Path) -> list[dict]:
    """``size`` records drawn by a generator seeded with ``seed`` (all when None), in file order."""
    if size is None:
        return records
    ids = _ids(records, key, path)
    if size > len(ids):
        raise ValueError(f"max_questions={size}, but {path} holds {len(ids)} questions")
    keep = set(keyed_rng(seed, "train-subsample").sample(ids, size))
    return [r for r, qid in zip(records, ids) if qid in keep]


def _dev_test(
    records: list[dict], key: str, dev: int | None, test: int | None, seed: int, path: Path
) -> tuple[list[dict], list[dict]]:
    """Disjoint dev and test samples of the validation file (seeded), each in file order."""
    if dev is None or test is None or dev < 0 or test < 1:
        raise ValueError(
            f"with eval_file, dev_questions (>= 0) and test_questions (>= 1) give the split sizes; "
            f"got {dev} and {test}"
        )
    ids = _ids(records, key, path)
    if dev + test > len(ids):
        raise ValueError(
            f"dev_questions + test_questions = {dev + test}, but {path} holds {len(ids)} questions"
        )
    order = list(ids)
    keyed_rng(seed, "dev-test").shuffle(order)
    dev_ids, test_ids = set(order[:dev]), set(order[dev : dev + test])
    return (
        [r for r, qid in zip(records, ids) if qid in dev_ids],
        [r for r, qid in zip(records, ids) if qid in test_ids],
    )


def _release(
    name: str,
    parts: list[tuple[dict[str, Query], dict[str, Document], dict[str, dict[str, int]]]],
    splits: list[list[dict]],
    key: str,
    eval_path: Path,
) -> Benchmark:
    """The training file's and the validation file's questions as one benchmark (train, dev, test)."""
    (train_q, train_c, train_r), (eval_q, eval_c, eval_r) = parts
    shared = sorted(train_q.keys() & eval_q.keys())
    if shared:
        raise MalformedDataError(eval_path, f"question ids also in the training file, e.g. {shared[:3]}")
    queries, qrels = {**train_q, **eval_q}, {**train_r, **eval_r}
    used = {d for q in queries.values() for d in q.extra["candidates"]}
    corpus = {d: doc for d, doc in {**eval_c, **train_c}.items() if d in used}
    ids = {split: [str(r[key]) for r in records] for split, records in zip(("train", "dev", "test"), splits)}
    return Benchmark(name, queries, corpus, qrels, ids)
