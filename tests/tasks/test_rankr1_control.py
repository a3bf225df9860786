"""Rank-R1's positive control: prompts whose negatives come from OTHER queries' pools, read out by accuracy.

The control (``construction=other_queries``, ``eval_protocol=prompts``) keeps the prompt, reward, parser and
loop of Rank-R1 and changes only where the negatives come from. These tests pin what makes it a control: one
gold label per prompt, pointing at the on-topic passage in the order shown, no negative from the query's own
pool, and SFT tokens that teach exactly that label.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from rankrl.rollout.base import Generation
from rankrl.tasks.rankr1 import (
    RankR1Task,
    parse_answer,
    rank_r1_reward,
    setwise_training_examples,
    sft_completion,
)
from tests.tasks.test_rankr1 import load_dl

SMOLLM2 = Path(__file__).resolve().parents[2] / ".cache" / "models" / "smollm2-135m"


@pytest.fixture(scope="module")
def dl19():
    return load_dl("dl19")


@pytest.fixture(scope="module")
def dl20():
    return load_dl("dl20")


def shown_passages(example) -> list[str]:
    return re.findall(r"^\[\d+\] (.*)$", example.messages[1]["content"], re.MULTILINE)


def test_other_queries_prompts_have_one_gold_label_on_the_on_topic_passage(dl20):
    examples = setwise_training_examples(dl20, "other_queries", num_candidates=5, seed=1)
    assert examples == setwise_training_examples(dl20, "other_queries", num_candidates=5, seed=1)
    assert examples != setwise_training_examples(dl20, "other_queries", num_candidates=5, seed=2)
    pools = {q: list(dl20.runs["bm25"][q])[:100] for q in dl20.qrels}
    # the same positives as the paper-task prompts: one prompt per passage judged >= 2 in the query's pool
    judged = setwise_training_examples(dl20, "judged_pool", num_candidates=5, seed=1)
    assert sorted(e.uid for e in examples) == sorted(e.uid for e in judged)
    for e in examples:
        _, qid, positive = e.uid.split(":")
        docids, gold = e.target["docids"], e.target["gold"]
        assert len(docids) == len(set(docids)) == e.target["num_candidates"] == 5
        assert docids[gold] == positive and dl20.qrels[qid][positive] >= 2  # the label is the positive
        negatives = [d for i, d in enumerate(docids) if i != gold]
        for d in negatives:  # off topic: never the query's own pool, never judged for it, another query's
            assert d not in pools[qid] and d not in dl20.qrels[qid]
            assert any(d in pool for q, pool in pools.items() if q != qid)
        # the shown order is the docids' order, so label gold + 1 shows the positive
        assert shown_passages(e) == [dl20.corpus[d].text for d in docids]
        assert shown_passages(e)[gold] == dl20.corpus[positive].text
        assert rank_r1_reward(f"<think>x</think><answer>[{gold + 1}]</answer>", gold) == 1.0
        wrong = (gold + 1) % 5
        assert rank_r1_reward(f"<think>x</think><answer>[{wrong + 1}]</answer>", gold) == 0.0
    counts = Counter(e.target["gold"] for e in examples)
    assert set(counts) == set(range(5)) and max(counts.values()) < 0.3 * len(examples)  # no position bias


def test_gold_sft_tokens_teach_the_label_of_the_shown_positive(dl20):
    """Rendered with SmolLM2's chat template, as SFTStep trains: the prompt shows the positive at the
    label the completion tokens name, and the completion is all the loss sees."""
    from transformers import AutoTokenizer

    from rankrl.rl.steps import sft_token_ids
    from rankrl.rl.task import SFTExample

    tokenizer = AutoTokenizer.from_pretrained(str(SMOLLM2))
    task = RankR1Task(
        dl20, "dl19", construction="other_queries", tokenizer=tokenizer, num_candidates=5,
        passage_max_tokens=32, reasoning=True, sft_target="gold",
    )  # fmt: skip
    examples = task.train_examples()
    sft = task.sft_examples()
    assert [s.uid for s in sft] == [e.uid for e in examples]
    for ex, pair in list(zip(examples, sft))[:: max(1, len(sft) // 40)]:
        prompt_ids, completion_ids = sft_token_ids(
            tokenizer, SFTExample(pair.uid, pair.messages, pair.completion)
        )
        prompt, completion = tokenizer.decode(prompt_ids), tokenizer.decode(completion_ids)
        label = parse_answer(completion, 5, reasoning=True)
        assert label == ex.target["gold"] and completion.endswith(tokenizer.eos_token)
        assert (
            prompt.endswith("<|im_start|>assistant\n") and "</answer>" not in prompt.split("assistant\n")[-1]
        )
        positive = task._passage(dl20, ex.uid.split(":")[2])
        assert f"[{label + 1}] {positive}\n" in prompt  # the labelled line of the prompt is the positive
        assert ex.messages[1]["content"].split('"')[1] in prompt  # the whole query, not cut away
    assert sft_completion(examples[0], "gold", True).endswith(
        f"<answer>[{examples[0].target['gold'] + 1}]</answer>"
    )


def reading_generator(bench):
    """A fake LLM that answers the label of the passage judged relevant to the prompt's query."""
    by_text = {doc.text: doc.docid for doc in bench.corpus.values()}
    query_of = {q.text: q.qid for q in bench.queries.values()}

    def generate(prompts):
        out = []
        for p in prompts:
            qid = query_of[re.match(r'Given the query: "(.*)", which', p[1]["content"]).group(1)]
            shown = [by_text[t] for t in re.findall(r"^\[\d+\] (.*)$", p[1]["content"], re.MULTILINE)]
            best = max(range(len(shown)), key=lambda i: bench.qrels[qid].get(shown[i], 0))
            out.append(Generation(f"<think>read</think><answer>[{best + 1}]</answer>", 300, 10))
        return out

    return generate


