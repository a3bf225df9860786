"""Advantage estimators: loop vs vectorised (as veRL's test_core_algos), flat groups, invariances, spans."""

from __future__ import annotations

import statistics

import pytest
import torch

from rankrl.rl.advantages import (
    EPS,
    advantage_names,
    broadcast_to_tokens,
    compute_advantages,
    flat_group_share,
    get_advantage_fn,
)


def _loop_advantages(name: str, rewards: list[float], group_size: int, eps: float = EPS) -> list[float]:
    """The textbook formulas, one group at a time in plain Python (sample std, as TRL's nanstd)."""
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    batch_std = statistics.stdev(rewards) if len(rewards) > 1 else 0.0
    out = []
    for group in groups:
        mean = sum(group) / len(group)
        if all(r == group[0] for r in group):
            out += [0.0] * len(group)
            continue
        group_std = statistics.stdev(group)
        scale = {"grpo": group_std + eps, "dr_grpo": 1.0, "batch": batch_std + eps}[name]
        out += [(r - mean) / scale for r in group]
    return out


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "batch"])
@pytest.mark.parametrize("group_size", [2, 4, 8])
def test_vectorised_matches_loop(name: str, group_size: int) -> None:
    gen = torch.Generator().manual_seed(group_size)
    rewards = torch.randn(6 * group_size, generator=gen, dtype=torch.float64)
    rewards[:group_size] = 0.5  # one flat group among random ones
    expected = torch.tensor(_loop_advantages(name, rewards.tolist(), group_size), dtype=torch.float64)
    got = compute_advantages(name, rewards, group_size)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_grpo_uses_unbiased_std_and_trl_eps() -> None:
    # G=2, rewards 0 and 1: mean 0.5, unbiased std sqrt(0.5); population std would give +-1/(0.5+eps).
    adv = compute_advantages("grpo", torch.tensor([0.0, 1.0]), group_size=2)
    expected = 0.5 / (0.5**0.5 + 1e-4)
    torch.testing.assert_close(adv, torch.tensor([-expected, expected]))


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "batch"])
@pytest.mark.parametrize("value", [0.0, 0.1, 1 / 3, -7.25, 1e6])
def test_flat_groups_give_exact_zero(name: str, value: float) -> None:
    rewards = torch.full((12,), value)
    for group_size in (1, 3, 4, 12):
        adv = compute_advantages(name, rewards, group_size)
        assert torch.equal(adv, torch.zeros(12)), (name, group_size, adv)


def test_flat_group_share_counts_the_groups_with_no_signal() -> None:
    # three prompts of G=4: one all wrong, one mixed, one all right -> two of three teach nothing
    rewards = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    assert flat_group_share(rewards, 4) == pytest.approx(2 / 3)
    assert flat_group_share(rewards, 2) == pytest.approx(5 / 6)  # (0,0) (0,0) (0,1) (0,0) (1,1) (1,1)
    flat = compute_advantages("grpo", rewards, 4).view(3, 4)
    assert (flat.abs().sum(dim=1) == 0).float().mean().item() == pytest.approx(2 / 3)


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "batch"])
def test_group_size_one_is_zero_not_nan(name: str) -> None:
    adv = compute_advantages(name, torch.tensor([0.3, -1.0, 2.0]), group_size=1)
    assert torch.equal(adv, torch.zeros(3))


def test_single_reward_batch_is_zero() -> None:
    assert torch.equal(compute_advantages("batch", torch.tensor([4.0]), group_size=1), torch.zeros(1))


@pytest.mark.parametrize("a,b", [(2.0, 0.0), (0.5, -3.0), (10.0, 7.0), (1 / 99, 1.0)])
def test_grpo_invariant_to_positive_linear_maps(a: float, b: float) -> None:
    # GRAPE: a rank reward r = 1 - 2(rank-1)/(N-1) and the raw rank's negation give the same GRPO update.
    rank = torch.tensor([1, 5, 99, 3, 10, 10, 2, 50], dtype=torch.float64)
    reward = 1 - 2 * (rank - 1) / (100 - 1)
    ref = compute_advantages("grpo", reward, group_size=4, eps=0.0)
    torch.testing.assert_close(compute_advantages("grpo", a * reward + b, group_size=4, eps=0.0), ref)
    torch.testing.assert_close(compute_advantages("grpo", -rank, group_size=4, eps=0.0), ref)
    # With TRL's eps the map acts only through eps / (a * std): small unless a shrinks the spread.
    if a >= 0.5:
        torch.testing.assert_close(
            compute_advantages("grpo", a * reward + b, group_size=4), ref, atol=2e-3, rtol=0
        )


def test_dr_grpo_scales_linearly_and_ignores_shift() -> None:
    rewards = torch.tensor([0.0, 1.0, 3.0, 2.0, 2.0, 5.0])
    base = compute_advantages("dr_grpo", rewards, group_size=3)
    torch.testing.assert_close(compute_advantages("dr_grpo", 3 * rewards + 4, group_size=3), 3 * base)
    torch.testing.assert_close(base.view(2, 3).sum(dim=1), torch.zeros(2))


def test_batch_scaling_keeps_relative_spread_across_prompts() -> None:
    rewards = torch.tensor([0.0, 0.1, 0.0, 10.0])  # prompt 0 spreads 0.1, prompt 1 spreads 10
    adv = compute_advantages("batch", rewards, group_size=2)
    assert (adv[1] / adv[3]).item() == pytest.approx(0.01, rel=1e-5)
    grpo = compute_advantages("grpo", rewards, group_size=2)
    assert grpo[1].item() == pytest.approx(grpo[3].item(), rel=5e-3)  # group scaling erases that difference


def test_integer_rewards_become_float() -> None:
    adv = compute_advantages("grpo", torch.tensor([0, 1, 1, 1]), group_size=2)
    assert adv.dtype == torch.float32 and adv[2:].eq(0).all()


def test_unknown_estimator_lists_valid_names() -> None:
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'gae'.*batch.*dr_grpo.*grpo"):
        get_advantage_fn("gae")
    assert {"grpo", "dr_grpo", "batch"} <= set(advantage_names())


@pytest.mark.parametrize(
    "rewards,group_size,match",
    [
        (torch.zeros(6), 4, "divide"),
        (torch.zeros(6), 0, "group_size"),
        (torch.zeros(2, 3), 3, "1-D"),
        (torch.tensor([0.0, float("nan")]), 2, "NaN"),
    ],
)
def test_bad_inputs_raise(rewards: torch.Tensor, group_size: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compute_advantages("grpo", rewards, group_size)


def test_broadcast_to_tokens_zero_outside_mask() -> None:
    adv = torch.tensor([1.5, -2.0])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    expected = torch.tensor([[1.5, 1.5, 0.0], [-2.0, 0.0, 0.0]])
    assert torch.equal(broadcast_to_tokens(adv, mask), expected)
    with pytest.raises(ValueError, match="response_mask"):
        broadcast_to_tokens(adv, mask[:1])
