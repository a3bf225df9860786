"""W&B dashboards (rankrl.report.dashboard), offline: each paper's workspace builds with wandb-workspaces from
its report files; --check-runs finds empty panels; without a login the command says how to log in.

The no-empty-panel check against real offline runs of every paper (tiny Qwen-shaped models, the real vLLM
engine) runs in CI after `make smoke-paper` (Makefile: smoke-paper)."""

from __future__ import annotations

import json

import pytest

from rankrl.report import dashboard


@pytest.mark.parametrize("paper", ["rankr1", "fgrpo", "grape", "cogr"])
def test_each_paper_has_a_workspace_of_its_tables_and_figures(paper):
    spec = dashboard.workspace_spec(paper)
    kinds = {panel["kind"] for section in spec["sections"] for panel in section["panels"]}
    assert {"bar", "line"} <= kinds, kinds  # result tables as bars, training curves as lines
    keys = dashboard.panel_keys(spec)
    assert any(k.startswith("eval/") for k in keys) and "reward/mean" in keys
    workspace = dashboard.build_workspace(spec, entity="someone")  # wandb-workspaces accepts every panel
    assert len(workspace.sections) == len(spec["sections"]) and workspace.name == f"rankrl: {paper}"


def test_a_figure_of_each_seed_is_a_line_per_run_on_the_dashboard_too():
    """F-GRPO's control curves (figures.yaml ``seeds: each``) are not averaged over seeds there either."""
    spec = dashboard.workspace_spec("fgrpo")
    section = next(s for s in spec["sections"] if s["name"].startswith("F-GRPO's positive control"))
    assert all(panel.get("each_seed") for panel in section["panels"])
    averaged = next(s for s in spec["sections"] if s["name"].startswith("F-GRPO vs GRPO on MovieLens"))
    assert not any(panel.get("each_seed") for panel in averaged["panels"])
    workspace = dashboard.build_workspace(spec, entity="someone")
    built = workspace.sections[spec["sections"].index(section)].panels[0]
    assert not built.groupby
    mean = workspace.sections[spec["sections"].index(averaged)].panels[0]
    assert mean.groupby and mean.groupby_rangefunc == "minmax"


def test_dry_run_prints_four_workspaces(capsys):
    assert dashboard.main(["paper=all", "--dry-run"]) == 0
    assert capsys.readouterr().out.count("name: 'rankrl: ") == 4


def test_unknown_paper_and_missing_login_end_in_one_line(capsys, monkeypatch, tmp_path):
    assert dashboard.main(["paper=nope"]) == 2
    assert "choose one of all, cogr, fgrpo, grape, rankr1" in capsys.readouterr().err
    monkeypatch.setenv("WANDB_API_KEY", "")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path))  # no ~/.netrc key is read from here
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    assert dashboard.main(["paper=grape"]) == 2
    assert "wandb login" in capsys.readouterr().err


def test_check_runs_names_what_no_run_logged(tmp_path):
    spec = {
        "paper": "p",
        "sections": [{"name": "s", "panels": [{"kind": "line", "title": "t", "keys": ["reward/mean", "x"]}]}],
    }
    assert dashboard.empty_panels(spec, tmp_path) == [f"no W&B run of p under {tmp_path}"]
    run = tmp_path / "run"
    (run / "wandb" / "offline-run-1").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"paper": "p", "metrics": {"R@1": 0.5}}))
    (run / "train_log.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.1}) + "\n")
    assert dashboard.empty_panels(spec, tmp_path) == ["x"]
    spec["sections"][0]["panels"][0]["keys"] = ["reward/mean", "eval/R@1"]
    assert dashboard.empty_panels(spec, tmp_path) == []


def test_check_runs_checks_a_one_scale_table_only_against_runs_of_that_scale(tmp_path):
    """The CPU-scale controls' tables (``scale: cpu``) have no smoke runs: the smoke's check skips them, and a
    CPU run's folder is checked for them."""
    panel = {"kind": "bar", "title": "a", "keys": ["eval/a"]}
    control = {"name": "control", "scale": "cpu", "panels": [panel]}
    spec = {"paper": "p", "sections": [control]}
    run = tmp_path / "run"
    (run / "wandb" / "offline-run-1").mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"paper": "p", "scale": "smoke", "metrics": {"R@1": 0.5}}))
    assert dashboard.empty_panels(spec, tmp_path) == []
    (run / "metrics.json").write_text(json.dumps({"paper": "p", "scale": "cpu", "metrics": {"R@1": 0.5}}))
    assert dashboard.empty_panels(spec, tmp_path) == ["eval/a"]
