"""The results a paper's tables, comparisons and figures are built from, kept in the repository beside them:
``experiments/<paper>/results/``.

Run folders (``outputs/``) are not committed, so the report does not build from them directly. It refreshes
``results/`` from them, then builds everything from ``results/`` alone: a fresh checkout rebuilds every
committed table, comparison and figure byte for byte (``make tables``), and a rerun of one seed changes that
seed's rows only, so ``git diff experiments/<paper>/results/`` shows what it changed.

Layout (all CSV; values written as read, so they read back exactly)::

    results/
      runs.csv                                      one row per finished run and metric: its metrics.json
      curves.csv                                    the runs whose training logs figures draw
      <experiment>/<scale>-<model>/per_query.csv    one row per seed and query: each run's per_query.csv
      <experiment>/<scale>-<model>/train_log.csv    one row per seed and logged step: the series figures draw

``runs.csv`` columns: experiment, paper, task, benchmark, split, model, scale, seed, eval_limit, git_commit,
created, train_role, metric, value. ``per_query.csv``: experiment, benchmark, scale, model, seed, qid, then
one column per per-query metric. ``curves.csv``: experiment, seed, scale, model, created, finished.
``train_log.csv``: experiment, scale, model, seed, step, then the figures' series (empty where a step did not
log one). A run without a model (BM25) is filed under ``<scale>-no-model``.

What is kept: the runs of the experiments a paper's specs name (tables.yaml rows and comparisons,
published.yaml's relative gains, figures.yaml's figures, and every stage of its round pipelines), the newest
run of each (experiment, benchmark, model, scale, seed), with the per-query values of the metrics its tables
and comparisons report; for figures, the newest run with a training log of each (experiment, benchmark,
model, scale, seed), finished or not, and the logged series the figures draw. Refreshing merges: a run
in ``outputs/`` replaces the stored run of its key unless the stored one is newer; stored runs absent from
``outputs/`` stay. Delete ``results/`` to rebuild it from ``outputs/`` alone.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rankrl.report.collect import COLUMNS, PER_QUERY_KEYS, RUN_KEY, read_per_query
from rankrl.report.figures import LOG_FILE, RUN_COLUMNS, load_spec, read_log
from rankrl.report.gains import PUBLISHED
from rankrl.report.rounds import load_rounds
from rankrl.runs import METRICS_FILE

log = logging.getLogger(__name__)

RESULTS_DIR = "results"
RUNS_FILE = "runs.csv"
CURVES_FILE = "curves.csv"
PER_QUERY_FILE = "per_query.csv"
TRAIN_LOG_FILE = "train_log.csv"
NO_MODEL = "no-model"

RUNS_COLUMNS = [c for c in COLUMNS if c != "run_dir"]
CURVE_COLUMNS = ["experiment", "benchmark", "seed", "scale", "model", "created", "finished"]
CURVE_KEY = ["experiment", "benchmark", "scale", "model", "seed"]
LOG_KEYS = ["experiment", "benchmark", "scale", "model", "seed", "step"]
_TEXT = ["experiment", "paper", "task", "benchmark", "split", "model", "scale", "git_commit", "created"]


# ---------------------------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class Wanted:
    """The experiments a paper's specs name: ``experiments`` by name, ``pipelines`` with all their stages,
    per figure experiment the logged series its figures draw, and the ``metrics`` its tables and
    comparisons report (the per-query values kept)."""

    experiments: frozenset[str] = frozenset()
    pipelines: tuple[str, ...] = ()
    series: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    metrics: frozenset[str] = frozenset()

    def __contains__(self, experiment: Any) -> bool:
        name = str(experiment)
        return name in self.experiments or name in self.series or name.startswith(self.pipelines)


def _side_experiments(spec: Any) -> set[str]:
    if isinstance(spec, str):
        return {spec}
    return {spec["experiment"]} if "experiment" in spec else set(spec.get("experiments", {}).values())


def wanted(paper_dir: Path) -> Wanted:
    """What ``paper_dir``'s tables.yaml, published.yaml and figures.yaml name."""
    names: set[str] = set()
    metrics: set[str] = set()
    tables = paper_dir / "tables.yaml"
    if tables.exists():
        spec = yaml.safe_load(tables.read_text()) or {}
        metrics.add(spec.get("metric"))
        for table in spec.get("tables", []):
            metrics |= set(table["columns"]) if "benchmark" in table else {table.get("metric")}
            for row in table["rows"]:
                names |= _side_experiments(row)
        for comparison in spec.get("comparisons", []):
            names |= _side_experiments(comparison["a"]) | _side_experiments(comparison["b"])
            metrics.add(comparison.get("metric"))
    published = paper_dir / PUBLISHED
    if published.exists():
        gains = (yaml.safe_load(published.read_text()) or {}).get("relative_gains", [])
        names |= {g[k] for g in gains for k in ("ours", "baseline")}
    series: dict[str, list[str]] = {}
    pipelines: tuple[str, ...] = ()
    figures = paper_dir / "figures.yaml"
    if figures.exists():
        for figure in load_spec(figures):
            panels = [p if isinstance(p, str) else p["series"] for p in figure["panels"]]
            for run in figure["runs"]:
                drawn = series.setdefault(run if isinstance(run, str) else run["experiment"], [])
                drawn += [p for p in panels if p not in drawn]
        pipelines = tuple(f"{r['pipeline']}/" for r in load_rounds(figures))
    series_of = {k: tuple(v) for k, v in series.items()}
    return Wanted(frozenset(names), pipelines, series_of, frozenset(m for m in metrics if m))


