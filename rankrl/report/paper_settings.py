"""A paper's settings table: every setting the paper or its official code states, next to what
``profile=paper`` composes, with the source of each and the reason where they differ.

    python -m rankrl.report.paper_settings            # every paper: experiments/<paper>/paper_settings.md
    python -m rankrl.report.paper_settings rankr1     # one paper
    python -m rankrl.report.paper_settings --check    # exit 1 when a table is stale or a row is false

The source of truth is ``experiments/<paper>/paper_settings.yaml`` (the per-paper facts live there, none
here). Its format::

    title: "Rank-R1: settings at profile=paper"     # the table's heading
    intro: >-                                       # optional text under the heading
      ...
    not_in_table:                                   # the paper's experiments no row composes, and why
      rankr1/warmstart_grpo_dl19: a CPU-scale row the paper does not have
    settings:
      - section: GRPO training                      # rows are grouped by section, in order of appearance
        setting: learning rate                      # what it is, in words
        keys: trainer.lr                            # dotted path(s) in the composed config (a list: all
                                                    #   must hold `ours`); omit for a setting of the code
        experiments: [rankr1/rankr1_grpo]           # composed at profile=paper (each must hold `ours`)
        overrides: [benchmark=dl20]                 # optional, added to every compose of this row
        stage: grpo                                 # optional: a pipeline stage's overrides go first
        paper: 1.0e-5                               # the paper's value, or "not stated"
        source: 'ielab/llm-rankers at 3b988fa, Rank-R1/train_grpo.py: "learning_rate=1e-5"'
        ours: 1.0e-5                                # what the keys compose to (checked)
        same: true                                  # optional: paper and ours are written differently but
                                                    #   are the same setting (e.g. a derived step count)
        reading: true                               # optional: the paper's words allow more than one
                                                    #   setting and ours is one reading of them (why: says
                                                    #   which reading, with the quote in source)
        why: ...                                    # required where ours differs or the paper is silent
        note: ...                                   # optional (arithmetic, reading)
        code: rankrl/tasks/rankr1.py:first_stage_ranking   # a setting of the code: where it lives
        test: tests/tasks/test_rankr1.py::test_name         # ... and the test that holds it (must exist)

A row with ``keys`` is checked by composing each of its experiments at ``profile=paper`` (Hydra's compose
API, as the entry points compose; a ``stage`` composes as ``rankrl.pipeline`` runs that stage): every key
must exist and equal ``ours`` (numbers compare as numbers, lists as lists). A row without keys must name the
``test`` that holds the behaviour. The table written is a function of the YAML once every row holds, so
tests/config/test_paper_settings.py fails both when a composed value drifts and when the committed table is
not what this module writes.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from rankrl.config import CONFIG_DIR, REPO_ROOT
from rankrl.errors import ConfigError

SETTINGS_FILE = "paper_settings.yaml"
TABLE_FILE = "paper_settings.md"
NOT_STATED = "not stated"
PROFILE = "paper"
ROW_KEYS = {
    "section",
    "setting",
    "keys",
    "experiments",
    "overrides",
    "stage",
    "paper",
    "source",
    "ours",
    "same",
    "reading",
    "why",
    "note",
    "code",
    "test",
}
_ABSENT = object()


@dataclass(frozen=True)
class Row:
    """One setting: the paper's value with its source, ours, and where they differ, why."""

    section: str
    setting: str
    paper: Any
    source: str
    ours: Any
    keys: tuple[str, ...] = ()
    experiments: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    stage: str | None = None
    same: bool | None = None
    reading: bool = False
    why: str = ""
    note: str = ""
    code: str = ""
    test: str = ""

    @property
    def status(self) -> str:
        """``same``, ``differs``, ``reading`` (one reading of ambiguous words) or ``not stated``."""
        if isinstance(self.paper, str) and self.paper.strip().lower() == NOT_STATED:
            return NOT_STATED
        if self.reading:
            return "reading"
        if self.same is not None:
            return "same" if self.same else "differs"
        return "same" if values_equal(self.paper, self.ours) else "differs"


