"""CoGR (rankrl/tasks/cogr.py): keyword parsing, rewards, the incremental item reward against brute force,
SFT targets, the task with scripted generators (no model), and the whole pipeline with the tiny model.
Elsewhere: the catalogs (tests/data/test_catalogs.py), the cutoff baselines
(tests/retrieval/test_first_stage.py), the round figures (tests/report/test_rounds.py)."""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from pathlib import Path

import pytest
import torch

from rankrl.config import REPO_ROOT
from rankrl.data.errors import MissingDataError
from rankrl.errors import ConfigError
from rankrl.eval.metrics import set_prf
from rankrl.retrieval.keyword_index import KeywordIndex, keyword_bag
from rankrl.rollout.base import Generation
from rankrl.tasks import cogr
from rankrl.tasks.cogr import CoGRTask, ItemCounterfactual, brute_force_gain, parse_keywords
from tests.data.conftest import ITEMS, QUERIES, RELEVANT, toy_catalog

# ---- keywords ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("sofa bed, grey sofa, sleeper", ["sofa bed", "grey sofa", "sleeper"]),
        ("Sofa Bed, SOFA BED, sofa  bed.", ["sofa bed"]),  # case, spaces, punctuation, repeats
        (
            "1. sofa bed\n2) grey sofa\n- sleeper\n* couch\n• futon",
            ["sofa bed", "grey sofa", "sleeper", "couch", "futon"],
        ),
        ("Keywords: lamp; desk lamp | LED", ["lamp", "desk lamp", "led"]),
        ("<think>sofa, bed</think>\n\nchair, stool", ["chair", "stool"]),  # only what follows the reasoning
        ("7.5 qt slow cooker, all-clad, 3.5 inch", ["7.5 qt slow cooker", "all-clad", "3.5 inch"]),
        ('"sofa", (bed), !!, ,, ', ["sofa", "bed"]),
        ("", []),
        ("   \n ,;", []),
    ],
)
def test_parse_keywords(text, expected):
    assert parse_keywords(text) == expected


def test_parse_keywords_never_raises_and_is_linear():
    assert parse_keywords(None) == [] and parse_keywords(b"sofa") == []  # type: ignore[arg-type]
    huge = ("1. " + "!" * 50_000 + "sofa" + "?" * 50_000 + ", ") * 20 + "</think>" * 1000 + "bed"
    assert parse_keywords(huge) == ["bed"]
    assert parse_keywords(("1. " + "!" * 50_000 + "sofa" + "?" * 50_000 + ", ") * 20) == ["sofa"]


def test_budgets_stats_and_format():
    assert cogr.within_budget(["a", "b", "c"], 2) == ["a", "b"]
    stats = cogr.keyword_stats([["sofa bed", "lamp"], [], ["a", "b", "c"]], budget=2)
    assert stats == {"keywords": 5 / 3, "multiword": 1 / 5, "over_budget": 1 / 3, "empty": 1 / 3}
    assert cogr.format_keywords(["sofa bed", "lamp"]) == "sofa bed, lamp"
    assert parse_keywords(cogr.format_keywords(["sofa bed", "lamp"])) == ["sofa bed", "lamp"]


# ---- rewards -----------------------------------------------------------------------------------------------


def test_query_reward_is_f1_within_budget_else_zero():
    index = cogr.build_index(ITEMS, {"i1": ["sofa"], "i2": ["sofa"], "i3": ["lamp"]}, k_max=30)
    q1 = QUERIES["q1"]
    # {q} = "sofa bed" matches i1's title; "sofa" adds i1 and i2
    assert cogr.query_reward(["sofa"], q1, RELEVANT["q1"], index, 30) == set_prf({"i1", "i2"}, {"i1"})[2]
    assert cogr.query_reward([], q1, RELEVANT["q1"], index, 30) == 1.0  # the query string alone
    assert cogr.query_reward(["x", "y", "z"], q1, RELEVANT["q1"], index, k_max=2) == 0.0
    assert (
        cogr.query_reward(["x", "y"], q1, RELEVANT["q1"], index, k_max=2) == 1.0
    )  # |S_q| = K_max is allowed