# ---------------------------------------------------------------------------------------------- store


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame(columns=columns)


@dataclass
class Results:
    """A paper's results: ``runs`` (``RUNS_COLUMNS``, one row per run and metric), ``per_query``
    (``PER_QUERY_KEYS`` and metric columns), ``curves`` (``CURVE_COLUMNS``) and ``logs`` (``LOG_KEYS`` and
    series columns)."""

    runs: pd.DataFrame = field(default_factory=lambda: _empty(RUNS_COLUMNS))
    per_query: pd.DataFrame = field(default_factory=lambda: _empty(PER_QUERY_KEYS))
    curves: pd.DataFrame = field(default_factory=lambda: _empty(CURVE_COLUMNS))
    logs: pd.DataFrame = field(default_factory=lambda: _empty(LOG_KEYS))

    def empty(self) -> bool:
        return self.runs.empty and self.curves.empty

    # ------------------------------------------------------------------ what the report reads

    def figure_runs(self) -> pd.DataFrame:
        """The runs figures draw, as ``rankrl.report.figures`` rows (no folder: :meth:`log` has the logs)."""
        frame = self.curves.copy()
        frame["paper"], frame["run_dir"] = None, None
        return frame[RUN_COLUMNS]

    def log(self, run: Any) -> pd.DataFrame:
        """The stored training log of a :meth:`figure_runs` row, as ``read_log`` returns a folder's."""
        rows = self.logs[_matches(self.logs, {k: getattr(run, k) for k in CURVE_KEY})]
        frame = rows.drop(columns=[c for c in LOG_KEYS if c != "step"]).set_index("step").sort_index()
        frame = frame.dropna(axis=1, how="all").astype(float)
        frame.index = frame.index.astype(int)
        frame.index.name = "step"
        return frame

    def stage_records(self) -> list[dict[str, Any]]:
        """Every stored run as a metrics.json-like record (``rankrl.report.rounds`` reads its stages)."""
        records = []
        for _, run in self.runs.groupby(RUN_KEY, dropna=False, sort=True):
            first = run.iloc[0]
            records.append(
                {
                    **{k: _none(first[k]) for k in ("experiment", "scale", "model", "seed", "created")},
                    "train_role": _none(first["train_role"]),
                    "metrics": dict(zip(run["metric"], run["value"].astype(float))),
                }
            )
        return records

    # ------------------------------------------------------------------ refresh

    def merged(self, newer: Results, keep: Wanted) -> Results:
        """These results with ``newer``'s runs in, the newest of each key winning (``newer`` on a tie),
        restricted to the experiments ``keep`` names."""
        runs, per_query = _newest(self.runs, newer.runs, RUN_KEY, (self.per_query, newer.per_query))
        curves, logs = _newest(self.curves, newer.curves, CURVE_KEY, (self.logs, newer.logs))
        return Results(runs, per_query, curves, logs).only(keep)

    def without_scales(self, scales: Collection[str]) -> Results:
        """The runs of every scale but ``scales`` (smoke runs stay out of a paper's own tables)."""
        if not scales:
            return self

        def kept(frame: pd.DataFrame) -> pd.DataFrame:
            return frame[~frame["scale"].isin(set(scales))]

        return Results(kept(self.runs), kept(self.per_query), kept(self.curves), kept(self.logs))

    def only(self, keep: Wanted) -> Results:
        """The runs of the experiments ``keep`` names (the figures' logs: their series only)."""
        series = [c for c in self.logs.columns if c not in LOG_KEYS]
        drawn = {s for names in keep.series.values() for s in names}
        reported = [c for c in self.per_query.columns if c in keep.metrics]
        return Results(
            _named(self.runs, keep),
            _named(self.per_query, keep)[PER_QUERY_KEYS + reported],
            self.curves[self.curves["experiment"].isin(set(keep.series))],
            self.logs[self.logs["experiment"].isin(set(keep.series))][
                LOG_KEYS + [s for s in series if s in drawn]
            ],
        )


