"""CoGR: co-evolving keyword generators for queries and items, trained with GRPO (arXiv 2609.00638).

The method, in the order of the paper:
1. Retrieval. A query generator G^q writes a keyword set S_q for a query q, an item generator G^i a set S_i
   for an item i. Item i is retrieved for q when ``(S_q ∪ {q}) ∩ (S_i ∪ {i}) ≠ ∅``: {q} is the query string
   and {i} the item's title, each one more term of its side. Retrieved items are ranked by BM25 over the
   keyword bags; quality is the set F1 of the retrieved set against the relevant set.
2. SFT initialisation. The base LLM writes item keywords (budget M = 10). Each training query's target is
   the N = 15 most frequent of those keywords over its relevant items. G^q is fine-tuned on (q, S_q) and G^i
   on (i, S_i), separately. (``item_sft_targets=tfidf``: each item's TF-IDF words stand in for the base
   LLM's keywords, a format warm start for a model too small to write keywords; the CPU scale uses it.)
3. Query-side RL against the frozen item index: R_q = F1 if |S_q| <= K_max (= 30), else 0.
4. Item-side RL against the frozen query side: R_i = sum over training queries of F1 with only item i's
   keywords replaced by S_i, minus the same sum on the reference index; -1 when |S_i| > K_max. Replacing one
   item's keywords can only move that item in or out of a query's retrieved set, and only for queries that
   share a term with its old or new bag, so ``ItemCounterfactual`` re-scores only those.
5. Co-evolution. Rounds alternate a query-side stage and an item-side stage, each against the other side's
   latest frozen index; the item index is rebuilt from the newest item keywords every round.

How a pipeline hands indexes between stages. Every evaluation writes the keyword sets it used into its run
folder (``query_keywords.json``, ``item_keywords.json``). A side whose weights come from an earlier stage F
(the role's ``init_from``) reads F's file, written by F's final evaluation with exactly those weights and the
same indexing sampling; only when there is none does the frozen role's generator write them in ``bind``.
Base weights (no ``init_from``) share one file per model and catalog under ``<cache_dir>/cogr/``. This is how
the item-side stage gets its reference index (the trained role has no frozen generator) and how a single
generator shared by both sides (an ablation) gets the other side's keywords. The mechanism is the core's
(``rankrl.rl.role_outputs``: where a role's weights come from, the files, the base cache); this module says
which outputs (one per side), their files' identity (``keyword_meta``) and how they are written (the prompts).

Where this module departs from the paper, or fills in what it does not say, the docstrings say so: the
prompts (``prompts/cogr.toml``), keyword parsing and normalisation, sets cut to their first K_max keywords
when indexed or searched, the CPU-scale catalog (``rankrl.data.catalogs.dl_pools_catalog``).

Elsewhere: the catalogs (items, binary relevance, query splits) in ``rankrl.data.catalogs``; the BM25 and
dense baselines, a ranking cut at the depth that maximises training F1, in
``rankrl.tasks.first_stage.CutoffBaselineTask``; the co-evolution figure in ``rankrl.report.rounds``,
declared in ``experiments/cogr/figures.yaml``.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time
import tomllib
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from rankrl.conf_defaults import conf_default
from rankrl.data.catalogs import SPLITS, Catalog, CatalogOnDemand
from rankrl.data.records import Document, Query, Run
from rankrl.errors import ConfigError
from rankrl.eval.metrics import PRF_COLUMNS, prf_from_counts, set_prf
from rankrl.retrieval.keyword_index import KeywordIndex, invert, keyword_bag, normalize_keyword
from rankrl.rl.role_outputs import TRAINED as TRAINED  # re-exported: the stamp on a stage's own sets
from rankrl.rl.role_outputs import RoleOutputs, WeightsSource, base_weights, weights_source
from rankrl.rollout.base import Generator, Messages
from rankrl.tasks.base import Example, Scores, SFTExample, TaskBase

PROMPTS: dict[str, dict[str, str]] = tomllib.loads(
    (Path(__file__).parent / "prompts" / "cogr.toml").read_text()
)
SIDES = ("query", "item")

# ---- 1. Keywords: parsing the generators' output -----------------------------------------------------------

THINK_END = "</think>"
# one pass over the text each; the marker and label patterns are anchored and bounded, so no backtracking
_SEPARATORS = re.compile(r"[,;\n|]")
_LIST_MARKER = re.compile(r"^(?:\d{1,3}[.)]|[-*•·])\s+")
_LABEL = re.compile(r"^\s*keywords?\s*:", re.IGNORECASE)


def parse_keywords(text: str) -> list[str]:
    """The keyword set in a generator's output: distinct normalised keywords in the order written.

    The paper does not specify an output format; the prompts ask for comma-separated keywords. Parsing is
    lenient because small models answer in lists: text after a closing ``</think>`` only (Qwen3's reasoning),
    a leading ``Keywords:`` label dropped, then split on commas, semicolons, ``|`` and line breaks; list
    markers (``1.``, ``2)``, ``-``, ``*``, ``•``) are removed and each piece is normalised as the index does
    (``rankrl.retrieval.keyword_index.normalize_keyword``: case, edge punctuation, spaces). Empty pieces and
    repeats are dropped. Linear time; never raises (anything that is not a string has no keywords).
    """
    if not isinstance(text, str):
        return []
    cut = text.rfind(THINK_END)
    if cut >= 0:
        text = text[cut + len(THINK_END) :]
    text = _LABEL.sub("", text, count=1)
    out: list[str] = []
    seen: set[str] = set()
    for piece in _SEPARATORS.split(text):
        keyword = normalize_keyword(_LIST_MARKER.sub("", piece.strip(), count=1))
        if keyword and keyword not in seen:
            seen.add(keyword)
            out.append(keyword)
    return out


def format_keywords(keywords: Sequence[str]) -> str:
    """The written form of a keyword set (SFT targets): comma-separated."""
    return ", ".join(keywords)


def within_budget(keywords: Sequence[str], budget: int) -> list[str]:
    """The first ``budget`` keywords: what an index or a search uses of a set (the paper states the budget
    only as a reward penalty; an over-long set is cut rather than dropped when indexed or searched)."""
    return list(keywords[:budget])


def keyword_stats(sets: Iterable[Sequence[str]], budget: int) -> dict[str, float]:
    """Mean keywords per set, share of multi-word keywords, share of sets over budget and of empty sets."""
    sets = list(sets)
    words = [k for s in sets for k in s]
    n = max(len(sets), 1)
    return {
        "keywords": sum(len(s) for s in sets) / n,
        "multiword": sum(" " in k for k in words) / max(len(words), 1),
        "over_budget": sum(len(s) > budget for s in sets) / n,
        "empty": sum(not s for s in sets) / n,
    }


# ---- 2. Prompts --------------------------------------------------------------------------------------------


def query_messages(query: str, budget: int) -> Messages:
    prompt = PROMPTS["query"]
    return [
        {"role": "system", "content": prompt["system"]},
        {"role": "user", "content": prompt["user"].format(budget=budget, query=query)},
    ]


def shown_description(doc: Document, max_words: int | None = None) -> str:
    """The part of an item's description the item generator is shown: its first ``max_words`` words."""
    return " ".join(doc.text.split()[:max_words])


