"""F-GRPO: pools and fixed splits, prompts, the parser (fuzzed), rewards and case rules, span credit on a
real batch, evaluation and the two-step baselines. Nothing here asserts on time."""

from __future__ import annotations

import math
import random
import re
from types import SimpleNamespace

import pytest
import torch

from rankrl.data.records import Benchmark, Document, Query
from rankrl.rollout.base import Generation, Rollouts
from rankrl.tasks import fgrpo
from rankrl.tasks.fgrpo import (
    FGRPOTask,
    Pool,
    PopularityTask,
    TwoStepTask,
    factorized_answer,
    find_phase,
    judge_completion,
    normalise_item,
    parse_completion,
    phase_rewards,
    rank_rewards,
    ranking_metrics,
    sft_rank,
    sft_slate,
    slate_reward,
)
from tests.conftest import require_data

# ----------------------------------------------------------------------------------------------- helpers


def toy_benchmark(num_users: int = 6) -> Benchmark:
    """A MovieLens-like benchmark in memory: 40 movies, each user's history, 20 candidates, one target."""
    corpus = {
        str(i): Document(str(i), f"Movie {i} (199{i % 10})", f"Movie {i} (199{i % 10})") for i in range(40)
    }
    queries, qrels, splits = {}, {}, {"train": [], "dev": [], "test": []}
    for u in range(num_users):
        for split in splits:
            qid = f"{u}-{split}"
            cands = [str((u * 7 + j * 3 + len(qid)) % 40) for j in range(60)]
            cands = list(dict.fromkeys(cands))[:20]
            queries[qid] = Query(
                qid, "", {"history": [str((u + h) % 40) for h in range(8)], "candidates": cands}
            )
            qrels[qid] = {cands[u % 20]: 1}
            splits[split].append(qid)
    return Benchmark("movielens-100k", queries, corpus, qrels, splits)


def toy_task(**kwargs) -> FGRPOTask:
    return FGRPOTask(benchmark=toy_benchmark(), **{"item_ids": True, **kwargs})


def pool_of(task: FGRPOTask, split: str = "train", i: int = 0) -> Pool:
    return task.pools(split)[i]


def answer(pool: Pool, slate: list[str], rank: list[str]) -> str:
    return factorized_answer(pool, slate, rank)


# ------------------------------------------------------------------------------------ pools and splits


@pytest.fixture(scope="module")
def movielens():
    require_data("movielens-100k")
    return FGRPOTask(benchmark="movielens-100k", data_dir=require_data("movielens-100k"), item_ids=True)


def test_movielens_splits_are_fixed_disjoint_and_never_train_on_a_test_item(movielens):
    bench = movielens.bench
    splits = {s: set(bench.splits[s]) for s in ("train", "dev", "test")}
    assert not (splits["train"] & splits["test"]) and not (splits["train"] & splits["dev"])
    assert not (splits["dev"] & splits["test"])
    train = {p.uid.rsplit("-", 1)[0]: p for p in movielens.pools("train")}
    for test in movielens.pools("test"):
        user = test.uid.rsplit("-", 1)[0]
        target = next(iter(test.gold))
        seen_in_training = set(bench.queries[train[user].uid].extra["history"]) | {
            c.key for c in train[user].candidates
        }
        assert target not in seen_in_training, (
            test.uid
        )  # the test item is never in its user's training prompt
    # the same seed gives the same pools (candidates, order, gold)
    again = FGRPOTask(benchmark="movielens-100k", data_dir=movielens.data_dir, item_ids=True)
    assert again.pools("test", 50) == movielens.pools("test", 50)


def test_movielens_leave_one_out_is_by_timestamp(movielens):
    """test = the user's last rated item, dev = the one before, train = the one before that (u.data order)."""
    data = movielens.data_dir / "movielens-100k" / "u.data"
    events: dict[str, list[tuple[int, int]]] = {}
    for line in data.read_text(encoding="latin-1").splitlines():
        fields = re.split(r"[\t|]", line.strip())
        if fields[0].isdigit():
            events.setdefault(fields[0], []).append((int(fields[3]), int(fields[1])))
    user = "1"
    seq = [str(i) for _, i in sorted(events[user])]
    gold = {s: next(iter(movielens.bench.qrels[f"{user}-{s}"])) for s in ("train", "dev", "test")}
    assert (gold["train"], gold["dev"], gold["test"]) == (seq[-3], seq[-2], seq[-1])


@pytest.mark.parametrize("name,lo,hi", [("hotpotqa", 2, 2), ("musique", 2, 4)])
def test_qa_pools_have_twenty_abstract_ids_the_gold_rule_and_disjoint_splits(name, lo, hi):
    data = require_data(name)
    task = FGRPOTask(benchmark=name, data_dir=data)
    questions = {s: {p.uid for p in task.pools(s)} for s in ("train", "dev", "test")}
    assert not (questions["train"] & questions["test"]) and not (questions["dev"] & questions["test"])
    assert not (questions["train"] & questions["dev"])
    for pool in task.pools("train") + task.pools("test"):
        assert [c.label for c in pool.candidates] == [str(i) for i in range(1, 21)]
        assert lo <= len(pool.gold) <= hi
    # the shuffle behind the ids is seeded: same seed, same order; another seed, another order
    same = FGRPOTask(benchmark=name, data_dir=data).pools("test")
    other = FGRPOTask(benchmark=name, data_dir=data, seed=1).pools("test")
    assert same == task.pools("test") and [p.candidates for p in other] != [p.candidates for p in same]


