"""What the rank reward costs: ``VectorIndex.rank_of`` on a memory-mapped cached corpus vs the bare matmul.

GRAPE's reward needs the rank of the gold item among all N corpus items for every rewrite of a step. That is
one (B, d) x (d, N) matrix product plus one comparison per score; the goal is at most twice the bare product,
i.e. the rank bookkeeping and reading the corpus from a memory-mapped cache cost no more than the product.

Setup: N random unit vectors of width d (CLIP ViT-B/16's 512 by default) written through
``cached_vectors`` (the cache every retriever uses) and reopened memory-mapped; B query vectors (64 = 8
prompts x G = 8 rewrites). Timed, alternating, after one warm-up each: the bare ``queries @ corpus.T``
with the corpus in RAM, and ``rank_of`` on the memory-mapped index (normalising the queries, the product,
the gold scores, the comparison and the count). Reported: medians, their ratio, and for information
``probe`` (ranks plus the monitor's similarities) and faiss top-10 search.

CLI: ``python -m rankrl.benchmarks.grape_rank [--items N] [--dim D] [--queries B] [--repeats R]
[--out FILE]``.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rankrl.benchmarks import argument_parser
from rankrl.retrieval.vector_index import cached_vectors, l2_normalize

GOAL_RATIO = 2.0


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(
    items: int = 100_000, dim: int = 512, queries: int = 64, repeats: int = 9, seed: int = 0
) -> dict[str, Any]:
    """Measure and return the report (seconds are medians over ``repeats``)."""
    rng = np.random.default_rng(seed)
    corpus = l2_normalize(rng.standard_normal((items, dim), dtype=np.float32))  # (N, d), in RAM
    ids = [f"d{i}" for i in range(items)]
    query_vectors = rng.standard_normal((queries, dim), dtype=np.float32)  # (B, d)
    targets = [ids[i] for i in rng.integers(0, items, size=queries)]
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        cached_vectors(
            cache,
            "bench",
            ids,
            lambda rows: corpus[rows.start : rows.stop],
            batch_size=8192,
            desc="writing the cache",
        )
        write_s = time.perf_counter() - start
        index = cached_vectors(cache, "bench", ids, lambda rows: None)  # reopened: memory-mapped
        if not isinstance(index.vectors.base, np.memmap):
            raise RuntimeError("the cached index was not memory-mapped")
        first_rank_s = _timed(lambda: index.rank_of(query_vectors, targets))
        normalized = l2_normalize(query_vectors)
        bare, ranked = [], []
        _timed(lambda: normalized @ corpus.T)
        for _ in range(repeats):  # alternate, so load on the shared machine hits both alike
            bare.append(_timed(lambda: normalized @ corpus.T))
            ranked.append(_timed(lambda: index.rank_of(query_vectors, targets)))
        probe = [_timed(lambda: index.probe(query_vectors, [[t] for t in targets])) for _ in range(3)]
        _ = index.faiss  # built once (copies the vectors into faiss), not timed
        search = [_timed(lambda: index.search(targets, query_vectors, 10)) for _ in range(3)]
        # the same ranks as the bare product, up to float32 rounding (BLAS may sum in another order)
        check = index.rank_of(query_vectors, targets)
        scores = normalized @ corpus.T
        gold = scores[np.arange(queries), [int(t[1:]) for t in targets]][:, None]
        low, high = (scores > gold + 1e-5).sum(axis=1) + 1, (scores >= gold - 1e-5).sum(axis=1)
        if not np.all((low <= check) & (check <= high)):
            raise RuntimeError("rank_of disagrees with the bare matmul's ranks")
    bare_s, rank_s = statistics.median(bare), statistics.median(ranked)
    return {
        "items": items,
        "dim": dim,
        "queries": queries,
        "repeats": repeats,
        "bare_matmul_s": bare_s,
        "rank_of_mmap_s": rank_s,
        "ratio": rank_s / bare_s,
        "goal_ratio": GOAL_RATIO,
        "meets_goal": rank_s / bare_s <= GOAL_RATIO,
        "rank_of_first_call_s": first_rank_s,
        "probe_with_similarities_s": statistics.median(probe),
        "faiss_top10_search_s": statistics.median(search),
        "cache_write_s": write_s,
        "corpus_mib": corpus.nbytes / 2**20,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "numpy": np.__version__},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(__spec__, __doc__)
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, default=None, help="also write the report as JSON here")
    args = parser.parse_args(argv)
    report = run(args.items, args.dim, args.queries, args.repeats)
    text = json.dumps(report, indent=2)
    print(text)
    print(
        f"rank_of on the memory-mapped cache: {report['rank_of_mmap_s'] * 1e3:.1f} ms, bare matmul "
        f"{report['bare_matmul_s'] * 1e3:.1f} ms: ratio {report['ratio']:.2f} (goal <= {GOAL_RATIO})"
    )
    if args.out:
        args.out.write_text(text + "\n")
    return report


if __name__ == "__main__":
    main()
