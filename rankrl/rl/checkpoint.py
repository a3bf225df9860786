"""Checkpoints that let a killed run continue exactly where it stopped.

A checkpoint folder ``checkpoints/step_<k>/`` holds the policy (``save_pretrained``: full weights or the
LoRA adapter, loadable by ``rankrl.evaluate ckpt_path=...``) and ``trainer_state.pt`` (optimizer,
scheduler, RNG states, data position, step). It is written under a temporary name and renamed, and
``checkpoints/latest`` is updated last, so a kill at any moment leaves the previous checkpoint intact.
"""

from __future__ import annotations

import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"
LATEST = "latest"


@dataclass
class PromptOrder:
    """Which training prompts come next: a fresh seeded permutation each epoch.

    The position is part of the checkpoint, so a resumed run sees the same prompts in the same order.
    """

    num_examples: int
    seed: int
    epoch: int = 0
    index: int = 0

    def take(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.num_examples)
            chunk = order[self.index : self.index + k - len(out)].tolist()
            out += chunk
            self.index += len(chunk)
            if self.index >= self.num_examples:
                self.epoch, self.index = self.epoch + 1, 0
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    ckpt_root: Path, step: int, policy: torch.nn.Module, trainer_state: dict[str, Any], keep: int
) -> Path:
    """Write ``step_<step>`` atomically, point ``latest`` at it, and prune old ones (keeping ``keep``)."""
    ckpt_root.mkdir(parents=True, exist_ok=True)
    final = ckpt_root / f"step_{step:06d}"
    tmp = ckpt_root / f".tmp_step_{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save_pretrained(tmp / "policy")
    torch.save(trainer_state, tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    latest_tmp = ckpt_root / (LATEST + ".tmp")
    latest_tmp.write_text(final.name)
    latest_tmp.replace(ckpt_root / LATEST)
    for old in sorted(ckpt_root.glob("step_*"))[: -max(keep, 1)]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(ckpt_root: Path) -> Path | None:
    """The last completed checkpoint folder, or None."""
    pointer = ckpt_root / LATEST
    if not pointer.exists():
        return None
    path = ckpt_root / pointer.read_text().strip()
    return path if (path / STATE_FILE).exists() else None


def load_policy_weights(policy: torch.nn.Module, policy_dir: Path) -> None:
    """Load weights saved by ``save_pretrained`` into an already built policy (full or LoRA)."""
    from safetensors.torch import load_file

    adapter = policy_dir / "adapter_model.safetensors"
    if adapter.exists():
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(policy, load_file(str(adapter)))
        return
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(policy_dir.glob("*.safetensors")):
        state.update(load_file(str(shard)))
    if not state:
        raise FileNotFoundError(f"no weights (*.safetensors) in checkpoint folder {policy_dir}")
    missing, unexpected = policy.load_state_dict(state, strict=False)
    tied = {k for k in missing if k.endswith("lm_head.weight")}  # tied to the embeddings, saved once
    if set(missing) - tied or unexpected:
        raise RuntimeError(
            f"checkpoint {policy_dir} does not match the policy: missing {sorted(set(missing) - tied)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )


def load_trainer_state(ckpt: Path) -> dict[str, Any]:
    return torch.load(ckpt / STATE_FILE, weights_only=False)
