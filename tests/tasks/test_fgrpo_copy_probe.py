"""experiments/fgrpo/copy_probe.py, the F-GRPO control's diagnostic: it reads the probability of the gold's
id after ``<RANK>`` on the real (tiny) model and SmolLM2 tokenizer, refuses a target whose first ranked id
is not the gold, and its committed table is what its committed CSV renders."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from tests.tasks.test_fgrpo import toy_task

PROBE = Path(__file__).resolve().parents[2] / "experiments" / "fgrpo" / "copy_probe.py"


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("copy_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_probe_reads_a_distribution_over_the_pools_ids_on_the_real_model(probe, model_dir):
    from rankrl.models import load_policy

    model, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    task = toy_task(id_style="letters", construction="hint")  # the control's rung, one token an id
    pools = task.train_pools()[:3]
    examples = task.sft_examples_for(pools, "gold_fixed")
    p_gold, gold_top = probe.gold_at_rank_first(model, tok, examples, pools)
    assert 0.0 < p_gold < 1.0 and gold_top in (0.0, 1 / 3, 2 / 3, 1.0)
    # a target that ranks another id first is refused, not read as if it were the gold's probability
    pool = pools[0]
    other = next(c.key for c in pool.candidates if c.key not in pool.gold)
    wrong = dataclasses.replace(
        examples[0], completion=examples[0].completion.replace("<RANK>", f"<RANK>{pool.by_key[other].label} ")
    )
    with pytest.raises(ValueError, match="not the gold's id"):
        probe.gold_at_rank_first(model, tok, [wrong], [pool])


@pytest.mark.parametrize("name", ["copy_probe", "copy_probe_selection"])
def test_committed_tables_are_the_committed_readings(probe, name):
    readings = pd.read_csv(PROBE.with_name(f"{name}.csv"))
    assert set(readings["split"]) <= {"train", "eval"} and readings["p_gold"].between(0, 1).all()
    table = probe.readings_table(readings, f"{name}.csv")
    assert table == PROBE.with_name(f"{name}.md").read_text()


def test_readings_already_in_the_csv_are_kept_in_the_order_asked(probe, tmp_path):
    out = tmp_path / "probe.csv"
    assert probe.kept_readings(out, ["a"], ["train"]) == {}  # no CSV yet: nothing kept
    probe.write_readings(
        [
            {"label": "A", "run": "a", "split": "eval", "p_gold": 0.2, "gold_top": 0.1},
            {"label": "A", "run": "a", "split": "train", "p_gold": 0.3, "gold_top": 0.2},
            {"label": "B", "run": "b", "split": "train", "p_gold": 0.9, "gold_top": 1.0},
        ],
        out,
    )
    kept = probe.kept_readings(out, ["b", "a", "c"], ["train", "eval"])
    a, b, c = (kept[run, "gold_fixed"] for run in "abc")  # readings from before --target forced gold_fixed
    assert [r["split"] for r in a] == ["train", "eval"] and a[0]["p_gold"] == 0.3
    assert [r["split"] for r in b] == ["train"] and c == []  # b lacks eval: read again
    # a reading keeps the slate it forced: asked for another target, nothing is kept and it is read again
    assert probe.kept_readings(out, ["a"], ["train"], ["gold_first"]) == {("a", "gold_first"): []}
    first = {
        "label": "A'",
        "run": "a",
        "split": "train",
        "p_gold": 0.7,
        "gold_top": 0.6,
        "target": "gold_first",
    }
    probe.write_readings(probe.kept_readings(out, ["a"], ["train"])["a", "gold_fixed"] + [first], out)
    both = probe.kept_readings(out, ["a", "a"], ["train"], ["gold_fixed", "gold_first"])
    assert [r["label"] for r in both["a", "gold_fixed"]] == ["A"]  # one run, two targets: two readings
    assert [r["p_gold"] for r in both["a", "gold_first"]] == [0.7]
    assert "| gold_first " in out.with_suffix(".md").read_text()


def test_with_no_run_folder_present_it_says_so_before_loading_anything(probe, tmp_path, monkeypatch, capsys):
    """The task comes from the first run folder present (the rows of the others may be kept in --out); with
    none present the command stops with the reason, not a missing-file traceback."""
    import sys

    monkeypatch.setattr(
        sys, "argv", ["copy_probe.py", str(tmp_path / "gone"), "--out", str(tmp_path / "p.csv")]
    )
    with pytest.raises(SystemExit):
        probe.main()
    assert "none of the run folders holds a config.yaml" in capsys.readouterr().err
