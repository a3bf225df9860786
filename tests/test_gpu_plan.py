"""The GPU plan's estimate: the module's formula on numbers worked out by hand, and how it reads the rows."""

from __future__ import annotations

import pytest

from rankrl.gpu_plan import (
    GPUS,
    MFU,
    Evaluation,
    Stage,
    _overrides,
    _sweep_point,
    estimate,
    estimate_evaluation,
    kv_cell,
    scaled_cost,
    smoke_stand_ins,
)


def _stage(**kw) -> Stage:
    base = dict(
        row="x",
        model="m",
        params=10**9,
        lora=False,
        steps=10,
        prompts=2,
        group=4,
        completion=100,
        prompt_len=50.0,
        beta=0.0,
        fsdp=True,
        vllm_share=0.35,
    )
    return Stage(**{**base, **kw})


def test_full_fine_tuning_step_by_hand():
    peak, bandwidth, memory = GPUS["h100-80gb"]
    tokens = 2 * 50 + 2 * 4 * 100  # each prompt once per group, plus every completion
    flops = 6e9 * tokens + 2e9 * 2 * (50 + 4 * 100)  # update + generation
    step_s = flops / (2 * peak * MFU) + 100 * 2e9 / bandwidth  # + 100 decode steps reading the weights
    est = estimate(_stage(), gpus=2, gpu="h100-80gb")
    assert est["hours"] == pytest.approx(10 * step_s / 3600)
    assert est["gpu_hours"] == pytest.approx(2 * est["hours"])
    # weights, gradients and AdamW's moments (8 bytes per parameter) sharded over 2 GPUs, plus vLLM's share
    assert est["memory_gib"] == pytest.approx((8e9 / 2 + 0.35 * memory) / 2**30)


def test_lora_keeps_the_weights_whole_and_skips_weight_gradients():
    full, lora = estimate(_stage(), 2, "h100-80gb"), estimate(_stage(lora=True, fsdp=False), 2, "h100-80gb")
    assert lora["hours"] < full["hours"]  # k = 4 instead of 6
    assert lora["memory_gib"] == pytest.approx((2e9 + 0.35 * GPUS["h100-80gb"][2]) / 2**30)


def test_a_kl_reference_costs_a_forward_per_update_token():
    peak = GPUS["a100-80gb"][0]
    tokens = 2 * 50 + 2 * 4 * 100
    for lora in (False, True):  # LoRA's reference is the policy with its adapter off: a forward all the same
        with_kl = estimate(_stage(beta=0.04, lora=lora), 1, "a100-80gb")["hours"]
        without = estimate(_stage(lora=lora), 1, "a100-80gb")["hours"]
        assert with_kl - without == pytest.approx(10 * 2e9 * tokens / (peak * MFU) / 3600)
    # a full fine-tuning reference is a frozen copy: 2 bytes per parameter more, sharded like the rest
    memory = GPUS["a100-80gb"][2]
    assert estimate(_stage(beta=0.04), 2, "a100-80gb")["memory_gib"] == pytest.approx(
        ((8e9 + 2e9) / 2 + 0.35 * memory) / 2**30
    )
    lora = estimate(_stage(beta=0.04, lora=True), 2, "a100-80gb")["memory_gib"]
    assert lora == estimate(_stage(lora=True), 2, "a100-80gb")["memory_gib"]


def test_multirun_values_count_as_runs_and_folders_are_not_overrides():
    cmd = [
        ".venv/bin/python",
        "-m",
        "rankrl.train",
        "-m",
        "experiment=fgrpo/fgrpo",
        "profile=paper",
        "benchmark=movielens-100k",
        "task.lam=0.5,2",
        "task.compress_words=<mean rewrite_words of grape_rank>",  # known only after an earlier row
        "init_from=outputs/x",
        "hydra.sweep.dir=outputs/y",
        "experiment_name=fgrpo/sweep",
    ]
    overrides, runs = _overrides(cmd)
    assert runs == 2 and overrides == [
        "experiment=fgrpo/fgrpo",
        "profile=paper",
        "benchmark=movielens-100k",
        "task.lam=0.5",
    ]


