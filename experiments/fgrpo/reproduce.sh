#!/usr/bin/env bash
# F-GRPO: every row of its tables that the profile runs, then the tables, figures and relative gains.
#   make reproduce-fgrpo                 PROFILE=cpu: SmolLM2-135M, every CPU-runnable row (experiments/fgrpo/README.md)
#   make reproduce-fgrpo PROFILE=paper   the four benchmarks for Qwen3-4B and Qwen3.5-2B (MODELS="..." chooses),
#                                        the lambda and n sweeps for the first model; first fetches the full
#                                        MuSiQue and HotpotQA releases and Last.fm's tag times (data_step)
#   make smoke-fgrpo                     PROFILE=smoke: the paper rows of MovieLens on the CPU, a tiny
#                                        Qwen3-shaped model (BENCHMARKS="..." for more)
# Run folders, seeds (SEEDS=3), skipping, resuming, FORCE, DRY_RUN, OVERRIDES, NPROC: experiments/lib.sh. REPORT_DIR moves the
# tables and figures (default experiments/fgrpo/; smoke: beside its runs).
cd "$(dirname "$0")/../.."
source experiments/lib.sh

case $PROFILE in
  cpu) MODELS=${MODELS:-smollm2-135m}; BENCHMARKS=movielens
       ZERO_SHOT=${BENCHMARKS_ZERO_SHOT:-movielens lastfm hotpotqa musique}; LAMS=0.5,2; SIZES=5,15 ;;
  # the paper's two models; lambda = 1 and n = 10 are the main rows, so the sweeps add the other values
  paper) MODELS=${MODELS:-qwen3-4b qwen3.5-2b}; BENCHMARKS=${BENCHMARKS:-movielens lastfm hotpotqa musique}
         ZERO_SHOT=$BENCHMARKS; LAMS=0.5,2; SIZES=5,15 ;;
  # Qwen3.5-2B's hybrid architecture is not among rankrl.models.PAPER_CONFIGS: the smoke builds Qwen3-4B's
  # one sweep point (the n sweep runs the same stage with another task option): the smoke stays within CI's budget
  smoke) MODELS=${MODELS:-qwen3-4b}; BENCHMARKS=${BENCHMARKS:-movielens}; ZERO_SHOT=$BENCHMARKS; LAMS=0.5; SIZES= ;;
esac

