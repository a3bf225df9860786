#!/usr/bin/env bash
# The GPU check, part 1, as one script for a lent GPU machine that has only python3 with CUDA torch,
# transformers and peft, no network (the `device` tool's machines): the wheels come along from here
# (`make gpu-wheels`, then carry .cache/gpu-wheels), and the log names the GPU and the versions.
#   bash experiments/engine/device_check.sh [LOG]      (default LOG: $OUT/gpu_check_trainer.log, else
#                                                       experiments/engine/gpu_check_trainer.log)
# Commit the log it writes (experiments/engine/) and quote it in the issue note.
set -uo pipefail
cd "$(dirname "$0")/../.."
LOG=${1:-${OUT:+$OUT/}gpu_check_trainer.log}
[ -n "${OUT:-}" ] || LOG=${1:-experiments/engine/gpu_check_trainer.log}
PY=${GPU_PYTHON:-python3}
{
  # the device gets a copy of the working tree without .git: the caller passes COMMIT=$(git rev-parse --short HEAD)
  echo "# $(date -u +%FT%TZ) commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/# nvidia-smi: /'
  "$PY" -c "import sys, torch, transformers, peft; print('# python', sys.version.split()[0], '| torch', torch.__version__, '| transformers', transformers.__version__, '| peft', peft.__version__)"  2>/dev/null || echo "# $PY: no torch, transformers or peft"
  make gpu-check-trainer GPU_PYTHON="$PY" 2>&1 || echo "# make gpu-check-trainer exited $?"
} 2>&1 | grep -v -E "it/s\]|Warning|warn\(" | tee "$LOG"