def _named(frame: pd.DataFrame, keep: Wanted) -> pd.DataFrame:
    """The rows of the experiments ``keep`` names."""
    return frame[frame["experiment"].map(lambda e: e in keep).astype(bool)]


def _none(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else value


def _matches(frame: pd.DataFrame, key: Mapping[str, Any]) -> pd.Series:
    """Rows of ``frame`` equal to ``key`` (a missing model or scale matches a missing one)."""
    hit = pd.Series(True, index=frame.index)
    for column, value in key.items():
        if _none(value) is None:
            hit &= frame[column].isna()
        else:
            hit &= frame[column] == value
    return hit


def _stack(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """``old`` and ``new`` in one frame, marked ``_new`` 0 and 1 (empty frames left out: they carry no
    column types)."""
    parts = [f.assign(_new=n) for f, n in ((old, 0), (new, 1)) if len(f)]
    return pd.concat(parts, ignore_index=True) if parts else old.assign(_new=0)


def _newest(
    old: pd.DataFrame, new: pd.DataFrame, key: list[str], attached: tuple[pd.DataFrame, pd.DataFrame]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The rows of ``old`` and ``new`` of each key's newest run (by ``created``; ``new``'s on a tie), and
    the rows of the ``attached`` (old, new) frames (keyed by ``key`` too) that belong to those runs."""
    both = _stack(old, new)
    heads = both[[*key, "created", "_new"]].drop_duplicates().sort_values(["created", "_new"], kind="stable")
    heads = heads.groupby(key, dropna=False).tail(1)
    chosen = both.merge(heads, on=[*key, "created", "_new"], how="inner")
    rows = _stack(*attached)
    if len(rows):
        rows = rows.merge(heads[[*key, "_new"]], on=[*key, "_new"], how="inner")
    return chosen.drop(columns="_new"), rows.drop(columns="_new")


# ---------------------------------------------------------------------------------------------- folders


def from_run_folders(finished: pd.DataFrame, folders: pd.DataFrame, keep: Wanted) -> Results:
    """The results of run folders: ``finished`` (``collect_runs`` rows), ``folders`` (``find_runs`` rows,
    for figures), restricted to what ``keep`` names; the newest run of each key."""
    runs = _named(finished, keep)
    if len(runs):
        heads = runs.drop_duplicates("run_dir").sort_values(["created", "run_dir"])
        heads = heads.groupby(RUN_KEY, dropna=False).tail(1)
        runs = runs[runs["run_dir"].isin(set(heads["run_dir"]))]
    per_query = read_per_query(runs) if len(runs) else _empty(PER_QUERY_KEYS)
    curves = _curve_runs(folders[folders["experiment"].isin(set(keep.series))] if len(folders) else folders)
    logs = []
    for run in curves.itertuples():
        frame = read_log(run.run_dir)  # every step it logged, the figures' series only
        drawn = [s for s in keep.series[run.experiment] if s in frame.columns]
        logs.append(frame[drawn].reset_index().assign(**{k: getattr(run, k) for k in CURVE_KEY}))
    if logs:
        logs = pd.concat(logs, ignore_index=True)
        logs = logs[[*LOG_KEYS, *(c for c in logs.columns if c not in LOG_KEYS)]]
    return Results(
        runs[RUNS_COLUMNS].reset_index(drop=True) if len(runs) else _empty(RUNS_COLUMNS),
        per_query,
        curves[CURVE_COLUMNS].reset_index(drop=True) if len(curves) else _empty(CURVE_COLUMNS),
        logs if len(logs) else _empty(LOG_KEYS),
    )


def _curve_runs(folders: pd.DataFrame) -> pd.DataFrame:
    """The newest run folder with a training log of each ``CURVE_KEY``, finished or not (``find_runs``
    rows): whatever a figure selects by benchmark or model, its newest run per seed is among them."""
    if folders.empty:
        return pd.DataFrame(columns=[*CURVE_COLUMNS, "run_dir"])
    frame = folders.drop_duplicates("run_dir")
    frame = frame[[(Path(d) / LOG_FILE).exists() for d in frame["run_dir"]]].copy()
    frame["finished"] = [(Path(d) / METRICS_FILE).exists() for d in frame["run_dir"]]
    frame = frame.sort_values(["created", "run_dir"], na_position="first")
    return frame.groupby(CURVE_KEY, dropna=False).tail(1)


# ---------------------------------------------------------------------------------------------- files


def run_folder(results_dir: Path, experiment: str, scale: Any, model: Any) -> Path:
    """Where a (experiment, scale, model)'s per-query values and logs are filed."""
    return Path(results_dir) / experiment / f"{_none(scale) or '-'}-{_none(model) or NO_MODEL}"


def _metric_columns(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    return [c for c in frame.columns if c not in keys and frame[c].notna().any()]


def write(results: Results, results_dir: Path) -> list[Path]:
    """Write ``results`` as ``results_dir``'s files, removing the CSV files it no longer holds."""
    results_dir = Path(results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    written = []
    runs = results.runs.sort_values(RUN_KEY, kind="stable", na_position="first")
    runs[RUNS_COLUMNS].to_csv(results_dir / RUNS_FILE, index=False)
    written.append(results_dir / RUNS_FILE)
    curves = results.curves.sort_values(CURVE_KEY, kind="stable")
    curves[CURVE_COLUMNS].to_csv(results_dir / CURVES_FILE, index=False)
    written.append(results_dir / CURVES_FILE)
    for frame, name, keys, order in (
        (results.per_query, PER_QUERY_FILE, PER_QUERY_KEYS, ["benchmark", "seed"]),
        (results.logs, TRAIN_LOG_FILE, LOG_KEYS, ["benchmark", "seed", "step"]),
    ):
        if frame.empty:
            continue
        groups = frame.groupby(["experiment", "scale", "model"], dropna=False, sort=True)
        for (experiment, scale, model), part in groups:
            path = run_folder(results_dir, experiment, scale, model) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            part = part.sort_values(order, kind="stable")
            part[keys + _metric_columns(part, keys)].to_csv(path, index=False)
            written.append(path)
    for stale in sorted(set(results_dir.rglob("*.csv")) - set(written)):
        stale.unlink()
    for folder in sorted(results_dir.rglob("*"), reverse=True):  # deepest first
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    return written


def _read(path: Path, **dtypes: Any) -> pd.DataFrame:
    return pd.read_csv(
        path, dtype=dtypes, float_precision="round_trip", keep_default_na=False, na_values=[""]
    )


def read(results_dir: Path) -> Results:
    """The results stored in ``results_dir`` (empty ones where it does not exist)."""
    results_dir = Path(results_dir)
    if not (results_dir / RUNS_FILE).exists():
        return Results()
    text = dict.fromkeys(_TEXT + ["train_role"], str)
    runs = _read(results_dir / RUNS_FILE, **text, seed=int, metric=str)
    text = dict.fromkeys(["experiment", "benchmark", "scale", "model", "created"], str)
    curves = _read(results_dir / CURVES_FILE, **text, seed=int)
    curves["finished"] = curves["finished"].astype(bool)
    keys = dict.fromkeys(["experiment", "benchmark", "scale", "model", "qid"], str)
    per_query = [_read(p, **keys, seed=int) for p in sorted(results_dir.rglob(PER_QUERY_FILE))]
    logs = [
        _read(p, **dict.fromkeys(LOG_KEYS[:4], str), seed=int, step=int)
        for p in sorted(results_dir.rglob(TRAIN_LOG_FILE))
    ]
    return Results(
        runs,
        pd.concat(per_query, ignore_index=True) if per_query else _empty(PER_QUERY_KEYS),
        curves,
        pd.concat(logs, ignore_index=True) if logs else _empty(LOG_KEYS),
    )


def refresh(results_dir: Path, fresh: Results, keep: Wanted, skip_scales: Collection[str] = ()) -> Results:
    """``results_dir``'s results with ``fresh`` merged in and written back (when ``fresh`` holds any run),
    then read back from the files, without runs of ``skip_scales``: the report builds from what is stored,
    whether or not run folders exist."""
    if not fresh.empty():
        write(read(results_dir).merged(fresh, keep).without_scales(skip_scales), results_dir)
        log.info("%s refreshed from run folders", results_dir)
    return read(results_dir).without_scales(skip_scales)
