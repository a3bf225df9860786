"""F-GRPO: one LLM writes a slate of candidates and then ranks it, in one rollout (Surana et al., 2026).

The method, in the order of the paper (arXiv 2605.12995):
1. Problem. A context x (a user's history, or a question) and a pool E of 20 candidates. The policy writes
   ``<SLATE>`` up to n items of E ``</SLATE>`` (the slate tau), then ``<RANK>`` its top k of them, best first
   ``</RANK>`` (the permutation sigma), in one autoregressive pass (n = 10, k = 5 by default).
2. Two rewards. ``R_slate(x, tau)`` is order-invariant coverage of the distinct relevant items (recall;
   F1 is the paper's ablation); ``R_rank(x, tau, sigma)`` is the position-aware utility of the ranked list
   (NDCG@k). Malformed output gets the constant p_fmt = -1 instead: both phases when ``<SLATE>`` is missing,
   the rank phase alone when only ``<RANK>`` is missing or malformed, or names an item that is not in the
   slate.
3. Factorized credit. F-GRPO gives the slate tokens the group-relative advantage of R_slate and the rank
   tokens that of R_rank; delimiter tokens get no loss. L = L_slate + lambda L_rank, beta_KL = 0, from an
   SFT warm start. Here that is ``Scores.spans`` (character ranges of the slate and rank *contents*), which
   the core turns into token masks (``rankrl.rl.spans``); lambda is ``trainer.span_weights.rank``.
   The GRPO baseline (``factorized=False``) gives every token one advantage from R_slate + lambda R_rank.
4. Baselines: zero-shot (one call, the same prompt), zero-shot two-step (select, then rank the selection in a
   second call), factorized SFT (both tags), decoupled SFT (a selector and a ranker trained separately, the
   ranker on gold slates, chained at inference: ``TwoStepTask`` with roles ``selector`` and ``ranker``).
5. Metrics on the final ranked list: Recall/NDCG/Precision/Hit@{1,3,5} (ir_measures), slate recall and
   precision, and error attribution: each gold item missed at cutoff c is a *slate miss* (never proposed)
   or a *rank drop* (proposed, then not ranked in the top c).

Benchmarks (20 candidates each, rules in ``rankrl.data.recsys`` / ``rankrl.data.qa``): MovieLens-100K and
Last.fm (1 target + 19 items the user never interacted with; leave-one-out: test = last item, dev = the one
before, train = the one before that; MovieLens by timestamp; Last.fm, which has no listening times, by play
count ascending, or at profile=paper by the time of the user's first tag of each artist), HotpotQA
(exactly 2 gold among its 10 paragraphs + 10 corpus passages) and MuSiQue (its 20 paragraphs, 2-4 gold).
QA passages are shown under abstract ids 1..20 after a seeded shuffle.

No official code is public; the prompts below are written from the paper's description (Appendix H/I:
``<SLATE>``/``<RANK>`` tags, "up to n", "top k", ids only from the candidate list), and the SFT targets
(gold items plus seeded fillers, gold ranked first) are our reading of Appendix E.1.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from rankrl.conf_defaults import conf_default
from rankrl.data.common import keyed_rng
from rankrl.data.records import Benchmark, Query
from rankrl.rl.task import Span
from rankrl.rollout.base import Generator, Messages
from rankrl.tasks.base import Example, Scores, SFTExample, TaskBase

# the paper's settings, from their one home conf/task/fgrpo.yaml (the functions' defaults below use them)
FORMAT_PENALTY = conf_default("task/fgrpo", "format_penalty")  # p_fmt (Appendix C.3)
SLATE_SIZE = conf_default("task/fgrpo", "slate_size")  # n: "up to 10" slate items
RANK_SIZE = conf_default("task/fgrpo", "rank_size")  # k: "top 5" ranked items
SLATE_REWARD = conf_default("task/fgrpo", "slate_reward")  # recall (F1: the paper's ablation)
CUTOFFS = (1, 3, 5)
SLATE_REWARDS = ("recall", "f1")

# ---- 1. Candidate pools ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Domain:
    """How a benchmark's prompt names its items and its context."""

    items: str  # "movies"
    context: str  # the line above the history (or the question)
    relevant: str  # what makes an item relevant
    gold_counts: tuple[int, int]  # allowed number of gold items per pool (min, max)


DOMAINS = {
    "movielens-100k": Domain(
        "movies", "Movies the user watched, oldest first:", "the movie the user will watch next", (1, 1)
    ),
    "lastfm": Domain(
        "artists",
        "Artists the user listened to, least played first:",
        "the artist the user plays most",
        (1, 1),
    ),
    # Last.fm in the order of the user's first tag of each artist (profile=paper; rankrl.data.recsys)
    "lastfm:tags": Domain(
        "artists", "Artists the user tagged, oldest first:", "the artist the user will tag next", (1, 1)
    ),
    "hotpotqa": Domain("passages", "Question:", "the passages needed to answer the question", (2, 2)),
    "musique": Domain("passages", "Question:", "the passages needed to answer the question", (2, 4)),
}
QA_BENCHMARKS = ("hotpotqa", "musique")


def domain_key(benchmark: str, order: str | None) -> str:
    """The ``DOMAINS`` entry of a benchmark's queries: its own, or that of its ordering (``extra['order']``
    from rankrl.data.recsys) where the prompt must say something else."""
    return f"{benchmark}:{order}" if f"{benchmark}:{order}" in DOMAINS else benchmark


@dataclass(frozen=True)
class Candidate:
    """One item of a pool: ``key`` is its docid, ``label`` how the model writes it, ``text`` what it reads."""

    key: str
    label: str
    text: str


@dataclass(frozen=True)
class Pool:
    """A context and its candidates, as one prompt shows them; ``gold`` holds the relevant keys."""

    uid: str
    benchmark: str  # its DOMAINS key: the benchmark, or the benchmark and its ordering (``domain_key``)
    context: tuple[str, ...]
    candidates: tuple[Candidate, ...]
    gold: frozenset[str]
    show_labels: bool  # abstract ids: list candidates as "label: text"; else the name is the label

    @cached_property
    def lookup(self) -> dict[str, str]:
        """normalised label -> key."""
        return {normalise_item(c.label): c.key for c in self.candidates}

    @cached_property
    def separators(self) -> re.Pattern:
        """What separates written items: ids are split at commas, semicolons and whitespace; names at
        semicolons and newlines, and at commas unless some name holds one ("Shawshank Redemption, The")."""
        if self.show_labels:
            return _SPLIT_IDS
        return _SPLIT_NAMES if any("," in c.label for c in self.candidates) else _SPLIT_NAMES_COMMAS

    @cached_property
    def by_key(self) -> dict[str, Candidate]:
        return {c.key: c for c in self.candidates}

    @property
    def domain(self) -> Domain:
        return DOMAINS[self.benchmark]