def test_check_pool_rejects_a_broken_benchmark_rule():
    bench = toy_benchmark()
    bench.qrels["0-train"] = {}
    with pytest.raises(ValueError, match="gold items"):
        FGRPOTask(benchmark=bench).pools("train")


def test_names_that_repeat_are_made_distinct():
    bench = toy_benchmark()
    bench.corpus["5"] = Document("5", "x", bench.corpus["6"].title)
    task = FGRPOTask(benchmark=bench)  # names, not ids
    pools = task.pools("train")
    assert pools  # a loop over no pools would assert nothing
    for pool in pools:
        assert len(pool.lookup) == 20


# ---------------------------------------------------------------------------------------------- prompts


def test_prompts_list_every_candidate_and_ask_for_both_tags():
    task = toy_task()
    pool = pool_of(task)
    text = fgrpo.factorized_messages(pool, 10, 5)[1]["content"]
    assert all(f"{c.label}: {c.text}" in text for c in pool.candidates)
    assert "<SLATE>" in text and "<RANK>" in text and "up to 10" in text and "top 5" in text
    ranker = fgrpo.rank_messages(pool, [pool.candidates[3].key], 5)[1]["content"]
    assert pool.candidates[3].text in ranker and pool.candidates[4].text not in ranker


# ----------------------------------------------------------------------------------------------- parser


def test_normalisation_matches_what_a_model_plausibly_writes():
    for written in ["7", " [7] ", "7.", "#7", '"7"', "1. 7"]:
        assert normalise_item(written) == "7", written
    assert normalise_item("  THE   Matrix ") == normalise_item("the matrix")
    assert normalise_item("ＡＢＣ") == "abc"  # NFKC folds full-width letters


def test_well_formed_answer_parses_with_ranges_of_the_contents_only():
    text = "<SLATE>3, 7,12;7</SLATE>\n<RANK>7,3</RANK>"
    parsed = parse_completion(text)
    assert parsed.slate.items == ("3", "7", "12") and parsed.rank.items == ("7", "3")
    assert text[parsed.slate.start : parsed.slate.end] == "3, 7,12;7"
    assert text[parsed.rank.start : parsed.rank.end] == "7,3"


def test_tags_match_in_any_case_and_names_with_commas_split_on_semicolons():
    bench = toy_benchmark()
    bench.corpus["3"] = Document("3", "x", "Shawshank Redemption, The (1994)")
    task = FGRPOTask(benchmark=bench)
    pool = next(p for p in task.pools("train") if "3" in p.by_key)
    assert pool.separators is fgrpo._SPLIT_NAMES  # a name holds a comma: commas do not separate
    judged = judge_completion(
        "<slate>shawshank redemption, the (1994); nope</slate><rank>Shawshank Redemption, The (1994)</Rank>",
        pool,
    )
    assert judged.status == "ok" and judged.slate[0] == "3" and judged.rank == ("3",)


@pytest.mark.parametrize(
    "text,status",
    [
        ("no tags at all", "no_slate"),
        ("<SLATE>1,2</SLATE", "no_slate"),  # unclosed
        ("<SLATE>1,<SLATE>2</SLATE><RANK>1</RANK>", "no_slate"),  # nested
        ("<SLATE>1,<RANK>2</RANK></SLATE>", "no_slate"),  # interleaved
        ("<RANK>1</RANK><SLATE>1</SLATE>", "bad_rank"),  # rank before slate
        ("<SLATE>1,2</SLATE>", "bad_rank"),  # rank missing
        ("<SLATE>1,2</SLATE><RANK>1,2", "bad_rank"),  # rank unclosed
        ("<SLATE>1,2</SLATE><RANK> , ;</RANK>", "bad_rank"),  # rank empty
        ("<SLATE>1,2</SLATE><RANK>1,<RANK>2</RANK>", "bad_rank"),  # rank nested
        ("<SLATE>1,2</SLATE><RANK>2,3</RANK>", "outside_slate"),  # 3 was not proposed
        ("<SLATE>1,2</SLATE><RANK>2,banana</RANK>", "outside_slate"),  # unknown item
        ("<SLATE>1,2,2,banana</SLATE><RANK>2,2,1,banana</RANK>", "ok"),  # repeats counted once
    ],
)
def test_case_rules(text, status):
    pool = pool_of(toy_task())
    assert judge_completion(text, pool).status == status


def test_penalties_follow_the_case_rules():
    task = toy_task()
    pool = pool_of(task)
    gold = next(iter(pool.gold))
    other = next(c.key for c in pool.candidates if c.key != gold)
    label = lambda key: pool.by_key[key].label  # noqa: E731
    texts = [
        "nothing",  # both phases penalised
        f"<SLATE>{label(gold)},{label(other)}</SLATE>",  # rank phase penalised only
        f"<SLATE>{label(gold)},{label(other)}</SLATE><RANK>{label(other)},{label(gold)}</RANK>",
        f"<SLATE>{label(other)}</SLATE><RANK>{label(other)},{label(gold)}</RANK>",  # gold outside the slate
    ]
    judged = [judge_completion(t, pool) for t in texts]
    r_slate, r_rank = phase_rewards(judged, [pool] * 4)
    assert r_slate.tolist() == [-1.0, 1.0, 1.0, 0.0]
    assert r_rank[:2].tolist() == [-1.0, -1.0] and r_rank[3] == -1.0
    assert r_rank[2] == pytest.approx(1 / math.log2(3))  # the gold item at rank 2


