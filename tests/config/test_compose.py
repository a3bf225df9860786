"""Every config composes under both profiles; bad overrides name the valid choices."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hydra.utils import get_class

from rankrl import app
from rankrl.errors import ConfigError
from rankrl.models import PAPER_CONFIGS
from rankrl.rl.config import build_trainer_config, eval_sampling
from tests.conftest import compose, experiment_names

EXPERIMENTS = experiment_names()


def _experiment_text(name: str) -> str:
    from rankrl.config import CONFIG_DIR

    return (CONFIG_DIR / "experiment" / f"{name}.yaml").read_text()


PIPELINES = [e for e in EXPERIMENTS if "\npipeline:" in _experiment_text(e)]


def test_there_are_experiments():
    # glob(*) would silently miss nested folders (STYLE.md): count what rglob finds instead; the pipelines
    # too, which parametrize a test of their own (an empty list would run none of it)
    assert len(EXPERIMENTS) >= 5, EXPERIMENTS
    assert len(PIPELINES) >= 5, PIPELINES


@pytest.mark.parametrize("profile", ["cpu", "paper", "smoke"])
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_composes(experiment: str, profile: str):
    for entry in ("train", "evaluate") if profile == "cpu" else ("train",):
        cfg = compose(entry, [f"experiment={experiment}", f"profile={profile}"])
        # a nested experiment without `# @package _global_` would land under `experiment:` unused
        assert "experiment" not in cfg, f"{experiment} is missing '# @package _global_'"
        assert cfg.scale == profile
        # core experiments exercise the engine; every other one belongs to a paper
        assert cfg.paper or experiment.startswith("core/"), (
            f"{experiment} does not say which paper it belongs to"
        )
        # the run folder is named after the experiment file, then any axis the experiment sweeps over
        # in place of copies of itself (grape/raw_query/clip-vit-b16), or, where the benchmark is the axis
        # and the run folders keep the names they had as copies, its short name (fgrpo/zeroshot_movielens)
        short = cfg.benchmark.get("short", cfg.benchmark.name)
        assert cfg.experiment_name in (experiment, f"{experiment}_{short}") or cfg.experiment_name.startswith(
            experiment + "/"
        )
        build_trainer_config(cfg.trainer)  # the trainer settings pass their own checks
        get_class(cfg.task._target_)  # the task class imports
        eval_sampling(cfg)  # the evaluation node is typed too
        if profile == "cpu":  # every experiment runs on the CPU with a local model and vLLM's CPU engine
            assert cfg.model.name in {"smollm2-135m", "tiny"} and cfg.rollout.name == "vllm"
        if profile == "smoke" and not experiment.startswith("core/"):
            # the paper's model name and settings (LoRA, sampling), a tiny random model of its architecture
            paper_cfg = compose(entry, [f"experiment={experiment}", "profile=paper"])
            assert cfg.model.name == paper_cfg.model.name and cfg.model.lora == paper_cfg.model.lora
            assert cfg.model.path.endswith(f"/tiny-{cfg.model.name}") and cfg.rollout.name == "vllm"
            assert cfg.model.name in PAPER_CONFIGS or not app.task_uses_model(cfg)


@pytest.mark.parametrize(
    "experiment,benchmarks",
    [
        *(
            (f"fgrpo/{method}", ("movielens-100k", "lastfm", "hotpotqa", "musique"))
            for method in ("zeroshot", "twostep", "fgrpo", "grpo", "decoupled")
        ),
        *((f"rankr1/{method}", ("dl19", "dl20")) for method in ("bm25", "setwise", "rankr1_zeroshot")),
    ],
)
def test_a_benchmark_axis_keeps_the_run_names_of_the_copies_it_replaced(experiment: str, benchmarks: tuple):
    """One file per method, the benchmark an override: each benchmark's runs keep the folder and the name
    in metrics.json of the file per benchmark it replaced (fgrpo/zeroshot_movielens), which the tables,
    earlier runs and GRPO's start from F-GRPO's SFT stage read."""
    from omegaconf import OmegaConf

    from rankrl.config import CONFIG_DIR

    for benchmark in benchmarks:
        cfg = compose("train", [f"experiment={experiment}", f"benchmark={benchmark}"])
        short = benchmark.removesuffix("-100k")
        assert cfg.experiment_name == f"{experiment}_{short}"
        if experiment == "fgrpo/grpo":
            (stage,) = OmegaConf.to_container(cfg.pipeline, resolve=True)
            assert stage["overrides"][0] == f"init_from=fgrpo/fgrpo_{short}/sft"  # that benchmark's SFT
    hydra = OmegaConf.load(CONFIG_DIR / "experiment" / f"{experiment}.yaml").get("hydra")
    if hydra:  # `-m experiment=<file>` sweeps the benchmarks that had a file each
        assert hydra.sweeper.params.benchmark.split(",") == list(benchmarks)


def test_rows_per_step_counts_every_completion_of_a_step():
    from rankrl.rl.config import TrainerConfig

    # B=3 prompts x G=5 completions: 15 completions scored per step (a concrete number, not the formula)
    assert TrainerConfig(prompts_per_step=3, group_size=5).rows_per_step == 15
    assert TrainerConfig(prompts_per_step=1, group_size=8).rows_per_step == 8


@pytest.mark.parametrize(
    "name,kind", [("grpo", "grpo"), ("dr_grpo", "grpo"), ("dapo", "grpo"), ("sft", "sft")]
)
def test_trainer_variants_build(name: str, kind: str):
    trainer = build_trainer_config(compose("train", [f"trainer={name}"]).trainer)
    assert trainer.kind == kind
    if kind == "grpo":
        assert trainer.loss_agg == name


def test_trainer_defaults_have_one_source():
    """The YAML adds no default of its own: the composed GRPO node equals the dataclass's defaults."""
    from rankrl.rl.config import TrainerConfig

    # profile=paper has no scale file for the synthetic task, so nothing overrides the defaults
    assert (
        build_trainer_config(compose("train", ["trainer=grpo", "profile=paper"]).trainer) == TrainerConfig()
    )


