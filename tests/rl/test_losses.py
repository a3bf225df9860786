"""Policy loss: hand-computed values, clipping, KL, masking and the loss aggregations."""

from __future__ import annotations

import math

import pytest
import torch

from rankrl.rl.advantages import broadcast_to_tokens
from rankrl.rl.losses import count_loss_items, get_loss_agg, k3_kl, loss_agg_names, policy_loss

AGGS = ["grpo", "dr_grpo", "dapo"]


def _hand_batch():
    """Two completions, ratios chosen to hit each side of the clip range (old log-probs are 0).

    row 0, A=+1: ratios 1.5 (clipped high), 0.5, 1.0        -> token losses -1.2, -0.5, -1.0
    row 1, A=-1: ratios 0.5 (clipped low), 1.5, (padding)  -> token losses  0.8,  1.5
    """
    ratios = torch.tensor([[1.5, 0.5, 1.0], [0.5, 1.5, 1.0]], dtype=torch.float64)
    logprobs = ratios.log().requires_grad_(True)
    old = torch.zeros_like(ratios)
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    return logprobs, old, advantages, mask


@pytest.mark.parametrize(
    "agg,expected,expected_grad",
    [
        # mean of the per-sequence means (-2.7/3 and 2.3/2); d/dlogp = -A*ratio/len/N where unclipped
        ("grpo", (-0.9 + 1.15) / 2, [[0.0, -0.5 / 6, -1 / 6], [0.0, 1.5 / 4, 0.0]]),
        # token sum -0.4 over 5 response tokens
        ("dapo", -0.4 / 5, [[0.0, -0.5 / 5, -1 / 5], [0.0, 1.5 / 5, 0.0]]),
        # token sum over N * max_completion_length = 2 * 4
        ("dr_grpo", -0.4 / 8, [[0.0, -0.5 / 8, -1 / 8], [0.0, 1.5 / 8, 0.0]]),
    ],
)
def test_hand_computed_loss_and_gradient(agg: str, expected: float, expected_grad) -> None:
    logprobs, old, adv, mask = _hand_batch()
    loss, stats = policy_loss(logprobs, old, adv, mask, loss_agg=agg, max_completion_length=4)
    assert loss.item() == pytest.approx(expected, abs=1e-12)
    loss.backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor(expected_grad, dtype=torch.float64))
    assert stats["clip_frac/low"].item() == pytest.approx(1 / 5)
    assert stats["clip_frac/high"].item() == pytest.approx(1 / 5)
    assert stats["clip_frac/region"].item() == pytest.approx(2 / 5)
    assert stats["ratio/mean"].item() == pytest.approx(1.0)
    assert stats["ratio/max"].item() == pytest.approx(1.5)
    assert stats["response_tokens"].item() == 5
    assert stats["pg_loss"].item() == pytest.approx(expected, abs=1e-12)
    assert "kl" not in stats
    assert all(not v.requires_grad for v in stats.values())


def test_asymmetric_clip_range() -> None:
    # ratio 1.25 with A > 0: clipped at eps_high=0.2, not at eps_high=0.28 (DAPO clip-higher).
    logprobs = torch.tensor([[math.log(1.25)]], requires_grad=True)
    args = (torch.zeros(1, 1), torch.ones(1), torch.ones(1, 1))
    loss, stats = policy_loss(logprobs, *args, eps_low=0.2, eps_high=0.2)
    assert loss.item() == pytest.approx(-1.2) and stats["clip_frac/high"].item() == 1.0
    loss, stats = policy_loss(logprobs, *args, eps_low=0.2, eps_high=0.28)
    assert loss.item() == pytest.approx(-1.25) and stats["clip_frac/high"].item() == 0.0
    # ratio 0.75 with A < 0: eps_low=0.2 clips (at 0.8), eps_low=0.3 does not.
    logprobs = torch.tensor([[math.log(0.75)]])
    args = (torch.zeros(1, 1), -torch.ones(1), torch.ones(1, 1))
    assert policy_loss(logprobs, *args, eps_low=0.2)[0].item() == pytest.approx(0.8)
    assert policy_loss(logprobs, *args, eps_low=0.3)[0].item() == pytest.approx(0.75)


