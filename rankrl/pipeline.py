"""Entry point: run an experiment's pipeline of stages (SFT -> GRPO -> evaluation, or alternating rounds).

python -m rankrl.pipeline experiment=<paper>/<pipeline experiment> [overrides for every stage]
python -m rankrl.pipeline ... pipeline_nproc=8    # each training stage on 8 GPUs of this node (torchrun)

An experiment declares its pipeline as a list; each stage is one run of ``rankrl.train`` or
``rankrl.evaluate`` in a fixed folder, ``outputs/<experiment>/<scale>-<model>/seed<k>/<stage>/``
(``rankrl.run_folders`` owns the layout):

    pipeline:
      - {name: sft, role: policy, overrides: [trainer=sft, trainer.max_steps=40]}
      - repeat: 2                       # alternating rounds; stage names get _r1, _r2 ...
        stages:
          - {name: query, role: query}
          - {name: item, role: item}
      - {name: eval, entry: evaluate}

Stage keys: ``name``; ``entry`` (``train``, the default, or ``evaluate``); ``role`` (the role it trains,
default ``policy``); ``overrides`` (Hydra overrides of this stage only); ``init_from`` (``none`` to start
from the base weights instead of the role's latest stage).

Every role starts from the newest earlier stage that trained it, and the frozen roles of a stage serve
from theirs, so a round always meets the other side's latest weights. Whether a stage runs is
``rankrl.run_folders.launch_or_skip``'s answer, the one experiments/lib.sh gets for a single run: a stage
whose ``metrics.json`` exists is skipped; one whose ``init_from`` (given in the config or on the command
line, for a role no earlier stage trains) names no finished training run stops the pipeline with the
command that makes it; a killed training stage resumes from its last checkpoint when the pipeline is rerun.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import rankrl.config  # noqa: F401  (resolvers, schemas, offline defaults)
from rankrl import run_folders
from rankrl.config import CONFIG_DIR, check_config, check_overrides
from rankrl.errors import ConfigError
from rankrl.rl.task import DEFAULT_ROLE

log = logging.getLogger("rankrl.pipeline")

ENTRIES = ("train", "evaluate")


@dataclass
class Stage:
    """One run of a pipeline, with the stage folders its roles start from (filled by ``plan``)."""

    name: str
    entry: str = "train"
    role: str = DEFAULT_ROLE
    overrides: list[str] = field(default_factory=list)
    init_from: str | None = None
    starts: dict[str, str | None] = field(default_factory=dict)  # role -> stage name its weights come from


def expand(spec: list[Any]) -> list[Stage]:
    """The pipeline's stages in order, ``repeat`` blocks unrolled with ``_r<k>`` suffixes."""
    stages: list[Stage] = []
    for item in spec:
        item = dict(item)
        if "repeat" in item:
            rounds = int(item["repeat"])
            if rounds < 1 or not item.get("stages"):
                raise ConfigError("a pipeline `repeat` block needs repeat >= 1 and a non-empty `stages` list")
            for k in range(1, rounds + 1):
                stages += [replace_name(s, f"{s.name}_r{k}") for s in expand(item["stages"])]
            continue
        unknown = set(item) - {"name", "entry", "role", "overrides", "init_from"}
        if unknown or "name" not in item:
            raise ConfigError(
                f"pipeline stage {item}: needs `name`; valid keys: name, entry, role, overrides, "
                f"init_from{f' (unknown: {sorted(unknown)})' if unknown else ''}"
            )
        stage = Stage(**{k: v for k, v in item.items()})
        if stage.entry not in ENTRIES:
            raise ConfigError(
                f"pipeline stage {stage.name!r}: entry={stage.entry!r}; valid: {', '.join(ENTRIES)}"
            )
        stages.append(stage)
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise ConfigError(f"pipeline stage names repeat: {names}")
    return stages


def replace_name(stage: Stage, name: str) -> Stage:
    return Stage(name, stage.entry, stage.role, list(stage.overrides), stage.init_from)


def plan(stages: list[Stage], roles: list[str]) -> list[Stage]:
    """Fill each stage's ``starts``: for every role, the newest earlier training stage of that role."""
    latest: dict[str, str | None] = {r: None for r in roles}
    for stage in stages:
        if stage.entry == "train" and stage.role not in latest:
            raise ConfigError(
                f"pipeline stage {stage.name!r} trains role {stage.role!r}; roles: {', '.join(roles)}"
            )
        stage.starts = dict(latest)
        if stage.init_from is not None and str(stage.init_from).lower() == "none":
            stage.starts[stage.role] = None
        if stage.entry == "train":
            latest[stage.role] = stage.name
    return stages


def launch_command(entry: str, nproc: int = 1) -> list[str]:
    """How a stage's entry point starts: a training stage on ``nproc`` > 1 processes (GPUs) through torchrun
    on this node, like ``torchrun --standalone --nproc_per_node=N -m rankrl.train``; everything else as one
    process (evaluation runs on one)."""
    if entry == "train" and nproc > 1:
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "-m",
            "rankrl.train",
        ]
    return [sys.executable, "-m", f"rankrl.{entry}"]


