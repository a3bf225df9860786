"""The shared-prefix forward (``trainer.shared_prefix``, ``rankrl.rl.batch.shared_prefix_logits``) equals the
unshared one: log-probs, the GRPO loss and the gradient of every parameter, on the tiny model and on
SmolLM2-135M, for group sizes 1, 2 and 8, prompts of different lengths in one micro-batch, right-padded
completions, LoRA and span-weighted losses. Each case also checks that the prompts really were computed once
(the embedding sees each distinct prompt once), so a silent fallback to the unshared forward fails."""

from __future__ import annotations

import pytest
import torch

from rankrl.models import apply_lora, load_policy
from rankrl.rl.batch import (
    PolicyBatch,
    prefix_cache_selectable,
    prompt_groups,
    to_policy_batch,
    token_logprobs,
)
from rankrl.rl.config import TrainerConfig
from rankrl.rl.spans import SpanBatch
from rankrl.rl.steps import backward_batch
from rankrl.rollout.base import Rollouts, SamplingParams

# float32. Log-probs and the loss: |shared - unshared| <= 1e-5 * (1 + |unshared|) (random tokens have
# log-probs near -15, where SmolLM2's two paths differ by ~4e-5: matmuls and attention of other shapes round
# differently).
# Gradients: ||shared - unshared|| / ||unshared|| per parameter. 1e-5 holds on the tiny model (measured 5e-6);
# SmolLM2's 30 layers amplify rounding past it: against a float64 computation its *unshared* float32
# gradients are already off by up to 2.3e-5, the shared ones by up to 9.9e-5 (measured, G=2, the worst
# parameter), so its bound is 5e-4: an error in the shared path (a wrong position, mask or row) is O(1).
TOLERANCE = 1e-5
GRAD_TOLERANCE = {"tiny": 1e-5, "smollm2-135m": 5e-4}
PROMPT_LENGTHS = (9, 23, 4)  # mixed lengths: prompts are left-padded to 23 in one micro-batch


@pytest.fixture(scope="module", params=["tiny", "smollm2-135m"])
def policy(request, model_dir):
    model, tok = load_policy(str(model_dir / request.param), dtype="float32", device="cpu")
    return model, tok, GRAD_TOLERANCE[request.param]


def rollout_batch(group_size: int, pad_id: int, vocab: int, seed: int = 0) -> PolicyBatch:
    """Prompt-major rows: G completions (1-8 tokens, so right padding) of each of three prompts."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(10, vocab, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]
    completions = [
        torch.randint(10, vocab, (int(torch.randint(1, 9, (1,), generator=g)),), generator=g).tolist()
        for _ in range(len(prompts) * group_size)
    ]
    rollouts = Rollouts(
        prompt_ids=[p for p in prompts for _ in range(group_size)],
        completion_ids=completions,
        logprobs=[[0.0] * len(c) for c in completions],
        texts=[""] * len(completions),
        group_size=group_size,
    )
    return to_policy_batch(rollouts, pad_id)


class EmbeddedTokens:
    """Counts the token positions the model's input embedding computes (one prompt forward per group or G)."""

    def __init__(self, model: torch.nn.Module):
        self.count = 0
        self.handle = model.get_input_embeddings().register_forward_hook(self.add)

    def add(self, module, inputs, output) -> None:
        self.count += inputs[0].numel()


def run(model: torch.nn.Module, batch: PolicyBatch, advantages, cfg: TrainerConfig):
    """(log-probs, loss, gradients, embedded tokens) of one backward_batch call."""
    model.zero_grad(set_to_none=True)
    counter = EmbeddedTokens(model)
    try:
        stats = backward_batch(model, batch, advantages, cfg)
        with torch.no_grad():
            logps = token_logprobs(model, batch, cfg.sampling.temperature, cfg.shared_prefix)
    finally:
        counter.handle.remove()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return logps, stats["loss"], grads, counter.count


def assert_equal_paths(
    model: torch.nn.Module, batch: PolicyBatch, advantages, grad_tolerance: float = TOLERANCE, **cfg_kwargs
) -> None:
    cfg = dict(
        micro_batch_size=len(batch),
        loss_agg="dapo",
        sampling=SamplingParams(max_new_tokens=8, temperature=0.9),
    )
    cfg.update(cfg_kwargs)
    logps, loss, grads, unshared_tokens = run(
        model, batch, advantages, TrainerConfig(**cfg, shared_prefix=False)
    )
    s_logps, s_loss, s_grads, shared_tokens = run(
        model, batch, advantages, TrainerConfig(**cfg, shared_prefix=True)
    )
    torch.testing.assert_close(s_logps, logps, rtol=TOLERANCE, atol=TOLERANCE)
    assert s_loss == pytest.approx(loss, rel=TOLERANCE, abs=TOLERANCE)
    assert grads.keys() == s_grads.keys() and grads
    worst = max(grads, key=lambda n: float((s_grads[n] - grads[n]).norm() / grads[n].norm().clamp(min=1e-30)))
    assert float((s_grads[worst] - grads[worst]).norm() / grads[worst].norm()) <= grad_tolerance, worst
    # the shared path embedded each distinct prompt of each micro-batch once, the unshared one every row's
    # copy
    p, t, step = batch.prompt_len, batch.response_mask.shape[1], cfg["micro_batch_size"]
    micro = [batch.rows(i, i + step) for i in range(0, len(batch), step)]

    def shared(rows: PolicyBatch) -> int:
        return len(prompt_groups(rows)[0]) * p + len(rows) * (t - 1)

    assert unshared_tokens == 2 * len(batch) * (p + t)  # backward pass + the log-prob check
    assert shared_tokens == sum(shared(m) for m in micro) + shared(batch)


