r"""Where every run's files go, and whether a run is launched or skipped: the one home of both facts.

Layout, under the log folder (``RANKRL_LOG_DIR``, default ``<repository>/outputs``; ``paths.log_dir``)::

    <experiment>/<scale>-<model>/               runs_root: every run of one experiment, scale and model
        seed<k>/                                run_folder: a single run (Hydra's hydra.run.dir)
            config.yaml  per_query.csv  train_log.jsonl  checkpoints/step_<k>/...
            metrics.json                        written last: the run is finished (rankrl.runs)
            <stage>/                            stage_folder: a pipeline's stage, itself a run folder
        sweep/<key=value,...>/                  sweep_folder: a multirun's point (Hydra's hydra.sweep.dir)
    <paper>/                                    paper_folder: every run of a paper (experiment <paper>/...)
    tables/<paper>/                             tables_folder: a smoke's tables, beside its runs
    smoke/                                      make smoke-<paper>'s log folder (SMOKE_LOG_DIR)

Who asks: Hydra's run and sweep folders (conf/hydra/default.yaml, checked against this module by
tests/test_run_folders.py), ``init_from`` (rankrl.app), the pipeline's stage folders and their skipping
(rankrl.pipeline), the report's file names, and experiments/lib.sh with the paper scripts, which ask
through the CLI below instead of spelling paths.

Launch or skip (``launch_or_skip``): a run whose ``metrics.json`` exists is done and skipped (unless forced);
a run whose input is missing (an ``init_from`` run that has not finished) is not launched and its answer
names the command that makes the input; anything else is launched. A killed training run resumes from its
checkpoint when it is launched again (``trainer.resume``).

Why a module of its own and not rankrl.runs (what a finished run writes): the scripts ask once per row,
hundreds of times in a paper's dry run, so this module imports the standard library only and answers in
about 50 ms, where rankrl.runs pulls in numpy, Hydra and OmegaConf (0.4 s).

CLI (``key=value`` arguments as Hydra's; ``profile=`` stands for the profile's scale)::

    python -m rankrl.run_folders log-dir
    python -m rankrl.run_folders run experiment=<paper>/<name> profile=cpu model=smollm2-135m seed=0
    python -m rankrl.run_folders run experiment=core/vowels_pipeline profile=cpu model=tiny seed=0 stage=sft
    python -m rankrl.run_folders root experiment=<paper>/<sweep> profile=cpu model=smollm2-135m
    python -m rankrl.run_folders sweep experiment=<paper>/<name> profile=paper model=<model> \
        point=benchmark=<b1> [point=benchmark=<b2> ...]
    python -m rankrl.run_folders paper paper=<paper> [log_dir=outputs/smoke]
    python -m rankrl.run_folders tables paper=<paper>
    python -m rankrl.run_folders smoke-log-dir
    python -m rankrl.run_folders status <folder> [--force] [the run's profile= model= seed= init_from=]

Paths print as given: the default log folder relative to the working directory when it lies below it
(``outputs/...`` from the repository root, as the scripts run), ``RANKRL_LOG_DIR`` or ``log_dir=`` as set.
``status`` prints ``done <folder>/metrics.json``, ``launch <folder>`` or ``missing <why, with the command>``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_LOG_DIR = REPO_ROOT / "outputs"
LOG_DIR_ENV = "RANKRL_LOG_DIR"

# what a run folder holds
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.json"  # written last (atomically): present = finished
# the evaluation's per-query values (qid, then one column per metric) where the task has them: what a paired
# test between two runs compares (rankrl/report/significance.py)
PER_QUERY_FILE = "per_query.csv"
TRAIN_LOG_FILE = "train_log.jsonl"
CHECKPOINTS_DIR = "checkpoints"
SWEEP_DIR = "sweep"
TABLES_DIR = "tables"
SMOKE_DIR = "smoke"


# ---------------------------------------------------------------------------------------------- layout


def log_dir() -> Path:
    """The log folder: ``RANKRL_LOG_DIR``, else ``<repository>/outputs``."""
    return Path(os.environ.get(LOG_DIR_ENV) or DEFAULT_LOG_DIR)


def run_key(experiment: str, scale: str, model: str, seed: int | str) -> str:
    """A single run's folder below the log folder, ``<experiment>/<scale>-<model>/seed<k>`` (also the W&B
    group of a pipeline's stages)."""
    return f"{experiment}/{scale}-{model}/seed{seed}"


def runs_root(experiment: str, scale: str, model: str, logs: str | Path | None = None) -> Path:
    """The folder of every run of one experiment, scale and model: its seeds and its sweep."""
    return Path(log_dir() if logs is None else logs) / experiment / f"{scale}-{model}"


