"""Hydra/OmegaConf glue shared by the entry points.

``conf/`` is found next to the package, so entry points work from any working directory, and
``${rankrl_root:}`` resolves to the repository root for the paths group.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "conf"


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
    """Call before composing a config: resolvers and offline defaults."""
    _offline_defaults()
    register_resolvers()


setup()


def group_choices(group: str) -> list[str]:
    """The options of a config group, nested folders included (``experiment`` -> ``rankr1/bm25_dl19`` ...)."""
    root = CONFIG_DIR / group
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))


def check_overrides(argv: list[str]) -> None:
    """Stop on ``group=option`` overrides naming an option that does not exist, listing the valid ones.

    Hydra lists options for flat groups but not for nested ones such as ``experiment=rankr1/...``;
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
