"""From rollouts to padded tensors, and per-token log-probs under a policy.

Layout (as TRL): prompts left-padded to P, completions right-padded to T, so completion token t of
every row sits at column P + t and its logit at column P + t - 1. Position ids come from the
attention mask, the same convention `generate` uses, so the trainer's log-probs match the sampler's.

Shared prefix (``shared_prefix=True``, the idea of "Prefix Grouper", arXiv 2506.05433): the G rows of a
group repeat one prompt, so the prompt's forward runs once per distinct prompt and its keys and values,
indexed out to every row of the group, are the past of the completions' forward (transformers' own
``DynamicCache``). The gradient of every completion flows back through that index into the one prompt
computation; log-probs, loss and gradients equal the unshared forward's up to float rounding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from rankrl.distributed import unwrap
from rankrl.precision import compute_precision
from rankrl.rollout.base import Rollouts, SamplingParams


@dataclass
class PolicyBatch:
    """N rows of prompt + completion.

    Args:
        input_ids: (N, P+T) prompt left-padded, completion right-padded.
        attention_mask: (N, P+T) 1 on real tokens.
        response_mask: (N, T) 1 on completion tokens.
        prompt_len: P.
        sampler_logprobs: (N, T) log-probs the rollout engine reported (0 on padding).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_mask: torch.Tensor
    prompt_len: int
    sampler_logprobs: torch.Tensor

    def rows(self, start: int, stop: int) -> PolicyBatch:
        """A micro-batch of rows [start, stop)."""
        return PolicyBatch(
            input_ids=self.input_ids[start:stop],
            attention_mask=self.attention_mask[start:stop],
            response_mask=self.response_mask[start:stop],
            prompt_len=self.prompt_len,
            sampler_logprobs=self.sampler_logprobs[start:stop],
        )

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device) -> PolicyBatch:
        """The batch on ``device`` (the policy's: rollouts are padded on the CPU, a GPU policy computes
        there); itself when it is there already."""
        if self.input_ids.device == device:
            return self
        return PolicyBatch(
            input_ids=self.input_ids.to(device),
            attention_mask=self.attention_mask.to(device),
            response_mask=self.response_mask.to(device),
            prompt_len=self.prompt_len,
            sampler_logprobs=self.sampler_logprobs.to(device),
        )


def model_device(model: torch.nn.Module) -> torch.device:
    """The device ``model``'s parameters (or, under FSDP, their local shards) live on."""
    return next(unwrap(model).parameters()).device


def to_policy_batch(rollouts: Rollouts, pad_token_id: int) -> PolicyBatch:
    """Pad a rollout batch into the tensors the loss needs."""
    n = len(rollouts)
    p = max(len(ids) for ids in rollouts.prompt_ids)
    t = max(1, max(len(ids) for ids in rollouts.completion_ids))
    input_ids = torch.full((n, p + t), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((n, p + t), dtype=torch.long)
    response_mask = torch.zeros((n, t), dtype=torch.float32)
    sampler_logprobs = torch.zeros((n, t), dtype=torch.float32)
    for i, (prompt, completion, logps) in enumerate(
        zip(rollouts.prompt_ids, rollouts.completion_ids, rollouts.logprobs)
    ):
        input_ids[i, p - len(prompt) : p] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[i, p - len(prompt) : p] = 1
        if completion:
            input_ids[i, p : p + len(completion)] = torch.tensor(completion, dtype=torch.long)
            attention_mask[i, p : p + len(completion)] = 1
            response_mask[i, : len(completion)] = 1.0
            sampler_logprobs[i, : len(logps)] = torch.tensor(logps, dtype=torch.float32)
    return PolicyBatch(input_ids, attention_mask, response_mask, p, sampler_logprobs)


def mask_positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids from an attention mask, as ``generate`` numbers a left-padded row (padding clamped
    to 0)."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def completion_logits(
    model: torch.nn.Module, batch: PolicyBatch, shared_prefix: bool = False
) -> torch.Tensor:
    """(N, T, V) logits that predict the completion tokens (columns P-1 .. P+T-2 of the sequence); with
    ``shared_prefix`` each distinct prompt is computed once (``shared_prefix_logits``) where the model's cache
    allows it (``prefix_cache_selectable``), else every row whole. The forward runs in
    the model's compute dtype (``rankrl.precision``: autocast over float32 master weights)."""
    batch = batch.to(model_device(model))
    with compute_precision(model):
        if shared_prefix and prefix_cache_selectable(model):
            return shared_prefix_logits(model, batch)
        position_ids = mask_positions(batch.attention_mask)
        return model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=position_ids,
            logits_to_keep=batch.response_mask.shape[1] + 1,
        ).logits[:, :-1, :]


ATTENTION_LAYER_TYPES = ("full_attention", "sliding_attention")


def prefix_cache_selectable(model: torch.nn.Module) -> bool:
    """Whether a prompt's cache can be indexed out to its rows (``shared_prefix_logits``): transformers' key
    and value layers can (``batch_select_indices``); a hybrid model's linear-attention layers (Qwen3.5's gated
    delta net, a recurrent state) cannot, and raised AttributeError in the first update, so those models
    compute every row whole."""
    config = _transformers_model(model).config
    layer_types = getattr(config.get_text_config(), "layer_types", None) or ()
    return all(kind in ATTENTION_LAYER_TYPES for kind in layer_types)