def item_text(doc: Document, max_words: int | None = None) -> str:
    """What the item generator reads: title and description (the paper's item text), the description cut
    to its first ``max_words`` words when set."""
    text = shown_description(doc, max_words)
    return f"Title: {doc.title}\nDescription: {text}" if doc.title else f"Text: {text}"


def item_messages(doc: Document, budget: int, max_words: int | None = None) -> Messages:
    prompt = PROMPTS["item"]
    return [
        {"role": "system", "content": prompt["system"]},
        {"role": "user", "content": prompt["user"].format(budget=budget, item=item_text(doc, max_words))},
    ]


# ---- 3. Retrieval and rewards ------------------------------------------------------------------------------


def query_own_terms(query: Query) -> list[str]:
    """{q}: the query string itself is one more term of the query's bag."""
    return [query.text]


def item_own_terms(doc: Document) -> list[str]:
    """{i}: the item's title is one more term of its bag (passages without a title add none)."""
    return [doc.title] if doc.title else []


def build_index(
    items: Mapping[str, Document],
    item_keywords: Mapping[str, Sequence[str]],
    k_max: int,
    extra_terms: Mapping[str, Sequence[str]] | None = None,
) -> KeywordIndex:
    """The inverted index of every item's keyword set (first ``k_max``) plus its title (and, for the positive
    control, ``extra_terms``: more fixed terms of an item, ``echo_terms``)."""
    extra = extra_terms or {}
    return KeywordIndex(
        {i: within_budget(item_keywords.get(i, ()), k_max) for i in items},
        {i: [*item_own_terms(doc), *extra.get(i, ())] for i, doc in items.items()},
    )


def query_bag(keywords: Sequence[str], query: Query, k_max: int) -> frozenset[str]:
    """S_q ∪ {q}, normalised."""
    return keyword_bag(within_budget(keywords, k_max)) | keyword_bag(query_own_terms(query))


def query_reward(
    keywords: Sequence[str], query: Query, relevant: Collection[str], index: KeywordIndex, k_max: int
) -> float:
    """R_q: set F1 of the items retrieved by S_q ∪ {q}, or 0 when |S_q| > K_max."""
    if len(keywords) > k_max:
        return 0.0
    return set_prf(index.retrieve_bag(query_bag(keywords, query, k_max)), relevant)[2]


