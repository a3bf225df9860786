"""Span advantages: each span of a completion is driven by its own reward only, delimiters by none.

The factorization check is F-GRPO's appendix A.1: at theta = theta_old the gradient of
L = sum_k lambda_k L_k equals the sum of per-span GRPO gradients, each computed from its own reward alone.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rankrl.rl.batch import PolicyBatch
from rankrl.rl.config import TrainerConfig
from rankrl.rl.spans import (
    SpanBatch,
    incremental_char_ends,
    span_advantages,
    span_masks,
    span_token_mask,
    token_char_ends,
)
from rankrl.rl.steps import backward_batch
from rankrl.rl.task import Span

N, P, T, V = 8, 3, 7, 11  # rows (2 prompts x 4), prompt length, completion length, vocabulary
G = 4
# token layout of every completion: [delim, slate, slate, delim, rank, rank, delim]
SLATE = torch.tensor([0, 1, 1, 0, 0, 0, 0], dtype=torch.float32)
RANK = torch.tensor([0, 0, 0, 0, 1, 1, 0], dtype=torch.float32)
DELIMS = [0, 3, 6]


class LogitTable(torch.nn.Module):
    """A 'model' whose logits are one free parameter per (row, position): the gradient reaches every token
    position separately, so a token left out of the loss must get exactly zero gradient."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(
            torch.randn(N, P + T, V, generator=torch.Generator().manual_seed(seed))
        )

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0):
        assert input_ids.shape[0] == N, "one micro-batch of every row"
        return SimpleNamespace(logits=self.table[:, -logits_to_keep:, :] if logits_to_keep else self.table)


def _batch() -> PolicyBatch:
    ids = torch.randint(0, V, (N, P + T), generator=torch.Generator().manual_seed(1))
    return PolicyBatch(ids, torch.ones(N, P + T, dtype=torch.long), torch.ones(N, T), P, torch.zeros(N, T))


def _grad(batch: PolicyBatch, advantages, loss_agg: str) -> torch.Tensor:
    model = LogitTable()
    # the table has no prompt to share (shared-prefix span losses: tests/rl/test_shared_prefix.py)
    cfg = TrainerConfig(micro_batch_size=N, loss_agg=loss_agg, group_size=G, shared_prefix=False)
    backward_batch(model, batch, advantages, cfg)
    return model.table.grad.clone()


def _spans(r_slate: torch.Tensor, r_rank: torch.Tensor, lam: float, estimator: str = "grpo") -> SpanBatch:
    spans = {"slate": Span(r_slate, [None] * N), "rank": Span(r_rank, [None] * N)}
    masks = {"slate": SLATE.expand(N, T).clone(), "rank": RANK.expand(N, T).clone()}
    return SpanBatch(span_advantages(spans, estimator, G), masks, {"slate": 1.0, "rank": lam})


R_SLATE = torch.tensor([0.2, 0.5, 0.5, 0.9, 0.0, 1.0, 0.3, 0.3])
R_RANK = torch.tensor([1.0, 0.0, 0.4, 0.7, 0.6, 0.6, 0.1, 0.9])


@pytest.mark.parametrize("loss_agg", ["grpo", "dr_grpo", "dapo"])
def test_factorized_gradient_is_the_sum_of_per_span_grpo_gradients(loss_agg):
    lam = 0.7
    batch = _batch()
    factorized = _grad(batch, _spans(R_SLATE, R_RANK, lam), loss_agg)
    # each span on its own: a plain GRPO pass whose loss covers only that span's tokens, driven by the
    # sequence advantages of that span's reward alone
    per_span = []
    for mask, rewards in ((SLATE, R_SLATE), (RANK, R_RANK)):
        only = PolicyBatch(
            batch.input_ids, batch.attention_mask, mask.expand(N, T).clone(), P, batch.sampler_logprobs
        )
        from rankrl.rl.advantages import grpo_advantages

        per_span.append(_grad(only, grpo_advantages(rewards, G), loss_agg))
    torch.testing.assert_close(factorized, per_span[0] + lam * per_span[1], rtol=1e-5, atol=1e-7)


def test_changing_one_spans_reward_leaves_the_other_spans_gradient_unchanged():
    batch = _batch()
    before = _spans(R_SLATE, R_RANK, 1.0)
    after = _spans(R_SLATE, R_RANK.flip(0), 1.0)
    assert torch.equal(before.advantages["slate"], after.advantages["slate"])
    assert not torch.equal(before.advantages["rank"], after.advantages["rank"])
    slate_only = lambda s: SpanBatch(
        {"slate": s.advantages["slate"]}, {"slate": s.masks["slate"]}, {"slate": 1.0}
    )  # noqa: E731
    rank_only = lambda s: SpanBatch({"rank": s.advantages["rank"]}, {"rank": s.masks["rank"]}, {"rank": 1.0})  # noqa: E731
    g_before, g_after = _grad(batch, before, "grpo"), _grad(batch, after, "grpo")
    slate_cols = P - 1 + torch.nonzero(SLATE).flatten()  # logit columns that predict slate tokens
    torch.testing.assert_close(g_before[:, slate_cols], g_after[:, slate_cols])
    torch.testing.assert_close(
        g_before, _grad(batch, slate_only(before), "grpo") + _grad(batch, rank_only(before), "grpo")
    )
    assert not torch.allclose(g_before, g_after)


