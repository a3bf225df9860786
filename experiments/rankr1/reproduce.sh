#!/usr/bin/env bash
# Rank-R1 at CPU scale: every row this machine can run, then the tables. Called by `make reproduce-rankr1`.
# Each run has a fixed folder under outputs/rankr1/; a finished run (metrics.json present) is skipped,
# and the training run resumes from its last checkpoint if it was killed. FORCE=1 reruns everything.
# Extra Hydra overrides for every run can be passed in OVERRIDES (e.g. OVERRIDES="eval_limit=5" for a smoke run;
# such rows are marked "first N queries" in the tables).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
OUT=${RANKRL_LOG_DIR:-outputs}/rankr1
read -r -a EXTRA <<< "${OVERRIDES:-}"

run() {  # run <entry point> <experiment> [overrides...]
  local entry=$1 exp=$2; shift 2
  local dir="$OUT/${exp#rankr1/}"
  if [[ -f "$dir/metrics.json" && -z "${FORCE:-}" ]]; then
    echo "== $exp: done ($dir/metrics.json)"; return
  fi
  echo "== $exp ($entry) -> $dir"
  "$PY" -m "rankrl.$entry" "experiment=$exp" "hydra.run.dir=$dir" "$@" "${EXTRA[@]}"
}

# BM25 first stage: exact, seconds
run evaluate rankr1/bm25_dl19
run evaluate rankr1/bm25_dl20
# SmolLM2-135M with the Rank-R1 reasoning prompt: zero-shot, then after GRPO on DL20's judged pools
# (CPU-scale deviation), both evaluated on DL19 (measured on 2 cores: 31 min, then 49 min for training + evaluation)
run evaluate rankr1/rankr1_zeroshot_dl19
run train rankr1/rankr1_grpo_dl19 trainer.resume=true
# the plain Setwise prompt, zero-shot (measured: 14 min)
run evaluate rankr1/setwise_dl19
# BRIGHT needs its documents (not on CPU build machines): the rows stay "missing" unless they are present.
"$PY" -m rankrl.report paper=rankr1
