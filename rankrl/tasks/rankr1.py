"""Rank-R1: a Setwise reranker that reasons before it answers, trained with GRPO (Zhuang et al., 2025).

The method, in the order of the paper:
1. Setwise prompt: a query and c candidate passages labelled [1]..[c]; the model answers the label of the
   most relevant one. Rank-R1 adds an instruction to reason first: ``<think>...</think><answer>[k]</answer>``.
2. Reward: 1 if the output matches the format and the label is the gold passage, else 0. Nothing rewards
   the reasoning itself: GRPO alone has to find reasoning that helps.
3. Training data: an MS MARCO query, its relevant passage and 19 BM25 negatives, shuffled (c = 20).
4. Inference: Setwise heap sort over the BM25 top-100 (num_child = 19, top k = 10); each heap step is one
   LLM call that picks the most relevant of a node and its children.

Official code: ielab/llm-rankers (``llmrankers/setwise.py``, ``Rank-R1/``); its prompts are copied into
``prompts/rankr1.toml``. Where this module departs from it, the docstring says so.
"""

from __future__ import annotations

import random
import re
import tomllib
from collections import Counter, abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from rankrl.conf_defaults import conf_default
from rankrl.data.records import Benchmark, Document, Run
from rankrl.rollout.base import Generation, Generator, Messages
from rankrl.tasks.base import Example, Scores, SFTExample, TaskBase

_TOML = tomllib.loads((Path(__file__).parent / "prompts" / "rankr1.toml").read_text())
PROMPTS: dict[bool, dict[str, str]] = {True: _TOML["setwise_r1"], False: _TOML["setwise"]}  # key: reasoning

# ---- 1. Prompts -------------------------------------------------------------------------------------------


def setwise_messages(query: str, passages: Sequence[str], reasoning: bool = True) -> Messages:
    """System + user chat prompt listing ``passages`` as ``[1] text`` .. ``[c] text``, one per line."""
    prompt = PROMPTS[reasoning]
    docs = "\n".join(f"[{i + 1}] {text}" for i, text in enumerate(passages))
    user = prompt["user"].format(query=query, docs=docs)
    return [{"role": "system", "content": prompt["system"]}, {"role": "user", "content": user}]


def truncate(text: str, tokenizer: Any, max_tokens: int | None) -> str:
    """The first ``max_tokens`` tokens of ``text``, round-tripped through the tokenizer as llm-rankers'
    ``SetwiseLlmRanker.truncate`` does; ``None`` (or no tokenizer) keeps the text."""
    if max_tokens is None or tokenizer is None:
        return text
    return tokenizer.convert_tokens_to_string(tokenizer.tokenize(text)[:max_tokens])


# ---- 2. Parsing and reward ---------------------------------------------------------------------------------

# The official patterns (searched with re.DOTALL), kept for reference and differential tests. Backtracking
# makes the reasoning one about cubic on degenerate outputs such as ``<think>x</think><answer>`` repeated:
# 0.26 s at 1,600 tokens, 2.1 s at 3,200, ~500 s (extrapolated) at 20,000
# (python -m rankrl.benchmarks.rankr1_parser).
# ``_find_answer`` gives the same group 1 in linear time (microseconds there).
OFFICIAL_PATTERN = r"<think>.*?</think>\s*<answer>(.*?)</answer>"  # prompts [setwise_r1] pattern
OFFICIAL_PLAIN_PATTERN = "<answer>(.*?)</answer>"  # prompts [setwise] pattern
if (PROMPTS[True]["pattern"], PROMPTS[False]["pattern"]) != (OFFICIAL_PATTERN, OFFICIAL_PLAIN_PATTERN):
    raise RuntimeError(
        "the patterns in prompts/rankr1.toml changed: _find_answer implements exactly "
        f"{OFFICIAL_PATTERN!r} and {OFFICIAL_PLAIN_PATTERN!r}; update it with them"
    )
_WHITESPACE = re.compile(r"\s*")  # greedy run of exactly what \s matches; a single pass, no backtracking


