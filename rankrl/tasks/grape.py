"""GRAPE: a query rewriter trained with GRPO so that a frozen retriever ranks the correct item higher.

The method, in the order of the paper (arXiv 2509.23370). No copy of the official code was reachable, so the
prompts and the output format are designed from the paper's description (``prompts/grape.toml``):

1. A rewriter LLM reads a query and writes ``<think>...</think>``, then the query the retriever will see
   (here in ``<rewrite>...</rewrite>``, so it parses exactly and generation stops at ``</rewrite>``). The
   retriever (CLIP for images, a text dual encoder for passages) and its corpus vectors never change.
2. Reward: the rank of the correct ("gold") item among all N corpus items,
   ``r = 1 - 2 (rank - 1) / (N - 1)``: +1 first, -1 last, linear in between, so every place gained counts.
   Ablation: the cosine similarity of the rewrite with the gold item, which rewards raising every score at
   once ("score inflation", Fig. 5). Besides them a format reward; the KL to the reference model is the
   trainer's (``trainer.beta``).
3. Under GRPO's group standardisation every increasing linear map of the rank gives the same advantages (the
   paper's appendix; ``tests/tasks/test_grape.py`` checks it with ``rankrl.rl.advantages.grpo_advantages``).
4. The score-inflation monitor (``GrapeTask.monitor``): on a fixed probe set of training queries, the mean
   similarity of the gold item and of the whole corpus, the gold margin, R@1/R@10, the rewrite length and its
   most frequent words, logged through training: Fig. 5 is gold similarity and R@1 against steps.
5. Evaluation: R@1 and R@10 over the split's gallery, in the image-retrieval sense (the gold item is among
   the top k: ir_measures ``Success@k``, which equals recall@k when there is one gold item).

Design choices the paper leaves open, each stated where it is made:
- Format reward: a completion without a parsable, non-empty rewrite earns only ``FORMAT_PENALTY`` (-2),
  below the worst rank reward (-1) and the lowest cosine (-1), so any well-formed rewrite beats any malformed
  one; a well-formed one earns its rank (or similarity) reward and a format reward of 0.
- Several relevant items (TREC DL passages), ``gold``: ``best`` takes the best-ranked relevant item as the
  gold (its rank and its similarity); ``all`` averages the rank reward (and the similarity) over every
  relevant item, which stays linear in each rank. R@k is always "a relevant item in the top k". With one
  relevant item per query (every image benchmark) the two are the same. The CPU stand-in uses ``all``: with
  ~20 relevant passages per DL query the raw query already ranks one of them first for most queries, so the
  best-ranked one gives every rewrite of a group the same reward +1 and GRPO no signal.
- Ties count against the gold (``rankrl.retrieval.vector_index``): a rewrite that makes every score equal
  ranks its gold last.
- Evaluation falls back to the original query where a rewrite does not parse (what a deployed rewriter
  would do) and reports the format-error rate beside the recall.
- CIRR: the rewriter is text-only here (our rollout engines take text), so the reference image reaches it as
  a caption (``reference_captions``); its reference image is excluded from the ranking (CIRR's protocol).
"""

from __future__ import annotations

import json
import logging
import random
import re
import tomllib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from rankrl.conf_defaults import conf_default
from rankrl.data.galleries import excluded_items, gold_items, require_images
from rankrl.data.records import Benchmark, Document, Query
from rankrl.retrieval.build import is_built_retriever, retriever_builder
from rankrl.rollout.base import Generator, Messages
from rankrl.tasks.base import Example, Scores, SFTExample, TaskBase

log = logging.getLogger(__name__)

PROMPTS = tomllib.loads((Path(__file__).parent / "prompts" / "grape.toml").read_text())

# ---- 1. Prompts --------------------------------------------------------------------------------------------

# The kind of query each benchmark asks (a key of [user] in prompts/grape.toml); others are captions.
QUERY_KINDS = {"cirr": "composed", "wiki-image": "long_text", "dl19": "passage", "dl20": "passage"}
PROMPT_STYLES = ("rewrite", "compress")


def kind_of_benchmark(benchmark: str) -> str:
    """Which prompt a benchmark's queries get: ``caption`` (Chinese and multilingual captions),
    ``long_text`` (Wikipedia), ``composed`` (CIRR) or ``passage`` (web search over passages)."""
    return QUERY_KINDS.get(benchmark, "caption")


