"""GRAPE's positive control (#41; rankrl/tasks/grape.py ``construction=filler``): the noisy queries it shows,
the raw-query floor they set under a real MiniLM, the gold SFT target that deletes the filler, and the rank
reward that prefers it. The paper rows (``construction=paper``) see the benchmark's queries unchanged."""

from __future__ import annotations

import pytest

from rankrl.data.records import Benchmark, Document
from rankrl.tasks.grape import GrapeTask, RawQueryTask, parse_rewrite, with_filler
from tests.tasks.test_grape import QUERIES, text_benchmark

FILLER = ["banana", "saxophone", "volcano", "penguin"]
# passages about the filler words: a noisy query's vector drifts towards them, above its relevant passages
DISTRACTORS = {
    "banana": "Bananas are a sweet yellow fruit rich in potassium.",
    "saxophone": "The saxophone is a brass woodwind instrument used in jazz.",
    "volcano": "A volcano erupts when magma rises through the crust.",
    "penguin": "Penguins are flightless birds that live in Antarctica.",
}


def filler_benchmark() -> Benchmark:
    """The toy passages of tests/tasks/test_grape.py plus one passage about each filler word."""
    bench = text_benchmark()
    corpus = {**bench.corpus, **{d: Document(d, t) for d, t in DISTRACTORS.items()}}
    return Benchmark(bench.name, bench.queries, corpus, bench.qrels, bench.splits, relevance_level=2)


def test_filler_inserts_every_word_once_and_keeps_the_query_in_order() -> None:
    query = "how long do fleas live"
    noisy = with_filler(query, FILLER, "q2")
    words = noisy.split()
    assert sorted(w for w in words if w in FILLER) == sorted(FILLER)
    assert [w for w in words if w not in FILLER] == query.split()
    assert with_filler(query, FILLER, "q2") == noisy  # fixed by the query id alone
    positions = {
        tuple(i for i, w in enumerate(with_filler(query, FILLER, f"q{k}").split()) if w in FILLER)
        for k in range(20)
    }
    assert len(positions) > 5  # the positions vary between queries, so no fixed slot marks the filler


@pytest.fixture(scope="module")
def minilm():
    from rankrl.retrieval.dense import DenseRetriever

    return DenseRetriever()


def control(minilm, task_class: type = GrapeTask, **kwargs):
    """The control's task (the filler construction) over the toy benchmark; task_class=RawQueryTask builds
    its reference rows."""
    return task_class(
        filler_benchmark(),
        retriever=minilm,
        query_kind="passage",
        gold="all",
        construction="filler",
        filler_words=FILLER,
        **kwargs,
    )


def test_paper_construction_shows_the_queries_unchanged(minilm) -> None:
    task = GrapeTask(text_benchmark(), retriever=minilm, query_kind="passage")
    assert [q.text for q in task.train_gallery().queries] == [QUERIES[q][0] for q in ("q1", "q2", "q3", "q4")]


def test_filler_queries_reach_the_prompt_and_the_raw_query_row_for_every_seed(minilm) -> None:
    by_seed = [control(minilm, seed=s) for s in (0, 1)]
    texts = [[q.text for q in t.gallery("toy-passages", "test").queries] for t in by_seed]
    assert texts[0] == texts[1]  # the held-out queries do not depend on the run's seed
    for q, text in zip(by_seed[0].gallery("toy-passages", "test").queries, texts[0]):
        assert (
            text == with_filler(QUERIES[q.qid][0], FILLER, q.qid)
            and q.extra["clean_text"] == QUERIES[q.qid][0]
        )
    user = by_seed[0].train_examples()[1].messages[1]["content"]
    assert with_filler("how long do fleas live", FILLER, "q2") in user


def test_the_filler_hurts_the_frozen_retriever_and_deleting_it_restores_the_clean_query(minilm) -> None:
    clean = RawQueryTask(filler_benchmark(), retriever=minilm, query_kind="passage", gold="all")
    noisy = control(minilm, RawQueryTask)
    floor, ceiling = noisy.evaluate({}, "test")["metrics"], clean.evaluate({}, "test")["metrics"]
    # the noise the rewriter must remove: the relevant passages fall below the filler's passages
    assert floor["gold_rank"] > ceiling["gold_rank"] and floor["R@1"] < ceiling["R@1"]
    assert floor["gold_similarity"] < ceiling["gold_similarity"] - 0.05
    task = control(minilm, sft_target="gold")
    gold = task.sft_examples()
    for example, q in zip(gold, task.train_gallery().queries):
        assert parse_rewrite(example.completion).text == q.extra["clean_text"]  # the filler deleted
    # the rank reward prefers the gold rewrite to a copy of the noisy query: never lower, and higher for the
    # training queries whose relevant passage the filler pushed down (3 of 4; the flea passage stays first)
    examples = task.train_examples()
    copies = [f"<think>t</think><rewrite>{q.text}</rewrite>" for q in task.train_gallery().queries]
    cleans = task.score(examples, [e.completion for e in gold]).rewards
    noisy_copies = task.score(examples, copies).rewards
    assert (cleans >= noisy_copies).all() and (cleans > noisy_copies).sum() == 3


def test_the_format_warm_start_copies_the_query_shown(minilm) -> None:
    task = control(minilm, warm_start_drop=0.0)
    for example, q in zip(task.sft_examples(), task.train_gallery().queries):
        assert parse_rewrite(example.completion).text == q.text != q.extra["clean_text"]


def test_bad_control_settings_name_the_fix(minilm) -> None:
    with pytest.raises(ValueError, match="task.construction=filler"):
        GrapeTask(text_benchmark(), retriever=minilm, sft_target="gold")
    with pytest.raises(ValueError, match="paper, filler"):
        GrapeTask(text_benchmark(), retriever=minilm, construction="noisy")
    with pytest.raises(ValueError, match="format, gold"):
        GrapeTask(text_benchmark(), retriever=minilm, sft_target="clean")
    with pytest.raises(ValueError, match="task.filler_words"):
        GrapeTask(text_benchmark(), retriever=minilm, construction="filler", filler_words=[" "])
