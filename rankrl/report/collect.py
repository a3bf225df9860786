"""Read finished runs (their metrics.json files) into one DataFrame."""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from pathlib import Path

import pandas as pd

from rankrl.runs import METRICS_FILE, PER_QUERY_FILE, SCHEMA

log = logging.getLogger(__name__)

COLUMNS = [
    "experiment",
    "paper",
    "task",
    "benchmark",
    "split",
    "model",
    "scale",
    "seed",
    "eval_limit",
    "git_commit",
    "created",
    "train_role",
    "metric",
    "value",
    "run_dir",
]


def collect_runs(
    runs_dir: str | Path, paper: str | None = None, skip_scales: Collection[str] = ()
) -> pd.DataFrame:
    """One row per (run, metric) from every ``metrics.json`` under ``runs_dir``, leaving out runs whose
    ``scale`` is in ``skip_scales``.

    Files of another schema or that do not parse are skipped with a warning, never guessed at.
    """
    rows = []
    for path in sorted(Path(runs_dir).rglob(METRICS_FILE)):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            log.warning("skipping unreadable %s: %s", path, err)
            continue
        if record.get("schema") != SCHEMA or (paper and record.get("paper") != paper):
            continue
        if record.get("scale") in skip_scales:
            continue
        for metric, value in record.get("metrics", {}).items():
            rows.append(
                {
                    **{k: record.get(k) for k in COLUMNS},
                    "metric": metric,
                    "value": value,
                    "run_dir": str(path.parent),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


CELL_KEYS = ["experiment", "benchmark", "model", "scale"]


def latest_per_cell(runs: pd.DataFrame) -> pd.DataFrame:
    """Keep the newest run of each (experiment, benchmark, model, scale, seed, metric): a cell then holds
    one run per seed, which the tables average (mean +- std over seeds)."""
    if runs.empty:
        return runs
    keys = [*CELL_KEYS, "seed", "metric"]
    return runs.sort_values("created").groupby(keys, dropna=False, as_index=False).tail(1)


RUN_KEY = ["experiment", "benchmark", "model", "scale", "seed"]
PER_QUERY_KEYS = ["experiment", "benchmark", "scale", "model", "seed", "qid"]


def read_per_query(runs: pd.DataFrame) -> pd.DataFrame:
    """The per-query values of ``runs`` (``collect_runs`` rows): every run folder's ``per_query.csv``, one row
    per (run, query), keyed by ``PER_QUERY_KEYS``, one column per metric. A run without the file (an older
    run, or a task without per-query values) has no rows. Values are read back exactly as written."""
    parts = []
    for run in runs.drop_duplicates("run_dir").itertuples():
        path = Path(run.run_dir) / PER_QUERY_FILE
        if not path.exists():
            continue
        table = pd.read_csv(path, dtype={"qid": str}, float_precision="round_trip")
        keys = {k: getattr(run, k) for k in PER_QUERY_KEYS if k != "qid"}
        parts.append(table.assign(**keys)[[*PER_QUERY_KEYS, *(c for c in table.columns if c != "qid")]])
    if not parts:
        return pd.DataFrame(columns=PER_QUERY_KEYS)
    return pd.concat(parts, ignore_index=True)