def test_only_the_first_n_slate_and_k_rank_items_count():
    pool = pool_of(toy_task())
    gold = pool.by_key[next(iter(pool.gold))].label
    others = [c.label for c in pool.candidates if c.label != gold]
    late = ",".join(others[:10] + [gold])
    judged = judge_completion(f"<SLATE>{late}</SLATE><RANK>{','.join(others[:6])}</RANK>", pool, n=10, k=5)
    assert len(judged.slate) == 10 and next(iter(pool.gold)) not in judged.slate and len(judged.rank) == 5


# A fuzzer's vocabulary: tags and near-miss tags, separators, candidate labels and names, unknown items and
# awkward Unicode (a length-changing lowercase, NFKC expansions, combining marks, RTL, emoji, NUL).
PIECES = [
    "<SLATE>",
    "</SLATE>",
    "<RANK>",
    "</RANK>",
    "<slate>",
    "</Rank>",
    "<SLATE",
    "SLATE>",
    "</",
    "<",
    ">",
    "<SLATE><SLATE>",
    "</RANK></RANK>",
    ",",
    ";",
    "\n",
    " ",
    ", ",
    "[",
    "]",
    "1.",
    "-",
    "#",
    '"',
]
WORDS = [
    "1",
    "2",
    "7",
    "19",
    "20",
    "21",
    "0",
    "banana",
    "Movie 3 (1993)",
    "movie 3 (1993)",
    "\u0130stanbul",
    "\ufdfa",
    "e\u0301",
    "\u05e9\u05dc\u05d5\u05dd",
    "\U0001f600",
    "\x00",
    "ß",
    "\u212a",
    "   ",
    "x" * 50,
]