def stage_command(
    stage: Stage,
    root: Path,
    roles: list[str],
    user_overrides: list[str],
    experiment_name: str,
    nproc: int = 1,
) -> list[str]:
    """The command line of one stage (a training stage under torchrun when ``nproc`` > 1)."""
    # the command line's overrides come last: they win over the stage's, as over any config file
    cmd = [
        *launch_command(stage.entry, nproc),
        *stage.overrides,
        *user_overrides,
        f"hydra.run.dir={run_folders.stage_folder(root, stage.name)}",
        f"experiment_name={experiment_name}/{stage.name}",
    ]
    single = roles == [DEFAULT_ROLE]
    for role, source in stage.starts.items():
        if source is None:
            continue
        key = "init_from" if single else f"roles.{role}.init_from"
        cmd.append(f"{key}={run_folders.stage_folder(root, source)}")
    if stage.entry == "train":
        cmd += [*stage_role(stage), "trainer.resume=true"]
    return cmd


def stage_role(stage: Stage) -> list[str]:
    """The override naming the role a training stage trains (last on its command line, so it wins)."""
    return [f"train_role={stage.role}"] if stage.entry == "train" else []


def stage_inputs(stage: Stage, cfg: DictConfig) -> list[str]:
    """The runs that start ``stage``'s roles and that no earlier stage makes: the ``init_from`` of each role
    without a ``starts`` source, as the stage's composed config ``cfg`` sets it (experiment file or command
    line); the pipeline's own sources are its earlier stages, finished by the time it launches."""
    roles = cfg.get("roles") or {}
    given = (
        {DEFAULT_ROLE: cfg.get("init_from")}
        if not roles
        else {name: node.get("init_from") for name, node in roles.items()}
    )
    return [
        str(value)
        for role, value in given.items()
        if value is not None and str(value).lower() != "none" and stage.starts.get(role) is None
    ]


def compose(overrides: list[str]) -> DictConfig:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        return hydra_compose("train", overrides=overrides)


def run_pipeline(overrides: list[str]) -> Path:
    """Run every unfinished stage of the composed experiment's pipeline; returns the pipeline folder."""
    cfg = compose(overrides)
    if not cfg.get("pipeline"):
        raise ConfigError(
            f"experiment {cfg.get('experiment_name')!r} declares no pipeline; pipelines: "
            + ", ".join(pipeline_experiments())
        )
    if cfg.pipeline_nproc < 1:
        raise ConfigError(f"pipeline_nproc={cfg.pipeline_nproc}: processes per training stage, 1 or more")
    roles = list(cfg.roles) if cfg.get("roles") else [DEFAULT_ROLE]
    stages = plan(expand(OmegaConf.to_container(cfg.pipeline, resolve=True)), roles)
    identity = {"scale": cfg.scale, "model": cfg.model.name, "seed": cfg.seed}
    root = run_folders.run_folder(cfg.experiment_name, **identity, logs=cfg.paths.log_dir)
    inputs = {}
    for stage in stages:  # every stage's config passes its checks (a training stage trains its task) first
        stage_cfg = compose([*stage.overrides, *overrides, *stage_role(stage)])
        check_config(stage_cfg, train=stage.entry == "train")
        inputs[stage.name] = stage_inputs(stage, stage_cfg)
    for i, stage in enumerate(stages, 1):
        folder = run_folders.stage_folder(root, stage.name)
        head = (
            f"[{i}/{len(stages)}] {stage.name} "
            f"({stage.entry}{', role ' + stage.role if stage.entry == 'train' else ''})"
        )
        verdict = run_folders.launch_or_skip(
            folder, inputs=inputs[stage.name], **identity, logs=cfg.paths.log_dir
        )
        if verdict.action == "done":
            print(f"{head}: done ({folder})", flush=True)
            continue
        if verdict.action == "missing":
            raise ConfigError(f"pipeline stage {stage.name!r}: {verdict.reason}")
        cmd = stage_command(stage, root, roles, overrides, cfg.experiment_name, cfg.pipeline_nproc)
        print(f"{head} -> {folder}", flush=True)
        # on W&B the stages are one group, each stage its job type: the pipeline reads as one unit
        group = run_folders.run_key(cfg.experiment_name, **identity)
        env = {**os.environ, "WANDB_RUN_GROUP": group, "WANDB_JOB_TYPE": stage.name}
        if subprocess.run(cmd, env=env).returncode != 0:
            raise SystemExit(
                f"error: pipeline stage {stage.name!r} failed; fix it and rerun the same command "
                f"(finished stages are skipped, a killed training stage resumes)"
            )
    return root


def pipeline_experiments() -> list[str]:
    return sorted(
        str(p.relative_to(CONFIG_DIR / "experiment").with_suffix(""))
        for p in (CONFIG_DIR / "experiment").rglob("*.yaml")
        if "\npipeline:" in p.read_text()
    )


def main(argv: list[str]) -> None:
    check_overrides(argv)
    try:
        root = run_pipeline(argv)
    except ConfigError as err:
        raise SystemExit(f"error: {err}") from None
    print(f"pipeline finished: {root}")


if __name__ == "__main__":
    main(sys.argv[1:])
