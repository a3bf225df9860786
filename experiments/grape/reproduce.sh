#!/usr/bin/env bash
# GRAPE at CPU scale: every row this machine can run, then the tables and the CPU Fig. 5. Called by
# `make reproduce-grape`. The CPU rows are a text stand-in (no images or CLIP weights here): DL19 queries
# rewritten to retrieve their relevant passages from the 9,658-passage DL corpus with a frozen MiniLM, the
# rewriter (SmolLM2-135M) trained on DL20's queries. Every run has a fixed folder under outputs/grape/; a
# finished one (metrics.json present) is skipped, a killed training stage resumes. FORCE=1 reruns everything.
# OVERRIDES adds Hydra overrides to every run (e.g. OVERRIDES="eval_limit=5" for a smoke run; such rows are
# marked "first N queries" in the tables). MODEL picks the rewriter (tests use tiny); REPORT_OUT writes the
# tables and figures there instead of experiments/grape/.
set -euo pipefail
cd "$(dirname "$0")/../.."
# Same seed, same numbers on any machine: floating-point sums depend on the thread count, so torch and vLLM's
# CPU engine run on RANKRL_THREADS threads (default 2, the build machines' cores) whatever the machine has.
export OMP_NUM_THREADS=${RANKRL_THREADS:-2} MKL_NUM_THREADS=${RANKRL_THREADS:-2}
PY=${PY:-.venv/bin/python}
LOG_DIR=${RANKRL_LOG_DIR:-outputs}
MODEL=${MODEL:-smollm2-135m}
read -r -a EXTRA <<< "${OVERRIDES:-}"
SEED_DIR="cpu-$MODEL/seed0"

done_already() { [[ -f "$1/metrics.json" && -z "${FORCE:-}" ]]; }

evaluate() {  # evaluate <experiment> [overrides...]
  local exp=$1; shift
  local dir="$LOG_DIR/$exp/$SEED_DIR"
  if done_already "$dir"; then echo "== $exp: done ($dir/metrics.json)"; return; fi
  echo "== $exp (evaluate) -> $dir"
  "$PY" -m rankrl.evaluate "experiment=$exp" "model=$MODEL" "$@" "${EXTRA[@]}"
}

pipeline() {  # pipeline <experiment> [overrides...]: finished stages are skipped by rankrl.pipeline itself
  local exp=$1; shift
  local dir="$LOG_DIR/$exp/$SEED_DIR"
  if [[ -n "${FORCE:-}" ]]; then rm -rf "$dir"; fi
  echo "== $exp (pipeline) -> $dir"
  "$PY" -m rankrl.pipeline "experiment=$exp" "model=$MODEL" "$@" "${EXTRA[@]}"
}

# 1. raw query into MiniLM (the first run encodes the 9,658 passages once into .cache/vectors/, ~5 min)
evaluate grape/cpu_raw_query
# 2. the untrained rewriter with GRAPE's prompt (SmolLM2-135M rarely writes the format zero-shot)
evaluate grape/cpu_zeroshot_rewrite
# 3. format warm start (SFT), then GRPO with the rank reward; the monitor logs the Fig. 5 probe (~32 min)
pipeline grape/cpu_grape_rank
# 4. the compression control (from the warm start, as many words as GRAPE's rewrites measured on DL19 in step 3),
#    then GRPO with the similarity reward (the score-inflation ablation), in one pipeline
WORDS=$("$PY" -c "import json,sys; print(max(1, round(json.load(open(sys.argv[1]))['metrics']['rewrite_words'])))" \
        "$LOG_DIR/grape/cpu_grape_rank/$SEED_DIR/grape/metrics.json")
pipeline grape/cpu_grape_sim "task.compress_words=$WORDS"
# The image rows (Flickr30k-CN, CVLUE, XM3600, Wikipedia, CIRR with CLIP) need the images, the open_clip
# weights and a GPU; see experiments/grape/README.md ("Paper scale"). They read "missing" here.
"$PY" -m rankrl.report paper=grape ${REPORT_OUT:+"out_dir=$REPORT_OUT"}