@pytest.mark.parametrize("group_size", [1, 2, 8])
def test_shared_prefix_equals_the_unshared_forward(policy, group_size):
    model, tok, grad_tolerance = policy
    model.train()
    batch = rollout_batch(group_size, tok.pad_token_id, model.config.vocab_size)
    advantages = torch.randn(len(batch), generator=torch.Generator().manual_seed(1))
    assert_equal_paths(model, batch, advantages, grad_tolerance)


def test_micro_batches_that_split_groups(policy):
    model, tok, grad_tolerance = policy
    model.train()
    batch = rollout_batch(4, tok.pad_token_id, model.config.vocab_size)
    advantages = torch.randn(len(batch), generator=torch.Generator().manual_seed(2))
    # micro-batches of 3 rows cut groups of 4 (gradient accumulation over them)
    assert_equal_paths(model, batch, advantages, grad_tolerance, micro_batch_size=3, loss_agg="grpo")


def test_span_weighted_losses(policy):
    model, tok, grad_tolerance = policy
    model.train()
    batch = rollout_batch(2, tok.pad_token_id, model.config.vocab_size)
    g = torch.Generator().manual_seed(3)
    first = torch.zeros_like(batch.response_mask)
    first[:, :3] = 1  # "slate" = the first 3 tokens, "order" = the rest (as F-GRPO's two phases)
    masks = {"slate": first * batch.response_mask, "order": (1 - first) * batch.response_mask}
    spans = SpanBatch(
        {k: torch.randn(len(batch), generator=g) for k in masks}, masks, {"slate": 1.0, "order": 0.5}
    )
    assert_equal_paths(model, batch, spans, grad_tolerance)


def test_lora_policy(model_dir):
    model, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    model = apply_lora(model, {"r": 4, "alpha": 8})
    with torch.no_grad():  # a LoRA B of zeros would make the adapter a no-op: give it weights
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(4))
    model.train()
    batch = rollout_batch(8, tok.pad_token_id, model.config.vocab_size)
    advantages = torch.randn(len(batch), generator=torch.Generator().manual_seed(5))
    assert_equal_paths(model, batch, advantages)
    with model.disable_adapter():  # the LoRA reference model: the base under the same forward
        shared = token_logprobs(model, batch, shared_prefix=True)
        torch.testing.assert_close(shared, token_logprobs(model, batch), rtol=TOLERANCE, atol=TOLERANCE)


def test_eager_attention(model_dir):
    # the cache and mask interfaces are transformers' own, so every attention implementation takes them
    model, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    model.set_attn_implementation("eager")
    model.train()
    batch = rollout_batch(4, tok.pad_token_id, model.config.vocab_size)
    assert_equal_paths(model, batch, torch.randn(len(batch), generator=torch.Generator().manual_seed(6)))


def test_gradient_checkpointing_is_refused_not_silently_unshared(model_dir):
    model, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    model.gradient_checkpointing_enable()
    model.train()
    batch = rollout_batch(2, tok.pad_token_id, model.config.vocab_size)
    with pytest.raises(ValueError, match="trainer.shared_prefix=false"):
        token_logprobs(model, batch, shared_prefix=True)


def test_prompt_groups_are_consecutive_equal_prompts():
    ids = torch.tensor([[0, 5, 6, 1], [0, 5, 6, 2], [7, 5, 6, 3], [0, 5, 6, 4]])
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]])
    batch = PolicyBatch(ids, mask, torch.ones(4, 1), 3, torch.zeros(4, 1))
    firsts, index = prompt_groups(batch)
    # rows 0-1 share a prompt; row 3 has row 0's ids but a real token where row 0 has padding
    assert firsts.tolist() == [0, 2, 3] and index.tolist() == [0, 0, 1, 2]


def test_a_hybrid_model_with_linear_attention_computes_every_row_whole(model_dir):
    """Qwen3.5 (F-GRPO's second paper model) mixes gated-delta-net layers, whose recurrent state transformers'
    cache cannot index out to rows, into its attention: the shared forward raised AttributeError
    ('LinearAttentionLayer' object has no attribute 'batch_select_indices') in the first update. Such a
    model computes every row whole, with the same log-probs; attention-only models still share."""
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    config = Qwen3_5TextConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=2,
        linear_key_head_dim=16, linear_value_head_dim=16,
    )  # fmt: skip
    torch.manual_seed(0)
    hybrid = Qwen3_5ForCausalLM(config).eval()
    assert "linear_attention" in config.layer_types and not prefix_cache_selectable(hybrid)
    batch = rollout_batch(2, 0, config.vocab_size)
    shared, whole = (token_logprobs(hybrid, batch, shared_prefix=s) for s in (True, False))
    assert torch.equal(shared, whole)
    tiny, _ = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    assert prefix_cache_selectable(tiny) and prefix_cache_selectable(apply_lora(tiny, {"r": 2, "alpha": 4}))
