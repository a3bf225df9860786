"""Defaults whose one home is a config file: a constructor reads them from ``conf/<group>/<option>.yaml``.

A component built by Hydra is configured by its file in ``conf/``: the values users read there, override
(``rollout.batch_size=4``) and find in every run's ``config.yaml``. The same component is also built directly,
in tests, notebooks and benchmarks, where only its constructor's defaults apply. Written in both places,
the two drift apart (``conf/rollout/hf.yaml`` said batch size 16 while ``HFEngine`` said 8). So a default
that a config file holds is written there only, and the constructor's keyword default reads it:

    batch_size: int = conf_default("rollout/hf", "batch_size")

Where a config value is wiring (``${paths.data_dir}``), the code keeps its own default for direct
construction: the two are not the same fact. tests/config/test_one_home.py checks that every literal value
of a component's file is either read here by its constructor, a required argument of it, or (in a file
that is a variant of another file of the same class, ``retriever=clip-vit-l14``) a value that differs.

This module imports only omegaconf, so the light modules that read their defaults here stay light.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from omegaconf import OmegaConf

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "conf"

# (option, key) pairs a constructor's default has been read from (the one-home test reads them)
READ: set[tuple[str, str]] = set()


def frozen(value: Any) -> Any:
    """A config value as an immutable default: lists as tuples, mappings as read-only mappings."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: frozen(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(frozen(v) for v in value)
    return value


@functools.cache
def _file_values(option: str) -> Mapping[str, Any]:
    path = CONFIG_DIR / f"{option}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no config file {path} to read defaults from")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


def conf_default(option: str, key: str) -> Any:
    """The value of ``key`` in ``conf/<option>.yaml`` (``option`` as ``rollout/hf``), immutable, as a
    constructor's default. A missing key or an interpolation (wiring, not a value) stops with its name."""
    values = _file_values(option)
    if key not in values:
        raise KeyError(f"conf/{option}.yaml has no key {key!r} for a constructor to read its default from")
    value = values[key]
    if isinstance(value, str) and "${" in value:
        raise ValueError(
            f"conf/{option}.yaml: {key} is wiring ({value}), not a default a constructor can read"
        )
    READ.add((option, key))
    return frozen(value)