def fuzz_completions(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        if i % 2:  # near-misses of the skeleton <SLATE> items </SLATE> <RANK> items </RANK>
            parts = []
            for tag, count in (("SLATE", rng.randrange(0, 14)), ("RANK", rng.randrange(0, 7))):
                items = [rng.choice(WORDS) for _ in range(count)]
                body = rng.choice([",", ";", "\n", ", "]).join(items)
                opening, closing = f"<{tag}>", f"</{tag}>"
                if rng.random() < 0.15:
                    opening = rng.choice(PIECES)
                if rng.random() < 0.15:
                    closing = rng.choice(PIECES)
                parts += [opening, body, closing, rng.choice(["", "\n", " "])]
            if rng.random() < 0.2:
                rng.shuffle(parts)
            out.append("".join(parts))
        else:  # free sequences of pieces and words, sometimes very long
            length = rng.choice([0, 1, 5, 30, 200, 2000])
            out.append(
                "".join(
                    rng.choice(PIECES) if rng.random() < 0.4 else rng.choice(WORDS) for _ in range(length)
                )
            )
    return out


def test_parser_fuzz_never_raises_and_keeps_its_invariants():
    task = toy_task()
    pool = pool_of(task)
    texts = fuzz_completions(10_000)
    assert len(texts) >= 10_000
    judged = [judge_completion(t, pool, n=10, k=5) for t in texts]
    statuses = {j.status for j in judged}
    assert statuses == {"ok", "no_slate", "bad_rank", "outside_slate"}  # the fuzzer reaches every case
    for text, j in zip(texts, judged):
        for rng_ in (j.slate_range, j.rank_range):
            assert rng_ is None or 0 <= rng_[0] <= rng_[1] <= len(text)
        if j.status in ("ok", "outside_slate", "bad_rank"):
            assert not fgrpo._ANY_TAG.search(text[j.slate_range[0] : j.slate_range[1]])
            assert len(j.slate) <= 10
        if j.status in ("ok", "outside_slate"):
            assert not fgrpo._ANY_TAG.search(text[j.rank_range[0] : j.rank_range[1]])
            assert 1 <= len(j.rank) <= 5
        if j.status == "ok":
            assert set(j.rank) <= set(j.slate)
    for start in range(0, len(judged), 2_500):  # the rewards of every case are finite and in range
        r_slate, r_rank = phase_rewards(
            judged[start : start + 2_500], [pool] * len(judged[start : start + 2_500])
        )
        assert torch.all((r_slate == -1) | ((r_slate >= 0) & (r_slate <= 1)))
        assert torch.all((r_rank == -1) | ((r_rank >= 0) & (r_rank <= 1)))


def test_parser_agrees_with_a_regex_reference_on_tag_free_contents():
    compared = {"closed": 0, "none": 0}
    for text in fuzz_completions(3_000, seed=1):
        found, _ = find_phase(text, "SLATE")
        ref = re.search(r"<SLATE>(.*?)</SLATE>", text, re.DOTALL | re.IGNORECASE)
        if ref is not None and not fgrpo._ANY_TAG.search(ref.group(1)):
            assert found is not None and text[found.start : found.end] == ref.group(1)
            compared["closed"] += 1
        elif ref is None:
            assert found is None
            compared["none"] += 1
    # the fuzz reaches both cases often (a branch it never took would have checked nothing)
    assert min(compared.values()) >= 100, compared


def test_parser_handles_very_long_inputs():
    pool = pool_of(toy_task())
    inputs = [
        "<SLATE>" + "1," * 100_000 + "</SLATE><RANK>" + "1," * 100_000 + "</RANK>",
        "<SLATE>" * 30_000,  # 210k characters, never closed
        "<" * 200_000,
        "<SLATE>1</SLATE>" + "<RANK>" * 35_000,  # a rank opened again and again
        "x" * 200_000,
    ]
    for text in inputs:
        assert len(text) >= 200_000
        judge_completion(text, pool)
        parse_completion(text)
    assert judge_completion(inputs[0], pool).status == "ok"
    assert parse_completion(None).slate is None  # not even a string


# ---------------------------------------------------------------------------------------------- rewards


def test_slate_reward_recall_and_f1():
    gold = frozenset({"a", "b"})
    assert slate_reward(["a", "x", "y", "z"], gold) == 0.5
    assert slate_reward(["a", "x", "y", "z"], gold, "f1") == pytest.approx(2 * 0.25 * 0.5 / 0.75)
    assert slate_reward(["a", "b", "a"], gold) == 1.0


def test_rank_reward_is_ndcg_at_k_by_ir_measures():
    ndcg = rank_rewards(
        [["x", "a"], ["a", "b"], ["b", "x", "y", "z", "w", "a"]],
        [frozenset({"a"}), frozenset({"a", "b"}), frozenset({"a", "b"})],
        k=5,
    )
    assert ndcg[0] == pytest.approx(1 / math.log2(3))
    assert ndcg[1] == pytest.approx(1.0)
    assert ndcg[2] == pytest.approx(1 / (1 + 1 / math.log2(3)))  # "a" sits at rank 6, past the cutoff


def test_sft_targets_are_perfect_answers():
    task = toy_task(slate_size=10, rank_size=5)
    for pool, ex in zip(task.train_pools(), task.sft_examples()):
        judged = judge_completion(ex.completion, pool)
        r_slate, r_rank = phase_rewards([judged], [pool])
        assert judged.status == "ok" and len(judged.slate) == 10 and len(judged.rank) == 5
        assert r_slate.item() == 1.0 and r_rank.item() == 1.0
    pool = pool_of(task)
    assert sft_slate(pool, 10, 0) == sft_slate(pool, 10, 0) != sft_slate(pool, 10, 1)
    assert sft_rank(pool, sft_slate(pool, 10, 0), 5)[0] in pool.gold


def test_sft_examples_for_any_pools_and_target_match_the_tasks_own():
    """The task's SFT examples are ``sft_examples_for`` its training pools; another target (what a probe
    teacher-forces) changes only the answers, and ``gold_fixed`` fills the slate with the first non-gold
    ids."""
    task = toy_task(slate_size=10, rank_size=5, sft_target="gold")
    pools = task.train_pools()
    assert task.sft_examples() == task.sft_examples_for(pools)
    fixed = task.sft_examples_for(pools, "gold_fixed")
    assert [e.messages for e in fixed] == [e.messages for e in task.sft_examples()]
    for pool, ex in zip(pools, fixed):
        others = [c.key for c in pool.candidates if c.key not in pool.gold]
        slate = [c.key for c in pool.candidates if c.key in pool.gold or c.key in others[:9]]
        assert ex.completion == factorized_answer(pool, slate, sft_rank(pool, slate, 5))
    with pytest.raises(ValueError, match="valid: gold, gold_fixed, gold_first, format"):
        task.sft_examples_for(pools, "silver")


def test_score_gives_spans_for_f_grpo_and_one_reward_for_grpo():
    for factorized in (True, False):
        task = toy_task(factorized=factorized, lam=2.0)
        examples = task.train_examples()[:2]
        rows = [e for e in examples for _ in range(2)]
        texts = [
            task.sft_examples()[0].completion,
            "junk",
            task.sft_examples()[1].completion,
            "<SLATE>1</SLATE>",
        ]
        scores = task.score(rows, texts)
        r_slate, r_rank = scores.components["slate"], scores.components["rank"]
        torch.testing.assert_close(scores.rewards, r_slate + 2.0 * r_rank)
        assert scores.format_ok.tolist() == [True, False, True, False]
        assert {"slate_recall", "rank_ndcg", "format_error_rate"} <= set(scores.metrics)
        assert (scores.spans is not None) == factorized
        if factorized:
            assert scores.spans["slate"].ranges[1] == (0, 4) == scores.spans["rank"].ranges[1]  # no slate
            assert scores.spans["rank"].ranges[3] is None  # nothing after </SLATE> to blame


# ------------------------------------------------------------------------- span credit on a real batch


class LogitsProbe(torch.nn.Module):
    """The tiny model, keeping the gradient of its output logits: column t of the logits predicts
    completion token t, so a token outside every loss term must get an all-zero gradient column."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model, self.logits = model, None

    def forward(self, **kwargs):
        out = self.model(**kwargs)
        out.logits.retain_grad()
        self.logits = out.logits
        return out


def real_batch(task, tok, texts_per_example, examples):
    from rankrl.rl.batch import to_policy_batch
    from rankrl.rollout.hf import render_prompts

    rows = [e for e, texts in zip(examples, texts_per_example) for _ in texts]
    texts = [t for ts in texts_per_example for t in ts]
    prompt_ids = render_prompts(tok, [e.messages for e in rows])
    completion_ids = [tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in texts]
    rollouts = Rollouts(
        prompt_ids,
        completion_ids,
        [[0.0] * len(c) for c in completion_ids],
        texts,
        group_size=len(texts_per_example[0]),
    )
    return rows, texts, rollouts, to_policy_batch(rollouts, tok.pad_token_id)


def logits_gradient(model, batch, advantages, cfg):
    """(N, T, V): the loss's gradient on the logits that predict each completion token."""
    from rankrl.rl.steps import backward_batch

    probe = LogitsProbe(model)
    model.zero_grad(set_to_none=True)
    backward_batch(probe, batch, advantages, cfg)
    return probe.logits.grad[:, :-1]


def logits_grad(model, batch, advantages, cfg):
    return logits_gradient(model, batch, advantages, cfg).abs().sum(-1)  # (N, T): gradient mass per token


def span_loss_config():
    """F-GRPO's loss settings (one group of 4, Dr. GRPO advantages, lambda 1) in one forward, so a logits
    probe holds every completion column (the shared-prefix forward's span gradients equal these:
    tests/rl/test_shared_prefix.py)."""
    from rankrl.rl.config import TrainerConfig

    return TrainerConfig(
        group_size=4,
        micro_batch_size=8,
        advantage="dr_grpo",
        loss_agg="grpo",
        span_weights={"rank": 1.0},
        shared_prefix=False,
    )


def test_on_a_real_batch_rank_reward_moves_only_rank_advantages_and_delimiters_get_no_gradient(model_dir):
    """A real F-GRPO batch: MovieLens-like pools, the tiny model and its (SmolLM2) tokenizer, completions in
    the trained format. Changing only the ranks (so only R_rank) changes only the rank advantages and the
    gradient on rank tokens; delimiter tokens (the tags, the newline between them, end of turn) get none."""
    from rankrl.models import load_policy
    from rankrl.rl.spans import SpanBatch
    from rankrl.rl.steps import GRPOStep

    policy, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    task = toy_task(
        id_style="letters"
    )  # the CPU-scale format: "<SLATE>a c f ...</SLATE>\n<RANK>f a ...</RANK>"
    examples = task.train_examples()[:2]
    pools = [e.target for e in examples]

    def completions(pool, rank_first_gold: list[bool]):
        gold = [c.key for c in pool.candidates if c.key in pool.gold]
        others = [c.key for c in pool.candidates if c.key not in pool.gold]
        slates = [gold + others[:9], others[:10], gold + others[3:12], others[5:15]]
        out = []
        for slate, first in zip(slates, rank_first_gold):
            in_slate_gold = [s for s in slate if s in pool.gold]
            rest = [s for s in slate if s not in pool.gold]
            rank = (in_slate_gold + rest)[:5] if first else (rest[:4] + in_slate_gold + rest[4:])[:5]
            out.append(answer(pool, slate, rank))
        return out

    before = [completions(p, [True, True, True, True]) for p in pools]
    after = [completions(p, [False, True, True, False]) for p in pools]  # the gold item pushed to rank 5
    cfg = span_loss_config()
    step = SimpleNamespace(cfg=cfg, tokenizer=tok)  # GRPOStep.advantages needs only these
    results = []
    for texts in (before, after):
        rows, flat, rollouts, batch = real_batch(task, tok, texts, examples)
        scores = task.score(rows, flat)
        advantages = GRPOStep.advantages(step, scores, rollouts, batch)
        assert isinstance(advantages, SpanBatch)
        results.append((flat, rollouts, batch, scores, advantages))
    (texts_a, roll_a, batch_a, scores_a, adv_a), (texts_b, roll_b, batch_b, scores_b, adv_b) = results

    # only R_rank changed, so only the rank advantages did
    torch.testing.assert_close(scores_a.spans["slate"].rewards, scores_b.spans["slate"].rewards)
    assert not torch.equal(scores_a.spans["rank"].rewards, scores_b.spans["rank"].rewards)
    assert torch.equal(adv_a.advantages["slate"], adv_b.advantages["slate"])
    assert not torch.equal(adv_a.advantages["rank"], adv_b.advantages["rank"])

    grads = [logits_grad(policy, batch, adv, cfg) for batch, adv in ((batch_a, adv_a), (batch_b, adv_b))]
    for (texts, rollouts, _batch, adv), grad in zip(
        ((texts_a, roll_a, batch_a, adv_a), (texts_b, roll_b, batch_b, adv_b)), grads
    ):
        for row, (text, ids) in enumerate(zip(texts, rollouts.completion_ids)):
            slate_mask, rank_mask = adv.masks["slate"][row], adv.masks["rank"][row]
            # the contents by a plain regex: a token wholly inside one is content, every other is a delimiter
            contents = [
                re.search(f"<{tag}>(.*?)</{tag}>", text, re.DOTALL).span(1) for tag in ("SLATE", "RANK")
            ]
            pos, delimiters = 0, 0
            for t, tok_id in enumerate(ids):
                piece = tok.decode([tok_id], skip_special_tokens=True)
                delimiter = not piece or not any(lo <= pos and pos + len(piece) <= hi for lo, hi in contents)
                delimiters += delimiter
                if delimiter:
                    assert slate_mask[t] == 0 and rank_mask[t] == 0, (row, t, piece)
                    assert grad[row, t] == 0, (row, t, piece)  # exactly zero: in no loss term
                else:
                    assert slate_mask[t] + rank_mask[t] == 1, (row, t, piece)
                    a = adv.advantages["slate" if slate_mask[t] else "rank"][row]
                    assert (grad[row, t] > 0) == bool(a != 0), (row, t, piece)
                pos += len(piece)
            assert delimiters >= 4 * 3 + 2, (
                row,
                delimiters,
            )  # four tags of 3+ tokens, the newline, end of turn
    # the slate tokens saw the same prefix and the same advantage: the same gradient; the rank tokens of the
    # changed rows did not
    slate_cols = adv_a.masks["slate"].bool()
    width = min(grads[0].shape[1], grads[1].shape[1])
    torch.testing.assert_close(
        grads[0][:, :width][slate_cols[:, :width]],
        grads[1][:, :width][slate_cols[:, :width]],
        rtol=1e-4,
        atol=1e-7,
    )
    rank_a, rank_b = (g[:, :width] * a.masks["rank"][:, :width] for g, a in zip(grads, (adv_a, adv_b)))
    assert not torch.allclose(rank_a, rank_b)


def test_delimiters_in_loss_puts_each_tag_in_its_phase_span_and_gives_closing_tags_gradient(model_dir):
    """task.delimiters_in_loss=true (#41's diagnosis arm): on a real batch every token of
    ``<SLATE>...</SLATE>`` is in the slate mask and every token of ``<RANK>...</RANK>`` in the rank mask, so
    the closing tags get gradient; the newline between the phases and end of turn stay in neither. The
    default keeps the paper's C.2 (the test above)."""
    from rankrl.models import load_policy
    from rankrl.rl.steps import GRPOStep

    policy, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    task = toy_task(id_style="letters", delimiters_in_loss=True)
    example = task.train_examples()[0]
    pool = example.target
    gold = [c.key for c in pool.candidates if c.key in pool.gold]
    others = [c.key for c in pool.candidates if c.key not in pool.gold]
    texts = [
        answer(pool, gold + others[:9], gold + others[:4]),
        answer(pool, others[:10], others[:5]),
        answer(pool, gold + others[2:11], others[:4] + gold),
        answer(pool, others[3:13], others[3:8]),
    ]
    cfg = span_loss_config()
    rows, flat, rollouts, batch = real_batch(task, tok, [texts], [example])
    scores = task.score(rows, flat)
    adv = GRPOStep.advantages(SimpleNamespace(cfg=cfg, tokenizer=tok), scores, rollouts, batch)
    assert all(adv.advantages[k].abs().sum() > 0 for k in ("slate", "rank"))
    grad = logits_grad(policy, batch, adv, cfg)
    for row, (text, ids) in enumerate(zip(flat, rollouts.completion_ids)):
        whole = {tag: re.search(f"<{tag}>.*?</{tag}>", text, re.DOTALL).span() for tag in ("SLATE", "RANK")}
        closing = {tag: (whole[tag][1] - len(f"</{tag}>"), whole[tag][1]) for tag in whole}
        pos = 0
        for t, tok_id in enumerate(ids):
            piece = tok.decode([tok_id], skip_special_tokens=True)
            inside = {
                tag: bool(piece) and lo <= pos and pos + len(piece) <= hi for tag, (lo, hi) in whole.items()
            }
            assert adv.masks["slate"][row, t] == inside["SLATE"], (row, t, piece)
            assert adv.masks["rank"][row, t] == inside["RANK"], (row, t, piece)
            in_closing_tag = any(bool(piece) and lo <= pos < hi for lo, hi in closing.values())
            if in_closing_tag:
                a = adv.advantages["slate" if inside["SLATE"] else "rank"][row]
                assert (grad[row, t] > 0) == bool(a != 0), (row, t, piece)
            pos += len(piece)
    # the default masks them: the same texts put no tag token in either span
    paper = toy_task(id_style="letters")
    spans = paper.score(rows, flat).spans
    for row, text in enumerate(flat):
        assert spans["slate"].ranges[row] == re.search("<SLATE>(.*?)</SLATE>", text, re.DOTALL).span(1)


# ------------------------------------------------------------------------------------------- evaluation


def oracle(pools_by_prompt, right: bool = True):
    """A generator that answers each prompt with the SFT target (or with the gold item left out)."""

    def generate(prompts):
        out = []
        for messages in prompts:
            pool = pools_by_prompt[messages[1]["content"]]
            slate = sft_slate(pool, 10)
            if not right:
                slate = [s for s in slate if s not in pool.gold]
            out.append(Generation(answer(pool, slate, sft_rank(pool, slate, 5)), 10, 5))
        return out

    return generate


def test_evaluate_with_an_oracle_and_with_a_slate_that_misses_gold():
    task = toy_task()
    pools = task.pools("test")
    prompts = {fgrpo.factorized_messages(p, 10, 5)[1]["content"]: p for p in pools}
    good = task.evaluate({"policy": oracle(prompts)}, "test")["metrics"]
    assert good["R@1"] == good["nDCG@5"] == good["Hit@1"] == good["slate_recall"] == 1.0
    assert good["format_error_rate"] == 0.0 and good["miss_slate@5"] == good["miss_rank@5"] == 0.0
    bad_out = task.evaluate({"policy": oracle(prompts, right=False)}, "test", limit=3)
    bad = bad_out["metrics"]
    assert bad["R@5"] == 0.0 and bad["miss_slate@5"] == 1.0 and bad["miss_rank@1"] == 0.0
    cost = bad_out["cost"]  # 3 of the split's queries, one LLM prompt each
    assert (cost["queries"], cost["queries_total"], cost["llm_prompts"]) == (3, len(pools), 3)
    # a scale's eval_queries cap (the smoke's 4) does not shrink the split the GPU plan sizes evaluations by
    capped = toy_task(eval_queries=2).evaluate({"policy": oracle(prompts)}, "test")["cost"]
    assert (capped["queries"], capped["queries_total"]) == (2, len(pools)) and len(pools) > 2
    # the per-query values behind the means (per_query.csv), named as the metrics are
    per_query = bad_out["per_query"]
    assert len(per_query) == 3 and {"R@5", "Hit@1", "nDCG@5", "slate_recall"} <= set(per_query.columns)
    for name in ("R@5", "Hit@3", "nDCG@5", "slate_recall", "slate_precision"):
        assert per_query[name].mean() == pytest.approx(bad[name])


def test_error_attribution_separates_slate_misses_from_rank_drops():
    task = toy_task()
    pools = task.pools("test")[:2]
    gold = [next(iter(p.gold)) for p in pools]
    others = [[c.key for c in p.candidates if c.key not in p.gold] for p in pools]
    slates = [[gold[0], *others[0][:9]], others[1][:10]]  # query 0 proposes its gold item, query 1 does not
    rankings = [others[0][:5], others[1][:5]]  # neither ranks it
    m = ranking_metrics(pools, slates, rankings)
    assert m["miss_slate@5"] == 0.5 and m["miss_rank@5"] == 0.5 and m["R@5"] == 0.0
    assert m["slate_recall"] == 0.5 and m["slate_precision"] == pytest.approx(0.05)


def test_two_step_pipeline_and_decoupled_sft_targets():
    task = TwoStepTask(benchmark=toy_benchmark(), item_ids=True)
    pools = task.pools("test")
    by_prompt = {fgrpo.select_messages(p, 10)[1]["content"]: p for p in pools}
    seen_by_ranker = []

    def selector(prompts):
        return [
            Generation(
                "<SLATE>"
                f"{fgrpo.write_items(by_prompt[m[1]['content']], sft_slate(by_prompt[m[1]['content']], 10))}"
                "</SLATE>"
            )
            for m in prompts
        ]

    def ranker(prompts):
        seen_by_ranker.extend(prompts)
        out = []
        for m in prompts:
            shown = re.findall(r"^(\d+): ", m[1]["content"], re.MULTILINE)
            out.append(Generation(f"<RANK>{' '.join(shown[:5])}</RANK>"))
        return out

    metrics = task.evaluate({"selector": selector, "ranker": ranker}, "test")["metrics"]
    assert metrics["slate_recall"] == 1.0 and metrics["format_error_rate"] == 0.0
    assert len(seen_by_ranker) == len(pools) and all("<RANK>" in m[1]["content"] for m in seen_by_ranker)
    for role, tag in (("selector", "<SLATE>"), ("ranker", "<RANK>")):
        task.bind(role, {})
        targets = task.sft_examples()
        assert all(t.completion.startswith(tag) for t in targets) and len(targets) == len(task.train_pools())
    # what it does not serve, it lacks: a GRPO config stops at build time (tests/config/test_compose.py)
    assert TwoStepTask.trains == {"sft"}
    assert not hasattr(task, "train_examples") and not hasattr(task, "score")


def test_each_row_has_the_methods_of_what_it_trains_and_no_other():
    """The three tasks share settings and pools, not methods: none inherits another's training."""
    assert FGRPOTask.trains == {"grpo", "sft"}
    assert not {FGRPOTask, PopularityTask} & set(TwoStepTask.__mro__)
    assert not {FGRPOTask, TwoStepTask} & set(PopularityTask.__mro__)
    assert all(issubclass(t, fgrpo.FGRPOSettings) for t in (FGRPOTask, TwoStepTask, PopularityTask))


def test_task_rejects_bad_settings():
    with pytest.raises(ValueError, match="benchmark"):
        FGRPOTask(benchmark="dl19")
    with pytest.raises(ValueError, match="slate_reward"):
        FGRPOTask(benchmark="movielens-100k", slate_reward="precision")
    with pytest.raises(ValueError, match="rank_size"):
        FGRPOTask(benchmark="movielens-100k", slate_size=3, rank_size=5)


# ------------------------------------------------------------------------ the reproduction, end to end


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a whole reproduce script on the tiny model: minutes
def test_reproduce_script_end_to_end_with_the_tiny_model(tmp_path, data_dir, model_dir):
    """`make reproduce-fgrpo`'s script on the tiny model and a few queries: every row runs (zero-shot,
    two-step, SFT -> F-GRPO, GRPO from the same SFT, decoupled SFT with two roles, both sweeps as Hydra
    multiruns), the tables, figures and gains are written, and a second run skips everything."""
    import json
    import os
    import subprocess

    from rankrl.config import REPO_ROOT

    runs, report = tmp_path / "runs", tmp_path / "report"
    env = {
        **os.environ,
        "RANKRL_LOG_DIR": str(runs),
        "REPORT_DIR": str(report),
        "MODELS": "tiny",
        "OVERRIDES": "eval_limit=2 trainer.max_steps=2 task.train_queries=8 "
        "trainer.sampling.max_new_tokens=8 evaluation.sampling.max_new_tokens=8",
    }
    script = REPO_ROOT / "experiments" / "fgrpo" / "reproduce.sh"
    first = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=3000)
    assert first.returncode == 0, first.stderr[-3000:]
    root = runs / "fgrpo"
    rows = [
        *(
            f"{k}_{b}/cpu-tiny/seed0"
            for k in ("zeroshot", "twostep")
            for b in ("movielens", "lastfm", "hotpotqa", "musique")
        ),
        "fgrpo_movielens/cpu-tiny/seed0/sft",
        "fgrpo_movielens/cpu-tiny/seed0/fgrpo",
        "grpo_movielens/cpu-tiny/seed0/grpo",
        "decoupled_movielens/cpu-tiny/seed0/sft_selector",
        "decoupled_movielens/cpu-tiny/seed0/sft_ranker",
        "decoupled_movielens/cpu-tiny/seed0/eval",
        "sweep_lam/cpu-tiny/lam0.5",
        "sweep_lam/cpu-tiny/lam2",
        "sweep_n/cpu-tiny/n5",
        "sweep_n/cpu-tiny/n15",
    ]
    for row in rows:
        record = json.loads((root / row / "metrics.json").read_text())
        assert {"R@3", "nDCG@5", "slate_recall", "miss_slate@5"} <= set(record["metrics"]), row
    sft = root / "fgrpo_movielens/cpu-tiny/seed0/sft"
    for started in ("grpo_movielens/cpu-tiny/seed0/grpo", "sweep_lam/cpu-tiny/lam2", "sweep_n/cpu-tiny/n15"):
        assert json.loads((root / started / "metrics.json").read_text())["roles"]["policy"][
            "init_from"
        ] == str(sft.resolve())
    assert (
        json.loads((root / "sweep_lam/cpu-tiny/lam2/metrics.json").read_text())["experiment"]
        == "fgrpo/sweep_lam/lam2"
    )
    import pandas as pd

    table = pd.read_csv(report / "movielens.csv", dtype=str).fillna("")
    zero_shot = table[(table["method"] == "Zero-shot (one call)") & (table["model"] == "tiny")]
    assert len(zero_shot) == 1 and "first 2 queries" in zero_shot["note"].iloc[0]
    assert (
        table[table["source"] == "ours"]["method"] == "F-GRPO (from SFT)"
    ).sum() == 3  # cpu, qwen3-4b, qwen3.5-2b
    # one figure per model (figures.yaml per_model)
    assert (report / "fgrpo_training_curves_tiny.png").exists() and (report / "relative_gains.md").exists()
    again = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and again.stdout.count(": done") >= 10, again.stdout[-2000:]