def _find_answer(text: str, think: bool) -> str | None:
    """Group 1 of ``re.search(OFFICIAL_PATTERN or OFFICIAL_PLAIN_PATTERN, text, re.DOTALL)``, linear time.

    Why this equals the regex: any match can be moved to start at the first ``<think>`` (the lazy ``.*?``
    reaches every later ``</think>`` from there too), so re.search, leftmost first, always starts there.
    From it the regex tries each ``</think>`` in order; ``\\s*`` is greedy and ``<`` is no whitespace, so a
    ``</think>`` fits only if ``<answer>`` follows its whole whitespace run ("good"). The answer then ends at
    the first ``</answer>`` after that ``<answer>``; when there is none, no later good ``</think>`` has one
    either, so there is no match at all. The whitespace runs after distinct ``</think>`` tags are disjoint,
    so every character is looked at a bounded number of times. The plain pattern is the same without the
    think part.
    """
    if think:
        start = text.find("<think>")
        if start < 0:
            return None
        pos = start + len("<think>")
        while True:
            close = text.find("</think>", pos)
            if close < 0:
                return None
            after = _WHITESPACE.match(text, close + len("</think>")).end()
            if text.startswith("<answer>", after):
                open_end = after + len("<answer>")
                break
            pos = close + 1
    else:
        open_ = text.find("<answer>")
        if open_ < 0:
            return None
        open_end = open_ + len("<answer>")
    end = text.find("</answer>", open_end)
    return text[open_end:end] if end >= 0 else None


def _answer_span(text: str, reasoning: bool, lower: bool) -> str | None:
    """Group 1 of the first match of the official pattern, stripped; ``None`` when nothing matches."""
    if not isinstance(text, str):
        return None
    text = text.lower() if lower else text
    span = _find_answer(text, think=reasoning)
    return span.strip() if span is not None else None


def parse_answer(text: str, num_candidates: int, reasoning: bool = True) -> int | None:
    """0-based index of the answered label, or ``None`` when the output is malformed.

    As ``R1SetwiseLlmRanker.compare`` (Rank-R1/run_setwise.py): the first match of the prompt's pattern in
    the lower-cased output must hold exactly one of ``[1]``..``[num_candidates]``. A missing tag, an empty
    answer, ``3``, ``[1] [2]`` or a label out of range give ``None``; of several answers the first counts.
    """
    span = _answer_span(text, reasoning, lower=True)
    labels = [f"[{i + 1}]" for i in range(num_candidates)]
    return labels.index(span) if span in labels else None


def format_ok(text: str, num_candidates: int, reasoning: bool = True) -> bool:
    """Whether the output has the prescribed tags around a valid label."""
    return parse_answer(text, num_candidates, reasoning) is not None


def rank_r1_reward(completion: str, gold_index: int, reasoning: bool = True) -> float:
    """1.0 if the format matches and the answer is the gold label, else 0.0. Never raises.

    Exactly ``reward_func_setwise`` (Rank-R1/train_grpo.py): case-sensitive ``re.search`` with DOTALL of
    ``<think>.*?</think>\\s*<answer>(.*?)</answer>``, then ``"[gold]" == answer.strip()``; the search is
    done by a linear-time scan with the regex's exact result (``_find_answer``).
    """
    return float(_answer_span(completion, reasoning, lower=False) == f"[{gold_index + 1}]")


def modal_share(answers: Sequence[int]) -> float:
    """Share of the answers that name the most common candidate position (0.0 for none). The candidates of
    every training prompt are shuffled, so the gold position is uniform: a share near 1 means the policy
    answers by position, not by content (the position collapse of LLM rerankers)."""
    if not answers:
        return 0.0
    return Counter(answers).most_common(1)[0][1] / len(answers)


# ---- 3. Setwise heap sort ----------------------------------------------------------------------------------

Comparison = tuple[str, list[Document]]  # (query, candidates): which candidate is the most relevant?


@dataclass(frozen=True)
class Verdict:
    """A judge's answer to one comparison: the index of the chosen candidate, and what it cost."""

    choice: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    parsed: bool = True


Judge = Callable[[Sequence[Comparison]], Sequence[Verdict]]
SortSteps = abc.Generator[list[Comparison], list[Verdict], Any]  # yields comparisons, is sent their verdicts


@dataclass
class SortCost:
    """LLM cost of reranking one query: comparisons (= prompts), judge rounds it took part in, tokens."""

    comparisons: int = 0
    batches: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    parse_failures: int = 0

    def add(self, verdicts: Sequence[Verdict]) -> None:
        self.comparisons += len(verdicts)
        self.batches += 1
        self.prompt_tokens += sum(v.prompt_tokens for v in verdicts)
        self.completion_tokens += sum(v.completion_tokens for v in verdicts)
        self.parse_failures += sum(not v.parsed for v in verdicts)


