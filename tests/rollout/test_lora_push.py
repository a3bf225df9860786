"""What a LoRA policy pushes to the engine (rankrl.rollout.vllm.vllm_named_weights), without an engine: the
weights with the adapter folded in, as peft's own merge writes them, and the policy's base left bit for bit
as it was, push after push, in bfloat16, where merging and unmerging in place drifts it."""

from __future__ import annotations

import copy

import pytest
import torch

from rankrl.models import load_policy
from rankrl.rollout.vllm import vllm_named_weights

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture
def bf16_lora(model_dir):
    policy, _ = load_policy(str(model_dir / "tiny"), dtype="bfloat16", trainable=True, lora=LORA)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in policy.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.02)  # B starts at zero, which would make the fold invisible
    return policy


def _base(policy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" not in n}


def test_the_pushed_weights_are_peft_merges_and_the_adapter_is_not_pushed(bf16_lora):
    pushed = dict(vllm_named_weights(bf16_lora))
    merged = copy.deepcopy(bf16_lora)
    merged.merge_adapter()  # peft's own fold, in place, on a copy
    reference = dict(vllm_named_weights(merged))
    assert pushed.keys() == reference.keys() and not any("lora" in n for n in pushed)
    for name, tensor in pushed.items():
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, reference[name]), name
    q_base = "base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"
    base = dict(bf16_lora.named_parameters())[q_base]
    assert not torch.equal(pushed["model.layers.0.self_attn.q_proj.weight"], base)  # the adapter is in it


def test_pushes_leave_the_base_exactly_as_it_was_while_the_adapter_trains(bf16_lora):
    """100 pushes, each after a step of the adapter: the base (and so the adapter-off KL reference) is
    unchanged to the bit. Through peft's in-place merge and unmerge, the same loop changes it."""
    before = _base(bf16_lora)
    adapters = [p for n, p in bf16_lora.named_parameters() if "lora_B" in n]
    drifting = copy.deepcopy(bf16_lora)
    drifting_adapters = [p for n, p in drifting.named_parameters() if "lora_B" in n]
    for _ in range(100):
        with torch.no_grad():
            for mine, theirs in zip(adapters, drifting_adapters):
                step = torch.randn_like(mine) * 1e-4
                mine.add_(step)
                theirs.add_(step)
        for _ in vllm_named_weights(bf16_lora):
            pass
        drifting.merge_adapter()
        drifting.unmerge_adapter()
    after = _base(bf16_lora)
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert any(not torch.equal(before[n], p) for n, p in _base(drifting).items())  # what the fold avoids
