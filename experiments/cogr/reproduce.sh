#!/usr/bin/env bash
# CoGR: every row of its tables that the profile runs, then the tables and figures.
#   make reproduce-cogr                  PROFILE=cpu: SmolLM2-135M over dl-pools-cpu; ABLATIONS=1
#                                        adds the shared-generator and no-SFT pipelines (~1.4x the time again)
#   make reproduce-cogr PROFILE=paper    WANDS for Qwen3-4B-Instruct and Qwen3-1.7B (MODELS="..." chooses), with
#                                        the ablations and the Qwen3-Embedding-4B and SPLADE-v2 baselines;
#                                        fetches WANDS's products and labels first
#   make smoke-cogr                      PROFILE=smoke: the paper's pipelines on the CPU, a tiny Qwen3-shaped model,
#                                        over dl-pools-cpu (WANDS's products are not on the build machines)
# Run folders, seeds (SEEDS=3), skipping, resuming, FORCE, DRY_RUN, OVERRIDES, NPROC: experiments/lib.sh.
cd "$(dirname "$0")/../.."
source experiments/lib.sh

# the catalog: its benchmark config and its name in run folders (the config's `short`)
case $PROFILE in
  cpu) MODELS=${MODELS:-smollm2-135m}; CATALOG=dl-pools-cpu ;;
  paper) MODELS=${MODELS:-qwen3-4b-instruct qwen3-1.7b}; CATALOG=wands; ABLATIONS=${ABLATIONS:-1} ;;
  smoke) MODELS=${MODELS:-qwen3-4b-instruct}; CATALOG=dl-pools-cpu ;;
esac
declare -A SHORT=([dl-pools-cpu]=dlpools [wands]=wands)

have_wands() { [[ -n "${DRY_RUN:-}" ]] || [[ -f "$DATA/wands/product.csv" && -f "$DATA/wands/label.csv" ]]; }
if [[ $CATALOG == wands ]]; then
  # the paper's catalog: WANDS's products and labels (not in `make data`'s shared copy) are fetched first
  fetch_data wands -- wands/product.csv wands/label.csv
fi
fetch_weights $(printf 'model/%s ' $MODELS) retriever/qwen3-embedding-4b retriever/splade-v2

row() {  # row <entry point> <method> <catalog> <model> [overrides...]: cogr/<method> on that catalog
  local entry=$1 method=$2 c=$3 m=$4; shift 4
  # shellcheck disable=SC2086  # $entry is "run evaluate" or "pipeline": word-split on purpose
  RUN_NAME="cogr/${method}_${SHORT[$c]}" $entry "cogr/$method" "$m" "benchmark=$c" "$@"
}

rows() {  # rows <catalog> <model>: the cutoff baselines, CoGR (base, SFT, rounds), CoGR*, the ablations
  local c=$1 m=$2
  row "run evaluate" bm25_cutoff "$c" "$m"
  row "run evaluate" dense_cutoff "$c" "$m"
  if [[ $PROFILE == paper ]]; then
    # the paper's baseline classes on a GPU: a 4B dense encoder (Qwen3-Embedding-4B for ANCE-Qwen4B) and
    # SPLADE-v2 through pyserini; corpus vectors and the impact index are cached, so a second model reuses them
    row "run evaluate" dense4b_cutoff "$c" "$m"
    row "run evaluate" splade_cutoff "$c" "$m"
  fi
  local query item
  for SEED in $(seeds); do
    row pipeline cogr "$c" "$m"
    # CoGR*: query-side rounds only, over the item index of CoGR's own SFT stage (of the same seed)
    query=$(run_folder "cogr/cogr_${SHORT[$c]}" "$m" sft_query)
    item=$(run_folder "cogr/cogr_${SHORT[$c]}" "$m" sft_item)
    row pipeline cogr_star "$c" "$m" "roles.query.init_from=$query" "roles.item.init_from=$item"
    if [[ "${ABLATIONS:-0}" == 1 ]]; then
      row pipeline cogr_shared "$c" "$m"
      row pipeline cogr_nosft "$c" "$m"
    fi
  done
  SEED=0
}

for m in $MODELS; do rows "$CATALOG" "$m"; done
# CPU: the WANDS baselines too, when its files are present
if [[ $PROFILE == cpu ]]; then
  if have_wands; then
    row "run evaluate" bm25_cutoff wands smollm2-135m
    row "run evaluate" dense_cutoff wands smollm2-135m
  else
    echo "== WANDS rows skipped: $DATA/wands/product.csv or label.csv missing (python -m rankrl.data.prepare --only wands)"
  fi
fi
# CONTROL=1 (CPU profile): the positive control (#41; README "Positive control"), on the 40-query cut of
# dl-pools-cpu that its experiment files pin, ~15 min a seed on one core: query-side SFT against the fixed echo
# index, then a query stage with a budget from a format-only warm start
control_rows() {  # control_rows <model>
  local m=$1
  for SEED in $(seeds); do
    run train cogr/control_sft "$m" trainer.resume=true
    pipeline cogr/control_grpo "$m"
  done
  SEED=0
}
if [[ -n "${CONTROL:-}" && $PROFILE == cpu ]]; then control_rows "${MODELS%% *}"; fi
report cogr  # the tables, the training curves and the co-evolution figures (experiments/cogr/figures.yaml)
if [[ -z "${DRY_RUN:-}" ]]; then echo "== reproduce-cogr ($PROFILE) finished in $((SECONDS / 60)) min"; fi
