"""One home for the run-folder layout and for launching or skipping a run (rankrl/run_folders.py): Hydra's
folders agree with it, its CLI answers what a real tiny training run wrote, experiments/lib.sh skips and
stops on its answers, and no script spells a run folder itself."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rankrl import run_folders as rf
from rankrl.config import CONFIG_DIR, REPO_ROOT
from tests.conftest import compose

# every script under experiments/ but a GPU speed check that writes two runs of its own into one folder of
# its own (engine_check), outside the suite's layout (issue 42: left to the engine check's owner)
NOT_THE_LAYOUTS = {"experiments/engine/gpu_speed.sh"}
SCRIPTS = sorted(
    p
    for p in (REPO_ROOT / "experiments").rglob("*.sh")
    if str(p.relative_to(REPO_ROOT)) not in NOT_THE_LAYOUTS
)


def _cli(*args: str, env: dict | None = None, cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rankrl.run_folders", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )


def _bash(script: str, env: dict) -> subprocess.CompletedProcess:
    """``script`` after sourcing experiments/lib.sh, as a paper script runs it (from the repository root)."""
    return subprocess.run(
        ["bash", "-c", f"source experiments/lib.sh\n{script}"],
        cwd=REPO_ROOT,
        env={**os.environ, "PY": sys.executable, **env},
        capture_output=True,
        text=True,
    )


# -------------------------------------------------------------------------------- Hydra agrees with it


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=tiny"],
        ["experiment=rankr1/bm25", "benchmark=dl20", "profile=smoke", "seed=2"],
        ["experiment=grape/grape_rank", "profile=paper", "retriever=clip-vit-l14"],
        ["experiment=cogr/cogr", "paths.log_dir=/elsewhere/logs"],
    ],
)
def test_hydra_run_and_sweep_folders_are_the_modules(overrides):
    cfg = compose("train", overrides, hydra_cfg=True)
    name, scale, model, seed = cfg.experiment_name, cfg.scale, cfg.model.name, cfg.seed
    assert cfg.hydra.run.dir == str(rf.run_folder(name, scale, model, seed, cfg.paths.log_dir))
    assert cfg.hydra.sweep.dir == str(rf.runs_root(name, scale, model, cfg.paths.log_dir) / rf.SWEEP_DIR)
    # a multirun point's folder: Hydra's override_dirname of the point's overrides (the experiment left out)
    point = [o for o in overrides if not o.startswith("experiment=")]
    assert Path(cfg.hydra.sweep.dir) / cfg.hydra.sweep.subdir == rf.sweep_folder(
        name, scale, model, point, cfg.paths.log_dir
    )


def test_the_default_log_folder_is_the_paths_config_and_the_makefiles_smoke_folder():
    env = {k: v for k, v in os.environ.items() if k != rf.LOG_DIR_ENV}
    out = subprocess.run(
        [sys.executable, "-c", "from tests.conftest import compose; print(compose('train').paths.log_dir)"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == str(rf.DEFAULT_LOG_DIR), out.stderr[-2000:]
    makefile = (REPO_ROOT / "Makefile").read_text()
    (smoke,) = re.findall(r"^SMOKE_LOG_DIR \?= \$\(abspath (\S+)\)$", makefile, re.M)
    assert REPO_ROOT / smoke == rf.smoke_log_dir()


@pytest.mark.parametrize("profile", sorted(p.stem for p in (CONFIG_DIR / "profile").glob("*.yaml")))
def test_a_profiles_scale_names_its_folders(profile):
    assert rf.profile_scale(profile) == compose("train", [f"profile={profile}"]).scale


# ------------------------------------------------------------------------ a real run, and what is asked


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, model_dir) -> tuple[Path, dict]:
    """One step of GRPO on the tiny model, in the folder rankrl.train chooses under a fresh log folder."""
    logs = tmp_path_factory.mktemp("logs")
    cmd = [
        sys.executable,
        "-m",
        "rankrl.train",
        "model=tiny",
        "logger=none",
        "rollout=hf",
        "trainer.max_steps=1",
        "task.num_eval_prompts=2",
        f"paths.log_dir={logs}",
    ]
    done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (metrics,) = logs.rglob(rf.METRICS_FILE)
    return logs, json.loads(metrics.read_text())


def test_the_cli_names_the_folder_a_real_training_run_wrote(tiny_run):
    logs, record = tiny_run
    identity = [f"experiment={record['experiment']}", f"model={record['model']}", f"seed={record['seed']}"]
    answered = _cli("run", *identity, f"profile={record['scale']}", f"log_dir={logs}")
    folder = Path(answered.stdout.strip())
    assert answered.returncode == 0 and (folder / rf.METRICS_FILE).exists(), answered.stderr
    assert [p.parent for p in logs.rglob(rf.METRICS_FILE)] == [folder]  # the one run, where the CLI says
    for name in (rf.CONFIG_FILE, rf.TRAIN_LOG_FILE):
        assert (folder / name).is_file(), name
    assert any((folder / rf.CHECKPOINTS_DIR).glob("step_*"))
    # the default log folder comes from RANKRL_LOG_DIR, as Hydra's paths.log_dir
    by_env = _cli("run", *identity, f"profile={record['scale']}", env={rf.LOG_DIR_ENV: str(logs)})
    assert by_env.stdout.strip() == str(folder)
    root = _cli("root", *identity[:2], f"profile={record['scale']}", f"log_dir={logs}").stdout.strip()
    assert folder.parent == Path(root)

    status = _cli("status", str(folder)).stdout.split(maxsplit=1)
    assert status == ["done", f"{folder / rf.METRICS_FILE}\n"]
    assert _cli("status", str(folder), "--force").stdout.split() == ["launch", str(folder)]


def test_init_from_names_a_finished_run_by_folder_experiment_or_stage(tiny_run, tmp_path):
    logs, record = tiny_run
    ident = {"scale": record["scale"], "model": record["model"], "seed": record["seed"], "logs": logs}
    run = rf.run_folder(record["experiment"], record["scale"], record["model"], record["seed"], logs)
    assert rf.finished_training_run(str(run), **ident) == run.resolve()
    assert rf.finished_training_run(record["experiment"], **ident) == run.resolve()
    # a pipeline's stage by its experiment name, <pipeline>/<stage>, as the stage's metrics.json names it
    pipeline = rf.run_folder("core/a_pipeline", record["scale"], record["model"], record["seed"], logs)
    pipeline.mkdir(parents=True)
    (pipeline / "sft").symlink_to(run, target_is_directory=True)
    assert rf.finished_training_run("core/a_pipeline/sft", **ident) == run.resolve()
    with pytest.raises(rf.InputMissing, match="python -m rankrl.train experiment=core/never_run seed=0"):
        rf.finished_training_run("core/never_run", **ident)

    fresh = tmp_path / "fresh"
    args = [f"profile={record['scale']}", f"model={record['model']}", f"paths.log_dir={logs}"]
    assert _cli("status", str(fresh), f"init_from={record['experiment']}", *args).stdout.startswith("launch ")
    missing = _cli("status", str(fresh), "roles.query.init_from=core/never_run", *args).stdout
    assert missing.startswith("missing init_from=core/never_run: no finished training run")


def test_lib_sh_skips_a_finished_run_and_stops_before_a_run_whose_input_is_missing(tiny_run):
    logs, record = tiny_run
    env = {"RANKRL_LOG_DIR": str(logs), "PROFILE": record["scale"], "DRY_RUN": ""}
    # the experiment file is not read: a finished run is skipped before anything starts
    skipped = _bash(f"RUN_NAME={record['experiment']} run train core/no_such_file {record['model']}", env)
    folder = rf.run_folder(record["experiment"], record["scale"], record["model"], 0, logs)
    assert skipped.returncode == 0, skipped.stderr[-2000:]
    assert (
        skipped.stdout.strip()
        == f"== {record['experiment']} ({record['model']}): done ({folder}/metrics.json)"
    )

    stopped = _bash(f"run evaluate core/no_such_file {record['model']} init_from=core/never_run", env)
    assert stopped.returncode == 2 and "== [" not in stopped.stdout, stopped.stdout  # nothing launched
    assert "python -m rankrl.train experiment=core/never_run seed=0" in stopped.stderr
    # a dry run lists the row all the same: the rows that make its input were listed, not run
    listed = _bash(f"run evaluate x/y {record['model']} init_from=core/never_run", {**env, "DRY_RUN": "1"})
    assert listed.returncode == 0 and listed.stdout.endswith("init_from=core/never_run\n"), listed.stderr


def test_a_failed_answer_stops_the_script_even_inside_an_argument():
    """An answer used as "init_from=$(run_folder ...)" is out of set -e's sight: empty, the row would start
    from the base weights; lib.sh stops the script instead."""
    out = _bash('echo "init_from=$(folders run experiment=x profile=cpu)"; echo went on', {"PROFILE": "cpu"})
    assert out.returncode != 0 and "went on" not in out.stdout and "init_from=" not in out.stdout
    assert "missing: ['model', 'seed']" in out.stderr


def test_lib_sh_asks_for_folders_as_the_scripts_print_them():
    env = {"PROFILE": "paper", "SEED": "0", rf.LOG_DIR_ENV: ""}
    out = _bash(
        "SEED=1; run_folder rankr1/rankr1_grpo_dl19 qwen2.5-3b; run_folder cogr/cogr_wands m sft_query\n"
        "sweep_folder rankr1/bm25_bright m benchmark=bright-aops benchmark=bright-pony\n"
        "runs_root fgrpo/sweep_n m\n"
        'echo "$LOG_DIR"',
        env,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "outputs/rankr1/rankr1_grpo_dl19/paper-qwen2.5-3b/seed1",
        "outputs/cogr/cogr_wands/paper-m/seed1/sft_query",
        "outputs/rankr1/bm25_bright/paper-m/sweep/benchmark=bright-aops",
        "outputs/rankr1/bm25_bright/paper-m/sweep/benchmark=bright-pony",
        "outputs/fgrpo/sweep_n/paper-m",
        "outputs",
    ]


# ------------------------------------------------------------------------------------- launch or skip


def test_launch_or_skip(tmp_path):
    run = tmp_path / "x" / "cpu-m" / "seed0"
    assert rf.launch_or_skip(run) == rf.Verdict("launch", str(run))
    run.mkdir(parents=True)
    (run / rf.METRICS_FILE).write_text("{}")
    assert rf.launch_or_skip(run) == rf.Verdict("done", str(run / rf.METRICS_FILE))
    assert rf.launch_or_skip(run, force=True).action == "launch"
    # metrics.json without checkpoints: finished, but no weights to start from
    verdict = rf.launch_or_skip(tmp_path / "y", inputs=["x"], scale="cpu", model="m", seed=0, logs=tmp_path)
    assert verdict.action == "missing" and "python -m rankrl.train experiment=x seed=0" in verdict.reason
    (run / rf.CHECKPOINTS_DIR).mkdir()
    assert rf.launch_or_skip(tmp_path / "y", inputs=["x"], scale="cpu", model="m", logs=tmp_path).action == (
        "launch"
    )
    # a finished run is done whatever became of its input
    assert rf.launch_or_skip(run, inputs=["gone"], scale="cpu", model="m").action == "done"
    assert rf.init_from_values(
        ["init_from=a/b", "roles.q.init_from='/x y'", "roles.i.init_from=null", "seed=1", "+init_from=none"]
    ) == ["a/b", "/x y"]


def test_cli_errors_are_one_line_naming_the_fix():
    for args, said in [
        (["run", "experiment=x", "profile=gpu", "model=m", "seed=0"], "profiles: cpu, paper, smoke"),
        (["run", "experiment=x", "profile=cpu", "seed=0"], "missing: ['model']"),
        (["paper", "paper=rankr1", "log_dir="], "missing: ['log_dir']"),  # smoke.sh's rm -rf never gets ''
        (["sweep", "experiment=x", "profile=cpu", "model=m"], "point="),
        (["where"], "commands: log-dir, run"),
    ]:
        out = _cli(*args)
        assert out.returncode == 2 and out.stderr.count("\n") == 1 and said in out.stderr, (args, out.stderr)


def test_a_pipeline_stops_before_a_stage_whose_init_from_has_not_finished(tmp_path, model_dir):
    """The pipeline asks the same question per stage: the first stage of core/vowels_pipeline starts from
    the command line's init_from, which names no finished run: nothing runs and the command is named."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rankrl.pipeline",
            "experiment=core/vowels_pipeline",
            "model=tiny",
            "logger=none",
            "init_from=core/never_run",
            f"paths.log_dir={tmp_path}",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0 and "pipeline stage 'sft': init_from=core/never_run" in out.stderr
    assert "python -m rankrl.train experiment=core/never_run seed=0" in out.stderr
    assert not list(tmp_path.rglob("*.json")) and "Traceback" not in out.stderr


