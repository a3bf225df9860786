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


def prepared_data_dir() -> Path:
    """The data folder `make data` fills: ``RANKRL_DATA_DIR``, else <repo>/data."""
    return Path(os.environ.get("RANKRL_DATA_DIR", REPO_ROOT / "data"))


def require_data(*paths: str) -> Path:
    """The prepared data folder, after checking that it holds every file or folder of ``paths``.

    A missing one fails the calling test (never skips it): every machine gets these files from
    `make data` (copied from ../shared/data, else downloaded), so their absence is a broken setup
    that a skip would hide. Only name data a plain `make data` prepares here: BRIGHT documents,
    MS MARCO, WANDS products and images are never on the build machines, and their tests write
    small files of their own instead.
    """
    root = prepared_data_dir()
    missing = [p for p in paths if not (root / p).exists()]
    if missing:
        listed = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        pytest.fail(
            f"the prepared data folder {root} lacks {listed}: run `make data` "
            "(make test runs it; RANKRL_DATA_DIR chooses the folder)",
            pytrace=False,
        )
    return root


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The data folder `make data` prepared, with every folder of a plain `make data` in it."""
    from rankrl.data.sources import SOURCES

    return require_data(*dict.fromkeys(s.folder for s in SOURCES if s.default))


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
