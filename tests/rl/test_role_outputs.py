"""Role outputs (rankrl/rl/role_outputs.py): what a role's weights produce, stored with the run that used them
and read back by the next stage whose frozen role starts from those weights; base-model outputs cached."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rankrl.errors import ConfigError
from rankrl.rl import role_outputs
from rankrl.rl.role_outputs import TRAINED, RoleOutputs, WeightsSource, base_weights, weights_source

META = {"data": "abc123", "prompt": "p1", "sampling": "{}"}
LABELS = {"d1": ["red", "round"], "d2": ["blue"], "d3": []}


class Maker:
    """Makes a label list per id; counts the ids it was asked for."""

    def __init__(self, table: dict[str, list[str]] | None = None) -> None:
        self.table, self.asked = table or LABELS, []

    def __call__(self, ids):
        self.asked.extend(ids)
        return {i: self.table[i] for i in ids}


def outputs(tmp_path: Path, run: str, **kwargs) -> RoleOutputs:
    return RoleOutputs("demo", tmp_path / run, tmp_path / "cache", **kwargs)


def test_weights_source_trained_run_or_base():
    specs = {
        "writer": {"init_from": "/runs/sft", "model": {"path": "own-model"}},
        "reader": {"init_from": None},
        "bare": None,
    }
    assert weights_source("writer", "writer", specs, "default") == WeightsSource("trained")
    # before this run trained anything, the trained role is where it started from
    assert weights_source("writer", "writer", specs, "default", at_start=True) == WeightsSource(
        "run", folder=Path("/runs/sft")
    )
    assert weights_source("reader", "writer", specs, "default") == WeightsSource("base", model="default")
    assert weights_source("bare", None, specs, "default").model == "default"
    assert weights_source("unknown", None, specs, "default").kind == "base"
    assert base_weights("writer", specs, "default") == WeightsSource("base", model="own-model")
    assert WeightsSource("trained").describe() == TRAINED == "trained in this run"
    assert WeightsSource("run", folder=Path("/runs/sft")).describe() == "run /runs/sft"
    assert WeightsSource("base", model="m").describe() == "base model m"
    with pytest.raises(ValueError, match="trained, run, base"):
        WeightsSource("frozen")


def test_read_needs_matching_meta_and_every_id(tmp_path):
    store = outputs(tmp_path, "a")
    path = tmp_path / "a" / "labels.json"
    assert store.read(path, META, ["d1"]) is None  # no file
    assert store.read(None, META, ["d1"]) is None
    store.write(path, {**META, "source": TRAINED}, LABELS)
    assert store.read(path, META, ["d1", "d3"]) == {"d1": ["red", "round"], "d3": []}
    assert store.read(path, {**META, "source": TRAINED}, ["d2"]) == {"d2": ["blue"]}
    assert store.read(path, META, ()) == {}
    assert store.read(path, {**META, "prompt": "p2"}, ["d1"]) is None  # another prompt
    assert store.read(path, {**META, "source": "base model m"}, ["d1"]) is None  # other weights wrote it
    assert store.read(path, META, ["d1", "d4"]) is None  # incomplete
    path.write_text("{not json")
    assert store.read(path, META, ["d1"]) is None  # unreadable: ignored
    path.write_text("[1, 2]")
    assert store.read(path, META, ()) is None


def test_write_merges_per_meta_and_keeps_the_format(tmp_path):
    store = outputs(tmp_path, "a", field="labels")
    path = tmp_path / "a" / "labels.json"
    store.write(path, META, {"d1": ("red", "round")})
    store.write(path, META, {"d2": ["blue"], "d1": ["red"]})  # same meta: added to, d1 replaced
    assert json.loads(path.read_text()) == {"meta": META, "labels": {"d1": ["red"], "d2": ["blue"]}}
    # the bytes: meta first, then the table; non-ASCII kept as written
    store.write(path, META, {"d3": ["rouge é"]})
    assert path.read_text() == (
        '{"meta": {"data": "abc123", "prompt": "p1", "sampling": "{}"}, '
        '"labels": {"d1": ["red"], "d2": ["blue"], "d3": ["rouge é"]}}'
    )
    other = {**META, "data": "changed"}
    store.write(path, other, {"d9": ["green"]})  # another meta: replaced, not merged
    assert json.loads(path.read_text()) == {"meta": other, "labels": {"d9": ["green"]}}


def test_write_is_atomic_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    store = outputs(tmp_path, "a")
    path = tmp_path / "a" / "labels.json"
    store.write(path, META, LABELS)
    store.write(path, META, {"d4": ["x"]})
    assert [p.name for p in path.parent.iterdir()] == ["labels.json"]
    before = path.read_bytes()

    def broken(*args, **kwargs):
        raise TypeError("not JSON serialisable")

    monkeypatch.setattr(role_outputs.json, "dumps", broken)
    with pytest.raises(TypeError):
        store.write(path, META, {"d5": ["y"]})
    monkeypatch.undo()
    assert path.read_bytes() == before and [p.name for p in path.parent.iterdir()] == ["labels.json"]


def test_base_outputs_are_cached_by_model_meta_and_seed(tmp_path):
    base = WeightsSource("base", model="base-model")
    make = Maker()
    got = outputs(tmp_path, "first").get_or_make("labels", ["d1", "d2"], base, META, make)
    assert got == {"d1": ["red", "round"], "d2": ["blue"]} and make.asked == ["d1", "d2"]
    cached = outputs(tmp_path, "x").file_for("labels", base, META)
    assert cached.parent == tmp_path / "cache" / "demo" and cached.name.startswith("labels-base-")
    assert json.loads(cached.read_text())["meta"] == META  # the cache file carries no source stamp
    # another run, same model, meta and seed: read from the cache, nothing made
    again = Maker()
    assert outputs(tmp_path, "second").get_or_make("labels", ["d2", "d1"], base, META, again) == got
    assert again.asked == []
    # more ids than cached: made, and merged into the cache
    assert outputs(tmp_path, "third").get_or_make("labels", ["d1", "d3"], base, META, again)["d3"] == []
    assert set(json.loads(cached.read_text())["outputs"]) == {"d1", "d2", "d3"}
    # each of model, meta and seed is part of the key
    store = outputs(tmp_path, "x")
    other_files = {
        store.file_for("labels", WeightsSource("base", model="other-model"), META),
        store.file_for("labels", base, {**META, "prompt": "p2"}),
        outputs(tmp_path, "x", seed=1).file_for("labels", base, META),
        store.file_for("other", base, META),
    }
    assert cached not in other_files and len(other_files) == 4
    assert RoleOutputs("demo", tmp_path / "x").file_for("labels", base, META) is None  # no cache root
    assert store.file_for("labels", WeightsSource("trained"), META) is None


def test_record_stamps_whose_weights_wrote_the_outputs(tmp_path):
    store = outputs(tmp_path, "run", files={"labels": "doc_labels.json"})
    store.record("labels", {"d1": ["red"]}, META, WeightsSource("trained"))
    store.record("other", {"d2": ["blue"]}, META, WeightsSource("base", model="m"))
    written = json.loads((tmp_path / "run" / "doc_labels.json").read_text())
    assert written == {"meta": {**META, "source": TRAINED}, "outputs": {"d1": ["red"]}}
    assert json.loads((tmp_path / "run" / "other.json").read_text())["meta"]["source"] == "base model m"
    RoleOutputs("demo").record("labels", {"d1": ["red"]}, META, WeightsSource("trained"))  # no run folder


def test_a_stage_reads_what_the_run_that_trained_the_weights_recorded(tmp_path):
    trained = Maker()
    producer = outputs(tmp_path, "stage1")
    made = producer.get_or_make("labels", ["d1", "d2", "d3"], WeightsSource("trained"), META, trained)
    assert made == LABELS and trained.asked == ["d1", "d2", "d3"]
    # weights trained here are always made, never read, even when a file is there
    producer.get_or_make("labels", ["d1"], WeightsSource("trained"), META, trained)
    assert trained.asked == ["d1", "d2", "d3", "d1"]
    # the next stage: its frozen role starts from stage1's weights, so it reads stage1's file
    source = WeightsSource("run", folder=tmp_path / "stage1")
    frozen = Maker()
    consumer = outputs(tmp_path, "stage2")
    assert consumer.get_or_make("labels", ["d2", "d1"], source, META, frozen) == {
        "d2": ["blue"],
        "d1": ["red", "round"],
    }
    assert frozen.asked == []
    recorded = json.loads((tmp_path / "stage2" / "labels.json").read_text())
    assert recorded["meta"] == {**META, "source": f"run {tmp_path / 'stage1'}"}
    assert recorded["outputs"] == {"d1": ["red", "round"], "d2": ["blue"]}
    # stage2's file was not written by the weights it names: a stage starting from stage2 makes its own
    again = Maker()
    later = WeightsSource("run", folder=tmp_path / "stage2")
    assert outputs(tmp_path, "stage3").get_or_make("labels", ["d1"], later, META, again) == {
        "d1": ["red", "round"]
    }
    assert again.asked == ["d1"]
    # another meta (another sampling): made again
    assert consumer.get_or_make("labels", ["d1"], source, {**META, "sampling": "t=1"}, frozen)
    assert frozen.asked == ["d1"]


def test_missing_outputs_with_nothing_to_make_them_raise_the_tasks_error(tmp_path):
    source = WeightsSource("run", folder=tmp_path / "never_ran")
    store = outputs(tmp_path, "stage")
    with pytest.raises(ConfigError, match=r"labels.*run .*never_ran.*never_ran/labels\.json"):
        store.get_or_make("labels", ["d1"], source, META, None)
    with pytest.raises(ConfigError, match="run the producing stage first"):
        store.get_or_make(
            "labels", ["d1"], source, META, None, missing=ConfigError("run the producing stage first")
        )
    with pytest.raises(ConfigError, match="nothing to make them with"):
        store.get_or_make("labels", ["d1"], WeightsSource("trained"), META, None)
    assert not (tmp_path / "stage").exists()  # nothing recorded
