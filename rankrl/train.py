"""Entry point: train one role's policy (GRPO or SFT), evaluate it, write metrics.json.

python -m rankrl.train                                   # the synthetic task, CPU profile
python -m rankrl.train trainer=sft                       # supervised steps on the task's SFT examples
python -m rankrl.train experiment=<paper>/<experiment>
python -m rankrl.train experiment=... init_from=<run folder or experiment>   # start from a finished run
python -m rankrl.train experiment=... trainer.resume=true                      # continue a killed run
torchrun --nproc_per_node=2 -m rankrl.train ...          # data parallel
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


def train(cfg: DictConfig) -> dict[str, Any]:
    """Train the role ``cfg.train_role``, evaluate the final policy, write the run's files; returns the
    record."""
    check_config(cfg, train=True)
    # torch, transformers and peft load here, not at import: `--help` and `--cfg job` answer without them
    from rankrl import app
    from rankrl import distributed as ddp
    from rankrl.rl.checkpoint import finish_checkpoints
    from rankrl.rl.config import build_trainer_config
    from rankrl.rl.trainer import make_loop
    from rankrl.runs import git_commit, run_record, seed_everything, tracked_config, write_run_files
    from rankrl.tracking import RunLogger

    git_commit()  # the code this run starts with, before anything can check out another
    app.check_machine(cfg)
    trainer_cfg = build_trainer_config(cfg.trainer)
    ddp.init_from_env()
    seed_everything(int(cfg.seed))
    run_dir = Path(cfg.paths.output_dir)
    task = app.build_task(cfg)
    role_name = app.check_train_role(cfg, task)
    roles = app.build_roles(cfg, train_role=role_name)
    trained = roles[role_name]
    start = {name: app.weights_fingerprint(r.policy) for name, r in roles.items()}
    gens = app.generators(cfg, roles)
    task.bind(role_name, {name: g for name, g in gens.items() if name != role_name})
    if trainer_cfg.kind == "sft" and trainer_cfg.epochs is not None:  # only then does the count matter
        trainer_cfg = trainer_cfg.with_epochs(len(task.sft_examples()))
    logger = RunLogger(
        run_dir,
        cfg.logger.get("wandb") if ddp.is_main() else None,
        config=tracked_config(cfg),
        name=cfg.experiment_name,
    )
    loop = make_loop(
        trained.policy,
        trained.tokenizer,
        task,
        trainer_cfg,
        run_dir,
        logger,
        engine=trained.engine,
        seed=int(cfg.seed),
        ref_model=app.build_reference(cfg, trained.model_cfg, trained.init_from),
        evaluate=lambda step: app.run_evaluation(cfg, task, gens)["metrics"],
        monitor=lambda step: task.monitor(gens),
    )
    if ddp.world_size() > 1:  # the model is built and identical everywhere; now each rank samples its own
        seed_everything(int(cfg.seed) + ddp.rank())
    last = loop.train()
    everywhere = app.evaluation_needs_every_rank(trained.policy, [r.engine for r in roles.values()])
    result = app.run_evaluation(cfg, task, gens) if ddp.is_main() or everywhere else {"metrics": {}}
    end = {name: app.weights_fingerprint(r.policy) for name, r in roles.items()}
    record = run_record(
        cfg,
        kind="train",
        metrics=result["metrics"],
        extra={
            "cost": result.get("cost"),
            "train": {"trainer": trainer_cfg.kind, "steps": loop.step, "last_step": last},
            "checkpoint": str(loop.ckpt_root / "latest"),
            "train_role": role_name,
            "roles": {
                name: {
                    "init_from": str(r.init_from) if r.init_from else None,
                    "weights_start": start[name],
                    "weights_end": end[name],
                    "trained": name == role_name,
                }
                for name, r in roles.items()
            },
        },
    )
    if ddp.is_main():
        logger.summary(result["metrics"])
        write_run_files(run_dir, cfg, record, result.get("per_query"))
        logger.table("eval/per_query", result.get("per_query"))
        info = {"seed": cfg.seed, "scale": cfg.scale, "model": record["model"]}
        curve = reward_curve(run_dir, cfg.experiment_name, info)
        if curve is not None:
            logger.image("figures/reward_curve", curve)
        if not trainer_cfg.keep_checkpoints_when_done:
            finish_checkpoints(loop.ckpt_root)
        log.info("metrics: %s (run folder %s)", result["metrics"], run_dir)
    logger.finish()
    return record


def reward_curve(run_dir: Path, name: str, info: dict[str, Any]) -> Path | None:
    """The run's reward curve (PNG), or None where the plotting libraries are not installed (the GPU check's
    machines carry only torch, transformers and peft): a missing figure never fails a finished run."""
    import importlib.util

    if importlib.util.find_spec("pandas") is None or importlib.util.find_spec("matplotlib") is None:
        log.warning("no reward curve for %s: pandas and matplotlib are not installed", run_dir)
        return None
    from rankrl.report.run_curve import draw_run_curve

    return draw_run_curve(run_dir, name, info)


@hydra.main(config_path=str(CONFIG_DIR), config_name="train", version_base="1.3")
@one_line_errors
def main(cfg: DictConfig) -> float | None:
    record = train(cfg)
    metrics = record["metrics"]
    return next(iter(metrics.values())) if metrics else None  # the value a Hydra sweeper optimises


if __name__ == "__main__":
    check_overrides(sys.argv[1:])
    precheck("train", sys.argv[1:])
    main()
