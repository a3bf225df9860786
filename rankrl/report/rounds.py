"""Round figures: a pipeline experiment's evaluations, stage after stage, read from each stage's
``metrics.json`` (for methods that alternate what they train, round after round).

They are declared beside the training curves in ``experiments/<paper>/figures.yaml`` (see
``rankrl.report.figures``); this module knows no paper, and ``python -m rankrl.report`` draws them.

figures.yaml
------------
::

    rounds:
      - pipeline: demo/alternating          # the stages are runs of experiment demo/alternating/<stage>
        title: "Demo, demo/alternating"     # optional (default: the pipeline); scale and model are added
        panels:                             # one subplot per panel, x axis = stage (and the role it trained)
          - label: F1                       #   the panel's title
            ylim: [0, 1]                    #   optional: drawn with a 0.02 margin on both sides
            metrics: {f1: validation F1, train_f1: training F1}   # metrics.json key: legend label

A stage is a run whose ``metrics.json`` names the experiment ``<pipeline>/<stage>`` and holds at least one
of the figure's metrics; per (scale, model, seed, stage) the newest is drawn, and stages are ordered by when
they finished. One figure per pipeline, scale, model and seed with at least two stages:
``<out_dir>/rounds_<pipeline's last part>_<scale>-<model>[_seed<seed>].png`` (no suffix for seed 0) and a
``.csv`` with one row per stage: ``stage``, ``trained`` (the run's ``train_role``, ``-`` for none), ``seed``,
``scale``, ``model``, then every panel's metrics in order (empty where a stage lacks one).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from rankrl.runs import METRICS_FILE, SCHEMA

Panel = tuple[str, tuple[tuple[str, str], ...], tuple[float, float] | None]  # title, (metric, label)s, ylim
YLIM_MARGIN = 0.02  # a line at exactly 0 or 1 stays visible
_ROUND_KEYS = {"pipeline", "title", "panels"}
_PANEL_KEYS = {"label", "metrics", "ylim"}


# ---------------------------------------------------------------------------------------------- spec


def _panel(entry: Any, where: str) -> Panel:
    if not isinstance(entry, Mapping) or not {"label", "metrics"} <= set(entry):
        raise ValueError(f"{where}: a panel is {{label:, metrics: {{key: label}}, ylim:}}, not {entry!r}")
    unknown = set(entry) - _PANEL_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown panel keys {sorted(unknown)}")
    metrics = entry["metrics"]
    if not isinstance(metrics, Mapping) or not metrics:
        raise ValueError(f"{where}: panel {entry['label']!r} needs metrics as {{metrics.json key: label}}")
    ylim = entry.get("ylim")
    if ylim is not None and len(ylim) != 2:
        raise ValueError(f"{where}: panel {entry['label']!r}: ylim is [low, high], not {ylim!r}")
    return (
        str(entry["label"]),
        tuple((str(k), str(v)) for k, v in metrics.items()),
        (float(ylim[0]), float(ylim[1])) if ylim is not None else None,
    )


def load_rounds(spec_path: Path) -> list[dict[str, Any]]:
    """The round figures of a ``figures.yaml`` (none without a ``rounds:`` list), checked, with their panels
    as :data:`Panel` tuples: an error in the spec stops here, naming the pipeline."""
    spec = yaml.safe_load(Path(spec_path).read_text()) or {}
    entries = spec.get("rounds") or []
    if not isinstance(entries, list):
        raise ValueError(f"{spec_path}: `rounds:` is a list of {{pipeline:, title:, panels:}}")
    out = []
    for entry in entries:
        if not isinstance(entry, Mapping) or not {"pipeline", "panels"} <= set(entry):
            raise ValueError(f"{spec_path}: a round figure needs a pipeline and panels, not {entry!r}")
        where = f"{spec_path}: rounds of {entry['pipeline']!r}"
        unknown = set(entry) - _ROUND_KEYS
        if unknown:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        panels = tuple(_panel(p, where) for p in entry["panels"] or ())
        if not panels:
            raise ValueError(f"{where}: no panels")
        pipeline = str(entry["pipeline"]).strip("/")
        out.append({"pipeline": pipeline, "title": str(entry.get("title") or pipeline), "panels": panels})
    return out


def panel_metrics(panels: Sequence[Panel]) -> list[str]:
    """Every metric the panels draw, in panel order: the CSV's metric columns."""
    return [key for _, series, _ in panels for key, _ in series]


# ---------------------------------------------------------------------------------------------- data


def read_records(runs_dir: str | Path, skip_scales: Collection[str] = ()) -> list[dict[str, Any]]:
    """Every finished run's ``metrics.json`` under ``runs_dir`` (runs whose scale is in ``skip_scales`` left
    out; a file being written, or not a run's, skipped)."""
    records = []
    for path in sorted(Path(runs_dir).rglob(METRICS_FILE)):
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if record.get("schema") == SCHEMA and record.get("scale") not in skip_scales:
            records.append(record)
    return records


