"""Run tracking: a JSONL log that every run writes, mirrored to W&B when it is enabled.

W&B is optional by design: if it cannot be imported or initialised (offline machine, bad key, service
down), the run warns once and goes on with the JSONL log, which is what the report reads.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
        self.path = Path(run_dir) / "train_log.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._wandb = _init_wandb(Path(run_dir), wandb_cfg, config, name) if wandb_cfg else None

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
        if self._wandb is not None:
            try:
                self._wandb.log(dict(metrics), step=step)
            except Exception as err:  # a tracking failure must never stop training
                log.warning("W&B logging failed (%s); continuing with the JSONL log only", err)
                self._wandb = None

    def summary(self, metrics: Mapping[str, Any]) -> None:
        if self._wandb is not None:
            try:
                self._wandb.summary.update(dict(metrics))
            except Exception as err:
                log.warning("W&B summary failed (%s)", err)

    def finish(self) -> None:
        if self._wandb is not None:
            try:
                self._wandb.finish()
            except Exception as err:
                log.warning("W&B finish failed (%s)", err)
            self._wandb = None


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
            group=cfg.get("group"),
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
            run_dir / "train_log.jsonl",
        )
        return None
