"""The GRPO policy loss: clipped importance ratio, optional KL to a reference, loss aggregation.

Per response token t of completion i (N completions, T token positions):

    ratio    = exp(logp - old_logp)
    pg       = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)         (PPO clip)
    kl       = exp(ref_logp - logp) - (ref_logp - logp) - 1                          (k3 estimator)
               (* ratio, with kl_bias_correction)
    loss_tok = pg + beta * kl

``kl_bias_correction`` multiplies the k3 term by the (differentiable) ratio so that its gradient is the
unbiased reverse-KL gradient when sampling is off-policy (DeepSeek-V3.2). TRL 1.16 turns it on by
default (``use_bias_correction_kl=True``); the original GRPO penalty, our default, leaves it off. It
changes the gradient even on-policy, where the ratio's value is 1 but its derivative is not 0.

The per-token losses are then aggregated over the response tokens (``response_mask``); the variants
differ only in the denominator, and each is registered by name (``@register_loss_agg``):

- ``grpo``: mean over each sequence's tokens, then mean over sequences (GRPO paper; long completions
  weigh less per token).
- ``dr_grpo``: sum over all tokens / (N * max_completion_length) (Dr. GRPO: a constant denominator,
  so no length bias).
- ``dapo``: sum over all tokens / number of response tokens (DAPO: every token weighs the same).

This mirrors TRL 1.16 ``GRPOTrainer._compute_loss`` (token-level importance sampling, no vLLM
correction, no entropy mask) and is checked against it in ``tests/rl/test_trl_crosscheck.py``.

Gradient accumulation: called on one micro-batch, each variant divides by that micro-batch's own
count (sequences, or tokens for ``dapo``). Pass ``num_items_in_batch``, the count summed over every
micro-batch of the optimizer step (``count_loss_items`` gives each micro-batch's share), and the
micro-batch losses then *sum* to the full-batch loss, with no further division by the number of
accumulation steps. For ``dapo`` this is TRL's ``num_items_in_batch`` normaliser (TRL divides the
token sum by the generation batch's token count rescaled to one accumulation window); given TRL's
normaliser value our ``dapo`` loss equals TRL's. For ``grpo``/``dr_grpo`` TRL instead divides each
micro-batch loss by the number of accumulation steps, which equals ours when micro-batches hold equal
numbers of sequences.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

# fn(per_token_loss (N, T), response_mask (N, T), num_items, max_completion_length) -> scalar
AggFn = Callable[..., Tensor]
_LOSS_AGGS: dict[str, AggFn] = {}
_AGG_UNITS: dict[str, str] = {}  # name -> "sequences" or "tokens": what num_items_in_batch counts


def register_loss_agg(name: str, unit: str) -> Callable[[AggFn], AggFn]:
    """Register ``fn(per_token_loss (N,T), response_mask (N,T), num_items, max_len) -> scalar``.

    ``unit`` says what the aggregation divides by and so what ``num_items_in_batch`` counts:
    ``"sequences"`` or ``"tokens"``.
    """
    if unit not in ("sequences", "tokens"):
        raise ValueError(f"unit must be 'sequences' or 'tokens', got {unit!r}")

    def decorator(fn: AggFn) -> AggFn:
        if name in _LOSS_AGGS:
            raise ValueError(f"loss aggregation {name!r} is already registered")
        _LOSS_AGGS[name], _AGG_UNITS[name] = fn, unit
        return fn

    return decorator


def get_loss_agg(name: str) -> AggFn:
    """The aggregation registered as ``name``; a ValueError lists the valid names otherwise."""
    if name not in _LOSS_AGGS:
        raise ValueError(f"unknown loss aggregation {name!r}; valid: {sorted(_LOSS_AGGS)}")
    return _LOSS_AGGS[name]


def loss_agg_names() -> list[str]:
    """Names of all registered loss aggregations."""
    return sorted(_LOSS_AGGS)


def count_loss_items(loss_agg: str, response_mask: Tensor) -> int:
    """What one micro-batch contributes to ``num_items_in_batch``: its sequences, or its response tokens.

    Sum this over the micro-batches of one optimizer step and pass the total to ``policy_loss``.
    """
    get_loss_agg(loss_agg)
    if _AGG_UNITS[loss_agg] == "tokens":
        return int(response_mask.sum().item())
    return int(response_mask.size(0))


@register_loss_agg("grpo", unit="sequences")
def grpo_agg(
    per_token_loss: Tensor,
    response_mask: Tensor,
    num_items: float | Tensor | None = None,
    max_completion_length: int | None = None,
) -> Tensor:
    """Mean over each sequence's response tokens, then mean over the N sequences (or / num_items)."""
    lengths = response_mask.sum(dim=1).clamp(min=1)  # (N,); an empty response contributes 0
    per_seq = (per_token_loss * response_mask).sum(dim=1) / lengths  # (N,)
    return per_seq.sum() / (per_token_loss.size(0) if num_items is None else num_items)


