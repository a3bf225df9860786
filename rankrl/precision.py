"""Mixed precision: a policy trained in bfloat16 keeps float32 master weights.

A paper model's ``dtype: bfloat16`` is the dtype it *computes* in. Stepping AdamW on bfloat16 weights loses
most small updates: bfloat16 keeps 8 significant bits, so a weight of magnitude 0.02 moves in steps of about
1.2e-4 and an update below half of that (every Adam step at lr 5e-7 to 5e-6, whose size is about the lr)
rounds back to the old value. The trained policy of a full fine-tuning therefore holds float32 weights that
the optimizer steps, and computes in its ``compute_dtype``:

- in one process and under DDP, its forwards run under ``torch.autocast`` (``compute_precision``);
- under FSDP2, ``fully_shard``'s ``MixedPrecisionPolicy`` gathers the float32 shards as bfloat16 and reduces
  gradients in float32 (``fsdp_mixed_precision``), as veRL's FSDP workers do.

A LoRA policy keeps its frozen base in bfloat16 (nothing steps it) and peft keeps the adapter in float32,
so it needs neither. A frozen model (a reference, an evaluation-only run) is loaded in its compute dtype.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch

HALF = (torch.bfloat16, torch.float16)
ATTRIBUTE = "compute_dtype"  # set on a policy whose weights are float32 masters of a half-precision model


def master_dtype(compute: torch.dtype, trainable: bool, lora: bool) -> torch.dtype:
    """The dtype to hold a policy's weights in: float32 masters for a fully fine-tuned half-precision model,
    the compute dtype otherwise."""
    return torch.float32 if trainable and not lora and compute in HALF else compute


def mark_compute_dtype(model: torch.nn.Module, compute: torch.dtype) -> torch.nn.Module:
    """Record on ``model`` the dtype its float32 weights compute in (read by ``compute_dtype``)."""
    setattr(model, ATTRIBUTE, compute)
    return model


def compute_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype ``model``'s forwards compute in: the one recorded by ``mark_compute_dtype`` (under any DDP
    or FSDP wrapper), else its parameters'."""
    inner = getattr(model, "module", model)  # DistributedDataParallel
    recorded = getattr(inner, ATTRIBUTE, None)
    return recorded if recorded is not None else next(inner.parameters()).dtype


def compute_precision(model: torch.nn.Module) -> Any:
    """A context in which ``model``'s forward computes in its compute dtype: autocast where its weights are
    float32 masters of a half-precision model, nothing otherwise."""
    compute = compute_dtype(model)
    param = next(getattr(model, "module", model).parameters())
    if compute == param.dtype or compute not in HALF:
        return nullcontext()
    return torch.autocast(device_type=param.device.type, dtype=compute)


def fsdp_mixed_precision(model: torch.nn.Module) -> Any:
    """FSDP2's ``MixedPrecisionPolicy`` for ``model``: parameters gathered in its compute dtype, gradients
    reduced in float32; None where its weights already are in their compute dtype."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    compute = compute_dtype(model)
    if compute == next(model.parameters()).dtype:
        return None
    return MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=torch.float32)
