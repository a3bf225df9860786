"""Paper figures: training curves drawn from run folders' ``train_log.jsonl``, finished or still running.

A paper's figures are described by data in ``experiments/<paper>/figures.yaml``; this module knows no
paper. Each figure is written as ``<out_dir>/<name>.png`` beside ``<out_dir>/<name>.csv``, which holds
the numbers drawn, to 10 significant digits (see "The CSV" below).

figures.yaml
------------
::

    figures:
      - name: rankr1_reward_curve          # -> <out_dir>/rankr1_reward_curve.png and .csv
        title: "Rank-R1 GRPO at CPU scale"  # optional; scale and model are added in a footer from the runs
        columns: 3                          # optional: panels per row (default: all in one row, at most 3)
        model: qwen3-4b                     # optional: draw only this model's runs, or
        per_model: true                     #   one figure per model found, named <name>_<model>
        benchmark: flickr30k-cn             # optional: only runs on this benchmark (a benchmark sweep)
        seeds: each                         # optional: each seed its own line (default: mean, min-max band)
        runs:                               # experiment names (metrics.json / config experiment_name)
          - rankr1/warmstart_grpo_dl19      #   a bare name: labelled by its name
          - {experiment: grape/sim_reward, label: similarity reward}   # or with a legend label
        panels:                             # one subplot per panel, x axis = training step
          - reward/mean                     #   a bare train_log key
          - {series: format_error_rate, label: format-error rate}
          - {series: monitor/nDCG@10, label: probe nDCG@10, smooth: 5, ylim: [0, 1]}

Panel keys: ``series`` (a ``train_log.jsonl`` key, required), ``label`` (the panel's title and y label;
default the key), ``smooth`` (a rolling-mean window, in logged points of that series: the smoothed line is
drawn bold and the raw one faintly), ``ylim`` ([low, high]).

A top-level ``rounds:`` list beside (or instead of) ``figures:`` declares round figures: a pipeline's
evaluations stage after stage, from its stages' ``metrics.json`` (:mod:`rankrl.report.rounds`).

Runs and seeds
--------------
Every seed found for an experiment is drawn: one seed as a line; several as their mean (over the seeds that
logged that step) with a min-max band, or with ``seeds: each`` each seed as its own line (where seeds part
ways, e.g. one collapses, a mean draws a path no seed took; such a figure takes no ``smooth``). Per
(experiment, seed) the newest run folder is used, as the tables do. Without ``model`` or ``per_model`` that is
the newest run of any model, so an experiment run for several models (a CPU model and the paper's) needs
``model: <name>`` (that model's runs only) or ``per_model: true`` (one figure per model among the figure's
runs, ``<name>_<model>.png``). Likewise an experiment swept over benchmarks (GRAPE's, a run folder per
benchmark) needs ``benchmark: <name>``: the runs whose metrics.json (or config's ``benchmark.name``) names
that benchmark. A run is found by its ``metrics.json`` or, before it has one (still training, or killed), by
its ``config.yaml`` / ``.hydra/config.yaml`` (Hydra writes the latter when the run starts); see
:func:`find_runs`. A run needs a ``train_log.jsonl`` to be drawn.

A figure with any of its runs missing is skipped with a warning and not written (a comparison with one
side missing would mislead); a run that never logged a panel's series leaves that panel saying so.

The CSV
-------
Long format, one row per point: ``panel`` (1-based), ``series``, ``run`` (the legend label),
``experiment``, ``line``, ``step``, ``value``. ``line`` is ``seed=<s>`` for each seed's logged values
(non-finite ones dropped), ``mean`` (the line drawn; with one seed, that seed), ``min``/``max`` (the band,
with more than one seed), and ``mean_smoothed``/``min_smoothed``/``max_smoothed`` for a smoothed panel.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rankrl.run_folders import CHECKPOINTS_DIR, CONFIG_FILE, METRICS_FILE, TRAIN_LOG_FILE
from rankrl.runs import SCHEMA

log = logging.getLogger(__name__)

LOG_FILE = TRAIN_LOG_FILE
RUN_COLUMNS = ["experiment", "paper", "seed", "scale", "model", "benchmark", "created", "finished", "run_dir"]
CSV_COLUMNS = ["panel", "series", "run", "experiment", "line", "step", "value"]
SEED_MODES = ("mean", "each")  # figures.yaml `seeds:`: mean with a min-max band (default), or a line each
# `seeds: each`: the run's colour, one dash pattern per seed number, distinct for seeds 0-7 (four named
# patterns left seeds 1 and 5 drawn alike: F-GRPO's control runs seeds 0, 1, 2, 5)
SEED_STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 3)), (0, (1, 3)), (0, (3, 1, 1, 1)))
# the CSV's numbers (means and rolling means over seeds): 10 significant digits, so that a rebuild on a CPU
# whose vector arithmetic rounds the last bit differently writes the same file
CSV_FLOAT_FORMAT = "%.10g"
# folders never holding a run's own files: skipped while searching, which keeps the walk fast
_SKIP_DIRS = {".hydra", CHECKPOINTS_DIR, "wandb", "__pycache__", ".git"}


# ---------------------------------------------------------------------------------------------- logs


def _number(value: Any) -> float | None:
    """A log value as a float (non-finite -> NaN), or None when it is not a number (text, lists)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else math.nan
    if isinstance(value, str):
        try:
            number = float(value)  # "nan", "inf", "-inf" as tracking.RunLogger writes them
        except ValueError:
            return None
        return number if math.isfinite(number) else math.nan
    return None


