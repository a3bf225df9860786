"""Tests between two methods (rankrl.report.significance): the verdicts on known differences, pairing by
seed, run-level noise, the fallbacks where sides do not share seeds, and comparisons.md built from run
folders' per_query.csv. Its calibration is simulated in test_significance_simulation.py."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from rankrl.report.collect import COLUMNS, latest_per_cell, read_per_query
from rankrl.report.significance import format_p, seed_aware_test
from rankrl.report.tables import write_tables


def _matrix(values, seeds=None) -> pd.DataFrame:
    values = np.atleast_2d(values)
    seeds = range(values.shape[0]) if seeds is None else seeds
    return pd.DataFrame(values, index=list(seeds), columns=[f"q{i}" for i in range(values.shape[1])])


def test_a_clear_gain_is_shown_and_no_gain_is_not():
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, size=60)
    better = seed_aware_test(_matrix(base + 0.1 + rng.normal(0, 0.02, 60)), _matrix(base))
    assert better["test"] == "queries only" and better["per_seed_diff"] == ""
    assert better["verdict"] == "a > b" and better["p"] < 1e-4 and better["p_shown"] == "< 0.0001"
    assert better["diff"] == pytest.approx(0.1, abs=0.01) and better["queries"] == 60
    assert better["ci_low"] > 0.09 and 0 < better["mde"] < 0.02  # 60 queries: a small difference shows

    noise = seed_aware_test(_matrix(base + rng.normal(0, 0.05, 60)), _matrix(base))
    assert noise["verdict"] == "no difference shown" and noise["ci_low"] < 0 < noise["ci_high"]
    assert noise["p"] > 0.05

    worse = seed_aware_test(_matrix(base), _matrix(base + 0.1))
    assert worse["verdict"] == "a < b" and worse["ci_high"] < 0


def test_identical_sides_give_p_one():
    same = _matrix([[0.0, 1.0, 0.5, 0.5], [0.5, 0.5, 0.0, 1.0]])
    result = seed_aware_test(same, same)
    assert result["test"] == "paired" and result["diff"] == 0 and result["se"] == 0
    assert result["p"] == 1 and result["mde"] == 0 and result["verdict"] == "identical in every run and query"


def test_paired_seeds_cancel_the_run_shift_both_sides_share():
    # seed k of a trains from seed k of b (GRPO from its seed's SFT): each seed's shift (-0.1, 0, +0.1)
    # lands on both sides; a gains 0.03 on every query. Paired by seed the shift cancels; the same runs
    # with unrelated seed numbers cannot show the gain through their seeds' spread
    rng = np.random.default_rng(1)
    base = rng.uniform(0, 1, 40)
    shift = np.array([[-0.1], [0.0], [0.1]])
    b = base + shift + rng.normal(0, 0.01, (3, 40))
    a = b + 0.03 + rng.normal(0, 0.01, (3, 40))
    paired = seed_aware_test(_matrix(a), _matrix(b))
    assert paired["test"] == "paired" and paired["verdict"] == "a > b"
    assert paired["per_seed_diff"].count(": +0.0") == 3  # each seed's a - b (+0.0305, +0.0279, +0.0275)
    apart = seed_aware_test(_matrix(a), _matrix(b, seeds=[3, 4, 5]))
    assert apart["test"] == "unpaired" and apart["verdict"] == "no difference shown"
    assert apart["per_seed_diff"].startswith("a: ") and apart["mde"] > 5 * paired["mde"]


def test_run_level_noise_widens_the_interval():
    # side a: three seeds, every query the same within a seed, seeds far apart (0.2, 0.5, 0.8); side b: 0.4.
    # Averaged over seeds, a is 0.5 on every query: a test over queries would call a > b with certainty;
    # one that counts the seeds must not
    a = _matrix([[0.2] * 40, [0.5] * 40, [0.8] * 40])
    b = _matrix([[0.4] * 40])
    fixed = seed_aware_test(a, b, fixed_b=True)  # b: a row without a model, e.g. BM25
    assert fixed["test"] == "fixed b" and fixed["diff"] == pytest.approx(0.1)
    assert fixed["per_seed_diff"] == "0: -0.2000, 1: +0.1000, 2: +0.4000"
    assert fixed["ci_low"] < 0 < fixed["ci_high"] and fixed["verdict"] == "no difference shown"
    one_run = seed_aware_test(a, b)  # b: one run of a model, its noise taken equal to a's
    assert one_run["test"] == "unpaired" and one_run["verdict"] == "no difference shown"
    assert one_run["ci_high"] - one_run["ci_low"] > fixed["ci_high"] - fixed["ci_low"]


def test_p_values_never_print_as_zero():
    assert format_p(0.0) == "< 0.0001" and format_p(3e-9) == "< 0.0001"
    assert format_p(0.01234) == "0.0123" and format_p(1.0) == "1" and format_p(float("nan")) == ""


def test_only_shared_finite_queries_are_paired():
    a = pd.DataFrame([[1.0, 0.0, 1.0, np.nan]], columns=["x", "y", "z", "v"])
    b = pd.DataFrame([[0.0, 0.0, 0.5]], columns=["z", "w", "v"])
    assert seed_aware_test(a, b)["queries"] == 1  # z; v has no value in a
    with pytest.raises(ValueError, match="no query"):
        seed_aware_test(a, pd.DataFrame([[0.0]], columns=["w"]))


def _written_run(run_dir, experiment: str, model: str | None, seed: int, metric: str, values) -> dict:
    """A run folder's per_query.csv (queries q0, q1, ...) and its row as rankrl.report.collect has it."""
    run_dir.mkdir(parents=True)
    qids = [f"q{i}" for i in range(len(values))]
    pd.DataFrame({"qid": qids, metric: values}).to_csv(run_dir / "per_query.csv", index=False)
    return {
        **dict.fromkeys(COLUMNS),
        "experiment": experiment,
        "benchmark": "dl19",
        "model": model,
        "scale": "cpu",
        "seed": seed,
        "metric": metric,
        "value": float(np.mean(values)),
        "created": "2026-01-01",
        "run_dir": str(run_dir),
    }