def test_item_reward_is_minus_one_over_budget():
    index = cogr.build_index(ITEMS, {}, k_max=30)
    counterfactual = ItemCounterfactual(index, {"q1": {"sofa"}}, {"q1": {"i1"}})
    assert cogr.item_reward(["a", "b", "c"], "i1", counterfactual, k_max=2) == -1.0
    assert cogr.item_reward(["sofa"], "i1", counterfactual, k_max=2) == 1.0  # 0 -> 1 for q1
    assert cogr.item_reward(["sofa"], "i2", counterfactual, k_max=2) == 0.0  # q1: 0 -> 0 (still no hit)


def test_f1_from_counts_is_set_prf_bit_for_bit():
    from rankrl.eval.metrics import prf_from_counts

    rng = random.Random(0)
    for _ in range(300):
        pred, rel = (
            set(rng.sample(range(30), rng.randint(0, 12))),
            set(rng.sample(range(30), rng.randint(0, 12))),
        )
        assert prf_from_counts(len(pred & rel), len(pred), len(rel)) == set_prf(pred, rel)
    with pytest.raises(ValueError, match="impossible counts"):
        prf_from_counts(3, 2, 5)


def random_setup(seed: int):
    """A random catalog: some items titled (own terms), query bags with the query string, random labels."""
    rng = random.Random(seed)
    vocab = [f"kw{i}" for i in range(rng.randint(8, 40))]
    n_items, n_queries = rng.randint(5, 60), rng.randint(1, 30)
    items = {f"i{n}": rng.sample(vocab, rng.randint(0, 6)) for n in range(n_items)}
    own = {i: [f"title {i}"] for i in items if rng.random() < 0.3}
    index = KeywordIndex(items, own)
    bags = {
        f"q{n}": keyword_bag(
            rng.sample(vocab, rng.randint(0, 5))
            + [f"query {n}"]
            + ([f"title i{rng.randrange(n_items)}"] if rng.random() < 0.3 else [])
        )
        for n in range(n_queries)
    }
    relevant = {q: set(rng.sample(sorted(items), rng.randint(0, min(6, n_items)))) for q in bags}
    return index, bags, relevant, vocab, rng


@pytest.mark.parametrize("seed", range(12))
def test_incremental_item_reward_equals_brute_force_exactly(seed):
    index, bags, relevant, vocab, rng = random_setup(seed)
    counterfactual = ItemCounterfactual(index, bags, relevant)
    reference_total = sum(set_prf(index.retrieve_bag(b), relevant[q])[2] for q, b in bags.items())
    assert counterfactual.total_f1() == pytest.approx(reference_total)
    for _ in range(15):
        item = rng.choice(sorted(index.bags))
        new = rng.sample(vocab + ["unseen"], rng.randint(0, 7)) + (
            [f"query {rng.randrange(len(bags))}"] if rng.random() < 0.2 else []
        )
        incremental = counterfactual.gain(item, new)
        rebuilt = brute_force_gain(index, bags, relevant, item, new, rebuild=True)
        patched = brute_force_gain(index, bags, relevant, item, new, rebuild=False)
        assert incremental == rebuilt == patched  # bit for bit, not approximately
        moved = index.with_keywords(item, new)
        total_new = sum(set_prf(moved.retrieve_bag(b), relevant[q])[2] for q, b in bags.items())
        assert incremental == pytest.approx(total_new - reference_total, abs=1e-12)  # the paper's form
        changed = {q for q, b in bags.items() if moved.retrieve_bag(b) != index.retrieve_bag(b)}
        assert changed <= set(counterfactual.affected_queries(item, new))


