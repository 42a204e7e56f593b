#!/usr/bin/env bash
# The paper's table on the TPU VM: tasks (EnDe, CNN/DM) x drafts (T5-small, base, large)
# x temperatures (0, 1), target T5-XXL, one JSON summary per run, merged into
# results/paper_table.json and copied back here.
set -euo pipefail
source "$(dirname "$0")/env.sh"
NUM_EXAMPLES="${NUM_EXAMPLES:-500}"
MESH_FLAGS="${MESH_FLAGS:---num-partitions 4}"   # a v4-8; "" for one chip
on_tpu "cd ~/$REMOTE_DIR && NUM_EXAMPLES=$NUM_EXAMPLES MESH_FLAGS='$MESH_FLAGS' \
  bash tpu/vm_paper_table.sh"
mkdir -p results
gcloud compute tpus tpu-vm scp "$TPU_NAME:~/$REMOTE_DIR/results/*.json" results/ \
  --zone "$ZONE" "${PROJECT_FLAG[@]}" --worker=0
echo "wrote results/paper_table.json"
