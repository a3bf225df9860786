"""Paper tables: our finished runs beside the papers' published numbers, as Markdown and CSV.

A paper's tables are described by data in ``experiments/<paper>/tables.yaml`` (which experiment fills
which row, which benchmarks are columns) and its published numbers by ``published.yaml``; this module
knows no paper. A cell with no finished run shows as "missing", never as a number. A cell with runs of
several seeds shows their mean +- the sample standard deviation and the number of seeds, ``0.4022 +- 0.0105
(n=3)``; the CSV has the same strings.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rankrl.report.collect import read_per_query
from rankrl.report.gains import write_relative_gains
from rankrl.report.significance import write_comparisons

MISSING = "missing"


@dataclass(frozen=True)
class SeedMean:
    """A cell's value over its seeds: mean, sample standard deviation (ddof=1) and number of seeds."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> SeedMean:
        values = [float(v) for v in values]
        return cls(
            statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0, len(values)
        )


def _fmt(value: Any, digits: int) -> str:
    if isinstance(value, SeedMean):
        if value.n == 1:
            return f"{value.mean:.{digits}f}"
        return f"{value.mean:.{digits}f} ± {value.std:.{digits}f} (n={value.n})"
    return (
        MISSING if value is None or (isinstance(value, float) and pd.isna(value)) else f"{value:.{digits}f}"
    )


def _numeric(value: Any) -> float | None:
    """A cell's number for averages across columns: the mean over seeds, or the published value."""
    if isinstance(value, SeedMean):
        return value.mean
    return pd.to_numeric(value, errors="coerce")


def _cell_experiments(row: Mapping[str, Any], columns: list[str]) -> dict[str, str]:
    """Column -> experiment: ``experiments`` maps them one by one, ``experiment`` fills every column
    (a multirun over benchmarks)."""
    if "experiments" in row:
        return dict(row["experiments"])
    return {c: row["experiment"] for c in columns}


def our_rows(runs: pd.DataFrame, spec: Mapping[str, Any], metric: str) -> list[dict[str, Any]]:
    """One row per (method, model, scale) found among finished runs; cells are (experiment, benchmark)."""
    columns = list(spec["columns"])
    rows: list[dict[str, Any]] = []
    for row in spec["rows"]:
        cells = _cell_experiments(row, columns)
        hits = runs[(runs["metric"] == metric) & runs["experiment"].isin(set(cells.values()))]
        if "model" in row:  # a row that names a model shows that model's runs only (else "missing")
            hits = hits[hits["model"] == row["model"]]
        variants = hits[["model", "scale"]].fillna("-").drop_duplicates().to_dict("records") or [
            {"model": row.get("model", "-"), "scale": "-"}
        ]
        for variant in variants:
            out = {"method": row["method"], **variant, "source": "ours", "note": row.get("note", "")}
            for column, experiment in cells.items():
                cell = hits[
                    (hits["experiment"] == experiment)
                    & (hits["benchmark"] == column)
                    & (hits["model"].fillna("-") == variant["model"])
                    & (hits["scale"].fillna("-") == variant["scale"])
                ]
                out[column] = SeedMean.of(cell["value"].tolist()) if len(cell) else None
                if len(cell) and pd.notna(cell["eval_limit"].iloc[-1]):
                    out["note"] = "; ".join(
                        filter(
                            None, [out["note"], f"{column}: first {int(cell['eval_limit'].iloc[-1])} queries"]
                        )
                    )
            rows.append(out)
    return rows


def published_rows(published: Mapping[str, Any], table: str, columns: list[str]) -> list[dict[str, Any]]:
    rows = []
    for entry in published.get(table, []):
        values = entry.get("values", {})
        rows.append(
            {
                "method": entry["method"],
                "model": entry.get("model", "-"),
                "scale": "paper",
                "source": f"theirs ({entry.get('mark', 'P')})",
                **{c: values.get(c) for c in columns},
                "avg": values.get("avg"),
                "note": entry.get("note", ""),
            }
        )
    return rows


def build_table(
    runs: pd.DataFrame, spec: Mapping[str, Any], published: Mapping[str, Any], metric: str, digits: int = 4
) -> pd.DataFrame:
    """The table as strings: identifying columns, one column per benchmark, the mean if asked, a note."""
    columns = list(spec["columns"])
    rows = our_rows(runs, spec, metric) + published_rows(published, spec["name"], columns)
    frame = pd.DataFrame(rows, columns=["method", "model", "scale", "source", *columns, "avg", "note"])
    if spec.get("average"):
        # our average needs every column (a missing cell makes it missing); a paper may give only its average
        ours = frame[columns].map(_numeric).astype(float).mean(axis=1, skipna=False)
        frame["avg"] = frame["avg"].where(frame["avg"].notna(), ours)
        columns = [*columns, "avg"]
    for column in columns:
        frame[column] = frame[column].map(lambda v: _fmt(v, digits))
    frame["note"] = frame["note"].fillna("")
    return frame[["method", "model", "scale", "source", *columns, "note"]]


def metrics_as_columns(runs: pd.DataFrame, benchmark: str) -> pd.DataFrame:
    """The runs of one benchmark with metric and benchmark swapped, so that a table whose columns are metric
    names is built by the same cell logic as one whose columns are benchmarks."""
    cells = runs[runs["benchmark"] == benchmark].copy()
    cells["benchmark"], cells["metric"] = cells["metric"], benchmark
    return cells


def write_tables(
    runs: pd.DataFrame, paper_dir: Path, out_dir: Path, per_query: pd.DataFrame | None = None
) -> list[Path]:
    """Write ``<name>.md`` and ``<name>.csv`` for every table in ``paper_dir/tables.yaml``.

    Every table reports the file's ``metric`` unless it names its own (``metric: R@10``). A table that
    names a ``benchmark`` has metric names as its ``columns`` instead (several metrics of one benchmark).
    The file's ``comparisons`` are written as ``comparisons.md`` / ``.csv`` (rankrl.report.significance),
    from ``per_query`` (``rankrl.report.collect.read_per_query`` rows; by default read from the runs'
    folders).
    """
    spec = yaml.safe_load((paper_dir / "tables.yaml").read_text())
    published = yaml.safe_load((paper_dir / "published.yaml").read_text()) or {}
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for table in spec["tables"]:
        metric = table.get("metric", spec["metric"])  # a table may report another metric than the file's
        cells = runs
        if "benchmark" in table:  # its columns are metrics of this one benchmark
            cells, metric = metrics_as_columns(runs, table["benchmark"]), table["benchmark"]
        frame = build_table(cells, table, published, metric, spec.get("digits", 4))
        csv_path, md_path = out_dir / f"{table['name']}.csv", out_dir / f"{table['name']}.md"
        frame.to_csv(csv_path, index=False)
        header = f"### {table['title']}\n\n{metric}; {spec.get('legend', '')}\n\n"
        # the cells are already formatted strings: tabulate must not re-parse "0.6190" into 0.619
        md_path.write_text(header + frame.to_markdown(index=False, disable_numparse=True) + "\n")
        written += [md_path, csv_path]
    if spec.get("comparisons"):  # the tests of the headline comparisons (rankrl.report.significance)
        per_query = read_per_query(runs) if per_query is None else per_query
        written += write_comparisons(
            runs, per_query, spec["comparisons"], spec["metric"], out_dir, spec.get("digits", 4)
        )
    written += write_relative_gains(runs, paper_dir, out_dir)  # where the paper publishes gains, not numbers
    return written