@register_loss_agg("dr_grpo", unit="sequences")
def dr_grpo_agg(
    per_token_loss: Tensor,
    response_mask: Tensor,
    num_items: float | Tensor | None = None,
    max_completion_length: int | None = None,
) -> Tensor:
    """Sum over all response tokens / (N * max_completion_length), N the sequences (or num_items)."""
    if max_completion_length is None or max_completion_length < 1:
        raise ValueError(
            "loss_agg='dr_grpo' divides by the completion budget: pass max_completion_length "
            f"(the sampler's max_new_tokens), got {max_completion_length!r}"
        )
    n = per_token_loss.size(0) if num_items is None else num_items
    return (per_token_loss * response_mask).sum() / (n * max_completion_length)


@register_loss_agg("dapo", unit="tokens")
def dapo_agg(
    per_token_loss: Tensor,
    response_mask: Tensor,
    num_items: float | Tensor | None = None,
    max_completion_length: int | None = None,
) -> Tensor:
    """Sum over all response tokens / number of response tokens (or / num_items)."""
    n = response_mask.sum().clamp(min=1) if num_items is None else num_items
    return (per_token_loss * response_mask).sum() / n


def clipped_surrogate(ratio: Tensor, advantages: Tensor, eps_low: float, eps_high: float) -> Tensor:
    """PPO's pessimistic per-token loss -min(ratio*A, clip(ratio, 1-eps_low, 1+eps_high)*A), shape (N, T)."""
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    return -torch.min(ratio * advantages, clipped * advantages)


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimate of KL(policy || reference): exp(ref - logp) - (ref - logp) - 1 >= 0, (N, T)."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1