def run_folder(
    experiment: str, scale: str, model: str, seed: int | str, logs: str | Path | None = None
) -> Path:
    """A single run's folder (``hydra.run.dir``): ``<log folder>/<experiment>/<scale>-<model>/seed<k>``."""
    return Path(log_dir() if logs is None else logs) / run_key(experiment, scale, model, seed)


def stage_folder(run: str | Path, stage: str) -> Path:
    """A pipeline stage's folder inside the pipeline's run folder."""
    return Path(run) / stage


def sweep_folder(
    experiment: str, scale: str, model: str, point: Sequence[str], logs: str | Path | None = None
) -> Path:
    """A multirun point's folder: ``hydra.sweep.dir`` then ``hydra.job.override_dirname``, the point's
    ``key=value`` overrides sorted and joined by commas (as Hydra names them)."""
    return runs_root(experiment, scale, model, logs) / SWEEP_DIR / ",".join(sorted(point))


def tables_folder(paper: str, logs: str | Path | None = None) -> Path:
    """Where a smoke's tables go: beside its runs, never over the committed ones in experiments/<paper>/."""
    return Path(log_dir() if logs is None else logs) / TABLES_DIR / paper


def paper_folder(paper: str, logs: str | Path | None = None) -> Path:
    """Every run of a paper's experiments (their names start with ``<paper>/``)."""
    return Path(log_dir() if logs is None else logs) / paper


def smoke_log_dir() -> Path:
    """``make smoke-<paper>``'s log folder (experiments/smoke.sh; the Makefile's SMOKE_LOG_DIR)."""
    return DEFAULT_LOG_DIR / SMOKE_DIR


def profile_scale(profile: str) -> str:
    """The ``scale`` a profile sets (conf/profile/<profile>.yaml), which names its run folders."""
    path = REPO_ROOT / "conf" / "profile" / f"{profile}.yaml"
    found = re.search(r"^scale:\s*(\S+)", path.read_text(), re.M) if path.exists() else None
    if found is None:
        choices = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise ValueError(
            f"profile={profile}: no conf/profile/{profile}.yaml with a `scale:`; profiles: {choices}"
        )
    return found.group(1)


def read_metrics(run: str | Path) -> dict[str, float]:
    """A finished run's headline metrics (``metrics.json``'s ``metrics``)."""
    return json.loads((Path(run) / METRICS_FILE).read_text())["metrics"]


# ------------------------------------------------------------------------------------------ launch or skip


class InputMissing(ValueError):
    """A run's input (the run its weights start from) has not finished."""


def is_finished(run: str | Path) -> bool:
    return (Path(run) / METRICS_FILE).exists()


def finished_training_run(
    value: str | Path, *, scale: str, model: str, seed: int | str, logs: str | Path | None = None
) -> Path:
    """The finished training run that ``init_from=<value>`` names: a run folder, an experiment name (its
    run folder for this scale, model and seed) or a pipeline stage's experiment name, ``<pipeline>/<stage>``
    (that stage's folder in the pipeline's run folder). Raises ``InputMissing`` naming the command that
    makes it."""
    path = Path(str(value))
    candidates = [path]
    if not path.is_absolute():
        candidates.append(run_folder(str(value), scale, model, seed, logs))
        if len(path.parts) > 1:
            pipeline = run_folder(str(path.parent), scale, model, seed, logs)
            candidates.append(stage_folder(pipeline, path.name))
    for run in candidates:
        if is_finished(run) and (run / CHECKPOINTS_DIR).is_dir():
            return run.resolve()
    command = f"python -m rankrl.train experiment={value} seed={seed}"
    raise InputMissing(
        f"init_from={value}: no finished training run at {' or '.join(map(str, candidates))}; "
        f"run `{command}` first (or `python -m rankrl.pipeline` for a pipeline)"
    )


def init_from_values(overrides: Iterable[str]) -> list[str]:
    """The ``init_from`` and ``roles.<role>.init_from`` values among Hydra overrides (``none`` and ``null``
    left out: the base weights)."""
    values = []
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if (key == "init_from" or re.fullmatch(r"roles\.[^.]+\.init_from", key)) and value.lower() not in (
            "",
            "none",
            "null",
        ):
            values.append(value.strip("'\""))
    return values


@dataclass(frozen=True)
class Verdict:
    """``launch``, ``done`` or ``missing``, and why (the metrics file, the folder, or the missing input)."""

    action: str
    reason: str

    def __str__(self) -> str:
        return f"{self.action} {self.reason}"