def _cut(text: str, chars: int | None) -> str:
    """``text`` on one line, cut to whole words within ``chars`` characters (a CPU-scale budget; None keeps it
    whole); a first word longer than that is cut inside."""
    text = " ".join(text.split())
    if chars is None or len(text) <= chars:
        return text
    head = text[: chars + 1]
    return head[: head.rfind(" ")] if " " in head else text[:chars]


def _unique_labels(names: Sequence[str]) -> list[str]:
    """Names made distinct after normalisation (MovieLens lists a few titles twice): repeats get " (2)"."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        key = normalise_item(name)
        seen[key] = seen.get(key, 0) + 1
        out.append(name if seen[key] == 1 else f"{name} ({seen[key]})")
    return out


ID_STYLES = ("numbers", "letters")


def abstract_ids(count: int, style: str = "numbers") -> list[str]:
    """Ids 1..count, or a..z (one token each for most tokenizers; at most 26)."""
    if style == "letters":
        if count > 26:
            raise ValueError(f"letter ids name at most 26 candidates, not {count}")
        return [chr(ord("a") + i) for i in range(count)]
    return [str(i + 1) for i in range(count)]


def smaller_pool(keys: Sequence[str], gold: Iterable[str], size: int, uid: str) -> list[str]:
    """The first ``size - len(gold)`` non-gold candidates of ``keys``, the gold items put back at places drawn
    by a generator keyed on ``uid``, so where the gold sits says nothing (kept in the loader's order, the gold
    came last for most users: it follows the first others in 15 of 20 places)."""
    wanted = set(gold)
    gold = [k for k in keys if k in wanted]
    out = [k for k in keys if k not in wanted][: max(0, size - len(gold))]
    rng = keyed_rng(0, f"smaller-pool:{uid}")
    for k in gold:
        out.insert(rng.randrange(len(out) + 1), k)
    return out


def recsys_pool(
    bench: Benchmark,
    query: Query,
    item_ids: bool = False,
    max_history: int | None = None,
    text_chars: int | None = None,
    id_style: str = "numbers",
    size: int | None = None,
) -> Pool:
    """A user's pool: the history (most recent ``max_history`` items) and the loader's 20 candidates in the
    loader's seeded order; items are written by name, or by abstract ids when ``item_ids``. ``size`` below 20
    keeps the gold items and the first non-gold ones (``smaller_pool``: a positive control's)."""
    history = list(query.extra["history"])[-max_history:] if max_history else list(query.extra["history"])
    keys = list(query.extra["candidates"])
    if size is not None and size < len(keys):
        keys = smaller_pool(keys, bench.qrels[query.qid], size, query.qid)
    names = [_cut(bench.corpus[k].title or bench.corpus[k].text, text_chars) for k in keys]
    labels = abstract_ids(len(keys), id_style) if item_ids else _unique_labels(names)
    candidates = tuple(Candidate(k, label, name) for k, label, name in zip(keys, labels, names))
    context = tuple(_cut(bench.corpus[i].title or bench.corpus[i].text, text_chars) for i in history)
    domain = domain_key(bench.name, query.extra.get("order"))
    return Pool(query.qid, domain, context, candidates, frozenset(bench.qrels[query.qid]), item_ids)


def qa_pool(
    bench: Benchmark, query: Query, seed: int = 0, text_chars: int | None = None, id_style: str = "numbers"
) -> Pool:
    """A question's 20 passages under abstract ids (1..20), after a shuffle seeded by (seed, question)."""
    keys = list(query.extra["candidates"])
    keyed_rng(seed, f"fgrpo-ids:{query.qid}").shuffle(keys)
    texts = [_cut(f"{bench.corpus[k].title}: {bench.corpus[k].text}", text_chars) for k in keys]
    labels = abstract_ids(len(keys), id_style)
    candidates = tuple(Candidate(k, label, t) for k, label, t in zip(keys, labels, texts))
    return Pool(query.qid, bench.name, (query.text,), candidates, frozenset(bench.qrels[query.qid]), True)


# The positive control's pools (#41): not the paper's task. ``paper`` shows the candidates as they are;
# ``marked`` appends MARK to every gold candidate's shown text (copy a visible mark: SmolLM2-135M did not
# learn to read it from 256-640 supervised prompts); ``echo`` adds every gold candidate's shown text to the
# end of the context (the history's most recent item: the gold is the candidate that repeats a context
# line, the text match Rank-R1's and CoGR's controls learned); ``hint`` adds a context line that names
# every gold candidate's id (``HINT`` + id: the answer copied from a fixed place, one hop where ``marked``
# and ``echo`` take two, find the line, then read its id); ``popularity`` appends each candidate's number
# of training interactions (the signal the most-popular row ranks by, shown; recommendation benchmarks only).
CONSTRUCTIONS = ("paper", "marked", "echo", "hint", "popularity")
MARK = "(*)"
HINT = "Next: "


def shown_pool(pool: Pool, construction: str, counts: Mapping[str, float] | None = None) -> Pool:
    """``pool`` as the control's prompt shows it (``construction``); keys, labels and gold are unchanged, so
    parsing and rewards are the paper's. ``counts``: key -> training interactions (``popularity``)."""
    if construction == "paper":
        return pool
    if construction == "popularity" and counts is None:
        raise ValueError(f"construction=popularity needs interaction counts for pool {pool.uid!r}")

    def text(c: Candidate) -> str:
        if construction == "marked":
            return f"{c.text} {MARK}" if c.key in pool.gold else c.text
        return f"{c.text} ({int(counts.get(c.key, 0))} users)"

    if construction in ("echo", "hint"):
        gold = [c for c in pool.candidates if c.key in pool.gold]
        added = tuple(c.text if construction == "echo" else f"{HINT}{c.label}" for c in gold)
        return Pool(
            pool.uid, pool.benchmark, (*pool.context, *added), pool.candidates, pool.gold, pool.show_labels
        )
    candidates = tuple(Candidate(c.key, c.label, text(c)) for c in pool.candidates)
    return Pool(pool.uid, pool.benchmark, pool.context, candidates, pool.gold, pool.show_labels)


def check_pool(pool: Pool, num_candidates: int) -> Pool:
    """The benchmark's rules hold: ``num_candidates`` distinct candidates, gold among them, as many gold
    items as the benchmark allows, labels that stay distinct after normalisation."""
    lo, hi = pool.domain.gold_counts
    keys = [c.key for c in pool.candidates]
    problems = []
    if len(keys) != num_candidates or len(set(keys)) != len(keys):
        problems.append(f"{len(set(keys))} distinct candidates of {len(keys)} (need {num_candidates})")
    if not pool.gold <= set(keys):
        problems.append(f"gold {sorted(pool.gold - set(keys))} not among the candidates")
    if not lo <= len(pool.gold) <= hi:
        problems.append(f"{len(pool.gold)} gold items (the benchmark's rule: {lo}..{hi})")
    if len(pool.lookup) != len(keys):
        problems.append("two candidates share a label after normalisation")
    if problems:
        raise ValueError(f"{pool.benchmark} pool {pool.uid!r}: " + "; ".join(problems))
    return pool


# ---- 2. Prompts --------------------------------------------------------------------------------------------

SYSTEM = "You select and rank candidates. Answer only in the requested format."


def _candidate_lines(pool: Pool, keys: Sequence[str] | None = None) -> str:
    chosen = [pool.by_key[k] for k in keys] if keys is not None else pool.candidates
    if pool.show_labels:
        return "\n".join(f"{c.label}: {c.text}" for c in chosen)
    return "\n".join(c.label for c in chosen)


def _how_to_write(pool: Pool) -> str:
    if pool.show_labels:
        return "Write candidates by their id, separated by spaces"
    return "Write candidates by their exact name, separated by semicolons"


def _head(pool: Pool) -> str:
    d = pool.domain
    return f"{d.context}\n" + "\n".join(pool.context) + f"\n\nCandidate {d.items}:\n"


def factorized_messages(pool: Pool, n: int = SLATE_SIZE, k: int = RANK_SIZE) -> Messages:
    """The unified prompt: a slate of up to n candidates, then the top k of that slate, in one answer."""
    d = pool.domain
    user = (
        _head(pool) + _candidate_lines(pool) + f"\n\nFirst list up to {n} candidates that may be "
        f"{d.relevant} between <SLATE> and </SLATE>. Then rank the top {k} of your slate, best first, "
        f"between <RANK> and </RANK>. {_how_to_write(pool)}."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def select_messages(pool: Pool, n: int = SLATE_SIZE) -> Messages:
    """Two-step, step 1: select up to n candidates (a slate only)."""
    d = pool.domain
    user = (
        _head(pool) + _candidate_lines(pool) + f"\n\nList up to {n} candidates that may be {d.relevant} "
        f"between <SLATE> and </SLATE>. {_how_to_write(pool)}."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def rank_messages(pool: Pool, slate: Sequence[str], k: int = RANK_SIZE) -> Messages:
    """Two-step, step 2: rank a given slate (keys); only its items are shown, so none can be invented."""
    d = pool.domain
    user = (
        f"{d.context}\n"
        + "\n".join(pool.context)
        + f"\n\nSelected {d.items}:\n"
        + _candidate_lines(pool, slate)
        + f"\n\nRank the top {k} of the selected {d.items} by how likely "
        f"each is {d.relevant}, best first, between <RANK> and </RANK>. Use only the selected "
        f"{d.items}. {_how_to_write(pool)}."
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


# ---- 3. Parsing (linear time, never raises) ----------------------------------------------------------------

_TAGS = {
    name: (re.compile(f"<{name}>", re.IGNORECASE), re.compile(f"</{name}>", re.IGNORECASE))
    for name in ("SLATE", "RANK")
}
_ANY_TAG = re.compile(r"</?(?:SLATE|RANK)>", re.IGNORECASE)
_ENUMERATION = re.compile(r"(?:\d{1,3}[.)]\s+|[-*\u2022]\s*)")  # "1. ", "2) ", "- ", "* ", "• "
_SPLIT_IDS = re.compile(r"[,;\s]")
_SPLIT_NAMES_COMMAS = re.compile(r"[,;\n]")
_SPLIT_NAMES = re.compile(r"[;\n]")
_STRIP = " \t\"'`#."


def normalise_item(text: str) -> str:
    """One written item, normalised for matching: NFKC, case-folded, whitespace collapsed, an enumeration
    prefix, quotes, a trailing period and surrounding brackets removed. Candidate labels go through the
    same function, so "[7]", " 7." and "7" all name candidate 7, and "THE MATRIX" names "The Matrix"."""
    text = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    enumerated = _ENUMERATION.match(text)
    if enumerated and enumerated.end() < len(text):
        text = text[enumerated.end() :]
    text = text.strip(_STRIP)
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1].strip(_STRIP)
    return text


def split_items(content: str, separators: re.Pattern = _SPLIT_IDS) -> list[str]:
    """Distinct normalised items of a tag's content, in order (empty pieces dropped, repeats kept once)."""
    seen: dict[str, None] = {}
    for piece in separators.split(content):
        item = normalise_item(piece)
        if item:
            seen.setdefault(item, None)
    return list(seen)


@dataclass(frozen=True)
class Phase:
    """One tag's content: its distinct normalised items, the character range of the content, and that of the
    whole ``<tag>...</tag>`` (where ``delimiters_in_loss`` puts the span)."""

    items: tuple[str, ...]
    start: int
    end: int
    tag_start: int
    tag_end: int


def find_phase(
    text: str, tag: str, start: int = 0, separators: re.Pattern = _SPLIT_IDS
) -> tuple[Phase | None, int]:
    """The first ``<tag>...</tag>`` at or after ``start``, and where it ends (``start`` when absent).

    None when the opening tag is missing, is never closed, or its content holds another tag (nested or
    interleaved tags are malformed). Each search starts where the previous one stopped: linear time.
    """
    opening, closing = _TAGS[tag]
    found = opening.search(text, start)
    if found is None:
        return None, start
    close = closing.search(text, found.end())
    if close is None:
        return None, start
    content = text[found.end() : close.start()]
    if _ANY_TAG.search(content):
        return None, start
    items = tuple(split_items(content, separators))
    return Phase(items, found.end(), close.start(), found.start(), close.end()), close.end()


@dataclass(frozen=True)
class Parsed:
    """A factorized answer: the slate and the rank (None when missing or malformed), and where the text
    after ``</SLATE>`` begins (the stretch that a malformed rank is blamed on)."""

    slate: Phase | None
    rank: Phase | None
    after_slate: int


def parse_completion(text: Any, separators: re.Pattern = _SPLIT_IDS) -> Parsed:
    """``<SLATE>`` ... ``</SLATE>`` then ``<RANK>`` ... ``</RANK>`` after it. Never raises: anything that is
    not a string parses as nothing."""
    if not isinstance(text, str):
        return Parsed(None, None, 0)
    slate, after = find_phase(text, "SLATE", 0, separators)
    if slate is None:
        return Parsed(None, None, 0)
    rank, _ = find_phase(text, "RANK", after, separators)
    return Parsed(slate, rank, after)


# ---- 4. Rewards --------------------------------------------------------------------------------------------


def keys_of(items: Sequence[str], pool: Pool) -> list[str]:
    """Written items as candidate keys; an item that names no candidate gets a non-candidate id of its own
    (a digest of its text: distinct items stay distinct, so an unknown item still takes up a rank)."""
    return [
        pool.lookup.get(item) or "?" + hashlib.blake2b(item.encode(), digest_size=8).hexdigest()
        for item in items
    ]


def slate_reward(slate_keys: Sequence[str], gold: frozenset[str], kind: str = SLATE_REWARD) -> float:
    """Order-invariant coverage of the distinct relevant items: recall (default) or F1 (the ablation)."""
    from rankrl.eval.metrics import set_prf

    precision, recall, f1 = set_prf(set(slate_keys), gold)
    return recall if kind == "recall" else f1


def rank_rewards(
    rankings: Sequence[Sequence[str]], golds: Sequence[frozenset[str]], k: int = RANK_SIZE
) -> list[float]:
    """NDCG@k of each ranked list (binary gains), one ir_measures call for the whole batch."""
    from rankrl.eval.metrics import per_query

    if not rankings:
        return []
    qrels = {str(i): {g: 1 for g in gold} for i, gold in enumerate(golds)}
    run = {str(i): {d: float(len(r) - j) for j, d in enumerate(r)} for i, r in enumerate(rankings) if r}
    table = per_query(run, qrels, [f"nDCG@{k}"])
    return [float(table.loc[str(i), f"nDCG@{k}"]) for i in range(len(rankings))]


@dataclass(frozen=True)
class Judged:
    """One completion's verdict: the keys it proposed and ranked, which rule applied, and the spans.

    status: ``ok``; ``no_slate`` (missing, unclosed or nested ``<SLATE>``: both phases get p_fmt);
    ``bad_rank`` (``<RANK>`` missing or malformed: the rank phase gets p_fmt); ``outside_slate`` (the rank
    names an item that is not in the slate: the rank phase gets p_fmt).
    """

    status: str
    slate: tuple[str, ...]
    rank: tuple[str, ...]
    slate_range: tuple[int, int] | None
    rank_range: tuple[int, int] | None


def judge_completion(
    text: str, pool: Pool, n: int = SLATE_SIZE, k: int = RANK_SIZE, delimiters: bool = False
) -> Judged:
    """Apply the case rules to one completion (the rewards themselves come from ``phase_rewards``).

    Only the first n distinct slate items and the first k distinct ranked items count. Spans cover the tag
    *contents*, so delimiters get no gradient (the paper's C.2), or with ``delimiters`` each whole
    ``<tag>...</tag>``, so the closing tag is credited with its phase's reward; with no slate the whole
    completion carries both penalties, with a bad rank the text after ``</SLATE>`` carries the rank penalty.
    """
    if not isinstance(text, str):
        text = ""
    whole = (0, len(text)) if text else None
    parsed = parse_completion(text, pool.separators)
    if parsed.slate is None:
        return Judged("no_slate", (), (), whole, whole)
    slate_items = parsed.slate.items[:n]
    slate = tuple(keys_of(slate_items, pool))
    slate_range = span_of(parsed.slate, delimiters)
    if parsed.rank is None or not parsed.rank.items:
        tail = (parsed.after_slate, len(text)) if parsed.after_slate < len(text) else None
        return Judged("bad_rank", slate, (), slate_range, tail)
    rank_items = parsed.rank.items[:k]
    rank = tuple(keys_of(rank_items, pool))
    status = "ok" if set(rank_items) <= set(slate_items) else "outside_slate"
    return Judged(status, slate, rank, slate_range, span_of(parsed.rank, delimiters))


def span_of(phase: Phase, delimiters: bool) -> tuple[int, int]:
    """The character range a phase's advantage drives: its content, or with ``delimiters`` its tags too."""
    return (phase.tag_start, phase.tag_end) if delimiters else (phase.start, phase.end)


def stop_range(text: Any) -> tuple[int, int]:
    """The empty range at a completion's end: with ``Span.end_of_turn`` it holds only the end of turn."""
    end = len(text) if isinstance(text, str) else 0
    return (end, end)


def phase_rewards(
    judged: Sequence[Judged],
    pools: Sequence[Pool],
    k: int = RANK_SIZE,
    kind: str = SLATE_REWARD,
    penalty: float = FORMAT_PENALTY,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(R_slate, R_rank), each (N,), with p_fmt where the case rules say so."""
    r_slate = [
        penalty if j.status == "no_slate" else slate_reward(j.slate, p.gold, kind)
        for j, p in zip(judged, pools)
    ]
    valid = [i for i, j in enumerate(judged) if j.status == "ok"]
    ndcg = dict(zip(valid, rank_rewards([judged[i].rank for i in valid], [pools[i].gold for i in valid], k)))
    r_rank = [ndcg.get(i, penalty) for i in range(len(judged))]
    return torch.tensor(r_slate, dtype=torch.float32), torch.tensor(r_rank, dtype=torch.float32)


# ---- 5. SFT targets ----------------------------------------------------------------------------------------


def sft_slate(pool: Pool, n: int, seed: int = 0, fill: str = "seeded", gold_first: bool = False) -> list[str]:
    """A gold slate: every gold item plus non-gold fillers up to n, in the order of the prompt's list (so the
    slate carries no hint of which items are gold). ``fill``: ``seeded`` fillers drawn at random (the
    paper's reading), or the ``first`` non-gold candidates of the list, so that nothing in the target is
    left to chance and where the gold items sit is all it says (#41: at 135M the seeded fillers' noise,
    log C(19, 9) = 11.4 nats a target, drowned the 3.0 nats the mark gives). ``gold_first``: the gold items
    open the slate, then the fillers in list order, so the slate's first id is the rank's first id (a
    control's warm start, #41: in list order a weak warm start writes the first ten ids as its slate and
    copies the gold only into its rank, where C.4 penalises it whenever the gold is not among the ten)."""
    others = [c.key for c in pool.candidates if c.key not in pool.gold]
    size = max(0, min(n - len(pool.gold), len(others)))
    if fill == "first":
        chosen = set(others[:size])
    elif fill == "seeded":
        chosen = set(keyed_rng(seed, f"sft-slate:{pool.uid}").sample(others, size))
    else:
        raise ValueError(f"fill={fill!r}; valid: seeded, first")
    slate = [c.key for c in pool.candidates if c.key in pool.gold or c.key in chosen]
    if gold_first:
        slate = [k for k in slate if k in pool.gold] + [k for k in slate if k not in pool.gold]
    return slate


# gold: the paper's warm start (seeded fillers); gold_fixed: the same with the first non-gold candidates as
# fillers (a positive control's supervision, #41); gold_first: gold_fixed with the gold opening the slate (a
# control's warm start, #41); format: the positive control's gold-free warm start
SFT_TARGETS = ("gold", "gold_fixed", "gold_first", "format")


def format_slate_and_rank(pool: Pool, n: int, k: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """A format-only SFT target: n candidates drawn by a seeded shuffle (in prompt order) and k of them in a
    seeded order, so the answer is well formed and says nothing of which items are gold. A positive
    control's warm start (#41): what GRPO then learns comes from the reward."""
    rng = keyed_rng(seed, f"sft-format:{pool.uid}")
    drawn = set(rng.sample([c.key for c in pool.candidates], min(n, len(pool.candidates))))
    slate = [c.key for c in pool.candidates if c.key in drawn]
    rank = rng.sample(slate, min(k, len(slate)))
    return slate, rank


def sft_rank(pool: Pool, slate: Sequence[str], k: int) -> list[str]:
    """The gold items of the slate first, then the rest, each in slate order; the first k."""
    return ([s for s in slate if s in pool.gold] + [s for s in slate if s not in pool.gold])[:k]


def write_items(pool: Pool, keys: Sequence[str]) -> str:
    sep = " " if pool.show_labels else "; "
    return sep.join(pool.by_key[key].label for key in keys)


def factorized_answer(pool: Pool, slate: Sequence[str], rank: Sequence[str]) -> str:
    return f"<SLATE>{write_items(pool, slate)}</SLATE>\n<RANK>{write_items(pool, rank)}</RANK>"


# ---- 6. Evaluation -----------------------------------------------------------------------------------------

RANKED_MEASURES = [f"{m}@{c}" for m in ("R", "nDCG", "P", "Success") for c in CUTOFFS]


def final_ranking(rank: Sequence[str], pool: Pool, k: int) -> list[str]:
    """The list that is scored: the ranked items that are candidates of the pool, the first k."""
    return [key for key in rank if key in pool.by_key][:k]


def ranking_metrics(
    pools: Sequence[Pool],
    slates: Sequence[Sequence[str]],
    rankings: Sequence[Sequence[str]],
    table: Any = None,
) -> dict[str, float]:
    """Ranked measures (ir_measures, trec_eval ``-c``), slate recall/precision and error attribution.

    ``Hit@c`` is ir_measures' ``Success@c``. ``miss_slate@c`` / ``miss_rank@c``: the share of all gold items
    that are not in the top c because the slate never proposed them / because the ranking dropped them
    from the top c although the slate had them. With the share of gold items found in the top c they add up
    to 1 (that share is ``R@c`` when every query has one gold item). ``table``: their ``ranking_table``
    when the caller keeps it too (an evaluation), so ir_measures runs once.
    """
    from rankrl.eval.metrics import mean_set_prf

    table = ranking_table(pools, slates, rankings) if table is None else table
    metrics = {
        m: float(table[m].mean()) for m in table.columns if m not in ("slate_recall", "slate_precision")
    }
    proposed = _proposed(pools, slates)
    precision, recall, _ = mean_set_prf(proposed, {p.uid: p.gold for p in pools})
    metrics |= {
        "slate_recall": recall,
        "slate_precision": precision,
        "slate_size": sum(len(s) for s in proposed.values()) / max(len(pools), 1),
    }
    total = sum(len(p.gold) for p in pools) or 1
    for c in CUTOFFS:
        missed_slate = missed_rank = 0
        for p, r in zip(pools, rankings):
            for gold in p.gold - set(r[:c]):
                if gold in proposed[p.uid]:
                    missed_rank += 1
                else:
                    missed_slate += 1
        metrics |= {f"miss_slate@{c}": missed_slate / total, f"miss_rank@{c}": missed_rank / total}
    return metrics


def ranking_table(
    pools: Sequence[Pool], slates: Sequence[Sequence[str]], rankings: Sequence[Sequence[str]]
) -> Any:
    """Per query (index ``qid``): the ranked measures (``Hit@c`` for ir_measures' ``Success@c``) and slate
    recall/precision, the values ``ranking_metrics`` averages; a run folder keeps them for paired tests
    (``per_query.csv``)."""
    from rankrl.eval.metrics import per_query, set_prf_table

    qrels = {p.uid: {g: 1 for g in p.gold} for p in pools}
    run = {p.uid: {d: float(len(r) - j) for j, d in enumerate(r)} for p, r in zip(pools, rankings) if r}
    table = per_query(run, qrels, RANKED_MEASURES).rename(columns=lambda m: m.replace("Success", "Hit"))
    prf = set_prf_table(_proposed(pools, slates), {p.uid: p.gold for p in pools})
    return table.assign(slate_recall=prf["recall"], slate_precision=prf["precision"])


def _proposed(pools: Sequence[Pool], slates: Sequence[Sequence[str]]) -> dict[str, list[str]]:
    """Each query's slate, candidates only."""
    return {p.uid: [s for s in slate if s in p.by_key] for p, slate in zip(pools, slates)}


# ---- 7. The tasks as the loop sees them --------------------------------------------------------------------
# Three tasks build the table's rows from one settings schema and its candidate pools (``FGRPOSettings``)
# and the functions above. None is another's subclass, so each has the methods of what it serves and no
# other (``TaskBase`` derives ``trains`` from them): ``FGRPOTask`` trains with GRPO and SFT, ``TwoStepTask``
# with SFT (decoupled), ``PopularityTask`` with nothing.


@dataclass
class FGRPOSettings:
    """The settings every F-GRPO row is built from (the keys of conf/task/fgrpo.yaml, checked once here) and
    the candidate pools they define. Not a task: each task below is these settings plus what it serves. The
    unified rollout's own keys (``factorized``, ``lam``, ``slate_reward``, ``format_penalty``,
    ``probe_queries``) reach the two-step and popularity rows too, which read the pools, n and k only.

    Args:
        benchmark: ``movielens-100k``, ``lastfm``, ``hotpotqa`` or ``musique`` (or a loaded ``Benchmark``).
        benchmark_options: its loader's options (``conf/benchmark/<name>.yaml``).
        data_dir: the prepared data folder.
        factorized: True = F-GRPO (slate and rank spans, each its own advantage); False = the GRPO baseline
            (one reward R_slate + lam R_rank for every token, no spans).
        lam: lambda, the weight of the rank phase (in the GRPO reward; F-GRPO's span weight is
            ``trainer.span_weights.rank``, which the experiments tie to this value).
        slate_size / rank_size: n and k (10 and 5 in the paper).
        slate_reward: ``recall`` (paper default) or ``f1``.
        format_penalty: p_fmt.
        item_ids: recommendation items written as abstract ids instead of names (a CPU-scale
            shortening; QA passages always use abstract ids).
        id_style: abstract ids as ``numbers`` 1..20 (default) or ``letters`` a..t (one token each: CPU scale).
        max_history: recommendation history items shown (the most recent; the loader keeps up to 20).
        name_chars / passage_chars: each shown recommendation item / QA passage cut to this many characters
            (None: whole; CPU scale).
        train_queries / eval_queries: the first N queries of the train / evaluation split (None: all).
        probe_queries: dev queries that ``monitor`` generates for (the training curves' held-out probe).
        num_candidates: the pool size every query must have; below the loader's 20 (recommendation only), each
            pool keeps its gold items and its first non-gold candidates (a positive control's smaller pool).
        sft_target: ``gold`` (the paper's factorized SFT: gold items in the slate, ranked first),
            ``gold_fixed`` (the same, its fillers the first non-gold candidates instead of seeded ones: a
            positive control's supervision), ``gold_first`` (``gold_fixed`` with the gold opening the slate:
            a control's warm start whose slate holds what its rank copies) or ``format``
            (``format_slate_and_rank``: well formed, no gold; a positive control's warm start).
        construction: ``paper`` (the benchmark's pools as they are) or a positive control of #41, not the
            paper's task (``shown_pool``): ``marked`` (gold candidates carry ``MARK``), ``echo`` (the
            context ends with the gold candidates' text), ``hint`` (the context ends with a line naming the
            gold candidates' ids) or ``popularity`` (each candidate shows its
            training interactions). Controls need abstract ids (``item_ids``),
            where the shown text is apart from the label the answer writes.
        delimiters_in_loss: False (the paper's C.2): the tags get no gradient; True: each phase's span
            covers its tags, so a slate that closes is credited for closing (#41's diagnosis of run-on
            slates: with the tags masked, a well-rewarded slate reinforces "write another item" at every
            item but never "close here").
        end_of_turn_in_rank: False (the paper's C.2: the end of turn is a delimiter, in no span); True:
            the rank span also drives the end of turn, so stopping is credited with R_rank, and a
            completion that stops right after ``</SLATE>`` gets the rank penalty on its eos (#41: with the
            tags in the loss, stopping after a good slate was never blamed).
        seed: the QA id shuffle and the SFT fillers.
    """

    # the values' one home is conf/task/fgrpo.yaml (rankrl.conf_defaults): a task built directly gets them
    benchmark: str | Benchmark  # no default: conf/task/fgrpo.yaml passes the run's benchmark
    benchmark_options: Mapping[str, Any] | None = None
    data_dir: str | Path = "data"
    factorized: bool = conf_default("task/fgrpo", "factorized")
    lam: float = conf_default("task/fgrpo", "lam")
    slate_size: int = SLATE_SIZE
    rank_size: int = RANK_SIZE
    slate_reward: str = SLATE_REWARD
    format_penalty: float = FORMAT_PENALTY
    item_ids: bool = conf_default("task/fgrpo", "item_ids")
    id_style: str = conf_default("task/fgrpo", "id_style")
    max_history: int | None = conf_default("task/fgrpo", "max_history")
    name_chars: int | None = conf_default("task/fgrpo", "name_chars")
    passage_chars: int | None = conf_default("task/fgrpo", "passage_chars")
    train_queries: int | None = conf_default("task/fgrpo", "train_queries")
    eval_queries: int | None = conf_default("task/fgrpo", "eval_queries")
    probe_queries: int = conf_default("task/fgrpo", "probe_queries")
    num_candidates: int = conf_default("task/fgrpo", "num_candidates")
    construction: str = conf_default("task/fgrpo", "construction")
    sft_target: str = conf_default("task/fgrpo", "sft_target")
    delimiters_in_loss: bool = conf_default("task/fgrpo", "delimiters_in_loss")
    end_of_turn_in_rank: bool = conf_default("task/fgrpo", "end_of_turn_in_rank")
    seed: int = 0
    _pools: dict[str, list[Pool]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        name = self.benchmark if isinstance(self.benchmark, str) else self.benchmark.name
        if name not in DOMAINS:
            raise ValueError(f"F-GRPO benchmark {name!r} unknown; valid: {', '.join(DOMAINS)}")
        if self.id_style not in ID_STYLES:
            raise ValueError(f"id_style={self.id_style!r}; valid: {', '.join(ID_STYLES)}")
        if self.slate_reward not in SLATE_REWARDS:
            raise ValueError(f"slate_reward={self.slate_reward!r}; valid: {', '.join(SLATE_REWARDS)}")
        if not 1 <= self.rank_size <= self.slate_size:
            raise ValueError(f"need 1 <= rank_size <= slate_size, got {self.rank_size} and {self.slate_size}")
        if self.sft_target not in SFT_TARGETS:
            raise ValueError(f"sft_target={self.sft_target!r}; valid: {', '.join(SFT_TARGETS)}")
        if self.construction not in CONSTRUCTIONS:
            raise ValueError(f"construction={self.construction!r}; valid: {', '.join(CONSTRUCTIONS)}")
        if self.construction == "popularity" and name in QA_BENCHMARKS:
            raise ValueError(f"construction=popularity needs a recommendation benchmark, got {name!r}")
        if self.construction != "paper" and name not in QA_BENCHMARKS and not self.item_ids:
            raise ValueError(
                f"construction={self.construction} marks the shown text, apart from the written label: "
                "set task.item_ids=true"
            )
        if self.format_penalty >= 0 or self.lam < 0:
            raise ValueError(
                f"need format_penalty < 0 and lam >= 0, got {self.format_penalty} and {self.lam}"
            )

    @cached_property
    def bench(self) -> Benchmark:
        if isinstance(self.benchmark, Benchmark):
            return self.benchmark
        from rankrl.data import load_benchmark

        return load_benchmark(self.benchmark, self.data_dir, **dict(self.benchmark_options or {}))

    def pools(self, split: str, limit: int | None = None) -> list[Pool]:
        """The checked pools of a split's first ``limit`` queries."""
        if split not in self._pools:
            bench = self.bench
            queries = bench.split(split)
            if bench.name in QA_BENCHMARKS:
                pools = [qa_pool(bench, q, self.seed, self.passage_chars, self.id_style) for q in queries]
            else:
                pools = [  # num_candidates below the loader's 20: a control's smaller pool (recsys_pool)
                    recsys_pool(
                        bench,
                        q,
                        self.item_ids,
                        self.max_history,
                        self.name_chars,
                        self.id_style,
                        self.num_candidates,
                    )
                    for q in queries
                ]
            counts = bench.runs.get("popularity", {}) if self.construction == "popularity" else {}
            pools = [shown_pool(p, self.construction, counts.get(p.uid)) for p in pools]
            self._pools[split] = [check_pool(p, self.num_candidates) for p in pools]
        return self._pools[split][:limit]

    def train_pools(self) -> list[Pool]:
        return self.pools("train", self.train_queries)

    def eval_pools(self, split: str, limit: int | None = None) -> list[Pool]:
        cap = [x for x in (self.eval_queries, limit) if x is not None]
        return self.pools(split, min(cap) if cap else None)

    def split_size(self, split: str) -> int:
        """The queries of the whole split, before ``eval_queries`` or a ``limit`` cuts it: what a paper-scale
        evaluation takes (rankrl.gpu_plan scales a smoke evaluation's cost by it; the smoke's
        ``eval_queries`` would size the paper's evaluations to its few queries)."""
        return len(self.pools(split))


@dataclass
class FGRPOTask(FGRPOSettings, TaskBase):
    """Slate-then-rank in one rollout, trained by SFT then F-GRPO (or GRPO); Hydra builds it by ``_target_``
    with the settings of ``FGRPOSettings``."""

    name = "fgrpo"

    # -- training
    def train_examples(self) -> list[Example]:
        n, k = self.slate_size, self.rank_size
        return [
            Example(f"{self.bench.name}:{p.uid}", factorized_messages(p, n, k), p) for p in self.train_pools()
        ]

    def sft_examples(self) -> list[SFTExample]:
        return self.sft_examples_for(self.train_pools())

    def sft_examples_for(self, pools: Sequence[Pool], target: str | None = None) -> list[SFTExample]:
        """Factorized SFT: both tags, a gold slate and the gold items ranked first (``target=format``: a
        seeded slate and rank that name no gold, ``format_slate_and_rank``). ``target``: one of
        ``SFT_TARGETS``, the task's ``sft_target`` by default (a probe reads another target's answers)."""
        target = target or self.sft_target
        if target not in SFT_TARGETS:
            raise ValueError(f"sft target {target!r}; valid: {', '.join(SFT_TARGETS)}")
        out = []
        for p in pools:
            if target == "format":
                answer = factorized_answer(
                    p, *format_slate_and_rank(p, self.slate_size, self.rank_size, self.seed)
                )
            else:
                fill = "seeded" if target == "gold" else "first"
                slate = sft_slate(p, self.slate_size, self.seed, fill, gold_first=target == "gold_first")
                answer = factorized_answer(p, slate, sft_rank(p, slate, self.rank_size))
            out.append(
                SFTExample(
                    f"{self.bench.name}:{p.uid}",
                    factorized_messages(p, self.slate_size, self.rank_size),
                    answer,
                )
            )
        return out

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> Scores:
        """R_slate and R_rank per completion; F-GRPO spans, or one combined reward for the GRPO baseline."""
        if len(examples) != len(completions):
            raise ValueError(f"{len(examples)} examples for {len(completions)} completions: need one each")
        pools = [e.target for e in examples]
        judged = [
            judge_completion(c, p, self.slate_size, self.rank_size, self.delimiters_in_loss)
            for c, p in zip(completions, pools)
        ]
        r_slate, r_rank = phase_rewards(judged, pools, self.rank_size, self.slate_reward, self.format_penalty)
        combined = r_slate + self.lam * r_rank
        ok = torch.tensor([j.status == "ok" for j in judged], dtype=torch.bool)
        spans = None
        if self.factorized:
            rank_ranges = [j.rank_range for j in judged]
            if self.end_of_turn_in_rank:  # a stop right after </SLATE> leaves no rank text, only the eos
                rank_ranges = [r or stop_range(c) for r, c in zip(rank_ranges, completions)]
            spans = {
                "slate": Span(r_slate, [j.slate_range for j in judged]),
                "rank": Span(r_rank, rank_ranges, end_of_turn=self.end_of_turn_in_rank),
            }
        return Scores(
            combined, ok, {"slate": r_slate, "rank": r_rank}, training_metrics(judged, pools), spans
        )

    # -- inference
    def generate_rankings(self, generate: Generator, pools: Sequence[Pool]) -> tuple[list[Judged], list[str]]:
        answers = generate([factorized_messages(p, self.slate_size, self.rank_size) for p in pools])
        texts = [a.text for a in answers]
        return [
            judge_completion(t, p, self.slate_size, self.rank_size) for t, p in zip(texts, pools)
        ], answers

    def evaluate(
        self, generators: Mapping[str, Generator], split: str, limit: int | None = None
    ) -> dict[str, Any]:
        """One greedy answer per query; the ranked items (candidates only, first k) are the final list."""
        pools = self.eval_pools(split, limit)
        judged, answers = self.generate_rankings(generators[self.role], pools)
        rankings = [final_ranking(j.rank, p, self.rank_size) for j, p in zip(judged, pools)]
        ok = [j.status == "ok" for j in judged]
        return evaluation(pools, [j.slate for j in judged], rankings, ok, answers, self.split_size(split))

    def monitor(self, generators: Mapping[str, Generator]) -> dict[str, float]:
        """Slate recall, rank NDCG@k and format errors of greedy answers on the first dev queries."""
        pools = self.pools("dev", self.probe_queries)
        judged, _ = self.generate_rankings(generators[self.role], pools)
        return training_metrics(judged, pools, self.rank_size)


def training_metrics(judged: Sequence[Judged], pools: Sequence[Pool], k: int = RANK_SIZE) -> dict[str, float]:
    """Per-batch means logged as ``task/<name>``: slate recall and precision (candidates only, 0 without a
    slate), NDCG@k of valid rankings (0 otherwise), and the share of each malformed case."""
    from rankrl.eval.metrics import set_prf

    n = max(len(judged), 1)
    prf = [
        set_prf({s for s in j.slate if s in p.by_key}, p.gold) if j.status != "no_slate" else (0.0, 0.0, 0.0)
        for j, p in zip(judged, pools)
    ]
    valid = [i for i, j in enumerate(judged) if j.status == "ok"]
    ndcg = rank_rewards([judged[i].rank for i in valid], [pools[i].gold for i in valid], k)
    count = lambda status: sum(j.status == status for j in judged) / n  # noqa: E731
    return {
        "slate_recall": sum(r for _, r, _ in prf) / n,
        "slate_precision": sum(p for p, _, _ in prf) / n,
        "rank_ndcg": sum(ndcg) / n,
        "format_error_rate": 1 - len(valid) / n,
        "no_slate_rate": count("no_slate"),
        "bad_rank_rate": count("bad_rank"),
        "outside_slate_rate": count("outside_slate"),
        "slate_items": sum(len(j.slate) for j in judged) / n,
    }


def evaluation(
    pools: Sequence[Pool],
    slates: Sequence[Sequence[str]],
    rankings: Sequence[Sequence[str]],
    format_ok: Sequence[bool],
    answers: Sequence[Any],
    queries_total: int,
) -> dict[str, Any]:
    """What an evaluation returns (metrics, per-query values, run, cost, samples) from each query's slate, its
    final ranking and whether its answer was well formed; the same for every way of producing them."""
    table = ranking_table(pools, slates, rankings)
    metrics = ranking_metrics(pools, slates, rankings, table)
    metrics["format_error_rate"] = sum(not ok for ok in format_ok) / max(len(format_ok), 1)
    return {
        "metrics": metrics,
        "per_query": table,
        "run": _run(pools, rankings),
        "cost": _cost(answers, len(pools), queries_total),
        "samples": [a.text for a in answers[:3]],
    }


def _run(pools: Sequence[Pool], rankings: Sequence[Sequence[str]]) -> dict[str, dict[str, float]]:
    return {p.uid: {d: float(len(r) - j) for j, d in enumerate(r)} for p, r in zip(pools, rankings)}


def _cost(answers: Sequence[Any], queries: int, queries_total: int) -> dict[str, float]:
    """The LLM cost of an evaluation of ``queries`` of the split's ``queries_total`` (rankrl.gpu_plan
    scales a smoke run's cost to the whole split by it)."""
    return {
        "queries": queries,
        "queries_total": queries_total,
        "llm_calls": len(answers),
        "llm_prompts": len(answers),
        "prompt_tokens": sum(a.prompt_tokens for a in answers),
        "completion_tokens": sum(a.completion_tokens for a in answers),
    }


@dataclass
class TwoStepTask(FGRPOSettings, TaskBase):
    """Select, then rank, in two LLM calls: the zero-shot two-step and the decoupled-SFT baselines.

    Role ``selector`` writes ``<SLATE>``; role ``ranker`` sees only the selected candidates and writes
    ``<RANK>``. Decoupled SFT trains them separately, the ranker on gold slates (``sft_slate``); at
    inference the ranker ranks the selector's slate, as in the paper's pipeline.
    """

    name = "fgrpo"
    roles = ("selector", "ranker")
    role = "selector"

    def sft_examples(self) -> list[SFTExample]:
        out = []
        for p in self.train_pools():
            slate = sft_slate(p, self.slate_size, self.seed)
            uid = f"{self.bench.name}:{p.uid}"
            if self.role == "selector":
                out.append(
                    SFTExample(
                        uid, select_messages(p, self.slate_size), f"<SLATE>{write_items(p, slate)}</SLATE>"
                    )
                )
            else:
                out.append(
                    SFTExample(
                        uid,
                        rank_messages(p, slate, self.rank_size),
                        f"<RANK>{write_items(p, sft_rank(p, slate, self.rank_size))}</RANK>",
                    )
                )
        return out

    def two_step(self, generators: Mapping[str, Generator], pools: Sequence[Pool]):
        """Slates from the selector, then rankings of those slates from the ranker (an empty slate is not
        sent to the ranker). Returns (slates, rank keys, format ok per query, answers)."""
        selections = generators["selector"]([select_messages(p, self.slate_size) for p in pools])
        slates: list[list[str] | None] = []
        for answer, p in zip(selections, pools):
            phase = _single_phase(answer.text, "SLATE", p)
            # the ranker is shown only real candidates: unknown items of the slate are dropped
            slates.append(
                None
                if phase is None
                else [k for k in keys_of(phase.items[: self.slate_size], p) if k in p.by_key]
            )
        asked = [i for i, s in enumerate(slates) if s]
        ranked = generators["ranker"]([rank_messages(pools[i], slates[i], self.rank_size) for i in asked])
        ranks: list[list[str] | None] = [None] * len(pools)
        for i, answer in zip(asked, ranked):
            phase = _single_phase(answer.text, "RANK", pools[i])
            if phase is not None and phase.items:
                ranks[i] = keys_of(phase.items[: self.rank_size], pools[i])
        ok = [s is not None and r is not None and set(r) <= set(s) for s, r in zip(slates, ranks)]
        return [s or [] for s in slates], [r or [] for r in ranks], ok, [*selections, *ranked]

    def evaluate(
        self, generators: Mapping[str, Generator], split: str, limit: int | None = None
    ) -> dict[str, Any]:
        pools = self.eval_pools(split, limit)
        slates, ranks, ok, answers = self.two_step(generators, pools)
        rankings = [final_ranking(r, p, self.rank_size) for r, p in zip(ranks, pools)]
        return evaluation(pools, slates, rankings, ok, answers, self.split_size(split))


def _single_phase(text: Any, tag: str, pool: Pool) -> Phase | None:
    return find_phase(text if isinstance(text, str) else "", tag, 0, pool.separators)[0]


@dataclass
class PopularityTask(FGRPOSettings, TaskBase):
    """Most popular first, no model: the classic recommendation baseline on the very same pools, scored like
    every other row. The slate is the n candidates with the most training interactions (the benchmark's
    ``runs['popularity']``, built by ``rankrl.data.recsys``), the ranking its top k; ties keep the pool's
    presented (seeded, shuffled) order. It shows what a context-free signal reaches where the LLM rows stay
    at chance. Recommendation benchmarks only: QA pools have no popularity.
    """

    name = "fgrpo"
    uses_model = False
    roles = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        name = self.benchmark if isinstance(self.benchmark, str) else self.benchmark.name
        if name in QA_BENCHMARKS:
            valid = ", ".join(d for d in DOMAINS if d not in QA_BENCHMARKS)
            raise ValueError(f"popularity needs a recommendation benchmark, got {name!r}; valid: {valid}")

    def evaluate(
        self, generators: Mapping[str, Generator], split: str, limit: int | None = None
    ) -> dict[str, Any]:
        pools = self.eval_pools(split, limit)
        counts = self.bench.runs["popularity"]
        orders = [
            sorted((c.key for c in p.candidates), key=lambda key, s=counts[p.uid]: -s[key]) for p in pools
        ]
        slates = [order[: self.slate_size] for order in orders]
        rankings = [order[: self.rank_size] for order in orders]
        return evaluation(pools, slates, rankings, [True] * len(pools), [], self.split_size(split))
