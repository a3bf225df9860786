"""Paper tables: a table whose columns are metrics of one benchmark, and rows that name a model."""

from __future__ import annotations

import pandas as pd
import yaml

from rankrl.report.collect import COLUMNS
from rankrl.report.tables import write_tables


def _runs(rows):
    return pd.DataFrame([{**dict.fromkeys(COLUMNS), **r} for r in rows], columns=COLUMNS)


def test_metric_columns_and_model_rows(tmp_path):
    runs = _runs(
        [
            {
                "experiment": "p/a",
                "benchmark": "b1",
                "model": "m",
                "scale": "cpu",
                "metric": "R@1",
                "value": 0.25,
            },
            {
                "experiment": "p/a",
                "benchmark": "b1",
                "model": "m",
                "scale": "cpu",
                "metric": "R@3",
                "value": 0.5,
            },
            {
                "experiment": "p/a",
                "benchmark": "b2",
                "model": "m",
                "scale": "cpu",
                "metric": "R@1",
                "value": 0.9,
            },
        ]
    )
    spec = {
        "metric": "R@1",
        "tables": [
            {
                "name": "t",
                "title": "T",
                "benchmark": "b1",
                "columns": ["R@1", "R@3"],
                "rows": [
                    {"method": "A", "experiment": "p/a"},
                    {"method": "A", "model": "big", "experiment": "p/a"},
                ],
            },
            {
                "name": "u",
                "title": "U",
                "columns": ["b1", "b2"],
                "rows": [{"method": "A", "experiment": "p/a"}],
            },
        ],
    }
    (tmp_path / "tables.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "published.yaml").write_text(
        yaml.safe_dump({"t": [{"method": "A", "model": "big", "mark": "P", "values": {"R@3": 0.7}}]})
    )
    write_tables(runs, tmp_path, tmp_path)
    t = pd.read_csv(tmp_path / "t.csv", dtype=str).fillna("")
    assert t[["model", "R@1", "R@3"]].values.tolist() == [
        ["m", "0.2500", "0.5000"],
        ["big", "missing", "missing"],
        ["big", "missing", "0.7000"],
    ]
    u = pd.read_csv(tmp_path / "u.csv", dtype=str)
    assert u[["b1", "b2"]].values.tolist() == [["0.2500", "0.9000"]]


def test_seeds_are_averaged_with_their_spread(tmp_path):
    from rankrl.report.collect import latest_per_cell

    cell = {"experiment": "p/a", "benchmark": "b1", "model": "m", "scale": "cpu", "metric": "R@1"}
    runs = _runs(
        [
            {**cell, "seed": 0, "value": 0.2, "created": "2026-01-01"},
            {**cell, "seed": 0, "value": 0.1, "created": "2026-01-02"},  # newer run of seed 0 replaces it
            {**cell, "seed": 1, "value": 0.3, "created": "2026-01-01"},
            {**cell, "seed": 2, "value": 0.5, "created": "2026-01-01"},
            {**cell, "experiment": "p/b", "seed": 0, "value": 0.7, "created": "2026-01-01"},
        ]
    )
    spec = {
        "metric": "R@1",
        "tables": [
            {
                "name": "t",
                "title": "T",
                "columns": ["b1"],
                "average": True,
                "rows": [{"method": "A", "experiment": "p/a"}, {"method": "B", "experiment": "p/b"}],
            }
        ],
    }
    (tmp_path / "tables.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "published.yaml").write_text("")
    write_tables(latest_per_cell(runs), tmp_path, tmp_path)
    t = pd.read_csv(tmp_path / "t.csv", dtype=str)
    # seeds 0.1, 0.3, 0.5: mean 0.3, sample std 0.2; one seed reads as before, a plain number
    assert t[["method", "b1", "avg"]].values.tolist() == [
        ["A", "0.3000 ± 0.2000 (n=3)", "0.3000"],
        ["B", "0.7000", "0.7000"],
    ]
    assert not (tmp_path / "comparisons.csv").exists()  # the file lists no comparison
