#!/usr/bin/env bash
# The paper's Table 2 on the TPU VM: tasks (EnDe, CNN/DM) x drafts (small, base, large)
# x temperatures (0, 1) at the paper's gamma per cell, one JSON summary per cell, merged
# into results/paper_table.json and copied back here with the cells (results/cells/).
# PAIR=t5_1_0 (default), flan or t5_1_1 picks the models (see vm_paper_table.sh).
set -euo pipefail
source "$(dirname "$0")/env.sh"
NUM_EXAMPLES="${NUM_EXAMPLES:-500}"
MESH_FLAGS="${MESH_FLAGS---num-partitions 4}"  # unset: a v4-8 4-way; "": one chip
PAIR="${PAIR:-t5_1_0}"
on_tpu "cd ~/$REMOTE_DIR && NUM_EXAMPLES=$(quote_args "$NUM_EXAMPLES") \
MESH_FLAGS=$(quote_args "$MESH_FLAGS") PAIR=$(quote_args "$PAIR") bash tpu/vm_paper_table.sh"
mkdir -p results
# shellcheck disable=SC2088  # the ~ is the VM's home, expanded there
from_tpu "~/$REMOTE_DIR/results/paper_table.json" results/
# shellcheck disable=SC2088
from_tpu "~/$REMOTE_DIR/results/cells" results/
echo "wrote results/paper_table.json"