@pytest.mark.parametrize("agg", AGGS)
def test_on_policy_ratio_is_one(agg: str) -> None:
    gen = torch.Generator().manual_seed(1)
    logprobs = (-torch.rand(4, 6, generator=gen)).requires_grad_(True)
    adv = torch.tensor([0.5, -1.0, 2.0, 0.0])
    mask = torch.ones(4, 6)
    mask[1, 3:] = 0
    loss, stats = policy_loss(logprobs, None, adv, mask, loss_agg=agg, max_completion_length=6)
    same, same_stats = policy_loss(
        logprobs, logprobs.detach(), adv, mask, loss_agg=agg, max_completion_length=6
    )
    assert loss.item() == pytest.approx(same.item())
    # on-policy the ratio is exactly 1: a ratio/max above 1 means the "old" log-probs are not the policy's
    assert stats["ratio/mean"].item() == pytest.approx(1.0, abs=1e-6)
    assert stats["ratio/max"].item() == pytest.approx(1.0, abs=1e-6)
    assert same_stats["ratio/max"].item() == pytest.approx(1.0, abs=1e-6)
    assert stats["clip_frac/region"].item() == 0.0
    # ratio 1: loss = -aggregate(A), gradient = -A / denominator on every response token
    expected = -get_loss_agg(agg)(broadcast_to_tokens(adv, mask), mask, None, 6)
    assert loss.item() == pytest.approx(expected.item())
    loss.backward()
    assert torch.equal(logprobs.grad == 0, (mask == 0) | (adv == 0).unsqueeze(1))


