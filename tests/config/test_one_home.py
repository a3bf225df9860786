"""One source for each default: the YAML, which users read and override.

Where Hydra always passes a value, the Python side keeps no default of its own (RankR1Task's data sources,
F-GRPO's benchmark, the vowel tasks' prompt counts, the entry points' top-level keys). Where a task keeps one
for direct construction in tests (GrapeTask), it must equal its conf/task/<task>.yaml value: these tests fail
when the two drift apart. The profiles' task scales (conf/task_scale/) override the task file on purpose.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from rankrl.config import CONFIG_DIR, RunKeys, check_run_keys
from rankrl.errors import ConfigError
from rankrl.rl.task import DEFAULT_ROLE
from tests.conftest import compose

TASKS = sorted(p.stem for p in (CONFIG_DIR / "task").glob("*.yaml"))
NOT_ARGUMENTS = ("name", "_target_", "_recursive_")  # the config choice's label and Hydra's keys


def _interpolated(value: Any) -> bool:
    """Whether a raw YAML value is (or holds) an interpolation: wiring such as ``${paths.data_dir}``."""
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, Mapping):
        return any(_interpolated(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_interpolated(v) for v in value)
    return False


def _plain(value: Any) -> Any:
    """Mappings as dicts and sequences as lists, so that a Python tuple equals a YAML list."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@pytest.mark.parametrize("task", TASKS)
def test_a_constructor_default_equals_the_task_yaml(task: str) -> None:
    node = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "task" / f"{task}.yaml"), resolve=False)
    params = inspect.signature(get_class(node["_target_"])).parameters
    differ = {}
    for key, value in node.items():
        if key in NOT_ARGUMENTS:
            continue
        assert key in params, f"conf/task/{task}.yaml sets {key}, which {node['_target_']} does not take"
        default = params[key].default
        if default is inspect.Parameter.empty or _interpolated(value):
            continue
        if _plain(default) != _plain(value):
            differ[key] = f"Python {default!r}, YAML {value!r}"
    assert not differ, f"{node['_target_']} defaults differ from conf/task/{task}.yaml: {differ}"


@pytest.mark.parametrize(
    "target,required",
    [
        ("rankrl.tasks.rankr1.RankR1Task", {"train_benchmark", "eval_benchmark", "construction"}),
        ("rankrl.tasks.fgrpo.FGRPOTask", {"benchmark"}),
        ("rankrl.tasks.vowels.VowelWordsTask", {"num_train_prompts", "num_eval_prompts"}),
        ("rankrl.tasks.vowels.VowelRelayTask", {"num_train_prompts", "num_eval_prompts"}),
    ],
)
def test_values_hydra_always_passes_have_no_python_default(target: str, required: set[str]) -> None:
    params = inspect.signature(get_class(target)).parameters
    assert {k for k in required if params[k].default is inspect.Parameter.empty} == required


def test_run_keys_are_typed_in_python_and_defaulted_in_the_yaml() -> None:
    assert all(
        f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        for f in dataclasses.fields(RunKeys)
    )
    for entry in ("train", "evaluate"):
        cfg = compose(entry)
        assert cfg.train_role == DEFAULT_ROLE
        check_run_keys(cfg)
    with pytest.raises(ConfigError, match="train_role: expected str, got None"):
        check_run_keys(compose("train", ["train_role=null"]))