def test_comparisons_file_from_run_folders(tmp_path):
    rng = np.random.default_rng(1)
    base = rng.uniform(0, 0.5, size=30)
    rows = []
    for experiment, shift, seeds in (("p/trained", 0.3, 3), ("p/base", 0.0, 1)):
        for seed in range(seeds):
            values = base + shift + rng.normal(0, 0.01, 30)
            run_dir = tmp_path / "runs" / experiment / f"seed{seed}"
            rows.append(_written_run(run_dir, experiment, "m", seed, "nDCG@10", values))
    runs = latest_per_cell(pd.DataFrame(rows, columns=COLUMNS))
    spec = {
        "metric": "nDCG@10",
        "tables": [
            {
                "name": "t",
                "title": "T",
                "columns": ["dl19"],
                "rows": [
                    {"method": "trained", "experiment": "p/trained"},
                    {"method": "base", "experiment": "p/base"},
                ],
            }
        ],
        "comparisons": [
            {
                "name": "trained_vs_base",
                "a": {"experiment": "p/trained", "label": "trained"},
                "b": "p/base",
                "benchmark": "dl19",
            },
            {"name": "not_run", "a": "p/trained", "b": "p/other", "benchmark": "dl19"},
        ],
    }
    (tmp_path / "tables.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "published.yaml").write_text("")
    write_tables(runs, tmp_path, tmp_path)
    frame = pd.read_csv(tmp_path / "comparisons.csv")
    assert frame["comparison"].tolist() == ["trained_vs_base"]  # a comparison with a side not run is left out
    row = frame.iloc[0]
    assert (row["a"], row["b"], row["seeds_a"], row["seeds_b"], row["queries"]) == (
        "trained",
        "p/base",
        3,
        1,
        30,
    )
    assert row["verdict"] == "a > b" and row["diff"] == pytest.approx(0.3, abs=0.02)
    assert row["test"] == "unpaired"  # p/base: one run of model m, not a fixed baseline
    assert row["p_shown"] == "< 0.0001" and 0 < row["mde"] < 0.3
    shown = (tmp_path / "comparisons.md").read_text()
    assert "trained_vs_base" in shown and "< 0.0001" in shown and "MDE (80%)" in shown

    (tmp_path / "runs" / "p/base" / "seed0" / "per_query.csv").unlink()  # a run from before per_query.csv
    write_tables(runs, tmp_path, tmp_path)
    assert "rerun the evaluations" in pd.read_csv(tmp_path / "comparisons.csv")["verdict"].iloc[0]


def test_a_baseline_without_a_model_is_compared_with_every_models_runs(tmp_path):
    from rankrl.report.significance import comparison_rows

    rows = [
        _written_run(
            tmp_path / experiment / (model or "-"),
            experiment,
            model,
            0,
            "R@3",
            np.linspace(0, 0.5, 20) + shift,
        )
        for experiment, model, shift in (
            ("p/trained", "m1", 0.2),
            ("p/trained", "m2", 0.0),
            ("p/popular", None, 0.1),
        )
    ]
    runs = latest_per_cell(pd.DataFrame(rows, columns=COLUMNS))
    comparison = {"name": "vs_pop", "a": "p/trained", "b": "p/popular", "benchmark": "dl19"}
    frame = comparison_rows(runs, read_per_query(runs), [comparison], "R@3")
    assert sorted(frame["model"]) == ["m1", "m2"]  # one row per model, the model-free baseline in each
    assert dict(zip(frame["model"], frame["diff"].round(6))) == {"m1": 0.1, "m2": -0.1}
    assert set(frame["test"]) == {"queries only"}  # one run each: the model-free one is one run too


def test_a_side_may_name_its_experiment_per_benchmark():
    from rankrl.report.significance import _benchmarks, _side

    comparison = {
        "name": "x",
        "a": {"experiments": {"b1": "p/a1", "b2": "p/a2"}, "label": "A"},
        "b": "p/base",
    }
    assert _benchmarks(comparison) == ["b1", "b2"]
    assert _side(comparison["a"], "b2") == {"experiment": "p/a2", "label": "A"}
    assert _side(comparison["b"], "b2") == {"experiment": "p/base", "label": "p/base"}
    assert _benchmarks({**comparison, "benchmark": "b9"}) == ["b9"]


@pytest.mark.parametrize("paper", ["rankr1", "fgrpo", "grape", "cogr"])
def test_every_comparison_compares_rows_of_the_tables(paper):
    """A typo in a comparison would leave it silently out of comparisons.md: each side must be a row."""
    from rankrl.config import REPO_ROOT
    from rankrl.report.significance import _benchmarks, _side

    spec = yaml.safe_load((REPO_ROOT / "experiments" / paper / "tables.yaml").read_text())
    rows = set()
    for table in spec["tables"]:
        for row in table["rows"]:
            rows |= set(row["experiments"].values()) if "experiments" in row else {row["experiment"]}
    assert spec["comparisons"], f"{paper} lists no headline comparison"
    for comparison in spec["comparisons"]:
        for benchmark in _benchmarks(comparison):
            for side in ("a", "b"):
                assert _side(comparison[side], benchmark)["experiment"] in rows, (
                    comparison["name"],
                    benchmark,
                )
