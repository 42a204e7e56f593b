#!/usr/bin/env bash
# The measured counterpart of docs/tpu_speed.md: times the speed plan's programs on one
# chip of the TPU VM (python -m specjax.speed) and copies the rows and summaries back to
# results/tpu_speed_measured.json. TARGET, DRAFTS and BATCH_SIZES pick the grid.
set -euo pipefail
source "$(dirname "$0")/env.sh"
args=(--target "${TARGET:-t5_xxl}" --drafts "${DRAFTS:-t5_small,t5_base,t5_large}"
  --batch-sizes "${BATCH_SIZES:-1,8,32}" --json results/tpu_speed_measured.json "$@")
on_tpu "cd ~/$REMOTE_DIR && mkdir -p results && ~/venv/bin/python -m specjax.speed \
$(quote_args "${args[@]}")"
mkdir -p results
# shellcheck disable=SC2088  # the ~ is the VM's home, expanded there
from_tpu "~/$REMOTE_DIR/results/tpu_speed_measured.json" results/
echo "wrote results/tpu_speed_measured.json"
