#!/usr/bin/env bash
# Rank-R1: every row of its tables that the profile runs, then the tables (and, at CPU scale, the reward curve).
#   make reproduce-rankr1                  PROFILE=cpu: SmolLM2-135M, the CPU-scale rows (times: README.md, Times)
#   make reproduce-rankr1 PROFILE=paper    Table 1 for Qwen2.5-3B/7B/14B-Instruct (MODELS="..." chooses), then
#                                          Table 2 (BRIGHT) when its documents are present
#   make smoke-rankr1                      PROFILE=smoke: the paper rows on the CPU, a tiny Qwen2.5-shaped model
# Run folders, seeds (SEEDS=3), skipping, resuming, FORCE, DRY_RUN, OVERRIDES, NPROC: experiments/lib.sh.
cd "$(dirname "$0")/../.."
source experiments/lib.sh

trec_dl() {  # trec_dl <experiment> <dl19|dl20> <model> [overrides...]: a Table 1 row of one file per
  # method, the benchmark an override, in its run folder <experiment>_<benchmark> (rankr1/setwise_dl20)
  local exp=$1 b=$2 m=$3; shift 3
  RUN_NAME="${exp}_$b" run evaluate "$exp" "$m" "benchmark=$b" "$@"
}

cpu_rows() {
  # BM25 first stage: exact, seconds
  trec_dl rankr1/bm25 dl19 smollm2-135m
  trec_dl rankr1/bm25 dl20 smollm2-135m
  # SmolLM2-135M zero-shot: the plain Setwise prompt, and the Rank-R1 (reasoning) prompt
  trec_dl rankr1/setwise dl19 smollm2-135m
  trec_dl rankr1/rankr1_zeroshot dl19 smollm2-135m
  # judges that do not read, no LLM (seconds): always label k; the band a position-only policy scores in
  for k in 1 2 3 4 5; do
    RUN_NAME=rankr1/constant_judge/answer${k}_dl19 run evaluate rankr1/constant_judge smollm2-135m benchmark=dl19 "task.answer=$k"
  done
  for SEED in $(seeds); do
    # the paper's Setwise SFT baseline: gold labels of DL20's judged pools (CPU deviation: not MS MARCO)
    run train rankr1/setwise_sft_dl19 smollm2-135m trainer.resume=true
    # format warm start (labelled CPU deviation), then GRPO from it; each stage is evaluated on DL19
    pipeline rankr1/warmstart_grpo_dl19 smollm2-135m
  done
  if [[ -n "${CONTROL:-}" ]]; then control_rows; fi
}

control_rows() {  # CONTROL=1: the positive control (#41; README "Positive control"), ~3 h a seed on one core
  local c=query_echo  # the rung the supervision learned; CONTROL_CONSTRUCTION=other_queries for the next one
  c=${CONTROL_CONSTRUCTION:-$c}
  for SEED in $(seeds); do
    # supervision first: gold labels on DL20's control prompts, accuracy on DL19's held-out ones
    RUN_NAME=rankr1/control_sft_dl19/$c run train rankr1/control_sft_dl19 smollm2-135m \
      "task.construction=$c" trainer.resume=true
    # then GRPO, stage for stage as the CPU row (format warm start, GRPO)
    RUN_NAME=rankr1/control_grpo_dl19/$c pipeline rankr1/control_grpo_dl19 smollm2-135m "task.construction=$c"
    # then GRPO with a budget (100 steps x 4 prompts, ~60 min each): the two preregistered learning rates
    for exp in control_grpo_budget_dl19 control_grpo_budget_lr1e-6_dl19; do
      RUN_NAME=rankr1/$exp/$c pipeline "rankr1/$exp" smollm2-135m "task.construction=$c"
    done
    # ... and the third arm, at lr 3e-6 (preregistered after the 1e-6 arm's +0.093)
    RUN_NAME=rankr1/control_grpo_budget_lr3e-6_dl19/$c pipeline rankr1/control_grpo_budget_dl19 smollm2-135m \
      "task.construction=$c" schedule.control_grpo_lr=3.0e-6 "experiment_name=rankr1/control_grpo_budget_lr3e-6_dl19/$c"
  done
}

have_bright() { [[ -n "${DRY_RUN:-}" ]] || compgen -G "$DATA/bright/documents/*.parquet" >/dev/null; }
BRIGHT_TASKS=$(cd conf/benchmark && ls bright-*.yaml | sed 's/\.yaml$//')

