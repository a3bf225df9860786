"""Rank-R1: prompts, parser and reward, Setwise heap sort, truncation, training data, evaluation.

TREC DL files are read with ``json`` here (not through rankrl.data), so these tests only depend on the task.
"""

from __future__ import annotations

import json
import random
import re
import string
import sys
import types
from pathlib import Path

import pytest

from rankrl.data.records import Benchmark, Document, Query
from rankrl.rollout.base import Generation
from rankrl.tasks import rankr1
from rankrl.tasks.rankr1 import (
    ConstantJudgeTask,
    RankR1Task,
    SortCost,
    Verdict,
    format_ok,
    llm_judge,
    modal_share,
    parse_answer,
    rank_r1_reward,
    rerank_setwise,
    setwise_heapsort,
    setwise_messages,
    setwise_training_examples,
    truncate,
)
from tests.conftest import require_data

REPO = Path(__file__).resolve().parents[2]
SMOLLM2 = REPO / ".cache" / "models" / "smollm2-135m"


# ----------------------------------------------------------------------------------------------- helpers


def load_dl(name: str) -> Benchmark:
    """A TREC DL benchmark straight from the prepared files: judged queries, BM25 top-100 with text, qrels.

    The files come from `make data`; a missing one fails the test (tests.conftest.require_data).
    """
    qrels_file, run_file = f"trec_dl/qrels.{name}-passage.txt", f"trec_dl/bm25_retrieve_results_{name}.json"
    data = require_data(qrels_file, run_file)
    qrels: dict[str, dict[str, int]] = {}
    for line in (data / qrels_file).read_text().splitlines():
        qid, _, docid, grade = line.split()
        qrels.setdefault(qid, {})[docid] = int(grade)
    queries, corpus, run = {}, {}, {}
    for entry in json.loads((data / run_file).read_text()):
        qid = str(entry["hits"][0]["qid"])
        queries[qid] = Query(qid, entry["query"])
        run[qid] = {h["docid"]: h["score"] for h in entry["hits"]}  # file order = rank order
        corpus.update((h["docid"], Document(h["docid"], h["content"])) for h in entry["hits"])
    split = [q for q in queries if q in qrels]
    return Benchmark(name, queries, corpus, qrels, {"test": split}, {"bm25": run}, relevance_level=2)


@pytest.fixture(scope="module")
def dl19() -> Benchmark:
    return load_dl("dl19")


@pytest.fixture(scope="module")
def dl20() -> Benchmark:
    return load_dl("dl20")


def ideal_top(ranking: list[str], grades: dict[str, int], k: int) -> list[str]:
    """The qrels' ideal order of a pool: grade descending, ties by first-stage order."""
    return sorted(ranking, key=lambda d: (-grades.get(d, 0), ranking.index(d)))[:k]


def oracle_judge(grades: dict[str, dict[str, int]], first_rank: dict[str, dict[str, int]]):
    """Picks the candidate with the highest grade (ties: the better first-stage rank)."""

    def judge(comparisons):
        out = []
        for qid, cands in comparisons:  # tests pass the qid as the query text
            best = min(
                range(len(cands)),
                key=lambda i: (-grades[qid].get(cands[i].docid, 0), first_rank[qid][cands[i].docid]),
            )
            out.append(Verdict(best))
        return out

    return judge


def keyed_choice(query: str, cands: list[Document], salt: str = "") -> int:
    """A deterministic but arbitrary judge: a function of the comparison only."""
    return random.Random("|".join([salt, query, *(d.docid for d in cands)])).randrange(len(cands))