def test_bad_trainer_value_is_rejected():
    cfg = compose("train", ["trainer.loss_agg=mean_of_nothing"])
    with pytest.raises(ConfigError, match="grpo"):
        build_trainer_config(cfg.trainer)


@pytest.mark.parametrize(
    "override,said",
    [
        ("trainer.lr=abc", "trainer.lr: Value 'abc' of type 'str' could not be converted to Float"),
        ("seed=abc", "seed: expected int, got 'abc'"),
        ("trainer.group_size=0", "trainer.group_size must be >= 1, got 0"),
        ("evaluation.sampling.max_new_tokens=many", "evaluation.sampling.max_new_tokens: expected int"),
    ],
)
def test_a_wrong_value_ends_in_one_line_without_traceback(tmp_path, override: str, said: str):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rankrl.train",
            "experiment=rankr1/rankr1_grpo",
            override,
            "logger=none",
            f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and said in errors[0], out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    # found before anything was built: no model loaded, no rollout engine started (vLLM logs its start)
    assert "vllm" not in out.stderr.lower(), out.stderr[-2000:]
    assert not (tmp_path / "train_log.jsonl").exists()


@pytest.mark.parametrize(
    "override,choice",
    [
        ("model=gpt-9", "smollm2-135m"),
        ("task=nope", "vowels"),
        ("experiment=rankr1/nope", "rankr1/bm25"),
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
        cfg = compose(entry, [f"paths.data_dir={tmp_path}", "experiment=rankr1/bm25"])
        assert cfg.task.data_dir == str(tmp_path)


def test_a_trainer_the_task_cannot_use_stops_before_anything_loads():
    from rankrl.config import check_trainable

    with pytest.raises(ConfigError, match="evaluation-only: run `python -m rankrl.evaluate`"):
        check_trainable(compose("train", ["experiment=grape/cpu_raw_query"]))
    with pytest.raises(ConfigError, match="does not train with grpo; it trains with: trainer=sft"):
        check_trainable(compose("train", ["experiment=fgrpo/twostep", "trainer=grpo"]))
    check_trainable(compose("train", ["experiment=fgrpo/twostep", "trainer=sft"]))


@pytest.mark.parametrize("experiment", [e for e in EXPERIMENTS if e not in PIPELINES])
def test_every_training_experiment_passes_the_checks_made_before_a_model_loads(experiment: str):
    """What `python -m rankrl.train experiment=<e>` checks before torch loads, for every single-stage
    experiment that trains (cogr/control_sft once declared one shared role and trained the default policy
    role, which it does not have: it stopped at start-up)."""
    from rankrl.config import check_config, check_trainable

    cfg = compose("train", [f"experiment={experiment}"])
    try:
        check_trainable(cfg)
    except ConfigError as err:  # an experiment `rankrl.evaluate` runs (its task does not train this way)
        assert "evaluation-only" in str(err) or "does not train with" in str(err)
        return
    check_config(cfg, train=True)


@pytest.mark.parametrize("experiment", PIPELINES)
def test_every_pipeline_stage_trains_what_its_task_trains(experiment: str):
    """run_pipeline checks every stage's config before its first stage; here for every pipeline the suite
    ships."""
    from omegaconf import OmegaConf

    from rankrl.config import check_config
    from rankrl.pipeline import expand, plan, stage_role

    cfg = compose("train", [f"experiment={experiment}"])
    roles = list(cfg.roles) if cfg.get("roles") else ["policy"]
    stages = plan(expand(OmegaConf.to_container(cfg.pipeline, resolve=True)), roles)
    assert stages
    for stage in stages:
        check_config(
            compose("train", [*stage.overrides, f"experiment={experiment}", *stage_role(stage)]),
            train=stage.entry == "train",
        )
