"""Entry point: rebuild papers' tables and figures; reruns nothing.

python -m rankrl.report                 # every paper under experiments/ with a tables.yaml or figures.yaml
python -m rankrl.report paper=rankr1    # one paper

Everything is built from the paper's stored results, ``experiments/<paper>/results/`` (with ``out_dir``:
``<out_dir>/results/``; see rankrl.report.results), which the report first refreshes from the run folders
under ``runs_dir`` when they hold runs the paper's specs name. So a fresh checkout, with no run folders,
rebuilds the committed tables, comparisons and figures byte for byte from the committed results, and a run
folder changes only what it reran. Tables come from finished runs (metrics.json, see rankrl.report.tables),
figures from training logs (train_log.jsonl, see rankrl.report.figures), so a run still training already
shows in its figures; round figures (a figures.yaml's ``rounds:``) from the finished stages of a pipeline
(see rankrl.report.rounds). A paper with neither results nor runs keeps its tables, and a figure without its
runs is not drawn.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import rankrl.config  # noqa: F401
from rankrl.config import CONFIG_DIR, REPO_ROOT, check_overrides
from rankrl.report.collect import collect_runs, latest_per_cell
from rankrl.report.figures import draw_figures, find_runs
from rankrl.report.results import RESULTS_DIR, from_run_folders, refresh, wanted
from rankrl.report.rounds import draw_rounds_of
from rankrl.report.tables import write_tables

log = logging.getLogger(__name__)

ALL = "all"
SPECS = ("tables.yaml", "figures.yaml")


def papers(experiments_dir: Path = REPO_ROOT / "experiments") -> list[str]:
    """The papers with a report: folders of ``experiments/`` holding a tables.yaml or a figures.yaml."""
    return sorted(
        p.name for p in experiments_dir.iterdir() if p.is_dir() and any((p / s).exists() for s in SPECS)
    )


def report(cfg: DictConfig, experiments_dir: Path | None = None) -> list[Path]:
    """Write the tables and figures of ``cfg.paper`` (or of every paper for ``paper=all``); returns them.

    Specs come from ``experiments_dir`` (default ``cfg.experiments_dir``, else this checkout's
    experiments/). Output goes to ``experiments/<paper>/`` unless ``out_dir`` is set: then to ``out_dir``
    for one paper, and to ``out_dir/<paper>/`` for ``paper=all``; the results beside it, in ``results/``.
    """
    experiments_dir = Path(experiments_dir or cfg.get("experiments_dir") or REPO_ROOT / "experiments")
    valid = papers(experiments_dir)
    if cfg.paper == ALL:
        chosen = valid
    elif cfg.paper in valid:
        chosen = [cfg.paper]
    else:
        raise ValueError(
            f"no tables.yaml or figures.yaml for paper={cfg.paper!r} in {experiments_dir}; "
            f"valid: {', '.join([ALL, *valid])}"
        )
    # smoke runs test code paths on tiny random models: their numbers never enter a paper's own tables
    skip_scales = tuple(cfg.get("skip_scales") or ())
    finished = collect_runs(cfg.runs_dir, skip_scales=skip_scales)  # one walk of runs_dir for every paper
    folders = find_runs(cfg.runs_dir, skip_scales=skip_scales)
    written: list[Path] = []
    for paper in chosen:
        paper_dir = experiments_dir / paper
        if cfg.get("out_dir"):
            out_dir = Path(cfg.out_dir) / paper if cfg.paper == ALL else Path(cfg.out_dir)
        else:
            out_dir = paper_dir
        keep = wanted(paper_dir)
        fresh = from_run_folders(finished, folders, keep)
        stored = refresh(out_dir / RESULTS_DIR, fresh, keep, skip_scales)
        if (paper_dir / "tables.yaml").exists():
            if stored.runs.empty:  # a fresh checkout without results: rewriting would blank measured tables
                log.warning(
                    "no finished %s runs under %s and no results in %s: its tables are left as they are "
                    "(make reproduce-%s makes them)",
                    paper,
                    cfg.runs_dir,
                    out_dir / RESULTS_DIR,
                    paper,
                )
            else:
                runs = latest_per_cell(stored.runs)
                written += write_tables(runs, paper_dir, out_dir, stored.per_query)
        if (paper_dir / "figures.yaml").exists():
            figures = paper_dir / "figures.yaml"
            written += draw_figures(stored.figure_runs(), figures, out_dir, log_of=stored.log)
            written += draw_rounds_of(figures, stored.stage_records(), out_dir)
    for path in written:
        print(path)
    return written


@hydra.main(config_path=str(CONFIG_DIR), config_name="report", version_base="1.3")
def main(cfg: DictConfig) -> None:
    report(cfg)


if __name__ == "__main__":
    check_overrides(sys.argv[1:])
    main()
