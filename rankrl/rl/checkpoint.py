"""Checkpoints that let a killed run continue exactly where it stopped.

A checkpoint folder ``checkpoints/step_<k>/`` holds
- ``policy/``: ``save_pretrained`` output (full weights or the LoRA adapter), loadable by
  ``rankrl.evaluate ckpt_path=...`` whatever the training strategy;
- ``trainer_state.pt``: scheduler, data position and step;
- ``optimizer.pt``: the optimizer state when it is not sharded (for AdamW twice the size of the weights);
- ``rng_rank<r>.pt``: each rank's RNG states, so every rank samples on where it stopped;
- ``sharded/``: under FSDP, the sharded policy and optimizer state as a torch.distributed.checkpoint;
- ``manifest.json``: written last, once every rank's files are on disk: each file's relative path, size
  and sha256.

It is written under a temporary name and renamed, and ``checkpoints/latest`` is updated last, so a kill at
any moment leaves the previous checkpoint intact. Saving and loading are collective: every rank calls them.

A checkpoint can still be damaged afterwards (a full disk, a copy cut short, a bad block): resuming picks
the newest *intact* one (``latest_checkpoint``, ``verify_checkpoint``) and warns about each damaged one it
skips. Checkpoints from before the manifest (legacy) are accepted when their ``trainer_state.pt`` is a
complete zip archive (the format ``torch.save`` writes), without checking the other files.

Once a run has finished, ``finish_checkpoints`` keeps only its final checkpoint, without the optimizer state
(``rankrl.train`` calls it unless ``trainer.keep_checkpoints_when_done``): later stages start from the weights
alone, and a finished stage then takes a third of the disk.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rankrl import distributed as ddp

log = logging.getLogger(__name__)

STATE_FILE = "trainer_state.pt"
OPTIMIZER_FILE = "optimizer.pt"
LATEST = "latest"
SHARDED = "sharded"
MANIFEST = "manifest.json"
MANIFEST_VERSION = 1


class CheckpointError(RuntimeError):
    """Checkpoint folders exist but none of them is intact: resuming would silently restart the run."""


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
        # one state per GPU the saving process saw; a resume that sees fewer restores those it has
        # (set_rng_state_all would stop at the first missing one: 'invalid device ordinal')
        for device, cuda_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, device)


def save_checkpoint(
    ckpt_root: Path,
    step: int,
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    keep: int,
) -> Path:
    """Write ``step_<step>`` atomically, point ``latest`` at it, and prune old ones (keeping ``keep``)."""
    final = ckpt_root / f"step_{step:06d}"
    tmp = ckpt_root / f".tmp_step_{step:06d}"
    if ddp.is_main():
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    ddp.barrier()
    torch.save(rng_state(), tmp / f"rng_rank{ddp.rank()}.pt")
    state = dict(trainer_state)
    if ddp.is_sharded(policy):
        _save_sharded(tmp / SHARDED, policy, optimizer)
        weights = _full_weights(policy)
    else:
        weights = None
    if ddp.is_main():
        policy.save_pretrained(tmp / "policy", **({"state_dict": weights} if weights is not None else {}))
        torch.save(state, tmp / STATE_FILE)
        if weights is None:  # not sharded: the optimizer state is identical on every rank under DDP
            torch.save(optimizer.state_dict(), tmp / OPTIMIZER_FILE)
    ddp.barrier()  # every rank's files (rng, sharded state) are written: the manifest can list them all
    if ddp.is_main():
        write_manifest(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        latest_tmp = ckpt_root / (LATEST + ".tmp")
        latest_tmp.write_text(final.name)
        latest_tmp.replace(ckpt_root / LATEST)
        for old in sorted(ckpt_root.glob("step_*"))[: -max(keep, 1)]:
            shutil.rmtree(old, ignore_errors=True)
    ddp.barrier()
    return final


def load_checkpoint(ckpt: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Restore the policy, optimizer and this rank's RNG from ``ckpt``; returns the trainer state."""
    state = load_trainer_state(ckpt)
    if ddp.is_sharded(policy):
        if not (ckpt / SHARDED).is_dir():
            raise FileNotFoundError(
                f"{ckpt} was not written by an FSDP run (no {SHARDED}/); resume it with trainer.strategy=ddp"
            )
        _load_sharded(ckpt / SHARDED, policy, optimizer)
    else:
        load_policy_weights(policy, ckpt / "policy")
        if (ckpt / OPTIMIZER_FILE).exists():
            # read onto the CPU: saved from cuda:0, every rank would first put a whole copy there;
            # load_state_dict moves each state to its parameter's device
            optimizer.load_state_dict(
                torch.load(ckpt / OPTIMIZER_FILE, map_location="cpu", weights_only=False)
            )
        elif "optimizer" in state:  # written before the optimizer state had its own file
            optimizer.load_state_dict(state["optimizer"])
        else:
            log.warning(
                "%s holds no optimizer state (its run had finished and kept the weights only): the optimizer "
                "starts afresh, so the steps from here are not those of an unbroken run (to extend a run "
                "later, train it with trainer.keep_checkpoints_when_done=true)",
                ckpt,
            )
    rng = ckpt / f"rng_rank{ddp.rank()}.pt"
    if not rng.exists():
        raise FileNotFoundError(f"{rng} is missing: {ckpt} was written by a run with fewer ranks")
    set_rng_state(torch.load(rng, weights_only=False))
    return state