def rewrite_messages(
    query: str, kind: str, reference: str = "", compress_words: int | None = None
) -> Messages:
    """The chat prompt asking for ``<think>...</think><rewrite>...</rewrite>``.

    Args:
        query: the original query (CIRR: the modification text).
        kind: a key of ``[user]`` in prompts/grape.toml.
        reference: CIRR only, a caption of the reference image.
        compress_words: the compression control: also ask for a rewrite of about this many words.
    """
    if kind not in PROMPTS["user"]:
        raise ValueError(f"unknown query kind {kind!r}; valid: {sorted(PROMPTS['user'])}")
    user = PROMPTS["user"][kind].format(query=query, reference=reference)
    if compress_words is not None:
        user += PROMPTS["compress"]["instruction"].format(words=compress_words)
    return [{"role": "system", "content": PROMPTS["system"]}, {"role": "user", "content": user}]


def warm_start_completion(query: str, max_words: int = 64, drop: float = 0.0, seed: int = 0) -> str:
    """The SFT target of the format warm start: a fixed thought, and the query as the rewrite, each of its
    words dropped with probability ``drop`` (seeded by ``seed`` and the query; at least one word is kept).

    It teaches the format and nothing about the retriever. With ``drop`` 0 the rewrite is the query itself;
    a rewriter warm-started that way samples the same rewrite G times (measured at CPU scale: 8 identical
    rewrites per group from the 9th GRPO step on, gradient 0), so groups carry no signal. Dropping words
    teaches the same format with spread in what is kept: anything better than the raw query is learnt by
    GRPO either way.
    """
    words = query.split()[:max_words]
    if drop > 0 and len(words) > 1:
        rng = random.Random(f"{seed}\x00{query}")
        kept = [w for w in words if rng.random() >= drop]
        words = kept or [words[rng.randrange(len(words))]]
    return f"<think>{PROMPTS['warm_start']['think']}</think>\n<rewrite>{' '.join(words)}</rewrite>"


# ---- 1b. The positive control's queries (#41): not the paper's task ----------------------------------------

CONSTRUCTIONS = ("paper", "filler")  # paper: the benchmark's queries as they are
SFT_TARGETS = ("format", "gold")  # format: the warm start of the query shown; gold: the clean query


def with_filler(query: str, filler: Sequence[str], key: str) -> str:
    """``query`` with every word of ``filler`` inserted once, each at a position drawn from ``key`` alone
    (a query id): the same noisy text for every run and seed, so the held-out queries are fixed.

    The positive control's noise: off-topic words pull the frozen retriever's query vector away from the
    relevant passages, and deleting them (a fixed, visible set of words) restores the query. Filler words are
    inserted in ``filler``'s order, each between two words (or at either end) of the text built so far.
    """
    words = query.split()
    rng = random.Random(f"filler\x00{key}")
    for word in filler:
        words.insert(rng.randint(0, len(words)), word)
    return " ".join(words)


# ---- 2. Parsing --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rewrite:
    """A parsed completion: the rewritten query and its character range, or None when it does not parse."""

    text: str | None = None
    span: tuple[int, int] | None = None

    @property
    def ok(self) -> bool:
        return self.text is not None


MALFORMED = Rewrite()


def parse_rewrite(completion: str) -> Rewrite:
    """``<think>...</think>`` then ``<rewrite>...</rewrite>`` -> the rewrite, stripped. Never raises.

    The completion must open with ``<think>`` (leading whitespace allowed), close it, then hold a
    ``<rewrite>`` closed by ``</rewrite>`` with something other than whitespace between. Anything else
    (a missing tag, a rewrite cut off by the token budget, an empty rewrite) is ``MALFORMED``. Four
    ``str.find`` calls, each starting where the last ended: linear time in the completion's length.
    """
    if not isinstance(completion, str):
        return MALFORMED
    start = len(completion) - len(completion.lstrip())
    if not completion.startswith("<think>", start):
        return MALFORMED
    close = completion.find("</think>", start + len("<think>"))
    if close < 0:
        return MALFORMED
    opened = completion.find("<rewrite>", close + len("</think>"))
    if opened < 0:
        return MALFORMED
    body_start = opened + len("<rewrite>")
    end = completion.find("</rewrite>", body_start)
    if end < 0:
        return MALFORMED
    body = completion[body_start:end]
    text = body.strip()
    if not text:
        return MALFORMED
    first = body_start + len(body) - len(body.lstrip())
    return Rewrite(text, (first, first + len(text)))


# ---- 3. Rewards --------------------------------------------------------------------------------------------