def _checked(
    logprobs: Tensor,
    old_logprobs: Tensor | None,
    advantages: Tensor,
    response_mask: Tensor,
    ref_logprobs: Tensor | None,
    beta: float,
    eps_low: float,
    eps_high: float,
) -> Tensor:
    """Validate the inputs; return the advantages as (N, T)."""
    shape = tuple(logprobs.shape)
    if logprobs.dim() != 2 or tuple(response_mask.shape) != shape:
        raise ValueError(
            f"logprobs and response_mask must both be (N, T); got {shape} and {tuple(response_mask.shape)}"
        )
    for name, t in (("old_logprobs", old_logprobs), ("ref_logprobs", ref_logprobs)):
        if t is not None and tuple(t.shape) != shape:
            raise ValueError(f"{name} must have the shape of logprobs {shape}, got {tuple(t.shape)}")
    if advantages.dim() == 1 and advantages.size(0) == shape[0]:
        advantages = advantages.unsqueeze(1)  # (N, 1), broadcasts over tokens
    elif tuple(advantages.shape) != shape:
        raise ValueError(
            f"advantages must be (N,) or (N, T) with N, T = {shape}, got {tuple(advantages.shape)}"
        )
    if beta != 0.0 and ref_logprobs is None:
        raise ValueError(f"beta={beta} adds a KL penalty: pass ref_logprobs, or set beta=0.0")
    if not (0.0 <= eps_low < 1.0 and eps_high >= 0.0):
        raise ValueError(
            f"need 0 <= eps_low < 1 and eps_high >= 0, got eps_low={eps_low}, eps_high={eps_high}"
        )
    return advantages


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor | None,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ref_logprobs: Tensor | None = None,
    beta: float = 0.0,
    loss_agg: str = "grpo",
    max_completion_length: int | None = None,
    num_items_in_batch: float | Tensor | None = None,
    kl_bias_correction: bool = False,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped GRPO loss of one (micro-)batch, and detached statistics.

    Args:
        logprobs: (N, T) log-probs of the sampled tokens under the policy being trained (with grad).
        old_logprobs: (N, T) log-probs under the policy that sampled them; None means on-policy
            (``logprobs.detach()``, ratio 1), as TRL does when it skips their computation.
        advantages: (N,) per sequence or (N, T) per token (``rankrl.rl.spans.SpanBatch``).
        response_mask: (N, T) 1 on completion tokens that enter the loss, 0 on padding (and on
            tokens a task masks out, e.g. the delimiters between its spans).
        eps_low, eps_high: clip range [1 - eps_low, 1 + eps_high] of the ratio (DAPO's clip-higher
            uses eps_high > eps_low).
        ref_logprobs: (N, T) reference-model log-probs; needed when beta != 0, and logged if given.
        beta: weight of the k3 KL penalty.
        loss_agg: a registered aggregation: ``grpo``, ``dr_grpo`` or ``dapo`` (module docstring).
        max_completion_length: the completion budget in tokens; required by ``dr_grpo``.
        num_items_in_batch: denominator count over the whole optimizer step (see module docstring
            and ``count_loss_items``); None uses this batch's own count.
        kl_bias_correction: weight the KL term by the ratio (TRL 1.16's default; module docstring).

    Returns:
        (loss, stats): a scalar loss to call ``backward`` on, and detached scalars ``pg_loss``,
        ``kl`` (the KL term as it enters the loss; if ref_logprobs), ``ratio/mean``, ``ratio/max``,
        ``clip_frac/low``, ``clip_frac/high``, ``clip_frac/region``, ``advantages/mean``, ``response_tokens``.
    """
    advantages = _checked(
        logprobs, old_logprobs, advantages, response_mask, ref_logprobs, beta, eps_low, eps_high
    )
    agg = get_loss_agg(loss_agg)
    mask = response_mask.bool()
    maskf = mask.to(logprobs.dtype)
    # Zero the padding before exp(): padded log-probs may be -inf or garbage, and 0 * inf in the
    # backward pass would turn the whole gradient into NaN even though the mask drops those tokens.
    logprobs = torch.where(mask, logprobs, torch.zeros_like(logprobs))
    old = logprobs.detach() if old_logprobs is None else torch.where(mask, old_logprobs, 0.0).detach()
    ratio = torch.exp(logprobs - old)  # (N, T)
    pg = clipped_surrogate(ratio, advantages.to(logprobs.dtype), eps_low, eps_high)  # (N, T)
    kl = _kl_term(logprobs, ref_logprobs, mask, ratio, kl_bias_correction)  # (N, T) or None
    per_token = pg + beta * kl if beta != 0.0 else pg
    loss = agg(per_token, maskf, num_items_in_batch, max_completion_length)
    stats = _stats(ratio, advantages, mask, eps_low, eps_high)
    with torch.no_grad():
        stats["pg_loss"] = agg(pg, maskf, num_items_in_batch, max_completion_length)
        if kl is not None:
            stats["kl"] = _masked_mean(kl, mask)
    return loss, stats


def _kl_term(
    logprobs: Tensor, ref_logprobs: Tensor | None, mask: Tensor, ratio: Tensor, bias_correction: bool
) -> Tensor | None:
    """The per-token KL term (N, T), ratio-weighted with ``bias_correction``; None without a reference."""
    if ref_logprobs is None:
        return None
    kl = k3_kl(logprobs, torch.where(mask, ref_logprobs, 0.0).detach())
    return kl * ratio if bias_correction else kl


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of x over the True positions of mask (0 if there are none), detached."""
    x = x.detach().expand(mask.shape).float()
    return (x * mask).sum() / mask.sum().clamp(min=1)


@torch.no_grad()
def _stats(
    ratio: Tensor, advantages: Tensor, mask: Tensor, eps_low: float, eps_high: float
) -> dict[str, Tensor]:
    """Token-level clip fractions as TRL logs them: a token counts as clipped only where clipping
    removes its gradient (low side with A < 0, high side with A > 0)."""
    low = (ratio < 1 - eps_low) & (advantages < 0)
    high = (ratio > 1 + eps_high) & (advantages > 0)
    masked_ratio = ratio.detach().masked_fill(~mask, float("-inf"))
    return {
        "ratio/mean": _masked_mean(ratio, mask),
        "ratio/max": masked_ratio.max() if mask.any() else ratio.new_ones(()),
        "clip_frac/low": _masked_mean(low, mask),
        "clip_frac/high": _masked_mean(high, mask),
        "clip_frac/region": _masked_mean(low | high, mask),
        "advantages/mean": _masked_mean(advantages, mask),
        "response_tokens": mask.sum().float(),
    }
