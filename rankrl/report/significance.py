"""Tests between two methods over training seeds and queries: ``comparisons.md`` beside the tables.

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
(the newest run of each seed, as in the tables), each with the per-query values of its evaluation (the
results' per-query table, from the runs' ``per_query.csv``). A comparison is made for every (model, scale)
that has both sides, on the queries every run of both sides evaluated (a query whose value is missing or
not finite in one run is left out).

What moves a difference
-----------------------
With ``D[s, q] = a[s, q] - b[s, q]`` (seed ``s``, query ``q``), the difference of the two means is the mean
of ``D``, and three things move it (a crossed random-effects model, seeds and queries both sampled):

    D[s, q] = delta + u[s] + v[q] + e[s, q]

- ``u[s]``, run-to-run noise: seed ``s`` of one method lands higher or lower on every query at once (a
  different initialisation, data order, sampled rollouts). It is the largest noise of the CPU-scale runs:
  CoGR's SFT stage reads 0.450 +- 0.134 F1 over three seeds on the same ten queries.
- ``v[q]``, the query sample: a method may help some queries and hurt others; another query set would move
  the mean.
- ``e[s, q]``: a query's value changes from seed to seed beyond the run's shift.

Where both sides ran the same seeds (seed k of each: the same initialisation and data order, e.g. GRPO from
the SFT stage of the same seed), ``D`` pairs them by seed and by query, and the shared part of the two runs'
noise cancels. ``Var(mean D) = s_u/S + s_v/Q + s_e/(S Q)`` is estimated from the two-way analysis of
variance of the ``S x Q`` matrix ``D``: with ``R``, ``G``, ``E`` its seed, query and residual mean squares
divided by ``S Q`` (``S - 1``, ``Q - 1`` and ``(S - 1)(Q - 1)`` degrees of freedom), ``Var = E[R] + E[G] -
E[E]``.

The test: a generalized pivotal quantity
----------------------------------------
Only ``S - 1`` degrees of freedom measure the run-to-run noise, however many queries there are: with three
seeds its variance is known from two. The test uses exactly that. It draws the unknown variance from its
fiducial distribution, each mean square from its scaled chi-square pivot (``R* = R (S - 1) / chi2(S - 1)``,
the same for ``G`` and ``E``), and forms

    delta* = mean(D) - Z sqrt(max(0, R* + G* - E*)),   Z ~ N(0, 1)

(Weerahandi's generalized pivotal quantity for a mean under several variance components). ``p`` is twice
the smaller of ``P(delta* <= 0)`` and ``P(delta* >= 0)``, the 95% interval ``mean(D) +- h`` with
``P(Z sqrt(V*) >= h) = 0.025``: ``Z`` is integrated out exactly and ``V*`` drawn ``DRAWS`` times, stratified
(Latin hypercube), from a fixed seed, so the file is the same on every rebuild. p below 0.0001 prints as
``< 0.0001``, never 0. Without a query term (one query) it is the paired t-test over seeds; with one seed,
the paired t-test over queries. Paired sides equal in every run and query read "identical in every run and
query": their interval has zero width because nothing differs, not because the test is sharp.

Why this test. Measured in ``tests/report/test_significance_simulation.py`` (no true difference, normal
noise at the spreads of the committed runs, 3 and 5 seeds): its false-positive rate at alpha = 0.05 is
0.038-0.053 (binary R@1-like values: 0.037-0.047), and at the minimum detectable effect it reports its power
is 0.79-0.80 (0.8 within the simulation's error). The alternatives, in the same simulation:

- the two-level bootstrap this module used before (queries paired, each side's seeds resampled
  independently): 0.107 at CoGR's run-level spread, 0.004 where the two sides' runs share their seed's
  shift (GRPO from its seed's SFT, correlation 0.8). It ignores the pairing and treats 3 resampled seeds as
  their population. A hierarchical bootstrap (seeds, then queries within seeds) shares the second flaw: a
  bootstrap of 3 values understates their spread by (S - 1)/S and draws only 10 distinct sets.
- a sign-flip (permutation) test over seeds has 2^S sign patterns: its smallest two-sided p is 0.25 with 3
  seeds and 0.0625 with 5; it can never reject at 0.05.
- the paired t-test over per-seed mean differences (seeds as the unit, S - 1 df) is exact when the two
  methods do not differ query by query, but it holds the query set fixed: where they help some queries and
  hurt others with no mean difference (``v[q]``), it calls a difference in 27% (3 seeds) to 45% (5 seeds) of
  such nulls; this test in 3.3% and 4.1%.
- a mixed-model t-test with the same variance estimate and Satterthwaite degrees of freedom: 0.03-0.04 at
  these spreads with 3 seeds, and below 0.03 without run-level noise (its degrees of freedom are estimated
  badly when ``E[G]`` is near ``E[E]``).

With 3 seeds a difference must be large to be shown, and the table says how large (the MDE below).

Rows that do not share seeds (the ``test`` column)
--------------------------------------------------
- ``paired``: both sides ran two or more of the same seeds; seeds that only one side ran are left out.
- ``fixed b`` / ``fixed a``: one side is a single run of a row without a model (BM25, most popular, a
  constant judge): fixed numbers with no training noise; ``D = a[s, q] - b[q]`` over the other side's seeds.
  The baseline's per-query values act as a query-by-method term: false-positive rate 0.018-0.024 with 3
  seeds, 0.031-0.033 with 5 (conservative).
- ``unpaired``: the sides ran different seeds, or one side a single run of a model: the run-to-run and
  residual variances are pooled over both sides (the two-sample t-test's assumption: a single run has no
  spread of its own to measure); 0.039-0.047.
- ``queries only``: one run each: the paired test over queries. The run-to-run noise cannot be measured, so
  this p-value holds these two runs fixed; a claim about the methods needs a second seed of each.

The minimum detectable effect (``mde``)
---------------------------------------
The smallest true difference this test would detect with probability 0.8 at alpha = 0.05, for its seeds x
queries and the observed variance components (the analysis-of-variance estimates, negative ones set to 0).
It is computed for the test itself: the mean squares are drawn from their sampling distributions around those
components (independent scaled chi-squares under the normal model), each draw's interval half-width is the
test's own, and the power at a difference ``d`` is the chance that the observed mean falls outside it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

ALPHA = 0.05
POWER = 0.8
DRAWS = 4_000  # the test's fiducial draws of the variance (stratified; Z is integrated out exactly)
MDE_DATA_DRAWS = 600  # the MDE: draws of the observed mean squares ...
MDE_PIVOT_DRAWS = 600  # ... and the test's draws for each of them
P_FLOOR = 1e-4  # smaller p-values print as "< 0.0001"
# comparisons.csv's numbers: 10 significant digits, so that a rebuild on a CPU whose vector math rounds the
# last bit differently (numpy's exp on AVX-512) writes the same file
CSV_FLOAT_FORMAT = "%.10g"
SEED = 0
COLUMNS = [
    "comparison",
    "a",
    "b",
    "model",
    "scale",
    "benchmark",
    "metric",
    "test",
    "seeds_a",
    "seeds_b",
    "queries",
    "mean_a",
    "mean_b",
    "diff",
    "per_seed_diff",
    "se",
    "ci_low",
    "ci_high",
    "p",
    "p_shown",
    "mde",
    "var_run",
    "var_query",
    "var_noise",
    "verdict",
]


# ------------------------------------------------------------------------------------- variance terms


@dataclass(frozen=True)
class MeanSquare:
    """A mean square's share of Var(diff) (already divided to that scale) and its degrees of freedom.

    ``value`` is a float, or an array over simulated data sets (the simulation tests run the test on many)."""

    value: Any
    df: int

    def drawn(self, chi2: np.ndarray) -> np.ndarray:
        """Its fiducial draws ``value * df / chi2``, one column per draw of ``chi2`` (a chi2(df) sample)."""
        return np.asarray(self.value, dtype=float)[..., None] * self.df / chi2


@dataclass(frozen=True)
class Variance:
    """Var(diff) = sum(run) + query - sum(residual).

    ``run`` holds each side's (or the paired difference's) run-to-run term, ``residual`` the matching
    residual terms (one per run term, in the same order), which the query term counts once too and which
    are subtracted only with it. Without a query term (one query) ``residual`` is empty."""

    run: tuple[MeanSquare, ...]
    query: MeanSquare | None
    residual: tuple[MeanSquare, ...] = ()

    def terms(self) -> list[tuple[MeanSquare, int]]:
        """Every mean square with its sign in the sum."""
        query = [(self.query, 1)] if self.query is not None else []
        return [(t, 1) for t in self.run] + query + [(t, -1) for t in self.residual]

    def estimate(self) -> np.ndarray:
        """The unbiased estimate of Var(diff), at least 0."""
        total = sum(sign * np.asarray(t.value, dtype=float) for t, sign in self.terms())
        return np.maximum(total, 0.0)

    def fitted(self) -> Variance:
        """The mean squares' expected values under the variance components estimated from them, negative
        components set to 0: a run term is at least its residual, the query term at least all residuals."""
        if self.query is None:
            return self
        run = tuple(
            MeanSquare(np.maximum(r.value, e.value), r.df)
            for r, e in zip(self.run, self.residual, strict=True)
        )
        floor = sum(np.asarray(e.value, dtype=float) for e in self.residual)
        return Variance(run, MeanSquare(np.maximum(self.query.value, floor), self.query.df), self.residual)

    def components(self) -> dict[str, float]:
        """The fitted variance of the difference split into run-to-run, query and residual parts."""
        f = self.fitted()
        residual = float(sum(e.value for e in f.residual)) if f.residual else 0.0
        run = float(sum(r.value for r in f.run))
        if f.query is None:  # one query: run and noise cannot be told apart
            return {"var_run": run, "var_query": float("nan"), "var_noise": float("nan")}
        if not f.run:  # one run each: query and noise cannot be told apart, the run is not measured
            return {"var_run": float("nan"), "var_query": float(f.query.value), "var_noise": float("nan")}
        return {
            "var_run": run - residual,
            "var_query": float(f.query.value) - residual,
            "var_noise": residual,
        }


def two_way(D: np.ndarray) -> tuple[np.ndarray, Variance]:
    """The mean of ``D`` (``..., S, Q``: seeds x queries) and its variance terms (module docstring)."""
    D = np.asarray(D, dtype=float)
    S, Q = D.shape[-2:]
    mean = D.mean(axis=(-2, -1))
    seed_means, query_means = D.mean(axis=-1), D.mean(axis=-2)
    if S == 1:  # one run: the query spread only (it holds the run fixed)
        spread = np.var(D[..., 0, :], axis=-1, ddof=1) if Q > 1 else np.zeros_like(mean)
        return mean, Variance((), MeanSquare(spread / Q, Q - 1) if Q > 1 else None)
    seeds = MeanSquare(np.var(seed_means, axis=-1, ddof=1) / S, S - 1)  # = MS_seeds / (S Q)
    if Q == 1:
        return mean, Variance((seeds,), None)
    queries = MeanSquare(np.var(query_means, axis=-1, ddof=1) / Q, Q - 1)  # = MS_queries / (S Q)
    residual = D - seed_means[..., :, None] - query_means[..., None, :] + mean[..., None, None]
    df = (S - 1) * (Q - 1)
    noise = MeanSquare((residual**2).sum(axis=(-2, -1)) / df / (S * Q), df)
    return mean, Variance((seeds,), queries, (noise,))


def unpaired(A: np.ndarray, B: np.ndarray) -> tuple[np.ndarray, Variance]:
    """The mean difference of two sides run with different seeds (``S_a x Q`` and ``S_b x Q``, the same
    queries; ``S_b`` may be 1) and its variance terms: the run-to-run and residual variances are pooled over
    both sides, the classic two-sample t-test's assumption (robust to unequal variances when both sides ran
    as many seeds; a side of one run has none of its own to measure)."""
    A, B = np.asarray(A, dtype=float), np.asarray(B, dtype=float)
    (Sa, Q), Sb = A.shape[-2:], B.shape[-2]
    mean = A.mean(axis=(-2, -1)) - B.mean(axis=(-2, -1))
    weight = 1 / Sa + 1 / Sb

    def sums(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # seed-means' and residuals' sums of squares
        seed_means, query_means = X.mean(axis=-1), X.mean(axis=-2)
        grand = X.mean(axis=(-2, -1))
        residual = X - seed_means[..., :, None] - query_means[..., None, :] + grand[..., None, None]
        return ((seed_means - grand[..., None]) ** 2).sum(axis=-1), (residual**2).sum(axis=(-2, -1))

    (seeds_a, noise_a), (seeds_b, noise_b) = sums(A), sums(B)
    run_df = Sa + Sb - 2
    run = MeanSquare((seeds_a + seeds_b) / run_df * weight, run_df)
    if Q == 1:
        return mean, Variance((run,), None)
    c = A.mean(axis=-2) - B.mean(axis=-2)  # per-query difference of the seed-averaged values
    query = MeanSquare(np.var(c, axis=-1, ddof=1) / Q, Q - 1)
    noise_df = run_df * (Q - 1)
    noise = MeanSquare((noise_a + noise_b) / noise_df * weight / Q, noise_df)
    return mean, Variance((run,), query, (noise,))


# ---------------------------------------------------------------------------------------------- test


def _chi2(df: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """A Latin-hypercube sample of chi2(df): one draw from each of ``draws`` equal-probability strata, in
    random order. The test's calibration rests on the far quantiles of these draws, shared by every data
    set a simulation runs it on: stratified, they do not wander from draw set to draw set."""
    from scipy import stats

    return stats.chi2.ppf((rng.permutation(draws) + rng.random(draws)) / draws, df)


def variance_draws(variance: Variance, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Fiducial draws of Var(diff), ``max(0, sum of sign * value * df / chi2(df))``: ``(..., draws)``."""
    total = 0.0
    for term, sign in variance.terms():
        total = total + sign * term.drawn(_chi2(term.df, draws, rng))
    return np.maximum(total, 0.0)


