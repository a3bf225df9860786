"""The GPU plan: its formula on numbers worked out by hand, the settings it names when a run does not fit,
and how it reads a paper script's rows (Hydra's parser and compose API, the pipeline's own stage commands)."""

from __future__ import annotations

import json

import pytest

from rankrl.errors import ConfigError
from rankrl.gpu_plan import (
    GIB,
    GPUS,
    MFU,
    Arch,
    Composer,
    Engine,
    Evaluation,
    Stage,
    _smoke_cost,
    _smoke_prompt_len,
    engine_memory,
    estimate,
    estimate_evaluation,
    fit,
    kv_cell,
    memory,
    parse_command,
    printed_argv,
    prompts_per_micro_batch,
    runs_of,
    scaled_cost,
    smoke_stand_ins,
    stage_of,
    sweep_point,
    trainer_memory,
)

H100 = 79.1 * 2**30  # bytes of an 80 GB H100 as torch.cuda reports it (the plan's h100-80gb)
# a 1B-parameter stand-in shape for the time formula (memory is checked on the 7B below)
SMALL = Arch(
    params=10**9, layers=16, hidden=2048, intermediate=8192, vocab=32000, q_dim=2048, kv_dim=512, max_len=4096
)


def _stage(**kw) -> Stage:
    base = dict(
        row="x",
        model="m",
        arch=SMALL,
        steps=10,
        prompts=2,
        group=4,
        completion=100,
        prompt_len=50.0,
        fsdp=True,
        micro_batch=4,
        engines=(Engine(SMALL, 0.35),),
    )
    return Stage(**{**base, **kw})


# ------------------------------------------------------------------------------------------------ the 7B row


def _rankr1_7b(micro_batch: int | None = 8) -> Stage:
    """Rank-R1's GRPO row for Qwen2.5-7B as profile=paper composes it, with L = 2,112 prompt tokens.

    The hand-worked numbers below take micro-batches of one whole group (m = 8 rows), which is what the
    profile took before this plan showed it does not fit; the profile now takes m = 2 for the 7B
    (schedule.micro_batch_by_model). micro_batch=None keeps the profile's own."""
    cfg = Composer()(
        "train", ("experiment=rankr1/rankr1_grpo", "profile=paper", "model=qwen2.5-7b", "benchmark=dl19")
    )
    stage = stage_of(cfg, "rankr1/rankr1_grpo_dl19", 2112.0)
    return stage if micro_batch is None else Stage(**{**stage.__dict__, "micro_batch": micro_batch})


def test_the_paper_profile_takes_the_micro_batch_that_fits_the_7b():
    stage = _rankr1_7b(micro_batch=None)
    assert stage.micro_batch == 2
    knobs, _, mem = fit(stage, 8, "h100-80gb")
    assert knobs == [] and mem["peak"] <= GPUS["h100-80gb"].memory


