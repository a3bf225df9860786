"""Paired tests between two methods, query by query and over seeds: ``comparisons.md`` beside the tables.

A paper's ``tables.yaml`` lists its headline comparisons; this module knows no paper::

    comparisons:
      - name: grpo_vs_warmstart                        # a row of comparisons.md / .csv
        a: {experiment: rankr1/warmstart_grpo_dl19/grpo, label: Warm start + GRPO}
        b: {experiment: rankr1/warmstart_grpo_dl19/warmstart, label: Format warm start}
        benchmark: dl19                               # or a list: one comparison per benchmark
        metric: nDCG@10                               # optional: the file's metric by default
      - name: cogr_vs_cogr_star                        # a side whose experiment differs per benchmark
        a: {experiments: {dl-pools-cpu: cogr/cogr_dlpools/eval, wands: cogr/cogr_wands/eval}, label: CoGR}
        b: ...                                        # (benchmark: the keys, when not given)

Each side is the set of finished runs of its (experiment, benchmark) for one (model, scale), one per seed
(the newest run of each seed, as in the tables), each with the per-query values of its evaluation
(``per_query.csv``, written by every task that has them). A comparison is made for every (model, scale)
that has both sides, on the queries both sides evaluated.

Two tests of the mean difference ``a - b`` over queries (each query's value averaged over its side's seeds):

- ``p_perm``: a paired permutation test over queries (``scipy.stats.permutation_test``, swapping the two
  sides' values of a query; two-sided). It treats the trained models as fixed: it asks whether *these* runs
  differ on this query set.
- ``ci_low``/``ci_high`` and ``p_boot``: a two-level bootstrap that resamples the queries (paired) and, for
  each side independently, its seeds, so that the interval also carries the seed-to-seed variation of
  training; 95% percentile interval, and ``p_boot`` = twice the smaller tail share of resampled differences
  on either side of 0. With one seed per side this is the plain paired bootstrap over queries.

The verdict reads the bootstrap interval: ``a > b`` or ``a < b`` when it excludes 0, else "no difference
shown". Resampling is seeded, so the file is the same on every rebuild.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rankrl.runs import PER_QUERY_FILE

log = logging.getLogger(__name__)

RESAMPLES = 10_000
COLUMNS = [
    "comparison",
    "a",
    "b",
    "model",
    "scale",
    "benchmark",
    "metric",
    "queries",
    "seeds_a",
    "seeds_b",
    "mean_a",
    "mean_b",
    "diff",
    "ci_low",
    "ci_high",
    "p_boot",
    "p_perm",
    "verdict",
]


def per_query_matrix(run_dirs: Sequence[str | Path], metric: str) -> pd.DataFrame | None:
    """One row per run (seed), one column per query: ``metric`` from each run's ``per_query.csv``.

    None when a run has no such file or column (an older run, or a task without per-query values).
    """
    rows = []
    for run_dir in run_dirs:
        path = Path(run_dir) / PER_QUERY_FILE
        if not path.exists():
            log.warning("%s missing: no paired test for this run (rerun its evaluation)", path)
            return None
        table = pd.read_csv(path, dtype={"qid": str}).set_index("qid")
        if metric not in table:
            log.warning("%s has no column %r (it has %s)", path, metric, ", ".join(table.columns))
            return None
        rows.append(table[metric])
    return pd.DataFrame(rows).reset_index(drop=True)


def paired_test(
    a: pd.DataFrame, b: pd.DataFrame, resamples: int = RESAMPLES, seed: int = 0
) -> dict[str, Any]:
    """The tests of the module docstring for two (seeds x queries) matrices; queries both sides have."""
    from scipy import stats

    queries = [q for q in a.columns if q in set(b.columns)]
    if not queries:
        raise ValueError("the two sides share no query: nothing to pair")
    A, B = a[queries].to_numpy(dtype=float), b[queries].to_numpy(dtype=float)
    mean_a, mean_b = A.mean(axis=0), B.mean(axis=0)
    diff = float(np.mean(mean_a - mean_b))

    rng = np.random.default_rng(seed)
    q_idx = rng.integers(0, len(queries), size=(resamples, len(queries)))
    a_seeds = rng.integers(0, A.shape[0], size=(resamples, A.shape[0]))
    b_seeds = rng.integers(0, B.shape[0], size=(resamples, B.shape[0]))
    # each resample: its seeds' per-query means, then the mean over its queries (drawn with replacement)
    boot_a = np.take_along_axis(A[a_seeds].mean(axis=1), q_idx, axis=1).mean(axis=1)
    boot_b = np.take_along_axis(B[b_seeds].mean(axis=1), q_idx, axis=1).mean(axis=1)
    boot = boot_a - boot_b
    low, high = np.percentile(boot, [2.5, 97.5])
    p_boot = min(1.0, 2 * min(np.mean(boot <= 0), np.mean(boot >= 0)))

    if np.allclose(mean_a, mean_b):  # every pair tied: nothing to permute
        p_perm = 1.0
    elif len(queries) < 2:  # scipy needs two pairs; one query cannot show anything
        p_perm = float("nan")
    else:
        p_perm = stats.permutation_test(
            (mean_a, mean_b),
            lambda x, y, axis: np.mean(x - y, axis=axis),
            permutation_type="samples",
            vectorized=True,
            n_resamples=resamples,
            alternative="two-sided",
            random_state=seed,
        ).pvalue
    verdict = "a > b" if low > 0 else "a < b" if high < 0 else "no difference shown"
    return {
        "queries": len(queries),
        "seeds_a": A.shape[0],
        "seeds_b": B.shape[0],
        "mean_a": float(mean_a.mean()),
        "mean_b": float(mean_b.mean()),
        "diff": diff,
        "ci_low": float(low),
        "ci_high": float(high),
        "p_boot": float(p_boot),
        "p_perm": float(p_perm),
        "verdict": verdict,
    }


def _benchmarks(comparison: Mapping[str, Any]) -> list[str]:
    """``benchmark`` (one or a list), else the benchmarks a side maps to experiments."""
    if "benchmark" in comparison:
        given = comparison["benchmark"]
        return list(given) if isinstance(given, (list, tuple)) else [given]
    mapped = [s.get("experiments", {}) for s in (comparison["a"], comparison["b"]) if isinstance(s, Mapping)]
    return list(dict.fromkeys(b for m in mapped for b in m))


def _side(spec: Any, benchmark: str) -> dict[str, str]:
    """A side's experiment on ``benchmark`` and its label (default: the experiment's name)."""
    if isinstance(spec, str):
        return {"experiment": spec, "label": spec}
    experiment = spec.get("experiments", {}).get(benchmark, spec.get("experiment"))
    return {"experiment": experiment, "label": spec.get("label", experiment)}


def _side_runs(cells: pd.DataFrame, experiment: str, model: str) -> pd.DataFrame:
    """The runs of ``experiment`` with ``model``, by seed; where it has none, its runs with no model: a
    baseline that loads no model (e.g. most popular) is compared with every model's runs."""
    runs = cells[cells["experiment"] == experiment]
    own = runs[runs["model"].fillna("-") == model]
    return (own if not own.empty else runs[runs["model"].fillna("-") == "-"]).sort_values("seed")