def test_counterfactual_by_hand():
    index = KeywordIndex({"a": ["x"], "b": ["y"]})
    counterfactual = ItemCounterfactual(
        index, {"q1": {"x"}, "q2": {"y"}, "q3": {"z"}}, {"q1": {"a"}, "q3": {"b"}}
    )
    assert counterfactual.affected_queries("a", ["z"]) == ["q1", "q3"]
    assert counterfactual.gain("a", ["x"]) == 0.0
    # q1 loses its only relevant item (1 -> 0); q3 now retrieves "a", still not its relevant "b" (0 -> 0)
    assert counterfactual.gain("a", ["z"]) == -1.0
    assert counterfactual.gain("b", ["z", "y"]) == pytest.approx(1.0)  # q3: 0 -> 1; q2 keeps b (0 -> 0)
    with pytest.raises(KeyError, match="unknown item"):
        counterfactual.gain("nope", ["x"])


# ---- SFT targets -------------------------------------------------------------------------------------------


def test_top_keywords_count_sets_and_break_ties_by_first_appearance():
    sets = [["sofa", "grey", "sofa"], ["bed", "sofa"], ["grey", "bed", "lamp"]]
    assert cogr.top_keywords(sets, 2) == ["sofa", "grey"]
    assert cogr.top_keywords(sets, 10) == ["sofa", "grey", "bed", "lamp"]
    assert cogr.top_keywords([], 3) == []


def test_query_sft_targets_come_from_relevant_training_items():
    base = {"i1": ["sofa bed", "sleeper"], "i3": ["lamp", "desk"], "i4": ["lamp", "floor"], "i5": []}
    targets = cogr.query_sft_targets(toy_catalog(), base, n=2)
    assert targets == {
        "q1": ["sofa bed", "sleeper"],
        "q2": ["lamp", "desk"],
    }  # q3's item has none; q4 is validation


# ---- the task with scripted generators ---------------------------------------------------------------------


