#!/usr/bin/env bash
# CoGR at CPU scale: every row this machine can run, then the tables and figures. Called by `make reproduce-cogr`.
# Runs have fixed folders under outputs/cogr/; a finished run or pipeline stage (metrics.json present) is
# skipped and a killed training stage resumes, so rerunning continues where it stopped. Delete outputs/cogr
# to start over. Extra Hydra overrides for every run go in OVERRIDES (e.g. OVERRIDES="model=tiny" for a smoke
# run). ABLATIONS=1 adds the two ablation pipelines (shared generator, no SFT initialisation): about 1.4x the
# default's time again, so they are left out by default to keep the reproduction within its CPU budget.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Same seed, same numbers on any machine: floating-point sums depend on the thread count, so torch and vLLM's
# CPU engine run on RANKRL_THREADS threads (default 2, the build machines' cores) whatever the machine has.
export OMP_NUM_THREADS=${RANKRL_THREADS:-2} MKL_NUM_THREADS=${RANKRL_THREADS:-2}
PY=${PY:-.venv/bin/python}
LOG=${RANKRL_LOG_DIR:-outputs}
DATA=${RANKRL_DATA_DIR:-data}
read -r -a EXTRA <<< "${OVERRIDES:-}"

evaluate() {  # evaluate <experiment>: a single evaluation run (the cutoff baselines)
  local exp=$1 dir="$LOG/$1"
  if [[ -f "$dir/metrics.json" ]]; then echo "== $exp: done ($dir/metrics.json)"; return; fi
  echo "== $exp (evaluate) -> $dir"
  "$PY" -m rankrl.evaluate "experiment=$exp" "hydra.run.dir=$dir" "${EXTRA[@]}"
}

pipeline() {  # pipeline <experiment> [overrides...]: prints the pipeline folder last
  local exp=$1; shift
  echo "== $exp (pipeline)" >&2
  "$PY" -m rankrl.pipeline "experiment=$exp" "$@" "${EXTRA[@]}" | tee /dev/stderr | tail -n 1 | sed 's/^pipeline finished: //'
}

# Baselines on the CPU-scale catalog: BM25 and MiniLM, each cut at the depth with the best training F1 (seconds)
evaluate cogr/bm25_cutoff_dlpools
evaluate cogr/dense_cutoff_dlpools
# CoGR: base-model keywords, SFT of both generators, alternating GRPO rounds (cogr_schedule.rounds), final evaluation
ROOT=$(pipeline cogr/cogr_dlpools)
# CoGR*: the query side alone, from the SFT stages above, over the SFT item index
pipeline cogr/cogr_star_dlpools "roles.query.init_from=$ROOT/sft_query" "roles.item.init_from=$ROOT/sft_item" >/dev/null
# Ablations: one generator for both sides; rounds without SFT initialisation
if [[ "${ABLATIONS:-0}" == 1 ]]; then
  pipeline cogr/cogr_shared_dlpools >/dev/null
  pipeline cogr/cogr_nosft_dlpools >/dev/null
fi
# WANDS: its products and labels are not on CPU build machines; with them, the two baselines run here (the
# keyword generators over 42,994 products need profile=paper on a GPU). Without them the rows read "missing".
if [[ -f "$DATA/wands/product.csv" && -f "$DATA/wands/label.csv" ]]; then
  evaluate cogr/bm25_cutoff_wands
  evaluate cogr/dense_cutoff_wands
else
  echo "== WANDS rows skipped: $DATA/wands/product.csv or label.csv missing (python -m rankrl.data.prepare --only wands)"
fi
"$PY" -m rankrl.report paper=cogr
"$PY" -m rankrl.tasks.cogr figures --runs-dir "$LOG" --out-dir experiments/cogr
