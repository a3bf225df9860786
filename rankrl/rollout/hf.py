"""Rollouts through transformers ``generate``: the CPU engine, also fine for small GPU runs.

Log-prob convention (shared with ``VLLMEngine``): each completion token's log-prob is taken under the
distribution it was actually sampled from, i.e. ``log_softmax`` of the logits divided by the temperature
and then top-k / top-p filtered (renormalized over the kept tokens). This is vLLM's
``logprobs_mode="processed_logprobs"``, which TRL also uses for its importance-sampling correction; vLLM's
default (``raw_logprobs``) ignores the temperature and would bias the ratio. Without top-k/top-p it equals
``log_softmax(logits / T)``, what the trainer recomputes under the policy. Greedy decoding
(temperature 0) reports ``log_softmax(logits)``.

Randomness comes from torch's global RNG: the same ``torch.manual_seed`` gives the same completions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from rankrl.conf_defaults import conf_default
from rankrl.distributed import is_sharded
from rankrl.precision import compute_precision
from rankrl.rollout.base import Messages, Rollouts, SamplingParams

# Settings a model's own generation_config may carry (e.g. Qwen's top_k=20, repetition_penalty=1.05) that
# would silently change the sampling distribution: SamplingParams is the only source of truth. The
# warpers (temperature, top-k/p ...) are ours, placed before the log-prob recorder; generate adds none.
NEUTRAL_PROCESSORS = dict(
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    bad_words_ids=None,
    suppress_tokens=None,
    begin_suppress_tokens=None,
    min_length=0,
    min_new_tokens=None,
    num_beams=1,
)
NEUTRAL_WARPERS = dict(
    temperature=1.0,
    top_k=0,
    top_p=1.0,
    min_p=None,
    typical_p=1.0,
    top_h=None,
    epsilon_cutoff=0.0,
    eta_cutoff=0.0,
)


def render_prompts(
    tokenizer: Any,
    prompts: Sequence[Messages],
    chat_template_kwargs: dict | None = None,
) -> list[list[int]]:
    """Chat prompts -> token ids, with the assistant turn opened (the template adds the special tokens)."""
    texts = [
        tokenizer.apply_chat_template(
            list(m), tokenize=False, add_generation_prompt=True, **(chat_template_kwargs or {})
        )
        for m in prompts
    ]
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> (input_ids, attention_mask), both (B, T), padded on the left."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return ids, mask


class SampledLogprobs(LogitsProcessor):
    """The last logits processor: records the log-prob of each sampled token under the final scores.

    ``generate`` samples after the processors run, so the token drawn at step t is only visible at step
    t+1 (as ``input_ids[:, -1]``); one step of log-softmaxed scores is kept, O(N x V) memory instead of
    ``output_scores``' O(N x T x V).
    """

    def __init__(self) -> None:
        self.pending: torch.Tensor | None = None  # (N, V)
        self.steps: list[torch.Tensor] = []  # T x (N,)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.pending is not None:
            self.steps.append(self.pending.gather(1, input_ids[:, -1:]).squeeze(1))
        self.pending = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """(N, T) log-probs of the generated tokens, given the (N, P+T) sequences ``generate`` returned."""
        if self.pending is not None:
            self.steps.append(self.pending.gather(1, sequences[:, -1:]).squeeze(1))
            self.pending = None
        return (
            torch.stack(self.steps, dim=1) if self.steps else sequences.new_zeros((len(sequences), 0)).float()
        )


class StopOnStrings(StoppingCriteria):
    """Ends a row once its newest tokens' text holds a stop string.

    transformers' own ``stop_strings`` builds a table over the whole vocabulary on every ``generate`` call
    (measured: about 60 s per call for SmolLM2 on 2 CPU cores, 10x the generation itself). Checking the
    last few tokens' text instead costs one short decode per row and step. A stop string is found in the
    step that completes it, so a window a little longer than the longest stop string (every token holds at
    least one character) sees it; ``completion_end`` then cuts exactly after it.
    """

    def __init__(self, stop: Sequence[str], tokenizer: Any, prompt_width: int) -> None:
        self.stop, self.tokenizer, self.prompt_width = list(stop), tokenizer, prompt_width
        self.window = max(len(s) for s in self.stop) + 2

    def __call__(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any
    ) -> torch.BoolTensor:
        tails = input_ids[:, max(self.prompt_width, input_ids.shape[1] - self.window) :].tolist()
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=False)
        return torch.tensor(
            [_has_stop(t, self.stop) for t in texts], dtype=torch.bool, device=input_ids.device
        )


def warpers(sampling: SamplingParams) -> list[LogitsProcessor]:
    """transformers' own temperature / top-k / top-p warpers, in generate's order; empty when greedy."""
    if sampling.temperature <= 0:
        return []
    out: list[LogitsProcessor] = []
    if sampling.temperature != 1.0:
        out.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k > 0:
        out.append(TopKLogitsWarper(top_k=sampling.top_k))
    if sampling.top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=sampling.top_p))
    return out


def completion_end(ids: Sequence[int], eos_ids: set[int], stop: Sequence[str], tokenizer: Any) -> int:
    """How many generated tokens belong to the completion: up to and including the first eos or the
    token that completes the first stop string, whichever comes first (the rest is padding)."""
    end = next((i + 1 for i, t in enumerate(ids) if t in eos_ids), len(ids))
    if not stop or not _has_stop(tokenizer.decode(ids[:end], skip_special_tokens=False), stop):
        return end
    lo, hi = 1, end  # smallest prefix whose text holds a stop string (containment grows with the prefix)
    while lo < hi:
        mid = (lo + hi) // 2
        if _has_stop(tokenizer.decode(ids[:mid], skip_special_tokens=False), stop):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _has_stop(text: str, stop: Sequence[str]) -> bool:
    return any(s in text for s in stop)


def trim_after_stop(text: str, stop: Sequence[str]) -> str:
    """Cut ``text`` right after its first stop string (a stop token may carry characters after it)."""
    ends = [text.find(s) + len(s) for s in stop if s in text]
    return text[: min(ends)] if ends else text


class HFEngine:
    """``RolloutEngine`` over transformers ``generate``, micro-batched over prompts.

    Args:
        model: a causal LM (or a peft model); sampling reads its live parameters.
        tokenizer: its tokenizer (with a chat template).
        batch_size: prompts per ``generate`` call (each expands to ``n`` rows).
        chat_template_kwargs: extra template arguments (e.g. ``{"enable_thinking": False}`` for Qwen3).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        batch_size: int = conf_default("rollout/hf", "batch_size"),  # its one home: conf/rollout/hf.yaml
        chat_template_kwargs: dict | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.chat_template_kwargs = chat_template_kwargs
        self.eos_ids = _eos_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)

    def sync_weights(self, model: torch.nn.Module) -> None:
        """A no-op when ``model`` is the engine's own module: ``generate`` reads the parameters the optimizer
        just updated. A different module (e.g. a separate generation copy) has its weights copied in."""
        if model is not self.model:
            self.model.load_state_dict(model.state_dict())

    def generate(self, prompts: Sequence[Messages], n: int, sampling: SamplingParams) -> Rollouts:
        """Sample ``n`` completions per prompt; rows are prompt-major (row i*n+g is sample g of prompt i)."""
        start = time.perf_counter()
        prompt_ids = render_prompts(self.tokenizer, prompts, self.chat_template_kwargs)
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        out = Rollouts(prompt_ids=[], completion_ids=[], logprobs=[], texts=[], group_size=n)
        was_training = self.model.training
        self.model.eval()  # no dropout (LoRA's included) while sampling
        # prompts of similar length share a micro-batch (less left padding to run through the model); with
        # one micro-batch there is nothing to gain and the prompts keep their order
        order = (
            sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
            if len(prompt_ids) > self.batch_size
            else list(range(len(prompt_ids)))
        )
        try:
            with compute_precision(self.model):  # the dtype the trainer scores in (rankrl.precision)
                for i in range(0, len(order), self.batch_size):
                    self._generate_batch(
                        [prompt_ids[j] for j in order[i : i + self.batch_size]], n, sampling, out
                    )
        finally:
            self.model.train(was_training)
        if order != sorted(order):
            out = _restore_prompt_order(out, order, n)
        seconds = time.perf_counter() - start
        tokens = sum(len(c) for c in out.completion_ids)
        out.stats = {"tokens": float(tokens), "seconds": seconds, "tokens_per_s": tokens / max(seconds, 1e-9)}
        return out

    def _generate_batch(
        self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, out: Rollouts
    ) -> None:
        """Generate for one micro-batch of b prompts (b*n rows) and append the cut rows to ``out``."""
        device = next(self.model.parameters()).device
        input_ids, attention_mask = left_pad(prompt_ids, self.pad_id)
        recorder = SampledLogprobs()
        stop = list(sampling.stop)
        sample = sampling.temperature > 0
        per_prompt = n if sample else 1  # greedy copies are identical: decode once, repeat below
        sequences = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            **NEUTRAL_PROCESSORS,
            **(NEUTRAL_WARPERS if sample else {}),  # greedy applies no warpers (and warns if given any)
            do_sample=sample,
            max_new_tokens=sampling.max_new_tokens,
            num_return_sequences=per_prompt,
            eos_token_id=sorted(self.eos_ids),
            pad_token_id=self.pad_id,
            logits_processor=LogitsProcessorList([*warpers(sampling), recorder]),
            stopping_criteria=StoppingCriteriaList(
                [StopOnStrings(stop, self.tokenizer, input_ids.shape[1])] if stop else []
            ),
            # a sharded policy's forward is a collective: every rank steps until all ranks are done
            synced_gpus=is_sharded(self.model),
        )  # (b*per_prompt, P+T)
        logprobs = recorder.finish(sequences).repeat_interleave(n // per_prompt, 0).cpu()  # (b*n, T)
        generated = sequences[:, input_ids.shape[1] :].repeat_interleave(n // per_prompt, 0).cpu()  # (b*n, T)
        for row in range(generated.shape[0]):
            ids = generated[row].tolist()
            end = completion_end(ids, self.eos_ids, stop, self.tokenizer)
            out.prompt_ids.append(list(prompt_ids[row // n]))
            out.completion_ids.append(ids[:end])
            out.logprobs.append(logprobs[row, :end].tolist())
            out.texts.append(
                trim_after_stop(self.tokenizer.decode(ids[:end], skip_special_tokens=True), stop)
            )


def _restore_prompt_order(out: Rollouts, order: Sequence[int], n: int) -> Rollouts:
    """``out``'s rows were generated for the prompts in ``order``: put them back prompt-major in the caller's
    order (row i*n+g is sample g of prompt i)."""
    position = {prompt: k for k, prompt in enumerate(order)}
    rows = [position[i] * n + g for i in range(len(order)) for g in range(n)]
    return Rollouts(
        prompt_ids=[out.prompt_ids[r] for r in rows],
        completion_ids=[out.completion_ids[r] for r in rows],
        logprobs=[out.logprobs[r] for r in rows],
        texts=[out.texts[r] for r in rows],
        group_size=n,
    )


def _eos_ids(model: torch.nn.Module, tokenizer: Any) -> set[int]:
    """Token ids that end a completion: the tokenizer's eos and the model's generation_config eos (a list
    for chat models such as Qwen, whose <|im_end|> and <|endoftext|> both end a turn)."""
    ids: set[int] = set()
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (tokenizer.eos_token_id, config_eos):
        if isinstance(value, int):
            ids.add(value)
        elif value is not None:
            ids.update(int(v) for v in value)
    if not ids:
        raise ValueError("the tokenizer and the model's generation_config define no eos token")
    return ids