def launch_or_skip(
    run: str | Path,
    *,
    force: bool = False,
    inputs: Iterable[str] = (),
    scale: str = "",
    model: str = "",
    seed: int | str = 0,
    logs: str | Path | None = None,
) -> Verdict:
    """Whether to start the run that writes ``run``: done (its metrics.json exists, unless ``force``),
    missing (one of its ``inputs``, init_from values, names no finished training run) or launch."""
    if is_finished(run) and not force:
        return Verdict("done", str(Path(run) / METRICS_FILE))
    for value in inputs:
        try:
            finished_training_run(value, scale=scale, model=model, seed=seed, logs=logs)
        except InputMissing as err:
            return Verdict("missing", str(err))
    return Verdict("launch", str(run))


# ---------------------------------------------------------------------------------------------------- CLI


def _shown(path: Path, logs: str | None) -> str:
    """The default log folder's paths relative to the working directory when below it, others as given."""
    if logs is None and not os.environ.get(LOG_DIR_ENV):
        try:
            return str(path.relative_to(Path.cwd()))
        except ValueError:
            pass
    return str(path)


def _keys(args: Sequence[str], needed: Sequence[str], allowed: Sequence[str] = ()) -> dict[str, str]:
    pairs = dict(a.partition("=")[::2] for a in args)
    if "profile" in pairs:
        pairs["scale"] = profile_scale(pairs.pop("profile"))
    unknown = set(pairs) - {*needed, *allowed}
    missing = [k for k in needed if not pairs.get(k)] + [k for k in allowed if pairs.get(k) == ""]
    if unknown or missing:
        raise ValueError(
            f"needs {' '.join(k + '=' for k in needed)}"
            + (" (profile= for scale=)" if "scale" in needed else "")
            + (f"; unknown: {sorted(unknown)}" if unknown else "")
            + (f"; missing: {missing}" if missing else "")
        )
    return pairs


def _status(args: Sequence[str]) -> Verdict:
    if not args:
        raise ValueError("status <folder> [--force] [the run's overrides]")
    folder, rest = args[0], list(args[1:])
    force = "--force" in rest
    overrides = [a for a in rest if a != "--force"]
    pairs: Mapping[str, Any] = dict(a.partition("=")[::2] for a in overrides)
    scale = profile_scale(pairs["profile"]) if pairs.get("profile") else pairs.get("scale", "")
    return launch_or_skip(
        folder,
        force=force,
        inputs=init_from_values(overrides),
        scale=scale,
        model=pairs.get("model", ""),
        seed=pairs.get("seed", 0),
        logs=pairs.get("paths.log_dir") or None,
    )


def answer(argv: Sequence[str]) -> str:
    """The CLI's one line for ``argv`` (a command, then its arguments)."""
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    identity = ("experiment", "scale", "model")
    if command == "log-dir":
        return _shown(log_dir(), None)
    if command == "smoke-log-dir":
        return str(smoke_log_dir())
    if command == "status":
        return str(_status(args))
    if command == "run":
        k = _keys(args, (*identity, "seed"), ("stage", "log_dir"))
        path = run_folder(k["experiment"], k["scale"], k["model"], k["seed"], k.get("log_dir"))
        return _shown(stage_folder(path, k["stage"]) if k.get("stage") else path, k.get("log_dir"))
    if command == "root":
        k = _keys(args, identity, ("log_dir",))
        return _shown(runs_root(k["experiment"], k["scale"], k["model"], k.get("log_dir")), k.get("log_dir"))
    if command == "sweep":  # one line per point=, in order: a script asks once for all its points
        points = [a.partition("=")[2] for a in args if a.startswith("point=")]
        k = _keys([a for a in args if not a.startswith("point=")], identity, ("log_dir",))
        if not points or "" in points:
            raise ValueError("needs point=<key=value>[,<key=value>...], one for each folder")
        return "\n".join(
            _shown(
                sweep_folder(k["experiment"], k["scale"], k["model"], p.split(","), k.get("log_dir")),
                k.get("log_dir"),
            )
            for p in points
        )
    if command == "paper":
        k = _keys(args, ("paper",), ("log_dir",))
        return _shown(paper_folder(k["paper"], k.get("log_dir")), k.get("log_dir"))
    if command == "tables":
        k = _keys(args, ("paper",), ("log_dir",))
        return _shown(tables_folder(k["paper"], k.get("log_dir")), k.get("log_dir"))
    raise ValueError(
        f"unknown command {command!r}; commands: log-dir, run, root, sweep, paper, tables, smoke-log-dir, "
        "status (python -m rankrl.run_folders --help)"
    )


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        print(answer(argv))
    except ValueError as err:
        print(f"error: python -m rankrl.run_folders {' '.join(argv)}: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