def _sift_down(query: str, heap: list[Document], n: int, roots: list[int], m: int) -> SortSteps:
    """Sift the roots of disjoint subtrees of the m-ary heap ``heap[:n]`` down, in lockstep.

    A step compares a node with its children (llm-rankers ``heapify``); the winner moves up, the demoted
    node goes on one level down. Disjoint subtrees share no slot, so their steps can share a judge batch and
    the result equals running them one after another.
    """
    active = [i for i in roots if m * i + 1 < n]
    while active:
        verdicts = yield [(query, [heap[i], *heap[m * i + 1 : min(m * i + m + 1, n)]]) for i in active]
        moved = []
        for i, verdict in zip(active, verdicts, strict=True):
            slots = [i, *range(m * i + 1, min(m * i + m + 1, n))]
            if not 0 <= verdict.choice < len(slots):
                raise ValueError(f"judge chose candidate {verdict.choice}; valid: 0..{len(slots) - 1}")
            j = slots[verdict.choice]
            if j != i:
                heap[i], heap[j] = heap[j], heap[i]
                moved += [j] if m * j + 1 < n else []
        active = moved


def _levels_bottom_up(n: int, m: int) -> list[list[int]]:
    """Internal nodes of an m-ary heap of n items grouped by depth, deepest level first."""
    depth = [0] * n
    for i in range(1, n):
        depth[i] = depth[(i - 1) // m] + 1
    levels: dict[int, list[int]] = {}
    for i in reversed(range((n - 2) // m + 1) if n > 1 else range(0)):  # the order of llm-rankers' build loop
        levels.setdefault(depth[i], []).append(i)
    return [levels[d] for d in sorted(levels, reverse=True)]


def setwise_heapsort_steps(
    query: str, docs: Sequence[Document], num_child: int = 19, k: int = 10
) -> SortSteps:
    """llm-rankers ``heapSort`` + ``rerank`` as a coroutine that yields batches of comparisons.

    Build a num_child-ary max-heap bottom-up, one batch per level (sibling subtrees are disjoint), then pop
    the top ``k`` (each pop's sift-down is sequential). Returns docids: the top k in the judged order, then
    every other doc in its first-stage order.
    """
    if num_child < 1 or k < 1:
        raise ValueError(f"num_child and k must be >= 1, got num_child={num_child}, k={k}")
    if len({d.docid for d in docs}) != len(docs):
        raise ValueError(f"duplicate docids in the ranking of query {query!r}")
    heap, n = list(docs), len(docs)
    for level in _levels_bottom_up(n, num_child):
        yield from _sift_down(query, heap, n, level, num_child)
    for end in range(n - 1, 0, -1):
        heap[0], heap[end] = heap[end], heap[0]
        if n - end == k:
            break
        yield from _sift_down(query, heap, end, [0], num_child)
    top = [d.docid for d in reversed(heap)][:k]
    chosen = set(top)
    return top + [d.docid for d in docs if d.docid not in chosen]


def rerank_setwise(
    jobs: Sequence[tuple[str, Sequence[Document]]], judge: Judge, num_child: int = 19, k: int = 10
) -> tuple[list[list[str]], list[SortCost], int]:
    """Heap-sort several (query, first-stage candidates) jobs at once: each judge call carries every job's
    pending comparisons. Returns the reranked docids and cost per job, and the number of judge calls."""
    sorts = [setwise_heapsort_steps(q, docs, num_child, k) for q, docs in jobs]
    rankings: list[list[str]] = [[] for _ in jobs]
    costs = [SortCost() for _ in jobs]
    pending: dict[int, list[Comparison]] = {}

    def advance(j: int, verdicts: list[Verdict] | None) -> None:
        try:
            pending[j] = sorts[j].send(verdicts)
        except StopIteration as done:
            rankings[j] = done.value
            pending.pop(j, None)

    for j in range(len(sorts)):
        advance(j, None)
    calls = 0
    while pending:
        order = list(pending)
        batch = [c for j in order for c in pending[j]]
        verdicts = list(judge(batch))
        calls += 1
        if len(verdicts) != len(batch):
            raise ValueError(f"judge returned {len(verdicts)} verdicts for {len(batch)} comparisons")
        start = 0
        for j in order:
            mine = verdicts[start : start + len(pending[j])]
            start += len(mine)
            costs[j].add(mine)
            advance(j, mine)
    return rankings, costs, calls


def setwise_heapsort(
    query: str, docs: Sequence[Document], judge: Judge, num_child: int = 19, k: int = 10
) -> list[str]:
    """Rerank one query's candidates with the Setwise heap sort; returns docids, best first."""
    return rerank_setwise([(query, docs)], judge, num_child, k)[0][0]


def llm_judge(generate: Generator, reasoning: bool = True, shuffle: bool = True, seed: int = 0) -> Judge:
    """A judge that asks the LLM one Setwise prompt per comparison, a whole batch in one ``generate``.

    ``shuffle``: as ``R1SetwiseLlmRanker.compare`` (``random.sample`` even with one permutation) candidates
    are shown in random order, here seeded by the comparison itself so batching cannot change it. Fallback
    as llm-rankers ``heapify``: an unparseable answer picks candidate 0, the heap node, so nothing moves.
    """

    def judge(comparisons: Sequence[Comparison]) -> list[Verdict]:
        orders = [list(range(len(cands))) for _, cands in comparisons]
        for (query, cands), order in zip(comparisons, orders):
            if shuffle:
                random.Random("|".join([str(seed), query, *(d.docid for d in cands)])).shuffle(order)
        prompts = [
            setwise_messages(q, [cands[i].text for i in order], reasoning)
            for (q, cands), order in zip(comparisons, orders)
        ]
        verdicts = []
        for order, gen in zip(orders, generate(prompts), strict=True):
            label = parse_answer(gen.text, len(order), reasoning)
            choice = order[label] if label is not None else 0
            verdicts.append(Verdict(choice, gen.prompt_tokens, gen.completion_tokens, label is not None))
        return verdicts

    return judge


# ---- 4. Training data --------------------------------------------------------------------------------------

CONSTRUCTIONS = ("msmarco", "judged_pool", "other_queries", "query_echo")
EVAL_PROTOCOLS = ("heapsort", "prompts")


def passage_text(benchmark: Benchmark, docid: str) -> str:
    """``title text`` of a passage, as llm-rankers builds it from the index (title only when present)."""
    if docid not in benchmark.corpus:
        raise KeyError(
            f"benchmark {benchmark.name!r} has no text for docid {docid!r}: Setwise prompts need "
            "passage text; load the benchmark with its corpus (or the first-stage run with text)"
        )
    doc = benchmark.corpus[docid]
    return f"{doc.title} {doc.text}" if doc.title else doc.text


def first_stage_ranking(
    benchmark: Benchmark,
    qid: str,
    run_name: str = "bm25",
    cache_dir: str | Path | None = None,
    refill: bool = True,
) -> list[str]:
    """A query's first-stage docids, best first (ties in run order), without its ``excluded_ids``: BRIGHT's
    rule, applied before reranking as in Rank-R1/bright/filter_run.py. A run built here (BRIGHT's BM25, top
    100) is searched deeper to keep 100 after the exclusion (``refill``), or, as the official search.sh and
    filter_run.py do, cut at 100 first so the excluded documents leave fewer (``refill=False``)."""
    from rankrl.retrieval.first_stage import ensure_run

    # BRIGHT: BM25 over its documents, built once
    scores = ensure_run(benchmark, run_name, cache_dir=cache_dir, refill=refill).get(qid, {})
    query = benchmark.queries.get(qid)
    excluded = set(query.extra.get("excluded_ids", ())) if query else set()
    return [d for d in sorted(scores, key=lambda d: -scores[d]) if d not in excluded]


def training_pool(benchmark: Benchmark, qid: str, pool_depth: int = 100) -> list[str]:
    """A query's training candidates: ``extra['candidates']`` when the loader sampled them (rankrl.data's
    msmarco-train: 1 positive + 19 Tevatron BM25 negatives), else its first-stage top ``pool_depth``."""
    query = benchmark.queries.get(qid)
    candidates = query.extra.get("candidates") if query else None
    return list(candidates) if candidates is not None else first_stage_ranking(benchmark, qid)[:pool_depth]


def setwise_training_examples(
    benchmark: Benchmark,
    construction: str = "judged_pool",
    num_candidates: int = 20,
    seed: int = 0,
    pool_depth: int = 100,
    text: Callable[[str], str] | None = None,
    reasoning: bool = True,
) -> list[Example]:
    """Setwise training prompts with their gold label (``target['gold']``, 0-based); same seed, same prompts.

    In a query's ``training_pool``, positives have grade >= ``benchmark.relevance_level``, negatives are
    judged 0 or unjudged (grades in between, e.g. DL's "related" 1, are neither). Each prompt is built as
    Rank-R1/create_dataset.py does: shuffle the negatives, keep c-1, put the positive first, shuffle the c
    candidates; the shuffles are seeded by (seed, qid, positive). Constructions:
      * ``msmarco`` (the paper): one prompt per query, its first positive and c-1 = 19 BM25 negatives.
        Needs MS MARCO train (internet).
      * ``judged_pool`` (DL20-judged-pool deviation, for CPU scale here, where MS MARCO train is not
        reachable): the pool is a DL20 query's judged BM25 top-100; one prompt per relevant passage
        (grade >= 2) in it, with c-1 negatives of the same pool; c = 5 at CPU scale. DL19 stays unseen.
      * ``other_queries`` (a positive control, not the paper's task): the positives of ``judged_pool``,
        but the c-1 negatives are drawn from the OTHER queries' pools (never a passage of the query's own
        pool or judged for it), so they are off topic and the positive is the one passage that shares the
        query's words: a signal a small model can learn, where same-pool negatives may be beyond it.
      * ``query_echo`` (the easiest rung of that control): as ``other_queries``, but the gold candidate
        shows the query's own text in place of the positive passage, so picking it needs only matching
        text against text (what induction heads do), not judging relevance.
    Queries without a negative are skipped.
    """
    if construction not in CONSTRUCTIONS:
        raise ValueError(f"unknown construction {construction!r}; valid: {CONSTRUCTIONS}")
    if num_candidates < 2:
        raise ValueError(f"num_candidates must be >= 2, got {num_candidates}")
    text = text or (lambda d: passage_text(benchmark, d))
    pools = {qid: training_pool(benchmark, qid, pool_depth) for qid in sorted(benchmark.qrels)}
    foreign = construction in ("other_queries", "query_echo")
    every_pooled = sorted({d for pool in pools.values() for d in pool}) if foreign else []
    examples = []
    for qid, pool in pools.items():
        grades = benchmark.qrels[qid]
        positives = [d for d in pool if grades.get(d, 0) >= benchmark.relevance_level]
        if foreign:
            own = set(pool) | set(grades)
            negatives = [d for d in every_pooled if d not in own]
        else:
            negatives = [d for d in pool if grades.get(d, 0) <= 0]
        for pos in (positives[:1] if construction == "msmarco" else positives) if negatives else []:
            rng = random.Random(f"{seed}|{qid}|{pos}")
            if foreign:  # thousands of foreign passages: draw c-1, not a shuffle
                negs = rng.sample(negatives, min(num_candidates - 1, len(negatives)))
            else:
                negs = rng.sample(negatives, len(negatives))  # random.shuffle of a copy
            docids = [pos, *negs[: num_candidates - 1]]
            order = rng.sample(range(len(docids)), len(docids))
            docids = [docids[i] for i in order]
            query = benchmark.queries[qid].text
            shown = [query if construction == "query_echo" and d == pos else text(d) for d in docids]
            messages = setwise_messages(query, shown, reasoning)
            target = {"gold": order.index(0), "num_candidates": len(docids), "docids": docids}
            examples.append(Example(f"{benchmark.name}:{qid}:{pos}", messages, target))
    return examples


# ---- 5. Supervised targets: the Setwise SFT baseline, and a format-only warm start -------------------------

SFT_TARGETS = ("gold", "format")
# The warm start's reasoning text: the same generic sentence for every prompt, so it says nothing about
# which passage is relevant; short, so that completions stay cheap at CPU scale.
GENERIC_THINK = "I compare each document with the query and choose the most relevant one."


def sft_completion(example: Example, target: str, reasoning: bool, seed: int = 0) -> str:
    """The SFT target of a training prompt.

    ``gold``: the paper's Setwise SFT baseline, the gold label in the answer tags (with the generic think
    text first when the prompt asks for reasoning). ``format``: the output format only, for a model too
    small to write it zero-shot: generic think text and a label drawn uniformly from 1..c by a generator
    seeded with (seed, uid) alone, so the label is independent of the gold one and of the passages.
    """
    if target == "gold":
        label = example.target["gold"] + 1
    elif target == "format":
        label = random.Random(f"format|{seed}|{example.uid}").randint(1, example.target["num_candidates"])
    else:
        raise ValueError(f"unknown sft target {target!r}; valid: {SFT_TARGETS}")
    answer = f"<answer>[{label}]</answer>"
    return f"<think> {GENERIC_THINK} </think> {answer}" if reasoning else answer


# ---- 6. The task as the training loop sees it --------------------------------------------------------------


@dataclass
class RankR1Task(TaskBase):
    """Rank-R1 training prompts, reward, and Setwise heap-sort evaluation; Hydra builds it by ``_target_``.

    Args:
        train_benchmark / eval_benchmark: ``Benchmark`` objects or names for ``rankrl.data.load_benchmark``
            (from ``data_dir``); they must differ. They need qrels, passage text and ``runs["bm25"]``.
        tokenizer: an HF tokenizer or a path to one, for truncation; ``None`` disables truncation.
        construction, num_candidates, pool_depth: training data (``setwise_training_examples``); c is 20 in
            the paper, e.g. 5 at CPU scale.
        reasoning: the Rank-R1 prompt (``<think>`` then ``<answer>``) or the plain Setwise one.
        query_max_tokens / passage_max_tokens: truncation, 32/512 on DL, 1024/1024 on BRIGHT (paper).
        num_child / k / rerank_depth: heap arity - 1, top passages sorted, first-stage passages reranked
            (19/10/100 in the paper; at CPU scale a smaller depth, the rest keep BM25 order after them).
        shuffle_candidates: show each comparison's candidates in a seeded random order (official code).
        seed: training-data and presentation-order seed.
        sft_target: what ``sft_examples`` teach: ``gold`` (the paper's Setwise SFT baseline) or ``format``
            (a CPU-scale format warm start that carries no relevance signal; ``sft_completion``).
        probe_queries: how many training queries ``monitor`` reranks.
        eval_protocol: ``heapsort`` (the paper: nDCG@10 of Setwise heap sort over the first stage) or
            ``prompts`` (a positive control's read-out: greedy accuracy on the evaluation benchmark's
            prompts, built by ``construction`` as the training prompts are; ``prompt_accuracy``).
        eval_prompts_per_query: with ``eval_protocol=prompts``, at most this many prompts of each evaluation
            query (its first positives in first-stage order; ``None``: all), to bound the cost at CPU scale.
        eval_benchmark_options: options of the evaluation benchmark's loader (``conf/benchmark/<name>.yaml``).
        cache_dir: where a first stage built here (BRIGHT's BM25) is cached (``paths.cache_dir``).
        refill_excluded: a first stage built here keeps ``rerank_depth`` candidates after dropping the
            excluded ones (true), or the top ``rerank_depth`` less them (false: the official BRIGHT runs).
    """

    trains = frozenset({"grpo", "sft"})

    name = "rankr1"

    # where training and evaluation data come from: no default here, conf/task/rankr1.yaml and the task
    # scales (task_scale/rankr1_*.yaml) are their one source
    train_benchmark: str | Benchmark
    eval_benchmark: str | Benchmark
    construction: str
    data_dir: str | Path = "data"
    tokenizer: Any = None
    # the paper's settings: conf/task/rankr1.yaml is their one home (rankrl.conf_defaults)
    num_candidates: int = conf_default("task/rankr1", "num_candidates")
    reasoning: bool = conf_default("task/rankr1", "reasoning")
    query_max_tokens: int | None = conf_default("task/rankr1", "query_max_tokens")
    passage_max_tokens: int | None = conf_default("task/rankr1", "passage_max_tokens")
    num_child: int = conf_default("task/rankr1", "num_child")
    k: int = conf_default("task/rankr1", "k")
    rerank_depth: int = conf_default("task/rankr1", "rerank_depth")
    pool_depth: int = conf_default("task/rankr1", "pool_depth")
    shuffle_candidates: bool = True
    seed: int = 0
    sft_target: str = conf_default("task/rankr1", "sft_target")
    probe_queries: int = conf_default("task/rankr1", "probe_queries")
    eval_protocol: str = "heapsort"
    eval_prompts_per_query: int | None = None
    eval_benchmark_options: dict = field(default_factory=dict)
    cache_dir: str | Path | None = None
    refill_excluded: bool = True

    def __post_init__(self) -> None:
        names = [b if isinstance(b, str) else b.name for b in (self.train_benchmark, self.eval_benchmark)]
        if names[0] == names[1]:
            raise ValueError(f"train and eval benchmark are both {names[0]!r}: evaluate on unseen data")
        if self.sft_target not in SFT_TARGETS:
            raise ValueError(f"unknown sft_target {self.sft_target!r}; valid: {SFT_TARGETS}")
        if self.construction not in CONSTRUCTIONS:
            raise ValueError(f"unknown construction {self.construction!r}; valid: {CONSTRUCTIONS}")
        if self.eval_protocol not in EVAL_PROTOCOLS:
            raise ValueError(f"unknown eval_protocol {self.eval_protocol!r}; valid: {EVAL_PROTOCOLS}")
        if min(self.num_child, self.k, self.rerank_depth) < 1 or self.num_candidates < 2:
            raise ValueError("need num_child, k, rerank_depth >= 1 and num_candidates >= 2")
        if isinstance(self.tokenizer, (str, Path)):
            from transformers import AutoTokenizer

            from rankrl.models import resolve_model  # a local model's folder is built on first use

            self.tokenizer = AutoTokenizer.from_pretrained(resolve_model(self.tokenizer))

    def benchmark(self, role: str) -> Benchmark:
        """The ``train`` or ``eval`` benchmark, loaded on first use."""
        if role not in ("train", "eval"):
            raise ValueError(f"unknown benchmark role {role!r}; valid: 'train', 'eval'")
        name = f"{role}_benchmark"
        if isinstance(getattr(self, name), str):
            from rankrl.data import load_benchmark

            options = self.eval_benchmark_options if role == "eval" else {}
            setattr(self, name, load_benchmark(getattr(self, name), self.data_dir, **options))
        return getattr(self, name)

    def _passage(self, bench: Benchmark, docid: str) -> str:
        return truncate(passage_text(bench, docid), self.tokenizer, self.passage_max_tokens)

    def train_examples(self) -> list[Example]:
        return self._setwise_examples(self.benchmark("train"), self.seed)

    def _setwise_examples(self, bench: Benchmark, seed: int) -> list[Example]:
        text = partial(self._passage, bench)
        args = (self.construction, self.num_candidates, seed, self.pool_depth, text, self.reasoning)
        return setwise_training_examples(bench, *args)

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> Scores:
        """Rank-R1 reward per completion; metrics: reward, accuracy (label == gold), format_error_rate."""
        if len(examples) != len(completions):
            raise ValueError(f"{len(examples)} examples for {len(completions)} completions: need one each")
        gold = [e.target["gold"] for e in examples]
        rewards = torch.tensor([rank_r1_reward(c, g, self.reasoning) for c, g in zip(completions, gold)])
        parsed = [
            parse_answer(c, e.target["num_candidates"], self.reasoning) for c, e in zip(completions, examples)
        ]
        ok = torch.tensor([p is not None for p in parsed], dtype=torch.bool)
        correct = torch.tensor([float(p == g) for p, g in zip(parsed, gold)])
        n = max(len(examples), 1)
        accuracy, format_errors = float(correct.sum()) / n, 1 - float(ok.sum()) / n
        metrics = {
            "reward": float(rewards.sum()) / n,
            "accuracy": accuracy,
            "format_error_rate": format_errors,
            "modal_answer_share": modal_share([p for p in parsed if p is not None]),
        }
        return Scores(rewards, ok, {"correct": correct}, metrics)

    def sft_examples(self) -> list[SFTExample]:
        """The training prompts with a target completion: ``sft_target`` says which (see
        ``sft_completion``)."""
        return [
            SFTExample(ex.uid, ex.messages, sft_completion(ex, self.sft_target, self.reasoning, self.seed))
            for ex in self.train_examples()
        ]

    def monitor(self, generators: Mapping[str, Generator]) -> dict[str, float]:
        """nDCG@10 and the format-error rate of heap sort on ``probe_queries`` fixed TRAINING queries (the
        train benchmark's first judged ones; never the evaluation set); with ``eval_protocol=prompts``, the
        accuracy on those queries' training prompts."""
        bench = self.benchmark("train")
        queries = [bench.queries[q] for q in sorted(bench.qrels)[: self.probe_queries]]
        if self.eval_protocol == "prompts":
            return self.prompt_accuracy(bench, queries, generators[self.role], self.seed)["metrics"]
        out = self._rerank(bench, queries, generators[self.role])
        return {
            **out["metrics"],
            "format_error_rate": out["cost"]["parse_failures"] / max(out["cost"]["comparisons"], 1),
        }

    def evaluate(
        self, generators: Mapping[str, Generator], split: str, limit: int | None = None
    ) -> dict[str, Any]:
        """Rerank each query's BM25 top ``rerank_depth`` by Setwise heap sort; nDCG@10 with trec_eval rules.

        All queries advance together, so one ``generate`` call carries a heap step of every query.
        Returns ``{"metrics", "run", "cost"}``; ``limit`` keeps the first queries (smoke runs only). The
        metrics include the share of comparisons whose answer did not parse (``format_error_rate``).
        """
        bench = self.benchmark("eval")
        if self.eval_protocol == "prompts":
            # the held-out prompts are the same for every training seed: seeds differ only in training
            out = self.prompt_accuracy(bench, bench.split(split)[:limit], generators[self.role], seed=0)
            out["cost"]["queries_total"] = len(bench.split(split))
            return out
        out = self._rerank(bench, bench.split(split)[:limit], generators[self.role])
        cost = out["cost"]
        out["metrics"]["format_error_rate"] = cost["parse_failures"] / max(cost["comparisons"], 1)
        # what the whole split would cost (rankrl.gpu_plan scales a smoke run's cost by it)
        cost.update(
            queries_total=len(bench.split(split)),
            llm_prompts=cost["comparisons"],
            generate_calls=cost["judge_calls"],
        )
        return out

    def prompt_accuracy(
        self, bench: Benchmark, queries: Sequence[Any], generate: Generator, seed: int
    ) -> dict[str, Any]:
        """Answer every Setwise prompt of ``queries`` (built by ``construction`` from ``bench``, as the
        training prompts are) once, greedily as the generator samples; score it with the training reward.

        Returns ``{"metrics", "cost", "per_query"}``: metrics as ``score`` (reward, accuracy = the first
        parsed label is the gold one, format_error_rate, modal_answer_share) over all prompts, and the
        prompt count; per_query, each query's mean reward, accuracy and prompt count (for paired tests).
        """
        import pandas as pd

        wanted, kept = {q.qid for q in queries}, Counter()
        cap = float("inf") if self.eval_prompts_per_query is None else self.eval_prompts_per_query
        examples = []
        for e in self._setwise_examples(bench, seed):  # a query's prompts come in first-stage order
            qid = e.uid.split(":")[1]
            if qid in wanted and kept[qid] < cap:
                examples.append(e)
                kept[qid] += 1
        if not examples:
            raise ValueError(f"no Setwise prompts for the {len(wanted)} queries of {bench.name!r}")
        generations = list(generate([e.messages for e in examples]))
        scores = self.score(examples, [g.text for g in generations])
        rows = pd.DataFrame(
            {
                "qid": [e.uid.split(":")[1] for e in examples],
                "reward": scores.rewards.float().tolist(),
                "accuracy": scores.components["correct"].tolist(),
            }
        )
        per_query = rows.groupby("qid").agg(
            reward=("reward", "mean"), accuracy=("accuracy", "mean"), prompts=("reward", "size")
        )
        cost = {
            "queries": len(per_query),
            "llm_prompts": len(examples),
            "generate_calls": 1,
            "prompt_tokens": sum(g.prompt_tokens for g in generations),
            "completion_tokens": sum(g.completion_tokens for g in generations),
        }
        return {"metrics": {**scores.metrics, "prompts": len(examples)}, "cost": cost, "per_query": per_query}

    def _rerank(self, bench: Benchmark, queries: Sequence[Any], generate: Generator) -> dict[str, Any]:
        from rankrl.eval.metrics import scored_run

        firsts = [
            first_stage_ranking(bench, q.qid, cache_dir=self.cache_dir, refill=self.refill_excluded)
            for q in queries
        ]
        jobs = []
        for q, first in zip(queries, firsts):
            docs = [Document(d, self._passage(bench, d)) for d in first[: self.rerank_depth]]
            jobs.append((truncate(q.text, self.tokenizer, self.query_max_tokens), docs))
        judge = llm_judge(generate, self.reasoning, self.shuffle_candidates, self.seed)
        rankings, costs, calls = rerank_setwise(jobs, judge, self.num_child, self.k)
        run: Run = {}
        for q, first, ranked in zip(queries, firsts, rankings):
            order = ranked + first[self.rerank_depth :]
            run[q.qid] = {d: float(len(order) - i) for i, d in enumerate(order)}
        qrels = {q.qid: bench.qrels[q.qid] for q in queries if q.qid in bench.qrels}  # only what was ranked
        metrics, table = scored_run(run, qrels, ["nDCG@10"], relevance_level=bench.relevance_level)
        totals = {f: sum(getattr(c, f) for c in costs) for f in asdict(SortCost())}
        per_query = {q.qid: asdict(c) for q, c in zip(queries, costs)}
        cost = {**totals, "queries": len(queries), "judge_calls": calls, "per_query": per_query}
        return {"metrics": metrics, "run": run, "cost": cost, "per_query": table}


@dataclass
class ConstantJudgeTask(RankR1Task):
    """A judge that does not read, no LLM: every comparison is answered with label ``answer``. The candidates
    of each comparison are shown in a seeded random order (``shuffle_candidates``), so this is a seeded
    random pick, and the five labels give five such judges. Not a row of the paper: the band they span is
    what any policy that answers by position alone, as a collapsed GRPO policy does, scores with this heap
    sort."""

    uses_model = False
    roles: tuple[str, ...] = ()
    trains = frozenset()  # evaluation only
    answer: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.answer <= self.num_child + 1:
            raise ValueError(
                f"answer must be a label 1..{self.num_child + 1} (heap arity), got {self.answer}"
            )

    def evaluate(
        self, generators: Mapping[str, Generator], split: str, limit: int | None = None
    ) -> dict[str, Any]:
        tags = "<think></think><answer>[{}]</answer>" if self.reasoning else "[{}]"
        text = tags.format(self.answer)
        judge = {self.role: lambda prompts: [Generation(text) for _ in prompts]}
        return super().evaluate(judge, split, limit)