def test_off_policy_ratio_statistics_are_over_response_tokens_only() -> None:
    """Old log-probs from an earlier policy: ratio = exp(logp - old) per token, padding left out."""
    logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.1, -4.0]], dtype=torch.float64)
    old = torch.tensor([[-1.3, -2.0, -0.4], [-0.3, -1.6, -9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the padding's ratio, exp(5), must not count
    _, stats = policy_loss(logprobs, old, torch.tensor([1.0, -1.0]), mask)
    # by hand: exp(0.3), exp(0), exp(-0.1) | exp(0), exp(0.5); the largest is exp(0.5) = 1.6487212707
    assert stats["ratio/max"].item() == pytest.approx(1.6487212707001282, abs=1e-12)
    expected_mean = (math.exp(0.3) + 1 + math.exp(-0.1) + 1 + math.exp(0.5)) / 5
    assert stats["ratio/mean"].item() == pytest.approx(expected_mean, abs=1e-6)  # averaged in float32
    # A=-1 row: 1.6487 > 1 + eps_high does not clip a negative advantage; nothing is below 1 - eps_low
    assert stats["clip_frac/region"].item() == pytest.approx(1 / 5)  # row 0: exp(0.3) = 1.35 > 1.2 with A>0


@pytest.mark.parametrize("agg", AGGS)
def test_gradient_only_through_response_tokens(agg: str) -> None:
    gen = torch.Generator().manual_seed(2)
    raw = -torch.rand(3, 5, generator=gen)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    # Padding holds garbage a model can produce there: -inf, NaN, huge values.
    padded = raw.clone()
    padded[0, 3], padded[0, 4], padded[2, 0] = float("-inf"), float("nan"), 80.0
    logprobs = padded.requires_grad_(True)
    old = raw - 0.1 * torch.rand(3, 5, generator=gen)
    old[0, 3] = float("nan")
    ref = raw.clone()
    ref[0, 4] = float("inf")
    loss, stats = policy_loss(
        logprobs,
        old,
        torch.tensor([1.0, -0.5, 2.0]),
        mask,
        ref_logprobs=ref,
        beta=0.1,
        loss_agg=agg,
        max_completion_length=5,
    )
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(v) for v in stats.values())
    assert torch.isfinite(logprobs.grad).all()
    assert (logprobs.grad[mask == 0] == 0).all()
    assert (logprobs.grad[mask == 1] != 0).all()


def test_k3_kl_penalty() -> None:
    ratios = torch.tensor([[0.5, 1.0, 2.0]], dtype=torch.float64)
    logprobs = ratios.log().requires_grad_(True)
    ref = torch.zeros(1, 3, dtype=torch.float64)
    kl = 1 / ratios + ratios.log() - 1  # exp(ref - logp) - (ref - logp) - 1 with ref = 0
    torch.testing.assert_close(k3_kl(logprobs.detach(), ref), kl)
    assert (kl >= 0).all() and kl[0, 1] == 0
    mask = torch.ones(1, 3)
    adv = torch.zeros(1)  # no policy-gradient term: the loss is the KL penalty alone
    loss, stats = policy_loss(logprobs, logprobs.detach(), adv, mask, ref_logprobs=ref, beta=0.04)
    assert loss.item() == pytest.approx(0.04 * kl.mean().item())
    assert stats["kl"].item() == pytest.approx(kl.mean().item())
    loss.backward()
    # d/dlogp k3 = 1 - exp(ref - logp) = 1 - 1/ratio
    torch.testing.assert_close(logprobs.grad, 0.04 * (1 - 1 / ratios) / 3)
    # Logged but not in the loss when beta = 0.
    loss0, stats0 = policy_loss(logprobs, logprobs.detach(), adv, mask, ref_logprobs=ref, beta=0.0)
    assert loss0.item() == 0.0 and stats0["kl"].item() == pytest.approx(kl.mean().item())


def test_token_advantages_equal_broadcast_sequence_advantages() -> None:
    logprobs, old, adv, mask = _hand_batch()
    for agg in AGGS:
        a, _ = policy_loss(logprobs, old, adv, mask, loss_agg=agg, max_completion_length=4)
        b, _ = policy_loss(
            logprobs, old, broadcast_to_tokens(adv, mask), mask, loss_agg=agg, max_completion_length=4
        )
        assert a.item() == pytest.approx(b.item())


def test_grpo_weighs_sequences_dapo_weighs_tokens() -> None:
    # A long completion with A=-1 and a short one with A=+1 at ratio 1.
    logprobs = torch.zeros(2, 4)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    adv = torch.tensor([-1.0, 1.0])
    assert policy_loss(logprobs, None, adv, mask, loss_agg="grpo")[0].item() == pytest.approx(0.0)
    assert policy_loss(logprobs, None, adv, mask, loss_agg="dapo")[0].item() == pytest.approx(3 / 5)
    assert policy_loss(logprobs, None, adv, mask, loss_agg="dr_grpo", max_completion_length=10)[0].item() == (
        pytest.approx(3 / 20)
    )


@pytest.mark.parametrize("agg", AGGS)
def test_num_items_in_batch_makes_micro_batches_sum_to_full_batch(agg: str) -> None:
    gen = torch.Generator().manual_seed(3)
    n, t = 6, 7
    logprobs = (-torch.rand(n, t, generator=gen, dtype=torch.float64)).requires_grad_(True)
    old = logprobs.detach() + 0.3 * torch.randn(n, t, generator=gen, dtype=torch.float64)
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    mask = (torch.rand(n, t, generator=gen) < 0.7).long()
    mask[:, 0] = 1
    kwargs = dict(loss_agg=agg, max_completion_length=t, eps_high=0.28)
    full, _ = policy_loss(logprobs, old, adv, mask, **kwargs)
    (full_grad,) = torch.autograd.grad(full, logprobs)
    parts = [slice(0, 2), slice(2, 6)]  # unequal micro-batches: plain averaging would be wrong
    total = sum(count_loss_items(agg, mask[p]) for p in parts)
    assert total == (mask.sum().item() if agg == "dapo" else n)
    summed = sum(
        policy_loss(logprobs[p], old[p], adv[p], mask[p], num_items_in_batch=total, **kwargs)[0]
        for p in parts
    )
    (summed_grad,) = torch.autograd.grad(summed, logprobs)
    assert summed.item() == pytest.approx(full.item(), abs=1e-12)
    torch.testing.assert_close(summed_grad, full_grad)


def test_empty_response_rows_contribute_zero() -> None:
    logprobs = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    for agg in AGGS:
        loss, stats = policy_loss(
            logprobs, None, torch.tensor([1.0, 5.0]), mask, loss_agg=agg, max_completion_length=3
        )
        assert torch.isfinite(loss)
    empty, stats = policy_loss(logprobs, None, torch.ones(2), torch.zeros(2, 3), loss_agg="dapo")
    assert empty.item() == 0.0 and stats["response_tokens"].item() == 0


def test_registry_and_errors() -> None:
    assert set(AGGS) <= set(loss_agg_names())
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"unknown loss aggregation 'token_mean'.*dapo.*dr_grpo.*grpo"):
        policy_loss(x, None, torch.zeros(2), torch.ones(2, 3), loss_agg="token_mean")
    with pytest.raises(ValueError, match="max_completion_length"):
        policy_loss(x, None, torch.zeros(2), torch.ones(2, 3), loss_agg="dr_grpo")
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(x, None, torch.zeros(2), torch.ones(2, 3), beta=0.1)
    with pytest.raises(ValueError, match="advantages"):
        policy_loss(x, None, torch.zeros(3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="response_mask"):
        policy_loss(x, None, torch.zeros(2), torch.ones(2, 4))
    with pytest.raises(ValueError, match="old_logprobs"):
        policy_loss(x, torch.zeros(2, 4), torch.zeros(2), torch.ones(2, 3))
    with pytest.raises(ValueError, match="eps_low"):
        policy_loss(x, None, torch.zeros(2), torch.ones(2, 3), eps_low=1.0)
