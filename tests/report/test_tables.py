"""Paper tables: a table whose columns are metrics of one benchmark, and rows that name a model."""

from __future__ import annotations

import pandas as pd
import yaml

from rankrl.report.collect import COLUMNS
from rankrl.report.tables import write_tables


def _runs(rows):
    return pd.DataFrame([{**dict.fromkeys(COLUMNS), **r} for r in rows], columns=COLUMNS)


def test_metric_columns_and_model_rows(tmp_path):
    runs = _runs([
        {"experiment": "p/a", "benchmark": "b1", "model": "m", "scale": "cpu", "metric": "R@1", "value": 0.25},
        {"experiment": "p/a", "benchmark": "b1", "model": "m", "scale": "cpu", "metric": "R@3", "value": 0.5},
        {"experiment": "p/a", "benchmark": "b2", "model": "m", "scale": "cpu", "metric": "R@1", "value": 0.9},
    ])
    spec = {"metric": "R@1", "tables": [
        {"name": "t", "title": "T", "benchmark": "b1", "columns": ["R@1", "R@3"],
         "rows": [{"method": "A", "experiment": "p/a"}, {"method": "A", "model": "big", "experiment": "p/a"}]},
        {"name": "u", "title": "U", "columns": ["b1", "b2"], "rows": [{"method": "A", "experiment": "p/a"}]},
    ]}
    (tmp_path / "tables.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "published.yaml").write_text(yaml.safe_dump({"t": [{"method": "A", "model": "big", "mark": "P",
                                                                     "values": {"R@3": 0.7}}]}))
    write_tables(runs, tmp_path, tmp_path)
    t = pd.read_csv(tmp_path / "t.csv", dtype=str).fillna("")
    assert t[["model", "R@1", "R@3"]].values.tolist() == [["m", "0.2500", "0.5000"], ["big", "missing", "missing"],
                                                          ["big", "missing", "0.7000"]]
    u = pd.read_csv(tmp_path / "u.csv", dtype=str)
    assert u[["b1", "b2"]].values.tolist() == [["0.2500", "0.9000"]]
