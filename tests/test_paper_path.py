"""The paper profile's path on the CPU: tiny random models of the paper models' architectures (real config
fields, the local tokenizer), the written Qwen templates, vLLM's CPU engine with LoRA merged, and a two-rank
FSDP stage under torchrun. ``make smoke-paper`` runs the papers' scripts on the same models."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from rankrl.config import REPO_ROOT
from rankrl.data.trec import BRIGHT_TASKS
from rankrl.models import (
    PAPER_CONFIGS,
    TINY_PAPER_SHAPE,
    apply_lora,
    load_policy,
    paper_parameters,
    tiny_paper_path,
)
from rankrl.rl.steps import sft_token_ids
from rankrl.rl.task import SFTExample
from rankrl.rollout.base import SamplingParams

T1 = SamplingParams(max_new_tokens=12, temperature=1.0)
MESSAGES = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a colour."}]


# published parameter counts (the models' cards): the recorded fields are the real architectures
@pytest.mark.parametrize(
    "name,billions",
    [
        ("qwen2.5-3b", 3.09),
        ("qwen2.5-7b", 7.62),
        ("qwen2.5-14b", 14.77),
        ("qwen3-1.7b", 1.72),
        ("qwen3-4b", 4.02),
    ],
)
def test_recorded_architectures_have_the_published_sizes(name: str, billions: float):
    assert paper_parameters(name) / 1e9 == pytest.approx(billions, abs=0.01)


@pytest.mark.parametrize("name", ["qwen2.5-3b", "qwen2.5-7b", "qwen3-4b"])
def test_tiny_paper_model_keeps_the_architecture_and_matches_the_tokenizer(model_dir: Path, name: str):
    model, tok = load_policy(tiny_paper_path(name, model_dir))
    real = PAPER_CONFIGS[name]
    assert model.config.model_type == real["model_type"]
    assert model.config.vocab_size == len(tok)  # the local tokenizer, vocabulary size set to match
    for key in ("rms_norm_eps", "tie_word_embeddings", "max_position_embeddings", "hidden_act"):
        assert getattr(model.config, key) == real[key], key
    assert model.config.rope_parameters["rope_theta"] == real["rope_theta"]
    for key, value in TINY_PAPER_SHAPE.items():
        assert getattr(model.config, key) == value, key
    if real["model_type"] == "qwen2":  # Qwen2's q/k/v projections carry biases, Qwen3 normalises q and k
        assert model.model.layers[0].self_attn.q_proj.bias is not None
    else:
        assert hasattr(model.model.layers[0].self_attn, "q_norm")


def test_qwen3_template_honours_enable_thinking_everywhere_it_renders(model_dir: Path):
    """The model config's chat_template_kwargs reach generation prompts and SFT pairs alike, and an SFT
    pair's prompt is exactly the generation prompt (so SFT masks it)."""
    path = tiny_paper_path("qwen3-4b", model_dir)
    _, thinking = load_policy(path)
    _, direct = load_policy(path, chat_template_kwargs={"enable_thinking": False})
    opened = direct.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert opened.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert thinking.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True).endswith(
        "<|im_start|>assistant\n"
    )
    prompt, completion = sft_token_ids(direct, SFTExample("u", MESSAGES, "Blue."))
    assert direct.decode(prompt) == opened and direct.decode(completion) == "Blue.<|im_end|>"


@pytest.mark.parametrize("name", ["qwen2.5-3b", "qwen2.5-7b", "qwen3-4b"])
def test_vllm_serves_the_lora_policy_merged(model_dir: Path, name: str):
    """LoRA r=16 on every linear layer (the paper profile's), pushed merged into vLLM's CPU engine: the
    engine samples the adapted policy, for tied (3B, 4B) and untied (7B) heads."""
    import rankrl.rollout.vllm as rv
    from tests.rollout.test_vllm import max_gap

    base, tok = load_policy(tiny_paper_path(name, model_dir))
    policy = apply_lora(copy.deepcopy(base), {"r": 16, "alpha": 32, "target_modules": "all-linear"})
    with torch.no_grad():
        for param_name, param in policy.named_parameters():
            if "lora_B" in param_name:
                param.normal_(0, 0.02)
    engine = rv.VLLMEngine(policy, tok, kv_cache_gib=0.25)
    torch.manual_seed(0)
    out = engine.generate([MESSAGES, [{"role": "user", "content": "Count to three."}]], n=2, sampling=T1)
    assert max_gap(policy, out, tok.pad_token_id, T1) <= 1e-3
    assert max_gap(base, out, tok.pad_token_id, T1) > 0.01