class Scripted:
    """A generator answering each prompt from a table keyed by the query or the item title; counts calls."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers, self.calls = answers, 0

    def __call__(self, prompts):
        self.calls += len(prompts)
        out = []
        for messages in prompts:
            user = messages[-1]["content"]
            key = re.search(r"(?:Query|Title|Text): (.*)", user).group(1)
            out.append(Generation(self.answers.get(key, ""), prompt_tokens=10, completion_tokens=3))
        return out


QUERY_ANSWERS = {"sofa bed": "sofa, sleeper", "lamp": "lamp, lighting", "table": "table", "couch": "sofa"}
ITEM_ANSWERS = {
    "Sofa Bed": "sofa, sleeper, bed",
    "Leather Sofa": "sofa",
    "Desk Lamp": "lamp",
    "Arc Floor Lamp": "lamp, floor lamp",
    "Dining Table": "table, oak",
    "passage without a title": "passage",
}


def make_task(tmp_path: Path, run: str, roles: dict | None = None, **kwargs) -> CoGRTask:
    roles = roles or {"query": {"init_from": None}, "item": {"init_from": None}}
    return CoGRTask(
        toy_catalog(),
        role_specs=roles,
        model_path="base-model",
        run_dir=tmp_path / run,
        cache_dir=tmp_path / "cache",
        **kwargs,
    )


def test_evaluate_searches_the_item_index_and_writes_both_sides(tmp_path):
    task = make_task(tmp_path, "base")
    gens = {"query": Scripted(QUERY_ANSWERS), "item": Scripted(ITEM_ANSWERS)}
    result = task.evaluate(gens, "validation")
    # q4 "couch" -> {sofa, couch} retrieves i1, i2 (keyword "sofa"): both relevant
    assert result["metrics"]["f1"] == 1.0 and result["metrics"]["retrieved"] == 2.0
    # the per-query values a paired test reads (per_query.csv): one row per validation query
    per_query = result["per_query"]
    assert list(per_query.index) == task.catalog.split("validation") and per_query["f1"].tolist() == [1.0]
    assert list(per_query.columns) == ["precision", "recall", "f1"]
    expected_train = [
        set_prf(s, RELEVANT[q])[2] for q, s in [("q1", {"i1", "i2"}), ("q2", {"i3", "i4"}), ("q3", {"i5"})]
    ]
    assert result["metrics"]["train_f1"] == pytest.approx(sum(expected_train) / 3)
    assert result["metrics"]["item_keywords"] == pytest.approx(10 / 6)
    assert set(result["run"]["q4"]) == {"i1", "i2"}
    on_train = task.evaluate(gens, "train", limit=1)["metrics"]  # the first training query only
    assert on_train["num_queries"] == 1.0 and on_train["train_f1"] == pytest.approx(sum(expected_train) / 3)
    assert on_train["f1"] == pytest.approx(expected_train[0])
    with pytest.raises(ValueError, match="validation"):
        task.evaluate(gens, "test")
    written = json.loads((tmp_path / "base" / "item_keywords.json").read_text())
    assert written["keywords"]["i4"] == ["lamp", "floor lamp"]
    assert set(json.loads((tmp_path / "base" / "query_keywords.json").read_text())["keywords"]) == {
        "q1",
        "q2",
        "q3",
        "q4",
    }
    # base weights: a second run with the same base model reads the shared cache and generates nothing
    again = make_task(tmp_path, "base2")
    silent = {"query": Scripted({}), "item": Scripted({})}
    assert again.evaluate(silent, "validation")["metrics"] == result["metrics"]
    assert silent["query"].calls == silent["item"].calls == 0


def test_a_stage_reads_the_keywords_its_frozen_role_was_evaluated_with(tmp_path):
    # stage "sft_item" trains the item role; its final evaluation writes the item index it produced
    sft = make_task(tmp_path, "sft_item")
    sft.bind("item", {"query": Scripted(QUERY_ANSWERS)})
    sft.evaluate({"query": Scripted(QUERY_ANSWERS), "item": Scripted(ITEM_ANSWERS)}, "validation")
    assert (
        json.loads((tmp_path / "sft_item" / "item_keywords.json").read_text())["meta"]["source"]
        == cogr.TRAINED
    )
    # the next query stage: item frozen from sft_item -> its index is read, the frozen generator never called
    frozen = Scripted({})
    task = make_task(
        tmp_path,
        "query_r1",
        {"query": {"init_from": None}, "item": {"init_from": str(tmp_path / "sft_item")}},
    )
    task.bind("query", {"item": frozen})
    examples = task.train_examples()
    assert [e.target["id"] for e in examples] == ["q1", "q2", "q3"] and frozen.calls == 0
    scores = task.score(examples[:2] * 2, ["sofa bed", "lamp", "1. sofa\n2. sofa bed", ""])
    expected = [
        cogr.query_reward(
            parse_keywords(c), QUERIES[e.target["id"]], RELEVANT[e.target["id"]], task.item_index(), 30
        )
        for e, c in zip(examples[:2] * 2, ["sofa bed", "lamp", "1. sofa\n2. sofa bed", ""])
    ]
    assert scores.rewards.tolist() == pytest.approx(expected)
    assert scores.format_ok.tolist() == [True, True, True, False]
    assert scores.components["num_keywords"].tolist() == [1.0, 1.0, 2.0, 0.0]
    assert scores.metrics["format_error_rate"] == 0.25


def test_item_stage_rewards_counterfactual_gain_against_the_reference_index(tmp_path):
    prev = make_task(tmp_path, "query_r1")
    prev.bind("query", {"item": Scripted(ITEM_ANSWERS)})
    prev.evaluate({"query": Scripted(QUERY_ANSWERS), "item": Scripted(ITEM_ANSWERS)}, "validation")
    roles = {"query": {"init_from": str(tmp_path / "query_r1")}, "item": {"init_from": None}}
    task = make_task(tmp_path, "item_r1", roles)
    task.bind("item", {"query": Scripted({})})  # query keywords come from query_r1's file
    examples = task.train_examples()
    assert len(examples) == len(ITEMS)
    i2 = next(e for e in examples if e.target["id"] == "i2")
    scores = task.score([i2, i2, i2], ["couch", "sofa", ", ".join(f"k{n}" for n in range(31))])
    # q1 "sofa bed" retrieves i2 through "sofa" (irrelevant): dropping "sofa" for "couch" raises q1's F1 to 1
    assert scores.rewards.tolist() == pytest.approx([1.0 - set_prf({"i1", "i2"}, {"i1"})[2], 0.0, -1.0])
    assert scores.rewards[0] == task.counterfactual().gain("i2", ["couch"])


def test_item_stage_without_a_reference_index_says_what_to_run(tmp_path):
    roles = {"query": {"init_from": None}, "item": {"init_from": str(tmp_path / "never_ran")}}
    task = make_task(tmp_path, "item_r1", roles)
    task.bind("item", {"query": Scripted(QUERY_ANSWERS)})
    with pytest.raises(ConfigError, match="item_keywords.json"):
        task.train_examples()


def test_keyword_files_keep_their_names_and_format(tmp_path):
    """Run folders and caches written before the core's role outputs (rankrl.rl.role_outputs) still read:
    the same file names, cache key and bytes."""
    task = make_task(tmp_path, "base")
    task.evaluate({"query": Scripted(QUERY_ANSWERS), "item": Scripted(ITEM_ANSWERS)}, "validation")
    meta = task.keyword_meta("item")
    assert list(meta) == ["side", "catalog", "prompt", "sampling"]
    key = json.dumps(["base-model", meta, 0], sort_keys=True)
    cached = tmp_path / "cache" / "cogr" / f"item-base-{hashlib.sha256(key.encode()).hexdigest()[:20]}.json"
    keywords = json.loads(cached.read_text())["keywords"]
    assert keywords["i4"] == ["lamp", "floor lamp"]
    assert cached.read_text() == json.dumps({"meta": meta, "keywords": keywords}, ensure_ascii=False)
    stamped = {**meta, "source": "base model base-model"}
    assert (tmp_path / "base" / cogr.KEYWORD_FILES["item"]).read_text() == json.dumps(
        {"meta": stamped, "keywords": keywords}, ensure_ascii=False
    )
    # a stage's own file (stamped TRAINED) is what the next stage reads, generating nothing
    (tmp_path / "sft_item").mkdir()
    (tmp_path / "sft_item" / "item_keywords.json").write_text(
        json.dumps({"meta": {**meta, "source": "trained in this run"}, "keywords": keywords})
    )
    roles = {"query": {"init_from": None}, "item": {"init_from": str(tmp_path / "sft_item")}}
    frozen = Scripted({})
    reader = make_task(tmp_path, "query_r1", roles)
    reader.bind("query", {"item": frozen})
    reader.train_examples()
    assert frozen.calls == 0 and reader.item_index().bag_of("i4") >= {"lamp", "floor lamp"}


def test_sft_targets_are_the_base_models_keywords(tmp_path):
    base = make_task(tmp_path, "base", item_budget=2, query_budget=3)  # the prompt's budgets are the same
    base.evaluate({"query": Scripted(QUERY_ANSWERS), "item": Scripted(ITEM_ANSWERS)}, "validation")
    task = make_task(tmp_path, "sft_item", item_budget=2, query_budget=3)
    task.bind("item", {"query": Scripted({})})
    items = {e.uid: e.completion for e in task.sft_examples()}
    assert items["item:i1"] == "sofa, sleeper" and len(items) == len(ITEMS)  # first M = 2
    task.bind("query", {"item": Scripted({})})
    queries = {e.uid: e.completion for e in task.sft_examples()}
    # q2's relevant items i3 {lamp} and i4 {lamp, floor lamp} (first M = 2 each): lamp twice, floor lamp once
    assert queries == {"query:q1": "sofa, sleeper", "query:q2": "lamp, floor lamp", "query:q3": "table, oak"}


def test_tfidf_item_targets_are_each_items_own_distinctive_words():
    keywords = cogr.tfidf_item_keywords(toy_catalog(), 10)
    # i1 = "Sofa Bed" + "a grey sofa bed for small rooms": bed (twice, only here) outweighs sofa (twice, also
    # in i2) outweighs grey (once); stop words ("a", "for", "without") never appear
    assert keywords["i1"] == ["bed", "sofa", "grey", "rooms", "small"]
    assert keywords["i6"] == ["passage", "title"]
    for iid, words in keywords.items():
        doc = toy_catalog().items[iid]
        assert set(words) <= set(re.findall(r"\w+", f"{doc.title} {doc.text}".lower()))
    assert cogr.tfidf_item_keywords(toy_catalog(), 2)["i1"] == ["bed", "sofa"]  # first M
    # only what the item generator reads: the description cut to its first words
    assert "rooms" not in cogr.tfidf_item_keywords(toy_catalog(), 10, max_words=2)["i1"]
    # no relevance label is used: other labels, same targets
    relabelled = toy_catalog()
    relabelled.relevant = {q: frozenset({"i6"}) for q in relabelled.relevant}
    assert cogr.tfidf_item_keywords(relabelled, 10) == keywords


def test_tfidf_sft_targets_need_no_generator_and_feed_the_query_targets(tmp_path):
    task = make_task(tmp_path, "sft_item", item_budget=2, query_budget=3, item_sft_targets="tfidf")
    silent = Scripted({})
    task.bind("item", {"query": silent})
    items = {e.uid: e.completion for e in task.sft_examples()}
    assert items["item:i1"] == "bed, sofa" and len(items) == len(ITEMS)
    task.bind("query", {"item": silent})
    queries = {e.uid: e.completion for e in task.sft_examples()}
    # q2's relevant items i3 {desk, lamp} and i4 {arc, floor} (first M = 2 each): 4 words, each in one set
    assert queries["query:q2"] == "desk, lamp, arc" and silent.calls == 0
    with pytest.raises(ConfigError, match="valid: base_model, tfidf"):
        make_task(tmp_path, "x", item_sft_targets="bm25")


def test_shared_generator_serves_both_sides_and_needs_a_side(tmp_path):
    roles = {"shared": {"init_from": None}}
    task = make_task(tmp_path, "base", roles, shared_generator=True)
    assert task.roles == ("shared",)
    both = Scripted({**QUERY_ANSWERS, **ITEM_ANSWERS})
    assert task.evaluate({"shared": both}, "validation")["metrics"]["f1"] == 1.0
    with pytest.raises(ValueError, match="task.side"):
        task.bind("shared", {})
    sft = make_task(tmp_path, "sft", roles, shared_generator=True, side="both")
    sft.bind("shared", {})
    uids = [e.uid for e in sft.sft_examples()]
    assert sum(u.startswith("query:") for u in uids) == 3 and sum(u.startswith("item:") for u in uids) == 6


def test_cogr_star_refuses_to_train_over_the_base_item_index(tmp_path):
    task = make_task(tmp_path, "query_r1", require_item_init=True)
    with pytest.raises(ValueError, match="roles.item.init_from"):
        task.bind("query", {"item": Scripted({})})


def test_monitor_probes_the_trained_side(tmp_path):
    task = make_task(tmp_path, "query_r1")
    task.bind("query", {"item": Scripted(ITEM_ANSWERS)})
    task.train_examples()
    probe = task.monitor({"query": Scripted(QUERY_ANSWERS), "item": Scripted({})})
    assert set(probe) == {"probe_f1"} and 0.0 <= probe["probe_f1"] <= 1.0


def test_score_is_a_tensor_per_completion(tmp_path):
    task = make_task(tmp_path, "query_r1")
    task.bind("query", {"item": Scripted(ITEM_ANSWERS)})
    examples = task.train_examples()
    scores = task.score(examples, ["sofa"] * len(examples))
    assert isinstance(scores.rewards, torch.Tensor) and scores.rewards.shape == (len(examples),)
    with pytest.raises(ValueError, match="one each"):
        task.score(examples, ["x"])


def test_missing_wands_products_stop_with_the_fetch_command(tmp_path, data_dir):
    (tmp_path / "wands").mkdir()
    shutil.copy(data_dir / "wands" / "query.csv", tmp_path / "wands")
    task = CoGRTask("wands", tmp_path)  # the catalog loads on first use
    with pytest.raises(MissingDataError) as err:
        task.evaluate({}, "validation")
    assert "python -m rankrl.data.prepare --only wands" in str(err.value)


def test_the_co_evolution_figure_draws_what_the_evaluation_reports(tmp_path):
    """experiments/cogr/figures.yaml's `rounds:` name CoGR's pipelines and metrics its evaluation writes."""
    from rankrl.report.rounds import load_rounds, panel_metrics

    rounds = load_rounds(REPO_ROOT / "experiments" / "cogr" / "figures.yaml")
    assert [r["pipeline"] for r in rounds] == ["cogr/cogr_dlpools", "cogr/cogr_wands"]
    # each is the run folder of experiment cogr/cogr on one catalog (the benchmark axis)
    from rankrl.pipeline import compose

    names = [
        compose(["experiment=cogr/cogr", f"benchmark={b}"]).experiment_name for b in ("dl-pools-cpu", "wands")
    ]
    assert names == [r["pipeline"] for r in rounds]
    gens = {"query": Scripted(QUERY_ANSWERS), "item": Scripted(ITEM_ANSWERS)}
    metrics = make_task(tmp_path, "base").evaluate(gens, "validation")["metrics"]
    assert all(set(panel_metrics(r["panels"])) <= set(metrics) for r in rounds)


# ---- the whole pipeline with the tiny model ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a whole reproduce script on the tiny model: minutes
def test_tiny_pipeline_alternates_two_rounds_hands_indexes_over_and_reports(tmp_path, model_dir):
    """cogr/cogr on a 6-query dl-pools-cpu catalog with the tiny model (1 step per stage), then CoGR* from
    its SFT stages, then the tables and the co-evolution figure (about 3 minutes on 2 busy cores)."""
    import subprocess
    import sys

    import pandas as pd

    common = [
        "model=tiny",
        "logger=none",
        f"paths.log_dir={tmp_path}",
        f"task.cache_dir={tmp_path / 'cache'}",
        "benchmark.options.max_queries=6",
        "benchmark.options.passages_per_query=3",
        "benchmark.options.num_validation=2",
        "trainer.max_steps=1",
        "trainer.sampling.max_new_tokens=8",
        "evaluation.sampling.max_new_tokens=8",
    ]

    def pipeline(experiment: str, *extra: str) -> Path:
        out = subprocess.run(
            [sys.executable, "-m", "rankrl.pipeline", f"experiment={experiment}", *common, *extra],
            capture_output=True,
            text=True,
            check=False,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return Path(out.stdout.strip().splitlines()[-1].removeprefix("pipeline finished: "))

    # the CPU scale's 3 rounds add nothing here
    root = pipeline("cogr/cogr", "benchmark=dl-pools-cpu", "schedule.rounds=2")
    assert root == tmp_path / "cogr/cogr_dlpools/cpu-tiny/seed0"
    order = ["base", "sft_query", "sft_item", "query_r1", "item_r1", "query_r2", "item_r2", "eval"]
    records = {s: json.loads((root / s / "metrics.json").read_text()) for s in order}
    latest: dict[str, str] = {}
    for stage in order:
        record = records[stage]
        assert record["experiment"] == f"cogr/cogr_dlpools/{stage}" and 0.0 <= record["metrics"]["f1"] <= 1.0
        for role, info in record["roles"].items():
            start = info.get("weights_start", info.get("weights"))
            assert start == latest.setdefault(role, start), (
                stage,
                role,
            )  # every role meets its newest weights
            if record.get("train_role") not in (None, role):
                assert info["weights_end"] == start, (stage, role)  # the frozen side is untouched
        if record.get("train_role"):
            latest[record["train_role"]] = record["roles"][record["train_role"]]["weights_end"]
    assert (
        records["sft_query"]["roles"]["query"]["weights_end"] != records["base"]["roles"]["query"]["weights"]
    )
    assert records["sft_item"]["roles"]["item"]["weights_end"] != records["base"]["roles"]["item"]["weights"]

    def keywords(stage: str, side: str) -> dict:
        return json.loads((root / stage / cogr.KEYWORD_FILES[side]).read_text())

    # each stage searches the index its frozen side's last stage wrote, without regenerating it
    for stage, frozen_from, side in [
        ("query_r1", "sft_item", "item"),
        ("item_r1", "query_r1", "query"),
        ("query_r2", "item_r1", "item"),
        ("item_r2", "query_r2", "query"),
    ]:
        assert keywords(stage, side)["keywords"] == keywords(frozen_from, side)["keywords"], stage
        assert records[stage]["cost"][f"{side}_generations"] == 0, stage
        assert keywords(frozen_from, side)["meta"]["source"] == cogr.TRAINED
    assert records["eval"]["metrics"] == records["item_r2"]["metrics"]  # the same sets, read back

    star = pipeline(
        "cogr/cogr_star",
        "benchmark=dl-pools-cpu",
        "schedule.rounds=1",
        f"roles.query.init_from={root / 'sft_query'}",
        f"roles.item.init_from={root / 'sft_item'}",
    )
    star_eval = json.loads((star / "eval" / "metrics.json").read_text())
    assert star_eval["roles"]["item"]["weights"] == records["sft_item"]["roles"]["item"]["weights_end"]
    assert (
        keywords("sft_item", "item")["keywords"]
        == json.loads((star / "eval" / "item_keywords.json").read_text())["keywords"]
    )

    report = tmp_path / "report"
    out = subprocess.run(
        [sys.executable, "-m", "rankrl.report", "paper=cogr", f"runs_dir={tmp_path}", f"out_dir={report}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    table = pd.read_csv(report / "retrieval.csv")
    ours = table[(table.source == "ours") & (table.scale == "cpu")].set_index("method")
    for method, stage in [
        ("SFT only", "sft_item"),
        ("CoGR", "eval"),
        ("Base model keywords (zero-shot)", "base"),
    ]:
        assert float(ours.loc[method, "dl-pools-cpu"]) == pytest.approx(
            records[stage]["metrics"]["f1"], abs=1e-4
        )
    assert ours.loc["CoGR", "wands"] == "missing"
    # the co-evolution figure draws the two rounds run here; the GRPO curve figures name the CPU schedule's
    # three rounds (experiments/cogr/figures.yaml) and are skipped, with a warning, when one is missing
    assert (report / "rounds_cogr_dlpools_cpu-tiny.png").exists()
    assert not (report / "cogr_query_side_rounds.png").exists()
    frame = pd.read_csv(report / "rounds_cogr_dlpools_cpu-tiny.csv")  # the co-evolution figure's data
    assert list(frame["stage"]) == order


def test_bench_compares_methods_on_identical_values():
    """The benchmark on a small catalog: structure and exact agreement only, never timings."""
    from rankrl.benchmarks import cogr_item_reward as bench_cogr

    shape = bench_cogr.CatalogShape(items=600, queries=20, classes=30, relevant=20)
    result = bench_cogr.run_benchmark(shape, incremental=40, brute=8, rebuild=2)
    assert result["identical"] and result["checked_items"] == {"brute_force": 8, "rebuild": 2}
    assert result["per_item"]["incremental"]["n"] == 40 and result["speedup_vs_brute_force"] > 0
    assert "speed-up vs brute force" in bench_cogr.format_report(result)