def read_log(run_dir: str | Path) -> pd.DataFrame:
    """A run's ``train_log.jsonl`` as a DataFrame indexed by ``step``, numeric columns only.

    Non-finite values (logged as strings such as ``"nan"``) become NaN; keys holding text (e.g.
    ``sample/completion``) are dropped. Keys logged only every few steps (``monitor/<name>``) are NaN at
    the other steps. Lines logged for the same step are merged (the last value of each key wins); an
    unreadable line (e.g. the half-written last line of a running job) is skipped with a warning.
    """
    path = Path(run_dir) / LOG_FILE
    columns: dict[str, dict[int, float]] = {}
    text_keys: set[str] = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            step = int(record["step"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            log.warning("%s line %d: skipped (%s)", path, number, err)
            continue
        for key, value in record.items():
            if key == "step" or value is None:
                continue
            number_value = _number(value)
            if number_value is None:
                text_keys.add(key)
            else:
                columns.setdefault(key, {})[step] = number_value
    frame = pd.DataFrame({k: pd.Series(v, dtype=float) for k, v in columns.items() if k not in text_keys})
    frame.index = frame.index.astype(int)
    frame.index.name = "step"
    return frame.sort_index()


# ---------------------------------------------------------------------------------------------- runs


def _mtime(path: Path) -> str:
    return dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC).isoformat(timespec="seconds")


def _from_config(path: Path) -> dict[str, Any] | None:
    """experiment, paper, seed, scale, model of a run from a saved config (resolved or Hydra's own)."""
    from omegaconf import OmegaConf

    import rankrl.config  # noqa: F401  (the resolvers an unresolved .hydra/config.yaml may use)

    try:
        cfg = OmegaConf.load(path)
    except Exception as err:  # a config being written, or not YAML
        log.warning("skipping unreadable %s: %s", path, err)
        return None

    def get(key: str) -> Any:
        try:
            value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        except Exception:
            return None
        return value if value is None or isinstance(value, (str, int, float, bool)) else None

    info = {
        "experiment": get("experiment_name"),
        "paper": get("paper"),
        "seed": get("seed"),
        "scale": get("scale"),
        "model": get("model.name"),
        "benchmark": get("benchmark.name"),
    }
    return info if info["experiment"] else None


def _run_info(folder: Path) -> dict[str, Any] | None:
    metrics = folder / METRICS_FILE
    if metrics.exists():
        try:
            record = json.loads(metrics.read_text())
        except (OSError, json.JSONDecodeError) as err:
            log.warning("skipping unreadable %s: %s", metrics, err)
            record = {}
        if record.get("schema") == SCHEMA and record.get("experiment"):
            return {
                **{k: record.get(k) for k in ("experiment", "paper", "seed", "scale", "model", "benchmark")},
                "created": record.get("created") or _mtime(metrics),
                "finished": True,
            }
    for name in (CONFIG_FILE, ".hydra/config.yaml"):
        if (folder / name).exists():
            info = _from_config(folder / name)
            if info:
                # the start of the run (Hydra writes .hydra/config.yaml first), else its last log line
                stamp = folder / ".hydra" / "config.yaml"
                return {
                    **info,
                    "created": _mtime(stamp if stamp.exists() else folder / LOG_FILE),
                    "finished": False,
                }
    return None


def find_runs(
    runs_dir: str | Path, paper: str | None = None, skip_scales: Collection[str] = ()
) -> pd.DataFrame:
    """One row per run folder under ``runs_dir`` (columns ``RUN_COLUMNS``), finished or not, leaving out
    runs whose ``scale`` is in ``skip_scales``.

    A run folder is one holding ``metrics.json`` or ``train_log.jsonl``. It is identified by its
    ``metrics.json`` (schema ``rankrl.metrics/v1``) when it has one, else by ``config.yaml`` (written when
    the run finishes) or ``.hydra/config.yaml`` (written by Hydra when it starts), whose
    ``experiment_name``, ``seed``, ``scale``, ``model.name`` and ``paper`` are read. ``created`` is
    metrics.json's timestamp for a finished run, and for an unfinished one the time its
    ``.hydra/config.yaml`` was written (else that of its last log line). Folders that cannot be identified
    (no experiment name anywhere) are skipped.
    """
    rows = []
    for root, dirs, files in os.walk(runs_dir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        if METRICS_FILE not in files and LOG_FILE not in files:
            continue
        info = _run_info(Path(root))
        if info is None:
            log.debug("%s: no experiment name in metrics.json or config; skipped", root)
            continue
        if (paper and info.get("paper") != paper) or info.get("scale") in skip_scales:
            continue
        rows.append({**info, "run_dir": root})
    return pd.DataFrame(rows, columns=RUN_COLUMNS)


def latest_per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """The newest run folder of each (experiment, seed) among those with a ``train_log.jsonl``.

    Accepts :func:`find_runs` rows or :func:`rankrl.report.collect.collect_runs` rows (one per metric).
    """
    if runs.empty:
        return pd.DataFrame(columns=RUN_COLUMNS)
    frame = runs.drop_duplicates("run_dir").copy()
    for column in RUN_COLUMNS:
        if column not in frame:
            frame[column] = None
    frame = frame[[(Path(d) / LOG_FILE).exists() for d in frame["run_dir"]]]
    frame["finished"] = [(Path(d) / METRICS_FILE).exists() for d in frame["run_dir"]]
    return newest_per_seed(frame)


def newest_per_seed(runs: pd.DataFrame) -> pd.DataFrame:
    """The newest of ``runs`` (``RUN_COLUMNS`` rows, each with a log) per (experiment, seed)."""
    frame = runs.sort_values(["created", "run_dir"], na_position="first")
    return frame.groupby(["experiment", "seed"], dropna=False, as_index=False).tail(1)[RUN_COLUMNS]


# ---------------------------------------------------------------------------------------------- spec


def _runs_spec(figure: Mapping[str, Any]) -> list[dict[str, str]]:
    out = []
    for entry in figure["runs"]:
        if isinstance(entry, str):
            out.append({"experiment": entry, "label": entry})
        elif isinstance(entry, Mapping) and "experiment" in entry:
            out.append({"experiment": entry["experiment"], "label": entry.get("label", entry["experiment"])})
        else:
            raise ValueError(
                f"figure {figure['name']!r}: a run is a name or {{experiment:, label:}}, not {entry!r}"
            )
    return out


def _panels_spec(figure: Mapping[str, Any]) -> list[dict[str, Any]]:
    out = []
    for entry in figure["panels"]:
        panel = {"series": entry} if isinstance(entry, str) else dict(entry)
        if "series" not in panel:
            raise ValueError(f"figure {figure['name']!r}: a panel needs a series, got {entry!r}")
        unknown = set(panel) - {"series", "label", "smooth", "ylim"}
        if unknown:
            raise ValueError(f"figure {figure['name']!r}: unknown panel keys {sorted(unknown)}")
        panel.setdefault("label", panel["series"])
        if panel.get("smooth") is not None and int(panel["smooth"]) < 1:
            raise ValueError(f"figure {figure['name']!r}: smooth must be a window >= 1")
        out.append(panel)
    return out


def each_seed(figure: Mapping[str, Any]) -> bool:
    """Whether ``figure`` draws each seed as its own line (``seeds: each``) rather than their mean."""
    return figure.get("seeds") == "each"


def seed_linestyle(seed: int) -> str | tuple:
    """Seed ``seed``'s dash pattern under ``seeds: each``: the same in every run and panel, so a seed is
    followed across arms by its pattern (and across runs' colours)."""
    return SEED_STYLES[seed % len(SEED_STYLES)]


def load_spec(spec_path: Path) -> list[dict[str, Any]]:
    """The figures of a ``figures.yaml``, checked: an error in the spec stops here, with its name."""
    spec = yaml.safe_load(Path(spec_path).read_text()) or {}
    figures = spec.get("figures", [] if "rounds" in spec else None)  # a spec may hold round figures only
    if not isinstance(figures, list):
        raise ValueError(f"{spec_path}: expected a top-level `figures:` list (or `rounds:`, see rounds.py)")
    names = set()
    for figure in figures:
        missing = {"name", "runs", "panels"} - set(figure)
        if missing:
            raise ValueError(f"{spec_path}: figure {figure.get('name', figure)!r} lacks {sorted(missing)}")
        if figure["name"] in names:
            raise ValueError(f"{spec_path}: figure name {figure['name']!r} is used twice")
        names.add(figure["name"])
        if figure.get("model") is not None and figure.get("per_model"):
            raise ValueError(f"{spec_path}: figure {figure['name']!r}: `model` or `per_model`, not both")
        _runs_spec(figure)
        panels = _panels_spec(figure)
        if figure.get("seeds", SEED_MODES[0]) not in SEED_MODES:
            valid = ", ".join(SEED_MODES)
            name, seeds = figure["name"], figure["seeds"]
            raise ValueError(f"{spec_path}: figure {name!r}: seeds={seeds!r}; valid: {valid}")
        if each_seed(figure) and any(p.get("smooth") for p in panels):
            raise ValueError(
                f"{spec_path}: figure {figure['name']!r}: `seeds: each` draws raw lines, no smooth"
            )
    return figures


# ---------------------------------------------------------------------------------------------- data


def _panel_data(
    logs: list[tuple[Any, pd.DataFrame]], series: str, smooth: int | None, each_seed: bool = False
) -> pd.DataFrame:
    """The lines of one run in one panel: per-seed values, then (unless ``each_seed``, where the seeds are
    the lines drawn) mean/min/max and their smoothed versions."""
    per_seed = {}
    for seed, frame in logs:
        if series in frame:
            values = frame[series].dropna()
            if len(values):
                per_seed[seed] = values
    if not per_seed:
        return pd.DataFrame(columns=["line", "step", "value"])
    lines = {f"seed={seed}": values for seed, values in per_seed.items()}
    if each_seed:
        return _long(lines)
    wide = pd.DataFrame(per_seed).sort_index()
    stats = {"mean": wide.mean(axis=1)}
    if len(per_seed) > 1:
        stats |= {"min": wide.min(axis=1), "max": wide.max(axis=1)}
    lines |= stats
    if smooth:
        lines |= {f"{k}_smoothed": v.rolling(int(smooth), min_periods=1).mean() for k, v in stats.items()}
    return _long(lines)


def _long(lines: Mapping[str, pd.Series]) -> pd.DataFrame:
    parts = [
        pd.DataFrame({"line": name, "step": values.index.astype(int), "value": values.to_numpy()})
        for name, values in lines.items()
    ]
    return pd.concat(parts, ignore_index=True)


def _join(values: pd.Series) -> str:
    found = sorted({str(v) for v in values if v is not None and not (isinstance(v, float) and pd.isna(v))})
    return ", ".join(found) or "unknown"


def plot_figure(
    figure: Mapping[str, Any],
    runs: list[dict[str, Any]],
    panels: list[dict[str, Any]],
    data: pd.DataFrame,
    footer: str,
) -> Any:
    """The matplotlib Figure of ``data`` (the CSV's rows): one axes per panel, one colour per run."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    ncols = int(figure.get("columns") or min(len(panels), 3))
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(4.6 * ncols, 3.4 * nrows + 0.9), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    for number, (ax, panel) in enumerate(zip(axes, panels), start=1):
        ax.set_title(panel["label"], fontsize=10)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        drawn = False
        for index, run in enumerate(runs):
            lines = data[(data["panel"] == number) & (data["run"] == run["label"])]
            if lines.empty:
                continue
            drawn = True
            color = f"C{index}"

            def line(name: str, lines: pd.DataFrame = lines) -> pd.DataFrame:
                return lines[lines["line"] == name]

            if each_seed(figure):
                for n, name in enumerate(dict.fromkeys(lines["line"])):
                    seed = name.removeprefix("seed=")
                    seed_number = int(seed) if seed.isdigit() else n
                    ax.plot(
                        line(name)["step"],
                        line(name)["value"],
                        color=color,
                        linestyle=seed_linestyle(seed_number),  # seed k: one pattern in every run
                        linewidth=1.4,
                        label=f"{run['label']}, seed {seed}" if len(runs) > 1 else f"seed {seed}",
                    )
                continue
            smoothed = not line("mean_smoothed").empty
            main = line("mean_smoothed") if smoothed else line("mean")
            if smoothed:
                raw = line("mean")
                ax.plot(raw["step"], raw["value"], color=color, alpha=0.25, linewidth=1)
            marker = "o" if len(main) <= 30 else None
            ax.plot(
                main["step"],
                main["value"],
                color=color,
                linewidth=1.8,
                marker=marker,
                markersize=3,
                label=run["label"] if len(runs) > 1 else None,
            )
            suffix = "_smoothed" if smoothed else ""
            low, high = line(f"min{suffix}"), line(f"max{suffix}")
            if not low.empty:
                ax.fill_between(
                    low["step"], low["value"], high["value"].to_numpy(), color=color, alpha=0.2, linewidth=0
                )
        if not drawn:
            ax.text(
                0.5,
                0.5,
                f"no {panel['series']} logged",
                ha="center",
                va="center",
                transform=ax.transAxes,
                color="gray",
            )
        if panel.get("ylim"):
            ax.set_ylim(*panel["ylim"])
        if drawn and (len(runs) > 1 or each_seed(figure)):
            ax.legend(fontsize=8)
    if figure.get("title"):
        fig.suptitle(figure["title"], fontsize=12)
    fig.text(0.5, 0.0, footer, ha="center", va="bottom", fontsize=8, color="dimgray", wrap=True)
    fig.get_layout_engine().set(rect=(0, 0.06, 1, 0.94))
    return fig


def draw_figure(
    figure: Mapping[str, Any],
    runs: pd.DataFrame,
    out_dir: Path,
    log_of: Callable[[Any], pd.DataFrame] | None = None,
) -> list[Path]:
    """Draw one figure from :func:`latest_per_seed` rows; [] (with a warning) when a run is missing.

    ``log_of``: a row's training log (default: :func:`read_log` of its ``run_dir``)."""
    log_of = log_of or (lambda row: read_log(row.run_dir))
    run_specs, panels = _runs_spec(figure), _panels_spec(figure)
    missing = [r["experiment"] for r in run_specs if not (runs["experiment"] == r["experiment"]).any()]
    if missing:
        log.warning(
            "figure %s skipped: no run folder with a %s for %s", figure["name"], LOG_FILE, ", ".join(missing)
        )
        return []
    parts, notes, used = [], [], []
    for run in run_specs:
        rows = runs[runs["experiment"] == run["experiment"]].sort_values("seed", na_position="first")
        logs = [(row.seed, log_of(row)) for row in rows.itertuples()]
        used.append(rows)
        last = max((int(frame.index.max()) for _, frame in logs if len(frame)), default=None)
        seeds = ", ".join(str(s) for s, _ in logs)
        unfinished = (~rows["finished"].astype(bool)).sum()
        notes.append(
            f"{run['label']}: seed{'s' if len(logs) > 1 else ''} {seeds}"
            + (" (mean, min-max band)" if len(logs) > 1 and not each_seed(figure) else "")
            + (f", last step {last}" if last is not None else ", nothing logged")
            + (", unfinished" if unfinished else "")
        )
        for number, panel in enumerate(panels, start=1):
            lines = _panel_data(logs, panel["series"], panel.get("smooth"), each_seed(figure))
            if lines.empty:
                log.warning("figure %s: %s logged no %s", figure["name"], run["experiment"], panel["series"])
                continue
            parts.append(
                lines.assign(
                    panel=number, series=panel["series"], run=run["label"], experiment=run["experiment"]
                )
            )
    data = pd.concat(parts, ignore_index=True)[CSV_COLUMNS] if parts else pd.DataFrame(columns=CSV_COLUMNS)
    drawn = pd.concat(used)
    footer = (
        f"scale: {_join(drawn['scale'])}; model: {_join(drawn['model'])}. "
        + "; ".join(notes)
        + (
            ". Smoothed: rolling mean over the window given per panel (raw faint)."
            if any(p.get("smooth") for p in panels)
            else ""
        )
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    png, csv = out_dir / f"{figure['name']}.png", out_dir / f"{figure['name']}.csv"
    plot_figure(figure, run_specs, panels, data, footer).savefig(png, dpi=120)
    data.to_csv(csv, index=False, float_format=CSV_FLOAT_FORMAT)
    return [png, csv]


def draw_figures(
    runs: pd.DataFrame,
    spec_path: Path,
    out_dir: Path,
    log_of: Callable[[Any], pd.DataFrame] | None = None,
) -> list[Path]:
    """Draw every figure of ``spec_path`` (a ``figures.yaml``) into ``out_dir``; returns the written paths.

    ``runs`` holds run folders (:func:`find_runs`, or ``collect_runs`` rows); the newest folder per
    (experiment, seed) with a ``train_log.jsonl`` is drawn. With ``log_of`` (a row's log), ``runs`` are
    stored runs without folders, each with a log (``rankrl.report.results``). A figure with a missing run
    is skipped with a warning and not written, so only written paths (PNG, then CSV, per figure) are
    returned.
    """
    figures = load_spec(Path(spec_path))
    newest = latest_per_seed if log_of is None else newest_per_seed
    written = []
    for figure in figures:
        # a figure of one benchmark draws that benchmark's runs, not the newest of a benchmark sweep
        pool = runs if figure.get("benchmark") is None else _on_benchmark(runs, figure["benchmark"])
        latest = newest(pool)
        for one, model in per_model_figures(figure, pool):
            # a model's newest runs, not the newest of any model
            chosen = latest if model is None else newest(pool[pool["model"] == model])
            written += draw_figure(one, chosen, Path(out_dir), log_of)
    return written


def _on_benchmark(runs: pd.DataFrame, benchmark: str) -> pd.DataFrame:
    return runs[runs["benchmark"] == benchmark] if "benchmark" in runs else runs.iloc[0:0]


def per_model_figures(figure: Mapping[str, Any], runs: pd.DataFrame) -> list[tuple[dict[str, Any], Any]]:
    """(figure, model) pairs to draw: the figure itself (model None: any model's newest runs) or for one
    ``model``; with ``per_model``, one named ``<name>_<model>`` for each model among the figure's runs."""
    if not figure.get("per_model"):
        return [(dict(figure), figure.get("model"))]
    experiments = {r["experiment"] for r in _runs_spec(figure)}
    found = runs[runs["experiment"].isin(experiments)]["model"].dropna() if len(runs) else []
    return [({**figure, "name": f"{figure['name']}_{m}"}, m) for m in sorted(set(found))]
