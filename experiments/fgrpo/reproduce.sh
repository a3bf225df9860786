#!/usr/bin/env bash
# F-GRPO at CPU scale: every row this machine can run, then the tables and figures. Called by
# `make reproduce-fgrpo`; experiments/fgrpo/README.md lists the rows, the deviations and the expected time.
# Every run has a fixed folder under outputs/fgrpo/; a finished run (metrics.json present) is skipped, and a
# killed training run resumes from its last checkpoint when this script is run again. FORCE=1 reruns all.
# Extra Hydra overrides for every run go in OVERRIDES, e.g. OVERRIDES="task.eval_queries=20 trainer.max_steps=4"
# for a smoke run (the SFT stages keep their 1 epoch: their length is set by trainer.epochs).
set -euo pipefail
cd "$(dirname "$0")/../.."
# Same seed, same numbers on any machine: floating-point sums depend on the thread count, so torch and vLLM's
# CPU engine run on RANKRL_THREADS threads (default 2, the build machines' cores) whatever the machine has.
export OMP_NUM_THREADS=${RANKRL_THREADS:-2} MKL_NUM_THREADS=${RANKRL_THREADS:-2}
PY=${PY:-.venv/bin/python}
LOG=${RANKRL_LOG_DIR:-outputs}
SCALE_MODEL=${SCALE_MODEL:-cpu-smollm2-135m}  # run folders' <scale>-<model>: SCALE_MODEL=cpu-tiny with OVERRIDES=model=tiny
read -r -a EXTRA <<< "${OVERRIDES:-}"
[[ -n "${FORCE:-}" ]] && rm -rf "${LOG:?}/fgrpo"

evaluate() {  # evaluate <experiment>: a zero-shot row
  local exp=$1 dir="$LOG/$1/$SCALE_MODEL/seed0"
  if [[ -f "$dir/metrics.json" ]]; then echo "== $exp: done ($dir/metrics.json)"; return; fi
  echo "== $exp (evaluate) -> $dir"
  "$PY" -m rankrl.evaluate "experiment=$exp" logger=none "${EXTRA[@]}"
}

pipeline() {  # pipeline <experiment>: its stages, each skipped when finished (rankrl.pipeline)
  echo "== $1 (pipeline)"
  "$PY" -m rankrl.pipeline "experiment=$1" logger=none "${EXTRA[@]}"
}

sweep() {  # sweep <name> <key> <prefix> <values> [overrides...]: GRPO stages from the F-GRPO pipeline's SFT
  local name=$1 key=$2 prefix=$3 values=$4; shift 4
  local todo=()
  for v in ${values//,/ }; do
    [[ -f "$LOG/fgrpo/$name/$prefix$v/metrics.json" ]] || todo+=("$v")
  done
  if [[ ${#todo[@]} -eq 0 ]]; then echo "== fgrpo/$name: done"; return; fi
  local joined; joined=$(IFS=,; echo "${todo[*]}")
  echo "== fgrpo/$name: $key=$joined (multirun)"
  "$PY" -m rankrl.train -m experiment=fgrpo/fgrpo_movielens logger=none "$key=$joined" \
    "init_from=$LOG/fgrpo/fgrpo_movielens/$SCALE_MODEL/seed0/sft" trainer.resume=true \
    "experiment_name=fgrpo/$name/$prefix\${$key}" "hydra.sweep.dir=$LOG/fgrpo/$name" \
    "hydra.sweep.subdir=$prefix\${$key}" "$@" "${EXTRA[@]}"
}

# Zero-shot rows, every benchmark (greedy, no training): one call, then two calls (select, then rank)
for b in movielens lastfm hotpotqa musique; do evaluate "fgrpo/zeroshot_$b"; done
for b in movielens lastfm hotpotqa musique; do evaluate "fgrpo/twostep_$b"; done
# MovieLens-100K: factorized SFT then F-GRPO; GRPO from the same SFT weights; decoupled SFT (two roles)
pipeline fgrpo/fgrpo_movielens
pipeline fgrpo/grpo_movielens
pipeline fgrpo/decoupled_movielens
# Sweeps (lambda = 1 and n = 10 are the F-GRPO row above); the full sweeps are
#   task.lam=0.5,1,2 and task.slate_size=5,10,15 with the same command
sweep sweep_lam task.lam lam 0.5,2
sweep sweep_n task.slate_size n 5,15
# Tables, figures and the relative gains (into experiments/fgrpo/, or REPORT_DIR when set)
"$PY" -m rankrl.report paper=fgrpo ${REPORT_DIR:+"out_dir=$REPORT_DIR"}
"$PY" -m rankrl.tasks.fgrpo gains --runs-dir "$LOG" ${REPORT_DIR:+--out-dir "$REPORT_DIR"}
