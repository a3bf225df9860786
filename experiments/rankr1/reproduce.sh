#!/usr/bin/env bash
# Rank-R1 at CPU scale: every row this machine can run, then the tables and the reward curve.
# Called by `make reproduce-rankr1`. Each run has its fixed folder outputs/<experiment>/cpu-smollm2-135m/seed0/;
# a finished run (metrics.json present) is skipped, and a killed training run resumes from its last checkpoint.
# FORCE=1 reruns everything. Extra Hydra overrides for every run go in OVERRIDES (e.g. OVERRIDES="eval_limit=5"
# for a smoke run; such rows are marked "first N queries" in the tables).
set -euo pipefail
cd "$(dirname "$0")/../.."
# Same seed, same numbers on any machine: floating-point sums depend on the thread count, so torch and vLLM's
# CPU engine run on RANKRL_THREADS threads (default 2, the build machines' cores) whatever the machine has.
export OMP_NUM_THREADS=${RANKRL_THREADS:-2} MKL_NUM_THREADS=${RANKRL_THREADS:-2}
PY=${PY:-.venv/bin/python}
LOG_DIR=${RANKRL_LOG_DIR:-outputs}
read -r -a EXTRA <<< "${OVERRIDES:-}"
SECONDS=0

run() {  # run <entry point> <experiment> [overrides...]
  local entry=$1 exp=$2; shift 2
  local dir="$LOG_DIR/$exp/cpu-smollm2-135m/seed0"
  if [[ -f "$dir/metrics.json" && -z "${FORCE:-}" ]]; then
    echo "== $exp: done ($dir/metrics.json)"; return
  fi
  echo "== [$((SECONDS / 60)) min] $exp ($entry) -> $dir"
  "$PY" -m "rankrl.$entry" "experiment=$exp" "$@" "${EXTRA[@]}"
}

# BM25 first stage: exact, seconds
run evaluate rankr1/bm25_dl19
run evaluate rankr1/bm25_dl20
# SmolLM2-135M zero-shot: the plain Setwise prompt, and the Rank-R1 (reasoning) prompt
run evaluate rankr1/setwise_dl19
run evaluate rankr1/rankr1_zeroshot_dl19
# the paper's Setwise SFT baseline: gold labels of DL20's judged pools (CPU deviation: not MS MARCO)
run train rankr1/setwise_sft_dl19 trainer.resume=true
# format warm start (labelled CPU deviation), then GRPO from it; each stage is evaluated on DL19
echo "== [$((SECONDS / 60)) min] rankr1/warmstart_grpo_dl19 (pipeline)"
[[ -n "${FORCE:-}" ]] && rm -rf "$LOG_DIR/rankr1/warmstart_grpo_dl19/cpu-smollm2-135m/seed0"
"$PY" -m rankrl.pipeline experiment=rankr1/warmstart_grpo_dl19 "${EXTRA[@]}"
# BRIGHT needs its documents (not on CPU build machines): the rows stay "missing" unless they are present.
"$PY" -m rankrl.report paper=rankr1
echo "== reproduce-rankr1 finished in $((SECONDS / 60)) min"
