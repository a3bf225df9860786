"""Each paper's settings table (experiments/<paper>/paper_settings.yaml) holds at profile=paper, and the
committed paper_settings.md is what rankrl.report.paper_settings writes from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankrl.errors import ConfigError
from rankrl.report.paper_settings import (
    TABLE_FILE,
    Composer,
    check_rows,
    load_settings,
    render,
    settings_files,
    values_equal,
    write_table,
)

PAPERS = settings_files()
COMPOSER = Composer()  # one cache of composed configs for the whole module (configs are only read)


def test_there_are_settings_tables():
    assert {"rankr1", "grape"} <= set(PAPERS), PAPERS


@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_every_row_holds_at_paper_profile(paper: str):
    """Every key of every row composes to the row's "ours" under each of its experiments at profile=paper,
    every test a row names exists, and every experiment of the paper is in a row or says why not."""
    problems = check_rows(load_settings(PAPERS[paper]), COMPOSER)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("paper", sorted(PAPERS))
def test_the_committed_table_is_what_the_generator_writes(paper: str):
    committed = PAPERS[paper].with_name(TABLE_FILE)
    assert committed.is_file(), f"no {committed}: run make settings"
    assert committed.read_text() == render(load_settings(PAPERS[paper])), (
        f"{committed} is stale: make settings"
    )


# ---- the machinery, on small tables of real experiments ---------------------------------------------------


def _table(tmp_path: Path, rows: str, paper: str = "nopaper", extra: str = "") -> Path:
    folder = tmp_path / paper
    folder.mkdir(parents=True)
    path = folder / "paper_settings.yaml"
    path.write_text(f"title: a test table\n{extra}settings:\n{rows}")
    return path


LR_ROW = """\
  - section: GRPO
    setting: learning rate
    keys: trainer.lr
    experiments: [rankr1/rankr1_grpo]
    paper: 1.0e-5
    source: "a quote"
    ours: {ours}
"""


def test_a_row_whose_config_drifted_names_the_key_and_both_values(tmp_path: Path):
    lr = COMPOSER.row_config(
        load_settings(_table(tmp_path, LR_ROW.format(ours=1e-5))).rows[0], "rankr1/rankr1_grpo"
    )
    assert lr.trainer.lr == 1e-5  # the real paper profile, so the next row is false
    path = _table(tmp_path / "b", LR_ROW.format(ours="3.0e-5") + "    why: a reason\n")
    (problem,) = check_rows(load_settings(path), COMPOSER)
    assert "trainer.lr composes to 1e-05" in problem and "says 3e-05" in problem
    with pytest.raises(ConfigError, match="1 row"):
        write_table(path, COMPOSER)
    assert not path.with_name(TABLE_FILE).exists()  # a false table is never written


def test_a_true_row_is_written_as_a_table(tmp_path: Path):
    path = _table(tmp_path, LR_ROW.format(ours="1.0e-5"))
    assert check_rows(load_settings(path), COMPOSER) == []
    text = write_table(path, COMPOSER).read_text()
    assert "| learning rate | 1e-05 | a quote | 1e-05 | `trainer.lr` @ rankr1/rankr1_grpo |  |" in text
    assert "1 settings: 1 as the paper, 0 differ" in text and "0 read from words" in text


def test_a_key_the_config_lacks_is_reported(tmp_path: Path):
    row = LR_ROW.format(ours=1e-5).replace("trainer.lr", "trainer.no_such_key")
    (problem,) = check_rows(load_settings(_table(tmp_path, row)), COMPOSER)
    assert "has no key trainer.no_such_key" in problem


@pytest.mark.parametrize(
    "row,message",
    [
        (LR_ROW.format(ours="2e-5"), "differs from the paper: say why"),
        (
            LR_ROW.format(ours=1e-5).replace("paper: 1.0e-5", "paper: not stated"),
            "does not state it: say why",
        ),
        (LR_ROW.format(ours=1e-5).replace("    keys: trainer.lr\n", ""), "names the `test`"),
        (LR_ROW.format(ours=1e-5) + "    reading: true\n", "is a reading of the paper: say why"),
        (LR_ROW.format(ours=1e-5) + "    unit: steps\n", "unknown field"),
        (LR_ROW.format(ours=1e-5).replace('    source: "a quote"\n', ""), "missing source"),
    ],
)
def test_a_malformed_row_stops_naming_it(tmp_path: Path, row: str, message: str):
    with pytest.raises(ConfigError, match=message):
        load_settings(_table(tmp_path, row))


def test_a_row_of_the_code_must_name_a_test_that_exists(tmp_path: Path):
    row = LR_ROW.format(ours=1e-5).replace("    keys: trainer.lr\n", "    test: {test}\n")
    real = "tests/config/test_paper_settings.py::test_a_row_of_the_code_must_name_a_test_that_exists"
    assert check_rows(load_settings(_table(tmp_path, row.format(test=real))), COMPOSER) == []
    (problem,) = check_rows(load_settings(_table(tmp_path / "b", row.format(test=real + "_not"))), COMPOSER)
    assert "no test" in problem


def test_an_experiment_of_the_paper_in_no_row_is_reported(tmp_path: Path):
    # a table for the paper rankr1 that names one of its experiments: every other one is reported
    not_in_table = "not_in_table:\n  rankr1/bm25: no model\n"
    problems = check_rows(load_settings(_table(tmp_path, LR_ROW.format(ours=1e-5), "rankr1", not_in_table)))
    missing = {p.split()[1] for p in problems}
    assert (
        "rankr1/setwise" in missing and "rankr1/rankr1_grpo" not in missing and "rankr1/bm25" not in missing
    )


def test_a_stage_row_composes_as_the_pipeline_runs_that_stage(tmp_path: Path):
    """The warm start's SFT stage of a pipeline: its stage overrides (trainer=sft, lr 2e-5) apply."""
    row = """\
  - section: SFT
    setting: warm-start learning rate
    keys: [trainer.lr, trainer._target_]
    experiments: [rankr1/warmstart_grpo_dl19]
    stage: warmstart
    paper: not stated
    source: not in the paper
    ours: {ours}
    why: a CPU-scale stage
"""
    both_keys = check_rows(load_settings(_table(tmp_path, row.format(ours=2e-5))), COMPOSER)
    assert len(both_keys) == 1 and "trainer._target_ composes to rankrl.rl.steps.SFTStep" in both_keys[0]
    (missing,) = check_rows(
        load_settings(_table(tmp_path / "b", row.format(ours=1).replace("warmstart\n", "x\n")))
    )
    assert "has no pipeline stage 'x'" in missing


def test_values_compare_as_a_reader_means_them():
    assert values_equal(1e-5, "1.0e-5") and values_equal(2048, 2048.0)
    assert values_equal(["q_proj", "v_proj"], ("q_proj", "v_proj"))
    assert not values_equal(["v_proj", "q_proj"], ["q_proj", "v_proj"])
    assert not values_equal(True, 1) and not values_equal(None, "null") and values_equal(None, None)
    assert values_equal({"r": 16, "target_modules": ["q_proj"]}, {"r": 16.0, "target_modules": ("q_proj",)})
