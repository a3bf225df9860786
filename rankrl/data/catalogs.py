"""Item catalogs with binary relevance and query splits, for tasks that retrieve sets from a whole catalog
(CoGR): every query is searched against every item, and a retrieved set is scored by its set F1.

A ``Catalog`` is built from a benchmark loader (``rankrl.data.load_benchmark``): graded labels are cut at
one level (``binarize``), queries left with nothing relevant are dropped, and the queries are split into
``train`` and ``validation``. ``CATALOGS`` names the catalogs a config can choose
(``conf/benchmark/<name>.yaml`` holds each one's loader options).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rankrl.data import load_benchmark
from rankrl.data.common import keyed_rng, split_ids
from rankrl.data.records import Document, Query

SPLITS = ("train", "validation")  # every catalog's query splits


@dataclass
class Catalog:
    """One item catalog shared by every split, with queries split into train and validation.

    Args:
        name: the benchmark's config name.
        items: item id -> Document (title + text).
        queries: qid -> Query, both splits.
        relevant: qid -> the relevant item ids (binarised labels); every query has at least one.
        splits: ``train`` and ``validation`` -> qids, disjoint.
    """

    name: str
    items: dict[str, Document]
    queries: dict[str, Query]
    relevant: dict[str, frozenset[str]]
    splits: dict[str, list[str]]

    def __post_init__(self) -> None:
        # set_prf(empty, empty) = 1: a query with nothing relevant would reward retrieving nothing and count
        # as perfect in the mean; trec_eval leaves such queries out, and so do training and evaluation here
        empty = [q for qids in self.splits.values() for q in qids if not self.relevant.get(q)]
        if empty:
            raise ValueError(
                f"catalog {self.name!r}: {len(empty)} queries without a relevant item (e.g. {empty[0]!r}); "
                "drop them when building it (binarize does)"
            )

    def split(self, name: str) -> list[str]:
        if name not in self.splits:
            raise KeyError(f"catalog {self.name!r} has no split {name!r}; valid: {', '.join(self.splits)}")
        return self.splits[name]

    def fingerprint(self) -> str:
        """A content hash of items, queries, labels and splits: other catalogs' keyword files never match."""
        h = hashlib.sha256(self.name.encode())
        for iid in sorted(self.items):
            doc = self.items[iid]
            h.update(f"\x00{iid}\x00{doc.title}\x00{doc.text}".encode())
        for qid in sorted(self.queries):
            h.update(
                f"\x01{qid}\x00{self.queries[qid].text}\x00{','.join(sorted(self.relevant[qid]))}".encode()
            )
        h.update(json.dumps(self.splits, sort_keys=True).encode())
        return h.hexdigest()[:16]


def binarize(
    qrels: Mapping[str, Mapping[str, int]], level: int, items: Collection[str]
) -> dict[str, frozenset[str]]:
    """qid -> items of the catalog graded >= ``level``; queries left with none are dropped (their F1 says
    nothing: an empty retrieved set would already be perfect)."""
    out = {}
    for qid, grades in qrels.items():
        rel = frozenset(d for d, g in grades.items() if g >= level and d in items)
        if rel:
            out[qid] = rel
    return out


def wands_catalog(data_dir: str | Path, num_test: int = 50, seed: int = 0) -> Catalog:
    """WANDS: 42,994 products (title = product name, text = description), 480 queries; Exact and Partial are
    relevant, Irrelevant is not (the loader's grades 2/1/0, level 1). Queries are split by the loader's seeded
    shuffle into 430 train / 50 validation, the paper's sizes (its query ids are not published; ``num_test``
    and ``seed`` are the loader's options, conf/benchmark/wands.yaml); queries without any relevant product
    are left out of both splits. Missing ``product.csv`` / ``label.csv`` stop with ``python -m
    rankrl.data.prepare --only wands`` (the data layer's ``MissingDataError``)."""
    bench = load_benchmark("wands", data_dir, num_test=num_test, seed=seed)
    relevant = binarize(bench.qrels, bench.relevance_level, bench.corpus)
    splits = {
        "train": [q for q in bench.splits["train"] if q in relevant],
        "validation": [q for q in bench.splits["test"] if q in relevant],
    }
    queries = {q: bench.queries[q] for q in relevant}
    return Catalog("wands", dict(bench.corpus), queries, relevant, splits)


