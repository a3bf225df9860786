"""HFEngine on the tiny random model (SmolLM2's tokenizer and chat template).

The reference for the sampler's log-probs is a teacher-forced forward pass over prompt + completion without
padding: log_softmax(logits / T), filtered like the sampler when top-k is on.
"""

from __future__ import annotations

import pytest
import torch

from rankrl.models import build_tiny, load_policy, tiny_path
from rankrl.rollout.base import Rollouts, SamplingParams
from rankrl.rollout.hf import HFEngine, completion_end, left_pad, render_prompts, trim_after_stop

PROMPTS = [
    [{"role": "user", "content": "Hello there"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the capital of France?"},
    ],
    [{"role": "user", "content": "x"}],
]


@pytest.fixture(scope="module")
def tiny_dir():
    return tiny_path()


@pytest.fixture()
def policy(tiny_dir):
    return load_policy(tiny_dir)


def teacher_forced(
    model, prompt: list[int], completion: list[int], temperature: float, top_k: int = 0
) -> torch.Tensor:
    """(T,) log-probs of ``completion`` after ``prompt``, one unpadded forward pass."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / temperature  # (T, V)
    if top_k:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None]).squeeze(1)


def test_rows_are_prompt_major_unpadded_and_counted(policy):
    model, tok = policy
    out = HFEngine(model, tok, batch_size=2).generate(PROMPTS, n=2, sampling=SamplingParams(max_new_tokens=4))
    assert isinstance(out, Rollouts) and len(out) == 6 and out.group_size == 2
    rendered = render_prompts(tok, PROMPTS)
    assert len({len(p) for p in rendered}) == 3  # different lengths, so the batch really was padded
    assert out.prompt_ids == [p for p in rendered for _ in range(2)]
    assert all(p[0] == tok.convert_tokens_to_ids("<|im_start|>") for p in out.prompt_ids)
    assert all(1 <= len(c) <= 4 and len(c) == len(lp) for c, lp in zip(out.completion_ids, out.logprobs))
    assert out.texts == [tok.decode(c, skip_special_tokens=True) for c in out.completion_ids]
    assert out.stats["tokens"] == sum(len(c) for c in out.completion_ids)
    assert out.stats["seconds"] > 0 and out.stats["tokens_per_s"] > 0
    assert model.training  # the engine restores the mode it found


def test_length_sorted_micro_batches_return_each_prompts_own_completion(policy):
    """Three prompts in two micro-batches are generated shortest first; each row still belongs to its own
    prompt: greedy completions equal those of one prompt at a time (no padding at all)."""
    model, tok = policy
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    sorted_batches = HFEngine(model, tok, batch_size=2).generate(PROMPTS, n=1, sampling=greedy)
    one_by_one = HFEngine(model, tok, batch_size=1).generate(PROMPTS, n=1, sampling=greedy)
    assert sorted_batches.prompt_ids == one_by_one.prompt_ids == render_prompts(tok, PROMPTS)
    assert sorted_batches.completion_ids == one_by_one.completion_ids


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_teacher_forced_recomputation(policy, temperature):
    model, tok = policy
    # a model's own sampling defaults (Qwen ships some) must not leak into the distribution
    for key, value in dict(top_k=3, top_p=0.5, temperature=0.1, repetition_penalty=2.0).items():
        setattr(model.generation_config, key, value)
    torch.manual_seed(0)
    out = HFEngine(model, tok, batch_size=2).generate(
        PROMPTS, n=2, sampling=SamplingParams(max_new_tokens=5, temperature=temperature)
    )
    model.eval()
    ranks = []
    for p, c, lp in zip(out.prompt_ids, out.completion_ids, out.logprobs):
        assert all(torch.isfinite(torch.tensor(lp)))
        expected = teacher_forced(model, p, c, temperature)
        torch.testing.assert_close(torch.tensor(lp), expected, atol=1e-4, rtol=0)
        with torch.no_grad():
            logits = model(torch.tensor([p + c])).logits[0, len(p) - 1 : -1]
        ranks += (logits > logits.gather(1, torch.tensor(c)[:, None])).sum(-1).tolist()
    assert max(ranks) >= 3  # sampled from the full vocabulary, not the config's top 3


def test_top_k_logprobs_are_renormalized_over_the_kept_tokens(policy):
    model, tok = policy
    torch.manual_seed(1)
    out = HFEngine(model, tok).generate(
        PROMPTS[:2], n=3, sampling=SamplingParams(max_new_tokens=5, temperature=0.8, top_k=5)
    )
    model.eval()
    assert len(out.completion_ids) == len(out.logprobs) == 6  # 2 prompts x 3: the loop checks each
    for p, c, lp in zip(out.prompt_ids, out.completion_ids, out.logprobs):
        expected = teacher_forced(model, p, c, 0.8, top_k=5)
        assert torch.isfinite(expected).all()  # every sampled token was among the top 5
        torch.testing.assert_close(torch.tensor(lp), expected, atol=1e-4, rtol=0)


def test_greedy_is_deterministic_and_takes_the_argmax(policy):
    model, tok = policy
    engine = HFEngine(model, tok, batch_size=3)
    greedy = SamplingParams(max_new_tokens=5, temperature=0.0)
    torch.manual_seed(0)
    first = engine.generate(PROMPTS, n=1, sampling=greedy)
    torch.manual_seed(1)  # the seed plays no part in greedy decoding; n copies are identical
    second = engine.generate(PROMPTS, n=2, sampling=greedy)
    assert second.completion_ids == [c for c in first.completion_ids for _ in range(2)]
    assert second.logprobs == [lp for lp in first.logprobs for _ in range(2)]
    model.eval()
    for p, c, lp in zip(first.prompt_ids, first.completion_ids, first.logprobs):
        with torch.no_grad():
            logits = model(torch.tensor([p + c])).logits[0, len(p) - 1 : -1]
        assert logits.argmax(-1).tolist() == c
        torch.testing.assert_close(torch.tensor(lp), teacher_forced(model, p, c, 1.0), atol=1e-4, rtol=0)


def test_same_seed_same_completions(policy):
    model, tok = policy
    engine, sampling = HFEngine(model, tok), SamplingParams(max_new_tokens=4)
    runs = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        runs.append(engine.generate(PROMPTS, n=2, sampling=sampling))
    assert runs[0].completion_ids == runs[1].completion_ids and runs[0].logprobs == runs[1].logprobs
    assert runs[0].completion_ids != runs[2].completion_ids


def _boundary_stop(tok, completions: list[list[int]]) -> tuple[int, int, str]:
    """(row, k, stop): a 4-character stop string that starts in token k-2 and ends inside token k-1, so
    the completion must end after its first k tokens."""
    for row, ids in enumerate(completions):
        pieces = [tok.decode(ids[:k]) for k in range(len(ids) + 1)]
        for k in range(2, len(ids)):
            a, b = pieces[k - 1], pieces[k]
            stop = b[len(a) - 2 : len(a) + 2]
            if (
                len(a) - len(pieces[k - 2]) >= 2
                and len(b) - len(a) >= 2
                and stop.isprintable()
                and stop not in a
            ):
                return row, k, stop
    raise AssertionError("no usable stop string in the sampled completions")


def test_stop_strings_end_the_completion_and_are_kept(policy):
    model, tok = policy
    engine = HFEngine(model, tok, batch_size=3)
    torch.manual_seed(3)
    base = engine.generate(PROMPTS, n=1, sampling=SamplingParams(max_new_tokens=8))
    row, k, stop = _boundary_stop(tok, base.completion_ids)
    torch.manual_seed(3)  # same draws: the rows are identical up to where they stop
    out = engine.generate(PROMPTS, n=1, sampling=SamplingParams(max_new_tokens=8, stop=(stop,)))
    assert out.completion_ids[row] == base.completion_ids[row][:k]
    assert out.texts[row].endswith(stop) and out.texts[row].count(stop) == 1
    for before, after, lp in zip(base.completion_ids, out.completion_ids, out.logprobs):
        end = next((j for j in range(1, len(before) + 1) if stop in tok.decode(before[:j])), len(before))
        assert after == before[:end] and len(lp) == end


def test_eos_ends_the_completion_and_is_kept(policy):
    model, tok = policy
    engine = HFEngine(model, tok, batch_size=3)
    sampling = SamplingParams(max_new_tokens=8)
    torch.manual_seed(4)
    base = engine.generate(PROMPTS, n=1, sampling=sampling)
    eos = base.completion_ids[0][2]  # make the third sampled token of row 0 the end of a turn
    model.generation_config.eos_token_id = [tok.eos_token_id, eos]
    torch.manual_seed(4)
    out = engine.generate(PROMPTS, n=1, sampling=sampling)
    assert out.completion_ids[0][-1] == eos and len(out.completion_ids[0]) <= 3
    for before, after, lp in zip(base.completion_ids, out.completion_ids, out.logprobs):
        end = before.index(eos) + 1 if eos in before else len(before)
        assert after == before[:end] and len(lp) == end and all(torch.isfinite(torch.tensor(lp)))


def test_completion_end_and_trim():
    tok = type(
        "Tok",
        (),
        {
            "decode": staticmethod(
                lambda ids, skip_special_tokens=False: "".join(
                    {1: "ab", 2: "c]", 3: "]x", 9: "<e>"}[i] for i in ids
                )
            )
        },
    )()
    assert completion_end([1, 2, 9, 1], {9}, (), tok) == 3  # eos kept, padding after it dropped
    assert completion_end([1, 2, 3, 9], {9}, ("]",), tok) == 2  # first stop wins over a later eos
    assert completion_end([1, 9, 2, 3], {9}, ("]",), tok) == 2  # a stop after the eos does not count
    assert completion_end([1, 1, 1], {9}, ("zz",), tok) == 3  # neither: the budget ran out
    assert trim_after_stop("ab]x]", ("]",)) == "ab]" and trim_after_stop("abc", ("]",)) == "abc"
    ids, mask = left_pad([[5, 6], [7]], pad_id=0)
    assert ids.tolist() == [[5, 6], [0, 7]] and mask.tolist() == [[1, 1], [0, 1]]


def test_sync_weights(policy, tiny_dir):
    model, tok = policy
    engine = HFEngine(model, tok)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    engine.sync_weights(model)  # same module: nothing to do
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    other = build_tiny(model.config, seed=1)
    engine.sync_weights(other)  # a separate module: its weights are copied in
    assert all(torch.equal(other.state_dict()[k], v) for k, v in model.state_dict().items())
    key = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(before[key], model.state_dict()[key])  # seed 1 differs from the cached seed 0


def test_bad_batch_size(policy):
    with pytest.raises(ValueError, match="batch_size"):
        HFEngine(*policy, batch_size=0)


def test_progress_wrapper_returns_the_generations_unchanged_and_counts_them(capsys):
    from rankrl.rollout.base import Generation, with_progress

    calls = []

    def generate(prompts):
        calls.append(len(prompts))
        return [
            Generation(text=f"answer {i}", prompt_tokens=3, completion_tokens=2) for i in range(len(prompts))
        ]

    counted = with_progress(generate, "judge generations")
    assert [g.text for g in counted([[{"role": "user", "content": "a"}]] * 3)] == [
        "answer 0",
        "answer 1",
        "answer 2",
    ]
    assert counted([]) == []
    assert calls == [3, 0]
