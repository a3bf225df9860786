"""W&B dashboards: one workspace per paper, built in code with ``wandb-workspaces`` from the paper's own
report files, so a table or figure added there shows up on the dashboard too. This module knows no paper.

    python -m rankrl.report.dashboard paper=rankr1 --dry-run     # print the workspace spec; no network
    python -m rankrl.report.dashboard paper=all                   # save every paper's workspace (needs login)
    python -m rankrl.report.dashboard paper=all --check-runs outputs/smoke   # every panel has data there

What a workspace shows (runs filtered to the paper; seeds grouped by ``experiment_name``: the mean, and the
spread over seeds as the band or error bar):

- a section per result table of ``tables.yaml``: a bar chart per metric, ``eval/<metric>`` (the final
  evaluation, which every run puts in its W&B summary), one bar per experiment;
- a section per figure of ``figures.yaml``: a line plot per panel, its series per step with the min-max band
  over seeds, or a line per seed for a figure with ``seeds: each`` (reward curves, GRAPE's Fig. 5 probes,
  F-GRPO's lambda and n sweeps and its control's seeds);
- where ``figures.yaml`` has ``rounds`` (pipelines whose stages alternate, as CoGR's): the final metrics of
  each stage, grouped by the stage's W&B job type, so the rounds line up.

``--check-runs`` is the no-empty-panel check: every panel's key must be logged by a run of the paper under
that folder, which must hold W&B offline runs (a table that declares ``scale:`` is checked only against runs
of that scale). wandb 0.31 has no reader for its offline ``.wandb`` files, so
the keys are read from what the same calls write beside them: ``train_log.jsonl`` (every ``wandb.log``) and
``metrics.json`` (the summary's ``eval/<metric>``); see ``rankrl.tracking``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from rankrl.config import REPO_ROOT
from rankrl.report.figures import each_seed
from rankrl.report.rounds import load_rounds
from rankrl.run_folders import METRICS_FILE, TRAIN_LOG_FILE

EXPERIMENTS_DIR = REPO_ROOT / "experiments"
PROJECT = "rankrl"
GROUP_KEY = "experiment_name"  # the config key that names a row; its seeds are grouped together
LOGIN_HINT = (
    "W&B is not logged in: run `wandb login` (or set WANDB_API_KEY), or use --dry-run to print the spec"
)


# ---------------------------------------------------------------------------------------------- the spec


def _table_metrics(table: Mapping[str, Any], default: str) -> list[str]:
    """The metrics a table reports: its columns when they are metrics of one benchmark, else its metric."""
    if "benchmark" in table:
        return list(table["columns"])
    return [table.get("metric", default)]


def workspace_spec(paper: str, experiments_dir: Path = EXPERIMENTS_DIR) -> dict[str, Any]:
    """The paper's workspace as plain data: sections of panels, each panel a kind and the keys it plots."""
    paper_dir = experiments_dir / paper
    sections: list[dict[str, Any]] = []
    tables_path, figures_path = paper_dir / "tables.yaml", paper_dir / "figures.yaml"
    if tables_path.exists():
        spec = yaml.safe_load(tables_path.read_text())
        for table in spec["tables"]:
            panels = [
                {"kind": "bar", "title": metric, "keys": [f"eval/{metric}"]}
                for metric in _table_metrics(table, spec["metric"])
            ]
            section = {"name": table["title"], "panels": panels}
            if "scale" in table:  # a table of one scale's rows only (the CPU-scale positive controls)
                section["scale"] = table["scale"]
            sections.append(section)
    figures = yaml.safe_load(figures_path.read_text()) if figures_path.exists() else {}
    for figure in (figures or {}).get("figures", []):
        panels = []
        for panel in figure["panels"]:
            panel = {"series": panel} if isinstance(panel, str) else panel
            line = {"kind": "line", "title": panel.get("label", panel["series"]), "keys": [panel["series"]]}
            if each_seed(figure):  # as the PNG draws it: a line per seed, no mean over them
                line["each_seed"] = True
            panels.append(line)
        sections.append({"name": figure.get("title", figure["name"]), "panels": panels})
    if figures_path.exists():  # pipelines whose stages alternate: each stage's final metrics, by job type
        for rounds in load_rounds(figures_path):
            panels = [
                {"kind": "stages", "title": label, "keys": [f"eval/{metric}" for metric, _ in series]}
                for label, series, _ in rounds["panels"]
            ]
            sections.append({"name": rounds.get("title") or rounds["pipeline"], "panels": panels})
    return {"name": f"rankrl: {paper}", "paper": paper, "sections": sections}


def panel_keys(spec: Mapping[str, Any]) -> set[str]:
    return {key for section in spec["sections"] for panel in section["panels"] for key in panel["keys"]}


# ------------------------------------------------------------------------------------- wandb-workspaces