FORMAT_PENALTY = -2.0  # below the worst rank reward (-1) and the lowest cosine (-1)
REWARDS = ("rank", "similarity")
GOLDS = ("best", "all")  # with several relevant items: the best-ranked one, or all of them


def rank_reward(rank: Any, n: Any) -> np.ndarray:
    """``1 - 2 (rank - 1) / (N - 1)``: +1 when the gold is first, -1 when last, linear in between.

    Element-wise over arrays (or scalars); a corpus of one item gives +1.
    """
    rank, n = np.asarray(rank, dtype=np.float64), np.asarray(n, dtype=np.float64)
    if np.any(n < 1) or np.any(rank < 1) or np.any(rank > n):
        raise ValueError(f"need 1 <= rank <= N, got rank={rank}, N={n}")
    return np.where(n > 1, 1.0 - 2.0 * (rank - 1) / np.maximum(n - 1, 1), 1.0)


def similarity_reward(gold_similarity: Any) -> np.ndarray:
    """The ablation: the cosine of the rewrite with the gold item, as it is."""
    return np.asarray(gold_similarity, dtype=np.float64)


def format_reward(ok: Any) -> np.ndarray:
    """0 for a well-formed completion, ``FORMAT_PENALTY`` for one whose rewrite is missing or empty."""
    return np.where(np.asarray(ok, dtype=bool), 0.0, FORMAT_PENALTY)


# ---- 4. Galleries: what each query is ranked against -------------------------------------------------------
# (the benchmarks' facts, each query's relevant items, CIRR's excluded reference image and the images on disk,
# are rankrl.data.galleries')


@dataclass
class Gallery:
    """The queries of one split that have a gold item in its gallery, and the index they are ranked in.

    Args:
        queries: the queries, in split order.
        gold: per query, its relevant items present in the gallery (at least one).
        excluded: per query, items that take no part in its ranking (CIRR: the reference image).
        index: the frozen retriever's index of the gallery (``VectorIndex``).
        dropped: queries of the split left out because no relevant item is in the gallery.
    """

    queries: list[Query]
    gold: list[list[str]]
    excluded: list[list[str]]
    index: Any
    dropped: int = 0

    def subset(self, positions: Sequence[int]) -> Gallery:
        return Gallery(
            [self.queries[i] for i in positions],
            [self.gold[i] for i in positions],
            [self.excluded[i] for i in positions],
            self.index,
            self.dropped,
        )


# ---- 5. Score inflation: what a set of rewrites does to the ranking ------------------------------------

_WORD = re.compile(r"[^\W\d_]+")


def top_words(texts: Sequence[str], k: int = 10) -> str:
    """The ``k`` most frequent words of ``texts`` (lower-cased, English stop words left out), ``word:count``
    separated by spaces: a string series that shows catch-all words ("atmosphere", "mood") creeping in."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    counts = Counter(w for t in texts for w in _WORD.findall(t.lower()) if w not in ENGLISH_STOP_WORDS)
    return " ".join(f"{w}:{n}" for w, n in counts.most_common(k))


def gold_rank_and_similarity(probe: Any, gold: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query: the rank reward, the gold rank and the gold similarity, for ``gold`` = ``best`` (the
    best-ranked relevant item) or ``all`` (means over every relevant item)."""
    if gold == "best":
        return rank_reward(probe.rank, probe.size), probe.rank.astype(np.float64), probe.gold
    rewards = rank_reward(probe.target_rank, probe.size[probe.owner])
    return (
        probe.per_query_mean(rewards),
        probe.per_query_mean(probe.target_rank.astype(np.float64)),
        probe.per_query_mean(probe.target_score),
    )


def retrieval_means(table: pd.DataFrame, k: int = 10) -> dict[str, float]:
    """R@1, R@k and the score-inflation statistics, averaged over the queries of ``retrieval_table``.

    - ``R@1``/``R@<k>``: a relevant item is among the top 1/k (ir_measures ``Success@k`` on the faiss
      top-k run);
    - ``gold_rank``: mean rank of the gold (pessimistic ties) among the N items (``gold`` as in the task);
    - ``gold_similarity``: mean cosine with the gold; ``corpus_similarity``: mean cosine with all N items;
      ``gold_margin``: mean of the best relevant minus the best non-relevant cosine (over the queries where
      it is finite). Score inflation is gold and corpus similarity rising together while the margin and R@1
      do not;
    - ``rewrite_words``: mean length in words of what was retrieved with.
    """
    margin = table["gold_margin"].to_numpy()
    return {
        "R@1": float(table["R@1"].mean()),
        f"R@{k}": float(table[f"R@{k}"].mean()),
        **{
            c: float(np.mean(table[c].to_numpy()))
            for c in ("gold_rank", "gold_similarity", "corpus_similarity")
        },
        "gold_margin": float(np.mean(margin[np.isfinite(margin)])) if np.isfinite(margin).any() else 0.0,
        "rewrite_words": float(np.mean(table["rewrite_words"].to_numpy())),
    }


