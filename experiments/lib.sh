# Shared by experiments/<paper>/reproduce.sh (sourced, after `cd` to the repository root).
#
# Profiles (PROFILE): cpu (default: SmolLM2-135M on this machine), paper (the paper's models: GPUs and the model
# hub), smoke (the paper rows on the CPU with tiny random models of the paper models' architectures).
# Every run has its fixed folder, and whether it runs is decided in one place, rankrl/run_folders.py, which
# the scripts ask (`folders`, run_folder, sweep_folder, runs_root, decide) instead of spelling paths: a
# finished run is skipped, a run whose init_from has not finished stops the script with the command that
# makes it, and a killed training run resumes from its last checkpoint.
# Seeds: SEEDS=N runs each training row (and what evaluates its weights) for seeds 0..N-1 (`for SEED in
# $(seeds)` in the scripts); evaluation-only rows are greedy and run once, as seed 0. The tables show the
# mean +- std over the seeds found, and comparisons.md the paired tests (rankrl/report/significance.py).
# Environment: FORCE=1 reruns everything; DRY_RUN=1 prints each row's command instead of running it (`make -n`
# sets it); OVERRIDES="k=v ..." adds Hydra overrides to every run (rows with eval_limit read "first N queries" in
# the tables); NPROC=N trains on N GPUs through torchrun (single runs, and each pipeline's training stages);
# OVERRIDES="hydra/launcher=slurm" sends the multiruns (sweeps) to SLURM, NPROC tasks and GPUs per job;
# RANKRL_LOG_DIR moves the run folders.
set -euo pipefail
# Same seed, same numbers on any machine: floating-point sums depend on the thread count, so torch and vLLM's
# CPU engine run on RANKRL_THREADS threads (default 2, the build machines' cores) whatever the machine has.
export OMP_NUM_THREADS=${RANKRL_THREADS:-2} MKL_NUM_THREADS=${RANKRL_THREADS:-2}
PROFILE=${PROFILE:-cpu}
case $PROFILE in
  cpu|paper|smoke) ;;
  *) echo "PROFILE=$PROFILE: choose cpu, paper or smoke" >&2; exit 2 ;;
esac
# the paper profile runs on GPUs, in the GPU venv (CUDA vLLM: make install-gpu); cpu and smoke in the CPU one
# (vLLM's CPU build), the two never mixed
if [[ $PROFILE == paper ]]; then PY=${PY:-.venv-gpu/bin/python}; else PY=${PY:-.venv/bin/python}; fi
# the run folders' CLI needs the standard library only: before `make setup` (make -n) any python3 answers it
FOLDERS_PY=$PY; [[ -x $FOLDERS_PY ]] || FOLDERS_PY=python3
folders() {  # folders <command> [key=value...]: python -m rankrl.run_folders --help. Its answers are often
  # command substitutions inside a row's arguments, where set -e does not look: a failed answer (which would
  # leave an empty folder or init_from) stops the whole script here instead
  "$FOLDERS_PY" -m rankrl.run_folders "$@" && return
  echo "error: no answer from python -m rankrl.run_folders $* (its line above); the script stops" >&2
  kill -s TERM $$; exit 2
}
LOG_DIR=$(folders log-dir)  # RANKRL_LOG_DIR, else outputs/
DATA=${RANKRL_DATA_DIR:-data}
SEEDS=${SEEDS:-1} SEED=0
read -r -a EXTRA <<< "${OVERRIDES:-}"
SECONDS=0

seeds() { seq 0 $((SEEDS - 1)); }  # the seeds of the training rows

run_folder() {  # run_folder <experiment> <model> [stage]: the run folder of this profile and SEED (or its stage's)
  folders run "experiment=$1" "profile=$PROFILE" "model=$2" "seed=$SEED" ${3:+"stage=$3"}
}

sweep_folder() {  # sweep_folder <experiment> <model> <key=value>...: the folder of each multirun point, a line each
  local exp=$1 model=$2; shift 2
  folders sweep "experiment=$exp" "profile=$PROFILE" "model=$model" "${@/#/point=}"
}

runs_root() {  # runs_root <experiment> <model>: the folder of every run of it at this profile (seeds, sweep)
  folders root "experiment=$1" "profile=$PROFILE" "model=$2"
}