def build_workspace(spec: Mapping[str, Any], entity: str, project: str = PROJECT) -> Any:
    """The spec as a ``wandb_workspaces`` Workspace (building it needs no network; saving does)."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    group = wr.Config(GROUP_KEY)  # a panel's grouping (reports' Config); the runset's is the expression below

    def panel(p: Mapping[str, Any]) -> Any:
        if p["kind"] == "line" and p.get("each_seed"):  # per step, every run (seed) its own line
            return wr.LinePlot(title=p["title"], y=list(p["keys"]))
        if p["kind"] == "line":  # per step, seeds as the mean with their min-max band
            return wr.LinePlot(
                title=p["title"],
                y=list(p["keys"]),
                groupby=group,
                groupby_aggfunc="mean",
                groupby_rangefunc="minmax",
            )
        by = wr.Config("job_type") if p["kind"] == "stages" else group
        return wr.BarPlot(
            title=p["title"],
            metrics=list(p["keys"]),
            groupby=by,
            groupby_aggfunc="mean",
            groupby_rangefunc="stddev",
        )

    sections = [
        ws.Section(name=s["name"], panels=[panel(p) for p in s["panels"]], is_open=True)
        for s in spec["sections"]
    ]
    return ws.Workspace(
        entity=entity,
        project=project,
        name=spec["name"],
        sections=sections,
        runset_settings=ws.RunsetSettings(
            filters=[ws.Config("paper") == spec["paper"]], groupby=[ws.Config(GROUP_KEY)]
        ),
    )


# ------------------------------------------------------------------------------- the no-empty-panel check


def logged_keys(run_dirs: Iterable[Path]) -> set[str]:
    """Every key the runs logged to W&B: their per-step series and their summary's ``eval/<metric>``."""
    keys: set[str] = set()
    for run_dir in run_dirs:
        log_file = run_dir / TRAIN_LOG_FILE
        if log_file.exists():
            for line in log_file.read_text().splitlines():
                if line.strip():
                    keys |= set(json.loads(line)) - {"step"}
        metrics = run_dir / METRICS_FILE
        if metrics.exists():
            keys |= {f"eval/{k}" for k in json.loads(metrics.read_text()).get("metrics", {})}
    return keys


def wandb_runs(runs_dir: Path, paper: str) -> list[Path]:
    """Run folders of ``paper`` under ``runs_dir`` that hold a W&B offline run."""
    found = []
    for metrics in sorted(Path(runs_dir).rglob(METRICS_FILE)):
        run_dir = metrics.parent
        if json.loads(metrics.read_text()).get("paper") == paper and any(
            (run_dir / "wandb").glob("offline-run-*")
        ):
            found.append(run_dir)
    return found


def empty_panels(spec: Mapping[str, Any], runs_dir: Path) -> list[str]:
    """The keys of ``spec``'s panels that no W&B run of its paper under ``runs_dir`` logged. A section of one
    scale's rows (``scale:`` in tables.yaml) is checked only where a run of that scale is: the smoke runs
    the paper profile, never the CPU-scale controls."""
    runs = wandb_runs(runs_dir, spec["paper"])
    if not runs:
        return [f"no W&B run of {spec['paper']} under {runs_dir}"]
    scales = {json.loads((run / METRICS_FILE).read_text()).get("scale") for run in runs}
    checked = [s for s in spec["sections"] if "scale" not in s or s["scale"] in scales]
    return sorted(panel_keys({"sections": checked}) - logged_keys(runs))


# ---------------------------------------------------------------------------------------------- the CLI


def papers(experiments_dir: Path = EXPERIMENTS_DIR) -> list[str]:
    """The papers with result tables (the engine's own figures, experiments/core, get no dashboard)."""
    return sorted(p.name for p in experiments_dir.iterdir() if (p / "tables.yaml").exists())


def _logged_in() -> bool:
    import wandb

    try:
        return bool(wandb.Api().api_key)
    except Exception:  # no key configured (wandb raises UsageError), or W&B cannot be reached
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rankrl.report.dashboard", description=__doc__.split("\n")[0]
    )
    parser.add_argument("paper", help="paper=<name> or paper=all")
    parser.add_argument("--dry-run", action="store_true", help="print each workspace's spec; no network")
    parser.add_argument("--entity", default=None, help="W&B entity (default: your default entity)")
    parser.add_argument("--project", default=PROJECT)
    parser.add_argument("--check-runs", type=Path, default=None, help="fail if a panel has no data under it")
    args = parser.parse_args(argv)
    chosen = args.paper.removeprefix("paper=")
    valid = papers()
    if chosen != "all" and chosen not in valid:
        print(f"error: paper={chosen!r}: choose one of all, {', '.join(valid)}", file=sys.stderr)
        return 2
    specs = [workspace_spec(p) for p in (valid if chosen == "all" else [chosen])]
    if args.check_runs is not None:
        problems = {s["paper"]: empty_panels(s, args.check_runs) for s in specs}
        for paper, missing in problems.items():
            print(
                f"{paper}: "
                + ("every panel has data" if not missing else "no data for " + ", ".join(missing))
            )
        return 1 if any(problems.values()) else 0
    if args.dry_run:
        for spec in specs:
            build_workspace(spec, entity=args.entity or "<your entity>", project=args.project)  # it builds
            print(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
        return 0
    if not _logged_in():
        print(f"error: {LOGIN_HINT}", file=sys.stderr)
        return 2
    import wandb

    entity = args.entity or wandb.Api().default_entity
    for spec in specs:
        workspace = build_workspace(spec, entity=entity, project=args.project)
        workspace.save()
        print(f"{spec['paper']}: {workspace.url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
