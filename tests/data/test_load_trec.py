"""TREC DL, BRIGHT (real subsets) and MS MARCO training data (small files in Tevatron's format)."""

from __future__ import annotations

import pickle
import shutil

import ir_measures
import pandas as pd
import pytest
from ir_measures import nDCG

from rankrl.data import MissingDataError, load_benchmark
from rankrl.data.trec import BRIGHT_TASKS

from .conftest import write_jsonl, write_text

BRIGHT_QUERIES = {
    "aops": 111,
    "biology": 103,
    "earth-science": 116,
    "economics": 103,
    "leetcode": 142,
    "pony": 112,
    "psychology": 101,
    "robotics": 101,
    "stackoverflow": 117,
    "sustainable-living": 108,
    "theoremqa-questions": 194,
    "theoremqa-theorems": 76,
}


@pytest.mark.parametrize(("name", "n_queries", "ndcg"), [("dl19", 43, 0.5058), ("dl20", 54, 0.4796)])
def test_trec_dl_reproduces_published_bm25(data_dir, name, n_queries, ndcg):
    bench = load_benchmark(name, data_dir)
    assert len(bench.split("test")) == n_queries == len(bench.qrels)
    assert bench.relevance_level == 2
    run = bench.runs["bm25"]
    assert set(run) == set(bench.queries)
    assert all(len(ranking) == 100 for ranking in run.values())
    assert all(docid in bench.corpus and bench.corpus[docid].text for r in run.values() for docid in r)
    assert {g for judged in bench.qrels.values() for g in judged.values()} == {0, 1, 2, 3}
    # The Rank-R1 BM25 rows (trec_eval -c -m ndcg_cut.10): the loaded run and qrels are the published ones.
    assert ir_measures.calc_aggregate([nDCG @ 10], bench.qrels, run)[nDCG @ 10] == pytest.approx(
        ndcg, abs=1e-4
    )


def test_dl20_keeps_only_judged_topics(data_dir):
    topics = (data_dir / "trec_dl" / "topics.dl20.txt").read_text().splitlines()
    bench = load_benchmark("dl20", data_dir)
    assert len(topics) == 200
    assert set(bench.queries) < {line.split("\t")[0] for line in topics}
    assert bench.queries["1030303"].text == "who is aziz hashim"


def test_dl_corpora_hold_the_published_passage_count(data_dir):
    union = set(load_benchmark("dl19", data_dir).corpus) | set(load_benchmark("dl20", data_dir).corpus)
    assert len(union) == 9658


@pytest.mark.parametrize("task", BRIGHT_TASKS)
def test_bright_topics_and_qrels(data_dir, task):
    bench = load_benchmark(f"bright-{task}", data_dir)
    assert len(bench.split("test")) == BRIGHT_QUERIES[task]
    for query in bench.queries.values():
        assert set(query.extra["gold_ids"]) == set(bench.qrels[query.qid])
        assert "N/A" not in query.extra["excluded_ids"]
        assert isinstance(query.extra["reasoning"], str)
    if task == "aops":  # aops excludes the problem itself and its near-duplicates
        assert all(q.extra["excluded_ids"] for q in bench.queries.values())


def test_bright_without_documents_fails_when_the_corpus_is_used(tmp_path, data_dir):
    bright = tmp_path / "bright"  # topics and qrels only, as a plain `make data` leaves them
    bright.mkdir()
    for name in ("topics.bright-biology-original.jsonl.gz", "qrels.bright-biology.txt"):
        shutil.copy(data_dir / "bright" / name, bright / name)
    bench = load_benchmark("bright-biology", tmp_path)
    assert len(bench.corpus) == 0 and not bench.corpus
    with pytest.raises(MissingDataError, match="biology-00000-of-00001.parquet") as err:
        list(bench.corpus.values())
    assert "--only bright-biology" in str(err.value) and "make data" in str(err.value)
    copied = pickle.loads(pickle.dumps(bench))  # benchmarks still pickle (worker processes, deepcopy)
    assert len(copied.queries) == 103
    with pytest.raises(MissingDataError) as again:
        list(copied.corpus)
    assert str(again.value) == str(err.value)