def test_prompt_accuracy_evaluates_held_out_prompts(dl19, dl20):
    task = RankR1Task(
        dl20, dl19, construction="other_queries", num_candidates=5, eval_protocol="prompts", seed=3
    )
    out = task.evaluate({"policy": reading_generator(dl19)}, "test")
    metrics, per_query = out["metrics"], out["per_query"]
    held_out = setwise_training_examples(dl19, "other_queries", num_candidates=5, seed=0)  # any seed: seed 0
    assert metrics["prompts"] == len(held_out) == per_query["prompts"].sum() == out["cost"]["llm_prompts"]
    assert metrics["accuracy"] == metrics["reward"] == 1.0 and metrics["format_error_rate"] == 0.0
    assert set(per_query.index) == {e.uid.split(":")[1] for e in held_out} <= set(dl19.splits["test"])
    assert out["cost"]["queries_total"] == len(dl19.splits["test"])
    # a judge that does not read scores the share of prompts whose gold sits at its label
    always_one = task.evaluate(
        {"policy": lambda ps: [Generation("<think></think><answer>[1]</answer>")] * len(ps)}, "test"
    )
    share = sum(e.target["gold"] == 0 for e in held_out) / len(held_out)
    assert always_one["metrics"]["accuracy"] == pytest.approx(share) and 0.1 < share < 0.3
    assert always_one["metrics"]["modal_answer_share"] == 1.0
    limited = task.evaluate({"policy": reading_generator(dl19)}, "test", limit=3)
    assert len(limited["per_query"]) <= 3 and limited["cost"]["queries_total"] == len(dl19.splits["test"])
    capped = RankR1Task(
        dl20, dl19, construction="other_queries", num_candidates=5, eval_protocol="prompts",
        eval_prompts_per_query=2,
    ).evaluate({"policy": reading_generator(dl19)}, "test")  # fmt: skip
    assert capped["per_query"]["prompts"].max() == 2 and capped["metrics"]["prompts"] < metrics["prompts"]
    first_two = Counter()
    for e in held_out:  # each query's first two positives in first-stage order
        first_two[e.uid.split(":")[1]] += first_two[e.uid.split(":")[1]] < 2
    assert capped["metrics"]["prompts"] == sum(first_two.values())
    # the monitor reads the same accuracy on the first training queries' prompts
    probe = task.monitor({"policy": reading_generator(dl20)})
    assert probe["accuracy"] == 1.0 and 0 < probe["prompts"] < len(task.train_examples())


def test_unknown_eval_protocol_is_rejected():
    with pytest.raises(ValueError, match=r"valid: \('heapsort', 'prompts'\)"):
        RankR1Task("dl20", "dl19", construction="other_queries", eval_protocol="accuracy")


def test_query_echo_shows_the_query_as_the_gold_candidate(dl20):
    echo = setwise_training_examples(dl20, "query_echo", num_candidates=5, seed=1)
    other = setwise_training_examples(dl20, "other_queries", num_candidates=5, seed=1)
    assert [e.target for e in echo] == [e.target for e in other]  # same candidates and order
    for e, o in zip(echo, other):
        qid, gold = e.uid.split(":")[1], e.target["gold"]
        shown, shown_other = shown_passages(e), shown_passages(o)
        assert shown[gold] == dl20.queries[qid].text  # the gold candidate is the query's own text
        assert [t for i, t in enumerate(shown) if i != gold] == [
            t for i, t in enumerate(shown_other) if i != gold
        ]
        assert parse_answer(sft_completion(e, "gold", True), 5, True) == gold
