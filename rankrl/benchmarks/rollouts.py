"""Rollouts, vLLM's engine against the transformers engine, on the Rank-R1 CPU-scale shapes.

Both engines serve the same SmolLM2-135M-Instruct policy (float32, CPU) in one process, and the calls
alternate: hf, vllm, hf, vllm, ... for each shape, one warm-up call each not counted. The prompts are the
Rank-R1 task's own (``experiment=rankr1/rankr1_grpo`` at ``profile=cpu``: DL20 judged-pool prompts, 5
passages cut to 32 tokens, ~360 prompt tokens):

- **grpo shape**: one GRPO step's rollouts, 2 prompts x G=8 completions of at most 64 tokens at
  temperature 1.0, stopped at ``</answer>`` (``conf/task_scale/rankr1_cpu.yaml``);
- **eval shape**: a Setwise heap-sort batch, 16 comparison prompts decoded greedily, at most 64 tokens,
  stopped at ``</answer>``.

Each timed call gets prompts it has not seen (vLLM's prefix cache is reset before each call too, as the weight
push after every update resets it in training), and torch's RNG is seeded identically for both engines.
Time: wall clock of ``engine.generate``. The greedy completions of the two engines are compared as well.

CLI: ``python -m rankrl.benchmarks.rollouts [--model NAME] [--repeats N] [--out FILE]`` (``make bench``).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rankrl.benchmarks import argument_parser

# The issue's target for vLLM's time relative to transformers `generate` on the GRPO shape.
GOAL_RATIO = 0.3
ENGINES = ("hf", "vllm")


@dataclass(frozen=True)
class Shape:
    """One workload: ``prompts`` prompts x ``n`` completions of at most ``max_new_tokens``."""

    name: str
    prompts: int
    n: int
    max_new_tokens: int
    temperature: float


SHAPES = (
    Shape("grpo", prompts=2, n=8, max_new_tokens=64, temperature=1.0),
    Shape("eval", prompts=16, n=1, max_new_tokens=64, temperature=0.0),
)


def rankr1_task() -> Any:
    """The Rank-R1 task at CPU scale, as ``rankrl.train`` builds it (passages cut with SmolLM2's tokenizer,
    the CPU profile's model, whichever model the benchmark runs)."""
    from hydra import compose, initialize_config_dir

    from rankrl import app
    from rankrl.config import CONFIG_DIR

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", ["experiment=rankr1/rankr1_grpo", "logger=none"])
    return app.build_task(cfg)


def rankr1_prompts(count: int) -> list[list[dict[str, str]]]:
    """The first ``count`` Rank-R1 training prompts at CPU scale (``rankr1_task``)."""
    examples = rankr1_task().train_examples()
    if len(examples) < count:
        raise ValueError(
            f"the Rank-R1 task has {len(examples)} training prompts, the benchmark needs {count}"
        )
    return [ex.messages for ex in examples[:count]]


def run(model: str = "smollm2-135m", repeats: int = 3, seed: int = 0) -> dict[str, Any]:
    import torch

    from rankrl.models import load_policy
    from rankrl.rollout.base import SamplingParams
    from rankrl.rollout.hf import HFEngine
    from rankrl.rollout.vllm import VLLMEngine

    policy, tok = load_policy(model, dtype="float32", device="cpu")
    engines = {"hf": HFEngine(policy, tok, batch_size=16), "vllm": VLLMEngine(policy, tok)}
    needed = sum(s.prompts for s in SHAPES) * (repeats + 1)
    pool = iter(rankr1_prompts(needed))
    result: dict[str, Any] = {
        "model": model,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "shapes": {},
    }
    for shape in SHAPES:
        sampling = SamplingParams(
            max_new_tokens=shape.max_new_tokens, temperature=shape.temperature, stop=("</answer>",)
        )
        calls = {e: [] for e in ENGINES}
        for r in range(repeats + 1):  # r = 0 is the warm-up
            prompts = [next(pool) for _ in range(shape.prompts)]
            outs = {}
            for name in ENGINES:
                if name == "vllm":
                    engines[name].llm.reset_prefix_cache()
                torch.manual_seed(seed + r)
                t0 = time.perf_counter()
                outs[name] = engines[name].generate(prompts, n=shape.n, sampling=sampling)
                seconds = time.perf_counter() - t0
                if r:
                    calls[name].append(
                        {
                            "seconds": seconds,
                            "tokens": sum(map(len, outs[name].completion_ids)),
                            "prompt_tokens": sum(map(len, outs[name].prompt_ids)),
                        }
                    )
            if r and shape.temperature == 0:
                same = sum(a == b for a, b in zip(outs["hf"].completion_ids, outs["vllm"].completion_ids))
                result.setdefault("greedy_agreement", []).append(f"{same}/{len(outs['hf'].completion_ids)}")
            print(
                f"  {shape.name} {'warm-up' if r == 0 else f'repeat {r}'}: "
                + ", ".join(f"{e} {calls[e][-1]['seconds']:.1f} s" if r else e for e in ENGINES),
                flush=True,
            )
        medians = {e: statistics.median(c["seconds"] for c in calls[e]) for e in ENGINES}
        result["shapes"][shape.name] = {
            "shape": asdict(shape),
            "calls": calls,
            "median_s": medians,
            "ratio_vllm_over_hf": medians["vllm"] / medians["hf"],
        }
    ratio = result["shapes"]["grpo"]["ratio_vllm_over_hf"]
    result["goal"] = {"max_ratio_grpo": GOAL_RATIO, "met": ratio <= GOAL_RATIO}
    return result


def report(result: dict[str, Any]) -> str:
    lines = [
        f"model {result['model']}, {result['threads']} torch threads, {result['machine']}, "
        f"{result['repeats']} timed calls per engine and shape (median)"
    ]
    for name, s in result["shapes"].items():
        shape = s["shape"]
        tokens = {e: statistics.median(c["tokens"] for c in s["calls"][e]) for e in ENGINES}
        lines.append(
            f"{name} shape ({shape['prompts']} prompts x {shape['n']}, <= {shape['max_new_tokens']} "
            f"tokens, T={shape['temperature']}): hf {s['median_s']['hf']:.2f} s ({tokens['hf']:.0f} "
            f"tokens), vllm {s['median_s']['vllm']:.2f} s ({tokens['vllm']:.0f} tokens)"
        )
    if result.get("greedy_agreement"):
        lines.append(f"greedy completions identical in both engines: {', '.join(result['greedy_agreement'])}")
    goal = result["goal"]
    lines.append(f"goal: grpo-shape ratio <= {goal['max_ratio_grpo']}: {'met' if goal['met'] else 'NOT met'}")
    lines.append(
        f"rollouts: vllm/hf time ratio {result['shapes']['grpo']['ratio_vllm_over_hf']:.3f} (grpo shape), "
        f"{result['shapes']['eval']['ratio_vllm_over_hf']:.3f} (eval shape)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argument_parser(__spec__, __doc__)
    parser.add_argument("--model", default="smollm2-135m", help="a model folder or local model name")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per engine and shape")
    parser.add_argument("--out", type=Path, default=None, help="write the raw measurements as JSON")
    args = parser.parse_args(argv)
    result = run(args.model, args.repeats)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    print(report(result))
    return result


if __name__ == "__main__":
    main()
