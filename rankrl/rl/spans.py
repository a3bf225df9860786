"""Span advantages: several rewards in one completion, each driving only its own tokens.

A task marks stretches of each completion's text (``rankrl.rl.task.Span``: a reward (N,) and a character
range per completion). Here the ranges become token masks, each span gets its own group-relative
advantage from the configured estimator, and the policy loss is the weighted sum of one loss per span:

    L = sum_k lambda_k * L_k,   L_k = the configured loss over span k's tokens with span k's advantages.

Each L_k is aggregated exactly like a whole-completion loss restricted to its mask, so the identity holds
under every aggregation (``grpo``, ``dr_grpo``, ``dapo``). Tokens inside no span (delimiters, the end of
turn) appear in no mask, so they count in neither a loss nor its normaliser and get zero gradient. A span
may claim the end of turn (``Span.end_of_turn``): an eos decodes to no character, so no character range can
hold it, yet it is a decision (to stop) that a reward can judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from rankrl.rl.advantages import get_advantage_fn
from rankrl.rl.task import CharRange, Span


@dataclass
class SpanBatch:
    """Per-span advantages and token masks for one batch, what the loss consumes.

    Args:
        advantages: span name -> (N,) group-relative advantages of that span's reward.
        masks: span name -> (N, T) 0/1 float mask of the span's completion tokens.
        weights: span name -> lambda_k.
    """

    advantages: dict[str, Tensor]
    masks: dict[str, Tensor]
    weights: dict[str, float]

    def rows(self, start: int, stop: int) -> SpanBatch:
        return SpanBatch(
            {k: v[start:stop] for k, v in self.advantages.items()},
            {k: v[start:stop] for k, v in self.masks.items()},
            self.weights,
        )

    def token_advantages(self) -> Tensor:
        """(N, T) sum_k lambda_k * A_k * mask_k: the per-token view (for logging and inspection)."""
        return sum(self.weights[k] * self.advantages[k].unsqueeze(1) * self.masks[k] for k in self.masks)


def token_char_ends(completion_ids: Sequence[int], tokenizer: Any, text: str) -> list[int] | None:
    """End offset in ``text`` of each completion token, or None when tokens do not decode piecewise.

    Tokens are decoded one by one (linear time). A byte-level BPE token holding part of a multi-byte
    character does not decode alone; then the pieces do not add up to ``text`` and None is returned, and
    the caller falls back to ``incremental_char_ends``.
    """
    ends, pos = [], 0
    for tok in completion_ids:
        piece = tokenizer.decode([tok], skip_special_tokens=True)
        if text.startswith(piece, pos):
            pos += len(piece)
        else:
            return None
        ends.append(pos)
    return ends if pos == len(text) else None


def incremental_char_ends(completion_ids: Sequence[int], tokenizer: Any, text: str) -> list[int]:
    """End offsets by incremental detokenisation, the streaming decoders' method (TGI, vLLM).

    A window of tokens is decoded with the tokens before it as context; its new characters are released
    only once they no longer end in U+FFFD (an unfinished multi-byte character). A token that only starts a
    character ends where the previous one did (it is empty, so it belongs to no span) and the token that
    completes it takes the whole character. The window holds only the unfinished tokens, so the cost is
    linear in the completion's length rather than the quadratic one of decoding every prefix. Offsets are
    capped at ``len(text)``: a tokenizer whose windowed decoding adds characters cannot push a mask past
    the text.
    """
    ends: list[int] = []
    released, prefix, read = 0, 0, 0
    ids = list(completion_ids)
    before = ""  # the decoded context ids[prefix:read]; it changes only when the window moves
    for i in range(len(ids)):
        after = tokenizer.decode(ids[prefix : i + 1], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            released += len(after) - len(before)
            prefix, read = read, i + 1
            before = tokenizer.decode(ids[prefix:read], skip_special_tokens=True)
        ends.append(min(released, len(text)))
    return ends


def span_token_mask(
    char_ends: Sequence[int], char_range: CharRange | None, width: int, end_of_turn_at: int | None = None
) -> Tensor:
    """(width,) mask of the tokens lying wholly inside ``char_range``; empty tokens belong to no span,
    except, when ``end_of_turn_at`` is the text's length, the empty tokens after its last character (the
    end of turn).

    A token that straddles a range boundary (e.g. one holding the end of a list and the closing tag) is
    left out: it is partly a delimiter.
    """
    mask = torch.zeros(width)
    if char_range is None:
        return mask
    lo, hi = char_range
    start = 0
    for t, end in enumerate(char_ends):
        if end > start and lo <= start and end <= hi:
            mask[t] = 1.0
        elif end == start == end_of_turn_at:
            mask[t] = 1.0
        start = end
    return mask


def span_masks(
    spans: Mapping[str, Span],
    completion_ids: Sequence[Sequence[int]],
    texts: Sequence[str],
    tokenizer: Any,
    width: int,
) -> dict[str, Tensor]:
    """span name -> (N, width) token masks from the spans' character ranges."""
    ends = []
    for ids, text in zip(completion_ids, texts):
        found = token_char_ends(ids, tokenizer, text)
        ends.append(found if found is not None else incremental_char_ends(ids, tokenizer, text))
    return {
        name: torch.stack(
            [
                span_token_mask(e, r, width, len(text) if span.end_of_turn else None)
                for e, r, text in zip(ends, span.ranges, texts)
            ]
        )
        for name, span in spans.items()
    }


def span_advantages(spans: Mapping[str, Span], estimator: str, group_size: int) -> dict[str, Tensor]:
    """span name -> (N,) advantages: each span's reward through the configured estimator on its own."""
    fn = get_advantage_fn(estimator)
    return {name: fn(span.rewards.float(), group_size) for name, span in spans.items()}


def span_weights(names: Sequence[str], configured: Mapping[str, float]) -> dict[str, float]:
    """lambda_k per span (1.0 unless configured); a weight for a span the task does not produce is an
    error."""
    unknown = set(configured) - set(names)
    if unknown:
        raise ValueError(
            f"trainer.span_weights names {sorted(unknown)}, but the task's spans are {sorted(names)}"
        )
    return {name: float(configured.get(name, 1.0)) for name in names}