def _upper_tail(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``P(Z * scale >= x)`` averaged over the draws of ``scale`` (last axis), Z ~ N(0, 1) integrated out
    exactly; ``x`` broadcasts against ``scale[..., 0]``."""
    from scipy.special import ndtr

    x = np.asarray(x, dtype=float)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(scale > 0, x / scale, np.sign(x) * np.inf)  # no variance: delta* is the mean itself
    return ndtr(-np.nan_to_num(ratio, nan=0.0)).mean(axis=-1)


def half_width(scale: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """The ``h`` with ``P(Z * scale >= h) = alpha / 2``: the interval's half-width, over the last axis of
    ``scale``'s draws (safeguarded Newton steps, all leading entries at once)."""
    from scipy import special

    target = alpha / 2
    low = np.zeros(scale.shape[:-1])
    high = special.ndtri(1 - target) * scale.max(axis=-1)  # every draw's own tail is below target there
    h = np.minimum(special.ndtri(1 - target) * np.sqrt((scale**2).mean(axis=-1)), high)
    for _ in range(200):
        gap = _upper_tail(h, scale) - target
        if np.all((np.abs(gap) < 1e-12) | (high - low <= 1e-12 * high)):
            break
        low, high = np.where(gap > 0, h, low), np.where(gap > 0, high, h)
        with np.errstate(divide="ignore", invalid="ignore"):
            density = np.where(scale > 0, np.exp(-0.5 * (h[..., None] / scale) ** 2) / scale, 0.0)
            step = h + gap / (density.mean(axis=-1) / np.sqrt(2 * np.pi))
        inside = np.isfinite(step) & (step >= low) & (step <= high)
        h = np.where(inside, step, (low + high) / 2)
    return h


def pivot_test(
    mean: Any, variance: Variance, draws: int = DRAWS, seed: int = SEED, interval: bool = True
) -> dict[str, np.ndarray]:
    """The generalized pivotal test of ``delta = 0`` (module docstring): ``p``, and ``ci_low``, ``ci_high``
    unless ``interval`` is False; vectorised over a leading axis of data sets (``mean`` and every term's
    value)."""
    rng = np.random.default_rng(seed)
    scale = np.sqrt(variance_draws(variance, draws, rng))
    mean = np.asarray(mean, dtype=float)
    below = _upper_tail(mean, scale)  # P(delta* <= 0) = P(Z sqrt(V*) >= mean)
    out = {"p": np.minimum(1.0, 2 * np.minimum(below, 1 - below))}
    if interval:
        h = half_width(scale)
        out |= {"ci_low": mean - h, "ci_high": mean + h}
    return out


def minimum_detectable_effect(
    variance: Variance,
    power: float = POWER,
    data_draws: int = MDE_DATA_DRAWS,
    pivot_draws: int = MDE_PIVOT_DRAWS,
    seed: int = SEED,
) -> float:
    """The smallest true difference :func:`pivot_test` detects with probability ``power`` at ``ALPHA``,
    given ``variance``'s fitted components (scalars). 0 when the difference has no variance."""
    from scipy import optimize
    from scipy.special import ndtr

    fitted = variance.fitted()
    sd = float(np.sqrt(fitted.estimate()))
    if sd == 0:
        return 0.0
    rng = np.random.default_rng(seed)

    def observed(term: MeanSquare) -> MeanSquare:  # the mean square as data would show it
        return MeanSquare(float(term.value) * _chi2(term.df, data_draws, rng) / term.df, term.df)

    data = Variance(
        tuple(observed(t) for t in fitted.run),
        observed(fitted.query) if fitted.query is not None else None,
        tuple(observed(t) for t in fitted.residual),
    )
    half = half_width(np.sqrt(variance_draws(data, pivot_draws, rng)))  # each data draw's own interval

    def detected(d: float) -> float:  # the observed mean ~ N(d, sd^2) falls outside the interval
        return float(np.mean(ndtr((d - half) / sd) + ndtr((-d - half) / sd)))

    high = sd
    while detected(high) < power:
        high *= 2
    return float(optimize.brentq(lambda d: detected(d) - power, 0.0, high, xtol=1e-12 * high))


def format_p(p: float) -> str:
    """A p-value as printed: below 0.0001 as ``< 0.0001``, never 0."""
    if pd.isna(p):
        return ""
    return f"< {P_FLOOR:g}" if p < P_FLOOR else f"{p:.3g}"


def _design(a: pd.DataFrame, b: pd.DataFrame, fixed_a: bool, fixed_b: bool) -> str:
    """Which test two sides' runs allow (the module docstring's list)."""
    if fixed_b and len(a) > 1:
        return "fixed b"
    if fixed_a and len(b) > 1:
        return "fixed a"
    if len(set(a.index) & set(b.index)) > 1:
        return "paired"
    return "unpaired" if len(a) > 1 or len(b) > 1 else "queries only"


def _listed(values: pd.Series, signed: bool) -> str:
    return ", ".join(f"{seed}: {value:+.4f}" if signed else f"{value:.4f}" for seed, value in values.items())


def seed_aware_test(
    a: pd.DataFrame, b: pd.DataFrame, *, fixed_a: bool = False, fixed_b: bool = False, draws: int = DRAWS
) -> dict[str, Any]:
    """The test of the module docstring for two sides' (seed x query) matrices (index: seed), on the queries
    with a finite value in every run of both.

    ``fixed_a`` / ``fixed_b``: that side is one run of a row without a model (no training noise)."""
    queries = [q for q in a.columns if q in set(b.columns)]
    kept = [q for q in queries if np.isfinite(a[q]).all() and np.isfinite(b[q]).all()]
    if not kept:
        raise ValueError("the two sides share no query with a value in every run: nothing to pair")
    a, b = a[kept].sort_index(), b[kept].sort_index()
    test = _design(a, b, fixed_a, fixed_b)
    if test == "paired":
        shared = sorted(set(a.index) & set(b.index))
        a, b = a.loc[shared], b.loc[shared]
    elif test == "queries only":
        a, b = a.iloc[:1], b.iloc[:1]
    A, B = a.to_numpy(dtype=float), b.to_numpy(dtype=float)
    if test == "unpaired":
        mean, variance = unpaired(A, B)
        per_seed = f"a: {_listed(a.mean(axis=1), False)}; b: {_listed(b.mean(axis=1), False)}"
    else:  # one matrix of differences: b (or a) fixed broadcasts over the other side's seeds
        mean, variance = two_way(A - B)
        seeds = a.index if len(a) >= len(b) else b.index
        diffs = pd.Series((A - B).mean(axis=1), index=seeds)
        per_seed = _listed(diffs, True) if test != "queries only" else ""
    result = {
        "test": test,
        "seeds_a": len(a),
        "seeds_b": len(b),
        "queries": len(kept),
        "mean_a": float(A.mean()),
        "mean_b": float(B.mean()),
        "diff": float(mean),
        "per_seed_diff": per_seed,
        "se": float(np.sqrt(variance.estimate())),
        **variance.components(),
    }
    if not variance.terms():  # one query and one run each: nothing varies that could be measured
        return {**result, "p": float("nan"), "p_shown": "", "verdict": "one run and one query: no test"}
    tested = {k: float(v) for k, v in pivot_test(float(mean), variance, draws).items()}
    verdict = "a > b" if tested["ci_low"] > 0 else "a < b" if tested["ci_high"] < 0 else "no difference shown"
    if test != "unpaired" and not np.any(A - B):  # the interval has zero width: nothing differs
        verdict = "identical in every run and query"
    return {
        **result,
        **tested,
        "p_shown": format_p(tested["p"]),
        "mde": minimum_detectable_effect(variance),
        "verdict": verdict,
    }


# ------------------------------------------------------------------------------------- comparisons


def side_matrix(per_query: pd.DataFrame, runs: pd.DataFrame, metric: str) -> pd.DataFrame | None:
    """One row per run (index: seed), one column per query: ``metric`` from the per-query table.

    ``runs``: the side's rows (experiment, benchmark, model, scale, seed). None when a run has no per-query
    values of ``metric`` (an older run, or a task without per-query values)."""
    rows = {}
    for run in runs.itertuples():
        found = per_query[
            (per_query["experiment"] == run.experiment)
            & (per_query["benchmark"] == run.benchmark)
            & (per_query["model"].fillna("-") == (run.model if pd.notna(run.model) else "-"))
            & (per_query["scale"].fillna("-") == (run.scale if pd.notna(run.scale) else "-"))
            & (per_query["seed"] == run.seed)
        ]
        if found.empty or metric not in found or found[metric].isna().all():
            log.warning(
                "%s (%s, %s, %s, seed %s) has no per-query %s: no test for it (rerun its evaluation)",
                run.experiment,
                run.benchmark,
                run.model,
                run.scale,
                run.seed,
                metric,
            )
            return None
        rows[run.seed] = found.set_index("qid")[metric]
    return pd.DataFrame(rows).T


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


def _is_fixed(side: pd.DataFrame) -> bool:
    """One run of a row without a model: fixed numbers, no training noise."""
    return len(side) == 1 and side["model"].isna().all()


def comparison_rows(
    runs: pd.DataFrame, per_query: pd.DataFrame, comparisons: Sequence[Mapping[str, Any]], metric: str
) -> pd.DataFrame:
    """One row per comparison and (model, scale) with both sides run; ``runs``: ``latest_per_cell`` rows,
    ``per_query``: the results' per-query table (rankrl.report.results)."""
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
            matrices = [side_matrix(per_query, side, wanted) for side in sides]
            base = {"comparison": name, "a": a["label"], "b": b["label"], "model": model, "scale": scale}
            base |= {"benchmark": benchmark, "metric": wanted}
            if any(m is None for m in matrices):
                rows.append({**base, "verdict": "no per-query values: rerun the evaluations"})
                continue
            fixed = {"fixed_a": _is_fixed(sides[0]), "fixed_b": _is_fixed(sides[1])}
            rows.append({**base, **seed_aware_test(*matrices, **fixed)})
    return pd.DataFrame(rows, columns=COLUMNS)


LEGEND = (
    "diff = mean(a) - mean(b) over the queries every run of both sides evaluated. The test "
    "(rankrl/report/significance.py) counts run-to-run noise (each seed's shift on every query), the "
    "query sample and their interaction; only seeds - 1 degrees of freedom measure the first, so with 3 "
    "seeds a difference must be large to be shown. test: `paired` = both sides ran the same seeds, paired "
    "by seed and by query; `fixed b` = b is one run of a row without a model (no training noise); "
    "`unpaired` = different seeds or one run of a model, variances pooled; `queries only` = one run each, "
    "p holds the runs fixed. per-seed diff: each seed's a - b (unpaired: each side's seed means). 95% CI "
    "and p: a generalized pivotal quantity over the seed, query and residual variance; p below {floor:g} "
    "prints as < {floor:g}. MDE (80%): the smallest true difference this test detects with power 0.8 at "
    "alpha 0.05 for its seeds x queries and the observed variance components. Verdict: a > b or a < b "
    "where the CI excludes 0. Scale cpu: SmolLM2-135M on 2 CPU cores, with the deviations in this paper's "
    "README."
)


def write_comparisons(
    runs: pd.DataFrame,
    per_query: pd.DataFrame,
    comparisons: Sequence[Mapping[str, Any]],
    metric: str,
    out_dir: Path,
    digits: int = 4,
) -> list[Path]:
    """``comparisons.md`` and ``comparisons.csv`` in ``out_dir``; nothing when no comparison has both
    sides run."""
    frame = comparison_rows(runs, per_query, comparisons, metric)
    if frame.empty:
        return []
    csv_path, md_path = out_dir / "comparisons.csv", out_dir / "comparisons.md"
    frame.to_csv(csv_path, index=False, float_format=CSV_FLOAT_FORMAT)

    def number(v: Any) -> str:
        return "" if pd.isna(v) else f"{v:.{digits}f}"

    def seeds(row: pd.Series) -> str:
        if pd.isna(row["seeds_a"]):
            return ""
        na, nb = int(row["seeds_a"]), int(row["seeds_b"])
        return {"paired": f"{na} paired", "fixed b": f"{na} vs fixed", "fixed a": f"fixed vs {nb}"}.get(
            row["test"], f"{na} vs {nb}"
        )

    shown = pd.DataFrame(
        {
            "comparison": frame["comparison"],
            "a": frame["a"],
            "b": frame["b"],
            "model": frame["model"],
            "scale": frame["scale"],
            "benchmark": frame["benchmark"],
            "metric": frame["metric"],
            "test": frame["test"].fillna(""),
            "seeds": frame.apply(seeds, axis=1),
            "queries": frame["queries"].map(lambda v: "" if pd.isna(v) else str(int(v))),
            "mean_a": frame["mean_a"].map(number),
            "mean_b": frame["mean_b"].map(number),
            "diff": frame["diff"].map(number),
            "per-seed diff": frame["per_seed_diff"].fillna(""),
            "95% CI": [
                "" if pd.isna(lo) else f"[{lo:.{digits}f}, {hi:.{digits}f}]"
                for lo, hi in zip(frame["ci_low"], frame["ci_high"])
            ],
            "p": frame["p_shown"].fillna(""),
            "MDE (80%)": frame["mde"].map(number),
            "verdict": frame["verdict"],
        }
    )
    header = "### Tests of the headline comparisons over seeds and queries\n\n" + LEGEND.format(floor=P_FLOOR)
    md_path.write_text(header + "\n\n" + shown.to_markdown(index=False, disable_numparse=True) + "\n")
    return [md_path, csv_path]
