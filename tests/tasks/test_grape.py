"""GRAPE (rankrl/tasks/grape.py): parsing, rewards, the advantage invariance of the paper's appendix, the
task's reward and score-inflation probe over a real text retriever, and the image path: open_clip with
random weights over real photographs (scikit-image's), a faiss index, rank_of and the on-disk cache."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from rankrl.data.records import Benchmark, Document, Query
from rankrl.rl.advantages import grpo_advantages
from rankrl.rollout.base import Generation
from rankrl.tasks.grape import (
    FORMAT_PENALTY,
    GrapeTask,
    RawQueryTask,
    format_reward,
    parse_rewrite,
    rank_reward,
    rewrite_messages,
    top_words,
    warm_start_completion,
)

# ---- parsing -----------------------------------------------------------------------------------------------


def test_parse_a_well_formed_completion_and_its_span() -> None:
    text = "  <think>the boy and the kite</think>\n<rewrite>  a boy flying a kite on a beach </rewrite>"
    parsed = parse_rewrite(text)
    assert parsed.ok and parsed.text == "a boy flying a kite on a beach"
    assert text[parsed.span[0] : parsed.span[1]] == parsed.text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a boy flying a kite",  # no tags at all
        "<rewrite>a kite</rewrite>",  # no reasoning
        "Sure! <think>x</think><rewrite>a kite</rewrite>",  # must open with <think>
        "<think>x<rewrite>a kite</rewrite>",  # reasoning never closed
        "<think>x</think> a kite",  # no rewrite tag
        "<think>x</think><rewrite>a kite on the beach",  # cut off by the token budget
        "<think>x</think><rewrite>   \n </rewrite>",  # empty rewrite
        "<think>x</think></rewrite><rewrite>",  # tags in the wrong order
        None,
        12,
    ],
)
def test_malformed_completions_do_not_parse(text) -> None:
    assert not parse_rewrite(text).ok and parse_rewrite(text).span is None


def test_the_warm_start_target_parses_back_to_the_query() -> None:
    parsed = parse_rewrite(warm_start_completion("do goldfish grow"))
    assert parsed.text == "do goldfish grow"


def test_the_warm_start_with_word_dropout_keeps_a_seeded_ordered_subset() -> None:
    query = "what is the daily life of thai people in the north"
    words = query.split()
    texts = {parse_rewrite(warm_start_completion(query, drop=0.3, seed=s)).text for s in range(20)}
    assert len(texts) > 1  # spread across seeds: what a GRPO group needs
    for text in texts:
        kept = text.split()
        assert 1 <= len(kept) < len(words)
        it = iter(words)
        assert all(w in it for w in kept)  # an ordered subsequence of the query
    assert warm_start_completion(query, drop=0.3, seed=3) == warm_start_completion(query, drop=0.3, seed=3)
    assert parse_rewrite(warm_start_completion("goldfish", drop=0.9)).text == "goldfish"  # one word is kept
    assert parse_rewrite(warm_start_completion(query, drop=0.0)).text == query


def test_parsing_is_linear_on_adversarial_completions() -> None:
    slow = []
    for n in (20_000, 200_000):
        texts = [
            "<think>" + "</think><rewrite>" * n,
            "<think>" + "<think></think>" * n + "<rewrite>" * n,
            " " * n + "<think>" + "x" * n,
        ]
        start = time.perf_counter()
        for text in texts:
            assert not parse_rewrite(text).ok
        slow.append(time.perf_counter() - start)
    assert slow[1] < 0.5  # megabytes of tags in well under a second (a backtracking regex would not finish)


# ---- rewards -----------------------------------------------------------------------------------------------


def test_rank_reward_is_plus_one_first_minus_one_last_linear_between() -> None:
    assert rank_reward(1, 1000) == 1.0 and rank_reward(1000, 1000) == -1.0
    np.testing.assert_allclose(rank_reward([1, 2, 3, 4, 5], 5), [1.0, 0.5, 0.0, -0.5, -1.0])
    assert rank_reward(1, 1) == 1.0  # a corpus of one item
    for bad in [(0, 5), (6, 5), (1, 0)]:
        with pytest.raises(ValueError):
            rank_reward(*bad)


def test_format_penalty_is_below_every_well_formed_reward() -> None:
    assert format_reward([True, False]).tolist() == [0.0, FORMAT_PENALTY]
    assert FORMAT_PENALTY < -1.0  # the worst rank reward and the lowest cosine


@pytest.mark.parametrize("seed", range(20))
def test_group_advantages_are_the_same_under_any_increasing_linear_map_of_rank(seed: int) -> None:
    """The paper's appendix: GRPO standardises each group, so r -> a r + b (a > 0) leaves the advantages
    unchanged; every reward linear in rank that prefers better ranks gives the rank reward's advantages.

    Exact with eps -> 0; with TRL's eps = 1e-4 added to the std the equality holds only where the reward's
    spread dwarfs eps (the rank reward over N items moves 2/(N-1) per place)."""
    rng = np.random.default_rng(seed)
    n, group = int(rng.integers(2, 5000)), int(rng.integers(2, 9))
    ranks = rng.integers(1, min(n, 40) + 1, size=(6, group))  # small ranks: ties inside groups are common
    ranks[0] = ranks[0, 0]  # one group where every rewrite ranks the same: no signal at all
    base = torch.tensor(rank_reward(ranks, n).ravel())
    a, b = float(rng.uniform(0.01, 100)), float(rng.uniform(-50, 50))
    for mapped in (
        a * base + b,
        torch.tensor(-ranks.ravel(), dtype=torch.float64),  # -rank: also increasing
        torch.tensor(n - ranks.ravel(), dtype=torch.float64) * a,
    ):
        expected = grpo_advantages(base, group, eps=1e-12)
        torch.testing.assert_close(grpo_advantages(mapped, group, eps=1e-12), expected, rtol=1e-6, atol=1e-6)
    assert torch.all(grpo_advantages(base, group, eps=1e-12)[:group] == 0)


# ---- the task over a real text retriever (MiniLM) ----------------------------------------------------


PASSAGES = {
    "bread": "How to bake sourdough bread at home with a starter.",
    "brakes": "Replacing the brake pads on a family car takes an hour.",
    "flea": "A flea can live up to a year depending on its host.",
    "tax": "Filing an income tax return before the April deadline.",
    "rain": "Heavy rainfall is expected across the coast tomorrow.",
    "piano": "Beginner exercises for learning the piano.",
    "tides": "Tides are caused by the gravity of the moon.",
    "wifi": "Wi-Fi and Bluetooth are both wireless, but Wi-Fi reaches farther.",
}
QUERIES = {  # qid: (text, split, relevant passages)
    "q1": ("homemade bread with natural yeast", "train", ["bread"]),
    "q2": ("how long do fleas live", "train", ["flea"]),
    "q3": ("when are taxes due", "train", ["tax"]),
    "q4": ("storm forecast for the sea side", "train", ["rain", "tides"]),
    "q5": ("what makes the ocean rise and fall", "test", ["tides"]),
    "q6": ("wifi vs bluetooth", "test", ["wifi"]),
    "q7": ("learn to play keyboard", "test", ["piano"]),
}


def text_benchmark() -> Benchmark:
    queries = {q: Query(q, text) for q, (text, _, _) in QUERIES.items()}
    qrels = {q: {d: 2 for d in rel} for q, (_, _, rel) in QUERIES.items()}
    splits = {s: [q for q, (_, split, _) in QUERIES.items() if split == s] for s in ("train", "test")}
    corpus = {d: Document(d, text) for d, text in PASSAGES.items()}
    return Benchmark("toy-passages", queries, corpus, qrels, splits, relevance_level=2)


@pytest.fixture(scope="module")
def minilm():
    from rankrl.retrieval.dense import DenseRetriever

    return DenseRetriever()


def scripted(answer) -> callable:
    """A generator that answers each prompt with ``answer(query text)``."""

    def generate(prompts: Sequence[list[dict[str, str]]]) -> list[Generation]:
        return [Generation(answer(p[-1]["content"].rsplit("Query: ", 1)[-1]), 10, 5) for p in prompts]

    return generate


def test_score_rewards_rank_and_penalises_malformed_rewrites(minilm) -> None:
    task = GrapeTask(text_benchmark(), retriever=minilm, query_kind="passage", probe_size=3)
    examples = task.train_examples()
    assert [e.uid for e in examples] == [f"toy-passages:q{i}" for i in (1, 2, 3, 4)]
    system, user = examples[0].messages
    assert "<rewrite>" in system["content"] and "Query: homemade" in user["content"]
    rows = [examples[1]] * 4  # one group: "how long do fleas live"
    completions = [
        "<think>t</think><rewrite>flea lifespan host</rewrite>",
        "<think>t</think><rewrite>piano lessons for beginners</rewrite>",
        "flea lifespan",  # no format
        "<think>t</think><rewrite> </rewrite>",
    ]  # empty rewrite
    scores = task.score(rows, completions)
    assert scores.format_ok.tolist() == [True, True, False, False]
    assert scores.rewards[2] == scores.rewards[3] == FORMAT_PENALTY
    assert scores.rewards[0] == 1.0  # the flea passage ranks first of 8
    assert -1.0 <= scores.rewards[1] < scores.rewards[0]
    assert scores.metrics["format_error_rate"] == 0.5
    sim = GrapeTask(text_benchmark(), retriever=minilm, query_kind="passage", reward="similarity")
    sim_scores = sim.score(rows, completions)
    rewrites = minilm.encode(["flea lifespan host", "piano lessons for beginners"])
    expected = rewrites @ minilm.encode([PASSAGES["flea"]])[0]  # the cosine with the gold passage
    np.testing.assert_allclose(sim_scores.rewards[:2].numpy(), expected, atol=1e-5)
    assert sim_scores.rewards[2] == FORMAT_PENALTY


def test_several_relevant_passages_use_the_best_ranked_one(minilm) -> None:
    task = GrapeTask(text_benchmark(), retriever=minilm, query_kind="passage")
    examples = task.train_examples()
    storm = examples[3]  # q4: relevant "rain" and "tides"
    scores = task.score([storm], ["<think>t</think><rewrite>gravity of the moon and tides</rewrite>"])
    assert scores.rewards[0] == 1.0  # "tides" ranks first, so the gold is first


def test_gold_all_averages_the_rank_reward_over_every_relevant_passage(minilm) -> None:
    task = GrapeTask(text_benchmark(), retriever=minilm, query_kind="passage", gold="all")
    storm = task.train_examples()[3]  # q4: relevant "rain" and "tides"
    rewrite = "gravity of the moon and tides"
    scores = task.score([storm], [f"<think>t</think><rewrite>{rewrite}</rewrite>"])
    ranks = task.train_gallery().index.rank_of(minilm.encode([rewrite, rewrite]), ["rain", "tides"])
    assert ranks.min() == 1 and ranks.max() > 1
    assert scores.rewards[0].item() == pytest.approx(rank_reward(ranks, len(PASSAGES)).mean())
    assert scores.metrics["gold_rank"] == pytest.approx(ranks.mean())
    with pytest.raises(ValueError, match="best, all"):
        GrapeTask(text_benchmark(), retriever=minilm, gold="first")


def test_monitor_and_evaluation_report_numbers_and_words(minilm) -> None:
    task = GrapeTask(text_benchmark(), retriever=minilm, query_kind="passage", probe_size=3)
    task.bind("policy", {})
    good = scripted(lambda q: f"<think>x</think><rewrite>{q} atmosphere and mood</rewrite>")
    probe = task.monitor({"policy": good})
    numbers = {k: v for k, v in probe.items() if k != "top_words"}
    assert set(numbers) >= {
        "R@1",
        "R@10",
        "gold_rank",
        "gold_similarity",
        "corpus_similarity",
        "gold_margin",
        "rewrite_words",
        "format_error_rate",
    }
    assert all(isinstance(v, float) for v in numbers.values())
    assert "atmosphere:3" in probe["top_words"] and "mood:3" in probe["top_words"]
    assert probe["format_error_rate"] == 0.0 and probe["R@10"] == 1.0  # 8 passages: all are in the top 10
    broken = task.evaluate({"policy": scripted(lambda q: "no tags")}, "test")
    cut = task.evaluate({"policy": scripted(lambda q: "no tags")}, "test", limit=2)["cost"]
    assert (cut["queries"], cut["queries_total"], cut["llm_prompts"]) == (2, 3, 2)
    raw = RawQueryTask(text_benchmark(), retriever=minilm, query_kind="passage").evaluate({}, "test")
    assert broken["metrics"]["format_error_rate"] == 1.0
    # an unparsed rewrite falls back to the raw query: the same retrieval as the raw-query baseline
    for key in ("R@1", "gold_rank", "gold_similarity"):
        assert broken["metrics"][key] == pytest.approx(raw["metrics"][key])
    assert raw["metrics"]["queries"] == 3.0
    # the per-query values behind the means (per_query.csv), one row per query in the gallery's order
    for out in (broken, raw):
        assert len(out["per_query"]) == 3 and out["per_query"].index.name == "qid"
        for key in ("R@1", "R@10", "gold_rank", "gold_similarity", "rewrite_words"):
            assert out["per_query"][key].mean() == pytest.approx(out["metrics"][key])
    assert broken["rewrites"]["q5"] == "what makes the ocean rise and fall"


def test_prompts_and_warm_start_and_words() -> None:
    compress = rewrite_messages("a very long text", "long_text", compress_words=12)
    assert "about 12 words" in compress[1]["content"]
    composed = rewrite_messages("make it red", "composed", reference="a blue car")
    assert "a blue car" in composed[1]["content"] and "make it red" in composed[1]["content"]
    with pytest.raises(ValueError, match="caption"):
        rewrite_messages("x", "poem")
    assert top_words(["The cat and the Cat", "a dog"], k=2) == "cat:2 dog:1"


def test_a_task_without_a_retriever_says_which_to_choose() -> None:
    with pytest.raises(ValueError, match="retriever=clip-vit-b16"):
        GrapeTask("flickr30k-cn", retriever={"name": "none"})
    with pytest.raises(ValueError, match="retriever=bm25"):  # not a retriever: the builder's choices
        GrapeTask("flickr30k-cn", retriever="clip-vit-b16")


class Unbuilt:
    """A retriever class: GRAPE builds it from the config node on first use, with its cache folder."""

    def __init__(self, docs=None, *, cache_dir=None, width: int = 1) -> None:
        self.cache_dir, self.width = cache_dir, width

    def vector_index(self, docs):
        raise NotImplementedError

    def encode_queries(self, texts):
        raise NotImplementedError


def test_a_retriever_node_is_built_once_on_first_use_with_the_cache_folder(tmp_path) -> None:
    node = {"_target_": f"{__name__}.Unbuilt", "_partial_": True, "name": "label", "width": 3}
    task = GrapeTask(text_benchmark(), retriever=node, cache_dir=str(tmp_path))
    assert task._retriever is None  # nothing loaded before it is needed
    built = task.retriever
    assert isinstance(built, Unbuilt) and (built.cache_dir, built.width) == (str(tmp_path), 3)
    assert task.retriever is built
    ready = Unbuilt()  # an object with vector_index and encode_queries is used as it is
    assert GrapeTask(text_benchmark(), retriever=ready).retriever is ready


# ---- the image path: random-weight CLIP over real photographs ----------------------------------------------

from rankrl.data.smoke import PHOTOS  # noqa: E402  (scikit-image photographs with captions; 5 train, 5 test)


@pytest.fixture(scope="module")
def photo_benchmark(tmp_path_factory) -> Benchmark:
    import skimage.data as skimage_data  # in requirements/cpu.txt: missing fails, never skips
    from PIL import Image

    folder = tmp_path_factory.mktemp("photos")
    corpus, queries, qrels = {}, {}, {}
    for name, (caption, split) in PHOTOS.items():
        path = folder / f"{name}.png"
        Image.fromarray(getattr(skimage_data, name)()).convert("RGB").save(path)
        corpus[name] = Document(name, "", extra={"image_path": str(path), "split": split})
        queries[f"q-{name}"] = Query(f"q-{name}", caption, {"split": split})
        qrels[f"q-{name}"] = {name: 1}
    splits = {s: [q for q, query in queries.items() if query.extra["split"] == s] for s in ("train", "test")}
    return Benchmark("photos", queries, corpus, qrels, splits)


@pytest.fixture(scope="module")
def random_clip_checkpoint(tmp_path_factory):
    """Random ViT-B-32 weights (one of GRAPE's retrievers) saved as a checkpoint file, so the retriever
    takes the path real weights take: a named checkpoint, cached vectors."""
    import open_clip

    torch.manual_seed(0)
    model = open_clip.create_model("ViT-B-32", pretrained=None)
    path = tmp_path_factory.mktemp("clip") / "random-vit-b32.pt"
    torch.save(model.state_dict(), path)
    return path


def test_image_path_random_clip_real_photos_faiss_rank_of(photo_benchmark, random_clip_checkpoint, tmp_path):
    from rankrl.retrieval.clip import ClipRetriever

    clip = ClipRetriever(
        arch="ViT-B-32", pretrained=str(random_clip_checkpoint), batch_size=8, cache_dir=tmp_path
    )
    task = GrapeTask(photo_benchmark, retriever=clip, query_kind="caption", probe_size=2)
    gallery = task.gallery("photos", "test")
    assert sorted(gallery.index.ids) == sorted(n for n, (_, s) in PHOTOS.items() if s == "test")
    assert isinstance(gallery.index.vectors.base, np.memmap)  # encoded once into the cache, memory-mapped
    captions = [q.text for q in gallery.queries]
    vectors = clip.encode_queries(captions)
    ranks = gallery.index.rank_of(vectors, [g[0] for g in gallery.gold])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = unit.astype(np.float64) @ np.asarray(gallery.index.vectors, dtype=np.float64).T  # brute force
    rows = [gallery.index.row[g[0]] for g in gallery.gold]
    assert ranks.tolist() == [int((scores[b] >= scores[b, r]).sum()) for b, r in enumerate(rows)]
    run = gallery.index.search([q.qid for q in gallery.queries], vectors, k=5)  # faiss' flat index
    for b, query in enumerate(gallery.queries):
        assert list(run[query.qid]).index(gallery.gold[b][0]) + 1 == ranks[b]
    # the task's reward on the training gallery, and the raw-query row on the test gallery
    example = task.train_examples()[0]
    caption = example.messages[1]["content"]
    scored = task.score([example, example], [f"<think>x</think><rewrite>{caption}</rewrite>", "no format"])
    assert -1.0 <= scored.rewards[0] <= 1.0 and scored.rewards[1] == FORMAT_PENALTY
    raw = RawQueryTask(photo_benchmark, retriever=clip, query_kind="caption").evaluate({}, "test")
    assert raw["metrics"]["gold_rank"] == pytest.approx(ranks.mean())
    # a second retriever over the same checkpoint reads the cached vectors instead of encoding again
    again = ClipRetriever(arch="ViT-B-32", pretrained=str(random_clip_checkpoint), cache_dir=tmp_path)
    again.encode_images = None  # would fail if called
    index = again.vector_index([photo_benchmark.corpus[i] for i in gallery.index.ids])
    np.testing.assert_array_equal(np.asarray(index.vectors), np.asarray(gallery.index.vectors))


def test_missing_images_and_missing_weights_name_the_fix(photo_benchmark, tmp_path) -> None:
    from rankrl.data.errors import MissingDataError
    from rankrl.retrieval.clip import ClipRetriever, ClipWeightsMissing

    gone = Benchmark(
        "photos",
        photo_benchmark.queries,
        {
            d: Document(d, "", extra={**doc.extra, "image_path": str(tmp_path / "nowhere.png")})
            for d, doc in photo_benchmark.corpus.items()
        },
        photo_benchmark.qrels,
        photo_benchmark.splits,
    )
    clip_node = {"_target_": "rankrl.retrieval.clip.ClipRetriever", "pretrained": "openai"}
    task = GrapeTask(gone, retriever=clip_node)
    with pytest.raises(MissingDataError, match="nowhere.png"):
        task.gallery("photos", "test")  # the images are checked before any weights are loaded
    with pytest.raises(ClipWeightsMissing, match="pretrained='openai'.*create_model_and_transforms"):
        ClipRetriever(arch="ViT-B-16", pretrained="openai", weights_dir=tmp_path / "weights")


# ---- end to end: the CPU-scale reproduction on the tiny model -----------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a whole reproduce script on the tiny model: minutes
def test_cpu_reproduction_end_to_end_on_the_tiny_model(tmp_path, data_dir, model_dir) -> None:
    """experiments/grape/reproduce.sh with the tiny model on a few queries: raw query, zero-shot, both GRAPE
    pipelines (format warm start -> [compression control] -> GRPO), then the tables and the CPU Fig. 5.
    About 3 minutes once the DL corpus is encoded (the first run on a machine encodes it, ~5-8 minutes)."""
    import json
    import os
    import subprocess

    import pandas as pd

    from rankrl.config import REPO_ROOT

    small = (
        "logger=none task.max_train_queries=8 task.probe_size=4 eval_limit=3 trainer.max_steps=2 "
        "trainer.prompts_per_step=2 trainer.group_size=4 trainer.monitor_every=1 "
        "trainer.sampling.max_new_tokens=12 evaluation.sampling.max_new_tokens=12"
    )
    out = tmp_path / "report"
    env = {
        **os.environ,
        "RANKRL_LOG_DIR": str(tmp_path / "runs"),
        "MODELS": "tiny",
        "SEEDS": "2",  # the seed loop and the paired tests, at the smallest count that has them
        "OVERRIDES": small,
        "REPORT_OUT": str(out),
    }
    done = subprocess.run(
        ["bash", "experiments/grape/reproduce.sh"], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    records = {
        json.loads(p.read_text())["experiment"]: json.loads(p.read_text())
        for p in (tmp_path / "runs").rglob("metrics.json")
    }
    stages = {
        "cpu_grape_rank/warmstart",
        "cpu_grape_rank/grape",
        "cpu_grape_sim/warmstart",
        "cpu_grape_sim/compress",
        "cpu_grape_sim/grape",
    }
    assert set(records) == {f"grape/{e}" for e in ("cpu_raw_query", "cpu_zeroshot_rewrite", *stages)}
    for record in records.values():
        assert set(record["metrics"]) >= {"R@1", "R@10", "gold_rank", "gold_similarity"}
        assert record["scale"] == "cpu" and record["eval_limit"] == 3
    log = tmp_path / "runs" / "grape" / "cpu_grape_rank" / "cpu-tiny" / "seed0" / "grape" / "train_log.jsonl"
    rank_log = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in rank_log if "monitor/R@1" in r] == [0, 1, 2]
    assert all(isinstance(r["monitor/top_words"], str) for r in rank_log if "monitor/R@1" in r)
    table = (out / "cpu_text_r1.md").read_text()
    grape_row = next(line for line in table.splitlines() if line.startswith("| GRAPE, rank reward"))
    assert "tiny" in grape_row and "cpu" in grape_row and "missing" not in grape_row
    assert "(n=2)" in grape_row  # both seeds, averaged
    tests = pd.read_csv(out / "comparisons.csv")
    assert set(tests["comparison"]) >= {"rank_vs_similarity_reward", "rank_reward_vs_warmstart"}
    assert (tests["seeds_a"] == 2).all() and (tests["queries"] == 3).all()
    assert "missing" in (out / "image_r1.md").read_text()  # no images here
    assert (out / "grape_fig5_cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    points = pd.read_csv(out / "grape_fig5_cpu.csv")
    assert set(points["run"]) == {"rank reward", "similarity reward"}
    assert {"monitor/gold_similarity", "monitor/R@1"} <= set(points["series"])
