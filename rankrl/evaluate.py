"""Entry point: run a task's inference on a split (zero-shot or from trained weights), write metrics.json.

python -m rankrl.evaluate experiment=<paper>/<experiment>
python -m rankrl.evaluate experiment=<paper>/<experiment> init_from=<run folder or experiment>
python -m rankrl.evaluate experiment=<paper>/<experiment> ckpt_path=outputs/<run>/checkpoints/step_000010
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

import rankrl.config  # noqa: F401  (resolvers, offline defaults)
from rankrl.cli import one_line_errors
from rankrl.config import CONFIG_DIR, check_config, check_overrides, precheck

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate and write the run's files; returns the metrics record."""
    check_config(cfg, train=False)
    # torch and the models load here, not at import: `--help` and `--cfg job` answer without them
    from rankrl import app
    from rankrl.runs import git_commit, run_record, seed_everything, tracked_config, write_run_files
    from rankrl.tracking import RunLogger

    git_commit()  # the code this run starts with, before anything can check out another
    app.check_machine(cfg)
    seed_everything(int(cfg.seed))
    task = app.build_task(cfg)
    gens, roles = {}, {}
    if task.uses_model:
        roles = app.build_roles(cfg, ckpt_path=cfg.get("ckpt_path"))
        gens = app.generators(cfg, roles)
    result = app.run_evaluation(cfg, task, gens)
    record = run_record(
        cfg,
        kind="evaluate",
        metrics=result["metrics"],
        extra={
            "cost": result.get("cost"),
            "roles": {
                name: {
                    "init_from": str(r.init_from) if r.init_from else None,
                    "weights": app.weights_fingerprint(r.policy),
                }
                for name, r in roles.items()
            },
        },
    )
    write_run_files(Path(cfg.paths.output_dir), cfg, record, result.get("per_query"))
    # on W&B too (when enabled): the metrics in its summary, the per-query values as a table
    wandb_cfg = cfg.logger.get("wandb") if cfg.get("logger") else None
    logger = RunLogger(cfg.paths.output_dir, wandb_cfg, config=tracked_config(cfg), name=cfg.experiment_name)
    logger.summary(result["metrics"])
    logger.table("eval/per_query", result.get("per_query"))
    logger.finish()
    log.info("metrics: %s (run folder %s)", result["metrics"], cfg.paths.output_dir)
    return record


@hydra.main(config_path=str(CONFIG_DIR), config_name="evaluate", version_base="1.3")
@one_line_errors
def main(cfg: DictConfig) -> float | None:
    metrics = evaluate(cfg)["metrics"]
    return next(iter(metrics.values())) if metrics else None


if __name__ == "__main__":
    check_overrides(sys.argv[1:])
    precheck("evaluate", sys.argv[1:])
    main()