# ------------------------------------------------------------------------------ no script spells a folder

# what only the layout's owner may write: the log folder, a seed's or a sweep's folder, a profile-model
# folder, the files a run leaves
SPELLED = re.compile(
    r"outputs|\$LOG_DIR/|\$\{?LOG_DIR\}?/|seed\$|seed\{|/sweep|\$\{?PROFILE\}?-|metrics\.json|per_query\.csv"
    r"|train_log\.jsonl|checkpoints|tables/"
)


def _code(line: str) -> str:
    """A shell line without its comment (a # after a blank, or at the start)."""
    return re.sub(r"(^|\s)#.*$", "", line)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_no_script_spells_a_run_folder(script):
    spelled = [
        f"{script.name}:{n}: {line.strip()}"
        for n, line in enumerate(script.read_text().splitlines(), 1)
        if SPELLED.search(_code(line))
    ]
    assert not spelled, (
        "ask rankrl/run_folders.py (folders, run_folder, sweep_folder, decide):\n" + "\n".join(spelled)
    )


def test_the_guard_sees_what_the_scripts_used_to_spell():
    for old in [
        'RUN_DIR="$LOG_DIR/$exp/$PROFILE-$m/sweep/benchmark=$task" run evaluate',
        '  [[ -f "$root/$prefix$v/metrics.json" && -z "${FORCE:-}" ]] || todo+=("$v")',
        "SMOKE_LOG_DIR=${SMOKE_LOG_DIR:-$PWD/outputs/smoke}",
        '"init_from=$LOG_DIR/rankr1/setwise_sft_dl19/$PROFILE-$m/seed$SEED"',
        '  local dir=${RUN_DIR:-"$LOG_DIR/$name/$PROFILE-$model/seed$SEED"}',
    ]:
        assert SPELLED.search(_code(old)), old
    assert not SPELLED.search(_code("  echo ok  # run folders: outputs/<experiment>/..."))


