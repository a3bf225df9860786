"""Relative gains, the paper's beside ours: ``relative_gains.md`` / ``.csv`` for a paper that publishes
results as gains over a baseline ("+82.9% R@3 over SFT") rather than as numbers.

The comparisons are data, under ``relative_gains`` in ``experiments/<paper>/published.yaml``::

    relative_gains:
      - {benchmark: movielens-100k, metric: R@3, ours: fgrpo/fgrpo_movielens/fgrpo,
         baseline: fgrpo/fgrpo_movielens/sft, method: F-GRPO, over: SFT, paper: 82.9, paper_model: Qwen3-4B}

Ours is 100 * (method / baseline - 1) for the same benchmark, metric, model and scale, each side the mean over
its seeds (the tables' cells).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

PUBLISHED = "published.yaml"


def _seed_means(frame: pd.DataFrame, experiment: str) -> dict[tuple[str, str], float]:
    found = frame[frame["experiment"] == experiment]
    means = found.groupby([found["model"].fillna("-"), found["scale"].fillna("-")], sort=False)[
        "value"
    ].mean()
    return {(m, s): float(v) for (m, s), v in means.items()}


def relative_gains(runs: pd.DataFrame, comparisons: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per comparison and (model, scale) we ran both sides of (else one row reading "missing"):
    our gain 100 * (ours / baseline - 1) beside the paper's. ``runs``: ``rankrl.report.collect`` rows."""
    rows = []
    for c in comparisons:
        pick = runs[(runs["benchmark"] == c["benchmark"]) & (runs["metric"] == c["metric"])]
        ours, base = _seed_means(pick, c["ours"]), _seed_means(pick, c["baseline"])
        paper = "-"
        if c.get("paper") is not None:
            paper = f"{c['paper']:+.1f}% ({c.get('mark', 'P')}, {c.get('paper_model')})"
        for model, scale in [key for key in ours if key in base] or [("-", "-")]:
            o, b = ours.get((model, scale)), base.get((model, scale))
            gain, pair = "missing", "-"
            if o is not None and b is not None:
                gain = "n/a (baseline 0)" if b == 0 else f"{100 * (o / b - 1):+.1f}%"
                pair = f"{b:.4f} -> {o:.4f}"
            rows.append(
                {
                    "benchmark": c["benchmark"],
                    "metric": c["metric"],
                    "comparison": f"{c['method']} over {c['over']}",
                    "paper": paper,
                    "model": model,
                    "scale": scale,
                    "ours": gain,
                    "ours (baseline -> method)": pair,
                    "note": c.get("note", ""),
                }
            )
    return pd.DataFrame(rows)


def write_relative_gains(runs: pd.DataFrame, paper_dir: Path, out_dir: Path) -> list[Path]:
    """``relative_gains.md`` / ``.csv`` in ``out_dir`` when ``paper_dir/published.yaml`` lists any."""
    published = yaml.safe_load((paper_dir / PUBLISHED).read_text()) or {}
    comparisons = published.get("relative_gains", [])
    if not comparisons:
        return []
    table = relative_gains(runs, comparisons)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / "relative_gains.csv", out_dir / "relative_gains.md"
    table.to_csv(csv_path, index=False)
    md_path.write_text(
        "### Relative gains, the paper's beside ours\n\nOurs: 100 * (method / baseline - 1) "
        "for the same benchmark, metric, model and scale, each side the mean over its seeds (cpu rows: "
        "SmolLM2-135M with the CPU-scale deviations of README.md). Paper: (P) stated in the paper.\n\n"
        + table.to_markdown(index=False)
        + "\n"
    )
    return [md_path, csv_path]