def test_a_7b_grpo_plan_by_hand():
    """Qwen2.5-7B-Instruct (rankrl.models.PAPER_CONFIGS: hidden 3,584, MLP 18,944, 28 layers, 28 query heads
    and 4 key-value heads of 128, vocabulary 152,064, 7,615,616,512 parameters), LoRA r=16 on q_proj and
    v_proj, GRPO with B=8 prompts x G=8 completions of at most C=2,048 tokens, L=2,112 prompt tokens,
    micro-batches of m=8 rows, KL beta 0.04, DDP on 8 x H100, one vLLM engine at gpu_memory_utilization
    0.35 with max_model_len null (the model's 32,768)."""
    stage = _rankr1_7b()
    p = 7_615_616_512
    adapter = 28 * 16 * ((3584 + 3584) + (3584 + 512))  # r x (in + out): q_proj 3584->3584, v_proj 3584->512
    assert adapter == 5_046_272
    assert (stage.params, stage.lora_params, stage.micro_batch, stage.prompts, stage.group) == (
        p,
        adapter,
        8,
        8,
        8,
    )
    assert stage.completion == 2048 and stage.beta == 0.04 and not stage.fsdp
    assert (
        len(stage.engines) == 1 and stage.engines[0].utilization == 0.35 and stage.engines[0].max_len == 32768
    )

    # the trainer: a LoRA policy keeps its base in bf16 (2 B) and its adapter in float32 (4 B); the adapter
    # alone has gradients (float32, twice under DDP: its buckets) and AdamW's two float32 moments (8 B); the
    # KL reference is the policy with its adapter off: no copy
    mem = memory(stage, gpus=8, gpu="h100-80gb")
    t = mem["trainer"]
    assert t["weights"] == 2 * p + 4 * adapter == 15_251_418_112
    assert t["gradients"] == 4 * adapter * 2 == 40_370_176
    assert t["optimizer"] == 8 * adapter == 40_370_176
    assert t["reference"] == 0 and t["frozen"] == 0 and t["gathers"] == 0
    # activations of one micro-batch of 8 rows, one group: the prompt once (2,112) + 8 x 2,048 completions
    tokens = 2112 + 8 * 2048  # 18,496
    per_token_layer = 16 * 3584 + 4 * 3584 + 4 * 512 + 8 * 18944  # 57,344 + 14,336 + 2,048 + 151,552
    assert per_token_layer == 225_280
    logits = 8 * 2048 * 152064 * 10  # bf16 logits, float32 copy, float32 log-softmax per completion token
    kv_per_token = 28 * 2 * 512 * 2  # layers x (key, value) x 4 heads x 128 x 2 bytes = 57,344
    prompt_copies = 8 * 2112 * kv_per_token  # the prompt's keys and values indexed out to each row
    activations = tokens * 28 * per_token_layer + logits + prompt_copies
    assert activations == 116_669_808_640 + 24_914_165_760 + 968_884_224 == 142_552_858_624
    assert t["activations"] == activations

    # vLLM: bf16 weights; the profiling run's peak is the sampler's 4 float32 (1,024 x 152,064) tensors,
    # above the forward's 2 x 16,384 x (3 x 18,944 + 4 x 3,584) bytes; 51 CUDA graph sizes x 26 MiB
    e = mem["engines"][0]
    assert e["weights"] == 2 * p == 15_231_233_024
    assert 2 * 16384 * (3 * 18944 + 4 * 3584) == 2_332_033_024 < 4 * 1024 * 152064 * 4 == 2_491_416_576
    assert e["profile_peak"] == 2_491_416_576
    assert e["cuda_graphs"] == 51 * 26 * 2**20 == 1_390_411_776
    budget = 0.35 * H100  # 29,726,542,397 bytes
    kv = budget - 15_231_233_024 - 2_491_416_576 - 1_390_411_776  # 10,613,481,021 bytes, 9.88 GiB
    assert e["budget"] == pytest.approx(budget) and e["kv_cache"] == pytest.approx(kv)
    assert e["kv_tokens"] == pytest.approx(kv / kv_per_token) == pytest.approx(185_084.4)
    assert e["kv_tokens"] > 32768  # holds one sequence of max_model_len: vLLM starts

    # phases: the engine's whole budget at start and while it generates; asleep (weights and KV cache
    # released) it keeps its CUDA graphs through the update
    context = 2**30
    start = context + 15_251_418_112 + budget
    rollout = start + 40_370_176  # AdamW's moments exist from the first step on
    update = context + 15_251_418_112 + 40_370_176 + 40_370_176 + 142_552_858_624 + 1_390_411_776
    assert update == 160_349_170_688  # 149.3 GiB: more than an H100
    assert mem["start"] == pytest.approx(start) and mem["rollout"] == pytest.approx(rollout)
    assert mem["update"] == update and mem["phase"] == "update"
    assert estimate(stage, 8, "h100-80gb")["memory_gib"] == pytest.approx(update / GIB)