def _save_sharded(path: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(policy, optimizer)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(path))


def _load_sharded(path: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    model_state, optim_state = get_state_dict(policy, optimizer)
    state = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(policy, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def _full_weights(policy: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """The unsharded weights on rank 0 (None elsewhere), gathered one tensor at a time onto the CPU."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(policy, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not ddp.is_main():
        return None
    # a tied head comes back as its own copy; save it once, as save_pretrained does for the live model
    own = {n for n, _ in policy.named_parameters()} | {n for n, _ in policy.named_buffers()}
    return {name: tensor for name, tensor in full.items() if name in own}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(ckpt: Path) -> Path:
    """Write ``ckpt/manifest.json`` (atomically: a temporary file, then a rename) listing every other file
    under ``ckpt``: relative path, size and sha256. Called last, when all the checkpoint's files exist."""
    skip = (ckpt / MANIFEST, ckpt / (MANIFEST + ".tmp"))
    listed = sorted(p for p in ckpt.rglob("*") if p.is_file() and p not in skip)
    files = [
        {"path": p.relative_to(ckpt).as_posix(), "size": p.stat().st_size, "sha256": _sha256(p)}
        for p in listed
    ]
    return _write_manifest_file(ckpt, {"version": MANIFEST_VERSION, "files": files})


def _write_manifest_file(ckpt: Path, manifest: dict[str, Any]) -> Path:
    tmp = ckpt / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    return tmp.replace(ckpt / MANIFEST)


def verify_checkpoint(path: Path) -> str | None:
    """None when the checkpoint folder ``path`` is intact, else a one-line reason.

    Intact: every file its manifest lists is there with the listed size and sha256 (files not listed are
    ignored), and the trainer state is among them. Without a manifest (a checkpoint written before
    manifests), only ``trainer_state.pt`` is checked: it must exist and be a complete zip archive.
    """
    path = Path(path)
    if not path.exists():
        return "missing"
    if not path.is_dir():
        return "not a folder"
    manifest = path / MANIFEST
    if not manifest.exists():
        state = path / STATE_FILE
        if not state.is_file():
            return f"no {MANIFEST} and no {STATE_FILE}"
        if not zipfile.is_zipfile(state):
            return f"legacy checkpoint (no {MANIFEST}): {STATE_FILE} is not a complete torch.save archive"
        return None
    try:
        files = json.loads(manifest.read_text())["files"]
        entries = {str(e["path"]): (int(e["size"]), str(e["sha256"])) for e in files}
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"unreadable {MANIFEST} ({type(err).__name__}: {err})"
    if STATE_FILE not in entries:
        return f"{MANIFEST} does not list {STATE_FILE}"
    for rel, (size, sha256) in entries.items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            return f"{MANIFEST} lists a path outside the checkpoint: {rel!r}"
        file = path / rel
        if not file.is_file():
            return f"{rel} is missing"
        try:  # the folder may be pruned while we read it
            actual = file.stat().st_size
            if actual != size:
                return f"{rel} has {actual} bytes, the manifest says {size}"
            if _sha256(file) != sha256:
                return f"{rel} does not match its sha256 in the manifest"
        except OSError as err:
            return f"{rel} is unreadable ({type(err).__name__}: {err})"
    return None


def _step_number(folder: Path) -> int | None:
    digits = folder.name.removeprefix("step_")
    return int(digits) if folder.name.startswith("step_") and digits.isdigit() else None


def _candidates(ckpt_root: Path) -> list[Path]:
    """The folder ``latest`` names, then every ``step_*`` folder, newest first (each once)."""
    out: list[Path] = []
    pointer = ckpt_root / LATEST
    if pointer.exists():
        try:
            name = pointer.read_text().strip()
        except (OSError, UnicodeDecodeError) as err:
            log.warning("checkpoint pointer %s is unreadable (%s); looking at the step folders", pointer, err)
            name = ""
        if name and Path(name).name == name and name not in (".", ".."):
            out.append(ckpt_root / name)
        elif name:
            log.warning("checkpoint pointer %s names %r, not a folder beside it; ignored", pointer, name)
    steps = [p for p in ckpt_root.glob("step_*") if p.is_dir() and _step_number(p) is not None]
    out += [p for p in sorted(steps, key=_step_number, reverse=True) if p not in out]
    return out


def _scan(ckpt_root: Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """The newest intact checkpoint (None if none), and the damaged ones skipped on the way with why."""
    skipped: list[tuple[Path, str]] = []
    for ckpt in _candidates(Path(ckpt_root)):
        reason = verify_checkpoint(ckpt)
        if reason is None:
            return ckpt, skipped
        log.warning("skipping damaged checkpoint %s: %s", ckpt, reason)
        skipped.append((ckpt, reason))
    return None, skipped


def latest_checkpoint(ckpt_root: Path) -> Path | None:
    """The newest intact checkpoint folder, or None.

    The folder ``latest`` names comes first; if it is damaged (``verify_checkpoint``), the ``step_*``
    folders are tried newest first. Each damaged one skipped is logged as a warning with the reason.
    """
    return _scan(ckpt_root)[0]


def resolve_resume_checkpoint(ckpt_root: Path) -> Path | None:
    """The checkpoint to resume from: the newest intact one, or None when there are no checkpoints.

    Raises ``CheckpointError`` (one line, each damaged checkpoint with its reason) when checkpoints exist
    (``step_*`` folders, or a ``latest`` pointer naming one) but none is intact, rather than starting over.
    """
    found, skipped = _scan(ckpt_root)
    if found is None and skipped:
        reasons = "; ".join(f"{p.name}: {why}" for p, why in skipped)
        raise CheckpointError(
            f"no intact checkpoint in {ckpt_root} ({reasons}); nothing was changed. Restore one, or start "
            "over with trainer.resume=false (the damaged checkpoints are then kept aside, not deleted)"
        )
    return found


def finish_checkpoints(ckpt_root: Path) -> Path | None:
    """After a run has finished, keep what later stages need: the final checkpoint without its optimizer
    state. Every older checkpoint is removed. Returns the final checkpoint (None if there is none).

    Safe to kill at any moment: the older folders are not the one ``latest`` names, and the manifest is
    rewritten without the optimizer file (atomically) before that file is deleted; files a manifest does
    not list are ignored, so the checkpoint is intact at every point. Sharded (FSDP) checkpoints keep their
    ``sharded/`` state, which holds the weights too.
    """
    final = latest_checkpoint(ckpt_root)
    if final is None:
        return None
    for old in ckpt_root.glob("step_*"):
        if old.is_dir() and old != final:
            shutil.rmtree(old, ignore_errors=True)
    if (final / OPTIMIZER_FILE).exists():
        manifest = json.loads((final / MANIFEST).read_text())
        manifest["files"] = [e for e in manifest["files"] if e["path"] != OPTIMIZER_FILE]
        _write_manifest_file(final, manifest)
        (final / OPTIMIZER_FILE).unlink()
    return final


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
