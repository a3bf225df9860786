"""Hydra/OmegaConf glue shared by the entry points.

``conf/`` is found next to the package, so entry points work from any working directory, and
``${rankrl_root:}`` resolves to the repository root for the paths group.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields

from omegaconf import DictConfig, OmegaConf

from rankrl.conf_defaults import CONFIG_DIR, REPO_ROOT  # noqa: F401  (re-exported: the entry points' paths)


def _offline_defaults() -> None:
    # Nothing in a run may reach a model or data hub: loading by hub name fails fast instead of hanging,
    # and W&B writes offline unless the user asked for online.
    for key, value in {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "TOKENIZERS_PARALLELISM": "false",
    }.items():
        os.environ.setdefault(key, value)


def register_resolvers() -> None:
    """Register the custom resolvers used in ``conf/`` (idempotent)."""
    if not OmegaConf.has_resolver("rankrl_root"):
        OmegaConf.register_new_resolver("rankrl_root", lambda: str(REPO_ROOT))


def setup() -> None:
    """Call before composing a config: resolvers, typed schemas and offline defaults."""
    from rankrl.rl.config import register_schemas

    _offline_defaults()
    register_resolvers()
    register_schemas()


setup()


@dataclass
class RunKeys:
    """Types of the top-level keys every entry point reads (checked before anything is built).

    Types only: the values come from conf/train.yaml and conf/evaluate.yaml, their one source.
    """

    seed: int
    eval_split: str
    eval_limit: int | None
    init_from: str | None
    train_role: str
    pipeline_nproc: int


def check_run_keys(cfg: DictConfig) -> None:
    """Stop with ``ConfigError`` naming the key, the expected type and the value (``seed=abc``)."""
    from rankrl.rl.config import typed_node

    typed_node({f.name: cfg.get(f.name) for f in fields(RunKeys) if f.name in cfg}, RunKeys, "")


def check_trainable(cfg: DictConfig) -> None:
    """Stop with ``ConfigError`` when the configured trainer's kind (``grpo`` or ``sft``) is not among what
    the task's class declares it ``trains`` (``rankrl.rl.task.TaskBase``): before any model loads, and for
    every stage before a pipeline starts."""
    from hydra.utils import get_class

    from rankrl.errors import ConfigError
    from rankrl.rl.config import step_kind

    kind = step_kind(cfg.trainer.get("_target_"))
    if kind is None:  # an unknown step type: build_trainer_config names the valid ones
        return
    trains = frozenset(getattr(get_class(cfg.task._target_), "trains", ()))
    if kind in trains:
        return
    task = cfg.task.get("name", cfg.task._target_)
    if not trains:
        raise ConfigError(f"task {task!r} is evaluation-only: run `python -m rankrl.evaluate` with it")
    raise ConfigError(
        f"task {task!r} does not train with {kind}; it trains with: "
        + ", ".join(f"trainer={k}" for k in sorted(trains))
    )


def check_train_role_declared(cfg: DictConfig) -> str:
    """``cfg.train_role`` (conf/train.yaml: ``policy``), after checking that the run declares that role: a
    run whose ``roles:`` name others (one shared generator, say) must say which of them it trains."""
    from rankrl.errors import ConfigError
    from rankrl.rl.task import DEFAULT_ROLE

    declared = list(cfg.get("roles") or {}) or [DEFAULT_ROLE]
    if cfg.train_role not in declared:
        raise ConfigError(
            f"train_role={cfg.train_role!r}; the run's roles are {', '.join(sorted(declared))}: set "
            "train_role=<one of them>"
        )
    return cfg.train_role


def check_config(cfg: DictConfig, *, train: bool) -> None:
    """Every check of a composed config that needs no model, run before torch loads: a wrong value
    (``seed=abc``, ``evaluation.sampling.max_new_tokens=many``, ``trainer.group_size=0``) ends the run in a
    second, with one line naming the key, instead of after the models and the rollout engine have started."""
    from rankrl.rl.config import build_trainer_config, eval_sampling

    check_run_keys(cfg)
    if train:
        check_trainable(cfg)
        check_train_role_declared(cfg)
        build_trainer_config(cfg.trainer)
    if cfg.get("evaluation") is not None:  # each role's evaluation sampling (the run's one policy: no roles)
        for role in [*(cfg.get("roles") or {})] or [None]:
            eval_sampling(cfg, role)


def group_choices(group: str) -> list[str]:
    """The options of a config group, nested folders included (``experiment`` ->
    ``<paper>/<experiment>`` ...)."""
    root = CONFIG_DIR / group
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


def precheck(config_name: str, argv: list[str]) -> None:
    """Compose the config once before Hydra does, so a bad override ends in one line, not a report.

    Group choices are checked by ``check_overrides``; this catches wrong types and unknown keys
    (``trainer.lr=abc``: ``error: trainer.lr: Value 'abc' of type 'str' could not be converted to Float``).
    Sweeps (``-m``) and Hydra's own flags are left to Hydra.
    """
    if os.environ.get("HYDRA_FULL_ERROR") == "1" or any(a.startswith("-") for a in argv):
        return
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    try:
        with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
            compose(config_name, overrides=list(argv))
    except ConfigCompositionException as err:
        cause = err.__cause__ or err
        key = getattr(cause, "full_key", None)
        message = str(getattr(cause, "msg", None) or cause).splitlines()[0]
        raise SystemExit(f"error: {key + ': ' if key else ''}{message}") from None


def check_overrides(argv: list[str]) -> None:
    """Stop on ``group=option`` overrides naming an option that does not exist, listing the valid ones.

    Hydra lists options for flat groups but not for nested ones such as ``experiment=<paper>/...``;
    checking here gives every group the same clear message before anything starts.
    """
    for arg in argv:
        key, sep, value = arg.partition("=")
        key = key.lstrip("+~")
        if not sep or "." in key or key.startswith("hydra") or "," in value or "(" in value:
            continue
        if (CONFIG_DIR / key).is_dir() and value not in ("null", "") and value not in group_choices(key):
            raise SystemExit(
                f"error: unknown {key} {value!r}. Valid choices for {key}:\n  "
                + "\n  ".join(group_choices(key))
            )
