"""Shared fixtures: where the prepared data and models are, and small composed configs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import rankrl.config  # noqa: F401  (offline env defaults, resolvers)
from rankrl.config import CONFIG_DIR, REPO_ROOT

os.environ.setdefault("OPENAI_API_KEY", "dummy")
os.environ["WANDB_MODE"] = "offline"
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The data folder `make data` prepared (RANKRL_DATA_DIR or <repo>/data)."""
    path = Path(os.environ.get("RANKRL_DATA_DIR", REPO_ROOT / "data"))
    if not (path / "trec_dl").exists():
        pytest.fail(f"no prepared data in {path}: run `make data` first (make test does it)")
    return path


@pytest.fixture(scope="session")
def model_dir() -> Path:
    path = Path(os.environ.get("RANKRL_CACHE_DIR", REPO_ROOT / ".cache")) / "models"
    if not (path / "tiny" / "config.json").exists():
        pytest.fail(f"no models in {path}: run `make models` first (make test does it)")
    return path


def compose(config_name: str = "train", overrides: list[str] | None = None, *, hydra_cfg: bool = False):
    """Compose a config as the entry points do (no run folder is created)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return hydra_compose(config_name, overrides=overrides or [], return_hydra_config=hydra_cfg)


def experiment_names() -> list[str]:
    """Every experiment file, as the name `experiment=` takes (nested folders included)."""
    root = CONFIG_DIR / "experiment"
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.rglob("*.yaml"))
