"""The ``retriever`` group's choice as a builder (rankrl/retrieval/build.py): every shape a task receives (a
config node, Hydra's partial, a class, a function), the ``none`` choice, ``cache_dir`` and ``name`` reaching
only constructors that take them, the config's label left out, and bad nodes naming the valid choices.
Real pyserini BM25 over three documents where it counts (index folders, k1 and b)."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from rankrl.config import CONFIG_DIR
from rankrl.data.records import Benchmark, Document, Query
from rankrl.errors import ConfigError
from rankrl.retrieval.bm25 import PyseriniBM25
from rankrl.retrieval.build import RetrieverBuilder, retriever_builder, retriever_choices
from rankrl.retrieval.first_stage import ensure_run

RETRIEVERS = CONFIG_DIR / "retriever"
DOCS = [
    Document("d1", "the cat sat on the mat"),
    Document("d2", "dogs chase cats in the park"),
    Document("d3", "a recipe for lemon cake"),
]


class Recorder:
    """A retriever that keeps what its constructor got; it takes ``cache_dir`` but no ``name``."""

    def __init__(self, docs=None, *, cache_dir=None, depth: int = 1) -> None:
        self.docs, self.cache_dir, self.depth = docs, cache_dir, depth


def anything(*args, **kwargs):
    return args, kwargs


def test_no_retriever_and_the_none_choice_build_nothing() -> None:
    assert retriever_builder(None) is None
    assert retriever_builder({"name": "none"}) is None
    assert retriever_builder(OmegaConf.load(RETRIEVERS / "none.yaml")) is None


def test_a_config_node_builds_bm25_with_its_options_but_not_its_label(tmp_path) -> None:
    build = retriever_builder(OmegaConf.load(RETRIEVERS / "bm25.yaml"))  # a non-recursive task's node
    assert build.factory is PyseriniBM25 and build.options == {"k1": 0.9, "b": 0.4}
    bm25 = build(DOCS, cache_dir=tmp_path, name="toy")
    assert (bm25.k1, bm25.b, bm25.name) == (0.9, 0.4, "toy")
    assert bm25.index_dir.parent == tmp_path / "lucene" and bm25.index_dir.name.startswith("toy-")
    assert next(iter(bm25.search({"q": "lemon cake"}, 2)["q"])) == "d3"


def test_hydras_partial_drops_the_label_so_bm25_keeps_its_own_name(tmp_path) -> None:
    partial = instantiate(OmegaConf.load(RETRIEVERS / "bm25.yaml"))  # what a recursive task config gets
    assert isinstance(partial, functools.partial) and partial.keywords["name"] == "bm25"
    build = retriever_builder(partial)
    assert build.factory is PyseriniBM25 and build.options == {"k1": 0.9, "b": 0.4}
    bm25 = build(DOCS, cache_dir=tmp_path)  # no name given: PyseriniBM25's default
    assert bm25.name == "bm25" and bm25.index_dir.name.startswith("bm25-")
    assert bm25.index_dir.parent == tmp_path / "lucene"


def test_the_first_stage_is_built_under_the_benchmarks_name(tmp_path) -> None:
    queries = {"q1": Query("q1", "lemon cake recipe"), "q2": Query("q2", "cats", {"excluded_ids": ["d1"]})}
    bench = Benchmark("toy", queries, {d.docid: d for d in DOCS}, {}, {"test": ["q1", "q2"]})
    run = ensure_run(bench, depth=2, retriever=OmegaConf.load(RETRIEVERS / "bm25.yaml"), cache_dir=tmp_path)
    assert next(iter(run["q1"])) == "d3" and list(run["q2"]) == ["d2"]
    assert [p.name.split("-")[0] for p in (tmp_path / "lucene").iterdir()] == ["toy"]


def test_cache_dir_and_name_reach_only_constructors_that_take_them(tmp_path) -> None:
    got = retriever_builder(Recorder)(DOCS, cache_dir=tmp_path, name="x")  # a class: no name taken
    assert (got.docs, got.cache_dir, got.depth) == (DOCS, tmp_path, 1)
    assert retriever_builder(Recorder)().docs is None  # no documents: built empty (indexed later)
    every = retriever_builder(anything)  # takes **kwargs: both
    assert every(DOCS, cache_dir="c", name="n") == ((DOCS,), {"cache_dir": "c", "name": "n"})
    assert every() == ((), {})  # None is not passed: the constructor's default holds
    assert retriever_builder(lambda docs: docs)(DOCS, cache_dir="c", name="n") == DOCS


def test_a_partial_keeps_its_options_and_build_time_keywords_override_them() -> None:
    build = retriever_builder(functools.partial(Recorder, depth=3, name="label", cache_dir="configured"))
    assert build.factory is Recorder and build.options == {"depth": 3, "cache_dir": "configured"}
    assert (build(DOCS).cache_dir, build(DOCS).depth) == ("configured", 3)
    assert build(DOCS, cache_dir="given").cache_dir == "given"
    assert retriever_builder(functools.partial(anything, "first"))(DOCS) == (("first", DOCS), {})


def test_a_node_without_partial_is_still_built_with_documents_at_build_time() -> None:
    node = OmegaConf.create({"_target_": f"{__name__}.Recorder", "depth": 2, "name": "label"})
    build = retriever_builder(node)
    assert build == RetrieverBuilder(Recorder, {"depth": 2})
    got = build(DOCS, cache_dir="c", name="n")
    assert (got.docs, got.cache_dir, got.depth) == (DOCS, "c", 2)
    assert retriever_builder(build) is build  # a builder passes through


@pytest.mark.parametrize(
    "node",
    [
        "bm25",
        3,
        object(),
        {"_target_": "rankrl.retrieval.nowhere.Retriever", "name": "x"},
        OmegaConf.create({"_target_": "rankrl.retrieval.bm25.NoSuchRetriever"}),
    ],
)
def test_a_bad_node_names_the_valid_choices(node) -> None:
    choices = r"retriever=bm25\|clip-vit-b16\|clip-vit-b32\|clip-vit-l14\|minilm"
    with pytest.raises(ConfigError, match=choices):
        retriever_builder(node)


def test_the_choices_are_the_retriever_configs_that_build_one() -> None:
    assert retriever_choices() == sorted(p.stem for p in RETRIEVERS.glob("*.yaml") if p.stem != "none")


def test_the_builder_imports_no_heavy_library() -> None:
    """Entry points import it through the tasks: no JVM, torch or Hydra before a retriever is built."""
    code = (
        "import sys, rankrl.retrieval.build\n"
        "heavy = ('torch', 'transformers', 'open_clip', 'pyserini', 'hydra')\n"
        "heavy = [m for m in heavy if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
