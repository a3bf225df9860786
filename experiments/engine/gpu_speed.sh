#!/usr/bin/env bash
# GPU speed of the shared engine, after `make gpu-check` has passed: a few GRPO steps with a paper model,
# rollout=vllm against rollout=hf, same task, seed and sampling; prints each engine's generation tokens/s, the
# ratio, and how far the engine's sampling log-probs are from the trainer's recompute (after every weight push).
#   bash experiments/engine/gpu_speed.sh [MODEL] [STEPS]      (defaults: qwen2.5-3b, 3)
# Needs a CUDA GPU, the model's weights (hub access or a local path in conf/model/) and the GPU venv
# (`make install-gpu`: .venv-gpu with CUDA vLLM).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv-gpu/bin/python}
MODEL=${1:-qwen2.5-3b}
STEPS=${2:-3}
OUT=${RANKRL_LOG_DIR:-outputs}/engine_check
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-0} TRANSFORMERS_OFFLINE=${TRANSFORMERS_OFFLINE:-0}
for engine in vllm hf; do
  "$PY" -m rankrl.train profile=paper "model=$MODEL" "rollout=$engine" logger=none task=vowels \
    "trainer.max_steps=$STEPS" trainer.save_every=0 trainer.prompts_per_step=8 trainer.group_size=8 \
    trainer.micro_batch_size=8 trainer.sampling.max_new_tokens=256 "model.lora={r: 16, alpha: 32}" \
    task.num_eval_prompts=8 "hydra.run.dir=$OUT/$engine"
done
"$PY" - "$OUT" <<'PYEOF'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
rate = {}
for engine in ("vllm", "hf"):
    rows = [json.loads(l) for l in (out / engine / "train_log.jsonl").read_text().splitlines()]
    steady = rows[1:] or rows  # the first step includes the engine's warm-up
    rate[engine] = statistics.median(r["tokens_per_s"] for r in steady)
    print(f"{engine:5s} generation tokens/s (median over steps 2..): {rate[engine]:10.1f}  "
          f"step s: {statistics.median(r['time/step_s'] for r in steady):.1f}  "
          f"engine/trainer log-prob gap mean {max(r['sampler_logprob_gap'] for r in rows):.2e} "
          f"max {max(r['sampler_logprob_gap_max'] for r in rows):.2e} (worst step)")
print(f"vllm / hf: {rate['vllm'] / rate['hf']:.2f}x")
PYEOF
