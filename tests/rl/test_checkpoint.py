"""Checkpoint manifests: a damaged newest checkpoint is skipped with a warning, resume falls back to the
newest intact one, and a run whose checkpoints are all damaged stops with one clear line."""

from __future__ import annotations

import json
import logging
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from rankrl.rl.checkpoint import (
    LATEST,
    MANIFEST,
    OPTIMIZER_FILE,
    STATE_FILE,
    CheckpointError,
    finish_checkpoints,
    latest_checkpoint,
    load_checkpoint,
    resolve_resume_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)

LOGGER = "rankrl.rl.checkpoint"


def _train_step(policy: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    ids = torch.arange(1, 9).unsqueeze(0)
    loss = policy(input_ids=ids, labels=ids).loss
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


@pytest.fixture(scope="module")
def saved(model_dir, tmp_path_factory):
    """Checkpoints of steps 1 and 2 of the tiny model (one AdamW step apart), and what each one holds."""
    from rankrl.models import load_policy

    torch.manual_seed(0)
    policy, _ = load_policy(str(model_dir / "tiny"), dtype="float32")
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    root = tmp_path_factory.mktemp("ckpt") / "checkpoints"
    expected = {}
    for step in (1, 2):
        _train_step(policy, optimizer)
        torch.manual_seed(100 + step)  # the RNG state the checkpoint must give back
        save_checkpoint(root, step, policy, optimizer, {"step": step}, keep=5)
        expected[step] = {
            "weights": {k: v.detach().clone() for k, v in policy.state_dict().items()},
            "exp_avg_sq": sum(float(s["exp_avg_sq"].sum()) for s in optimizer.state.values()),
            "draw": torch.rand(3),
        }
    norms = [expected[step]["weights"]["model.norm.weight"] for step in (1, 2)]
    assert not torch.equal(*norms)  # the two checkpoints differ
    return policy, optimizer, root, expected


@pytest.fixture
def root(saved, tmp_path) -> Path:
    """A fresh copy of the saved checkpoints, free to damage."""
    copy = tmp_path / "checkpoints"
    shutil.copytree(saved[2], copy)
    return copy


def _truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def _flip_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))


def test_save_writes_a_manifest_of_every_file(root):
    ckpt = root / "step_000002"
    manifest = json.loads((ckpt / MANIFEST).read_text())
    listed = {e["path"]: e for e in manifest["files"]}
    on_disk = {p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file()} - {MANIFEST}
    assert set(listed) == on_disk
    expected_files = {
        STATE_FILE,
        OPTIMIZER_FILE,
        "rng_rank0.pt",
        "policy/model.safetensors",
        "policy/config.json",
    }
    assert expected_files <= on_disk
    for p in on_disk:
        assert listed[p]["size"] == (ckpt / p).stat().st_size and len(listed[p]["sha256"]) == 64, p
    assert not list(root.rglob("*.tmp")) and not list(root.glob(".tmp_step_*"))
    assert verify_checkpoint(ckpt) is None and verify_checkpoint(root / "step_000001") is None
    assert latest_checkpoint(root) == ckpt == resolve_resume_checkpoint(root)


def test_truncated_newest_state_falls_back_to_the_older_checkpoint(saved, root, caplog):
    policy, optimizer, _, expected = saved
    _truncate(root / "step_000002" / STATE_FILE)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        found = latest_checkpoint(root)
    assert found == root / "step_000001"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "step_000002" in warnings[0] and STATE_FILE in warnings[0], warnings
    assert resolve_resume_checkpoint(root) == found

    state = load_checkpoint(found, policy, optimizer)  # the fallback checkpoint loads completely
    assert state["step"] == 1
    for name, tensor in policy.state_dict().items():
        assert torch.equal(tensor, expected[1]["weights"][name]), name
    assert sum(float(s["exp_avg_sq"].sum()) for s in optimizer.state.values()) == expected[1]["exp_avg_sq"]
    assert torch.equal(torch.rand(3), expected[1]["draw"])


