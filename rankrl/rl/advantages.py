"""Group-relative advantages for GRPO, and how they reach the tokens.

Rewards arrive as one value per completion, N = B*G rows in prompt-major order (row i*G+g is sample g
of prompt i, as in ``Rollouts``). Each estimator compares a completion with the other samples of its
own prompt; they differ only in how that difference is scaled:

- ``grpo``: (r - mean_g) / (std_g + eps), the GRPO paper and TRL ``scale_rewards="group"``.
- ``dr_grpo``: r - mean_g, Dr. GRPO (TRL ``scale_rewards="none"``).
- ``batch``: (r - mean_g) / (std_batch + eps), TRL ``scale_rewards="batch"``.

The std convention is TRL 1.16's (``trl.trainer.utils.nanstd``): Bessel-corrected (unbiased, divide by
G - 1), ``eps = 1e-4`` added to the std, not to the variance. Where TRL has no std (G = 1, or a batch of
one reward) it uses 0. A group whose rewards are all equal gets exactly 0 here, never NaN and never the
rounding residue of ``r - mean`` that TRL can leave; that is the only place we differ from TRL.

Because ``grpo`` standardises within each group, any map ``a*r + b`` with ``a > 0`` leaves its
advantages unchanged (up to the ``eps`` term): a task whose reward is a monotone map of a rank or a score
need not argue which exact map it uses.

Estimators are registered by name (``@register_advantage``) so a Hydra config picks one with a string.
``broadcast_to_tokens`` turns the (N,) result into the (N, T) tensor the policy loss takes; advantages that
differ between token spans of one completion are ``rankrl.rl.spans``'s.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

AdvantageFn = Callable[..., Tensor]
_ADVANTAGES: dict[str, AdvantageFn] = {}

EPS = 1e-4  # TRL 1.16 adds this to the std before dividing


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register an estimator ``fn(rewards (N,), group_size, eps) -> (N,)`` under ``name``."""

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        if name in _ADVANTAGES:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        _ADVANTAGES[name] = fn
        return fn

    return decorator


def get_advantage_fn(name: str) -> AdvantageFn:
    """The estimator registered as ``name``; a ValueError lists the valid names otherwise."""
    if name not in _ADVANTAGES:
        raise ValueError(f"unknown advantage estimator {name!r}; valid: {sorted(_ADVANTAGES)}")
    return _ADVANTAGES[name]


def advantage_names() -> list[str]:
    """Names of all registered estimators."""
    return sorted(_ADVANTAGES)


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """Check the rewards and view them as (B, G)."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size != 0:
        raise ValueError(
            f"group_size must be >= 1 and divide the number of rewards; got group_size={group_size}, "
            f"N={rewards.numel()}"
        )
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or inf; a task must give every completion a finite reward")
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    return rewards.view(-1, group_size)  # (B, G)


def _unbiased_std(x: Tensor, dim: int | None = None) -> Tensor:
    """Bessel-corrected std as TRL's ``nanstd``, but 0 (not NaN) where there is a single value."""
    n = x.numel() if dim is None else x.size(dim)
    if n < 2:
        return x.new_zeros(()) if dim is None else torch.zeros_like(x.select(dim, 0))
    return x.std() if dim is None else x.std(dim=dim)


def _centred(grouped: Tensor) -> Tensor:
    """r - mean_g, exactly 0 in groups whose rewards are all equal, shape (B, G)."""
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # (B, G)
    # mean() of G equal floats can differ from them by one ulp; a flat group must carry no signal at all.
    flat = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)  # (B, 1)
    return torch.where(flat, torch.zeros_like(centred), centred)


@register_advantage("grpo")
def grpo_advantages(rewards: Tensor, group_size: int, eps: float = EPS) -> Tensor:
    """Group-standardised advantages (r - mean_g) / (std_g + eps).

    Args:
        rewards: (N,) one reward per completion, N = B*G prompt-major.
        group_size: G completions per prompt.
        eps: added to the unbiased group std (TRL: 1e-4).

    Returns:
        (N,) advantages in the rewards' float dtype (float32 for integer rewards); 0 for every member
        of a group with equal rewards (also G = 1).
    """
    grouped = _grouped(rewards, group_size)  # (B, G)
    std = _unbiased_std(grouped, dim=1).unsqueeze(1)  # (B, 1)
    return (_centred(grouped) / (std + eps)).view(-1)


@register_advantage("dr_grpo")
def dr_grpo_advantages(rewards: Tensor, group_size: int, eps: float = EPS) -> Tensor:
    """Group-centred advantages r - mean_g without std scaling (Dr. GRPO; ``eps`` is unused).

    Args:
        rewards: (N,) one reward per completion, N = B*G prompt-major.
        group_size: G completions per prompt.
        eps: accepted for a uniform signature; not used.

    Returns:
        (N,) advantages in reward units.
    """
    return _centred(_grouped(rewards, group_size)).view(-1)


@register_advantage("batch")
def batch_advantages(rewards: Tensor, group_size: int, eps: float = EPS) -> Tensor:
    """Group-centred advantages scaled by the std of the whole batch, (r - mean_g) / (std_N + eps).

    Scaling by one batch-wide std keeps the relative size of advantages across prompts, so an easy
    prompt with a tiny reward spread is not blown up to unit scale (TRL ``scale_rewards="batch"``).

    Args:
        rewards: (N,) one reward per completion, N = B*G prompt-major.
        group_size: G completions per prompt.
        eps: added to the unbiased std of all N rewards (TRL: 1e-4).

    Returns:
        (N,) advantages.
    """
    grouped = _grouped(rewards, group_size)  # (B, G)
    return (_centred(grouped) / (_unbiased_std(grouped) + eps)).view(-1)


def flat_group_share(rewards: Tensor, group_size: int) -> float:
    """Share of the prompts whose G rewards are all equal: their advantages are 0, so they teach nothing
    (TRL logs it as ``frac_reward_zero_std``). Near 1 while the mean reward is far from 0 and 1 means the
    policy answers each prompt the same way every time: sampling has collapsed, not the reward."""
    grouped = _grouped(rewards, group_size)  # (B, G)
    return (grouped == grouped[:, :1]).all(dim=1).float().mean().item()


def compute_advantages(name: str, rewards: Tensor, group_size: int, eps: float = EPS) -> Tensor:
    """Look up estimator ``name`` and apply it to rewards (N,) -> advantages (N,)."""
    return get_advantage_fn(name)(rewards, group_size, eps=eps)


def broadcast_to_tokens(advantages: Tensor, response_mask: Tensor) -> Tensor:
    """Give every response token its sequence's advantage.

    Args:
        advantages: (N,) sequence advantages.
        response_mask: (N, T), 1 on completion tokens that enter the loss.

    Returns:
        (N, T) advantages, 0 outside the response mask.
    """
    if advantages.dim() != 1 or response_mask.dim() != 2 or response_mask.size(0) != advantages.size(0):
        raise ValueError(
            f"need advantages (N,) and response_mask (N, T); got {tuple(advantages.shape)} and "
            f"{tuple(response_mask.shape)}"
        )
    return advantages.unsqueeze(1) * response_mask.to(advantages.dtype)  # (N, T)