def retrieval_table(
    gallery: Gallery, vectors: np.ndarray, texts: Sequence[str], k: int = 10, gold: str = "best"
) -> pd.DataFrame:
    """The per-query values ``retrieval_means`` averages, of the queries of ``gallery`` embedded as
    ``vectors`` (index ``qid``, in the gallery's order); a run folder keeps them for paired tests
    (``per_query.csv``). ``gold_margin`` is not finite for a query with no non-relevant item."""
    from rankrl.eval.metrics import per_query

    qids = [q.qid for q in gallery.queries]
    probe = gallery.index.probe(
        vectors, gallery.gold, gallery.excluded, others=True, every_target=gold == "all"
    )
    _, gold_rank, gold_similarity = gold_rank_and_similarity(probe, gold)
    excluded = {q: ex for q, ex in zip(qids, gallery.excluded) if ex}
    run = gallery.index.search(qids, vectors, k, excluded=excluded)
    qrels = {q: {d: 1 for d in items} for q, items in zip(qids, gallery.gold)}
    recall = per_query(run, qrels, ["Success@1", f"Success@{k}"]).reindex(qids)
    return pd.DataFrame(
        {
            "R@1": recall["Success@1"].to_numpy(),
            f"R@{k}": recall[f"Success@{k}"].to_numpy(),
            "gold_rank": gold_rank,
            "gold_similarity": gold_similarity,
            "corpus_similarity": probe.mean,
            "gold_margin": probe.gold - probe.best_other,
            "rewrite_words": [float(len(t.split())) for t in texts],
        },
        index=pd.Index(qids, name="qid"),
    )


# ---- 6. The task as the GRPO loop sees it ------------------------------------------------------------------


# where the settings below live: conf/task/grape.yaml, their one home (rankrl.conf_defaults); a task built
# directly (tests, notebooks) gets the same values as a run
CONF = "task/grape"