def test_all_checkpoints_damaged_raises_one_line(root, caplog):
    _truncate(root / "step_000002" / STATE_FILE)
    (root / "step_000001" / "rng_rank0.pt").unlink()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert latest_checkpoint(root) is None
    assert sum("step_000001" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(CheckpointError) as err:
        resolve_resume_checkpoint(root)
    message = str(err.value)
    assert "\n" not in message and "step_000002" in message and "step_000001" in message
    assert "rng_rank0.pt is missing" in message
    assert isinstance(err.value, RuntimeError)


def test_weights_that_do_not_match_the_manifest_are_detected(root):
    weights = root / "step_000002" / "policy" / "model.safetensors"
    size = weights.stat().st_size
    _flip_byte(weights)  # same size: only the hash can tell
    assert weights.stat().st_size == size
    reason = verify_checkpoint(root / "step_000002")
    assert reason is not None and "policy/model.safetensors" in reason and "sha256" in reason
    assert latest_checkpoint(root) == root / "step_000001"


def test_damaged_or_missing_manifest(root):
    ckpt = root / "step_000002"
    (ckpt / MANIFEST).write_text('{"files": [')
    assert "unreadable" in verify_checkpoint(ckpt)
    (ckpt / MANIFEST).write_text(json.dumps({"files": [{"path": "../x", "size": 1, "sha256": "0"}]}))
    assert STATE_FILE in verify_checkpoint(ckpt)  # the state file must be listed
    # legacy (written before manifests): accepted when the trainer state is a complete torch.save archive
    (ckpt / MANIFEST).unlink()
    assert verify_checkpoint(ckpt) is None and latest_checkpoint(root) == ckpt
    _truncate(ckpt / STATE_FILE)
    assert "legacy" in verify_checkpoint(ckpt)
    assert latest_checkpoint(root) == root / "step_000001"


def test_pointer_problems_and_empty_roots(root, tmp_path, caplog):
    assert latest_checkpoint(tmp_path / "nothing") is None
    assert resolve_resume_checkpoint(tmp_path / "nothing") is None
    (root / LATEST).unlink()  # killed between the rename and the pointer update: the folder is complete
    assert latest_checkpoint(root) == root / "step_000002"
    (root / LATEST).write_text("step_000001\n")  # the pointer comes first, even when older
    assert latest_checkpoint(root) == root / "step_000001"
    (root / LATEST).write_text("step_000009")  # names a folder that is gone
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert latest_checkpoint(root) == root / "step_000002"
    assert any("step_000009" in r.getMessage() and "missing" in r.getMessage() for r in caplog.records)
    (root / LATEST).write_text("../elsewhere")
    assert latest_checkpoint(root) == root / "step_000002"
    shutil.rmtree(root / "step_000001")
    shutil.rmtree(root / "step_000002")
    (root / LATEST).write_text("step_000002")
    with pytest.raises(CheckpointError, match="step_000002: missing"):
        resolve_resume_checkpoint(root)


def test_a_finished_run_keeps_its_final_weights_without_the_optimizer_state(saved, root, caplog):
    policy, optimizer, _, expected = saved
    final = finish_checkpoints(root)
    assert final == root / "step_000002"
    assert sorted(p.name for p in root.iterdir()) == [LATEST, "step_000002"]
    assert not (final / OPTIMIZER_FILE).exists()
    assert verify_checkpoint(final) is None and latest_checkpoint(root) == final
    assert OPTIMIZER_FILE not in {e["path"] for e in json.loads((final / MANIFEST).read_text())["files"]}

    fresh = torch.optim.AdamW(policy.parameters(), lr=1e-2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert load_checkpoint(final, policy, fresh)["step"] == 2
    for name, tensor in policy.state_dict().items():
        assert torch.equal(tensor, expected[2]["weights"][name]), name
    assert not fresh.state and "starts afresh" in caplog.text
    assert finish_checkpoints(root) == final  # a second call changes nothing


def test_finishing_is_safe_at_its_one_non_atomic_point(root):
    """Killed after the manifest was rewritten but before the optimizer file was deleted: the checkpoint
    is intact (files a manifest does not list are ignored) and a rerun finishes the job."""
    final = root / "step_000002"
    manifest = json.loads((final / MANIFEST).read_text())
    manifest["files"] = [e for e in manifest["files"] if e["path"] != OPTIMIZER_FILE]
    (final / MANIFEST).write_text(json.dumps(manifest))
    assert verify_checkpoint(final) is None
    finish_checkpoints(root)
    assert not (final / OPTIMIZER_FILE).exists() and verify_checkpoint(final) is None


def test_finishing_without_checkpoints_does_nothing(tmp_path):
    assert finish_checkpoints(tmp_path / "checkpoints") is None


def test_a_resume_that_sees_fewer_gpus_restores_the_rng_of_those_it_has(monkeypatch):
    """A checkpoint holds one CUDA RNG state per GPU its process saw; torch.cuda.set_rng_state_all stopped
    a resume that sees fewer ('invalid device ordinal'). No GPU here: one is announced, the state has two."""
    import rankrl.rl.checkpoint as checkpoint

    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.append(device))
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: restored.extend(range(len(states))))
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    checkpoint.set_rng_state({**state, "cuda": [torch.get_rng_state(), torch.get_rng_state()]})
    assert restored == [0]


def test_the_optimizer_state_is_read_onto_the_cpu(saved, root, monkeypatch):
    """Saved from cuda:0, an optimizer state read without map_location lands on cuda:0 in every rank before
    load_state_dict moves it to the rank's own GPU: a whole copy per rank on the first GPU."""
    import rankrl.rl.checkpoint as checkpoint

    policy, optimizer, _, _ = saved
    reads = []
    real = torch.load
    monkeypatch.setattr(
        checkpoint.torch, "load", lambda f, **kw: reads.append((Path(f).name, kw)) or real(f, **kw)
    )
    load_checkpoint(latest_checkpoint(root), policy, optimizer)
    assert [kw.get("map_location") for name, kw in reads if name == OPTIMIZER_FILE] == ["cpu"], reads
