"""Run tracking: a JSONL log that every run writes, mirrored to W&B when it is enabled.

W&B is optional by design: if it cannot be imported or initialised (offline machine, bad key, service
down), the run warns once and goes on with the JSONL log, which is what the report reads.

What a W&B run holds (the dashboards of ``rankrl.report.dashboard`` read these):

- per-step metrics against the training step, each summarised as :func:`summary_of` says (the best value
  where a direction is known, and the last);
- the final evaluation's metrics in the summary, and its per-query values as the table ``eval/per_query``;
- the run's reward curve (``reward_curve.png`` in the run folder) as the image ``figures/reward_curve``;
- the resolved config, with ``paper``, ``scale``, ``model_name``, ``seed`` and ``git_commit`` at its top;
- its W&B group and job type: a pipeline puts all its stages in one group (``WANDB_RUN_GROUP``), each with
  its stage name as job type (``WANDB_JOB_TYPE``), so the rounds of a pipeline whose stages alternate line
  up stage by stage.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rankrl.run_folders import TRAIN_LOG_FILE

log = logging.getLogger(__name__)


class RunLogger:
    """Append per-step metrics to ``<run_dir>/train_log.jsonl`` and, optionally, to W&B.

    Args:
        run_dir: the run folder.
        wandb_cfg: ``logger.wandb`` settings (enabled, mode, project, entity, group, tags) or None.
        config: the resolved run config, stored with the W&B run.
        name: the run's display name.
    """

    def __init__(
        self,
        run_dir: str | Path,
        wandb_cfg: Mapping[str, Any] | None = None,
        config: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> None:
        self.path = Path(run_dir) / TRAIN_LOG_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._wandb = _init_wandb(Path(run_dir), wandb_cfg, config, name) if wandb_cfg else None
        self._defined: set[str] = set()

    @property
    def wandb_dir(self) -> Path | None:
        """The W&B run's own folder (``<run dir>/wandb/offline-run-...``), or None without W&B."""
        return Path(self._wandb.dir).parent if self._wandb is not None else None

    def _safely(self, what: str, action: Any) -> None:
        """Run a W&B call; a failure warns once and turns W&B off for this run, never stops it."""
        if self._wandb is None:
            return
        try:
            action(self._wandb)
        except Exception as err:  # a tracking failure must never stop training
            log.warning("W&B %s failed (%s); continuing with the JSONL log only", what, err)
            self._wandb = None

    def _define(self, run: Any, keys: Any) -> None:
        for key in keys:
            if key not in self._defined:
                run.define_metric(key, summary=summary_of(key))
                self._defined.add(key)

    def truncate_after(self, step: int) -> None:
        """Drop log lines past ``step``: a resumed run re-logs them, so the log matches an unbroken run."""
        if not self.path.exists():
            return
        kept = [
            line for line in self.path.read_text().splitlines() if json.loads(line).get("step", 0) <= step
        ]
        self.path.write_text("".join(line + "\n" for line in kept))

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        record = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        numbers = [k for k, v in metrics.items() if isinstance(_plain(v), (int, float))]
        self._safely("logging", lambda run: (self._define(run, numbers), run.log(dict(metrics), step=step)))

    def summary(self, metrics: Mapping[str, Any]) -> None:
        self._safely("summary", lambda run: run.summary.update({f"eval/{k}": v for k, v in metrics.items()}))

    def table(self, name: str, frame: Any) -> None:
        """A DataFrame (e.g. the per-query evaluation, indexed by qid) as the W&B table ``name``."""
        if frame is None:
            return

        def log_table(run: Any) -> None:
            import wandb

            run.log({name: wandb.Table(dataframe=frame.reset_index())})

        self._safely("table", log_table)

    def image(self, name: str, path: str | Path) -> None:
        """A figure the run drew (a PNG in its folder) as the W&B image ``name``."""

        def log_image(run: Any) -> None:
            import wandb

            run.log({name: wandb.Image(str(path))})

        self._safely("image", log_image)

    def finish(self) -> None:
        if self._wandb is not None:
            try:
                self._wandb.finish()
            except Exception as err:
                log.warning("W&B finish failed (%s)", err)
            self._wandb = None


def summary_of(key: str) -> str:
    """How W&B summarises a series: errors and losses by their minimum, rewards and probe metrics by their
    maximum, everything by its last value too."""
    if "loss" in key or "error" in key or key.startswith("time/"):
        return "min,last"
    if "reward" in key or key.startswith(("monitor/", "task/")):
        return "max,last"
    return "last"


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _init_wandb(run_dir: Path, cfg: Mapping[str, Any], config: Mapping[str, Any] | None, name: str | None):
    if not cfg.get("enabled", False):
        return None
    try:
        import wandb

        return wandb.init(
            project=cfg.get("project", "rankrl"),
            entity=cfg.get("entity"),
            # a pipeline's stages share its group, each with its stage as job type (rankrl.pipeline)
            group=os.environ.get("WANDB_RUN_GROUP") or cfg.get("group"),
            job_type=os.environ.get("WANDB_JOB_TYPE") or cfg.get("job_type"),
            tags=[t for t in cfg.get("tags", []) if t],
            name=name,
            mode=cfg.get("mode", "offline"),
            dir=str(run_dir),
            config=dict(config or {}),
            reinit="finish_previous",
            settings=wandb.Settings(silent=True, init_timeout=60),
        )
    except Exception as err:
        log.warning(
            "W&B is unavailable (%s: %s); the run goes on and logs to %s only",
            type(err).__name__,
            err,
            run_dir / TRAIN_LOG_FILE,
        )
        return None
