"""MuSiQue and HotpotQA with 20 candidates per question (real subsets)."""

from __future__ import annotations

import json

import pytest

from rankrl.data import load_benchmark


def _check_splits(bench, sizes):
    assert {name: len(qids) for name, qids in bench.splits.items()} == sizes
    every = [q for qids in bench.splits.values() for q in qids]
    assert sorted(every) == sorted(bench.queries)  # disjoint and complete


def test_musique_has_20_candidates_and_2_to_4_gold(data_dir):
    bench = load_benchmark("musique", data_dir)
    assert len(bench.queries) == 100
    _check_splits(bench, {"train": 80, "dev": 10, "test": 10})
    raw = {r["id"]: r for r in json.loads((data_dir / "musique" / "musique_train.json").read_text())}
    for query in bench.queries.values():
        candidates = query.extra["candidates"]
        assert len(candidates) == len(set(candidates)) == 20
        assert 2 <= len(bench.qrels[query.qid]) <= 4
        assert set(bench.qrels[query.qid]) <= set(candidates)
        paragraphs = raw[query.qid]["paragraphs"]
        assert [bench.corpus[d].text for d in candidates] == [p["paragraph_text"] for p in paragraphs]
        assert query.extra["answer"] == raw[query.qid]["answer"]


def test_musique_split_and_subsample_are_seeded(data_dir):
    a, b = load_benchmark("musique", data_dir), load_benchmark("musique", data_dir)
    assert a.splits == b.splits
    assert load_benchmark("musique", data_dir, seed=1).splits != a.splits
    small = load_benchmark("musique", data_dir, max_questions=30, fractions={"train": 0.5, "test": 0.5})
    _check_splits(small, {"train": 15, "test": 15})
    assert (
        small.splits
        == load_benchmark("musique", data_dir, max_questions=30, fractions={"train": 0.5, "test": 0.5}).splits
    )
    assert {d for q in small.queries.values() for d in q.extra["candidates"]} == set(small.corpus)


def test_hotpotqa_pads_to_20_with_other_passages(data_dir):
    bench = load_benchmark("hotpotqa", data_dir)
    assert len(bench.queries) == 100
    _check_splits(bench, {"train": 80, "dev": 10, "test": 10})
    raw = {r["_id"]: r for r in json.loads((data_dir / "hotpotqa" / "hotpotqa_train.json").read_text())}
    gold_positions = set()
    for query in bench.queries.values():
        candidates = query.extra["candidates"]
        own = [title for title, _ in raw[query.qid]["context"]]
        assert len(candidates) == len(set(candidates)) == 20
        assert set(own) <= set(candidates)  # padding never repeats the question's own paragraphs
        assert len(bench.qrels[query.qid]) == 2 and set(bench.qrels[query.qid]) <= set(own)
        assert all(d in bench.corpus for d in candidates)
        gold_positions |= {candidates.index(g) for g in bench.qrels[query.qid]}
    assert max(gold_positions) >= 10  # shuffled: gold is not confined to the first 10 slots


def test_hotpotqa_padding_is_seeded(data_dir):
    a = load_benchmark("hotpotqa", data_dir)
    b = load_benchmark("hotpotqa", data_dir)
    c = load_benchmark("hotpotqa", data_dir, seed=3)
    assert [q.extra["candidates"] for q in a.queries.values()] == [
        q.extra["candidates"] for q in b.queries.values()
    ]
    assert [q.extra["candidates"] for q in a.queries.values()] != [
        q.extra["candidates"] for q in c.queries.values()
    ]


def test_musique_reads_the_official_jsonl(tmp_path, data_dir):
    rows = json.loads((data_dir / "musique" / "musique_train.json").read_text())[:12]
    folder = tmp_path / "musique"
    folder.mkdir()
    (folder / "musique_ans_v1.0_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    bench = load_benchmark("musique", tmp_path, file="musique_ans_v1.0_train.jsonl")
    assert list(bench.queries) == [r["id"] for r in rows]
    assert all(len(q.extra["candidates"]) == 20 for q in bench.queries.values())


@pytest.mark.parametrize("fractions", [{"train": 0.9, "test": 0.2}, {"train": -0.1, "test": 0.5}])
def test_bad_split_fractions_are_rejected(data_dir, fractions):
    with pytest.raises(ValueError, match="fractions"):
        load_benchmark("musique", data_dir, fractions=fractions)