class ItemCounterfactual:
    """The frozen query side against a reference item index: the item reward, computed incrementally.

    Per query the reference retrieved set is reduced to two counts (retrieved, relevant retrieved); F1 comes
    from them through ``prf_from_counts``, the function ``set_prf`` itself uses. ``gain`` visits only the
    queries sharing a term with the item's old or new bag, in the fixed order of ``self.qids``, and adds
    F1_new - F1_ref for those whose retrieval of the item changes: every other query contributes exactly 0.0,
    and adding 0.0 to a float changes nothing, so the sum equals the full sum over all queries bit for bit
    (``brute_force_gain``).

    Args:
        index: the reference item index.
        query_bags: qid -> the frozen query bag S_q ∪ {q} (normalised).
        relevant: qid -> relevant item ids.
    """

    def __init__(
        self,
        index: KeywordIndex,
        query_bags: Mapping[str, Collection[str]],
        relevant: Mapping[str, Collection[str]],
    ) -> None:
        self.index = index
        self.qids = sorted(query_bags)
        self.position = {q: n for n, q in enumerate(self.qids)}
        self.query_bags = {q: frozenset(query_bags[q]) for q in self.qids}
        self.relevant = {q: frozenset(relevant.get(q, ())) for q in self.qids}
        self.reference = {q: index.retrieve_bag(self.query_bags[q]) for q in self.qids}
        self.counts = {
            q: (len(self.reference[q] & self.relevant[q]), len(self.reference[q]), len(self.relevant[q]))
            for q in self.qids
        }
        self.reference_f1 = {q: prf_from_counts(*self.counts[q])[2] for q in self.qids}
        self.query_postings = invert(self.query_bags)

    def total_f1(self) -> float:
        """Sum of F1 over the queries on the reference index."""
        return sum(self.reference_f1[q] for q in self.qids)

    def new_bag(self, item_id: str, new_keywords: Iterable[str]) -> frozenset[str]:
        """S_i ∪ {i} with the new keywords (an unknown item is named)."""
        self.index.bag_of(item_id)
        return keyword_bag(new_keywords) | self.index.own_terms[item_id]

    def affected_queries(self, item_id: str, new_keywords: Iterable[str]) -> list[str]:
        """Queries whose retrieval of ``item_id`` can change: those sharing a term with its old or new bag."""
        touched: set[str] = set()
        for term in self.index.bag_of(item_id) | self.new_bag(item_id, new_keywords):
            touched |= self.query_postings.get(term, set())
        return sorted(touched, key=self.position.__getitem__)

    def gain(self, item_id: str, new_keywords: Iterable[str]) -> float:
        """Sum over queries of F1 with ``item_id``'s keywords replaced, minus the reference sum."""
        new_keywords = list(new_keywords)
        new_bag = self.new_bag(item_id, new_keywords)
        total = 0.0
        for qid in self.affected_queries(item_id, new_keywords):
            was, now = item_id in self.reference[qid], not self.query_bags[qid].isdisjoint(new_bag)
            if was == now:
                continue
            hits, retrieved, num_relevant = self.counts[qid]
            step = 1 if now else -1
            hits += step if item_id in self.relevant[qid] else 0
            total += prf_from_counts(hits, retrieved + step, num_relevant)[2] - self.reference_f1[qid]
        return total


def item_reward(
    keywords: Sequence[str], item_id: str, counterfactual: ItemCounterfactual, k_max: int
) -> float:
    """R_i: the counterfactual gain of S_i over the reference index, or -1 when |S_i| > K_max."""
    if len(keywords) > k_max:
        return -1.0
    return counterfactual.gain(item_id, keywords)


def brute_force_gain(
    index: KeywordIndex,
    query_bags: Mapping[str, Collection[str]],
    relevant: Mapping[str, Collection[str]],
    item_id: str,
    new_keywords: Iterable[str],
    rebuild: bool = True,
) -> float:
    """The item reward by full recomputation: retrieve every query on the counterfactual index and on the
    reference one, and sum F1_new - F1_ref over all queries (sorted qids: the order ``gain`` uses).

    ``rebuild``: build the counterfactual index from scratch (``KeywordIndex.with_keywords``); False patches
    only the item's postings (a fast but still exhaustive baseline for the benchmark).
    """
    new_keywords = list(new_keywords)
    if rebuild:
        retrieve_new = index.with_keywords(item_id, new_keywords).retrieve_bag
    else:
        old_bag = index.bag_of(item_id)
        new_bag = keyword_bag(new_keywords) | index.own_terms[item_id]
        postings = dict(index.postings)
        for term in old_bag - new_bag:
            postings[term] = postings[term] - {item_id}
        for term in new_bag - old_bag:
            postings[term] = postings.get(term, set()) | {item_id}

        def retrieve_new(bag: Collection[str]) -> set[str]:
            found: set[str] = set()
            for term in bag:
                found |= postings.get(term, set())
            return found

    total = 0.0
    for qid in sorted(query_bags):
        rel = relevant.get(qid, ())
        total += (
            set_prf(retrieve_new(query_bags[qid]), rel)[2]
            - set_prf(index.retrieve_bag(query_bags[qid]), rel)[2]
        )
    return total


# ---- 4. SFT targets ----------------------------------------------------------------------------------------

ITEM_SFT_TARGETS = ("base_model", "tfidf")  # the base LLM's item keywords (the paper) | tfidf_item_keywords


def top_keywords(keyword_sets: Iterable[Sequence[str]], n: int) -> list[str]:
    """The ``n`` keywords found in the most sets (a set counts a keyword once); ties by first appearance."""
    counts: Counter[str] = Counter()
    for keywords in keyword_sets:
        counts.update(list(dict.fromkeys(keywords)))  # an iterable of keys: each distinct keyword once
    return [k for k, _ in counts.most_common(n)]  # most_common keeps insertion order among equal counts