def stage_records(
    records: Sequence[Mapping[str, Any]], pipeline: str, metrics: Sequence[str]
) -> list[dict[str, Any]]:
    """Each stage of ``pipeline`` (experiment ``<pipeline>/<stage>``) among ``records`` (metrics.json
    contents) that holds one of ``metrics``: the newest run per (scale, model, seed, stage), ordered by
    when the stage finished."""
    found: dict[tuple, dict[str, Any]] = {}
    for record in records:
        experiment = str(record.get("experiment") or "")
        if not experiment.startswith(f"{pipeline}/"):
            continue
        if not any(m in record.get("metrics", {}) for m in metrics):
            continue
        stage = experiment[len(pipeline) + 1 :]
        key = (record.get("scale"), record.get("model"), record.get("seed"), stage)
        if key not in found or str(record.get("created")) > str(found[key].get("created")):
            found[key] = {**record, "stage": stage}
    return sorted(found.values(), key=lambda r: str(r.get("created")))


def rounds_frame(records: Sequence[Mapping[str, Any]], panels: Sequence[Panel]) -> pd.DataFrame:
    """One row per stage: what the figure draws and its CSV holds."""
    return pd.DataFrame(
        [
            {
                "stage": r["stage"],
                "trained": r.get("train_role") or "-",
                "seed": r.get("seed"),
                "scale": r.get("scale"),
                "model": r.get("model"),
                **{k: r["metrics"].get(k) for k in panel_metrics(panels)},
            }
            for r in records
        ]
    )


# ---------------------------------------------------------------------------------------------- drawing


def draw_rounds(
    records: Sequence[Mapping[str, Any]], title: str, panels: Sequence[Panel], out_base: Path
) -> list[Path]:
    """The panels' metrics after each stage of ``records``: ``<out_base>.png`` and ``.csv``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    frame = rounds_frame(records, panels)
    fig = Figure(figsize=(5.0 * len(panels), 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    x = list(range(len(frame)))
    for ax, (label, series, ylim) in zip(axes, panels):
        for key, name in series:
            ax.plot(x, frame[key], marker="o", label=name)
        if ylim:
            ax.set_ylim(ylim[0] - YLIM_MARGIN, ylim[1] + YLIM_MARGIN)
        ax.set_xticks(x, [f"{s}\n({t})" for s, t in zip(frame["stage"], frame["trained"])], fontsize=7)
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    scale, model = (
        ", ".join(sorted(set(map(str, frame["scale"])))),
        ", ".join(sorted(set(map(str, frame["model"])))),
    )
    fig.suptitle(f"{title} (scale {scale}, model {model}; x: stage, role trained)", fontsize=11)
    out_base.parent.mkdir(parents=True, exist_ok=True)
    png, csv = out_base.with_suffix(".png"), out_base.with_suffix(".csv")
    fig.savefig(png, dpi=120)
    frame.to_csv(csv, index=False)
    return [png, csv]


def figure_name(pipeline: str, scale: Any, model: Any, seed: Any) -> str:
    """``rounds_<pipeline's last part>_<scale>-<model>``, with ``_seed<seed>`` for a seed other than 0."""
    return f"rounds_{pipeline.split('/')[-1]}_{scale}-{model}" + (f"_seed{seed}" if seed else "")


def draw_all_rounds(
    records: Sequence[Mapping[str, Any]], out_dir: str | Path, rounds: Sequence[Mapping[str, Any]]
) -> list[Path]:
    """Every round figure of ``rounds`` (:func:`load_rounds`): one per pipeline, scale, model and seed with
    at least two stages among ``records`` (:func:`read_records`, or the stored results'); returns the
    written paths (PNG, then CSV, per figure)."""
    written: list[Path] = []
    for spec in rounds:
        pipeline, panels = spec["pipeline"], spec["panels"]
        groups: dict[tuple, list] = {}
        for r in stage_records(records, pipeline, panel_metrics(panels)):
            groups.setdefault((r.get("scale"), r.get("model"), r.get("seed")), []).append(r)
        for (scale, model, seed), group in groups.items():
            if len(group) < 2:  # one stage is no progression
                continue
            out_base = Path(out_dir) / figure_name(pipeline, scale, model, seed)
            written += draw_rounds(group, spec["title"], panels, out_base)
    return written


def draw_rounds_of(spec_path: Path, records: Sequence[Mapping[str, Any]], out_dir: str | Path) -> list[Path]:
    """The round figures a ``figures.yaml`` declares, drawn from ``records``."""
    return draw_all_rounds(records, out_dir, load_rounds(spec_path))