def dl_pools_catalog(
    data_dir: str | Path,
    max_queries: int | None = None,
    relevant_per_query: int | None = None,
    passages_per_query: int | None = None,
    num_validation: int = 20,
    seed: int = 0,
    name: str = "dl-pools",
) -> Catalog:
    """TREC DL19 + DL20 judged pools as a multi-relevant catalog (the CPU-scale stand-in for WANDS).

    Items: every passage judged for a DL19 or DL20 query whose text ships with the BM25 top-100 files
    (5,008 passages); relevant: judged >= 2 (TREC DL's binary level); queries: the judged ones with at least
    one relevant passage in the catalog (94 of 97). The documented split rule: a seeded shuffle of those
    queries (``rankrl.data.common.split_ids``), ``num_validation`` of them for validation, the rest train.

    CPU scale shrinks it (``conf/benchmark/dl-pools-cpu.yaml``): ``max_queries`` queries drawn with ``seed``;
    per query at most ``relevant_per_query`` of its relevant passages and ``passages_per_query`` passages in
    all, the rest judged non-relevant (grades 0-1, the hard negatives), each drawn with a per-query seed. The
    catalog is the union of the kept pools, and a query's relevant set is every kept passage it judged >= 2.
    """
    corpus: dict[str, Document] = {}
    qrels: dict[str, dict[str, int]] = {}
    queries: dict[str, Query] = {}
    for year in ("dl19", "dl20"):
        bench = load_benchmark(year, data_dir)
        for qid, grades in bench.qrels.items():
            with_text = {d: g for d, g in grades.items() if d in bench.corpus}
            if any(g >= 2 for g in with_text.values()):
                queries[qid], qrels[qid] = Query(qid, bench.queries[qid].text, {"year": year}), with_text
                corpus.update((d, bench.corpus[d]) for d in with_text)
    qids = sorted(queries)
    if max_queries is not None:
        qids = sorted(random.Random(seed).sample(qids, min(max_queries, len(qids))))
    if passages_per_query is not None or relevant_per_query is not None:
        kept: set[str] = set()
        for qid in qids:
            rng = keyed_rng(seed, qid)
            pos = sorted(d for d, g in qrels[qid].items() if g >= 2)
            neg = sorted(d for d, g in qrels[qid].items() if g < 2)
            pos = rng.sample(pos, min(len(pos), relevant_per_query or len(pos)))
            room = (passages_per_query or len(pos) + len(neg)) - len(pos)
            kept.update(pos, rng.sample(neg, max(0, min(room, len(neg)))))
        corpus = {d: corpus[d] for d in sorted(kept)}
    else:
        corpus = {d: corpus[d] for d in sorted({d for q in qids for d in qrels[q]})}
    relevant = binarize({q: qrels[q] for q in qids}, 2, corpus)
    qids = [q for q in qids if q in relevant]
    if not 0 < num_validation < len(qids):
        raise ValueError(
            f"num_validation must be between 1 and {len(qids) - 1} ({len(qids)} queries), "
            f"got {num_validation}"
        )
    splits = split_ids(
        qids, {"train": 1 - num_validation / len(qids), "validation": num_validation / len(qids)}, seed
    )
    return Catalog(name, corpus, {q: queries[q] for q in qids}, relevant, splits)


CATALOGS: dict[str, Callable[..., Catalog]] = {
    "wands": wands_catalog,
    "dl-pools": dl_pools_catalog,
    "dl-pools-cpu": lambda data_dir, **kw: dl_pools_catalog(data_dir, **kw, name="dl-pools-cpu"),
}


def load_catalog(name: str | Catalog, data_dir: str | Path, **options: Any) -> Catalog:
    """The catalog ``name`` (``CATALOGS``) with its loader options from ``conf/benchmark/<name>.yaml``; a
    ``Catalog`` is returned as it is."""
    if isinstance(name, Catalog):
        return name
    if name not in CATALOGS:
        raise ValueError(f"no catalog {name!r}; valid: {', '.join(CATALOGS)}")
    return CATALOGS[name](data_dir, **options)


class CatalogOnDemand:
    """A task's catalog, loaded on first use: a missing data file then stops the run with the data layer's
    error naming its fetch command (raised from a constructor, Hydra would wrap it in its own exception)."""

    _catalog_args: tuple[Any, Any, dict[str, Any]]
    _catalog: Catalog | None = None

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            name, data_dir, options = self._catalog_args
            self._catalog = load_catalog(name, data_dir, **options)
        return self._catalog