def _log(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]


@pytest.mark.ranks
def test_two_ranks_run_a_paper_profile_pipeline_sharded_by_fsdp(tmp_path: Path, model_dir: Path):
    """`NPROC=2` as the reproduce scripts pass it to a pipeline (pipeline_nproc=2): F-GRPO's paper-profile
    pipeline on a tiny Qwen3-4B-shaped model, each training stage on 2 CPU ranks through torchrun (gloo),
    full fine-tuning sharded by FSDP (the paper profile's trainer.strategy=fsdp). The SFT stage moves the
    sharded weights; the F-GRPO stage from it samples exactly the trainer's weights on both ranks' vLLM
    engines and saves a sharded checkpoint."""
    env = {**os.environ, "RANKRL_LOG_DIR": str(tmp_path), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    cmd = [
        sys.executable,
        "-m",
        "rankrl.pipeline",
        "experiment=fgrpo/fgrpo",
        "profile=smoke",
        "model=qwen3-4b",
        "logger=none",
        "eval_limit=1",
        "schedule.sft_lr=1e-3",
        "pipeline_nproc=2",
    ]
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    root = tmp_path / "fgrpo" / "fgrpo_movielens" / "smoke-qwen3-4b" / "seed0"
    sft, grpo = root / "sft", root / "fgrpo"
    for stage in (sft, grpo):
        assert "strategy: fsdp" in (stage / "config.yaml").read_text()
        assert any((stage / "checkpoints").glob("step_*/sharded"))  # two ranks, each saved its shard
    policy = json.loads((sft / "metrics.json").read_text())["roles"]["policy"]
    assert policy["weights_start"] != policy["weights_end"]  # the gathered weights moved
    assert all(r["grad_norm"] > 0 and r["loss"] > 0 for r in _log(sft))
    assert json.loads((grpo / "metrics.json").read_text())["roles"]["policy"]["init_from"] == str(
        sft.resolve()
    )
    assert all(r["sampler_logprob_gap_max"] < 1e-3 for r in _log(grpo))


def test_a_pipeline_starts_only_its_training_stages_through_torchrun():
    from rankrl.pipeline import launch_command

    assert launch_command("train", 4)[2:] == [
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=4",
        "-m",
        "rankrl.train",
    ]
    assert launch_command("evaluate", 4)[1:] == ["-m", "rankrl.evaluate"]
    assert launch_command("train", 1)[1:] == ["-m", "rankrl.train"]


def test_paper_size_prompts_sample_with_seeds_on_the_cpu(model_dir: Path):
    """Two seeded requests of ~9k tokens (a Rank-R1 paper prompt: 20 passages of up to 512 tokens). vLLM's CPU
    default chunks prompts over 4,096-token steps and then fails on seeded requests ("CPU Generator does not
    use offset"); the engine schedules whole prompts instead."""
    import rankrl.rollout.vllm as rv

    policy, tok = load_policy(tiny_paper_path("qwen2.5-3b", model_dir))
    engine = rv.VLLMEngine(policy, tok, kv_cache_gib=0.25, max_model_len=None)
    long = " ".join(["passage"] * 9000)
    torch.manual_seed(0)
    out = engine.generate(
        [[{"role": "user", "content": long}], [{"role": "user", "content": long + " again"}]],
        n=2,
        sampling=SamplingParams(max_new_tokens=4, temperature=1.0),
    )
    assert [len(c) for c in out.completion_ids] == [4] * 4 and min(map(len, out.prompt_ids)) > 9000


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_paper_profile_without_a_gpu_stops_before_anything_loads():
    from rankrl import app
    from rankrl.errors import EnvironmentProblem
    from tests.conftest import compose

    with pytest.raises(EnvironmentProblem, match="no.*GPU|none.*smoke-<paper>|profile=smoke"):
        app.check_machine(compose("train", ["experiment=rankr1/rankr1_grpo", "profile=paper"]))
    app.check_machine(compose("evaluate", ["experiment=rankr1/bm25", "profile=paper"]))  # no model: runs
    app.check_machine(compose("train", ["experiment=rankr1/rankr1_grpo", "profile=smoke"]))


def make_dry_run(target: str) -> str:
    """What `make -n <target> PROFILE=paper` prints (the paper scripts run in DRY_RUN under -n)."""
    return subprocess.run(
        ["make", "-n", target, "PROFILE=paper"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MAKEFLAGS": ""},
    ).stdout


def test_make_lists_every_paper_row_without_running_one():
    """`make -n reproduce-<paper> PROFILE=paper` prints the rows the tables read (the script runs in
    DRY_RUN)."""
    out = make_dry_run("reproduce-rankr1")
    rows = [line for line in out.splitlines() if "-m rankrl." in line]
    # the data the paper rows read beyond `make data`'s is fetched before the first row: MS MARCO's training
    # set (GRPO's and SFT's prompts) and every BRIGHT task's documents
    fetch = next(i for i, r in enumerate(rows) if "rankrl.data.prepare" in r and "--only msmarco" in r)
    assert fetch < min(i for i, r in enumerate(rows) if "experiment=rankr1/" in r)
    assert (
        sum(f"bright-{t}-documents" in rows[fetch].split() for t in BRIGHT_TASKS) == len(BRIGHT_TASKS) == 12
    )
    for model in ("qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b"):
        # one file per method, the benchmark an override (rankr1/setwise benchmark=dl20)
        for exp, benchmark in (
            ("setwise", "benchmark=dl19"),
            ("setwise", "benchmark=dl20"),
            ("rankr1_zeroshot", "benchmark=dl19"),
            ("rankr1_zeroshot", "benchmark=dl20"),
            ("rankr1_grpo", "benchmark=dl19"),
            ("rankr1_grpo", "benchmark=dl20"),
            ("setwise_sft_dl19", None),  # trained, then evaluated on DL19
            ("setwise_sft_dl19", "benchmark=dl20"),  # its policy read on DL20
        ):
            assert any(
                f"experiment=rankr1/{exp} profile=paper model={model} " in r
                and (benchmark is None or benchmark in r.split())
                for r in rows
            ), (exp, benchmark, model)
    for exp in ("setwise_bright", "rankr1_zeroshot_bright", "setwise_sft_bright", "rankr1_grpo_bright"):
        assert sum(f"experiment=rankr1/{exp} " in r for r in rows) == 3 * 12, exp  # every BRIGHT task
    assert sum("experiment=rankr1/bm25_bright " in r for r in rows) == 12
    # the trained policies are what the out-of-domain rows read
    assert all(
        "init_from=" in r
        for r in rows
        if "rankr1/setwise_sft_bright" in r or "rankr1/rankr1_grpo_bright" in r
    )


def test_paper_rows_run_in_the_gpu_venv_and_make_it_first():
    """PROFILE=paper runs on GPUs, in the venv with CUDA vLLM (make install-gpu), never the CPU venv and its
    vLLM CPU build; the smoke runs the same rows on the CPU, in the CPU venv."""
    out = make_dry_run("reproduce-rankr1").splitlines()
    installs = next(i for i, line in enumerate(out) if "install -q -r requirements/gpu.txt" in line)
    rows = [i for i, line in enumerate(out) if " -m rankrl." in line and "experiment=rankr1/" in line]
    assert rows and installs < rows[0]
    assert all(out[i].startswith(".venv-gpu/bin/python ") for i in rows)
    smoke = subprocess.run(
        ["make", "-n", "reproduce-rankr1", "PROFILE=smoke"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MAKEFLAGS": ""},
    ).stdout.splitlines()
    smoke_rows = [line for line in smoke if " -m rankrl." in line and "experiment=rankr1/" in line]
    assert smoke_rows and all(line.startswith(".venv/bin/python ") for line in smoke_rows)
    assert not any("requirements/gpu.txt" in line for line in smoke)


def test_make_lists_every_grape_row_and_figure_without_running_one():
    """`make -n reproduce-grape PROFILE=paper`: every row of the main table and the retriever sizes on the
    five benchmarks, CIRR's reference captions before CIRR's rows, and the Flickr30k-CN runs Fig. 5 draws."""
    import yaml

    out = make_dry_run("reproduce-grape")
    lines = [line for line in out.splitlines() if "-m rankrl." in line]
    rows = [line for line in lines if "experiment=grape/" in line]
    for b in ("flickr30k-cn", "cvlue", "xm3600", "wiki-image", "cirr"):
        for exp in ("raw_query", "zeroshot_rewrite", "grape_rank", "grape_sim", "compress_rewrite"):
            assert any(f"experiment=grape/{exp} " in r and f"benchmark={b}" in r.split() for r in rows), (
                exp,
                b,
            )
        for r in ("clip-vit-b32", "clip-vit-l14"):
            assert any(
                "grape/grape_rank " in x and f"retriever={r}" in x and f"benchmark={b}" in x for x in rows
            )
    captions = next(i for i, line in enumerate(lines) if "-m rankrl.data.images_captions" in line)
    assert captions < min(i for i, line in enumerate(lines) if "benchmark=cirr" in line.split())
    assert lines[-1].endswith("-m rankrl.report paper=grape")  # the tables and figures, drawn last
    # Fig. 5 at paper scale: its figure entry names runs the listing trains, on its benchmark
    spec = yaml.safe_load((REPO_ROOT / "experiments" / "grape" / "figures.yaml").read_text())
    (fig5,) = [f for f in spec["figures"] if f["name"] == "grape_fig5_paper"]
    for run in fig5["runs"]:
        exp, retriever = run["experiment"].rsplit("/", 1)
        assert any(
            f"rankrl.train experiment={exp} " in r
            and f"retriever={retriever}" in r.split()
            and f"benchmark={fig5['benchmark']}" in r.split()
            for r in rows
        ), run


def _dry_run(paper: str) -> list[str]:
    """The `-m rankrl.*` lines the reproduce script prints under `make -n reproduce-<paper> PROFILE=paper`,
    in order (after make's own setup recipes)."""
    out = make_dry_run(f"reproduce-{paper}").splitlines()
    script = next(i for i, line in enumerate(out) if f"bash experiments/{paper}/reproduce.sh" in line)
    assert "DRY_RUN=1 " in out[script]
    return [line for line in out[script + 1 :] if "-m rankrl." in line]


def _benchmark_configs() -> dict[str, str]:
    """A benchmark's short name (run folders) -> its conf/benchmark file."""
    import yaml

    files = (REPO_ROOT / "conf" / "benchmark").glob("*.yaml")
    configs = {p.stem: yaml.safe_load(p.read_text()) for p in files}
    return {c["short"]: name for name, c in configs.items() if "short" in c}


def _makes(lines: list[str], experiment: str, model: str | None, paper: str) -> bool:
    """Whether a listed command writes the run folder of ``experiment`` (a table cell's or a figure's name:
    <paper>/<method>_<short>[/<stage>], or a sweep point <paper>/sweep_<axis>/<point>) for ``model``."""
    parts = experiment.split("/")
    chosen = [line for line in lines if model is None or f"model={model}" in line.split()]
    if parts[1].startswith("sweep_"):  # F-GRPO's multiruns: task.lam=0.5,2 writes sweep_lam/lam0.5 ...
        key = {"sweep_lam": "task.lam", "sweep_n": "task.slate_size"}[parts[1]]
        value = parts[2].removeprefix("lam").removeprefix("n")
        return any(
            a.startswith(f"{key}=") and value in a.partition("=")[2].split(",")
            for line in chosen
            for a in line.split()
        )
    method, _, short = parts[1].rpartition("_")
    entry = "rankrl.pipeline" if len(parts) == 3 else "rankrl.evaluate"
    benchmark = f"benchmark={_benchmark_configs()[short]}"
    return any(
        entry in line and f"experiment={paper}/{method}" in line.split() and benchmark in line.split()
        for line in chosen
    )


def test_make_lists_every_fgrpo_row_and_figure_without_running_one():
    """`make -n reproduce-fgrpo PROFILE=paper`: the data step first (the full QA releases, Last.fm's tag
    times), then every cell of every table and every run of every figure for both paper models, Qwen3.5-2B's
    QA learning rate on its GRPO pipelines only, and the report last."""
    import yaml

    lines = _dry_run("fgrpo")
    assert "-m rankrl.data.prepare" in lines[0]
    assert {"musique-full", "hotpotqa-full", "lastfm-tags"} <= set(lines[0].split())
    assert lines[-1].endswith("-m rankrl.report paper=fgrpo")
    models = ("qwen3-4b", "qwen3.5-2b")
    spec = yaml.safe_load((REPO_ROOT / "experiments" / "fgrpo" / "tables.yaml").read_text())
    for table in spec["tables"]:
        for row in table["rows"]:
            if "popularity" in row["experiment"]:  # no LLM: one run, whatever model names its folder
                assert _makes(lines, row["experiment"], None, "fgrpo"), (table["name"], row)
                continue
            for model in [row["model"]] if "model" in row else models:
                if model in models:
                    assert _makes(lines, row["experiment"], model, "fgrpo"), (table["name"], row, model)
    figures = yaml.safe_load((REPO_ROOT / "experiments" / "fgrpo" / "figures.yaml").read_text())["figures"]
    for figure in figures:  # drawn per model; the sweeps run for the first model (the paper's ablation)
        sweep = any("sweep_" in r["experiment"] for r in figure["runs"])
        drawn = [figure["model"]] if "model" in figure else models[:1] if sweep else models
        for model in [m for m in drawn if m in models]:  # a CPU-only figure (the control's) has no paper run
            for run in figure["runs"]:
                assert _makes(lines, run["experiment"], model, "fgrpo"), (figure["name"], run, model)
    qa = [
        line for line in lines if "model=qwen3.5-2b" in line and ("=hotpotqa" in line or "=musique" in line)
    ]
    for line in qa:
        trains_grpo = "rankrl.pipeline" in line and "experiment=fgrpo/decoupled" not in line
        assert ("schedule.grpo_lr=2e-6" in line.split()) == trains_grpo, line
    assert not any("trainer.lr=" in line for line in lines)


def test_make_lists_every_cogr_row_without_running_one():
    """`make -n reproduce-cogr PROFILE=paper`: WANDS fetched first, then every WANDS cell of the main table
    and the ablations for both paper models, the 4B dense and SPLADE-v2 baselines among them."""
    import yaml

    lines = _dry_run("cogr")
    assert "-m rankrl.data.prepare" in lines[0] and lines[0].split()[-2:] == ["--only", "wands"]
    assert lines[-1].endswith("-m rankrl.report paper=cogr")
    spec = yaml.safe_load((REPO_ROOT / "experiments" / "cogr" / "tables.yaml").read_text())
    cells = [
        row["experiments"]["wands"]
        for t in spec["tables"]
        for row in t["rows"]
        if "wands" in row.get("experiments", {})  # the CPU-only control table names one experiment a row
    ]
    assert {"cogr/dense4b_cutoff_wands", "cogr/splade_cutoff_wands"} <= set(cells)
    for model in ("qwen3-4b-instruct", "qwen3-1.7b"):
        for experiment in cells:
            assert _makes(lines, experiment, model, "cogr"), (experiment, model)


def test_make_with_control_lists_every_fgrpo_control_arm_its_tables_read():
    """`CONTROL=1 make -n reproduce-fgrpo` (the CPU profile) prints a pipeline for every F-GRPO control arm
    whose stages the tables read: an arm is named by its experiment_name, or by its rung when it has none.
    Each named arm runs exactly the seeds its committed results hold, whatever SEEDS says."""
    out = subprocess.run(
        ["make", "-n", "reproduce-fgrpo"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MAKEFLAGS": "", "CONTROL": "1"},
    ).stdout
    pipelines = [line.split() for line in out.splitlines() if "-m rankrl.pipeline" in line]
    lines = [words for words in pipelines if "experiment=fgrpo/control_grpo" in words]
    spec = (REPO_ROOT / "experiments" / "fgrpo" / "tables.yaml").read_text()
    arms = set(re.findall(r"experiment: fgrpo/control_grpo/([\w.]+)/(?:warmstart|fgrpo)\b", spec))
    assert {"hint", "hint_weak_stop", "hint_weak_g8"} <= arms

    def runs(arm: str, words: list[str]) -> bool:
        named = [w.removeprefix("experiment_name=") for w in words if w.startswith("experiment_name=")]
        return named == [f"fgrpo/control_grpo/{arm}"] or (not named and f"task.construction={arm}" in words)

    assert not [arm for arm in sorted(arms) if not any(runs(arm, words) for words in lines)]

    def overrides_and_seeds(made: list[list[str]], name: str) -> tuple[set[str], set[int]]:
        """The overrides of one arm's pipelines ``made`` (one set for every seed) and the seeds they run."""
        overrides = {frozenset(w for w in words if not w.startswith("seed=")) for words in made}
        assert len(overrides) == 1, name
        seeds = {int(w.removeprefix("seed=")) for words in made for w in words if w.startswith("seed=")}
        return set(*overrides), seeds

    def arm(name: str) -> tuple[set[str], set[int]]:
        return overrides_and_seeds([words for words in lines if runs(name, words)], name)

    g8, _ = arm("hint_weak_g8")
    assert {"trainer.group_size=8", "task.end_of_turn_in_rank=true", "schedule.sft_epochs=0.375"} <= g8
    first, _ = arm("hint_gold_first")
    assert {"task.delimiters_in_loss=true", "task.end_of_turn_in_rank=true"} <= first
    assert {"schedule.warmstart_target=gold_first", "schedule.sft_epochs=0.125"} <= first
    assert "trainer.group_size=8" not in first
    # the F1 and T1 arms are the gold-first arm with one change each
    for name, change in [
        ("hint_gold_first_f1", "task.slate_reward=f1"),
        ("hint_gold_first_t1", "trainer.sampling.temperature=1.0"),
    ]:
        assert arm(name)[0] - first == {change, f"experiment_name=fgrpo/control_grpo/{name}"}
        assert change not in first
    # the format-first arm (an experiment file of its own) runs the F1 arm's overrides, and the long arm those
    # at 128 F-GRPO steps
    long_arm = "experiment_name=fgrpo/control_grpo_format_first/hint_long"
    file_arms = [words for words in pipelines if "experiment=fgrpo/control_grpo_format_first" in words]
    format_first, long = (
        overrides_and_seeds([w for w in file_arms if (long_arm in w) == flag], name)
        for flag, name in ((False, "hint"), (True, "hint_long"))
    )
    assert long[0] - format_first[0] == {"trainer.max_steps=128", long_arm}
    assert format_first[0] - long[0] == set()
    assert format_first[0] ^ arm("hint_gold_first_f1")[0] == {
        "experiment=fgrpo/control_grpo_format_first",
        "experiment=fgrpo/control_grpo",
        "experiment_name=fgrpo/control_grpo/hint_gold_first_f1",
    }
    # every named arm runs the seeds of its committed rows (results/runs.csv), so CONTROL=1 rebuilds them
    named = {w.split("/")[-1] for words in lines for w in words if w.startswith("experiment_name=")}
    results = pd.read_csv(REPO_ROOT / "experiments" / "fgrpo" / "results" / "runs.csv")
    control = results[results.experiment.str.startswith("fgrpo/control_grpo/")]
    committed = control.groupby(control.experiment.str.split("/").str[2]).seed.agg(set)
    assert {name: arm(name)[1] for name in named} == {name: set(committed.get(name, ())) for name in named}
    for (_, seeds), folder in ((format_first, "hint"), (long, "hint_long")):
        prefix = f"fgrpo/control_grpo_format_first/{folder}/"
        assert seeds == set(results[results.experiment.str.startswith(prefix)].seed), folder


def test_the_format_first_arm_is_the_control_pipeline_with_a_format_stage_first():
    """fgrpo/control_grpo_format_first repeats control_grpo's stages (Hydra replaces a list whole): they must
    stay equal, so the arm differs from the F1 arm by its first stage only."""
    from tests.conftest import compose

    arm = compose("train", ["experiment=fgrpo/control_grpo_format_first"])
    parent = compose("train", ["experiment=fgrpo/control_grpo"])
    assert arm.pipeline[1:] == parent.pipeline
    first = arm.pipeline[0]
    assert [first.name, *first.overrides[:2]] == ["format", "trainer=sft", "task.sft_target=format"]
    arm_rest, parent_rest = (OmegaConf.to_container(c, resolve=False) for c in (arm, parent))
    for rest in (arm_rest, parent_rest):
        del rest["pipeline"], rest["experiment_name"]
    assert arm_rest == parent_rest
