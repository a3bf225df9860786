"""Entry point: run a task's inference on a split (zero-shot or from a checkpoint), write metrics.json.

python -m rankrl.evaluate experiment=rankr1/bm25_dl19
python -m rankrl.evaluate experiment=rankr1/setwise_dl19 ckpt_path=outputs/<run>/checkpoints
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

import rankrl.config  # noqa: F401  (resolvers, offline defaults)
from rankrl import app
from rankrl.config import CONFIG_DIR, check_overrides
from rankrl.runs import run_record, seed_everything, write_run_files

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict[str, Any]:
    """Evaluate and write the run's files; returns the metrics record."""
    seed_everything(int(cfg.seed))
    generate, tokenizer = None, None
    if app.task_uses_model(cfg):
        policy, tokenizer = app.build_policy(cfg, ckpt_path=cfg.get("ckpt_path"))
        engine = app.build_engine(cfg, policy, tokenizer)
        generate = app.eval_generator(cfg, engine, instantiate(cfg.trainer.sampling, _convert_="all"))
    task = app.build_task(cfg, tokenizer)
    result = app.run_evaluation(cfg, task, generate)
    record = run_record(cfg, kind="evaluate", metrics=result["metrics"], extra={"cost": result.get("cost")})
    write_run_files(Path(cfg.paths.output_dir), cfg, record)
    log.info("metrics: %s (run folder %s)", result["metrics"], cfg.paths.output_dir)
    return record


@hydra.main(config_path=str(CONFIG_DIR), config_name="evaluate", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    metrics = evaluate(cfg)["metrics"]
    return next(iter(metrics.values())) if metrics else None


if __name__ == "__main__":
    check_overrides(sys.argv[1:])
    main()