data_step() {  # data_step: at profile=paper, fetch what the paper rows read beyond `make data`'s: MS MARCO's
  # training set (Tevatron/msmarco-passage, ~1.7 GB: the GRPO and SFT prompts) and BRIGHT's documents; then check
  local sources=(msmarco) files=(msmarco/train.jsonl.gz) b task
  for b in $BRIGHT_TASKS; do
    task=${b#bright-}
    sources+=("$b-documents") files+=("bright/documents/${task//-/_}-00000-of-00001.parquet")
  done
  fetch_data "${sources[@]}" -- "${files[@]}"
}

bright_rows() {  # bright_rows <experiment> <model> [overrides...]: one run per BRIGHT task, in a sweep's folders
  local exp=$1 m=$2 task points=() listed dirs i=0; shift 2
  for task in $BRIGHT_TASKS; do points+=("benchmark=$task"); done
  listed=$(sweep_folder "$exp" "$m" "${points[@]}") || exit  # one question for the twelve folders
  mapfile -t dirs <<< "$listed"
  for task in $BRIGHT_TASKS; do
    RUN_DIR=${dirs[i++]} run evaluate "$exp" "$m" "benchmark=$task" "$@"
  done
}

paper_rows() {  # paper_rows <model>: Table 1's rows of one model, then its BRIGHT rows (Table 2)
  local m=$1 grpo sft
  trec_dl rankr1/setwise dl19 "$m"
  trec_dl rankr1/setwise dl20 "$m"
  trec_dl rankr1/rankr1_zeroshot dl19 "$m"
  trec_dl rankr1/rankr1_zeroshot dl20 "$m"
  for SEED in $(seeds); do
    # GRPO on MS MARCO (smoke: DL20's judged pools), evaluated on DL19; the same policy is then read on DL20
    RUN_NAME=rankr1/rankr1_grpo_dl19 run train rankr1/rankr1_grpo "$m" benchmark=dl19 trainer.resume=true
    trec_dl rankr1/rankr1_grpo dl20 "$m" "init_from=$(run_folder rankr1/rankr1_grpo_dl19 "$m")"
    # the Setwise SFT baseline as train_sft.py runs it (one epoch of MS MARCO's gold labels), DL19, then DL20
    run train rankr1/setwise_sft_dl19 "$m" trainer.resume=true
    RUN_NAME=rankr1/setwise_sft_dl20 run evaluate rankr1/setwise_sft_dl19 "$m" benchmark=dl20 \
      "init_from=$(run_folder rankr1/setwise_sft_dl19 "$m")"
  done
  SEED=0  # BRIGHT reads seed 0's policies
  grpo="init_from=$(run_folder rankr1/rankr1_grpo_dl19 "$m")"
  sft="init_from=$(run_folder rankr1/setwise_sft_dl19 "$m")"
  if ! have_bright; then
    echo "== BRIGHT rows ($m) skipped: no documents under $DATA/bright/documents" \
         "(python -m rankrl.data.prepare --data-dir $DATA --only bright)"
    return
  fi
  bright_rows rankr1/setwise_bright "$m"
  bright_rows rankr1/rankr1_zeroshot_bright "$m"
  bright_rows rankr1/setwise_sft_bright "$m" "$sft"      # the SFT policy above, out of domain
  bright_rows rankr1/rankr1_grpo_bright "$m" "$grpo"     # the GRPO policy above, out of domain
}

case $PROFILE in
  cpu) cpu_rows ;;
  *)
    # Table 1's paper models; the smoke builds one (the three differ only in size and a tied head)
    [[ $PROFILE == paper ]] && MODELS=${MODELS:-qwen2.5-3b qwen2.5-7b qwen2.5-14b} || MODELS=${MODELS:-qwen2.5-3b}
    first=${MODELS%% *}
    if [[ $PROFILE == paper ]]; then data_step; fi
    fetch_weights $(printf 'model/%s ' $MODELS)
    trec_dl rankr1/bm25 dl19 "$first"
    trec_dl rankr1/bm25 dl20 "$first"
    have_bright && bright_rows rankr1/bm25_bright "$first"
    for m in $MODELS; do paper_rows "$m"; done ;;
esac
report rankr1
if [[ -z "${DRY_RUN:-}" ]]; then echo "== reproduce-rankr1 ($PROFILE) finished in $((SECONDS / 60)) min"; fi
