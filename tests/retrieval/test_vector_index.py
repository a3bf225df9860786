"""The rank of a target over the whole corpus: one matmul, ties pessimistic, equal to a brute-force sort;
and the on-disk cache of corpus vectors, reopened memory-mapped."""

from __future__ import annotations

import numpy as np
import pytest

from rankrl.retrieval.vector_index import VectorIndex, cached_vectors, load_vectors


def brute_force_rank(
    query: np.ndarray, corpus: np.ndarray, target: int, excluded: set[int] = frozenset()
) -> int:
    """Sort every item by its score (float64 dot products, one at a time), the target after all items it ties
    with; its 1-based position among the items not excluded."""
    scores = [float(np.dot(query.astype(np.float64), row.astype(np.float64))) for row in corpus]
    order = sorted(
        (i for i in range(len(corpus)) if i not in excluded or i == target),
        key=lambda i: (-scores[i], i == target),
    )
    return order.index(target) + 1


def tied_corpus(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Unit vectors with many exact ties: each row is a signed basis vector (scaled, so normalising divides
    exactly), so every score is exactly +-one coordinate of the query and rows repeat."""
    axes = rng.integers(0, d, size=n)
    signs = rng.choice([-1.0, 1.0], size=n)
    scale = rng.choice([1.0, 2.0, 4.0], size=n)  # normalised back to exactly 1
    corpus = np.zeros((n, d), dtype=np.float32)
    corpus[np.arange(n), axes] = signs * scale
    return corpus


def tied_target_sets(seed: int, n: int, d: int, b: int, max_targets: int):
    """An index over ``tied_corpus``, ``b`` integer queries, and for each a set of 1..max_targets targets."""
    rng = np.random.default_rng(seed)
    index = VectorIndex([f"d{i}" for i in range(n)], tied_corpus(rng, n=n, d=d))
    queries = rng.integers(-3, 4, size=(b, d)).astype(np.float32)
    sets = [
        [f"d{i}" for i in rng.choice(n, size=rng.integers(1, max_targets + 1), replace=False)]
        for _ in range(b)
    ]
    return index, queries, sets


@pytest.mark.parametrize("seed", range(5))
def test_rank_equals_brute_force_sort_with_many_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    corpus = tied_corpus(rng, n=60, d=4)  # 60 items on 8 directions: ties everywhere
    index = VectorIndex([f"d{i}" for i in range(60)], corpus)
    queries = rng.integers(-3, 4, size=(25, 4)).astype(np.float32)  # small integers: exact ties between axes
    queries[0] = 0.0  # a query that scores every item 0 ranks its target last
    targets = rng.integers(0, 60, size=25)
    ranks = index.rank_of(queries, [f"d{t}" for t in targets])
    expected = [
        brute_force_rank(q / max(np.linalg.norm(q), 1e-12), index.vectors, t)
        for q, t in zip(queries, targets)
    ]
    assert ranks.tolist() == expected
    assert ranks[0] == 60


@pytest.mark.parametrize("seed", range(3))
def test_rank_equals_brute_force_on_random_vectors_with_duplicated_rows(seed: int) -> None:
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(40, 16)).astype(np.float32)
    corpus = np.concatenate([base, base[:15]])  # exact duplicates tie exactly
    index = VectorIndex([f"d{i}" for i in range(len(corpus))], corpus)
    queries = rng.normal(size=(30, 16)).astype(np.float32)
    targets = rng.integers(0, len(corpus), size=30)
    ranks = index.rank_of(queries, [f"d{t}" for t in targets])
    scores = index.scores(queries)  # the brute force sorts the very scores compared, one query at a time
    for b, t in enumerate(targets):
        order = sorted(range(len(corpus)), key=lambda i: (-scores[b, i], i == t))
        assert ranks[b] == order.index(t) + 1
    duplicated = [t for t in targets if t < 15 or t >= 40]
    assert duplicated, "the draw should hit a duplicated item"


def test_excluded_items_leave_the_ranking_and_the_corpus_size() -> None:
    rng = np.random.default_rng(7)
    corpus = tied_corpus(rng, n=30, d=3)
    index = VectorIndex([f"d{i}" for i in range(30)], corpus)
    queries = rng.integers(-2, 3, size=(12, 3)).astype(np.float32)
    targets = rng.integers(0, 30, size=12)
    excluded = [[f"d{(t + 1) % 30}", f"d{(t + 7) % 30}"] for t in targets]
    ranks = index.rank_of(queries, [f"d{t}" for t in targets], excluded)
    for b, t in enumerate(targets):
        q = queries[b] / max(np.linalg.norm(queries[b]), 1e-12)
        assert ranks[b] == brute_force_rank(q, index.vectors, t, {(t + 1) % 30, (t + 7) % 30})
    probe = index.probe(queries, [[f"d{t}"] for t in targets], excluded)
    assert probe.rank.tolist() == ranks.tolist() and probe.size.tolist() == [28] * 12


def test_best_rank_of_several_targets_is_the_best_of_their_ranks() -> None:
    index, queries, sets = tied_target_sets(seed=3, n=50, d=5, b=10, max_targets=4)
    best = index.best_rank_of(queries, sets)
    for b, targets in enumerate(sets):
        singles = index.rank_of(np.repeat(queries[b : b + 1], len(targets), axis=0), targets)
        assert best[b] == singles.min()


def test_probe_similarities() -> None:
    rng = np.random.default_rng(5)
    corpus = rng.normal(size=(20, 8)).astype(np.float32)
    index = VectorIndex([f"d{i}" for i in range(20)], corpus)
    queries = rng.normal(size=(4, 8)).astype(np.float32)
    sets = [["d0", "d1"], ["d2"], ["d3", "d4", "d5"], ["d19"]]
    probe = index.probe(queries, sets)
    scores = index.scores(queries)
    for b, targets in enumerate(sets):
        rows = [int(t[1:]) for t in targets]
        others = [i for i in range(20) if i not in rows]
        assert probe.gold[b] == pytest.approx(scores[b, rows].max())
        assert probe.best_other[b] == pytest.approx(scores[b, others].max())
        assert probe.mean[b] == pytest.approx(scores[b].mean(), abs=1e-6)  # q . centroid = mean cosine
    assert probe.rank.min() >= 1 and probe.rank.max() <= 20


def test_search_leaves_out_excluded_items() -> None:
    corpus = np.eye(4, dtype=np.float32)
    index = VectorIndex(["a", "b", "c", "d"], corpus)
    query = np.array([[4.0, 3.0, 2.0, 1.0]], dtype=np.float32)
    assert list(index.search(["q"], query, 2)["q"]) == ["a", "b"]
    assert list(index.search(["q"], query, 2, excluded={"q": ["a"]})["q"]) == ["b", "c"]


def test_cache_is_written_once_and_reopened_memory_mapped(tmp_path) -> None:
    rng = np.random.default_rng(0)
    data = rng.normal(size=(37, 6)).astype(np.float32)
    calls = []

    def encode(rows: range) -> np.ndarray:
        calls.append(rows)
        return data[rows.start : rows.stop]

    ids = [f"x{i}" for i in range(37)]
    first = cached_vectors(tmp_path, "enc-abc", ids, encode, batch_size=10)
    assert len(calls) == 4  # 37 items in batches of 10
    again = cached_vectors(tmp_path, "enc-abc", ids, encode, batch_size=10)
    assert len(calls) == 4  # nothing encoded the second time
    assert isinstance(load_vectors(tmp_path / "vectors" / "enc-abc").vectors.base, np.memmap)
    assert not again.vectors.flags.writeable  # the memory-mapped file, not a copy
    np.testing.assert_allclose(again.vectors, VectorIndex(ids, data).vectors, atol=1e-6)
    queries = rng.normal(size=(5, 6)).astype(np.float32)
    assert again.rank_of(queries, ids[:5]).tolist() == first.rank_of(queries, ids[:5]).tolist()
    assert not list((tmp_path / "vectors").glob(".*building*"))  # no half-written folder left behind
    with pytest.raises(RuntimeError, match="other ids"):
        cached_vectors(tmp_path, "enc-abc", ids[::-1], encode, batch_size=10)


def test_rank_benchmark_reports_its_ratio() -> None:
    """``python -m rankrl.benchmarks.grape_rank`` at toy size: structure only, timings are never asserted."""
    from rankrl.benchmarks.grape_rank import run

    report = run(items=3000, dim=16, queries=4, repeats=1)
    assert report["bare_matmul_s"] > 0 and report["rank_of_mmap_s"] > 0
    assert report["ratio"] == report["rank_of_mmap_s"] / report["bare_matmul_s"]


def test_every_target_ranked_on_its_own_with_exclusions() -> None:
    index, queries, sets = tied_target_sets(seed=11, n=40, d=4, b=6, max_targets=5)
    excluded = [[f"d{(6 * b + 1) % 40}"] if f"d{(6 * b + 1) % 40}" not in sets[b] else [] for b in range(6)]
    probe = index.probe(queries, sets, excluded, every_target=True)
    for b, targets in enumerate(sets):
        mine = probe.owner == b
        alone = index.rank_of(
            np.repeat(queries[b : b + 1], len(targets), axis=0), targets, [excluded[b]] * len(targets)
        )
        assert probe.target_rank[mine].tolist() == alone.tolist()
        assert probe.per_query_mean(probe.target_rank.astype(float))[b] == pytest.approx(alone.mean())
    assert probe.rank.tolist() == [probe.target_rank[probe.owner == b].min() for b in range(6)]
