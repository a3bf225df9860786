"""Our policy loss against TRL 1.16.0's ``GRPOTrainer._compute_loss`` on identical inputs.

A real GRPOTrainer is built around a tiny random LlamaForCausalLM saved to a temporary folder (no hub),
then its per-token log-prob function is replaced by one that returns a fixed tensor with
``requires_grad``. Loss values, gradients w.r.t. that tensor and the logged clip/KL statistics must
match ours to 1e-6 for every loss type, with and without a KL penalty, with eps_high != eps_low,
and with gradient accumulation (where TRL's normaliser is passed to ours as ``num_items_in_batch``).
"""

from __future__ import annotations

import pytest
import torch
import trl  # a setup dependency (requirements/cpu.txt): missing fails the suite, never skips it

from rankrl.rl.losses import count_loss_items, policy_loss

TRL_VERSION = "1.16.0"  # the version whose _compute_loss this file was written against
N, PROMPT_T, T, MAX_LEN = 6, 3, 5, 7  # 3 prompts x G=2, completions padded to T, budget MAX_LEN
EPS_LOW, EPS_HIGH = 0.2, 0.28


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    """A 2-layer Llama (hidden 32, vocab 203) and a word-level tokenizer, saved locally."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(200)} | {"<pad>": 200, "<eos>": 201, "<unk>": 202}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    config = LlamaConfig(
        vocab_size=203,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=200,
        eos_token_id=201,
        bos_token_id=201,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def _trl_trainer(model_dir: str, out_dir: str, loss_type: str, beta: float, accumulation: int, bias_kl: bool):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=out_dir,
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        report_to="none",
        save_strategy="no",
        per_device_train_batch_size=N,
        num_generations=2,
        max_completion_length=MAX_LEN,
        gradient_accumulation_steps=accumulation,
        loss_type=loss_type,
        beta=beta,
        epsilon=EPS_LOW,
        epsilon_high=EPS_HIGH,
        use_bias_correction_kl=bias_kl,
    )
    dataset = Dataset.from_dict({"prompt": ["w1 w2 w3"] * N})
    trainer = GRPOTrainer(
        model=model_dir,
        reward_funcs=lambda completions, **_: [0.0] * len(completions),
        args=args,
        train_dataset=dataset,
    )
    trainer.model.train()  # "train" mode: TRL's accumulation normalisers apply
    trainer.current_gradient_accumulation_steps = accumulation  # set by Trainer's loop in a real run
    return trainer


def _inputs(seed: int):
    """Log-probs far enough from the old ones that both clip sides fire, and ragged masks."""
    gen = torch.Generator().manual_seed(seed)
    old = -3 * torch.rand(N, T, generator=gen, dtype=torch.float64)
    logprobs = old + 0.6 * torch.randn(N, T, generator=gen, dtype=torch.float64)
    ref = old + 0.3 * torch.randn(N, T, generator=gen, dtype=torch.float64)
    advantages = torch.randn(N, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([5, 1, 3, 5, 2, 4])
    mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).long()  # (N, T)
    return logprobs, old, ref, advantages, mask


def _trl_loss(trainer, logprobs, old, ref, advantages, mask, num_items_in_batch):
    """TRL's loss and gradient w.r.t. the log-prob tensor its model would have produced."""
    leaf = logprobs.clone().requires_grad_(True)

    def fixed_logps(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        assert logits_to_keep == T and input_ids.shape == (N, PROMPT_T + T)
        return leaf, torch.zeros_like(leaf), None  # (logps, entropies, aux loss)

    trainer._get_per_token_logps_and_entropies = fixed_logps
    inputs = {
        "prompt_ids": torch.ones(N, PROMPT_T, dtype=torch.long),
        "prompt_mask": torch.ones(N, PROMPT_T, dtype=torch.long),
        "completion_ids": torch.ones(N, T, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": torch.tensor(float(num_items_in_batch)),
    }
    loss = trainer._compute_loss(trainer.model, inputs)
    (grad,) = torch.autograd.grad(loss, leaf)
    return loss.detach(), grad


CASES = [
    pytest.param(
        loss_type,
        beta,
        accumulation,
        bias_kl,
        id=f"trl{TRL_VERSION}-{loss_type}-beta{beta}-accum{accumulation}" + ("-biasKL" if bias_kl else ""),
    )
    for loss_type in ("grpo", "dr_grpo", "dapo")
    for beta, bias_kl in ((0.0, False), (0.04, False), (0.04, True))
    for accumulation in (1, 2)
]


@pytest.mark.parametrize("loss_type,beta,accumulation,bias_kl", CASES)
def test_loss_and_gradient_match_trl(
    tiny_model_dir, tmp_path, loss_type, beta, accumulation, bias_kl
) -> None:
    assert trl.__version__ == TRL_VERSION, (
        f"cross-check written for TRL {TRL_VERSION}, found {trl.__version__}: re-read its _compute_loss, "
        "then update this test and requirements/cpu.txt"
    )
    trainer = _trl_trainer(tiny_model_dir, str(tmp_path), loss_type, beta, accumulation, bias_kl)
    logprobs, old, ref, advantages, mask = _inputs(seed=accumulation)
    # With accumulation this micro-batch is one of two; the other has N sequences and 9 response tokens.
    # TRL divides grpo/dr_grpo by the accumulation steps and dapo by the window's token count; ours
    # divides by num_items_in_batch, the window's count of the aggregation's unit.
    if loss_type == "dapo":
        window_items = int(mask.sum()) + 9 * (accumulation - 1)
    else:
        window_items = N * accumulation
    assert count_loss_items(loss_type, mask) == (int(mask.sum()) if loss_type == "dapo" else N)
    trl_loss, trl_grad = _trl_loss(trainer, logprobs, old, ref, advantages, mask, window_items)

    ours_in = logprobs.clone().requires_grad_(True)
    ours, stats = policy_loss(
        ours_in,
        old,
        advantages,
        mask,
        eps_low=EPS_LOW,
        eps_high=EPS_HIGH,
        ref_logprobs=ref if beta else None,
        beta=beta,
        loss_agg=loss_type,
        max_completion_length=MAX_LEN,
        num_items_in_batch=window_items if accumulation > 1 else None,
        kl_bias_correction=bias_kl,
    )
    (our_grad,) = torch.autograd.grad(ours, ours_in)
    assert ours.item() == pytest.approx(trl_loss.item(), abs=1e-6), f"loss differs from TRL {trl.__version__}"
    torch.testing.assert_close(our_grad, trl_grad, atol=1e-6, rtol=0)
    assert our_grad.abs().sum() > 0 and our_grad[mask == 0].eq(0).all()

    logged = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    for ours_key, trl_key in [
        ("clip_frac/low", "clip_ratio/low_mean"),
        ("clip_frac/high", "clip_ratio/high_mean"),
        ("clip_frac/region", "clip_ratio/region_mean"),
    ] + ([("kl", "kl")] if beta else []):
        assert stats[ours_key].item() == pytest.approx(logged[trl_key], abs=1e-6), ours_key
    assert 0 < stats["clip_frac/low"] and 0 < stats["clip_frac/high"]  # both clip sides are exercised


def test_default_trl_config_is_what_we_document(tmp_path) -> None:
    """The TRL defaults our docstrings and ENVIRONMENT.md rely on."""
    from trl import GRPOConfig

    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    assert (args.loss_type, args.scale_rewards, args.epsilon, args.beta) == ("dapo", "group", 0.2, 0.0), (
        f"TRL {trl.__version__} changed its GRPO defaults"
    )
    assert args.use_bias_correction_kl is True  # our policy_loss defaults to False: see losses.py
