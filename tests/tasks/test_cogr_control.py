"""CoGR's positive control (#41; rankrl/tasks/cogr.py ``construction=query_echo``): the fixed echo index,
that copying a query's own words retrieves exactly its relevant passages on the real dl-pools-cpu catalog
through the paper's parser, index and F1, the control's SFT targets (gold: those words; format: no gold),
and the settings it refuses. The paper rows (``construction=paper``) index the item side as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rankrl.data.catalogs import Catalog
from rankrl.data.records import Document, Query
from rankrl.errors import ConfigError
from rankrl.rollout.base import Generation
from rankrl.tasks.cogr import CoGRTask, content_words, echo_terms, parse_keywords
from tests.conftest import compose, require_data

# the control's catalog as its experiment composes it (the 40-query cut of dl-pools-cpu)
CONTROL_CATALOG = OmegaConf.to_container(compose(overrides=["experiment=cogr/control_sft"]).benchmark.options)
SHARED = {"shared": {"init_from": None}}


def two_queries() -> Catalog:
    items = {i: Document(i, f"passage {i}") for i in ("a", "b", "c")}
    queries = {"q1": Query("q1", "Who killed the Tsar of Russia?"), "q2": Query("q2", "who founded russia")}
    relevant = {"q1": frozenset({"a"}), "q2": frozenset({"b", "c"})}
    return Catalog("toy", items, queries, relevant, {"train": ["q1"], "validation": ["q2"]})


def test_echo_terms_are_each_querys_own_words_and_leave_out_shared_ones() -> None:
    assert content_words("Who killed the Tsar of Russia?") == ["killed", "tsar", "russia"]
    # "russia" is in both queries, so it would retrieve either's passages for both: no passage gets it
    assert echo_terms(two_queries()) == {"a": ["killed", "tsar"], "b": ["founded"], "c": ["founded"]}


def control(tmp_path: Path, **kwargs) -> CoGRTask:
    return CoGRTask(
        "dl-pools-cpu",
        data_dir=require_data(),
        benchmark_options=CONTROL_CATALOG,
        role_specs=SHARED,
        model_path="base-model",
        run_dir=tmp_path / "run",
        cache_dir=tmp_path / "cache",
        construction="query_echo",
        shared_generator=True,
        side="query",
        item_sft_targets="tfidf",
        **kwargs,
    )


class Answers:
    """A keyword writer: ``answer(query text)`` for each query prompt; it is never asked about an item."""

    def __init__(self, answer) -> None:
        self.answer = answer

    def __call__(self, prompts):
        out = []
        for messages in prompts:
            user = messages[-1]["content"]
            assert "Query: " in user, "the control's index asks no item generator"
            out.append(Generation(self.answer(user.rsplit("Query: ", 1)[1].strip()), 10, 3))
        return out


def test_copying_the_querys_own_words_retrieves_exactly_its_relevant_passages(tmp_path) -> None:
    task = control(tmp_path)
    copy = task.evaluate({"shared": Answers(lambda q: ", ".join(content_words(q)))}, "validation")["metrics"]
    assert copy["f1"] == copy["train_f1"] == 1.0 and copy["num_queries"] == 10 and copy["item_keywords"] == 0
    nothing = control(tmp_path / "other").evaluate({"shared": Answers(lambda q: "")}, "validation")["metrics"]
    assert nothing["f1"] == nothing["train_f1"] == 0.0  # the query string alone matches no passage's bag
    # the reward GRPO gets: F1 through the same index
    task.bind("shared", {})
    examples = task.train_examples()
    own = [", ".join(content_words(task.catalog.queries[e.target["id"]].text)) for e in examples]
    assert task.score(examples, own).rewards.tolist() == [1.0] * len(examples) == [1.0] * 30
    assert task.score(examples, ["passage, water"] * len(examples)).rewards.max() < 1.0


def test_gold_sft_targets_are_the_own_words_and_format_targets_score_nothing(tmp_path) -> None:
    gold = control(tmp_path, query_sft_target="gold")
    gold.bind("shared", {})
    targets = {e.uid: parse_keywords(e.completion) for e in gold.sft_examples()}
    assert len(targets) == 30 and all(u.startswith("query:") for u in targets)
    for uid, keywords in targets.items():
        assert keywords == content_words(gold.catalog.queries[uid.split(":", 1)[1]].text)
    # seed 1 draws a passage whose words retrieve one of its query's passages: drawn again
    for seed in (0, 1):
        fmt = control(tmp_path, query_sft_target="format", seed=seed)
        fmt.bind("shared", {})
        formatted = fmt.sft_examples()
        assert all(parse_keywords(e.completion) for e in formatted)
        examples = {e.uid: e for e in fmt.train_examples()}
        scores = fmt.score([examples[e.uid] for e in formatted], [e.completion for e in formatted])
        assert scores.format_ok.all() and scores.rewards.max() == 0.0  # well formed, and no gold in them
    again = control(tmp_path, query_sft_target="format", seed=1)  # the redraws are seeded too
    again.bind("shared", {})
    assert [e.completion for e in again.sft_examples()] == [e.completion for e in formatted]


def test_bad_control_settings_name_the_fix(tmp_path) -> None:
    with pytest.raises(ConfigError, match="valid: paper, query_echo"):
        control(tmp_path).__class__("dl-pools-cpu", construction="echo")
    with pytest.raises(ConfigError, match="valid: gold, format"):
        control(tmp_path, query_sft_target="copy")
    item_side = control(tmp_path)
    item_side.side_choice = "item"
    with pytest.raises(ConfigError, match="task.side=query"):
        item_side.bind("shared", {})


def test_the_controls_supervision_and_grpo_read_one_catalog() -> None:
    """Both control files pin the 40-query cut (the rows read all 94 queries): a change to one alone would
    compare supervision and GRPO on different held-out queries."""
    sft, grpo, rows = (
        compose(overrides=[f"experiment=cogr/{name}", "benchmark=dl-pools-cpu"]).benchmark
        for name in ("control_sft", "control_grpo", "cogr")
    )
    assert sft == grpo and sft.options.max_queries == 40 and sft.options.num_validation == 10
    assert rows.options.max_queries is None and rows.options.num_validation == 64
