#!/usr/bin/env bash
# make smoke-paper: the papers' smokes (each experiments/<paper>/reproduce.sh at PROFILE=smoke) in lanes that run
# at once, each lane on its own cores.
#   bash experiments/smoke.sh rankr1,fgrpo cogr,grape    # two lanes: Rank-R1 then F-GRPO, beside CoGR then GRAPE
#   bash experiments/smoke.sh rankr1                      # one paper, on every core
#
# Why lanes: a smoke is mostly fixed cost that one core serves. Each of its ~31 processes spends ~10 s importing
# torch, transformers and vLLM and more starting its engine, single-threaded Python either way, and the tiny
# models' arithmetic is small. Two lanes of one core each therefore finish in about the time of the longer lane,
# where one lane on two cores takes the sum. Each lane is pinned to its own cores (taskset) and runs that many
# torch threads (RANKRL_THREADS, read by experiments/lib.sh): two vLLM CPU engines whose threads share cores
# slow each other 7-13x (README), two that do not share any do not. With fewer cores than lanes, or without
# taskset, the papers run one after the other on every core, as `make smoke-<paper>` does.
#
# Every line a lane prints is prefixed with its papers' names; the script fails if any lane fails, after all
# lanes have ended. Smoke runs and tables go under SMOKE_LOG_DIR (outputs/smoke by default: rankrl/run_folders.py,
# which names every folder here).
set -uo pipefail
cd "$(dirname "$0")/.."
# the run folders' CLI needs the standard library only; any python3 answers it before `make setup`
FOLDERS_PY=${PY:-.venv/bin/python}; [[ -x $FOLDERS_PY ]] || FOLDERS_PY=python3
SMOKE_LOG_DIR=${SMOKE_LOG_DIR:-$("$FOLDERS_PY" -m rankrl.run_folders smoke-log-dir)}
lanes=("$@")
[[ ${#lanes[@]} -gt 0 ]] || lanes=(rankr1,fgrpo cogr,grape)
cores=$(nproc)

smoke() {  # smoke <paper>: its rows again from scratch (a stale finished run would hide a broken path)
  local runs; runs=$("$FOLDERS_PY" -m rankrl.run_folders paper "paper=$1" "log_dir=$SMOKE_LOG_DIR") || return
  rm -rf "$runs"
  RANKRL_LOG_DIR=$SMOKE_LOG_DIR PROFILE=smoke bash "experiments/$1/reproduce.sh"
}

run_lane() {  # run_lane <paper,paper,...>: the papers one after the other; stops at the first that fails
  local paper
  for paper in ${1//,/ }; do
    [[ -f experiments/$paper/reproduce.sh ]] || { echo "no paper '$paper' (experiments/*/reproduce.sh)"; return 2; }
    smoke "$paper" || { echo "== smoke-$paper FAILED"; return 1; }
  done
}

SECONDS=0
if [[ ${#lanes[@]} -eq 1 || $cores -lt ${#lanes[@]} ]] || ! command -v taskset >/dev/null; then
  echo "== smoke: ${lanes[*]} one after the other on $cores cores"
  for lane in "${lanes[@]}"; do run_lane "$lane" || exit 1; done
  echo "== smoke finished in $((SECONDS / 60)) min"
  exit 0
fi

per_lane=$((cores / ${#lanes[@]}))
pids=()
for i in "${!lanes[@]}"; do
  first=$((i * per_lane)) last=$((i * per_lane + per_lane - 1))
  echo "== smoke lane ${lanes[$i]}: cores $first-$last, $per_lane thread(s)"
  (
    export RANKRL_THREADS=$per_lane
    taskset -c "$first-$last" bash -c "$(declare -f smoke run_lane); FOLDERS_PY='$FOLDERS_PY' SMOKE_LOG_DIR='$SMOKE_LOG_DIR' run_lane '${lanes[$i]}'" 2>&1 |
      sed -u "s/^/[${lanes[$i]}] /"
  ) &
  pids+=($!)
done
failed=()
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || failed+=("${lanes[$i]}")
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "== smoke FAILED in lane(s): ${failed[*]} (their lines above, prefixed with the lane)" >&2
  exit 1
fi
echo "== smoke finished in $((SECONDS / 60)) min (${#lanes[@]} lanes at once)"