def test_popularity_baseline_ranks_by_training_counts_with_no_model():
    bench = toy_benchmark()
    # counts that make the gold item of every query the most popular candidate but one
    run = {}
    for qid, q in bench.queries.items():
        gold = next(iter(bench.qrels[qid]))
        others = [c for c in q.extra["candidates"] if c != gold]
        run[qid] = {c: float(i) for i, c in enumerate(reversed(others))} | {gold: float(len(others) - 1.5)}
    bench.runs["popularity"] = run
    task = PopularityTask(benchmark=bench, item_ids=True)
    assert task.uses_model is False and task.roles == () and not task.trains
    out = task.evaluate({}, "test")
    m = out["metrics"]
    assert m["R@1"] == 0.0 and m["R@3"] == m["R@5"] == m["slate_recall"] == 1.0
    assert m["nDCG@3"] == pytest.approx(1 / math.log2(3)) and m["format_error_rate"] == 0.0
    assert out["cost"]["llm_calls"] == 0 and len(out["per_query"]) == len(bench.splits["test"])
    # ties keep the pool's presented order
    flat = {qid: dict.fromkeys(q.extra["candidates"], 1.0) for qid, q in bench.queries.items()}
    bench.runs["popularity"] = flat
    tied = PopularityTask(benchmark=bench, item_ids=True)
    pool = tied.pools("test")[0]
    ranked = tied.evaluate({}, "test", limit=1)["run"][pool.uid]
    assert list(ranked) == [c.key for c in pool.candidates[:5]]
    with pytest.raises(ValueError, match="recommendation benchmark"):
        PopularityTask(benchmark="hotpotqa")
    assert not any(hasattr(task, m) for m in ("train_examples", "sft_examples", "score"))