decide() {  # decide <folder> [the run's overrides...]: VERDICT=done|launch and WHY (rankrl.run_folders status:
  # done = metrics.json present, unless FORCE); a missing input (an init_from that has not finished) stops
  # the script here, naming the command that makes it, as the run itself would have (DRY_RUN lists it: the
  # rows that make its input were listed, not run)
  local answer; answer=$(folders status "$1" ${FORCE:+--force} "${@:2}")
  VERDICT=${answer%% *} WHY=${answer#* }
  if [[ $VERDICT == missing && -n "${DRY_RUN:-}" ]]; then VERDICT=launch; fi
  if [[ $VERDICT == missing ]]; then echo "error: $WHY" >&2; exit 2; fi
}

multi_gpu() { [[ -n "${NPROC:-}" && $NPROC -gt 1 ]]; }

on_slurm() {  # OVERRIDES send multiruns to SLURM (hydra/launcher=slurm): a job's NPROC tasks are its ranks
  [[ " ${EXTRA[*]} " =~ \ hydra/launcher=(submitit_)?slurm\  ]]
}

launcher() {  # launcher <entry point> [sweep]: the command that starts it; training on NPROC GPUs through
  # torchrun, except a multirun that goes to SLURM, whose jobs start their NPROC ranks themselves
  if [[ $1 == train ]] && multi_gpu && ! { [[ ${2:-} == sweep ]] && on_slurm; }; then
    echo "$PY -m torch.distributed.run --standalone --nproc_per_node=$NPROC -m rankrl.$1"
  else
    echo "$PY -m rankrl.$1"
  fi
}

# RUN_NAME=<name>: the run folder's experiment name where it is not the experiment file's: a file with an axis
# in place of copies of itself (one file per method, the benchmark an override) whose experiment_name
# interpolates the axis value. `run` asks whether that folder is done and FORCE=1 makes `pipeline` clear it.
run() {  # run <entry point> <experiment> <model> [overrides...]; RUN_DIR=<folder> for one value of a sweep
  local entry=$1 exp=$2 model=$3 name=${RUN_NAME:-$2}; shift 3
  local cmd; read -r -a cmd <<< "$(launcher "$entry")"
  cmd+=("experiment=$exp" "profile=$PROFILE" "model=$model" "seed=$SEED" "$@" "${EXTRA[@]}")
  # quoted: a sweep folder's name holds '=' (benchmark=cirr), which Hydra's override grammar would split on
  [[ -n "${RUN_DIR:-}" ]] && cmd+=("hydra.run.dir='$RUN_DIR'")
  if [[ -n "${DRY_RUN:-}" ]]; then echo "${cmd[*]}"; return; fi
  local dir; dir=${RUN_DIR:-$(run_folder "$name" "$model")}
  decide "$dir" "profile=$PROFILE" "model=$model" "seed=$SEED" "$@" "${EXTRA[@]}"
  if [[ $VERDICT == done ]]; then echo "== $name ($model): done ($WHY)"; return; fi
  echo "== [$((SECONDS / 60)) min] $name ($entry, $model) -> $dir"
  "${cmd[@]}"
}

pipeline() {  # pipeline <experiment> <model> [overrides...]: its stages, each skipped when finished; RUN_NAME
  local exp=$1 model=$2 name=${RUN_NAME:-$1}; shift 2
  local cmd=("$PY" -m rankrl.pipeline "experiment=$exp" "profile=$PROFILE" "model=$model" "seed=$SEED" "$@")
  # the pipeline starts each training stage through torchrun on NPROC GPUs (rankrl/pipeline.py)
  if multi_gpu; then cmd+=("pipeline_nproc=$NPROC"); fi
  cmd+=("${EXTRA[@]}")
  if [[ -n "${DRY_RUN:-}" ]]; then echo "${cmd[*]}"; return; fi
  echo "== [$((SECONDS / 60)) min] $name (pipeline, $model, seed $SEED)"
  if [[ -n "${FORCE:-}" ]]; then local dir; dir=$(run_folder "$name" "$model"); rm -rf "$dir"; fi
  "${cmd[@]}"
}

fetch_data() {  # fetch_data <source...> -- <file...>: what the rows read beyond `make data` (rankrl.data.prepare
  # --only <source...>), then a stop naming that command if a file (under the data folder) is still missing
  local sources=() files=()
  while [[ $# -gt 0 && $1 != -- ]]; do sources+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  files=("$@")
  [[ ${#sources[@]} -eq 0 ]] && return 0
  local cmd=("$PY" -m rankrl.data.prepare --data-dir "$DATA" --only "${sources[@]}")
  if [[ -n "${DRY_RUN:-}" ]]; then echo "${cmd[*]}"; return; fi
  echo "== [$((SECONDS / 60)) min] data: ${sources[*]}"
  "${cmd[@]}"
  local f
  for f in "${files[@]}"; do
    if [[ ! -f "$DATA/$f" ]]; then
      echo "missing $DATA/$f after the data step (see its lines above): ${cmd[*]}" >&2
      exit 1
    fi
  done
}

fetch_weights() {  # fetch_weights <spec...>: at profile=paper, the hub weights the rows load (model/<name>,
  # retriever/<name>, hub/<repo>: rankrl/hub_fetch.py), fetched once before the first row; every run itself is
  # offline (HF_HUB_OFFLINE=1) and reads them from the cache
  [[ $PROFILE == paper ]] || return 0
  local cmd=("$PY" -m rankrl.hub_fetch "$@")
  if [[ -n "${DRY_RUN:-}" ]]; then echo "${cmd[*]}"; return; fi
  echo "== [$((SECONDS / 60)) min] weights: $*"
  "${cmd[@]}"
}

report() {  # report <paper> [report overrides...]: the tables; smoke tables go beside the smoke runs
  local paper=$1; shift
  local cmd=("$PY" -m rankrl.report "paper=$paper" "$@")
  [[ $PROFILE == smoke ]] && cmd+=("runs_dir=$LOG_DIR" "out_dir=$(folders tables "paper=$paper")" "skip_scales=[]")
  if [[ -n "${DRY_RUN:-}" ]]; then echo "${cmd[*]}"; return; fi
  "${cmd[@]}"
}
