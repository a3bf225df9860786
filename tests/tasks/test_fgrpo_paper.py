"""F-GRPO's paper profile as the reproduce script composes it: which learning rate reaches which pipeline
stage, and which data each benchmark reads at each scale."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from rankrl.pipeline import expand
from tests.conftest import compose


def stage_configs(overrides: list[str]) -> dict[str, object]:
    """Each pipeline stage's config, composed as rankrl.pipeline runs it (the stage's overrides first, the
    command line's after them)."""
    cfg = compose("train", overrides)
    stages = expand(OmegaConf.to_container(cfg.pipeline, resolve=True))
    return {s.name: compose(s.entry, [*s.overrides, *overrides]) for s in stages}


@pytest.mark.parametrize("benchmark", ["musique", "hotpotqa"])
def test_the_2b_models_qa_learning_rate_reaches_only_the_grpo_stage(benchmark: str):
    """Appendix E.2: GRPO at 5e-6, 2e-6 for Qwen3.5-2B on QA. experiments/fgrpo/reproduce.sh passes
    schedule.grpo_lr=2e-6 to the F-GRPO and GRPO pipelines; their SFT stage keeps the SFT rate."""
    base = ["experiment=fgrpo/fgrpo", "profile=paper", "model=qwen3.5-2b", f"benchmark={benchmark}"]
    default = stage_configs(base)
    assert default["fgrpo"].trainer.lr == 5e-6
    qa = stage_configs([*base, "schedule.grpo_lr=2e-6"])
    assert qa["fgrpo"].trainer.lr == 2e-6
    assert qa["sft"].trainer.lr == default["sft"].trainer.lr == qa["sft"].schedule.sft_lr != 2e-6
    grpo = stage_configs(["experiment=fgrpo/grpo", *base[1:], "schedule.grpo_lr=2e-6"])
    assert grpo["grpo"].trainer.lr == 2e-6


def test_the_cpu_profile_keeps_its_rates():
    stages = stage_configs(["experiment=fgrpo/fgrpo", "profile=cpu"])
    assert (stages["sft"].trainer.lr, stages["fgrpo"].trainer.lr) == (1e-4, 1e-5)