def test_a_row_that_does_not_fit_names_the_knob_and_by_how_much():
    stage = _rankr1_7b()
    knobs, fitted, mem = fit(stage, 8, "h100-80gb")
    # m = 3 rows straddle two groups (rows 6-8: both prompts): 2 x 2,112 + 3 x 2,048 tokens, 86.5 GiB, too
    # much; m = 2 divides G: 2,112 + 2 x 2,048 = 6,208 tokens
    assert prompts_per_micro_batch(3, 8, 8) == 2 and prompts_per_micro_batch(2, 8, 8) == 1
    three = (2 * 2112 + 3 * 2048) * 28 * 225_280 + 3 * 2048 * 152064 * 10 + 3 * 2112 * 57344
    assert trainer_memory(stage, 8, micro_batch=3)["activations"] == three == 75_105_828_864
    two = 6208 * 28 * 225_280 + 2 * 2048 * 152064 * 10 + 2 * 2112 * 57344
    update = 2**30 + 15_251_418_112 + 40_370_176 + 40_370_176 + two + 1_390_411_776
    assert update == 63_426_145_280  # 59.1 GiB
    assert knobs == ["trainer.micro_batch_size=2"]
    assert fitted.micro_batch == 2 and mem["peak"] == update <= GPUS["h100-80gb"].memory

    # a full fine-tuning of the same model on DDP holds 4P masters, 8P gradients (with DDP's buckets), 8P
    # AdamW and a 2P reference on every GPU: 22P = 156 GiB before any activation. Sharding over the 8 GPUs
    # is the knob; the micro-batch follows
    full = Stage(**{**stage.__dict__, "lora_params": 0})
    assert full.held_bytes == 4
    t = trainer_memory(full, 8)
    assert t["weights"] + t["gradients"] + t["optimizer"] + t["reference"] == (4 + 8 + 8 + 2) * 7_615_616_512
    knobs, fitted, mem = fit(full, 8, "h100-80gb")
    assert knobs[0] == "trainer.strategy=fsdp (NPROC=8)" and fitted.fsdp
    assert knobs[1].startswith("trainer.micro_batch_size=") and mem["peak"] <= GPUS["h100-80gb"].memory
    sharded = trainer_memory(fitted, 8)
    assert sharded["weights"] == 4 * 7_615_616_512 / 8 and sharded["gradients"] == 4 * 7_615_616_512 / 8


def test_an_engine_whose_cache_cannot_hold_max_model_len_names_the_share_that_would():
    """Qwen2.5-14B (14,770,033,664 parameters; 48 layers x 8 key-value heads x 128: 196,608 KV bytes per
    token) at gpu_memory_utilization 0.45 with its own 32,768-token context: vLLM would refuse to start."""
    arch = Arch.of("qwen2.5-14b")
    assert arch.params == 14_770_033_664 and arch.kv_per_token == 48 * 2 * 8 * 128 * 2 == 196_608
    engine = Engine(arch, 0.45)
    e = engine_memory(engine, "h100-80gb")
    fixed = 2 * 14_770_033_664 + 2_491_416_576 + 1_390_411_776  # weights, profile peak (sampler), graphs
    assert e["kv_tokens"] == pytest.approx((0.45 * H100 - fixed) / 196_608) == pytest.approx(24_403.5, abs=1)
    share = (fixed + 32768 * 196_608) / H100  # 0.4694
    stage = Stage(
        "r", "qwen2.5-14b", arch, 10, 8, 8, 2048, 2112.0, lora_params=1, micro_batch=1, engines=(engine,)
    )
    knobs, fitted, _ = fit(stage, 8, "h100-80gb")
    assert share == pytest.approx(0.4694, abs=1e-4)  # rounded up to the next hundredth
    assert knobs[0] == "rollout.gpu_memory_utilization=0.47 (its KV cache then holds max_model_len)"
    assert engine_memory(fitted.engines[0], "h100-80gb")["kv_tokens"] >= 32768


def test_two_roles_start_two_engines_and_the_frozen_role_stays_in_bf16():
    """A stage of a two-role pipeline trains one role; the other is loaded frozen in bf16, and both roles'
    engine starts with the first asleep (an engine sleeps once started)."""
    command = parse_command(
        printed_argv(
            ".venv/bin/python -m rankrl.pipeline experiment=cogr/cogr profile=paper model=qwen3-4b-instruct"
        )
    )
    runs = {run.stage: (run, cfg) for run, cfg in runs_of(command, Composer())}
    run, cfg = runs["item_r1"]
    assert run.entry == "train" and cfg.train_role == "item"
    assert "roles.query.init_from=/pipeline/query_r1" in run.overrides  # as the pipeline launches it
    stage = stage_of(cfg, "item_r1", 100.0)
    assert len(stage.engines) == 2 and stage.frozen_params == stage.params  # the query role, same model
    assert stage.fsdp  # a full fine-tuning, sharded: under torchrun the frozen role stays on the host
    assert trainer_memory(stage, 8)["frozen"] == 0 and trainer_memory(stage, 1)["frozen"] == 2 * stage.params
    mem = memory(stage, 1, "h100-80gb")
    t, (first, second) = mem["trainer"], mem["engines"]
    base = 2**30 + t["weights"] + t["reference"] + t["frozen"]
    assert mem["start"] == pytest.approx(base + first["asleep"] + second["budget"])
    assert mem["rollout"] == pytest.approx(base + t["optimizer"] + first["footprint"] + second["asleep"])
    assert runs["base"][0].entry == "evaluate" and runs["eval"][0].entry == "evaluate"


