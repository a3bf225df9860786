"""Missing and malformed files give errors that name the file and the fix; bad names and options too."""

from __future__ import annotations

import gzip
import inspect
import json
import shutil

import pytest

from rankrl.data import BENCHMARKS, MalformedDataError, MissingDataError, load_benchmark

from .conftest import write_text


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_reports_its_missing_files(tmp_path, name):
    with pytest.raises(MissingDataError) as err:
        load_benchmark(name, tmp_path)
    message = str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    assert str(tmp_path) in message and str(err.value.path) in message
    assert "make data" in message and f"--only {name}" in message


def test_unknown_benchmark_lists_the_valid_names(tmp_path):
    with pytest.raises(ValueError, match="unknown benchmark 'dl21'") as err:
        load_benchmark("dl21", tmp_path)
    assert all(name in str(err.value) for name in ("dl19", "bright-pony", "wands", "xm3600"))


def test_unknown_option_lists_the_valid_ones(data_dir):
    with pytest.raises(TypeError, match="max_history"):
        load_benchmark("movielens-100k", data_dir, history=3)


def test_loader_options_are_documented():
    assert len(BENCHMARKS) >= 20  # the registered loaders (26 today): the loop checks each
    for name, loader in BENCHMARKS.items():
        func = getattr(loader, "func", loader)
        assert func.__doc__, f"{name}: loader has no docstring"
        assert "data_dir" in inspect.signature(func).parameters


@pytest.fixture
def dl19_copy(tmp_path, data_dir):
    shutil.copytree(data_dir / "trec_dl", tmp_path / "trec_dl")
    return tmp_path


@pytest.mark.parametrize(
    ("file", "content", "problem"),
    [
        ("bm25_retrieve_results_dl19.json", '[{"query": "q", "hits": [', "JSONDecodeError"),
        ("bm25_retrieve_results_dl19.json", '[{"query": "q"}]', "missing field: 'hits'"),
        ("qrels.dl19-passage.txt", "19335 Q0 1017759 high\n", "relevance grade"),
        ("qrels.dl19-passage.txt", "19335 Q0 1017759\n", "line 1: expected 4 fields, got 3"),
        ("bm25_trec_results_dl19.txt", "264014 Q0 5611210 1 fifteen rank\n", "score"),
    ],
)
def test_malformed_trec_files_name_the_file_and_the_problem(dl19_copy, file, content, problem):
    path = write_text(dl19_copy / "trec_dl" / file, content)
    with pytest.raises(MalformedDataError) as err:
        load_benchmark("dl19", dl19_copy)
    assert str(path) in str(err.value) and problem in str(err.value) and "make data" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_truncated_gzip_is_malformed(tmp_path, data_dir):
    bright = tmp_path / "bright"
    bright.mkdir()
    shutil.copy(data_dir / "bright" / "qrels.bright-pony.txt", bright)
    data = (data_dir / "bright" / "topics.bright-pony-original.jsonl.gz").read_bytes()
    (bright / "topics.bright-pony-original.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(MalformedDataError, match="topics.bright-pony-original.jsonl.gz"):
        load_benchmark("bright-pony", tmp_path)


def test_bad_jsonl_line_is_reported_with_its_number(tmp_path, data_dir):
    bright = tmp_path / "bright"
    bright.mkdir()
    shutil.copy(data_dir / "bright" / "qrels.bright-pony.txt", bright)
    with gzip.open(bright / "topics.bright-pony-original.jsonl.gz", "wt") as f:
        f.write(json.dumps({"id": "0", "query": "q", "gold_ids": []}) + "\n{not json\n")
    with pytest.raises(MalformedDataError, match="line 2"):
        load_benchmark("bright-pony", tmp_path)


def test_question_without_paragraphs_is_malformed(tmp_path, data_dir):
    rows = json.loads((data_dir / "musique" / "musique_train.json").read_text())[:3]
    del rows[1]["paragraphs"]
    write_text(tmp_path / "musique" / "musique_train.json", json.dumps(rows))
    with pytest.raises(MalformedDataError, match=f"question '{rows[1]['id']}'.*missing field: 'paragraphs'"):
        load_benchmark("musique", tmp_path)


def test_wrong_top_level_json_is_malformed(tmp_path):
    write_text(tmp_path / "hotpotqa" / "hotpotqa_train.json", json.dumps({"data": []}))
    write_text(tmp_path / "hotpotqa" / "hotpotqa_train_corpus.json", json.dumps({"T": ["s."]}))
    with pytest.raises(MalformedDataError, match="hotpotqa_train.json: expected a JSON list"):
        load_benchmark("hotpotqa", tmp_path)


def test_ratings_for_unknown_items_are_malformed(tmp_path):
    write_text(tmp_path / "movielens-100k" / "u.data", "1\t999\t5\t881250949\n")
    write_text(
        tmp_path / "movielens-100k" / "u.item", "1|Toy Story (1995)|01-Jan-1995||url" + "|0" * 19 + "\n"
    )
    with pytest.raises(MalformedDataError, match="u.data: 1 item ids have no item entry"):
        load_benchmark("movielens-100k", tmp_path)


def test_corrupt_coco_cn_archive_is_malformed(tmp_path):
    write_text(tmp_path / "coco-cn" / "coco-cn-version1805.tar.gz", "not an archive")
    with pytest.raises(MalformedDataError, match="coco-cn-version1805.tar.gz"):
        load_benchmark("coco-cn", tmp_path)
