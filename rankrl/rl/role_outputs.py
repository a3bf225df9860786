"""Role outputs: what a role's weights produce over the data, handed from stage to stage of a pipeline.

A multi-role method (``rankrl.rl.task``: one role trained per stage, the others frozen) often needs what a
frozen role writes for every item of the data (say, a label or a set of terms per document) before it can
score anything. Those outputs depend only on the role's weights, the data, the prompt and the sampling, so a
stage whose frozen role starts from the weights an earlier stage produced reads the outputs that stage wrote
with them (same weights, same sampling: same outputs) instead of generating them again. Three things decide
where they come from:

- ``WeightsSource``: where a role's weights come from at a stage: trained in this run, an earlier run's folder
  (the role's ``init_from``, as ``rankrl.pipeline`` fills it in), or the base model (``weights_source``).
- the *meta*: what must match for stored outputs to be reused (the task's data fingerprint, prompt, sampling
  ...); a file written for another meta is never read.
- ``RoleOutputs``: the files. Every run keeps the outputs it used in its own folder, stamped with the
  ``source`` whose weights wrote them (``TRAINED`` for the role this run trained: the next stage reads
  exactly those). Base-model outputs are shared by every run under ``<cache_dir>/<namespace>/``, one file
  per (model, meta, seed). Files are written atomically (a temporary file, then a rename) and merged per
  meta, so a run that produces outputs for more ids adds to a file instead of replacing it.

Why here, next to the task contract: the outputs flow between tasks in-process, during ``bind`` and
``evaluate``, while the pipeline (``rankrl.pipeline``) only chooses each role's ``init_from`` folder and the
entry points (``rankrl.app``) load weights from it; neither sees what a role generates. A task builds one
``RoleOutputs`` from its ``run_dir``/``cache_dir`` config and calls ``get_or_make``.

File format (JSON, not ASCII-escaped): ``{"meta": {...}, "<field>": {id: value}}``; ``field`` is chosen by the
task (default ``outputs``), values are any JSON data.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rankrl.errors import ConfigError

log = logging.getLogger(__name__)

TRAINED = "trained in this run"  # the source stamped on outputs of the role a run trained
KINDS = ("trained", "run", "base")


@dataclass(frozen=True)
class WeightsSource:
    """Where a role's weights come from: trained in this run, an earlier run's folder, or the base model.

    Args:
        kind: ``trained``, ``run`` (``folder`` holds them) or ``base`` (``model`` names them).
    """

    kind: str
    folder: Path | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"weights source kind {self.kind!r}; valid: {', '.join(KINDS)}")

    def describe(self) -> str:
        """The stamp stored with outputs these weights wrote (``TRAINED`` for the role trained here)."""
        if self.kind == "run":
            return f"run {self.folder}"
        return f"base model {self.model}" if self.kind == "base" else TRAINED


def base_weights(role: str, role_specs: Mapping[str, Any], default_model_path: str | None) -> WeightsSource:
    """The base model of ``role``: its own ``model.path`` in ``role_specs``, else the run's model path."""
    model = (role_specs.get(role) or {}).get("model")
    path = model.get("path") if isinstance(model, Mapping) else None
    return WeightsSource("base", model=str(path or default_model_path))


def weights_source(
    role: str,
    trained_role: str | None,
    role_specs: Mapping[str, Any],
    default_model_path: str | None,
    at_start: bool = False,
) -> WeightsSource:
    """Where ``role``'s weights come from at this stage.

    Args:
        role: the role asked about.
        trained_role: the role this stage trains (None: an evaluation, nothing trained).
        role_specs: the run's ``roles`` node (role -> ``{model, init_from}``).
        default_model_path: the run's model path (roles without their own ``model``).
        at_start: before this run trained anything: the trained role counts as where it started from.
    """
    if role == trained_role and not at_start:
        return WeightsSource("trained")
    init = (role_specs.get(role) or {}).get("init_from")
    if init:
        return WeightsSource("run", folder=Path(str(init)))
    return base_weights(role, role_specs, default_model_path)