@dataclass
class PaperSettings:
    """A paper's ``paper_settings.yaml``: title, rows, and the experiments no row composes."""

    paper: str
    title: str
    rows: list[Row]
    intro: str = ""
    not_in_table: dict[str, str] = field(default_factory=dict)


def _as_tuple(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    return (str(value),) if isinstance(value, str) else tuple(str(v) for v in value)


def load_settings(path: Path) -> PaperSettings:
    """Read and check a ``paper_settings.yaml``; a malformed row stops with one line naming it."""
    raw = yaml.safe_load(path.read_text()) or {}
    rows = []
    for i, item in enumerate(raw.get("settings") or [], 1):
        where = f"{path}: row {i} ({item.get('setting', '?')!r})"
        unknown = set(item) - ROW_KEYS
        if unknown:
            raise ConfigError(
                f"{where}: unknown field(s) {sorted(unknown)}; valid: {', '.join(sorted(ROW_KEYS))}"
            )
        missing = [k for k in ("section", "setting", "paper", "source", "ours") if k not in item]
        if missing:
            raise ConfigError(f"{where}: missing {', '.join(missing)}")
        row = Row(
            section=str(item["section"]),
            setting=str(item["setting"]),
            paper=item["paper"],
            source=str(item["source"]),
            ours=item["ours"],
            keys=_as_tuple(item.get("keys")),
            experiments=_as_tuple(item.get("experiments")),
            overrides=_as_tuple(item.get("overrides")),
            stage=item.get("stage"),
            same=item.get("same"),
            reading=bool(item.get("reading", False)),
            why=str(item.get("why") or "").strip(),
            note=str(item.get("note") or "").strip(),
            code=str(item.get("code") or ""),
            test=str(item.get("test") or ""),
        )
        if row.keys and not row.experiments:
            raise ConfigError(f"{where}: `keys` without `experiments` to compose them under")
        if not row.keys and not row.test:
            raise ConfigError(f"{where}: a setting of the code (no `keys`) names the `test` that holds it")
        if row.status != "same" and not row.why:
            reason = {
                "differs": "ours differs from the paper",
                "reading": "ours is a reading of the paper",
                NOT_STATED: "the paper does not state it",
            }[row.status]
            raise ConfigError(f"{where}: {reason}: say why (`why:`), or `same: true` if it is the paper's")
        rows.append(row)
    if not rows:
        raise ConfigError(f"{path}: no `settings` rows")
    return PaperSettings(
        paper=path.parent.name,
        title=str(raw.get("title") or f"{path.parent.name}: settings at profile={PROFILE}"),
        rows=rows,
        intro=str(raw.get("intro") or "").strip(),
        not_in_table={str(k): str(v) for k, v in (raw.get("not_in_table") or {}).items()},
    )


def settings_files(experiments_dir: Path = REPO_ROOT / "experiments") -> dict[str, Path]:
    """Every paper with a settings table: ``{paper: experiments/<paper>/paper_settings.yaml}``."""
    return {p.parent.name: p for p in sorted(experiments_dir.glob(f"*/{SETTINGS_FILE}"))}


# ---- composing and checking -------------------------------------------------------------------------------


def values_equal(a: Any, b: Any) -> bool:
    """Equality of config values as a reader means it: numbers as numbers (``1e-5`` == ``1.0e-05``), lists
    and tuples alike, mappings by their items."""
    a, b = _plain(a), _plain(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    na, nb = _number(a), _number(b)
    if na is not None and nb is not None:
        return math.isclose(na, nb, rel_tol=1e-12, abs_tol=0.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    return a == b


def _plain(value: Any) -> Any:
    return (
        OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


class Composer:
    """Composes experiments at ``profile=paper`` once per distinct command line (read-only configs)."""

    def __init__(self, config_dir: Path = CONFIG_DIR) -> None:
        self.config_dir = config_dir
        self._cache: dict[tuple[str, tuple[str, ...]], DictConfig] = {}

    def compose(self, entry: str, overrides: Sequence[str]) -> DictConfig:
        key = (entry, tuple(overrides))
        if key not in self._cache:
            from hydra import compose, initialize_config_dir

            import rankrl.config  # noqa: F401  (resolvers and schemas)

            with initialize_config_dir(str(self.config_dir), version_base="1.3"):
                self._cache[key] = compose(entry, overrides=list(overrides))
        return self._cache[key]

    def row_config(self, row: Row, experiment: str) -> DictConfig:
        """The config a run of ``experiment`` (or of its ``row.stage``) composes at profile=paper."""
        base = [f"experiment={experiment}", f"profile={PROFILE}", *row.overrides]
        if row.stage is None:
            return self.compose("train", base)
        from rankrl.pipeline import expand

        cfg = self.compose("train", base)
        stages = {s.name: s for s in expand(OmegaConf.to_container(cfg.pipeline, resolve=True))}
        if row.stage not in stages:
            raise ConfigError(
                f"{experiment} has no pipeline stage {row.stage!r}; stages: {', '.join(stages) or 'none'}"
            )
        stage = stages[row.stage]
        return self.compose(stage.entry, [*stage.overrides, *base])


def composed_value(cfg: DictConfig, key: str) -> Any:
    """The resolved value of a dotted key, or ``_ABSENT`` when the config has no such key."""
    value = OmegaConf.select(cfg, key, default=_ABSENT)
    return value if value is _ABSENT else _plain(value)


def check_rows(settings: PaperSettings, composer: Composer | None = None) -> list[str]:
    """Every way the table is false: a key that composes to something other than ``ours`` (or does not
    exist), an experiment no row composes and ``not_in_table`` does not name, a ``test`` that is not there.
    Empty when the table holds."""
    composer = composer or Composer()
    problems = []
    for row in settings.rows:
        for experiment in row.experiments:
            if not (composer.config_dir / "experiment" / f"{experiment}.yaml").is_file():
                problems.append(f"{row.setting!r}: no experiment {experiment!r}")
                continue
            try:
                cfg = composer.row_config(row, experiment)
            except Exception as err:  # a compose error or a missing stage: one line, the row's name
                problems.append(f"{row.setting!r}: {experiment} does not compose: {str(err).splitlines()[0]}")
                continue
            for key in row.keys:
                value = composed_value(cfg, key)
                where = f"{experiment}{f' stage {row.stage}' if row.stage else ''}"
                if value is _ABSENT:
                    problems.append(f"{row.setting!r}: {where} has no key {key}")
                elif not values_equal(value, row.ours):
                    problems.append(
                        f"{row.setting!r}: {key} composes to {format_value(value)} under {where} at "
                        f"profile={PROFILE}, the table says {format_value(row.ours)}: fix the config or row"
                    )
        if row.test and not defines_test(row.test):
            problems.append(f"{row.setting!r}: no test {row.test}")
    covered = {e for row in settings.rows for e in row.experiments} | set(settings.not_in_table)
    for experiment in paper_experiments(settings.paper, composer.config_dir):
        if experiment not in covered:
            problems.append(
                f"experiment {experiment} is in no row: add it to a row's experiments or to not_in_table"
            )
    return problems


def paper_experiments(paper: str, config_dir: Path = CONFIG_DIR) -> list[str]:
    """A paper's experiment files (``conf/experiment/<paper>/**.yaml``), as ``experiment=`` takes them."""
    root = config_dir / "experiment"
    return sorted(str(p.relative_to(root).with_suffix("")) for p in (root / paper).rglob("*.yaml"))


def defines_test(node_id: str, root: Path = REPO_ROOT) -> bool:
    """Whether ``tests/x.py::test_name`` names a test function defined in that file."""
    path, _, name = node_id.partition("::")
    file = root / path
    if not name or not file.is_file():
        return False
    name = name.split("[")[0]
    return any(line.lstrip().startswith(f"def {name}(") for line in file.read_text().splitlines())


# ---- the table ---------------------------------------------------------------------------------------------


def format_value(value: Any) -> str:
    """A config value as the table shows it: ``1e-05``, ``q_proj, v_proj``, ``null``, ``[]``."""
    value = _plain(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(v) for v in value) if value else "[]"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {format_value(v)}" for k, v in value.items()) if value else "{}"
    return str(value)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _where(row: Row) -> str:
    if not row.keys:
        return f"code `{row.code}`; test `{row.test}`" if row.code else f"test `{row.test}`"
    keys = ", ".join(f"`{k}`" for k in row.keys)
    experiments = ", ".join(row.experiments)
    extra = " ".join([f"stage {row.stage}"] * bool(row.stage) + list(row.overrides))
    return f"{keys} @ {experiments}{f' ({extra})' if extra else ''}"


def render(settings: PaperSettings) -> str:
    """The markdown table of a paper's settings (a pure function of the YAML)."""
    counts = {
        s: sum(r.status == s for r in settings.rows) for s in ("same", "differs", "reading", NOT_STATED)
    }
    lines = [
        f"# {settings.title}",
        "",
        f"Generated from `experiments/{settings.paper}/{SETTINGS_FILE}` by `make settings` "
        f"(`python -m rankrl.report.paper_settings {settings.paper}`); do not edit by hand. "
        f"tests/config/test_paper_settings.py composes every experiment below at `profile={PROFILE}` and "
        "fails when a value differs from the column Ours, or this file from what the generator writes.",
        "",
        f"{len(settings.rows)} settings: {counts['same']} as the paper, {counts['differs']} differ "
        f"(marked **differs**), {counts['reading']} read from words that allow more than one setting (marked "
        f"**reading**), {counts[NOT_STATED]} the paper does not state.",
    ]
    if settings.intro:
        lines += ["", settings.intro]
    sections: dict[str, list[Row]] = {}
    for row in settings.rows:
        sections.setdefault(row.section, []).append(row)
    for section, rows in sections.items():
        lines += [
            "",
            f"## {section}",
            "",
            "| Setting | Paper | Source | Ours | Where | Why / note |",
            "|---|---|---|---|---|---|",
        ]
        for row in rows:
            mark = {"same": "", "differs": " **differs**", "reading": " **reading**", NOT_STATED: ""}[
                row.status
            ]
            why = " ".join(t for t in (row.why, row.note) if t)
            lines.append(
                "| "
                + " | ".join(
                    _cell(c)
                    for c in (
                        row.setting + mark,
                        format_value(row.paper),
                        row.source,
                        format_value(row.ours),
                        _where(row),
                        why,
                    )
                )
                + " |"
            )
    if settings.not_in_table:
        lines += ["", "## Experiments not in this table", ""]
        lines += [f"- `{e}`: {_cell(why)}" for e, why in sorted(settings.not_in_table.items())]
    return "\n".join(lines) + "\n"


def write_table(path: Path, composer: Composer | None = None) -> Path:
    """Check a paper's rows against its composed configs, then write its ``paper_settings.md``."""
    settings = load_settings(path)
    problems = check_rows(settings, composer)
    if problems:
        raise ConfigError(f"{path}: {len(problems)} row(s) false:\n  " + "\n  ".join(problems))
    out = path.with_name(TABLE_FILE)
    out.write_text(render(settings))
    return out


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rankrl.report.paper_settings", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "papers", nargs="*", help="papers to write (default: every one with a paper_settings.yaml)"
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a table is stale or false"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    files = settings_files()
    unknown = sorted(set(args.papers) - set(files))
    if unknown:
        parser.error(
            f"no experiments/<paper>/{SETTINGS_FILE} for {', '.join(unknown)}; valid: {', '.join(files)}"
        )
    composer, failed = Composer(), False
    for paper in args.papers or list(files):
        path = files[paper]
        if args.check:
            settings = load_settings(path)
            problems = check_rows(settings, composer)
            stale = not path.with_name(TABLE_FILE).is_file() or path.with_name(
                TABLE_FILE
            ).read_text() != render(settings)
            for problem in problems + ([f"{TABLE_FILE} is stale: run make settings"] if stale else []):
                print(f"{paper}: {problem}", file=sys.stderr)
            failed |= bool(problems) or stale
        else:
            try:
                print(write_table(path, composer))
            except ConfigError as err:
                print(f"error: {err}", file=sys.stderr)
                failed = True
    return int(failed)


if __name__ == "__main__":
    sys.exit(main())