def tfidf_item_keywords(catalog: Catalog, m: int, max_words: int | None = None) -> dict[str, list[str]]:
    """Each item's ``m`` highest-weighted TF-IDF words over the catalog, in descending weight (ties by
    vocabulary order): a format-only stand-in for the base LLM's item keywords (``item_sft_targets=tfidf``).

    Why: a small base model writes copied sentences, not keywords, so every retrieved set is empty and both
    rewards are 0. These targets use no relevance label and only the words the item generator reads
    (title and ``shown_description``): scikit-learn's English stop words, words of two or more letters
    (no digits), sublinear term frequency, the catalog as the document collection.
    """
    from sklearn.feature_extraction.text import TfidfVectorizer

    ids = sorted(catalog.items)
    texts = [f"{catalog.items[i].title}\n{shown_description(catalog.items[i], max_words)}" for i in ids]
    vectorizer = TfidfVectorizer(
        stop_words="english", sublinear_tf=True, token_pattern=r"(?u)\b[^\W\d_]{2,}\b"
    )
    weights = vectorizer.fit_transform(texts).tocsr()
    vocabulary = vectorizer.get_feature_names_out()
    out = {}
    for row, iid in enumerate(ids):
        start, end = weights.indptr[row], weights.indptr[row + 1]
        columns, values = weights.indices[start:end], weights.data[start:end]
        order = sorted(range(len(columns)), key=lambda k: (-values[k], columns[k]))[:m]
        out[iid] = [normalize_keyword(str(vocabulary[columns[k]])) for k in order]
    return out


# The positive control (#41), not the paper's task: ``paper`` indexes the item side's keywords;
# ``query_echo`` indexes a fixed item side with no generated keywords, each item's title plus, as its own
# terms, the words of every query it is relevant to that no other query has (``echo_terms``), so that
# copying the query's own words into S_q retrieves exactly its relevant items. Only the query side trains.
CONSTRUCTIONS = ("paper", "query_echo")
QUERY_SFT_TARGETS = (
    "gold",
    "format",
)  # gold: the paper's (query_echo: the query's own words); format: no gold
_CONTENT_WORD = re.compile(r"(?u)\b[^\W\d_]{2,}\b")  # the TF-IDF words' pattern


def content_words(text: str) -> list[str]:
    """The distinct words of ``text`` that are not English stop words, in order (TF-IDF's tokens)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    words = (normalize_keyword(w) for w in _CONTENT_WORD.findall(text.lower()))
    return list(dict.fromkeys(w for w in words if w and w not in ENGLISH_STOP_WORDS))


def echo_terms(catalog: Catalog) -> dict[str, list[str]]:
    """item -> the echo terms of the ``query_echo`` index: the content words of every query (both splits) it
    is relevant to that no other query of the catalog has. A word two queries share would retrieve either's
    items for both, so copying a query's own words retrieves exactly its relevant items (F1 1) where it has
    a word of its own; its shared words retrieve nothing."""
    words = {q: content_words(catalog.queries[q].text) for q in sorted(catalog.relevant)}
    owners = Counter(w for ws in words.values() for w in ws)
    terms: dict[str, list[str]] = {i: [] for i in catalog.items}
    for qid, ws in words.items():
        for item in catalog.relevant[qid]:
            terms[item].extend(w for w in ws if owners[w] == 1 and w not in terms[item])
    return terms


def query_sft_targets(
    catalog: Catalog, item_keywords: Mapping[str, Sequence[str]], n: int
) -> dict[str, list[str]]:
    """Each training query's target S_q: the top-``n`` keywords over its relevant items' initial keywords
    (items in id order). Queries whose relevant items have no keyword at all get no target."""
    targets = {}
    for qid in catalog.split("train"):
        keywords = top_keywords((item_keywords.get(i, ()) for i in sorted(catalog.relevant[qid])), n)
        if keywords:
            targets[qid] = keywords
    return targets


# ---- 5. Keyword files: one side's keyword sets, written by the evaluation that used them -------------------

# A side's keyword sets are the outputs of the role writing it (``rankrl.rl.role_outputs``): stored in the
# run folder that used them under these names, ``{"meta": ..., "keywords": {id: [keyword, ...]}}``; base
# model sets under ``<cache_dir>/cogr/<side>-base-<hash>.json``.
KEYWORD_FILES = {"query": "query_keywords.json", "item": "item_keywords.json"}


def _plain(value: Any) -> Any:
    """A config value as plain data (sampling nodes may arrive as dataclasses)."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return value


# where the settings of CoGRTask live: conf/task/cogr.yaml, their one home (rankrl.conf_defaults); a task
# built directly (tests, notebooks) gets the same values as a run
CONF = "task/cogr"


# ---- 6. The task as the training loop sees it --------------------------------------------------------------


