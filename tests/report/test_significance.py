"""Paired tests between two methods (rankrl.report.significance): the verdicts on known differences, the
seed level of the bootstrap, and comparisons.md built from run folders' per_query.csv."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from rankrl.report.collect import COLUMNS, latest_per_cell
from rankrl.report.significance import paired_test
from rankrl.report.tables import write_tables


def _matrix(values) -> pd.DataFrame:
    values = np.atleast_2d(values)
    return pd.DataFrame(values, columns=[f"q{i}" for i in range(values.shape[1])])


def test_a_clear_gain_is_shown_and_no_gain_is_not():
    rng = np.random.default_rng(0)
    base = rng.uniform(0, 1, size=60)
    better = paired_test(_matrix(base + 0.1 + rng.normal(0, 0.02, 60)), _matrix(base))
    assert better["verdict"] == "a > b" and better["p_perm"] < 1e-3 and better["ci_low"] > 0.05
    assert better["diff"] == pytest.approx(0.1, abs=0.01) and better["queries"] == 60

    noise = paired_test(_matrix(base + rng.normal(0, 0.05, 60)), _matrix(base))
    assert noise["verdict"] == "no difference shown" and noise["ci_low"] < 0 < noise["ci_high"]
    assert noise["p_perm"] > 0.05

    worse = paired_test(_matrix(base), _matrix(base + 0.1))
    assert worse["verdict"] == "a < b" and worse["ci_high"] < 0


def test_identical_sides_give_p_one():
    same = _matrix([[0.0, 1.0, 0.5, 0.5]])
    result = paired_test(same, same)
    assert result["diff"] == 0 and result["p_perm"] == 1 and result["verdict"] == "no difference shown"


def test_seed_spread_widens_the_interval():
    # side a: three seeds, every query the same within a seed, seeds far apart (0.2, 0.5, 0.8); side b: 0.4.
    # Averaged over seeds, a is 0.5 on every query: a query-only bootstrap would call a > b with certainty;
    # resampling seeds too must not.
    a = _matrix([[0.2] * 40, [0.5] * 40, [0.8] * 40])
    b = _matrix([[0.4] * 40])
    result = paired_test(a, b)
    assert result["diff"] == pytest.approx(0.1)
    assert result["p_perm"] < 1e-3  # these three runs against that one, query by query
    assert result["ci_low"] < 0 < result["ci_high"] and result["verdict"] == "no difference shown"


def test_only_shared_queries_are_paired():
    a = pd.DataFrame([[1.0, 0.0, 1.0]], columns=["x", "y", "z"])
    b = pd.DataFrame([[0.0, 0.0]], columns=["z", "w"])
    assert paired_test(a, b)["queries"] == 1
    with pytest.raises(ValueError, match="no query"):
        paired_test(a, pd.DataFrame([[0.0]], columns=["w"]))


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
    assert "trained_vs_base" in (tmp_path / "comparisons.md").read_text()

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
    frame = comparison_rows(
        runs, [{"name": "vs_pop", "a": "p/trained", "b": "p/popular", "benchmark": "dl19"}], "R@3"
    )
    assert sorted(frame["model"]) == ["m1", "m2"]  # one row per model, the model-free baseline in each
    assert dict(zip(frame["model"], frame["diff"].round(6))) == {"m1": 0.1, "m2": -0.1}


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
