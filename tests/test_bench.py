"""The ours-vs-TRL step benchmark: real measurements, a complete report; timings are never asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rankrl.benchmarks import grpo_step as bench

METER_PROBE = """
import json
from rankrl.benchmarks import grpo_step as bench
meter = bench.StepMeter()
before = bytearray(b"\\x5a") * (64 * 2**20)  # allocated before the step: must not count as the step's growth
meter.start()
during = bytearray(b"\\x5a") * (96 * 2**20)  # non-zero bytes: no page can stay unbacked or map the zero page
print(json.dumps(meter.stop()))
"""


def test_step_meter_sees_memory_allocated_during_the_step() -> None:
    # a fresh process, as in the benchmark's workers: the test run's own heap history must not matter
    out = subprocess.run([sys.executable, "-c", METER_PROBE], capture_output=True, text=True, check=True)
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert record["step_s"] > 0
    assert 96 <= record["peak_rss_mib"] - record["rss_before_mib"] < 96 + 64


def test_trl_reward_is_the_vowels_reward_on_either_completion_format() -> None:
    chat = [[{"role": "assistant", "content": "an owl eats mice"}], [{"role": "assistant", "content": "!!"}]]
    assert bench.vowel_reward(chat) == [0.75, 0.0]
    assert bench.vowel_reward(["an owl eats mice"], completion_ids=[[1]]) == [0.75]


def test_benchmark_runs_both_sides_and_reports_them(model_dir, tmp_path, capsys) -> None:
    """Tiny model, one timed step each (no warm-up), 4 new tokens: structure only, no timing asserts."""
    import torch
    import transformers
    import trl  # a setup dependency (requirements/cpu.txt): missing fails, never skips

    out = tmp_path / "bench.json"
    result = bench.main(
        [
            "--model",
            str(model_dir / "tiny"),
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--max-new-tokens",
            "4",
            "--out",
            str(out),
        ]
    )
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    for side in bench.SIDES:
        s = result[side]
        assert len(s["steps"]) == 1 and s["median_step_s"] > 0
        assert s["median_generate_s"] > 0 and s["median_update_s"] > 0 and s["median_reward_s"] >= 0
        assert s["median_generate_s"] + s["median_reward_s"] + s["median_update_s"] == pytest.approx(
            s["median_step_s"], rel=0.05
        )
        assert s["peak_rss_mib"] > 0 and s["peak_growth_mib"] >= 0
        assert 1 <= s["completion_length_mean"] <= 4 and 0 <= s["reward_mean"] <= 1
    # one timed step each: the ratio is that of the two raw step times (summarize's medians are not reused)
    ratio = result["ours"]["steps"][0]["step_s"] / result["trl"]["steps"][0]["step_s"]
    assert result["ratio_ours_over_trl"] == pytest.approx(ratio)
    assert result["goal"]["max_ratio"] == 0.8 and result["goal"]["met"] is (ratio <= 0.8)
    assert result["versions"] == {
        "python": result["versions"]["python"],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
    }
    assert result["machine"]["nproc"] >= 1 and set(result["machine"]["torch_threads"]) == set(bench.SIDES)
    assert "4 prompts x G=4, 4 new tokens" in result["configuration"]

    printed = capsys.readouterr().out
    assert "| ours (rankrl)" in printed and f"| TRL {trl.__version__}" in printed
    assert "ratio ours/TRL" in printed and f"trl {trl.__version__}" in printed


def _records(step_s: list[float]) -> list[dict]:
    """Worker step records with the given step times (the phases split each step 50/10/40)."""
    return [
        {
            "step_s": t,
            "generate_s": 0.5 * t,
            "reward_s": 0.1 * t,
            "update_s": 0.4 * t,
            "peak_rss_mib": 900.0 + i,
            "rss_before_mib": 800.0,
            "completion_length": 4,
            "reward": 0.25,
        }
        for i, t in enumerate(step_s)
    ]


@pytest.mark.parametrize(
    ("ours", "trl", "ratio", "met", "verdict"),
    [
        ([3.0, 1.0, 2.0], [2.5, 9.0, 2.0], 0.8, True, "met"),  # medians 2.0 / 2.5: on the goal exactly
        ([2.0, 2.2, 9.9], [2.5, 2.4, 2.6], 0.88, False, "NOT met"),  # medians 2.2 / 2.5
        ([1.0], [4.0], 0.25, True, "met"),
    ],
)
def test_summary_ratio_and_goal_from_hand_computed_medians(ours, trl, ratio, met, verdict) -> None:
    cfg = bench.BenchConfig(model="tiny", repeats=len(ours), warmup=0)
    result = bench.summarize(cfg, {"ours": _records(ours), "trl": _records(trl)}, {"ours": 2, "trl": 2}, 0.0)
    assert result["ratio_ours_over_trl"] == pytest.approx(ratio, abs=1e-12)
    assert result["goal"] == {"max_ratio": 0.8, "met": met}
    assert result["ours"]["peak_growth_mib"] == 100.0 + len(ours) - 1
    assert f"-> goal <= 0.8: {verdict}\n" in bench.format_report(result)


def test_a_failing_worker_is_reported_with_its_side_and_stderr() -> None:
    worker = bench.Worker("nope", bench.BenchConfig(model="tiny"))  # the worker's argparse rejects the side
    try:
        with pytest.raises(RuntimeError, match=r"nope bench worker exited with code 2:(.|\n)*invalid choice"):
            worker.read()
    finally:
        worker.close(kill=True)


def test_a_worker_killed_between_steps_is_reported_as_such_not_as_a_broken_pipe() -> None:
    # what the kernel's OOM killer did to a rankr1-shape worker: the next "go" met a closed pipe
    worker = bench.Worker("nope", bench.BenchConfig(model="tiny"))
    worker.proc.kill()
    worker.proc.wait()
    try:
        with pytest.raises(RuntimeError, match=r"nope bench worker exited with code -9 \(SIGKILL: most"):
            worker.step()
    finally:
        worker.close(kill=True)


def test_rollout_benchmark_alternates_both_engines_and_prints_its_ratio(
    model_dir, data_dir, tmp_path
) -> None:
    """The tiny model, one timed call per engine and shape: structure and the last line, no timing asserts
    (a subprocess: a vLLM engine stays for the life of its process)."""
    out = tmp_path / "rollouts.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rankrl.benchmarks.rollouts",
            "--model",
            str(model_dir / "tiny"),
            "--repeats",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    for shape in ("grpo", "eval"):
        s = result["shapes"][shape]
        for engine in ("hf", "vllm"):
            assert len(s["calls"][engine]) == 1 and s["calls"][engine][0]["tokens"] > 0
        assert s["ratio_vllm_over_hf"] == pytest.approx(s["median_s"]["vllm"] / s["median_s"]["hf"])
    assert (
        result["shapes"]["grpo"]["calls"]["hf"][0]["prompt_tokens"] > 16 * 200
    )  # Rank-R1 prompts, ~360 tokens
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("rollouts: vllm/hf time ratio ") and last.endswith(" (eval shape)"), last


@pytest.mark.slow  # ~80 s for three workers and two vLLM engines; CI's budget keeps the vowels shape above
def test_rankr1_shape_times_the_shared_update_against_the_unshared_one_and_trl(
    model_dir, data_dir, tmp_path
) -> None:
    """The tiny model on the Rank-R1 shape (2 prompts of ~365 tokens x G=8), one timed step per side:
    three workers (ours, ours with G prompt copies, TRL), the update ratio and the last line; no timing
    asserts."""
    out = tmp_path / "rankr1.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rankrl.benchmarks.grpo_step",
            "--shape",
            "rankr1",
            "--model",
            str(model_dir / "tiny"),
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--max-new-tokens",
            "4",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert "(rankr1 shape): 2 prompts x G=8, 4 new tokens" in result["configuration"]
    for side in ("ours", "ours_unshared", "trl"):
        assert len(result[side]["steps"]) == 1 and result[side]["median_update_s"] > 0
        assert 0 <= result[side]["reward_mean"] <= 1  # the Rank-R1 reward on both sides
    assert result["update_ratio_shared_over_unshared"] == pytest.approx(
        result["ours"]["median_update_s"] / result["ours_unshared"]["median_update_s"]
    )
    assert result["goal"]["max_ratio"] == 0.35 and result["update_goal"]["max_ratio"] == 0.4
    last = done.stdout.strip().splitlines()[-1]
    assert last == f"grpo step (rankr1 shape): ours/trl time ratio {result['ratio_ours_over_trl']:.3f}", last
