"""A run's own training curve, drawn when it finishes: ``<run dir>/reward_curve.png`` (and ``.csv``), which
the run also logs to W&B (``figures/reward_curve``). The paper figures (``figures.yaml``) compare runs; this
one shows a single run, so every training row has its curve even where no paper figure names it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from rankrl.report.figures import LOG_FILE, draw_figure, read_log

NAME = "reward_curve"
# drawn when logged, in this order: GRPO's reward and format errors, SFT's loss, the first probe metrics
SERIES = ("reward/mean", "format_error_rate", "loss")
MAX_PROBES = 2


def curve_panels(columns: list[str]) -> list[dict[str, Any]]:
    """The panels for a log with these columns: the known series it has, then up to two probe metrics."""
    panels = [{"series": s} for s in SERIES if s in columns]
    probes = [c for c in columns if c.startswith("monitor/")][:MAX_PROBES]
    return panels + [{"series": p} for p in probes]


def draw_run_curve(run_dir: str | Path, experiment: str, info: dict[str, Any] | None = None) -> Path | None:
    """Draw the run's curve into its folder; None when it logged nothing to draw (an evaluation)."""
    run_dir = Path(run_dir)
    if not (run_dir / LOG_FILE).exists():
        return None
    frame = read_log(run_dir)
    panels = curve_panels(list(frame.columns)) if len(frame) else []
    if not panels:
        return None
    info = info or {}
    runs = pd.DataFrame(
        [
            {
                "experiment": experiment,
                "seed": info.get("seed"),
                "scale": info.get("scale"),
                "model": info.get("model"),
                "finished": True,
                "run_dir": str(run_dir),
            }
        ]
    )
    figure = {"name": NAME, "title": experiment, "runs": [experiment], "panels": panels}
    written = draw_figure(figure, runs, run_dir)
    return written[0] if written else None
