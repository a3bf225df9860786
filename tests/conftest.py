"""Shared fixtures: where the prepared data and models are, small composed configs, and how pytest-xdist
workers share the cores (make test runs two)."""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
from pathlib import Path

import pytest

import rankrl.config  # noqa: F401  (offline env defaults, resolvers)
from rankrl.config import CONFIG_DIR, REPO_ROOT

os.environ.setdefault("OPENAI_API_KEY", "dummy")
os.environ["WANDB_MODE"] = "offline"
os.environ.setdefault("WANDB_SILENT", "true")
# glibc's malloc_trim (None elsewhere): see heap_back_to_the_os
MALLOC_TRIM = getattr(ctypes.CDLL(ctypes.util.find_library("c") or None), "malloc_trim", None)


# the cores this process may run on before a worker is pinned; None where the OS cannot pin
EVERY_CORE = os.sched_getaffinity(0) if hasattr(os, "sched_setaffinity") else None


def pin_xdist_worker() -> None:
    """Under pytest-xdist (`make test` runs two workers), give each worker its own cores and that many
    threads; the processes its tests start inherit both.

    Most of the suite's time is fixed cost that one core serves: process starts, imports of torch,
    transformers and vLLM, engine starts. Two workers on one core each take about half the time of one on
    two, but only if they do not share cores: two vLLM CPU engines whose threads share cores slow each
    other 7-13x (README). Runs before any test module imports torch, so the thread count takes effect.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or EVERY_CORE is None:
        return
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    cores = sorted(EVERY_CORE)
    per_worker = len(cores) // workers
    if per_worker < 1:  # more workers than cores: leave the scheduler to share them
        return
    index = int(worker.removeprefix("gw"))
    os.sched_setaffinity(0, cores[index * per_worker : (index + 1) * per_worker])
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(per_worker)


pin_xdist_worker()


@pytest.fixture(autouse=True)
def ranks_get_every_core(request, tmp_path_factory):
    """A test marked ``ranks`` starts several torch.distributed processes. Under xdist it runs alone among
    such tests (a lock the workers share) and its worker lends it every core (its ranks run one thread each,
    so sharing cores with the other worker costs no spin-waiting), then takes its own cores back. Two of them
    at once held 15 GB of this machine's 24 (a tensor-parallel pair beside an FSDP pipeline)."""
    if request.node.get_closest_marker("ranks") is None or "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    lock_file = tmp_path_factory.getbasetemp().parent / "ranks.lock"  # the workers' common folder
    with open(lock_file, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pinned = os.sched_getaffinity(0) if EVERY_CORE is not None else None
        if pinned is not None:
            os.sched_setaffinity(0, EVERY_CORE)
        try:
            yield
        finally:
            if pinned is not None:
                os.sched_setaffinity(0, pinned)
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def heap_back_to_the_os():
    """After each test, hand the heap its objects freed back to the OS (glibc ``malloc_trim``): glibc keeps a
    freed policy copy's or optimizer's pages otherwise, and a worker's memory would only grow (two workers
    reached 18 GB of this machine's 24 without it). No ``gc.collect`` here: at ~0.1 s a test it cost the
    suite minutes."""
    yield
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


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