class RoleOutputs:
    """Stored outputs of roles' weights: read back when they match, else made, and kept in the run folder.

    Args:
        namespace: the base-model cache's subfolder (``<cache_dir>/<namespace>/``), one per task.
        run_dir: this run's folder, where the outputs it used are recorded (None: nothing recorded).
        cache_dir: the cache root shared by runs (None: base-model outputs are not shared).
        seed: part of a base-model file's identity (sampling is seeded by the run).
        files: output name -> file name in a run folder (default ``<name>.json``).
        field: the key of the id -> value table in a file.
    """

    def __init__(
        self,
        namespace: str,
        run_dir: str | Path | None = None,
        cache_dir: str | Path | None = None,
        seed: int = 0,
        files: Mapping[str, str] | None = None,
        field: str = "outputs",
    ) -> None:
        self.namespace = namespace
        self.run_dir = Path(run_dir) if run_dir else None
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.seed = seed
        self.files = dict(files or {})
        self.field = field

    def run_file(self, name: str) -> str:
        """The file name of output ``name`` in a run folder."""
        return self.files.get(name, f"{name}.json")

    def file_for(self, name: str, source: WeightsSource, meta: Mapping[str, Any]) -> Path | None:
        """The file holding ``name`` for the weights ``source`` names: the producing run's file, or the base
        cache's file for (model, meta, seed); None for weights trained in this run (or no cache)."""
        if source.kind == "run":
            return Path(source.folder) / self.run_file(name)
        if source.kind == "base" and self.cache_dir is not None:
            key = json.dumps([source.model, dict(meta), self.seed], sort_keys=True)
            digest = hashlib.sha256(key.encode()).hexdigest()[:20]
            return self.cache_dir / self.namespace / f"{name}-base-{digest}.json"
        return None

    def read(self, path: Path | None, meta: Mapping[str, Any], ids: Collection[str]) -> dict[str, Any] | None:
        """The values of ``ids`` stored at ``path`` if it was written for the same ``meta`` (every key of
        ``meta`` equal) and holds them all; None otherwise (no file, unreadable, other meta, ids missing)."""
        stored = self._load(path)
        if not _same_meta(stored, meta):
            return None
        values = stored.get(self.field, {})
        if not set(ids) <= set(values):
            return None
        return {i: values[i] for i in ids}

    def write(self, path: Path, meta: Mapping[str, Any], values: Mapping[str, Any]) -> None:
        """Store ``values`` at ``path`` for ``meta``, merged with what is there for the same meta (another
        meta's file is replaced), atomically: a reader sees the old file or the new one, never a part."""
        stored = self._load(path)  # read once: the merge needs its values, not only that it matches
        merged: dict[str, Any] = dict(stored.get(self.field, {})) if _same_meta(stored, meta) else {}
        merged.update({k: _plain(v) for k, v in values.items()})
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps({"meta": dict(meta), self.field: merged}, ensure_ascii=False))
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)

    def record(
        self, name: str, values: Mapping[str, Any], meta: Mapping[str, Any], source: WeightsSource
    ) -> None:
        """Keep the outputs this run used in its folder, stamped with whose weights wrote them."""
        if self.run_dir is not None:
            self.write(self.run_dir / self.run_file(name), {**meta, "source": source.describe()}, values)

    def get_or_make(
        self,
        name: str,
        ids: Sequence[str],
        source: WeightsSource,
        meta: Mapping[str, Any],
        make: Callable[[Sequence[str]], Mapping[str, Any]] | None,
        missing: Exception | None = None,
    ) -> dict[str, Any]:
        """``name``'s outputs for ``ids`` from the weights ``source`` names.

        Read from the file those weights' run wrote (stamped ``TRAINED`` there) or from the base cache, when
        it matches ``meta`` and holds every id; else made now by ``make(ids)`` (base-model outputs are then
        cached). Either way they are recorded in this run's folder. Weights trained in this run are always
        made: nothing stored was written by them.

        Args:
            make: what writes the outputs (a frozen role's generator); None when this stage has nothing to
                make them with.
            missing: the error raised when they are neither stored nor can be made (default: a
                ``ConfigError`` naming the file expected).
        """
        path = self.file_for(name, source, meta)
        if source.kind != "trained":
            wanted = {**meta, "source": TRAINED} if source.kind == "run" else meta
            found = self.read(path, wanted, ids)
            if found is not None:
                log.info("%s outputs of %s read from %s", name, source.describe(), path)
                self.record(name, found, meta, source)
                return found
        if make is None:
            raise missing or ConfigError(
                f"no stored {name} outputs of {source.describe()} "
                f"({path or 'no file'}) and nothing to make them with in this stage"
            )
        made = dict(make(ids))
        if source.kind == "base" and path is not None:
            self.write(path, meta, made)
        self.record(name, made, meta, source)
        return made

    @staticmethod
    def _load(path: Path | None) -> dict[str, Any] | None:
        if path is None or not path.is_file():
            return None
        try:
            stored = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            log.warning("ignoring unreadable outputs file %s: %s", path, err)
            return None
        return stored if isinstance(stored, dict) else None


def _same_meta(stored: Mapping[str, Any] | None, meta: Mapping[str, Any]) -> bool:
    """Whether a loaded file was written for ``meta``: every key of ``meta`` equal in its own meta."""
    return stored is not None and {k: stored.get("meta", {}).get(k) for k in meta} == dict(meta)


def _plain(value: Any) -> Any:
    """Tuples and other sequences as lists, so a value reads back as it was written."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    return value