class GrapeGalleries:
    """The settings every GRAPE row is built from (the keys of conf/task/grape.yaml, checked once here), the
    galleries they define and the frozen retriever's measurements of a set of query texts. Not a task: the
    rewriter (``GrapeTask``) and the raw-query baseline (``RawQueryTask``) each hold these and add what they
    serve; the rewriter's keys (``reward``, ``prompt``, ``compress_words``, ...) reach the baseline too,
    which reads the galleries and ``eval_k`` only.

    Args:
        benchmark: the evaluation benchmark (a name for ``rankrl.data.load_benchmark``, or a ``Benchmark``).
        data_dir: where prepared data lives.
        benchmark_options: options of the benchmark's loader (``conf/benchmark/<name>.yaml``); they apply to
            the training benchmark too when it is the same one.
        retriever: the frozen retriever: the ``retriever`` group's choice (a ``conf/retriever/*`` node or
            anything ``rankrl.retrieval.build.retriever_builder`` takes, built on first use with
            ``cache_dir``), or a built one: an object with ``vector_index(docs)`` and
            ``encode_queries(texts)``.
        reward: ``rank`` (GRAPE) or ``similarity`` (the score-inflation ablation).
        gold: with several relevant items, ``best`` (the best-ranked one is the gold) or ``all`` (rewards and
            gold statistics averaged over every relevant item); the same with one relevant item.
        prompt: ``rewrite`` (GRAPE and the zero-shot rewriter) or ``compress`` (the compression control).
        compress_words: the compression control's target length in words (about GRAPE's mean).
        train_sources: evaluation benchmark -> [training benchmark, split]; one not in it trains on its own
            ``train`` split (TREC DL has none: DL19 is evaluated after training on DL20's queries).
        split_aliases: benchmark -> {split asked for: split used}; CIRR's test targets are not public, so
            its ``test`` is its validation set.
        probe_size: training queries in the fixed probe set of ``monitor``.
        max_train_queries: keep the first N training queries (smoke runs and CPU scale).
        eval_k: the R@k cut-off besides R@1.
        query_kind: the prompt kind; None = by benchmark (``QUERY_KINDS``).
        reference_captions: CIRR: a JSON file ``{image id: caption}`` describing reference images.
        cache_dir: cache root of corpus vectors (``<cache_dir>/vectors/``).
        generation_chunk: prompts per generator call during evaluation.
        warm_start_drop: the share of query words the format warm start's targets leave out (0: a copy).
        construction: ``paper`` (the benchmark's queries) or ``filler`` (the positive control of #41, not the
            paper's task: every query, training and evaluation, is shown and retrieved with the words of
            ``filler_words`` inserted, ``with_filler``; its clean text stays in ``extra['clean_text']``).
        filler_words: the words ``construction=filler`` inserts into every query.
        sft_target: the SFT stage's rewrite: ``format`` (the format warm start, ``warm_start_completion`` of
            the query shown) or ``gold`` (``construction=filler`` only: the clean query, the rewrite that
            deletes the filler; supervision of the control).
        seed: fixes the probe set and the warm start's dropped words.
    """

    name = "grape"

    def __init__(
        self,
        benchmark: str | Benchmark,
        data_dir: str | Path = "data",
        benchmark_options: Mapping[str, Any] | None = None,
        retriever: Any = None,
        reward: str = conf_default(CONF, "reward"),
        gold: str = conf_default(CONF, "gold"),
        prompt: str = conf_default(CONF, "prompt"),
        compress_words: int = conf_default(CONF, "compress_words"),
        train_sources: Mapping[str, Sequence[str]] | None = conf_default(CONF, "train_sources"),
        split_aliases: Mapping[str, Mapping[str, str]] | None = conf_default(CONF, "split_aliases"),
        probe_size: int = conf_default(CONF, "probe_size"),
        max_train_queries: int | None = conf_default(CONF, "max_train_queries"),
        eval_k: int = conf_default(CONF, "eval_k"),
        query_kind: str | None = conf_default(CONF, "query_kind"),
        reference_captions: str | Path | None = None,
        cache_dir: str | Path | None = None,
        generation_chunk: int = conf_default(CONF, "generation_chunk"),
        warm_start_drop: float = conf_default(CONF, "warm_start_drop"),
        construction: str = conf_default(CONF, "construction"),
        filler_words: Sequence[str] = conf_default(CONF, "filler_words"),
        sft_target: str = conf_default(CONF, "sft_target"),
        seed: int = 0,
    ) -> None:
        if construction not in CONSTRUCTIONS:
            raise ValueError(f"unknown construction {construction!r}; valid: {', '.join(CONSTRUCTIONS)}")
        if sft_target not in SFT_TARGETS:
            raise ValueError(f"unknown sft_target {sft_target!r}; valid: {', '.join(SFT_TARGETS)}")
        if sft_target == "gold" and construction != "filler":
            raise ValueError(
                "sft_target=gold needs a known best rewrite: set task.construction=filler (the paper's "
                "task has none)"
            )
        if construction == "filler" and not [w for w in filler_words if str(w).strip()]:
            raise ValueError("construction=filler needs words to insert: set task.filler_words=[...]")
        if not 0.0 <= warm_start_drop < 1.0:
            raise ValueError(f"warm_start_drop={warm_start_drop}: a probability in [0, 1)")
        if reward not in REWARDS:
            raise ValueError(f"unknown reward {reward!r}; valid: {', '.join(REWARDS)}")
        if gold not in GOLDS:
            raise ValueError(f"unknown gold {gold!r}; valid: {', '.join(GOLDS)}")
        if prompt not in PROMPT_STYLES:
            raise ValueError(f"unknown prompt {prompt!r}; valid: {', '.join(PROMPT_STYLES)}")
        built = is_built_retriever(retriever)
        self._build = None if built else retriever_builder(retriever)
        if not built and self._build is None:
            raise ValueError(
                "GRAPE needs a frozen retriever: set retriever=clip-vit-b16 (images) or "
                "retriever=minilm (text)"
            )
        self.eval_name = benchmark if isinstance(benchmark, str) else benchmark.name
        self._benchmarks: dict[str, Benchmark] = {}
        if not isinstance(benchmark, str):
            self._benchmarks[benchmark.name] = benchmark
        self.data_dir, self.cache_dir = Path(data_dir), cache_dir
        self.benchmark_options = dict(benchmark_options or {})
        self._retriever = retriever if built else None
        self.reward, self.gold, self.prompt, self.compress_words = reward, gold, prompt, compress_words
        source = (train_sources or {}).get(self.eval_name, (self.eval_name, "train"))
        self.train_name, self.train_split = str(source[0]), str(source[1])
        self.split_aliases = {k: dict(v) for k, v in (split_aliases or {}).items()}
        self.probe_size, self.max_train_queries, self.eval_k = probe_size, max_train_queries, eval_k
        self.kind = query_kind or kind_of_benchmark(self.eval_name)
        self.reference_captions, self._captions = reference_captions, None
        self.generation_chunk, self.seed = generation_chunk, seed
        self.warm_start_drop = warm_start_drop
        self.construction, self.sft_target = construction, sft_target
        self.filler_words = [str(w).strip() for w in filler_words if str(w).strip()]
        self._galleries: dict[tuple[str, str], Gallery] = {}
        self._indexes: dict[tuple[str, ...], Any] = {}

    # ---- data and retriever (loaded on first use) ----

    def benchmark(self, name: str) -> Benchmark:
        if name not in self._benchmarks:
            from rankrl.data import load_benchmark

            options = self.benchmark_options if name == self.eval_name else {}
            self._benchmarks[name] = load_benchmark(name, self.data_dir, **options)
        return self._benchmarks[name]

    @property
    def retriever(self) -> Any:
        """The frozen retriever, built on first use (loading its weights) with the task's cache folder."""
        if self._retriever is None:
            self._retriever = self._build(cache_dir=self.cache_dir or None)
        return self._retriever

    def _gallery_docs(self, name: str, split: str) -> tuple[tuple[str, ...], dict[str, Document]]:
        """The documents a split is ranked against, and a key naming that gallery.

        Image benchmarks rank each split against its own images. Text corpora are shared: the union of the
        training and evaluation benchmarks' corpora, so rewards and evaluation rank over the same items
        (TREC DL: DL19 + DL20 = 9,658 passages).
        """
        from rankrl.data import split_corpus

        bench = self.benchmark(name)
        if any("split" in d.extra for d in bench.corpus.values()):
            return (name, split), split_corpus(bench, split)
        docs: dict[str, Document] = {}
        for other in dict.fromkeys([self.eval_name, self.train_name]):
            for docid, doc in self.benchmark(other).corpus.items():
                docs.setdefault(docid, doc)
        return ("text", self.eval_name, self.train_name), docs

    def gallery(self, name: str, split: str) -> Gallery:
        """The queries of ``split`` of benchmark ``name`` with a gold item, ranked against their gallery."""
        split = self.split_aliases.get(name, {}).get(split, split)
        if (name, split) not in self._galleries:
            bench = self.benchmark(name)
            key, docs = self._gallery_docs(name, split)
            if not docs:
                raise ValueError(f"benchmark {name!r} has no documents to rank for split {split!r}")
            queries, gold, excluded = [], [], []
            for q in bench.split(split):
                relevant = gold_items(bench, q.qid, docs)
                if relevant:
                    queries.append(self.shown(q)), gold.append(relevant)
                    excluded.append(excluded_items(q, docs))
            dropped = len(bench.splits[split]) - len(queries)
            if not queries:
                raise ValueError(
                    f"no query of {name!r} split {split!r} has a relevant item in its gallery "
                    "(targets not public?); choose another split"
                )
            if dropped:
                log.info(
                    "%s/%s: %d queries without a relevant item in the gallery are left out",
                    name,
                    split,
                    dropped,
                )
            if key not in self._indexes:
                require_images(name, docs.values())  # before the retriever loads its weights
                self._indexes[key] = self.retriever.vector_index(list(docs.values()))
            self._galleries[(name, split)] = Gallery(queries, gold, excluded, self._indexes[key], dropped)
        return self._galleries[(name, split)]

    def shown(self, query: Query) -> Query:
        """The query as the rewriter reads it and the raw-query row retrieves with (``construction``)."""
        if self.construction == "paper":
            return query
        noisy = with_filler(query.text, self.filler_words, query.qid)
        return Query(query.qid, noisy, {**query.extra, "clean_text": query.text})

    # ---- the frozen retriever's measurements ----

    def measure(self, gallery: Gallery, texts: Sequence[str]) -> dict[str, float]:
        """``retrieval_means`` of ``texts`` (one per query of ``gallery``) under the frozen retriever."""
        return retrieval_means(self.measure_per_query(gallery, texts), self.eval_k)

    def measure_per_query(self, gallery: Gallery, texts: Sequence[str]) -> pd.DataFrame:
        """The per-query values behind ``measure`` (``retrieval_table``)."""
        vectors = self.retriever.encode_queries(list(texts))
        return retrieval_table(gallery, vectors, texts, self.eval_k, self.gold)


