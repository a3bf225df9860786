"""One home for each default (issue 42). A component's config file (conf/task, conf/rollout, conf/retriever)
and its constructor must not both write a value: either the file holds it and the constructor reads its
default from there (``rankrl.conf_defaults.conf_default``), or the constructor requires it, or, in a file
that is one of several variants of a class (``retriever=clip-vit-l14``), the file sets a value that
differs from the class's. The trainer files extend the typed schema (``rankrl.rl.config.TrainerConfig``)
and list only what differs from it, or from the file they extend. Wiring (``${paths.data_dir}``) is not a
value: the code keeps its own default for direct construction.

Each check below fails when a file and a constructor write the same key, whether the two values are equal
(written twice) or not (drifted, as conf/rollout/hf.yaml's batch size 16 against HFEngine's 8 did).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from rankrl.conf_defaults import CONFIG_DIR, READ, frozen
from rankrl.config import RunKeys, check_run_keys
from rankrl.errors import ConfigError
from rankrl.rl.config import TrainerConfig
from rankrl.rl.task import DEFAULT_ROLE
from tests.conftest import compose

GROUPS = ("task", "rollout", "retriever")
HYDRA_KEYS = ("name", "_target_", "_partial_", "_recursive_", "defaults")  # labels and Hydra's keys
EMPTY = inspect.Parameter.empty


def _raw(option: str) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / f"{option}.yaml"), resolve=False)


def _parents(option: str) -> list[str]:
    """The files of the same group a file extends (its defaults list, ``_self_`` left out)."""
    group = option.split("/")[0]
    return [f"{group}/{d}" for d in _raw(option).get("defaults", []) if isinstance(d, str) and d != "_self_"]


def target_of(option: str) -> str | None:
    """The class a file builds: its own ``_target_`` or that of a file it extends."""
    raw = _raw(option)
    if "_target_" in raw:
        return raw["_target_"]
    return next((t for p in _parents(option) if (t := target_of(p))), None)


def component_files() -> dict[str, str]:
    """option (``retriever/clip-vit-b16``) -> the class it builds, for every file that builds one."""
    found = {}
    for group in GROUPS:
        for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
            option = f"{group}/{path.stem}"
            if (target := target_of(option)) is not None:
                found[option] = target
    return found


def _wiring(value: Any) -> bool:
    if isinstance(value, str):
        return "${" in value
    if isinstance(value, Mapping):
        return any(_wiring(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_wiring(v) for v in value)
    return False


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def code_default(cls: type, key: str) -> Any:
    """The constructor's default of ``key`` (``EMPTY`` when it has none; a dataclass factory's value)."""
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.name == key and f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
    return inspect.signature(cls).parameters[key].default


def one_home_problems(files: Mapping[str, tuple[str, Mapping[str, Any]]]) -> tuple[list[str], int]:
    """Every key written both in a file and as a literal code default, and how many keys were checked.

    ``files``: option -> (the class it builds, the file's own keys). The code's reads of config files are
    ``rankrl.conf_defaults.READ``; a class built by several files has variants."""
    per_class = Counter(target for target, _ in files.values())
    problems, checked = [], 0
    for option, (target, raw) in files.items():
        cls = get_class(target)
        params = inspect.signature(cls).parameters
        for key, value in raw.items():
            if key in HYDRA_KEYS or _wiring(value):
                continue
            checked += 1
            if key not in params:
                problems.append(f"conf/{option}.yaml sets {key}, which {target} does not take")
                continue
            default = code_default(cls, key)
            if default is EMPTY:
                continue  # the file is its one home: the constructor requires it
            if (option, key) in READ:
                if _plain(frozen(value)) != _plain(default):
                    problems.append(f"conf/{option}.yaml {key}={value!r}, read as {default!r}")
            elif per_class[target] > 1:
                if _plain(value) == _plain(default):
                    problems.append(
                        f"conf/{option}.yaml restates {target}'s default {key}={value!r}: written twice"
                    )
            else:
                problems.append(
                    f"conf/{option}.yaml {key}={value!r} and {target}'s default {default!r}: two homes "
                    f"(read it with conf_default({option!r}, {key!r}), or drop one)"
                )
    return problems, checked


FILES = {option: (target, _raw(option)) for option, target in component_files().items()}


def test_every_component_file_is_read():
    assert len(FILES) >= 15 and {o.split("/")[0] for o in FILES} == set(GROUPS), sorted(FILES)
    for target, _ in FILES.values():
        get_class(target)  # every class imports: the constructors' reads of their files have happened
    assert len(READ) >= 50, sorted(READ)


def test_each_value_of_a_component_has_one_home():
    problems, checked = one_home_problems(FILES)
    assert checked >= 60  # the literal values of the files: the check saw them
    assert not problems, "\n".join(problems)


def test_every_default_the_code_reads_is_a_value_of_its_file():
    for option, key in sorted(READ):
        assert key in _raw(option) and not _wiring(_raw(option)[key]), (option, key)


def test_the_check_finds_a_value_written_twice_or_drifted():
    """The check can fail: HFEngine's batch size drifted from its file (16 -> 8), PyseriniBM25's
    thread count written in a file too, and a clip variant restating the class's batch size."""
    files = {
        "rollout/hf": ("rankrl.rollout.hf.HFEngine", {"batch_size": 8}),
        "retriever/bm25": ("rankrl.retrieval.bm25.PyseriniBM25", {"threads": 2}),
        "retriever/clip-vit-b16": ("rankrl.retrieval.clip.ClipRetriever", {"arch": "ViT-B-16"}),
        "retriever/clip-vit-b32": ("rankrl.retrieval.clip.ClipRetriever", {"batch_size": 64}),
    }
    problems, checked = one_home_problems(files)
    assert checked == 4 and len(problems) == 3, problems
    assert "read as 16" in problems[0] and "two homes" in problems[1] and "written twice" in problems[2]


@pytest.mark.parametrize("trainer", sorted(p.stem for p in (CONFIG_DIR / "trainer").glob("*.yaml")))
def test_a_trainer_file_lists_only_what_differs_from_what_it_extends(trainer: str):
    raw = _raw(f"trainer/{trainer}")
    parents = [p for p in _parents(f"trainer/{trainer}") if p != "trainer/schema"]
    inherited = {f.name: f.default for f in dataclasses.fields(TrainerConfig)}
    inherited["_target_"] = TrainerConfig._target_
    for parent in parents:
        inherited |= {k: v for k, v in _raw(parent).items() if k != "defaults"}
    restated = {k: v for k, v in raw.items() if k != "defaults" and inherited.get(k) == v}
    assert not restated, f"conf/trainer/{trainer}.yaml restates {restated}"


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