def prompt_groups(batch: PolicyBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(the first row of each distinct prompt, each row's prompt number): consecutive rows with the same
    left-padded prompt share it (rollouts are prompt-major, so a micro-batch holds whole or partial
    groups)."""
    prompts = batch.input_ids[:, : batch.prompt_len]
    masks = batch.attention_mask[:, : batch.prompt_len]
    starts = torch.ones(len(batch), dtype=torch.bool)
    starts[1:] = (prompts[1:] != prompts[:-1]).any(-1) | (masks[1:] != masks[:-1]).any(-1)
    return starts.nonzero().squeeze(-1), starts.cumsum(0) - 1


def shared_prefix_logits(model: torch.nn.Module, batch: PolicyBatch) -> torch.Tensor:
    """``completion_logits`` with one prompt forward per distinct prompt.

    1. The distinct prompts run once (``use_cache``); their last position's logits predict completion token 0.
    2. Their per-layer keys and values are indexed out to the rows (``batch_select_indices``: a differentiable
       gather, so each row's gradient reaches its prompt's computation).
    3. The completions run with that cache as their past and the whole row's attention mask, so each attends
       to its own prompt (left padding masked) and to itself causally, at the positions it had unshared.
    """
    if getattr(_transformers_model(model), "is_gradient_checkpointing", False):
        raise ValueError(
            "trainer.shared_prefix needs gradient checkpointing off: transformers drops the KV "
            "cache inside checkpointed layers; set trainer.shared_prefix=false"
        )
    p, t = batch.prompt_len, batch.response_mask.shape[1]
    firsts, index = prompt_groups(batch)
    prompt_mask = batch.attention_mask[firsts, :p]
    # DDP counts one forward per backward: the prompt pass runs on the module it wraps, and its gradient
    # still reaches the reducer, through the completion pass's backward
    prompt = unwrap(model)(
        input_ids=batch.input_ids[firsts, :p],
        attention_mask=prompt_mask,
        position_ids=mask_positions(prompt_mask),
        use_cache=True,
        logits_to_keep=1,
    )
    cache = prompt.past_key_values
    cache.batch_select_indices(index)
    first = prompt.logits[index, -1:, :]
    if t == 1:
        return first
    position_ids = mask_positions(batch.attention_mask)[:, p:]
    rest = model(
        input_ids=batch.input_ids[:, p : p + t - 1],
        attention_mask=batch.attention_mask[:, : p + t - 1],
        position_ids=position_ids[:, : t - 1],
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=t - 1,
    ).logits
    return torch.cat([first, rest], dim=1)


def _transformers_model(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model under the DDP and peft wrappers."""
    model = unwrap(model)
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def gather_logprobs(logits: torch.Tensor, batch: PolicyBatch, temperature: float = 1.0) -> torch.Tensor:
    """(N, T) log-prob of each completion token under ``logits / temperature``, 0 where ``response_mask``
    is 0."""
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    targets = batch.input_ids[:, batch.prompt_len :]
    logps = torch.gather(F.log_softmax(logits.float(), dim=-1), 2, targets.unsqueeze(-1)).squeeze(-1)
    return logps * batch.response_mask


def token_logprobs(
    model: torch.nn.Module, batch: PolicyBatch, temperature: float = 1.0, shared_prefix: bool = False
) -> torch.Tensor:
    """Log-prob of each completion token under ``model``: (N, T), 0 where ``response_mask`` is 0.

    Logits are divided by the sampling temperature, as the sampler's were, so ratios compare like with like.
    The batch moves to the model's device once, for the forward and for the gather of its tokens and mask.
    """
    batch = batch.to(model_device(model))
    return gather_logprobs(completion_logits(model, batch, shared_prefix), batch, temperature)


@torch.no_grad()
def sampled_distribution_logprobs(
    logits: torch.Tensor, batch: PolicyBatch, sampling: SamplingParams
) -> torch.Tensor:
    """(N, T) log-probs of the completion tokens under the distribution the engines sample from: temperature,
    then top-k / top-p, renormalized (the engines' convention, ``rankrl.rollout.hf``). It equals
    ``gather_logprobs`` without top-k/top-p; with them it is what the engine/trainer mismatch is measured
    against, as the trainer's own log-probs differ from the sampler's by the filtered-out mass."""
    from rankrl.rollout.hf import warpers

    if sampling.temperature <= 0 or (sampling.top_k == 0 and sampling.top_p >= 1.0):
        return gather_logprobs(logits, batch, sampling.temperature)
    n, t, v = logits.shape
    scores = logits.float().reshape(n * t, v)
    for warper in warpers(sampling):
        scores = warper(None, scores)
    logps = F.log_softmax(scores, dim=-1).reshape(n, t, v)
    picked = logps.gather(2, batch.input_ids[:, batch.prompt_len :, None]).squeeze(-1)
    return torch.where(batch.response_mask.bool(), picked, 0.0)  # a padding token may be filtered out (-inf)