# ------------------------------------------------------------------------------------- time (unchanged)


def test_full_fine_tuning_step_by_hand():
    g = GPUS["h100-80gb"]
    tokens = 2 * 50 + 2 * 4 * 100  # each prompt once per group, plus every completion
    flops = 6e9 * tokens + 2e9 * 2 * (50 + 4 * 100)  # update + generation
    step_s = flops / (2 * g.peak * MFU) + 100 * 2e9 / g.bandwidth  # + 100 decode steps reading the weights
    est = estimate(_stage(), gpus=2, gpu="h100-80gb")
    assert est["hours"] == pytest.approx(10 * step_s / 3600)
    assert est["gpu_hours"] == pytest.approx(2 * est["hours"])
    # float32 masters, float32 gradients and AdamW's two float32 moments, 16 bytes a parameter, sharded
    t = trainer_memory(_stage(), 2)
    assert t["weights"] + t["gradients"] + t["optimizer"] == pytest.approx(16e9 / 2)


def test_lora_is_cheaper_and_keeps_the_base_whole_in_bf16():
    full = estimate(_stage(), 2, "h100-80gb")
    lora_stage = _stage(lora_params=1_000_000, fsdp=False)
    lora = estimate(lora_stage, 2, "h100-80gb")
    assert lora["hours"] < full["hours"]  # k = 4 instead of 6
    t = trainer_memory(lora_stage, 2)
    assert t["weights"] == 2e9 + 4e6 and t["optimizer"] == 8e6 and t["gradients"] == 4e6 * 2  # DDP buckets


def test_a_kl_reference_costs_a_forward_per_update_token():
    peak = GPUS["a100-80gb"].peak
    tokens = 2 * 50 + 2 * 4 * 100
    for lora in (0, 1000):  # LoRA's reference is the policy with its adapter off: a forward all the same
        with_kl = estimate(_stage(beta=0.04, lora_params=lora), 1, "a100-80gb")["hours"]
        without = estimate(_stage(lora_params=lora), 1, "a100-80gb")["hours"]
        assert with_kl - without == pytest.approx(10 * 2e9 * tokens / (peak * MFU) / 3600)
    # a full fine-tuning's reference is a frozen bf16 copy, sharded like the rest; LoRA has none
    assert trainer_memory(_stage(beta=0.04), 2)["reference"] == 2e9 / 2
    assert trainer_memory(_stage(beta=0.04, lora_params=1000), 2)["reference"] == 0


# ------------------------------------------------------------------------------------------------ the rows


def test_a_command_is_read_by_hydras_parser_and_sweeper():
    line = (
        ".venv/bin/python -m rankrl.train -m experiment=fgrpo/fgrpo profile=paper model=qwen3-4b "
        "benchmark=movielens-100k task.lam=0.5,2 task.compress_words=<mean rewrite_words of grape_rank> "
        "init_from=outputs/x experiment_name=fgrpo/sweep_lam/lam${task.lam} hydra.sweep.dir=outputs/y "
        "hydra.sweep.subdir=lam${task.lam}"
    )
    command = parse_command(printed_argv(line))
    assert command.entry == "train" and command.jobs == 2 and command.swept == ("task.lam",)
    assert command.unknown == ("task.compress_words",)  # known after an earlier row: the default stands
    assert command.overrides == (
        "experiment=fgrpo/fgrpo",
        "profile=paper",
        "model=qwen3-4b",
        "benchmark=movielens-100k",
        "task.lam=0.5",
        "init_from=outputs/x",
    )
    # torchrun's command names the entry point after its own -m; a data step is no run
    torchrun = "python -m torch.distributed.run --standalone --nproc_per_node=8 -m rankrl.train experiment=e"
    assert parse_command(printed_argv(torchrun)).entry == "train"
    assert parse_command(printed_argv("python -m rankrl.data.prepare --data-dir data --only msmarco")) is None
    with pytest.raises(ConfigError, match="trainer.lr=1e-5]"):
        parse_command(["python", "-m", "rankrl.train", "trainer.lr=1e-5]"])