def test_fgrpo_grpo_starts_from_the_fgrpo_pipelines_sft_stage_by_its_name(tmp_path):
    """conf/experiment/fgrpo/grpo.yaml names its start as a stage's experiment name, not a spelled folder."""
    from omegaconf import OmegaConf

    from rankrl.pipeline import expand, plan, stage_inputs

    cfg = compose(
        "train", ["experiment=fgrpo/grpo", "benchmark=lastfm", "seed=1", f"paths.log_dir={tmp_path}"]
    )
    stages = plan(expand(OmegaConf.to_container(cfg.pipeline, resolve=True)), ["policy"])
    stage_cfg = compose(
        "train", [*stages[0].overrides, "experiment=fgrpo/grpo", "benchmark=lastfm", "seed=1"]
    )
    (value,) = stage_inputs(stages[0], stage_cfg)
    sft = rf.stage_folder(rf.run_folder("fgrpo/fgrpo_lastfm", cfg.scale, cfg.model.name, 1, tmp_path), "sft")
    ident = {"scale": cfg.scale, "model": cfg.model.name, "seed": 1, "logs": tmp_path}
    with pytest.raises(rf.InputMissing):
        rf.finished_training_run(value, **ident)
    (sft / rf.CHECKPOINTS_DIR).mkdir(parents=True)
    (sft / rf.METRICS_FILE).write_text("{}")
    assert rf.finished_training_run(value, **ident) == sft.resolve()