def test_a_benchmark_is_a_sweep_point_only_in_its_sweep_folder():
    # one value of a benchmark sweep, run into the sweep's folder: the row is the sweep's, labelled by it
    point = [
        "experiment=rankr1/setwise_bright",
        "benchmark=bright-pony",
        "hydra.run.dir=o/x/sweep/benchmark=bright-pony",
    ]
    assert _sweep_point(point) == "bright-pony"
    # one file per method, the benchmark an override: a row with its own folder (fgrpo/fgrpo_lastfm)
    assert _sweep_point(["experiment=fgrpo/fgrpo", "benchmark=lastfm"]) is None


def test_a_stand_in_smoke_run_measures_l_and_marks_the_row(tmp_path):
    """A paper row the smoke does not run (CoGR on WANDS) reads L from the run the paper's tables.yaml names
    as its stand-in (dl-pools), and says so; a row with its own smoke run is not marked."""
    import json

    from rankrl.gpu_plan import _smoke_prompt_len, smoke_stand_ins

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


def test_an_evaluation_is_its_smoke_cost_scaled_to_the_whole_split_by_hand():
    # the smoke ranked 2 of 43 queries with 30 comparisons of 54,852 prompt tokens in 11 heap rounds
    cost = dict(queries=2, queries_total=43, llm_prompts=30, prompt_tokens=54852, generate_calls=11)
    scaled = scaled_cost(cost)
    assert scaled == pytest.approx(
        {"queries": 43, "prompts": 30 * 21.5, "prompt_tokens": 54852 * 21.5, "rounds": 11}
    )
    ev = Evaluation("r", "m", 10**9, gpus=1, runs=1, completion=100, vllm_share=0.35, **scaled)
    peak, bandwidth, memory = GPUS["h100-80gb"]
    seconds = 2e9 * (54852 * 21.5 + 30 * 21.5 * 100) / (peak * MFU) + 11 * 100 * 2e9 / bandwidth
    est = estimate_evaluation(ev, "h100-80gb")
    assert est["hours"] == pytest.approx(seconds / 3600) == est["gpu_hours"]
    assert est["memory_gib"] == pytest.approx(0.35 * memory / 2**30)
    # a training run's own evaluation holds all of its GPUs
    held = estimate_evaluation(Evaluation("r", "m", 10**9, 8, 1, 43, 645, 1.2e6, 100, 11, 0.35), "h100-80gb")
    assert held["gpu_hours"] == pytest.approx(8 * held["hours"])


def test_a_cost_without_a_split_size_is_not_scaled():
    assert scaled_cost({"queries": 2, "llm_prompts": 30}) is None  # recorded before queries_total existed
    assert scaled_cost({}) is None
    assert scaled_cost({"queries": 0, "queries_total": 5, "llm_prompts": 0}) is None


def test_kv_cache_is_the_share_less_the_weights_and_names_the_share_that_would_hold_a_group():
    from rankrl.models import kv_bytes_per_token

    # Qwen2.5-7B: 28 layers x 4 key-value heads x head size 128 x (k, v) x 2 bytes
    assert kv_bytes_per_token("qwen2.5-7b") == 28 * 4 * 128 * 2 * 2
    assert kv_bytes_per_token("qwen3-4b") == 36 * 8 * 128 * 2 * 2  # Qwen3 sets head_dim itself
    memory = GPUS["h100-80gb"][2]
    per_token = 100_000
    est = estimate(_stage(kv_per_token=per_token), 1, "h100-80gb")
    assert est["kv_tokens"] == pytest.approx((0.35 * memory - 2e9) / per_token)
    needed = 50 + 4 * 100  # one group: the prompt once, G completions of C
    assert est["share_needed"] == pytest.approx((2e9 + needed * per_token) / memory)
    assert "would hold it" not in kv_cell(est, needed)  # ~2.8e5 tokens hold 450
    short = {"kv_tokens": 3_000.0, "share_needed": 0.3812}
    assert kv_cell(short, 18_500) == "3k (< 18.5k: gpu_memory_utilization 0.39 would hold it)"
    assert "more than the GPU" in kv_cell({"kv_tokens": 0.0, "share_needed": 1.7}, 10)
    assert kv_cell({}, 10) == ""  # a model whose KV size is unknown: no claim


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
    import json

    from rankrl.gpu_plan import _smoke_cost

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