def test_a_benchmark_is_a_sweep_point_only_in_its_sweep_folder():
    # one value of a benchmark sweep, run into the sweep's folder (quoted as lib.sh passes it to Hydra)
    point = parse_command(
        printed_argv(
            "python -m rankrl.evaluate experiment=rankr1/setwise_bright benchmark=bright-pony "
            "hydra.run.dir='o/x/sweep/benchmark=bright-pony'"
        )
    )
    assert point.run_dir == "o/x/sweep/benchmark=bright-pony" and sweep_point(point) == "bright-pony"
    # one file per method, the benchmark an override: a row with its own folder (fgrpo/fgrpo_lastfm)
    assert (
        sweep_point(
            parse_command(["python", "-m", "rankrl.train", "experiment=fgrpo/fgrpo", "benchmark=lastfm"])
        )
        is None
    )


def test_a_stand_in_smoke_run_measures_l_and_marks_the_row(tmp_path):
    """A paper row the smoke does not run (CoGR on WANDS) reads L from the run the paper's tables.yaml names
    as its stand-in (dl-pools), and says so; a row with its own smoke run is not marked."""
    spec = smoke_stand_ins("cogr")
    assert spec["stand_ins"]["_wands"] == "_dlpools" and spec["note"]
    assert smoke_stand_ins("rankr1")["stand_ins"] == {}  # no stand-ins declared: none used
    log = tmp_path / "cogr/cogr_dlpools/smoke-qwen3-4b-instruct/seed0/query_r1/train_log.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text(json.dumps({"prompt_length/mean": 300.0}) + "\n")
    stand_ins = spec["stand_ins"]
    assert _smoke_prompt_len(tmp_path, "cogr/cogr_wands", "query_r3", None, stand_ins) == (300.0, True)
    assert _smoke_prompt_len(tmp_path, "cogr/cogr_dlpools", "query_r1", None, stand_ins) == (300.0, False)
    assert _smoke_prompt_len(tmp_path, "cogr/cogr_wands", "query_r1", None, {}) == (None, False)


# ------------------------------------------------------------------------------------------- evaluations


def test_an_evaluation_is_its_smoke_cost_scaled_to_the_whole_split_by_hand():
    # the smoke ranked 2 of 43 queries with 30 comparisons of 54,852 prompt tokens in 11 heap rounds
    cost = dict(queries=2, queries_total=43, llm_prompts=30, prompt_tokens=54852, generate_calls=11)
    scaled = scaled_cost(cost)
    assert scaled == pytest.approx(
        {"queries": 43, "prompts": 30 * 21.5, "prompt_tokens": 54852 * 21.5, "rounds": 11}
    )
    engine = Engine(SMALL, 0.35)
    ev = Evaluation("r", "m", 10**9, gpus=1, runs=1, completion=100, engine=engine, **scaled)
    g = GPUS["h100-80gb"]
    seconds = 2e9 * (54852 * 21.5 + 30 * 21.5 * 100) / (g.peak * MFU) + 11 * 100 * 2e9 / g.bandwidth
    est = estimate_evaluation(ev, "h100-80gb")
    assert est["hours"] == pytest.approx(seconds / 3600) == est["gpu_hours"]
    # the context, the policy in bf16 and the engine's budget (its KV cache fills what the rest leaves)
    assert est["memory_gib"] == pytest.approx((2**30 + 2e9 + 0.35 * H100) / 2**30)
    # a training run's own evaluation holds all of its GPUs
    held = estimate_evaluation(
        Evaluation("r", "m", 10**9, 8, 1, 43, 645, 1.2e6, 100, 11, engine), "h100-80gb"
    )
    assert held["gpu_hours"] == pytest.approx(8 * held["hours"])


