"""Entry point: rebuild papers' tables and figures from run folders; reruns nothing.

python -m rankrl.report                 # every paper under experiments/ with a tables.yaml or figures.yaml
python -m rankrl.report paper=rankr1    # one paper

Tables come from finished runs (metrics.json, see rankrl.report.tables); figures from training logs
(train_log.jsonl, see rankrl.report.figures), so a run still training already shows in its figures; round
figures (a figures.yaml's ``rounds:``) from the finished stages of a pipeline (see rankrl.report.rounds).
A paper without any finished run keeps its tables, and a figure without its runs is not drawn, so running
this in a fresh checkout does not blank what is committed.
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


def report(cfg: DictConfig, experiments_dir: Path = REPO_ROOT / "experiments") -> list[Path]:
    """Write the tables and figures of ``cfg.paper`` (or of every paper for ``paper=all``).

    Output goes to ``experiments/<paper>/`` unless ``out_dir`` is set: then to ``out_dir`` for one paper,
    and to ``out_dir/<paper>/`` for ``paper=all``.
    """
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
    written: list[Path] = []
    run_folders = None
    for paper in chosen:
        paper_dir = experiments_dir / paper
        if cfg.get("out_dir"):
            out_dir = Path(cfg.out_dir) / paper if cfg.paper == ALL else Path(cfg.out_dir)
        else:
            out_dir = paper_dir
        if (paper_dir / "tables.yaml").exists():
            runs = latest_per_cell(collect_runs(cfg.runs_dir, paper=paper, skip_scales=skip_scales))
            if runs.empty:  # a fresh checkout: rewriting would blank the committed, measured tables
                log.warning(
                    "no finished %s runs under %s: its tables are left as they are "
                    "(make reproduce-%s makes them)",
                    paper,
                    cfg.runs_dir,
                    paper,
                )
            else:
                written += write_tables(runs, paper_dir, out_dir)
        if (paper_dir / "figures.yaml").exists():
            if run_folders is None:  # one walk of runs_dir for every paper
                run_folders = find_runs(cfg.runs_dir, skip_scales=skip_scales)
            written += draw_figures(run_folders, paper_dir / "figures.yaml", out_dir)
            written += draw_rounds_of(paper_dir / "figures.yaml", cfg.runs_dir, out_dir, skip_scales)
    for path in written:
        print(path)
    return written


@hydra.main(config_path=str(CONFIG_DIR), config_name="report", version_base="1.3")
def main(cfg: DictConfig) -> None:
    report(cfg)


if __name__ == "__main__":
    check_overrides(sys.argv[1:])
    main()
