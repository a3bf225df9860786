#!/usr/bin/env bash
# GRAPE: every row of its tables that the profile runs, then the tables (and, at CPU scale, the CPU Fig. 5).
#   make reproduce-grape                 PROFILE=cpu: the text stand-in (no images or CLIP weights here): DL19
#                                        queries rewritten to retrieve their passages from the 9,658-passage DL
#                                        corpus with a frozen MiniLM, the SmolLM2-135M rewriter trained on DL20's
#   make reproduce-grape PROFILE=paper   the main table (CLIP ViT-B/16, five benchmarks) and the retriever sizes
#                                        (ViT-B/32, ViT-L/14) for the Qwen2.5-3B rewriter (MODELS="..." chooses),
#                                        CIRR's reference captions first (BLIP-2; CAPTIONER="..." chooses), and
#                                        Fig. 5 from the Flickr30k-CN runs (figures.yaml, grape_fig5_paper)
# Run folders, seeds (SEEDS=N), skipping, resuming, FORCE, DRY_RUN, OVERRIDES, NPROC: experiments/lib.sh. MODELS picks the
# rewriter (tests use tiny); REPORT_OUT writes the tables and figures there instead of experiments/grape/.
#   make smoke-grape                     PROFILE=smoke: the image rows on the CPU, a tiny Qwen2.5-shaped rewriter,
#                                        random-weight CLIPs over ten photographs (task_scale/grape_smoke.yaml)
cd "$(dirname "$0")/../.."
# five seeds by default (#41: five where a seed costs under 10 minutes): a seed after the first costs ~7.5 min,
# so five fit in the time budget (one seed 13.6 min and three 28.6 min measured from fresh clones)
SEEDS=${SEEDS:-5}
source experiments/lib.sh

cpu_rows() {  # cpu_rows <model>
  local m=$1
  run evaluate grape/cpu_raw_query "$m"
  run evaluate grape/cpu_zeroshot_rewrite "$m"
  # format warm start -> GRPO (rank reward); then the similarity-reward pipeline, whose compression control
  # asks for about as many words as the rank-reward rewrites have (read from that run's metrics)
  local words  # assigned on its own line, so that a failed read stops the script (set -e)
  for SEED in $(seeds); do
    pipeline grape/cpu_grape_rank "$m"
    words=$(rewrite_words "$(run_folder grape/cpu_grape_rank "$m" grape)")
    pipeline grape/cpu_grape_sim "$m" "task.compress_words=$words"
  done
  SEED=0
  if [[ -n "${CONTROL:-}" ]]; then control_rows "$m"; fi
}

control_rows() {  # control_rows <model>; CONTROL=1: the positive control (#41; README "Positive control"),
  # ~45 min a seed on one core
  local m=$1 c
  # reference rows, no LLM: DL19 with the filler words (the floor) and clean (the ceiling)
  for c in filler paper; do
    RUN_NAME=grape/control_raw_query/$c run evaluate grape/control_raw_query "$m" "task.construction=$c"
  done
  for SEED in $(seeds); do
    run train grape/control_sft "$m" trainer.resume=true   # supervision: the clean query as the rewrite
    pipeline grape/control_grpo "$m"                        # the CPU GRPO row, with a budget
  done
  SEED=0
}

rewrite_words() {  # rewrite_words <run folder of a GRAPE rank-reward run>: its mean rewrite length, which the
  # compression control asks for
  if [[ -n "${DRY_RUN:-}" ]]; then echo "<mean rewrite_words of grape_rank>"; return; fi
  "$PY" -c "import sys; from rankrl.run_folders import read_metrics
print(max(1, round(read_metrics(sys.argv[1])['rewrite_words'])))" "$1"
}

PAPER_BENCHMARKS="flickr30k-cn cvlue xm3600 wiki-image cirr"
one() {  # one <entry> <experiment> <model> <retriever> <benchmark> [overrides...]: a sweep point's run
  local entry=$1 exp=$2 m=$3 r=$4 b=$5; shift 5
  RUN_DIR=$(sweep_folder "$exp/$r" "$m" "benchmark=$b") run "$entry" "$exp" "$m" "retriever=$r" "benchmark=$b" "$@"
}

# CIRR's reference photos enter the text rewriter's prompt as captions written once by an open image-to-text
# model (rankrl/data/images_captions.py; an existing data/cirr/reference_captions.json is kept)
CAPTIONER=${CAPTIONER:-Salesforce/blip2-opt-2.7b}
cirr_captions() {
  local cmd=("$PY" -m rankrl.data.images_captions --data-dir "$DATA" --model "$CAPTIONER")
  if [[ -n "${DRY_RUN:-}" ]]; then echo "${cmd[*]}"; return; fi
  "${cmd[@]}"
}

paper_rows() {  # paper_rows <model>: the main table (ViT-B/16), then the retriever sizes, one benchmark at a time
  local m=$1 r b words
  for b in $BENCHMARKS; do
    if [[ $b == cirr ]]; then cirr_captions; fi
    one evaluate grape/raw_query "$m" clip-vit-b16 "$b"
    one evaluate grape/zeroshot_rewrite "$m" clip-vit-b16 "$b"
    one train grape/grape_rank "$m" clip-vit-b16 "$b" trainer.resume=true
    one train grape/grape_sim "$m" clip-vit-b16 "$b" trainer.resume=true
    words=$(rewrite_words "$(sweep_folder grape/grape_rank/clip-vit-b16 "$m" "benchmark=$b")")
    one evaluate grape/compress_rewrite "$m" clip-vit-b16 "$b" "task.compress_words=$words"
    for r in $SIZES; do
      one evaluate grape/raw_query "$m" "$r" "$b"
      one evaluate grape/zeroshot_rewrite "$m" "$r" "$b"
      one train grape/grape_rank "$m" "$r" "$b" trainer.resume=true
    done
  done
}

case $PROFILE in
  cpu) cpu_rows "${MODELS:-smollm2-135m}" ;;
  paper) BENCHMARKS=${BENCHMARKS:-$PAPER_BENCHMARKS}; SIZES=${SIZES:-clip-vit-b32 clip-vit-l14}
         fetch_weights $(printf 'model/%s ' ${MODELS:-qwen2.5-3b}) retriever/clip-vit-b16 \
           $(printf 'retriever/%s ' $SIZES) "hub/$CAPTIONER"
         for m in ${MODELS:-qwen2.5-3b}; do paper_rows "$m"; done ;;
  # ten photographs in Flickr30k-CN's layout and a random-weight CLIP stand in for the images and weights the
  # build machines lack (task_scale/grape_smoke.yaml); one benchmark; the retriever-size rows repeat the same
  # stages with another CLIP (SIZES="clip-vit-b32 clip-vit-l14" adds them: +5 min)
  smoke) BENCHMARKS=${BENCHMARKS:-flickr30k-cn}; SIZES=${SIZES:-}
         if [[ -z "${DRY_RUN:-}" ]]; then "$PY" -m rankrl.data.smoke --out "${RANKRL_CACHE_DIR:-.cache}/smoke_data"; fi
         for m in ${MODELS:-qwen2.5-3b}; do paper_rows "$m"; done ;;
esac
if [[ -n "${REPORT_OUT:-}" ]]; then report grape "out_dir=$REPORT_OUT"; else report grape; fi
if [[ -z "${DRY_RUN:-}" ]]; then echo "== reproduce-grape ($PROFILE) finished in $((SECONDS / 60)) min"; fi