def test_bright_loads_documents_parquet(tmp_path, data_dir):
    bright = tmp_path / "bright"
    bright.mkdir()
    for name in ("topics.bright-pony-original.jsonl.gz", "qrels.bright-pony.txt"):
        shutil.copy(data_dir / "bright" / name, bright / name)
    gold = sorted(
        {line.split("\t")[2] for line in (bright / "qrels.bright-pony.txt").read_text().splitlines()}
    )
    (bright / "documents").mkdir()
    ids = [g.replace("_", " ", 1) if i == 0 else g for i, g in enumerate(gold)] + ["pony/other doc.txt"]
    assert " " in ids[0]
    pd.DataFrame({"id": ids, "content": [f"text {i}" for i in range(len(ids))]}).to_parquet(
        bright / "documents" / "pony-00000-of-00001.parquet"
    )
    bench = load_benchmark("bright-pony", tmp_path)
    assert len(bench.corpus) == len(ids)
    assert set(gold) <= set(bench.corpus)  # ids with spaces match the qrels' underscores
    assert "pony/other_doc.txt" in bench.corpus


def _tevatron_rows(n_queries: int, n_negatives: int) -> list[dict]:
    return [
        {
            "query_id": str(100 + q),
            "query": f"query {q}",
            "positive_passages": [{"docid": f"p{q}", "title": "-", "text": f"relevant passage {q}"}],
            "negative_passages": [
                {"docid": f"n{q}-{i}", "title": "-", "text": f"bm25 negative {q} {i}"}
                for i in range(n_negatives)
            ],
        }
        for q in range(n_queries)
    ]


def test_msmarco_train_builds_one_positive_and_19_negatives(tmp_path):
    write_jsonl(tmp_path / "msmarco" / "train.jsonl.gz", _tevatron_rows(5, 30))
    bench = load_benchmark("msmarco-train", tmp_path, max_queries=4)
    assert len(bench.split("train")) == 4
    for query in bench.queries.values():
        candidates = query.extra["candidates"]
        assert len(candidates) == len(set(candidates)) == 20
        assert list(bench.qrels[query.qid]) == [f"p{int(query.qid) - 100}"]
        assert bench.qrels[query.qid].keys() <= set(candidates)
        assert all(bench.corpus[d].title == "" for d in candidates)
    positions = {q.extra["candidates"].index(next(iter(bench.qrels[q.qid]))) for q in bench.queries.values()}
    assert len(positions) > 1  # shuffled, not always first
    again = load_benchmark("msmarco-train", tmp_path, max_queries=4)
    assert [q.extra for q in again.queries.values()] == [q.extra for q in bench.queries.values()]
    other = load_benchmark("msmarco-train", tmp_path, max_queries=4, seed=1)
    assert [q.extra for q in other.queries.values()] != [q.extra for q in bench.queries.values()]


def test_msmarco_train_missing_file_names_the_command(tmp_path):
    with pytest.raises(MissingDataError, match="train.jsonl.gz") as err:
        load_benchmark("msmarco-train", tmp_path)
    assert "--only msmarco-train" in str(err.value)


def test_dl_topics_with_quotes_are_read_verbatim(tmp_path, data_dir):
    folder = tmp_path / "trec_dl"
    shutil.copytree(data_dir / "trec_dl", folder)
    lines = (folder / "topics.dl19-passage.txt").read_text().splitlines()
    qid = lines[0].split("\t")[0]
    write_text(folder / "topics.dl19-passage.txt", "\n".join([f'{qid}\t"quoted" query', *lines[1:]]) + "\n")
    assert load_benchmark("dl19", tmp_path).queries[qid].text == '"quoted" query'