def test_end_of_turn_in_rank_blames_a_stop_right_after_the_slate_on_its_eos(model_dir):
    """task.end_of_turn_in_rank=true (#41's stop-after-slate arm): on a real batch the eos of every
    completion is in the rank mask, so a completion that stops right after ``</SLATE>`` (no rank text at
    all) gets R_rank's penalty on its eos and the update lowers the eos logit there; with the default the
    eos is in no span and gets no gradient, which is the hole the arm closes."""
    from rankrl.models import load_policy
    from rankrl.rl.steps import GRPOStep

    policy, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    cfg = span_loss_config()
    for claimed in (False, True):
        task = toy_task(id_style="letters", delimiters_in_loss=True, end_of_turn_in_rank=claimed)
        example = task.train_examples()[0]
        pool = example.target
        gold = [c.key for c in pool.candidates if c.key in pool.gold]
        others = [c.key for c in pool.candidates if c.key not in pool.gold]
        good = answer(pool, gold + others[:9], gold + others[:4])
        slate_only = good[: good.index("</SLATE>") + len("</SLATE>")]
        texts = [good, slate_only, slate_only + "\n", answer(pool, others[:10], others[:5])]
        rows, flat, rollouts, batch = real_batch(task, tok, [texts], [example])
        scores = task.score(rows, flat)
        assert scores.metrics["bad_rank_rate"] == 0.5
        adv = GRPOStep.advantages(SimpleNamespace(cfg=cfg, tokenizer=tok), scores, rollouts, batch)
        grad = logits_gradient(policy, batch, adv, cfg)
        for row, ids in enumerate(rollouts.completion_ids):
            eos = len(ids) - 1
            assert adv.masks["slate"][row, eos] == 0
            assert adv.masks["rank"][row, eos] == float(claimed), (claimed, row)
            eos_grad = grad[row, eos, tok.eos_token_id]
            if not claimed:
                assert grad[row, eos].abs().sum() == 0, row
            elif row == 1:  # stopped right after </SLATE>: the rank penalty, so descent lowers the eos logit
                assert adv.advantages["rank"][row] < 0 and eos_grad > 0
            # the text tokens keep the delimiters arm's masks: the newline of row 2 is the rank's tail
            if row == 2:
                newline = eos - 1
                assert tok.decode([ids[newline]]) == "\n" and adv.masks["rank"][row, newline] == 1
