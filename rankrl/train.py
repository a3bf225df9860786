"""Entry point: train a policy with GRPO on a task, evaluate it, write metrics.json.

python -m rankrl.train                                  # the synthetic task, CPU profile
python -m rankrl.train experiment=rankr1/rankr1_grpo_dl19
python -m rankrl.train experiment=... trainer.resume=true hydra.run.dir=<the killed run's folder>
torchrun --nproc_per_node=2 -m rankrl.train ...         # data parallel
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

import rankrl.config  # noqa: F401  (resolvers, offline defaults)
from rankrl import app
from rankrl.config import CONFIG_DIR, check_overrides
from rankrl import distributed as ddp
from rankrl.rl.trainer import GRPOTrainer
from rankrl.runs import run_record, seed_everything, write_run_files
from rankrl.tracking import RunLogger

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train, evaluate the final policy, and write the run's files; returns the metrics record."""
    ddp.init_from_env()
    seed_everything(int(cfg.seed))
    run_dir = Path(cfg.paths.output_dir)
    trainer_cfg = instantiate(cfg.trainer, _convert_="all")
    policy, tokenizer = app.build_policy(cfg)
    engine = app.build_engine(cfg, policy, tokenizer)
    task = app.build_task(cfg, tokenizer)
    generate = app.eval_generator(cfg, engine, trainer_cfg.sampling)
    logger = RunLogger(
        run_dir,
        cfg.logger.get("wandb") if ddp.is_main() else None,
        config=OmegaConf.to_container(cfg, resolve=True),
        name=cfg.experiment_name,
    )
    trainer = GRPOTrainer(
        policy,
        tokenizer,
        engine,
        task,
        trainer_cfg,
        run_dir,
        logger,
        seed=int(cfg.seed),
        ref_model=app.build_reference(cfg),
        evaluate=lambda step: app.run_evaluation(cfg, task, generate)["metrics"],
    )
    if ddp.world_size() > 1:  # the model is built and identical everywhere; now each rank samples its own
        seed_everything(int(cfg.seed) + ddp.rank())
    last = trainer.train()
    # a sharded policy's forward needs every rank, so all of them run the (greedy, identical) evaluation
    everywhere = ddp.is_sharded(policy)
    result = app.run_evaluation(cfg, task, generate) if ddp.is_main() or everywhere else {"metrics": {}}
    record = run_record(
        cfg,
        kind="train",
        metrics=result["metrics"],
        extra={
            "cost": result.get("cost"),
            "train": {"steps": trainer.step, "last_step": last},
            "checkpoint": str(trainer.ckpt_root / "latest"),
        },
    )
    if ddp.is_main():
        logger.summary(result["metrics"])
        write_run_files(run_dir, cfg, record)
        log.info("metrics: %s (run folder %s)", result["metrics"], run_dir)
    logger.finish()
    return record


@hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    record = train(cfg)
    metrics = record["metrics"]
    return next(iter(metrics.values())) if metrics else None  # the value a Hydra sweeper optimises


if __name__ == "__main__":
    check_overrides(sys.argv[1:])
    main()
