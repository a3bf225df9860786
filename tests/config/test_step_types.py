"""One registry of step types (rankrl.rl.config.STEP_TYPES): every step class of rankrl.rl.steps is in it,
every trainer file builds one of its entries, and each entry names exactly the task methods its class calls,
which is what a task's ``trains`` is derived from."""

from __future__ import annotations

import inspect
import re

import pytest
from hydra.utils import get_class

import rankrl.rl.steps as steps
from rankrl.config import CONFIG_DIR
from rankrl.errors import ConfigError
from rankrl.rl.config import STEP_TYPES, TrainerConfig, build_trainer_config, step_kind
from rankrl.rl.task import TrainTask
from tests.conftest import compose

TRAINERS = sorted(p.stem for p in (CONFIG_DIR / "trainer").glob("*.yaml"))
# what a step may call on its task (the methods of the TrainTask protocol)
TASK_METHODS = {name for name, _ in inspect.getmembers(TrainTask, inspect.isfunction)}


def step_classes() -> dict[str, type]:
    """Every class of rankrl.rl.steps that is a step: called once per optimizer step, told of new weights."""
    return {
        f"{cls.__module__}.{cls.__qualname__}": cls
        for _, cls in inspect.getmembers(steps, inspect.isclass)
        if cls.__module__ == steps.__name__
        and callable(getattr(cls, "weights_changed", None))
        and cls is not steps.Step
    }


def test_every_step_class_is_registered_and_every_entry_is_a_step_class() -> None:
    classes = step_classes()
    assert set(classes) == {s.target for s in STEP_TYPES.values()}, "a step class is missing from STEP_TYPES"
    assert len(classes) >= 2


@pytest.mark.parametrize("kind", sorted(STEP_TYPES))
def test_an_entry_names_the_task_methods_its_step_calls(kind: str) -> None:
    source = inspect.getsource(get_class(STEP_TYPES[kind].target))
    called = set(re.findall(r"\btask\.(\w+)\(", source)) & TASK_METHODS
    assert called, f"{STEP_TYPES[kind].target} calls no task method: the scan is broken"
    assert called == set(STEP_TYPES[kind].task_methods)


@pytest.mark.parametrize("trainer", TRAINERS)
def test_every_trainer_file_builds_a_registered_step(trainer: str) -> None:
    cfg = build_trainer_config(compose("train", [f"trainer={trainer}"]).trainer)
    assert step_kind(cfg._target_) == cfg.kind in STEP_TYPES


def test_the_trainer_files_cover_every_step_type() -> None:
    kinds = {build_trainer_config(compose("train", [f"trainer={t}"]).trainer).kind for t in TRAINERS}
    assert kinds == set(STEP_TYPES)


def test_an_unregistered_step_stops_naming_the_registered_ones() -> None:
    with pytest.raises(ConfigError, match="rankrl.rl.steps.SFTStep"):
        TrainerConfig(_target_="rankrl.rl.steps.PPOStep")
    assert step_kind("rankrl.rl.steps.PPOStep") is None
