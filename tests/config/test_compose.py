"""Every config composes under both profiles; bad overrides name the valid choices."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from tests.conftest import compose, experiment_names

EXPERIMENTS = experiment_names()


def test_there_are_experiments():
    # glob(*) would silently miss nested folders (STYLE.md): count what rglob finds instead
    assert len(EXPERIMENTS) >= 5, EXPERIMENTS


@pytest.mark.parametrize("profile", ["cpu", "paper"])
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes(experiment: str, profile: str):
    for entry in ("train", "evaluate") if profile == "cpu" else ("train",):
        cfg = compose(entry, [f"experiment={experiment}", f"profile={profile}"])
        # a nested experiment without `# @package _global_` would land under `experiment:` unused
        assert "experiment" not in cfg, f"{experiment} is missing '# @package _global_'"
        assert cfg.scale == profile
        assert cfg.paper, f"{experiment} does not say which paper it belongs to"
        assert cfg.experiment_name == experiment
        OmegaConf.resolve(cfg.trainer)
        trainer = instantiate(cfg.trainer, _convert_="all")
        assert trainer.rows_per_step == trainer.prompts_per_step * trainer.group_size
        get_class(cfg.task._target_)  # the task class imports
        if profile == "cpu":  # every experiment dry-runs on the CPU with a local model
            assert cfg.model.name in {"smollm2-135m", "tiny"} and cfg.rollout.name == "hf"


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "dapo"])
def test_trainer_variants_instantiate(name: str):
    trainer = instantiate(compose("train", [f"trainer={name}"]).trainer, _convert_="all")
    assert trainer.loss_agg == name


def test_bad_trainer_value_is_rejected():
    cfg = compose("train", ["trainer.loss_agg=mean_of_nothing"])
    with pytest.raises(Exception, match="grpo"):
        instantiate(cfg.trainer, _convert_="all")


@pytest.mark.parametrize(
    "override,choice",
    [
        ("model=gpt-9", "smollm2-135m"),
        ("task=nope", "vowels"),
        ("experiment=rankr1/nope", "rankr1/bm25_dl19"),
    ],
)
def test_bad_override_lists_valid_choices(override: str, choice: str):
    out = subprocess.run(
        [sys.executable, "-m", "rankrl.train", "--cfg", "job", override], capture_output=True, text=True
    )
    assert out.returncode != 0
    assert "Valid choices" in out.stderr and choice in out.stderr, out.stderr[-2000:]


@pytest.mark.parametrize("experiment", EXPERIMENTS[:3])
def test_cfg_job_from_the_command_line(experiment: str):
    out = subprocess.run(
        [sys.executable, "-m", "rankrl.train", "--cfg", "job", f"experiment={experiment}"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"experiment_name: {experiment}" in out.stdout


def test_data_dir_override_reaches_every_entry_point(tmp_path):
    for entry in ("train", "evaluate"):
        cfg = compose(entry, [f"paths.data_dir={tmp_path}", "experiment=rankr1/bm25_dl19"])
        assert cfg.task.data_dir == str(tmp_path)
