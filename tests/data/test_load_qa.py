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


# ---- the official releases (profile=paper): a training file and a validation file of real records -------


def _write_release(tmp_path, data_dir, name: str) -> dict[str, list[dict]]:
    """The first 60 questions of the shared subset as the official training file, the other 40 as the
    validation file, under the official names and formats (MuSiQue: JSON lines; HotpotQA: a JSON list)."""
    source = data_dir / name / f"{name}_train.json"
    rows = json.loads(source.read_text())
    files = {"train": RELEASE_OPTIONS[name]["file"], "eval": RELEASE_OPTIONS[name]["eval_file"]}
    folder = tmp_path / name
    folder.mkdir()
    parts = {"train": rows[:60], "eval": rows[60:]}
    for part, records in parts.items():
        if name == "musique":
            text = "".join(json.dumps(r) + "\n" for r in records)
        else:
            text = json.dumps(records)
        (folder / files[part]).write_text(text)
    return parts


RELEASE_OPTIONS = {
    "musique": {"file": "musique_ans_v1.0_train.jsonl", "eval_file": "musique_ans_v1.0_dev.jsonl"},
    "hotpotqa": {
        "file": "hotpot_train_v1.1.json",
        "eval_file": "hotpot_dev_distractor_v1.json",
        "corpus_file": None,
    },
}


@pytest.mark.parametrize("name", ["musique", "hotpotqa"])
def test_official_release_trains_on_a_seeded_subsample_and_tests_on_the_validation_file(
    tmp_path, data_dir, name
):
    """F-GRPO Appendix B.2: a subsample of the training file; dev and test disjoint samples of the
    validation data. Real records in the official layout, the loader the paper profile runs."""
    parts = _write_release(tmp_path, data_dir, name)
    key = "id" if name == "musique" else "_id"
    train_ids, eval_ids = ({str(r[key]) for r in rows} for rows in parts.values())
    sizes = {"max_questions": 30, "dev_questions": 8, "test_questions": 20}
    bench = load_benchmark(name, tmp_path, **RELEASE_OPTIONS[name], **sizes, seed=0)
    _check_splits(bench, {"train": 30, "dev": 8, "test": 20})
    assert set(bench.splits["train"]) <= train_ids
    assert set(bench.splits["dev"]) | set(bench.splits["test"]) <= eval_ids
    for query in bench.queries.values():
        candidates = query.extra["candidates"]
        assert len(candidates) == len(set(candidates)) == 20
        assert set(bench.qrels[query.qid]) <= set(candidates) and all(d in bench.corpus for d in candidates)
    # deterministic in the seed, and the seed matters
    again = load_benchmark(name, tmp_path, **RELEASE_OPTIONS[name], **sizes, seed=0)
    assert again.splits == bench.splits
    assert [again.queries[q].extra["candidates"] for q in again.queries] == [
        bench.queries[q].extra["candidates"] for q in bench.queries
    ]
    other = load_benchmark(name, tmp_path, **RELEASE_OPTIONS[name], **sizes, seed=1)
    assert other.splits["train"] != bench.splits["train"] and other.splits["test"] != bench.splits["test"]
    if name == "hotpotqa":  # padding comes from the paragraphs of the question's own file
        eval_titles = {t for r in parts["eval"] for t, _ in r["context"]}
        for qid in bench.splits["test"]:
            assert set(bench.queries[qid].extra["candidates"]) <= eval_titles


@pytest.mark.parametrize(
    "options,match",
    [
        ({"max_questions": 61, "dev_questions": 5, "test_questions": 5}, "holds 60 questions"),
        ({"max_questions": 10, "dev_questions": 30, "test_questions": 20}, "holds 40 questions"),
        ({"max_questions": 10, "dev_questions": 5}, "test_questions"),
        ({"dev_questions": 5, "test_questions": 5, "fractions": {"train": 1}}, "fractions"),
    ],
)
def test_official_release_options_that_cannot_hold_stop_with_the_reason(tmp_path, data_dir, options, match):
    _write_release(tmp_path, data_dir, "musique")
    with pytest.raises(ValueError, match=match):
        load_benchmark("musique", tmp_path, **RELEASE_OPTIONS["musique"], **options)


def test_split_sizes_without_a_validation_file_are_rejected(data_dir):
    with pytest.raises(ValueError, match="eval_file"):
        load_benchmark("musique", data_dir, test_questions=5)


def test_a_missing_release_file_names_its_fetch_command(tmp_path):
    from rankrl.data import MissingDataError

    with pytest.raises(MissingDataError, match="--only musique-full"):
        load_benchmark("musique", tmp_path, **RELEASE_OPTIONS["musique"], dev_questions=1, test_questions=1)