def test_delimiter_tokens_get_zero_gradient():
    grad = _grad(_batch(), _spans(R_SLATE, R_RANK, 2.0), "grpo")
    for t in range(T):
        column = grad[:, P - 1 + t]  # the logits that predict completion token t
        if t in DELIMS:
            assert torch.count_nonzero(column) == 0, t
        else:
            assert torch.count_nonzero(column) > 0, t


def test_char_ranges_become_token_masks_with_a_real_tokenizer(model_dir):
    from rankrl.models import load_policy

    _, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    text = "<SLATE>Alien, Heat, Fargo</SLATE>\n<RANK>Heat, Alien</RANK>"
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    slate = (text.index("<SLATE>") + 7, text.index("</SLATE>"))
    rank = (text.index("<RANK>") + 6, text.index("</RANK>"))
    masks = span_masks(
        {"slate": Span(torch.zeros(1), [slate]), "rank": Span(torch.zeros(1), [rank])},
        [ids],
        [text],
        tok,
        len(ids) + 2,
    )
    pieces = lambda m: "".join(tok.decode([ids[t]]) for t in range(len(ids)) if m[0, t])  # noqa: E731
    assert pieces(masks["slate"]).strip() == "Alien, Heat, Fargo"
    assert pieces(masks["rank"]).strip() == "Heat, Alien"
    assert masks["slate"][0, len(ids) :].sum() == 0 and masks["rank"][0, -3:].sum() == 0  # eos and padding
    assert "<" not in pieces(masks["slate"]) + pieces(masks["rank"])


def test_token_ends_fall_back_when_pieces_do_not_decode_alone(model_dir):
    from rankrl.models import load_policy

    _, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    text = "café 東京 ok"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    found = token_char_ends(ids, tok, text)
    masks = span_masks({"s": Span(torch.zeros(1), [(0, len(text))])}, [ids], [text], tok, len(ids))
    assert found is None or found[-1] == len(text)
    assert masks["s"].sum() >= 1  # whole-text span keeps the tokens that decode within it


def test_incremental_ends_match_prefix_decoding_at_every_character_boundary(model_dir):
    """Where a prefix of the tokens decodes to whole characters, the streaming offsets equal the prefix's
    length; a token that only starts a character is empty (no offset move)."""
    from rankrl.models import load_policy

    _, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    text = "naïve café: 東京 and Zürich, ok 🙂 done"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert token_char_ends(ids, tok, text) is None  # the case this fallback is for
    ends = incremental_char_ends(ids, tok, text)
    assert len(ends) == len(ids) and ends[-1] == len(text)
    assert all(a <= b for a, b in zip(ends, ends[1:]))
    for i in range(len(ids)):
        prefix = tok.decode(ids[: i + 1], skip_special_tokens=True)
        if not prefix.endswith("\ufffd"):
            assert ends[i] == len(prefix), (i, prefix)


def test_span_token_mask_excludes_straddling_and_empty_tokens():
    ends = [3, 3, 8, 12, 15]  # token 1 is empty (a special token), token 3 straddles the range end
    mask = span_token_mask(ends, (3, 10), 6)
    assert mask.tolist() == [0, 0, 1, 0, 0, 0]
    assert span_token_mask(ends, None, 6).sum() == 0


def test_a_span_claiming_the_end_of_turn_gets_only_the_empty_tokens_after_the_last_character():
    """An eos decodes to no character, so no range holds it; ``end_of_turn_at`` (the text's length) gives
    a span the empty tokens after the text ends, and never an empty token inside it."""
    ends = [3, 3, 8, 12, 12, 12]  # token 1 empty mid-text; tokens 4 and 5 after the last character
    assert span_token_mask(ends, (8, 12), 7).tolist() == [0, 0, 0, 1, 0, 0, 0]
    assert span_token_mask(ends, (8, 12), 7, end_of_turn_at=12).tolist() == [0, 0, 0, 1, 1, 1, 0]
    assert span_token_mask(ends, (12, 12), 7, end_of_turn_at=12).tolist() == [0, 0, 0, 0, 1, 1, 0]
    assert span_token_mask(ends, (0, 3), 7, end_of_turn_at=12).tolist() == [1, 0, 0, 0, 1, 1, 0]
    assert span_token_mask(ends, None, 7, end_of_turn_at=12).sum() == 0  # no range: no part of this one


def test_span_masks_give_the_eos_only_to_the_span_that_claims_the_end_of_turn(model_dir):
    from rankrl.models import load_policy

    _, tok = load_policy(str(model_dir / "tiny"), dtype="float32", device="cpu")
    text = "<A>x y</A>"
    ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    spans = {
        "a": Span(torch.zeros(1), [(0, len(text))]),
        "b": Span(torch.zeros(1), [(len(text), len(text))], end_of_turn=True),
    }
    masks = span_masks(spans, [ids], [text], tok, len(ids) + 1)
    eos = len(ids) - 1
    assert masks["a"][0, :eos].sum() == eos and masks["a"][0, eos:].sum() == 0
    assert masks["b"][0].tolist() == [0.0] * eos + [1.0, 0.0]  # the eos, not the padding after it
