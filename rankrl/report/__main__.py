"""Entry point: rebuild a paper's tables from finished runs; reruns nothing.

python -m rankrl.report paper=rankr1
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import rankrl.config  # noqa: F401
from rankrl.config import CONFIG_DIR, check_overrides, REPO_ROOT
from rankrl.report.collect import collect_runs, latest_per_cell
from rankrl.report.tables import write_tables

log = logging.getLogger(__name__)


def report(cfg: DictConfig) -> list[Path]:
    paper_dir = REPO_ROOT / "experiments" / cfg.paper
    if not (paper_dir / "tables.yaml").exists():
        valid = sorted(p.parent.name for p in (REPO_ROOT / "experiments").glob("*/tables.yaml"))
        raise ValueError(f"no tables are defined for paper={cfg.paper!r}; valid: {', '.join(valid)}")
    runs = latest_per_cell(collect_runs(cfg.runs_dir, paper=cfg.paper))
    written = write_tables(runs, paper_dir, Path(cfg.out_dir))
    for path in written:
        print(path)
    return written


@hydra.main(config_path=str(CONFIG_DIR), config_name="report", version_base="1.3")
def main(cfg: DictConfig) -> None:
    report(cfg)


if __name__ == "__main__":
    check_overrides(sys.argv[1:])
    main()