class CoGRTask(CatalogOnDemand, TaskBase):
    """CoGR's prompts, SFT targets, rewards and evaluation; Hydra builds it by ``_target_``.

    Args:
        benchmark: catalog name (``rankrl.data.catalogs.CATALOGS``): ``wands`` or ``dl-pools-cpu``; or a
            ``Catalog``.
        data_dir: prepared data folder.
        benchmark_options: the catalog loader's options (``conf/benchmark/<name>.yaml``).
        role_specs: the run's ``roles`` node (role -> {model, init_from}); ``init_from`` says where each
            role's weights, and so its keyword files, come from.
        model_path: the default model path (roles without their own model).
        run_dir: this run's folder, where the evaluation writes the keyword sets it used.
        cache_dir: where base-model keyword sets are shared (``<cache_dir>/cogr/``).
        k_max: K_max, the keyword budget of the rewards (30).
        item_budget: M, the item keywords asked for and kept for SFT (10).
        query_budget: N, the size of the query SFT targets and the number asked for in the query prompt (15).
        item_max_words: description words shown to the item generator (None: all).
        item_sft_targets: where the item SFT targets (and the words query targets are made of) come from:
            ``base_model`` (the paper: the base LLM's item keywords) or ``tfidf`` (``tfidf_item_keywords``,
            a labelled format warm start for models too small to write keywords at all).
        shared_generator: one role ``shared`` writes both sides (the ablation); stages say which ``side`` they
            train (``query``, ``item``; ``both`` for its SFT stage).
        side: see ``shared_generator``; ignored with two generators (the role is the side).
        require_item_init: stop when training without ``roles.item.init_from`` (CoGR*: the query side must
            train over the SFT item index, not the base model's).
        probe_queries / probe_items: the monitor's fixed probe sets (training queries; their relevant items).
        index_sampling: the evaluation sampling; part of the identity of base-model keyword files.
        construction: ``paper``, or ``query_echo`` (the positive control of #41, not the paper's task): the
            item index is fixed, no generated keywords, each item's title plus the words of the queries it
            is relevant to that no other query has (``echo_terms``); no item generator is asked, only the
            query side trains.
        query_sft_target: the query SFT targets: ``gold`` (the paper's; ``query_echo``: the query's own
            content words, which retrieve its relevant items) or ``format`` (a seeded non-relevant item's
            TF-IDF words: the format, no gold; a control's warm start).
        seed: the base-model keyword file's identity (sampling is seeded by the run).
    """

    name = "cogr"
    roles = ("query", "item")

    def __init__(
        self,
        benchmark: str | Catalog,
        data_dir: str | Path = "data",
        benchmark_options: Mapping[str, Any] | None = None,
        role_specs: Mapping[str, Any] | None = None,
        model_path: str | None = None,
        run_dir: str | Path | None = None,
        cache_dir: str | Path | None = None,
        k_max: int = conf_default(CONF, "k_max"),
        item_budget: int = conf_default(CONF, "item_budget"),
        query_budget: int = conf_default(CONF, "query_budget"),
        item_max_words: int | None = conf_default(CONF, "item_max_words"),
        item_sft_targets: str = conf_default(CONF, "item_sft_targets"),
        shared_generator: bool = conf_default(CONF, "shared_generator"),
        side: str | None = conf_default(CONF, "side"),
        require_item_init: bool = conf_default(CONF, "require_item_init"),
        probe_queries: int = conf_default(CONF, "probe_queries"),
        probe_items: int = conf_default(CONF, "probe_items"),
        index_sampling: Any = None,
        construction: str = conf_default(CONF, "construction"),
        query_sft_target: str = conf_default(CONF, "query_sft_target"),
        seed: int = 0,
    ) -> None:
        if min(k_max, item_budget, query_budget) < 1:
            raise ValueError("k_max, item_budget and query_budget must be >= 1")
        if construction not in CONSTRUCTIONS:
            raise ConfigError(f"task.construction={construction!r}; valid: {', '.join(CONSTRUCTIONS)}")
        if query_sft_target not in QUERY_SFT_TARGETS:
            raise ConfigError(
                f"task.query_sft_target={query_sft_target!r}; valid: {', '.join(QUERY_SFT_TARGETS)}"
            )
        self.construction, self.query_sft_target = construction, query_sft_target
        self._catalog_args = (benchmark, data_dir, dict(benchmark_options or {}))
        self.k_max, self.item_budget, self.query_budget = k_max, item_budget, query_budget
        self.item_max_words = item_max_words
        if item_sft_targets not in ITEM_SFT_TARGETS:
            raise ConfigError(
                f"task.item_sft_targets={item_sft_targets!r}; valid: {', '.join(ITEM_SFT_TARGETS)}"
            )
        self.item_sft_targets = item_sft_targets
        self.shared = shared_generator
        self.roles = ("shared",) if shared_generator else ("query", "item")
        self.side_choice = side
        self.require_item_init = require_item_init
        self.probe_queries, self.probe_items = probe_queries, probe_items
        self.role_specs = {r: dict(v or {}) for r, v in (role_specs or {}).items()}
        self.model_path = model_path
        self.run_dir = Path(run_dir) if run_dir else None
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.index_sampling = _plain(index_sampling)
        self.seed = seed
        self.outputs = RoleOutputs("cogr", run_dir, cache_dir, seed, files=KEYWORD_FILES, field="keywords")
        self.role: str | None = None
        self.generators: dict[str, Generator] = {}
        self.side: str | None = None
        self._index: KeywordIndex | None = None
        self._counterfactual: ItemCounterfactual | None = None
        self._meta: dict[str, dict[str, Any]] = {}
        self.cost = {
            "query_generations": 0,
            "item_generations": 0,
            "completion_tokens": 0,
            "query_generate_s": 0.0,
            "item_generate_s": 0.0,
        }

    # -- roles, sides and where their keywords come from
    def role_of(self, side: str) -> str:
        return "shared" if self.shared else side

    def weights_source(self, side: str, at_start: bool = False) -> WeightsSource:
        """Where the weights writing ``side`` come from; ``at_start``: before this run trained anything."""
        return weights_source(self.role_of(side), self.role, self.role_specs, self.model_path, at_start)

    def base_source(self, side: str) -> WeightsSource:
        """The base model of the role writing ``side`` (its own ``model`` node, else the run's model)."""
        return base_weights(self.role_of(side), self.role_specs, self.model_path)

    def keyword_meta(self, side: str) -> dict[str, Any]:
        """What a stored keyword file must match: catalog, prompt, budgets, indexing sampling."""
        if side not in self._meta:
            self._meta[side] = self._keyword_meta(side)
        return dict(self._meta[side])

    def _keyword_meta(self, side: str) -> dict[str, Any]:
        prompt = json.dumps(
            [
                PROMPTS[side],
                self.query_budget if side == "query" else self.item_budget,
                self.item_max_words if side == "item" else None,
            ]
        )
        return {
            "side": side,
            "catalog": self.catalog.fingerprint(),
            "prompt": hashlib.sha256(prompt.encode()).hexdigest()[:16],
            "sampling": json.dumps(self.index_sampling, sort_keys=True, default=str),
        }

    def keywords(
        self, side: str, ids: Sequence[str], generator: Generator | None, source: WeightsSource
    ) -> dict[str, list[str]]:
        """``side``'s keyword sets for ``ids`` from the weights ``source`` names: read from the file those
        weights' run wrote when it has them all, else written now by ``generator`` (and stored)."""
        missing = ConfigError(
            f"no {side} keyword sets for the {self.role_of(side)!r} role's weights ({source.describe()}) "
            f"and no generator to write them in this stage: the stage that produced those weights "
            f"writes {KEYWORD_FILES[side]} when it finishes (base weights: the pipeline's `base` "
            f"evaluation stage, which `python -m rankrl.pipeline experiment=cogr/...` runs first)"
        )
        make = None if generator is None else lambda wanted: self.generate(side, wanted, generator)
        return self.outputs.get_or_make(side, ids, source, self.keyword_meta(side), make, missing)

    def generate(self, side: str, ids: Sequence[str], generator: Generator) -> dict[str, list[str]]:
        """One generator call over every id (the engine batches); parsed keyword sets."""
        if side == "query":
            prompts = [query_messages(self.catalog.queries[q].text, self.query_budget) for q in ids]
        else:
            prompts = [
                item_messages(self.catalog.items[i], self.item_budget, self.item_max_words) for i in ids
            ]
        start = time.perf_counter()
        out = generator(prompts)
        self.cost[f"{side}_generate_s"] += time.perf_counter() - start
        self.cost[f"{side}_generations"] += len(out)
        self.cost["completion_tokens"] += sum(g.completion_tokens for g in out)
        return {i: parse_keywords(g.text) for i, g in zip(ids, out, strict=True)}

    # -- binding a stage
    def bind(self, role: str, generators: Mapping[str, Generator]) -> None:
        super().bind(role, generators)
        if self.shared:
            if self.side_choice not in ("query", "item", "both"):
                raise ConfigError(
                    "a shared generator trains one side per stage: set task.side to query, item "
                    f"or both (SFT), got {self.side_choice!r}"
                )
            self.side = self.side_choice
        else:
            self.side = role
        if (
            self.require_item_init
            and self.side == "query"
            and not self.role_specs.get("item", {}).get("init_from")
        ):
            raise ConfigError(
                "CoGR* trains the query side over the SFT item index: set roles.item.init_from to the "
                "sft_item stage of a finished cogr/cogr_<benchmark> pipeline (and roles.query.init_from "
                "to its sft_query stage); experiments/cogr/reproduce.sh does"
            )
        if self.construction == "query_echo" and self.side != "query":
            raise ConfigError(
                "task.construction=query_echo fixes the item index: train the query side only "
                f"(task.side=query with a shared generator), not side {self.side!r}"
            )
        self._index = self._counterfactual = None

    def fixed_index(self) -> tuple[dict[str, list[str]], KeywordIndex]:
        """``query_echo``: the fixed item index, no generated keywords, each item's title and echo terms."""
        keywords: dict[str, list[str]] = {i: [] for i in self.catalog.items}
        return keywords, build_index(self.catalog.items, keywords, self.k_max, echo_terms(self.catalog))

    def frozen_generator(self, side: str) -> Generator | None:
        return self.generators.get(self.role_of(side)) if self.role_of(side) != self.role else None

    def item_index(self) -> KeywordIndex:
        """The item index of the item side's weights at the start of this stage (frozen, or the reference)."""
        if self._index is None and self.construction == "query_echo":
            self._index = self.fixed_index()[1]
        if self._index is None:
            items = list(self.catalog.items)
            keywords = self.keywords(
                "item", items, self.frozen_generator("item"), self.weights_source("item", True)
            )
            self._index = build_index(self.catalog.items, keywords, self.k_max)
        return self._index

    def counterfactual(self) -> ItemCounterfactual:
        """The frozen query side (training queries) against the reference item index."""
        if self._counterfactual is None:
            train = self.catalog.split("train")
            keywords = self.keywords(
                "query", train, self.frozen_generator("query"), self.weights_source("query", True)
            )
            bags = {q: query_bag(keywords[q], self.catalog.queries[q], self.k_max) for q in train}
            self._counterfactual = ItemCounterfactual(self.item_index(), bags, self.catalog.relevant)
        return self._counterfactual

    # -- GRPO
    def train_examples(self) -> list[Example]:
        if self.side == "query":
            self.item_index()
            return [
                Example(
                    f"query:{q}",
                    query_messages(self.catalog.queries[q].text, self.query_budget),
                    {"side": "query", "id": q},
                )
                for q in self.catalog.split("train")
            ]
        if self.side == "item":
            self.counterfactual()
            return [
                Example(
                    f"item:{i}",
                    item_messages(doc, self.item_budget, self.item_max_words),
                    {"side": "item", "id": i},
                )
                for i, doc in self.catalog.items.items()
            ]
        raise ValueError(f"GRPO trains one side; this stage's side is {self.side!r} (call bind first)")

    def score(self, examples: Sequence[Example], completions: Sequence[str]) -> Scores:
        """R_q for query prompts, R_i for item prompts; format_ok = at least one keyword parsed."""
        if len(examples) != len(completions):
            raise ValueError(f"{len(examples)} examples for {len(completions)} completions: need one each")
        parsed = [parse_keywords(c) for c in completions]
        rewards = []
        for ex, keywords in zip(examples, parsed):
            side, ident = ex.target["side"], ex.target["id"]
            if side == "query":
                rewards.append(
                    query_reward(
                        keywords,
                        self.catalog.queries[ident],
                        self.catalog.relevant[ident],
                        self.item_index(),
                        self.k_max,
                    )
                )
            else:
                rewards.append(item_reward(keywords, ident, self.counterfactual(), self.k_max))
        rewards_t = torch.tensor(rewards, dtype=torch.float32)
        sizes = torch.tensor([float(len(k)) for k in parsed])
        over = torch.tensor([float(len(k) > self.k_max) for k in parsed])
        ok = torch.tensor([bool(k) for k in parsed], dtype=torch.bool)
        stats = keyword_stats(parsed, self.k_max)
        n = max(len(parsed), 1)
        metrics = {
            "reward": float(rewards_t.mean()) if rewards else 0.0,
            "keywords": stats["keywords"],
            "multiword": stats["multiword"],
            "over_budget_rate": stats["over_budget"],
            "format_error_rate": 1 - float(ok.sum()) / n,
        }
        return Scores(rewards_t, ok, {"num_keywords": sizes, "over_budget": over}, metrics)

    # -- SFT
    def initial_item_keywords(self) -> dict[str, list[str]]:
        """The item SFT targets (first M), which the query targets are also made of: the base LLM's item
        keywords (the paper), or with ``item_sft_targets=tfidf`` the TF-IDF words of each item."""
        if self.item_sft_targets == "tfidf":
            return tfidf_item_keywords(self.catalog, self.item_budget, self.item_max_words)
        return self.base_item_keywords()

    def base_item_keywords(self) -> dict[str, list[str]]:
        """The base LLM's item keywords (first M).

        They are the base model's whatever the item role starts from: its generator writes them only when the
        item role is frozen at the base weights (the query SFT stage); otherwise they come from the file the
        pipeline's ``base`` stage (or that SFT stage) wrote.
        """
        source = self.weights_source("item", at_start=True)
        generator = self.frozen_generator("item") if source.kind == "base" else None
        items = list(self.catalog.items)
        found = self.keywords("item", items, generator, self.base_source("item"))
        return {i: within_budget(found[i], self.item_budget) for i in items}

    def sft_examples(self) -> list[SFTExample]:
        if self.side not in ("query", "item", "both"):
            raise ValueError(f"no SFT examples for side {self.side!r} (call bind first)")
        base = self.initial_item_keywords()
        pairs: list[SFTExample] = []
        if self.side in ("query", "both"):
            for qid, target in self.query_targets(base).items():
                pairs.append(
                    SFTExample(
                        f"query:{qid}",
                        query_messages(self.catalog.queries[qid].text, self.query_budget),
                        format_keywords(target),
                    )
                )
        if self.side in ("item", "both"):
            for iid, keywords in base.items():
                if keywords:  # an item the base model wrote nothing usable for has no target
                    pairs.append(
                        SFTExample(
                            f"item:{iid}",
                            item_messages(self.catalog.items[iid], self.item_budget, self.item_max_words),
                            format_keywords(keywords),
                        )
                    )
        return pairs

    def query_targets(self, item_keywords: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """Each training query's SFT target (``query_sft_target``; the paper's: ``query_sft_targets``)."""
        train = self.catalog.split("train")
        if self.query_sft_target == "format":  # a seeded item's words that retrieve none of q's: no gold
            # "not relevant" alone is not enough: another item's words can name a relevant item's term (seen
            # on the 94-query catalog), so a draw whose words score through the index the query side meets is
            # drawn again (a redraw, not a filter: catalogs where no draw scores keep their earlier targets)
            index = (
                self.fixed_index()[1]
                if self.construction == "query_echo"
                else build_index(self.catalog.items, item_keywords, self.k_max)
            )
            rng = random.Random(f"{self.seed}\x00cogr-format")
            items = sorted(item_keywords)
            targets = {}
            for q in train:
                query, relevant = self.catalog.queries[q], self.catalog.relevant[q]
                others = [i for i in items if i not in relevant and item_keywords[i]]
                for _ in range(len(others)):
                    words = within_budget(item_keywords[rng.choice(others)], self.query_budget)
                    if query_reward(words, query, relevant, index, self.k_max) == 0.0:
                        break
                else:
                    raise ValueError(
                        f"no format target for query {q}: all {len(others)} draws retrieve its items"
                    )
                targets[q] = words
            return targets
        if self.construction == "query_echo":
            return {q: words for q in train if (words := content_words(self.catalog.queries[q].text))}
        return query_sft_targets(self.catalog, item_keywords, self.query_budget)

    # -- monitor and evaluation
    def monitor(self, generators: Mapping[str, Generator]) -> dict[str, float]:
        """Query stage: F1 of the current query generator on ``probe_queries`` training queries against the
        frozen index. Item stage: mean counterfactual gain of the current item keywords of ``probe_items``
        items relevant to training queries. SFT stages: nothing."""
        if self.side == "query":
            qids = self.catalog.split("train")[: self.probe_queries]
            found = self.generate("query", qids, generators[self.role_of("query")])
            f1 = [
                query_reward(
                    found[q], self.catalog.queries[q], self.catalog.relevant[q], self.item_index(), self.k_max
                )
                for q in qids
            ]
            return {"probe_f1": sum(f1) / max(len(f1), 1)}
        if self.side == "item":
            train = self.catalog.split("train")
            items = sorted({i for q in train for i in self.catalog.relevant[q]})[: self.probe_items]
            found = self.generate("item", items, generators[self.role_of("item")])
            gains = [item_reward(found[i], i, self.counterfactual(), self.k_max) for i in items]
            return {"probe_gain": sum(gains) / max(len(gains), 1)}
        return {}

    def evaluate(
        self, generators: Mapping[str, Generator], split: str = "validation", limit: int | None = None
    ) -> dict[str, Any]:
        """Index the whole catalog with the item generator, search ``split``'s queries with the query
        generator's sets; mean set precision, recall and F1 (``limit``: the first queries only, smoke runs).

        Also reported: ``train_f1`` (training queries: their keyword sets are written anyway, for the next
        item-side stage), keyword statistics of both sides (mean set size, share of multi-word keywords, share
        over K_max), the mean retrieved-set size. Returns ``{"metrics", "run", "cost"}``; ``run`` ranks each
        query's retrieved items by BM25 over the keyword bags.
        """
        if split not in SPLITS:
            raise ValueError(f"CoGR evaluates split 'train' or 'validation', got {split!r}")
        items = list(self.catalog.items)
        if self.construction == "query_echo":
            item_kw, index = self.fixed_index()
        else:
            item_kw = self.keywords(
                "item", items, generators.get(self.role_of("item")), self.weights_source("item")
            )
            index = build_index(self.catalog.items, item_kw, self.k_max)
        evaluated = self.catalog.split(split)[:limit]
        train = self.catalog.split("train")
        wanted = list(dict.fromkeys([*train, *evaluated]))
        query_kw = self.keywords(
            "query", wanted, generators.get(self.role_of("query")), self.weights_source("query")
        )

        def retrieved(qids: Sequence[str]) -> dict[str, set[str]]:
            return {
                q: index.retrieve_bag(query_bag(query_kw[q], self.catalog.queries[q], self.k_max))
                for q in qids
            }

        found = retrieved(evaluated)
        scores = [set_prf(found[q], self.catalog.relevant[q]) for q in evaluated]
        train_found = {**retrieved([q for q in train if q not in found]), **found}
        train_f1 = [set_prf(train_found[q], self.catalog.relevant[q])[2] for q in train]
        n = max(len(scores), 1)
        q_stats = keyword_stats([query_kw[q] for q in evaluated], self.k_max)
        i_stats = keyword_stats([item_kw[i] for i in items], self.k_max)
        metrics = {
            "f1": sum(s[2] for s in scores) / n,
            "precision": sum(s[0] for s in scores) / n,
            "recall": sum(s[1] for s in scores) / n,
            "train_f1": sum(train_f1) / max(len(train_f1), 1),
            "retrieved": sum(len(found[q]) for q in evaluated) / n,
            "query_keywords": q_stats["keywords"],
            "query_multiword": q_stats["multiword"],
            "query_over_budget": q_stats["over_budget"],
            "item_keywords": i_stats["keywords"],
            "item_multiword": i_stats["multiword"],
            "item_over_budget": i_stats["over_budget"],
            "num_queries": float(len(evaluated)),
            "num_items": float(len(items)),
        }
        run: Run = {
            q: dict(index.rank_bag(query_bag(query_kw[q], self.catalog.queries[q], self.k_max)))
            for q in evaluated
        }
        per_query = pd.DataFrame(scores, index=pd.Index(evaluated, name="qid"), columns=list(PRF_COLUMNS))
        return {"metrics": metrics, "run": run, "cost": dict(self.cost), "per_query": per_query}
