"""What a finished run leaves behind, in one schema for every task: ``metrics.json``.

The report reads only these files, so a table can be rebuilt at any time, and a run that died before
writing its metrics never shows up as a number.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import random
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from hydra.utils import get_class
from omegaconf import DictConfig, OmegaConf

from rankrl.config import REPO_ROOT

# the files' names, with the folders they go in, live in rankrl.run_folders (imported from here too)
from rankrl.run_folders import CONFIG_FILE, METRICS_FILE, PER_QUERY_FILE

__all__ = ["METRICS_FILE", "PER_QUERY_FILE", "SCHEMA", "run_record", "write_run_files"]

SCHEMA = "rankrl.metrics/v1"


@functools.cache
def git_commit() -> str:
    """The repository's HEAD commit, with ``-dirty`` when tracked files differ; ``unknown`` outside git.

    Read once a process: ``rankrl.train`` and ``rankrl.evaluate`` read it at start-up, so a run's records name
    the code it started with, not whatever is checked out when its metrics.json is written an hour later."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch; CPU runs with the same seed give the same metrics."""
    import torch  # here, not at import: the report and the pipeline read this module without torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))


def run_record(
    cfg: DictConfig, *, kind: str, metrics: Mapping[str, float], extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Build the metrics.json record of a run from its config and results.

    Args:
        cfg: the run's composed config.
        kind: ``train`` or ``evaluate``.
        metrics: the headline metrics (name -> value) on ``cfg.eval_split``.
        extra: anything else worth keeping (inference cost, training summary, checkpoint path).
    """
    model = cfg.get("model") or {}
    uses_model = bool(getattr(get_class(cfg.task._target_), "uses_model", True))
    return {
        "schema": SCHEMA,
        "kind": kind,
        "paper": cfg.get("paper"),
        "experiment": cfg.get("experiment_name"),
        "task": cfg.task.name,
        "benchmark": cfg.benchmark.name,
        "split": cfg.get("eval_split"),
        "eval_limit": cfg.get("eval_limit"),
        "model": model.get("name") if uses_model else None,
        "model_path": str(model.get("path")) if uses_model else None,
        "ckpt_path": cfg.get("ckpt_path"),
        "scale": cfg.get("scale"),
        "seed": cfg.get("seed"),
        "git_commit": git_commit(),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "metrics": {k: float(v) for k, v in metrics.items()},
        **(dict(extra) if extra else {}),
    }


def tracked_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as W&B stores it, with what dashboards filter on at its top: paper, scale and
    seed are top-level keys already; the model's name and the git commit are added."""
    model = cfg.get("model") or {}
    return {
        **OmegaConf.to_container(cfg, resolve=True),
        "model_name": model.get("name"),
        "git_commit": git_commit(),
    }


def write_run_files(
    run_dir: str | Path, cfg: DictConfig, record: Mapping[str, Any], per_query: Any = None
) -> Path:
    """Write the resolved config, the per-query table (a DataFrame indexed by qid, when given) and, last,
    metrics.json (atomically: a reader never sees half a file, and a run with metrics.json is complete)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / CONFIG_FILE).write_text(OmegaConf.to_yaml(cfg, resolve=True))
    if per_query is not None:
        tmp = run_dir / (PER_QUERY_FILE + ".tmp")
        per_query.to_csv(tmp, index_label="qid")
        tmp.replace(run_dir / PER_QUERY_FILE)
    target = run_dir / METRICS_FILE
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(target)
    return target