def comparison_rows(
    runs: pd.DataFrame, comparisons: Sequence[Mapping[str, Any]], metric: str
) -> pd.DataFrame:
    """One row per comparison and (model, scale) with both sides run; ``runs``: ``latest_per_cell`` rows."""
    rows = []
    for comp, benchmark in ((c, bench) for c in comparisons for bench in _benchmarks(c)):
        a, b = _side(comp["a"], benchmark), _side(comp["b"], benchmark)
        name, wanted = comp["name"], comp.get("metric", metric)
        cells = runs[(runs["benchmark"] == benchmark) & (runs["metric"] == wanted)]
        variants = cells[["model", "scale"]].fillna("-").drop_duplicates().itertuples(index=False)
        for model, scale in variants:
            same_scale = cells[cells["scale"].fillna("-") == scale]
            sides = [_side_runs(same_scale, s["experiment"], model) for s in (a, b)]
            if any(side.empty for side in sides):
                continue
            matrices = [per_query_matrix(side["run_dir"].tolist(), wanted) for side in sides]
            base = {"comparison": name, "a": a["label"], "b": b["label"], "model": model, "scale": scale}
            base |= {"benchmark": benchmark, "metric": wanted}
            if any(m is None for m in matrices):
                rows.append({**base, "verdict": f"no {PER_QUERY_FILE}: rerun the evaluations"})
                continue
            rows.append({**base, **paired_test(*matrices)})
    return pd.DataFrame(rows, columns=COLUMNS)


def write_comparisons(
    runs: pd.DataFrame, comparisons: Sequence[Mapping[str, Any]], metric: str, out_dir: Path, digits: int = 4
) -> list[Path]:
    """``comparisons.md`` and ``comparisons.csv`` in ``out_dir``; nothing when no comparison has both
    sides run."""
    frame = comparison_rows(runs, comparisons, metric)
    if frame.empty:
        return []
    csv_path, md_path = out_dir / "comparisons.csv", out_dir / "comparisons.md"
    frame.to_csv(csv_path, index=False)
    shown = frame.copy()
    for column in ("mean_a", "mean_b", "diff", "ci_low", "ci_high"):
        shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else f"{v:.{digits}f}")
    for column in ("p_boot", "p_perm"):
        shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else f"{v:.3g}")
    header = (
        "### Paired tests of the headline comparisons\n\n"
        "diff = mean(a) - mean(b) over the queries both evaluated (each query averaged over its side's "
        "seeds); 95% CI and p_boot from a bootstrap over queries and seeds, p_perm from a paired permutation "
        "test over queries (rankrl/report/significance.py). Scale cpu: SmolLM2-135M on 2 CPU cores, with the "
        "deviations in this paper's README.\n\n"
    )
    md_path.write_text(header + shown.to_markdown(index=False, disable_numparse=True) + "\n")
    return [md_path, csv_path]