def reference_heapsort(query, docs, choose, m, k):
    """llm-rankers ``heapify``/``heapSort``/``rerank`` (llmrankers/setwise.py), one compare at a time."""
    calls = 0

    def heapify(arr, n, i):
        nonlocal calls
        if m * i + 1 < n:
            cands = [arr[i]] + arr[m * i + 1 : min(m * (i + 1) + 1, n)]
            inds = [i] + list(range(m * i + 1, min(m * (i + 1) + 1, n)))
            calls += 1
            largest = inds[choose(query, cands)]
            if largest != i:
                arr[i], arr[largest] = arr[largest], arr[i]
                heapify(arr, n, largest)

    arr, n, ranked = list(docs), len(docs), 0
    for i in range(n // m, -1, -1):
        heapify(arr, n, i)
    for i in range(n - 1, 0, -1):
        arr[i], arr[0] = arr[0], arr[i]
        ranked += 1  # noqa: SIM113 (kept as in llm-rankers)
        if ranked == k:
            break
        heapify(arr, i, 0)
    top = [d.docid for d in list(reversed(arr))[:k]]
    return top + [d.docid for d in docs if d.docid not in top], calls


def as_judge(choose):
    return lambda comps: [Verdict(choose(q, c)) for q, c in comps]


def docs_of(n: int) -> list[Document]:
    return [Document(f"d{i}", f"passage {i}") for i in range(n)]


# ----------------------------------------------------------------------------------------------- prompts


def test_prompts_are_the_official_ones():
    msgs = setwise_messages("what is a flea", ["first passage", "second passage"], reasoning=True)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[0]["content"].startswith("A conversation between User and Assistant.")
    assert "<think> reasoning process here </think> <answer> answer here </answer>" in msgs[0]["content"]
    assert msgs[1]["content"] == (
        'Given the query: "what is a flea", which of the following documents is most relevant?\n'
        "[1] first passage\n[2] second passage\n"
        "After completing the reasoning process, please provide only the label of the most relevant "
        "document to the query, enclosed in square brackets, within the answer tags. For example, if the "
        "third document is the most relevant, the answer should be: <think> reasoning process here </think> "
        "<answer>[3]</answer>."
    )
    plain = setwise_messages("q", ["a", "b", "c"], reasoning=False)
    assert "<think>" not in plain[0]["content"] + plain[1]["content"]
    assert plain[1]["content"].endswith("the answer should be: <answer>[3]</answer>.")
    assert "[3] c\nPlease provide only the label" in plain[1]["content"]


def test_prompt_keeps_braces_in_passages():
    msgs = setwise_messages("{query}", ["a {docs} b", "}{"])
    assert '"{query}"' in msgs[1]["content"] and "[1] a {docs} b\n[2] }{\n" in msgs[1]["content"]


# ------------------------------------------------------------------------------------------ parser, reward

# (completion, parse with 5 candidates and reasoning, reward for gold index 2)
CASES = [
    ("<think>x</think><answer>[3]</answer>", 2, 1.0),
    ("<think>long\nreasoning</think>\n \t<answer> [3] </answer> trailing text", 2, 1.0),
    ("prefix <think></think><answer>[3]</answer>", 2, 1.0),
    ("<think>x</think><answer>[1]</answer>", 0, 0.0),
    ("<think>x</think><answer>[5]</answer>", 4, 0.0),
    ("<think>x</think><answer>[6]</answer>", None, 0.0),  # out of range for 5 candidates
    ("<think>x</think><answer>[0]</answer>", None, 0.0),
    ("<think>x</think><answer>[-1]</answer>", None, 0.0),
    ("<think>x</think><answer>3</answer>", None, 0.0),  # official labels carry brackets
    ("<think>x</think><answer>[3][4]</answer>", None, 0.0),  # two labels in one answer
    ("<think>x</think><answer>[3] or [4]</answer>", None, 0.0),
    ("<think>x</think><answer></answer>", None, 0.0),
    ("<think>x</think><answer>   </answer>", None, 0.0),
    ("<answer>[3]</answer>", None, 0.0),  # reasoning prompt requires the think block
    ("<think>x</think>[3]", None, 0.0),
    ("<think>x</think> so <answer>[3]</answer>", None, 0.0),  # only whitespace between the tags
    ("<think>x<answer>[3]</answer>", None, 0.0),
    ("<think>x</think><answer>[3]", None, 0.0),
    ("<think>x</think><answer>[3]</answer><answer>[4]</answer>", 2, 1.0),  # official re.search: first wins
    ("<THINK>x</THINK><ANSWER>[3]</ANSWER>", 2, 0.0),  # inference lower-cases, the training reward does not
    ("<think>x</think><answer>[３]</answer>", None, 0.0),  # full-width digit
    ("<think>\x00\ud800</think><answer>[3]</answer>", 2, 1.0),
    ("", None, 0.0),
    ("[3]", None, 0.0),
    ("\U0001f600" * 50, None, 0.0),
]


@pytest.mark.parametrize("text, parsed, reward", CASES)
def test_parse_and_reward(text, parsed, reward):
    assert parse_answer(text, 5, reasoning=True) == parsed
    assert format_ok(text, 5, reasoning=True) == (parsed is not None)
    assert rank_r1_reward(text, 2) == reward


def test_plain_setwise_pattern():
    assert parse_answer("<answer>[2]</answer>", 3, reasoning=False) == 1
    assert parse_answer("I think <answer> [2] </answer>", 3, reasoning=False) == 1
    assert parse_answer("<answer>[4]</answer>", 3, reasoning=False) is None
    assert rank_r1_reward("<answer>[2]</answer>", 1, reasoning=False) == 1.0
    assert rank_r1_reward("<answer>[2]</answer>", 1, reasoning=True) == 0.0


def test_parser_and_reward_never_raise_on_random_strings():
    rng = random.Random(0)
    pieces = ["<think>", "</think>", "<answer>", "</answer>", "[", "]", "\n", " ", "\\", ".*", "(", "\ud83d"]
    alphabet = string.printable + "\u0130\u00df\ufb03\u202e\u0000\U0001f600"
    for _ in range(2000):
        text = "".join(
            rng.choice(pieces) if rng.random() < 0.4 else rng.choice(alphabet)
            for _ in range(rng.randrange(60))
        )
        c, gold = rng.randrange(1, 25), rng.randrange(0, 25)
        for reasoning in (True, False):
            p = parse_answer(text, c, reasoning)
            assert p is None or 0 <= p < c
            r = rank_r1_reward(text, gold, reasoning)
            assert r in (0.0, 1.0)
            if r == 1.0 and gold < c:  # a rewarded completion parses to the gold label
                assert p == gold


def test_reward_is_not_fooled_by_labels_outside_the_answer():
    assert rank_r1_reward("<think>the answer is [3]</think><answer>[1]</answer>", 2) == 0.0
    assert rank_r1_reward("<think>[1]</think><answer>[3]</answer>", 2) == 1.0


# ----------------------------------------------------------------------------------------------- heap sort


@pytest.mark.parametrize("num_child, k", [(19, 10), (3, 10), (2, 5), (19, 100)])
def test_oracle_heapsort_gives_the_ideal_top_k(dl19, num_child, k):
    grades = dl19.qrels
    first = {q: list(dl19.runs["bm25"][q]) for q in dl19.splits["test"]}
    ranks = {q: {d: i for i, d in enumerate(r)} for q, r in first.items()}
    jobs = [(q, [dl19.corpus[d] for d in first[q]]) for q in dl19.splits["test"]]
    rankings, costs, _ = rerank_setwise(jobs, oracle_judge(grades, ranks), num_child, k)
    for (qid, _), ranked in zip(jobs, rankings):
        assert ranked[:k] == ideal_top(first[qid], grades[qid], k)
        assert sorted(ranked) == sorted(first[qid])
        rest = [d for d in first[qid] if d not in ranked[:k]]
        assert ranked[k:] == rest  # not-sorted documents keep their first-stage order
    assert all(c.comparisons >= 1 for c in costs)


@pytest.mark.parametrize(
    "n, m, k",
    [
        (100, 19, 10),
        (100, 3, 10),
        (37, 2, 7),
        (20, 19, 10),
        (21, 19, 10),
        (8, 3, 20),
        (2, 19, 10),
        (1, 19, 10),
        (0, 19, 10),
        (50, 1, 5),
        (64, 4, 64),
    ],
)
def test_batched_equals_sequential(n, m, k):
    docs = docs_of(n)
    for salt in ("a", "b", "c"):
        choose = lambda q, c, s=salt: keyed_choice(q, c, s)
        expected, calls = reference_heapsort("q", docs, choose, m, k)
        rankings, costs, batches = rerank_setwise([("q", docs)], as_judge(choose), m, k)
        assert rankings[0] == expected
        assert costs[0].comparisons == calls
        assert costs[0].batches == batches <= max(calls, 0)


def test_many_queries_in_lockstep_equal_one_by_one():
    jobs = [(f"q{j}", docs_of(n)) for j, n in enumerate([100, 30, 1, 57, 100, 5])]
    judge = as_judge(keyed_choice)
    rankings, costs, calls = rerank_setwise(jobs, judge, 4, 10)
    alone = [rerank_setwise([job], judge, 4, 10) for job in jobs]
    assert rankings == [a[0][0] for a in alone]
    assert [c.comparisons for c in costs] == [a[1][0].comparisons for a in alone]
    assert calls == max(a[2] for a in alone)  # one judge call per round of the longest sort


def test_call_counts_with_a_judge_that_keeps_the_node():
    # 100 docs, 19 children: internal nodes 0..5; nodes 1..5 at depth 1 share one batch, then the root.
    # Nothing moves, so each of the 9 pops (the 10th ends the sort) costs one comparison.
    seen: list[int] = []

    def judge(comps):
        seen.append(len(comps))
        return [Verdict(0, prompt_tokens=10, completion_tokens=2, parsed=False) for _ in comps]

    rankings, costs, calls = rerank_setwise([("q", docs_of(100))], judge, 19, 10)
    assert seen == [5, 1] + [1] * 9 and calls == 11
    assert costs[0] == SortCost(
        comparisons=15, batches=11, prompt_tokens=150, completion_tokens=30, parse_failures=15
    )
    # the official order: d0, then the last docs that were swapped into the root
    assert rankings[0][:10] == ["d0", *[f"d{i}" for i in range(99, 90, -1)]]
    assert rankings[0][10:] == [f"d{i}" for i in range(1, 91)]


def test_batched_build_uses_fewer_calls_than_comparisons():
    docs = docs_of(100)
    _, costs, calls = rerank_setwise([("q", docs)], as_judge(keyed_choice), 3, 10)
    _, reference_calls = reference_heapsort("q", docs, keyed_choice, 3, 10)
    assert costs[0].comparisons == reference_calls and calls < reference_calls


def test_heapsort_rejects_bad_input():
    with pytest.raises(ValueError, match="valid: 0..3"):
        setwise_heapsort("q", docs_of(10), as_judge(lambda q, c: 7), num_child=3, k=2)
    with pytest.raises(ValueError, match="duplicate docids"):
        setwise_heapsort("q", docs_of(3) + docs_of(1), as_judge(keyed_choice))
    with pytest.raises(ValueError, match="num_child and k"):
        setwise_heapsort("q", docs_of(3), as_judge(keyed_choice), num_child=0)
    with pytest.raises(ValueError, match="2 verdicts for 1"):
        setwise_heapsort("q", docs_of(3), lambda comps: [Verdict(0), Verdict(0)])


# ----------------------------------------------------------------------------------------------- LLM judge


def test_llm_judge_maps_shown_labels_back_and_falls_back_to_the_node():
    cands = [Document(f"d{i}", f"text {i}") for i in range(6)]
    prompts_seen = []

    def generate(prompts):
        prompts_seen.extend(prompts)
        out = []
        for p in prompts:
            shown = re.findall(r"^\[(\d+)\] text (\d+)$", p[1]["content"], re.MULTILINE)
            label = next(lbl for lbl, i in shown if i == "4")  # always answer where d4 is shown
            out.append(Generation(f"<think>d4</think><answer>[{label}]</answer>", 100, 7))
        return out

    for shuffle in (True, False):
        verdicts = llm_judge(generate, shuffle=shuffle, seed=3)([("q", cands), ("r", cands[:5])])
        assert [v.choice for v in verdicts] == [4, 4] and all(v.parsed for v in verdicts)
        assert verdicts[0] == Verdict(4, 100, 7, True)
    shown_orders = [re.findall(r"^\[\d+\] text (\d+)$", p[1]["content"], re.MULTILINE) for p in prompts_seen]
    assert shown_orders[0] != [str(i) for i in range(6)]  # seed 3 shuffles this comparison
    assert shown_orders[2] == [str(i) for i in range(6)]
    garbage = llm_judge(lambda ps: [Generation("I cannot decide") for _ in ps])([("q", cands)])
    assert garbage == [Verdict(0, 0, 0, parsed=False)]


def test_unparseable_outputs_follow_the_official_fallback():
    docs = docs_of(40)
    generate = lambda ps: [Generation("<think>hmm</think><answer>[99]</answer>") for _ in ps]
    rankings, costs, _ = rerank_setwise([("q", docs)], llm_judge(generate), 5, 10)
    expected, calls = reference_heapsort("q", docs, lambda q, c: 0, 5, 10)
    assert rankings[0] == expected and costs[0].parse_failures == costs[0].comparisons == calls


# ----------------------------------------------------------------------------------------------- truncation


@pytest.fixture(scope="module")
def tokenizer():
    """SmolLM2's tokenizer when the lead has converted it, else a byte-level BPE trained here, offline."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if (SMOLLM2 / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(str(SMOLLM2))
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    texts = ["how long is the life cycle of a flea", "the quick brown fox jumps over the lazy dog"] * 20
    trainer = trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def test_truncate_keeps_the_first_tokens(tokenizer):
    text = "How long is the life cycle of a flea? It depends on the conditions: ünïcödé, 20 days to 1 year."
    tokens = tokenizer.tokenize(text)
    assert len(tokens) > 12
    short = truncate(text, tokenizer, 12)
    assert tokenizer.tokenize(short) == tokens[:12] and text.startswith(short)
    assert truncate(text, tokenizer, 10_000) == text
    assert truncate(text, tokenizer, None) == text and truncate(text, None, 3) == text


# ------------------------------------------------------------------------------------------ training data


def test_judged_pool_construction(dl20):
    examples = setwise_training_examples(dl20, "judged_pool", num_candidates=5, seed=1)
    again = setwise_training_examples(dl20, "judged_pool", num_candidates=5, seed=1)
    other = setwise_training_examples(dl20, "judged_pool", num_candidates=5, seed=2)
    assert examples == again and examples != other
    assert len(examples) > 100 and len({e.uid for e in examples}) == len(examples)
    golds = [e.target["gold"] for e in examples]
    assert set(golds) == set(range(5))  # the positive lands in every slot
    for e in examples:
        qid = e.uid.split(":")[1]
        grades, docids = dl20.qrels[qid], e.target["docids"]
        top100 = list(dl20.runs["bm25"][qid])[:100]
        assert len(docids) == e.target["num_candidates"] == 5 and set(docids) <= set(top100)
        assert grades[docids[e.target["gold"]]] >= 2
        assert all(grades.get(d, 0) == 0 for i, d in enumerate(docids) if i != e.target["gold"])
        shown = re.findall(r"^\[(\d+)\] (.*)$", e.messages[1]["content"], re.MULTILINE)
        assert [t for _, t in shown] == [dl20.corpus[d].text for d in docids]
        assert rank_r1_reward(f"<think>x</think><answer>[{e.target['gold'] + 1}]</answer>", e.target["gold"])


def test_msmarco_construction_from_loader_candidates():
    # as rankrl.data's msmarco-train: each query lists its sampled candidates; qrels hold the positives
    corpus = {f"p{i}": Document(f"p{i}", f"passage {i}") for i in range(60)}
    queries = {
        f"q{j}": Query(f"q{j}", f"query {j}", {"candidates": [f"p{j * 20 + i}" for i in range(20)]})
        for j in range(3)
    }
    qrels = {f"q{j}": {f"p{j * 20 + 7}": 1, f"p{j * 20 + 9}": 1} for j in range(3)}
    bench = Benchmark("msmarco-train", queries, corpus, qrels, {"train": list(queries)})
    examples = setwise_training_examples(bench, "msmarco", num_candidates=20, seed=0)
    assert [e.uid for e in examples] == [f"msmarco-train:q{j}:p{j * 20 + 7}" for j in range(3)]
    for e in examples:
        assert len(e.target["docids"]) == 19 and e.target["docids"][e.target["gold"]] == e.uid.split(":")[2]
        assert e.messages[0]["content"] == rankr1.PROMPTS[True]["system"]


def test_construction_rejects_bad_settings():
    bench = Benchmark("b", {}, {}, {}, {})
    with pytest.raises(ValueError, match="valid: \\('msmarco', 'judged_pool', "):
        setwise_training_examples(bench, "random")
    with pytest.raises(ValueError, match="num_candidates"):
        setwise_training_examples(bench, num_candidates=1)


# ----------------------------------------------------------------------------------------------- the task


@pytest.fixture
def metrics_module(monkeypatch):
    """rankrl.eval.metrics.evaluate_run; an ir_measures stand-in while that module is being written."""
    try:
        from rankrl.eval.metrics import evaluate_run
    except ImportError:
        import ir_measures

        def evaluate_run(run, qrels, measures, relevance_level=1):
            parsed = [ir_measures.parse_measure(m) for m in measures]
            agg = ir_measures.calc_aggregate(parsed, qrels, run)
            return {m: float(agg[p]) for m, p in zip(measures, parsed)}

        module = types.ModuleType("rankrl.eval.metrics")
        module.evaluate_run = evaluate_run
        monkeypatch.setitem(sys.modules, "rankrl.eval.metrics", module)


def oracle_generator(bench: Benchmark, reasoning: bool = True):
    """A fake LLM that reads the passages of a prompt and answers the label of the best-graded one."""
    by_text = {doc.text: doc.docid for doc in bench.corpus.values()}
    query_of = {q.text: q.qid for q in bench.queries.values()}
    rank = {q: {d: i for i, d in enumerate(r)} for q, r in bench.runs["bm25"].items()}
    calls = []

    def generate(prompts):
        calls.append(len(prompts))
        out = []
        for p in prompts:
            qid = query_of[re.match(r'Given the query: "(.*)", which', p[1]["content"]).group(1)]
            shown = [by_text[t] for t in re.findall(r"^\[\d+\] (.*)$", p[1]["content"], re.MULTILINE)]
            best = min(
                range(len(shown)), key=lambda i: (-bench.qrels[qid].get(shown[i], 0), rank[qid][shown[i]])
            )
            answer = f"<answer>[{best + 1}]</answer>"
            out.append(Generation(f"<think>oracle</think>{answer}" if reasoning else answer, 50, 5))
        return out

    generate.calls = calls
    return generate


@pytest.mark.parametrize("reasoning, depth", [(True, 100), (False, 30)])
def test_evaluate_with_an_oracle_llm_reaches_the_ideal_ndcg(dl19, dl20, metrics_module, reasoning, depth):
    import ir_measures

    assert len({d.text for d in dl19.corpus.values()}) == len(dl19.corpus)  # the fake LLM keys on text
    task = RankR1Task(dl20, dl19, construction="judged_pool", reasoning=reasoning, rerank_depth=depth)
    generate = oracle_generator(dl19, reasoning)
    out = task.evaluate({"policy": generate}, "test")
    assert out["per_query"]["nDCG@10"].mean() == pytest.approx(out["metrics"]["nDCG@10"])
    judged = {q for q in dl19.splits["test"] if q in dl19.qrels}
    assert set(out["per_query"].index) == judged  # per_query.csv: every judged query evaluated
    ideal = {}
    for qid in dl19.splits["test"]:
        first = list(dl19.runs["bm25"][qid])
        order = ideal_top(first[:depth], dl19.qrels[qid], 10)
        order += [d for d in first if d not in order]
        assert list(out["run"][qid]) == order
        ideal[qid] = {d: float(len(order) - i) for i, d in enumerate(order)}
    expected = ir_measures.calc_aggregate([ir_measures.parse_measure("nDCG@10")], dl19.qrels, ideal)
    assert out["metrics"]["nDCG@10"] == pytest.approx(float(next(iter(expected.values()))), abs=1e-9)
    assert out["metrics"]["nDCG@10"] > 0.6  # BM25 is 0.506
    cost = out["cost"]
    assert cost["queries"] == 43 and cost["parse_failures"] == 0
    assert cost["comparisons"] == sum(generate.calls) and cost["judge_calls"] == len(generate.calls)
    assert cost["prompt_tokens"] == 50 * cost["comparisons"]
    assert cost["completion_tokens"] == 5 * cost["comparisons"]
    # the first call batches the deepest build level of every query: nodes 1..5 of 100 docs, node 1 of 30
    assert generate.calls[0] == 43 * (5 if depth == 100 else 1)


def test_evaluate_truncates_and_limits(dl19, dl20, metrics_module, tokenizer):
    task = RankR1Task(
        dl20,
        dl19,
        construction="judged_pool",
        tokenizer=tokenizer,
        query_max_tokens=4,
        passage_max_tokens=16,
        rerank_depth=20,
        num_child=3,
        k=5,
    )
    seen = []

    def generate(prompts):
        seen.extend(prompts)
        return [Generation("<think>?</think><answer>[1]</answer>") for _ in prompts]

    out = task.evaluate({"policy": generate}, "test", limit=2)
    assert set(out["run"]) == set(dl19.splits["test"][:2]) and out["cost"]["queries"] == 2
    # what the whole split would cost is derivable (the GPU plan scales a smoke run's cost by it)
    cost = out["cost"]
    assert cost["queries_total"] == len(dl19.splits["test"]) > 2
    assert cost["llm_prompts"] == cost["comparisons"] == len(seen) and cost["generate_calls"] >= 1
    for p in seen:
        query = re.match(r'Given the query: "(.*)", which', p[1]["content"]).group(1)
        assert len(tokenizer.tokenize(query)) <= 4
        for passage in re.findall(r"^\[\d+\] (.*)$", p[1]["content"], re.MULTILINE):
            assert len(tokenizer.tokenize(passage)) <= 16


def test_a_constant_judge_is_the_llm_judge_answering_one_label(dl19, dl20, metrics_module):
    """The no-LLM rows: the same heap sort, shuffle and fallback as an LLM that always writes [k]."""
    kw = dict(construction="judged_pool", rerank_depth=20, num_child=4, k=5)
    for answer in (1, 5):
        text = f"<think>x</think><answer>[{answer}]</answer>"
        llm = RankR1Task(dl20, dl19, **kw).evaluate(
            {"policy": lambda ps, t=text: [Generation(t) for _ in ps]}, "test"
        )
        constant = ConstantJudgeTask(dl20, dl19, answer=answer, **kw).evaluate({}, "test")
        assert constant["run"] == llm["run"] and constant["metrics"] == llm["metrics"]
    assert not ConstantJudgeTask.uses_model and not ConstantJudgeTask.trains
    with pytest.raises(ValueError, match=r"label 1\.\.5"):
        ConstantJudgeTask(dl20, dl19, answer=6, **kw)


def test_evaluate_drops_excluded_ids(metrics_module):
    corpus = {f"d{i}": Document(f"d{i}", f"doc {i}") for i in range(8)}
    queries = {"q": Query("q", "query", {"excluded_ids": ["d0", "d3"]})}
    run = {"q": {f"d{i}": 10.0 - i for i in range(8)}}
    bench = Benchmark("bright-x", queries, corpus, {"q": {"d0": 1, "d5": 1}}, {"test": ["q"]}, {"bm25": run})
    train = Benchmark("train-x", {}, {}, {}, {})
    task = RankR1Task(train, bench, construction="judged_pool", num_child=2, k=3, rerank_depth=4)
    out = task.evaluate({"policy": lambda ps: [Generation("nothing") for _ in ps]}, "test")
    assert "d0" not in out["run"]["q"] and "d3" not in out["run"]["q"]
    assert len(out["run"]["q"]) == 6 and out["cost"]["parse_failures"] == out["cost"]["comparisons"] > 0


def test_task_train_examples_and_score(dl19, dl20):
    task = RankR1Task(dl20, dl19, construction="judged_pool", num_candidates=5, seed=0)
    examples = task.train_examples()
    assert examples and all(e.uid.startswith("dl20:") for e in examples)
    ex = examples[:2]
    gold = [e.target["gold"] for e in ex]
    completions = [
        f"<think>a</think><answer>[{gold[0] + 1}]</answer>",  # right
        f"<think>a</think><answer>[{(gold[1] + 1) % 5 + 1}]</answer>",  # wrong label
        "<answer>[1]</answer>",
        "nonsense",
    ]
    scores = task.score([ex[0], ex[1], ex[0], ex[1]], completions)
    assert scores.rewards.tolist() == [1.0, 0.0, 0.0, 0.0]
    assert scores.format_ok.tolist() == [True, True, False, False]
    labels = [gold[0] + 1, (gold[1] + 1) % 5 + 1]  # the two parsed answers (1-based)
    assert scores.metrics == {
        "reward": 0.25,
        "accuracy": 0.25,
        "format_error_rate": 0.5,
        "modal_answer_share": 1.0 if labels[0] == labels[1] else 0.5,
    }
    with pytest.raises(ValueError, match="need one each"):
        task.score(ex, completions)


def test_modal_share_tells_a_position_collapse_from_a_spread():
    assert modal_share([2, 2, 2, 2]) == 1.0  # every answer names position 3
    assert modal_share([0, 1, 2, 3, 4, 0]) == pytest.approx(2 / 6)
    assert modal_share([]) == 0.0  # nothing parsed: no position preferred


def test_task_rejects_training_on_the_eval_set():
    with pytest.raises(ValueError, match="evaluate on unseen data"):
        RankR1Task("dl19", "dl19", construction="judged_pool")
    with pytest.raises(ValueError, match="valid: \\('msmarco', 'judged_pool', "):
        RankR1Task("dl20", "dl19", construction="bm25")


# ---- SFT targets: the Setwise SFT baseline and the format-only warm start ---------------------------------


def test_format_warm_start_labels_carry_no_relevance_signal(dl20):
    """The warm start's labels are drawn independently of the gold label: the same for any gold, uniform over
    1..c, agreeing with the gold about 1 time in c, and the think text is the same for every prompt."""
    from dataclasses import replace

    from rankrl.tasks.rankr1 import GENERIC_THINK, parse_answer, setwise_training_examples, sft_completion

    examples = setwise_training_examples(
        dl20, "judged_pool", num_candidates=5, seed=0, pool_depth=100, text=lambda d: d
    )
    assert len(examples) > 300
    labels = []
    for ex in examples:
        completion = sft_completion(ex, "format", reasoning=True, seed=0)
        assert completion.startswith(f"<think> {GENERIC_THINK} </think> <answer>[")
        label = parse_answer(completion, 5, reasoning=True)
        for other_gold in range(5):  # the label does not depend on which passage is the gold one
            moved = replace(ex, target={**ex.target, "gold": other_gold})
            assert parse_answer(sft_completion(moved, "format", True, 0), 5, True) == label
        labels.append(label)
    n = len(labels)
    agree = sum(label == ex.target["gold"] for label, ex in zip(labels, examples)) / n
    assert abs(agree - 0.2) < 4 * (0.2 * 0.8 / n) ** 0.5, agree  # chance level, within 4 sigma
    counts = [labels.count(k) for k in range(5)]
    chi2 = sum((c - n / 5) ** 2 / (n / 5) for c in counts)
    assert chi2 < 18.47, counts  # uniform: below the 0.999 quantile of chi-square with 4 dof


def test_setwise_sft_targets_are_the_gold_labels(dl20):
    from rankrl.tasks.rankr1 import parse_answer, setwise_training_examples, sft_completion

    examples = setwise_training_examples(dl20, "judged_pool", 5, 0, 100, lambda d: d, reasoning=False)
    assert len(examples) >= 50  # the loop below checks 50 of them
    for ex in examples[:50]:
        completion = sft_completion(ex, "gold", reasoning=False)
        assert completion == f"<answer>[{ex.target['gold'] + 1}]</answer>"
        assert parse_answer(completion, 5, reasoning=False) == ex.target["gold"]
