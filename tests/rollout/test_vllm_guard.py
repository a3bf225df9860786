"""VLLMEngine without a GPU: the guard, the import boundary, and the real code path against a fake ``vllm``.

The fake stands in for ``vllm.LLM`` only where the engine touches it (constructor, generate, sleep/wake,
the in-process model's ``load_weights``, prefix cache), so the bookkeeping around it is tested here; the
engine itself runs on GPU machines only.
"""

from __future__ import annotations

import copy
import importlib.machinery
import os
import pkgutil
import subprocess
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import rankrl.rollout.vllm as rv
from rankrl.models import apply_lora, load_policy, tiny_path
from rankrl.rollout.base import SamplingParams
from rankrl.rollout.hf import render_prompts

REPO = Path(__file__).resolve().parents[2]
PROMPTS = [[{"role": "user", "content": "Hello"}], [{"role": "user", "content": "Name a colour."}]]


def test_guard_on_this_machine_names_the_fix():
    if rv.importlib.util.find_spec("vllm") is not None and torch.cuda.is_available():
        pytest.skip("vLLM and a GPU are present")
    with pytest.raises(RuntimeError, match=r"rollout=vllm needs a CUDA GPU and `pip install -e \.\[gpu\]`; use "
                                           r"rollout=hf on CPU"):
        rv.VLLMEngine(torch.nn.Linear(1, 1), tokenizer=None)


