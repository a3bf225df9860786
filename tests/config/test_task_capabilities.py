"""What a task trains with is what it has the methods for (rankrl.rl.task.TaskBase derives ``trains`` from
rankrl.rl.config.STEP_TYPES), so the check every training config passes before anything loads
(rankrl.config.check_trainable) cannot promise a method that is missing, and no task carries a stub that
raises where a capability is absent."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import rankrl.tasks
from rankrl.rl.config import STEP_TYPES
from rankrl.rl.task import TaskBase, capabilities

# Tasks that still narrow what they inherit by declaring fewer ``trains`` than their methods serve; each is
# left for its module's owner (issue 42) and should go: share the parent's pieces instead of subclassing it.
NARROWED = {"rankrl.tasks.rankr1.ConstantJudgeTask"}  # rankr1.py: helper-1's, not restructured here


def task_classes() -> dict[str, type]:
    found = {}
    for info in pkgutil.iter_modules(rankrl.tasks.__path__):
        module = importlib.import_module(f"rankrl.tasks.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, TaskBase):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


TASKS = task_classes()


def test_the_task_modules_are_scanned():
    assert len(TASKS) >= 8, sorted(TASKS)
    assert set(NARROWED) <= set(TASKS), "a narrowed task is gone: drop it from NARROWED"


@pytest.mark.parametrize("name", sorted(TASKS))
def test_a_task_trains_with_exactly_what_it_has_the_methods_for(name: str):
    cls = TASKS[name]
    if name in NARROWED:
        assert cls.trains < capabilities(cls)
        return
    assert cls.trains == capabilities(cls)
    for kind, step in STEP_TYPES.items():  # ... and the methods of what it does not train with are absent
        if kind not in cls.trains:
            assert not any(hasattr(cls, m) for m in step.task_methods), (name, kind)


@pytest.mark.parametrize(
    "name,trains",
    [
        ("rankrl.tasks.fgrpo.FGRPOTask", {"grpo", "sft"}),
        ("rankrl.tasks.fgrpo.TwoStepTask", {"sft"}),
        ("rankrl.tasks.fgrpo.PopularityTask", set()),
        ("rankrl.tasks.grape.GrapeTask", {"grpo", "sft"}),
        ("rankrl.tasks.grape.RawQueryTask", set()),
        ("rankrl.tasks.cogr.CoGRTask", {"grpo", "sft"}),
        ("rankrl.tasks.rankr1.RankR1Task", {"grpo", "sft"}),
        ("rankrl.tasks.rankr1.ConstantJudgeTask", set()),
    ],
)
def test_each_row_trains_as_before(name: str, trains: set):
    """The rows' capabilities, as they were declared by hand before they were derived."""
    assert TASKS[name].trains == trains


def test_no_task_method_is_a_stub_that_raises_not_implemented():
    for name, cls in TASKS.items():
        source = inspect.getsource(inspect.getmodule(cls))
        assert "NotImplementedError" not in source, name


def test_a_task_cannot_declare_a_capability_it_has_no_methods_for():
    with pytest.raises(TypeError, match=r"declares trains=\['grpo'\], without the methods of \['grpo'\]"):

        class Boasting(TaskBase):
            trains = frozenset({"grpo"})

            def evaluate(self, generators, split, limit=None):
                return {"metrics": {}}

    class SFTOnly(TaskBase):
        def sft_examples(self):
            return []

    assert SFTOnly.trains == {"sft"} and not TaskBase.trains