def test_a_cost_without_a_split_size_is_not_scaled():
    assert scaled_cost({"queries": 2, "llm_prompts": 30}) is None  # recorded before queries_total existed
    assert scaled_cost({}) is None
    assert scaled_cost({"queries": 0, "queries_total": 5, "llm_prompts": 0}) is None


def test_the_kv_column_names_the_share_that_would_hold_a_group():
    est = estimate(_stage(), 1, "h100-80gb")
    assert "would hold it" not in kv_cell(est, 450)  # ~a million tokens hold one group of 450
    short = {"kv_tokens": 3_000.0, "share_needed": 0.3812}
    assert kv_cell(short, 18_500) == "3k (< 18.5k: gpu_memory_utilization 0.39 would hold it)"
    assert "more than the GPU" in kv_cell({"kv_tokens": 0.0, "share_needed": 1.7}, 10)
    assert kv_cell({}, 10) == ""  # no engine: no claim
    # an evaluation engine whose cache cannot hold max_model_len: vLLM would not start
    refused = {"kv_tokens": 24_403.5, "share_needed": 0.4, "max_len": 32768, "share_max_len": 0.4694}
    assert kv_cell(refused, 100) == (
        "24k (< max_model_len 32,768: vLLM does not start; gpu_memory_utilization 0.47 holds it)"
    )


def test_a_smoke_on_data_of_its_own_sizes_evaluations_per_n_queries():
    # GRAPE's smoke rewrites 2 of its 5 captions: 5 is its own data's size, not a benchmark's split
    cost = dict(queries=2, queries_total=5, llm_prompts=2, prompt_tokens=217, generate_calls=1)
    assert scaled_cost(cost, per_queries=1000) == pytest.approx(
        {"queries": 1000, "prompts": 1000, "prompt_tokens": 217 * 500, "rounds": 1}
    )
    spec = smoke_stand_ins("grape")
    assert spec["per_queries"] == 1000 and spec["per_queries_why"]
    assert smoke_stand_ins("rankr1")["per_queries"] is None  # DL19's 43 queries are the split itself


def test_an_evaluation_the_smoke_did_not_run_reads_its_stand_in_and_is_marked(tmp_path):
    def write(experiment: str, folder: str, prompts: int) -> None:
        path = tmp_path / experiment / "smoke-qwen2.5-3b" / folder / "metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"cost": {"queries": 2, "queries_total": 5, "llm_prompts": prompts}}))

    write("grape/grape_rank/clip-vit-b16", "sweep/benchmark=flickr30k-cn", 2)
    write("grape/grape_rank/clip-vit-b16", "sweep/benchmark=cirr", 4)
    stand_ins = {"clip-vit-l14": "clip-vit-b16"}
    row = "grape/grape_rank/clip-vit-b16"
    assert _smoke_cost(tmp_path, row, "sweep/benchmark=cirr", stand_ins) == (_cost(4), False)
    # another benchmark of the same sweep, then the stand-in retriever's run
    assert _smoke_cost(tmp_path, row, "sweep/benchmark=xm3600", stand_ins) == (_cost(4), True)
    l14 = "grape/grape_rank/clip-vit-l14"
    assert _smoke_cost(tmp_path, l14, "sweep/benchmark=flickr30k-cn", stand_ins) == (_cost(2), True)
    assert _smoke_cost(tmp_path, l14, "sweep/benchmark=flickr30k-cn", {}) == (None, False)
    assert _smoke_cost(tmp_path, "rankr1/setwise_dl19", "seed0", stand_ins) == (None, False)


def _cost(prompts: int) -> dict:
    return {"queries": 2, "queries_total": 5, "llm_prompts": prompts}


@pytest.mark.parametrize("paper", ["rankr1", "grape", "fgrpo", "cogr"])
def test_every_papers_plan_composes_its_paper_rows_without_smoke_runs(paper, tmp_path):
    # every PROFILE=paper command of the paper's script composes (GRAPE's once failed on a dry-run
    # placeholder); with no smoke runs nothing is estimated, and the table says so instead of raising
    from rankrl.gpu_plan import table

    text = table(paper, tmp_path, 8, "h100-80gb")
    assert "not estimated: no smoke run measured" in text and f"reproduce-{paper} PROFILE=paper" in text