def test_guard_checks_both_vllm_and_cuda(monkeypatch):
    spec = importlib.machinery.ModuleSpec("vllm", None)
    monkeypatch.setattr(rv.importlib.util, "find_spec", lambda name, *a: spec if name == "vllm" else None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        rv.check_vllm_available()
    monkeypatch.setattr(rv.importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(RuntimeError, match="vllm is not installed"):
        rv.check_vllm_available()


def test_rl_and_rollout_modules_never_import_vllm(tmp_path):
    """A poisoned ``vllm`` package on the path: any import of it kills the child process."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("raise SystemExit('vllm was imported')\n")
    import rankrl.rl

    modules = ["rankrl.rl"] + [f"rankrl.rl.{m.name}" for m in pkgutil.iter_modules(rankrl.rl.__path__)]
    modules += ["rankrl.rollout", "rankrl.rollout.hf", "rankrl.rollout.vllm", "rankrl.models"]
    code = "import importlib\nfor m in %r:\n    importlib.import_module(m)\nprint('ok')" % modules
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{REPO}"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]


# ------------------------------------------------------------------ the code path, against a fake vllm
class FakeRunnerModel:
    def __init__(self, calls: list) -> None:
        self.calls, self.loaded = calls, {}

    def load_weights(self, weights) -> None:
        self.calls.append("load_weights")
        self.loaded = {name: t.clone() for name, t in weights}  # vLLM copies into its own tensors


class FakeLLM:
    def __init__(self, **kwargs) -> None:
        self.kwargs, self.calls, self.requests = kwargs, [], []
        runner = SimpleNamespace(model=FakeRunnerModel(self.calls))
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
            model_runner=runner)))

    def generate(self, prompts, sampling_params, use_tqdm):
        self.calls.append("generate")
        self.requests.append((prompts, sampling_params))
        results = []
        for i, prompt in enumerate(prompts):
            samples = []
            for g in reversed(range(sampling_params.n)):  # out of order: the engine sorts by index
                ids = [100 + i, 200 + g, 7]
                steps = [{t: SimpleNamespace(logprob=-(t % 10) / 10), 1: SimpleNamespace(logprob=-9.0)} for t in ids]
                samples.append(SimpleNamespace(index=g, token_ids=tuple(ids), logprobs=steps, text=f"p{i}s{g}"))
            results.append(SimpleNamespace(prompt_token_ids=prompt["prompt_token_ids"], outputs=samples))
        return results

    def sleep(self, level):
        self.calls.append(f"sleep({level})")

    def wake_up(self, tags=None):
        self.calls.append(f"wake_up({','.join(tags)})")

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")


@pytest.fixture()
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    module.LLM = FakeLLM
    module.SamplingParams = lambda **kw: SimpleNamespace(**kw)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "")  # remembered, so what the engine sets is undone after the test
        monkeypatch.delenv(key)
    return module


@pytest.fixture(scope="module")
def tiny():
    return load_policy(tiny_path())


def test_engine_builds_generates_sleeps_and_syncs(fake_vllm, tiny):
    model, tok = tiny
    engine = rv.VLLMEngine(model, tok, gpu_memory_utilization=0.3, max_model_len=512)
    llm = engine.llm
    assert llm.kwargs["model"] == str(tiny_path()) and llm.kwargs["gpu_memory_utilization"] == 0.3
    assert llm.kwargs["logprobs_mode"] == "processed_logprobs" and llm.kwargs["enable_sleep_mode"] is True
    assert llm.kwargs["distributed_executor_backend"] == "external_launcher"
    assert os.environ["WORLD_SIZE"] == "1" and os.environ["MASTER_PORT"].isdigit()
    runner = llm.llm_engine.model_executor.driver_worker.model_runner.model
    assert set(runner.loaded) == {n for n, _ in model.named_parameters()}  # pushed once at construction
    assert llm.calls == ["load_weights", "reset_prefix_cache"]

    out = engine.generate(PROMPTS, n=2, sampling=SamplingParams(max_new_tokens=9, temperature=0.7,
                                                                stop=("</a>",)))
    prompts, params = llm.requests[0]
    assert [p["prompt_token_ids"] for p in prompts] == render_prompts(tok, PROMPTS)
    assert (params.n, params.temperature, params.top_k, params.max_tokens, params.logprobs) == (2, 0.7, -1, 9, 0)
    assert params.stop == ["</a>"] and params.include_stop_str_in_output is True
    assert out.texts == ["p0s0", "p0s1", "p1s0", "p1s1"] and out.group_size == 2
    assert out.completion_ids[3] == [101, 201, 7]
    assert out.logprobs[3] == [-0.1, -0.1, -0.7]  # the sampled token's entry, not the alternative's
    assert out.prompt_ids[2] == out.prompt_ids[3] == render_prompts(tok, PROMPTS)[1]
    assert out.stats["tokens"] == 12
    assert llm.calls[-2:] == ["generate", "sleep(1)"]

    del llm.calls[:]
    engine.sync_weights(model)
    engine.generate(PROMPTS[:1], n=1, sampling=SamplingParams())
    assert llm.calls == ["wake_up(weights)", "load_weights", "reset_prefix_cache", "wake_up(kv_cache)",
                         "generate", "sleep(1)"]


def test_lora_weights_are_merged_for_vllm_and_unmerged_after(fake_vllm, tiny):
    model, tok = tiny
    policy = apply_lora(copy.deepcopy(model), {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]})
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # B starts at zero, which would make the merge invisible
    before = {n: p.clone() for n, p in policy.named_parameters()}
    engine = rv.VLLMEngine(policy, tok, enable_sleep_mode=False)
    loaded = engine.llm.llm_engine.model_executor.driver_worker.model_runner.model.loaded
    merged = copy.deepcopy(policy).merge_and_unload().state_dict()
    assert engine.llm.kwargs["model"] == str(tiny_path())
    assert set(loaded) == {n for n, _ in model.named_parameters()}  # plain names, no adapter tensors
    for name, tensor in loaded.items():
        torch.testing.assert_close(tensor, merged[name])
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(loaded[q], dict(model.named_parameters())[q])
    for name, param in policy.named_parameters():  # unmerged again (up to float rounding of W + BA - BA)
        torch.testing.assert_close(param, before[name], atol=1e-6, rtol=0)
    assert not any(getattr(m, "merged", False) for m in policy.modules())
    engine.generate(PROMPTS, n=1, sampling=SamplingParams(temperature=0.0))
    assert "sleep(1)" not in engine.llm.calls