config_of() {  # config_of <b>: the conf/benchmark file whose `short:` is <b> (movielens -> movielens-100k)
  local found; found=$(grep -lE "^short: $1( |$)" conf/benchmark/*.yaml) || {
    echo "no conf/benchmark/*.yaml has short: $1" >&2; return 1; }
  basename "$found" .yaml
}

row() {  # row <evaluate|pipeline> <method> <b> <model> [overrides...]: experiment fgrpo/<method> (one file
  # per method, the benchmark an override) on benchmark <b> (its short name), in its run folder fgrpo/<method>_<b>
  local entry=$1 method=$2 b=$3 m=$4 config; shift 4
  config=$(config_of "$b")
  if [[ $entry == pipeline ]]; then
    RUN_NAME="fgrpo/${method}_$b" pipeline "fgrpo/$method" "$m" "benchmark=$config" "$@"
  else
    RUN_NAME="fgrpo/${method}_$b" run "$entry" "fgrpo/$method" "$m" "benchmark=$config" "$@"
  fi
}

sweep() {  # sweep <model> <name> <key> <prefix> <values>: GRPO runs from the MovieLens F-GRPO pipeline's SFT
  local m=$1 name=$2 key=$3 prefix=$4 values=$5 v todo=()
  local root init
  root=$(runs_root "fgrpo/$name" "$m")
  init="init_from=$(SEED=0 run_folder fgrpo/fgrpo_movielens "$m" sft)"
  for v in ${values//,/ }; do  # each point in the subfolder hydra.sweep.subdir names below
    decide "$root/$prefix$v" "profile=$PROFILE" "model=$m" "$init"
    [[ $VERDICT == done ]] || todo+=("$v")
  done
  if [[ ${#todo[@]} -eq 0 ]]; then echo "== fgrpo/$name ($m): done"; return; fi
  local joined; joined=$(IFS=,; echo "${todo[*]}")
  local cmd; read -r -a cmd <<< "$(launcher train sweep)"
  cmd+=(-m experiment=fgrpo/fgrpo "profile=$PROFILE" "model=$m" "benchmark=$(config_of movielens)"
        "$key=$joined" "$init" trainer.resume=true
        "experiment_name=fgrpo/$name/$prefix\${$key}" "hydra.sweep.dir=$root" "hydra.sweep.subdir=$prefix\${$key}"
        "${EXTRA[@]}")
  if [[ -n "${DRY_RUN:-}" ]]; then echo "${cmd[*]}"; return; fi
  echo "== [$((SECONDS / 60)) min] fgrpo/$name ($m): $key=$joined (multirun)"
  "${cmd[@]}"
}

data_step() {  # data_step: at profile=paper, fetch the data the paper rows read beyond `make data`'s (the full
  # MuSiQue and HotpotQA releases, Last.fm's tag times: conf/benchmark/<name>.yaml paper_options), then check it
  local sources=() files=() b
  for b in $ZERO_SHOT; do
    case $b in
      musique) sources+=(musique-full); files+=(musique/musique_ans_v1.0_{train,dev}.jsonl) ;;
      hotpotqa) sources+=(hotpotqa-full); files+=(hotpotqa/hotpot_{train_v1.1,dev_distractor_v1}.json) ;;
      lastfm) sources+=(lastfm-tags); files+=(lastfm-hetrec2011/user_taggedartists-timestamps.dat) ;;
    esac
  done
  fetch_data "${sources[@]}" -- "${files[@]}"
}

if [[ $PROFILE == paper ]]; then data_step; fi
fetch_weights $(printf 'model/%s ' $MODELS)
first=${MODELS%% *}
# Most popular first, no LLM (recommendation benchmarks only; seconds): what a context-free signal reaches on
# the very pools every row ranks
for b in $ZERO_SHOT; do
  if [[ $b == movielens || $b == lastfm ]]; then row evaluate popularity "$b" "$first"; fi
done
for m in $MODELS; do
  # the paper's GRPO lr for Qwen3.5-2B on the QA benchmarks is 2e-6 (5e-6 elsewhere): schedule.grpo_lr
  # reaches the GRPO stages only (trainer.lr would reach the SFT stage of the F-GRPO pipeline too)
  qa_lr=(); [[ $m == qwen3.5-2b ]] && qa_lr=(schedule.grpo_lr=2e-6)
  # Zero-shot rows (greedy, no training): one call, then two calls (select, then rank)
  for b in $ZERO_SHOT; do row evaluate zeroshot "$b" "$m"; done
  for b in $ZERO_SHOT; do row evaluate twostep "$b" "$m"; done
  for b in $BENCHMARKS; do
    lr=(); [[ $b == hotpotqa || $b == musique ]] && lr=("${qa_lr[@]}")
    # factorized SFT then F-GRPO; GRPO from the same SFT weights; decoupled SFT (two roles)
    for SEED in $(seeds); do
      row pipeline fgrpo "$b" "$m" "${lr[@]}"
      row pipeline grpo "$b" "$m" "${lr[@]}"
      row pipeline decoupled "$b" "$m"
    done
    SEED=0
  done
  # Sweeps on MovieLens (the paper's Fig.: lambda and the slate size n), first model only
  if [[ $m == "$first" ]]; then
    sweep "$m" sweep_lam task.lam lam "$LAMS"
    if [[ -n $SIZES ]]; then sweep "$m" sweep_n task.slate_size n "$SIZES"; fi
  fi
done
# CONTROL=1 (CPU profile): the positive control (#41; README "Positive control"), MovieLens, each rung's SFT
# ~15 min and its F-GRPO pipeline ~40 min a seed on one core. Rungs (CONTROL_CONSTRUCTIONS): marked (gold SFT
# with the paper's seeded fillers, then with fixed ones), echo (fixed fillers); each then the F-GRPO row with
# a budget from a format-only warm start; then hint's supervision (for SEEDS) and its F-GRPO arms (~35-60 min
# a run; each arm over the seeds its preregistration named). CONTROL_CONSTRUCTIONS=popularity for another rung
control_rows() {  # control_rows <model>
  local m=$1 c target targets
  for SEED in $(seeds); do
    for c in ${CONTROL_CONSTRUCTIONS:-marked echo}; do
      targets=gold_fixed; [[ $c == marked ]] && targets="gold gold_fixed"
      for target in $targets; do
        RUN_NAME=fgrpo/control_sft/$c/$target run train fgrpo/control_sft "$m" "task.construction=$c" \
          "task.sft_target=$target" trainer.resume=true
      done
      RUN_NAME=fgrpo/control_grpo/$c pipeline fgrpo/control_grpo "$m" "task.construction=$c"
    done
    # the echo rung's supervision over all 943 training users, one epoch (~50 min on one core)
    RUN_NAME=fgrpo/control_sft/echo/gold_fixed_all_users run train fgrpo/control_sft "$m" task.construction=echo \
      task.sft_target=gold_fixed task.train_queries=null trainer.epochs=1 \
      experiment_name=fgrpo/control_sft/echo/gold_fixed_all_users trainer.resume=true
    # ... and over pools of 5 candidates (Rank-R1's size)
    RUN_NAME=fgrpo/control_sft/echo/gold_fixed_pool5 run train fgrpo/control_sft "$m" task.construction=echo \
      task.sft_target=gold_fixed task.num_candidates=5 experiment_name=fgrpo/control_sft/echo/gold_fixed_pool5 \
      trainer.resume=true
    RUN_NAME=fgrpo/control_grpo/echo_pool5 pipeline fgrpo/control_grpo "$m" task.construction=echo \
      task.num_candidates=5 experiment_name=fgrpo/control_grpo/echo_pool5
    # the hint rung, the floor: the history's last line names the gold's id; supervision (~15 min), then F-GRPO
    RUN_NAME=fgrpo/control_sft/hint/gold_fixed run train fgrpo/control_sft "$m" task.construction=hint \
      task.sft_target=gold_fixed trainer.resume=true
    RUN_NAME=fgrpo/control_grpo/hint pipeline fgrpo/control_grpo "$m" task.construction=hint
  done
  # The hint rung's F-GRPO arms, each over the seeds its preregistration named (conf/experiment/fgrpo/
  # control_grpo.yaml says why each arm and seed, in this order), whatever SEEDS says: so CONTROL=1 rebuilds
  # every committed row of them (tests/test_paper_path.py holds these lists to results/runs.csv).
  # Partial supervision (half an epoch of the hint SFT), then the weak supervision (6 steps of it, chosen on
  # training users) and its diagnosis arms, each one change from the arm it tests; then the stop arm from a
  # gold-first warm start (2 steps of the hint SFT with the gold opening the slate, chosen on training users),
  # and that arm with the paper's F1 slate reward (it does not pay a blind slate) or sampled at T=1; last, the
  # F1 arm with the format-only warm start before its gold-first steps (an experiment file of its own: one
  # more pipeline stage, run folders fgrpo/control_grpo_format_first/hint), and that arm at 128 F-GRPO steps
  local arm weak="task.construction=hint schedule.warmstart_target=gold_fixed schedule.sft_epochs=0.375"
  local lead="task.construction=hint schedule.warmstart_target=gold_first schedule.sft_epochs=0.125"
  local stop="task.delimiters_in_loss=true task.end_of_turn_in_rank=true"
  local -A arms=([hint_partial]="task.construction=hint schedule.warmstart_target=gold_fixed schedule.sft_epochs=0.5"
    [hint_weak]="$weak" [hint_weak_delimiters]="$weak task.delimiters_in_loss=true"
    [hint_weak_kl]="$weak trainer.beta=0.04" [hint_weak_stop]="$weak $stop"
    [hint_weak_g8]="$weak $stop trainer.group_size=8"  # the stop arm at the paper's G
    [hint_gold_first]="$lead $stop" [hint_gold_first_f1]="$lead $stop task.slate_reward=f1"
    [hint_gold_first_t1]="$lead $stop trainer.sampling.temperature=1.0")
  local -A arm_seeds=([hint_partial]=0 [hint_weak]=0 [hint_weak_delimiters]="0 1 2" [hint_weak_kl]=0
    [hint_weak_stop]="0 1 2 5" [hint_weak_g8]="0 2 5" [hint_gold_first]="0 2 5" [hint_gold_first_f1]="2 5 0"
    [hint_gold_first_t1]="2 5 0" [hint_format_first]="2 5 0" [hint_format_first_long]="0 2 5")
  for arm in hint_partial hint_weak hint_weak_delimiters hint_weak_kl hint_weak_stop hint_weak_g8 \
    hint_gold_first hint_gold_first_f1 hint_gold_first_t1; do
    for SEED in ${arm_seeds[$arm]}; do
      # shellcheck disable=SC2086  # the arm's overrides, a word each
      RUN_NAME=fgrpo/control_grpo/$arm pipeline fgrpo/control_grpo "$m" ${arms[$arm]} \
        "experiment_name=fgrpo/control_grpo/$arm"
    done
  done
  for SEED in ${arm_seeds[hint_format_first]}; do
    # shellcheck disable=SC2086  # the F1 arm's overrides, a word each
    RUN_NAME=fgrpo/control_grpo_format_first/hint pipeline fgrpo/control_grpo_format_first "$m" \
      ${arms[hint_gold_first_f1]}
  done
  # the long arm: the format-first arm with its F-GRPO stage at 128 steps (the committed runs reused the
  # format-first arm's format and warmstart stages; rerun here, they give the same weights)
  for SEED in ${arm_seeds[hint_format_first_long]}; do
    # shellcheck disable=SC2086  # the F1 arm's overrides, a word each
    RUN_NAME=fgrpo/control_grpo_format_first/hint_long pipeline fgrpo/control_grpo_format_first "$m" \
      ${arms[hint_gold_first_f1]} trainer.max_steps=128 experiment_name=fgrpo/control_grpo_format_first/hint_long
  done
  SEED=0
}
if [[ -n "${CONTROL:-}" && $PROFILE == cpu ]]; then control_rows "$first"; fi
# Tables (the relative gains and paired tests among them) and figures
if [[ -n "${REPORT_DIR:-}" ]]; then report fgrpo "out_dir=$REPORT_DIR"; else report fgrpo; fi
if [[ -z "${DRY_RUN:-}" ]]; then echo "== reproduce-fgrpo ($PROFILE) finished in $((SECONDS / 60)) min"; fi