class GrapeTask(GrapeGalleries, TaskBase):
    """GRAPE's prompts, rewards, probe monitor and recall evaluation over the galleries of
    ``GrapeGalleries`` (its settings); Hydra builds it by ``_target_``."""

    # ---- training queries ----

    def train_gallery(self) -> Gallery:
        gallery = self.gallery(self.train_name, self.train_split)
        if self.max_train_queries is not None:
            gallery = gallery.subset(range(min(self.max_train_queries, len(gallery.queries))))
        return gallery

    def probe_gallery(self) -> Gallery:
        """A fixed, seeded sample of ``probe_size`` training queries (the same at every step and run)."""
        gallery = self.train_gallery()
        positions = sorted(
            random.Random(self.seed).sample(
                range(len(gallery.queries)), min(self.probe_size, len(gallery.queries))
            )
        )
        return gallery.subset(positions)

    # ---- prompts ----

    def reference_caption(self, query: Query) -> str:
        """CIRR: the caption of a query's reference image, from ``reference_captions``."""
        if self._captions is None:
            from rankrl.data.errors import MissingDataError

            path = Path(self.reference_captions) if self.reference_captions else None
            if path is None or not path.is_file():
                raise MissingDataError(
                    path or "cirr/reference_captions.json",
                    "cirr",
                    hint="CIRR prompts describe the reference image in words (the rewriter here is "
                    "text-only): `python -m rankrl.data.images_captions --data-dir <data dir>` writes them "
                    "with BLIP-2 (make reproduce-grape PROFILE=paper runs it)",
                )
            self._captions = json.loads(path.read_text())
        reference = query.extra["reference_image"]
        if reference not in self._captions:
            raise KeyError(f"{self.reference_captions} has no caption for reference image {reference!r}")
        return self._captions[reference]

    def messages(self, query: Query) -> Messages:
        reference = self.reference_caption(query) if self.kind == "composed" else ""
        words = self.compress_words if self.prompt == "compress" else None
        return rewrite_messages(query.text, self.kind, reference, words)

    def train_examples(self) -> list[Example]:
        """One prompt per training query; the target is the query's position in the training gallery."""
        g = self.train_gallery()
        return [
            Example(f"{self.train_name}:{q.qid}", self.messages(q), {"position": i})
            for i, q in enumerate(g.queries)
        ]

    def sft_examples(self) -> list[SFTExample]:
        """The SFT stage: each training prompt with ``sft_completion`` of its query (the format warm start:
        the query shown, ``warm_start_drop`` of its words left out)."""
        g = self.train_gallery()
        return [
            SFTExample(f"{self.train_name}:{q.qid}", self.messages(q), self.sft_completion(q))
            for q in g.queries
        ]

    def sft_completion(self, query: Query) -> str:
        """``sft_target=format``: the warm start of the query shown; ``gold``: the clean query, verbatim."""
        if self.sft_target == "gold":
            return warm_start_completion(query.extra["clean_text"])
        return warm_start_completion(query.text, drop=self.warm_start_drop, seed=self.seed)

    # ---- reward ----

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> Scores:
        """Rank (or similarity) reward of each parsed rewrite over the training gallery, plus the format
        reward.

        Metrics (over well-formed rewrites): gold rank, rank reward, gold and corpus similarity, length.
        """
        if len(examples) != len(completions):
            raise ValueError(f"{len(examples)} examples for {len(completions)} completions: need one each")
        g = self.train_gallery()
        parsed = [parse_rewrite(c) for c in completions]
        ok = np.array([p.ok for p in parsed], dtype=bool)
        retrieval = np.zeros(len(parsed))
        metrics: dict[str, float] = {"format_error_rate": float(1 - ok.mean()) if len(ok) else 0.0}
        if ok.any():
            rows = [e.target["position"] for e, good in zip(examples, ok) if good]
            vectors = self.retriever.encode_queries([p.text for p in parsed if p.ok])
            probe = g.index.probe(
                vectors,
                [g.gold[i] for i in rows],
                [g.excluded[i] for i in rows],
                others=False,
                every_target=self.gold == "all",
            )
            ranks, gold_rank, gold_similarity = gold_rank_and_similarity(probe, self.gold)
            retrieval[ok] = ranks if self.reward == "rank" else similarity_reward(gold_similarity)
            metrics |= {
                "gold_rank": float(gold_rank.mean()),
                "rank_reward": float(ranks.mean()),
                "gold_similarity": float(gold_similarity.mean()),
                "corpus_similarity": float(probe.mean.mean()),
                "rewrite_words": float(np.mean([len(p.text.split()) for p in parsed if p.ok])),
            }
        fmt = format_reward(ok)
        rewards = torch.tensor(retrieval + fmt, dtype=torch.float32)
        components = {
            "retrieval": torch.tensor(retrieval, dtype=torch.float32),
            "format": torch.tensor(fmt, dtype=torch.float32),
        }
        return Scores(rewards, torch.from_numpy(ok), components, metrics)

    # ---- inference ----

    def rewrite(
        self, generate: Generator, queries: Sequence[Query]
    ) -> tuple[list[str], np.ndarray, dict[str, int]]:
        """Rewrite queries with the LLM: the texts to retrieve with (the original query where a rewrite does
        not parse), which parsed, and the token cost."""
        texts, ok, cost = [], [], {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}
        for start in range(0, len(queries), self.generation_chunk):
            chunk = queries[start : start + self.generation_chunk]
            for q, gen in zip(chunk, generate([self.messages(q) for q in chunk]), strict=True):
                parsed = parse_rewrite(gen.text)
                texts.append(parsed.text if parsed.ok else q.text)
                ok.append(parsed.ok)
                cost["prompt_tokens"] += gen.prompt_tokens
                cost["completion_tokens"] += gen.completion_tokens
            cost["calls"] += 1
        return texts, np.array(ok, dtype=bool), cost

    def monitor(self, generators: Mapping[str, Generator]) -> dict[str, Any]:
        """The score-inflation probe: greedy rewrites of the fixed probe set of training queries.

        Numbers are numeric series (``monitor/<name>``); ``top_words`` is a string series of the most
        frequent rewrite words.
        """
        g = self.probe_gallery()
        texts, ok, _ = self.rewrite(generators[self.role], g.queries)
        return {
            **self.measure(g, texts),
            "format_error_rate": float(1 - ok.mean()),
            "top_words": top_words([t for t, good in zip(texts, ok) if good]),
        }

    def evaluate(
        self, generators: Mapping[str, Generator], split: str, limit: int | None = None
    ) -> dict[str, Any]:
        """Rewrite every query of ``split`` of the evaluation benchmark and retrieve with the rewrites.

        Returns ``{"metrics": {R@1, R@<k>, gold_rank, ..., format_error_rate}, "cost", "rewrites"}``.
        """
        g = self.gallery(self.eval_name, split)
        total = len(g.queries)  # the whole split, for rankrl.gpu_plan's scaling of a smoke run
        g = g.subset(range(min(limit, len(g.queries)))) if limit else g
        texts, ok, cost = self.rewrite(generators[self.role], g.queries)
        table = self.measure_per_query(g, texts)
        metrics = {
            **retrieval_means(table, self.eval_k),
            "format_error_rate": float(1 - ok.mean()),
            "queries": float(len(g.queries)),
        }
        words = top_words([t for t, good in zip(texts, ok) if good])
        cost |= {
            "queries": len(g.queries),
            "queries_total": total,
            "llm_prompts": len(g.queries),
            "generate_calls": cost["calls"],
            "dropped_queries": g.dropped,
            "top_words": words,
        }
        rewrites = dict(zip((q.qid for q in g.queries), texts))
        return {"metrics": metrics, "cost": cost, "rewrites": rewrites, "per_query": table}


class RawQueryTask(GrapeGalleries, TaskBase):
    """The "raw query" baseline: the original query straight into the frozen retriever, no LLM (evaluation
    only: it has no training method).

    CIRR: the modification text alone (CLIP cannot take the reference image and the text together; the paper
    leaves this cell empty).
    """

    uses_model = False
    roles: tuple[str, ...] = ()

    def evaluate(
        self, generators: Mapping[str, Generator], split: str, limit: int | None = None
    ) -> dict[str, Any]:
        g = self.gallery(self.eval_name, split)
        g = g.subset(range(min(limit, len(g.queries)))) if limit else g
        texts = [q.text for q in g.queries]
        table = self.measure_per_query(g, texts)
        metrics = {**retrieval_means(table, self.eval_k), "queries": float(len(g.queries))}
        cost = {"queries": len(g.queries), "dropped_queries": g.dropped}
        return {"metrics": metrics, "cost": cost, "per_query": table}
