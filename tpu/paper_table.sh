#!/usr/bin/env bash
# The paper's Table 2 on the TPU VM: `python -m specjax.bench --paper-table` (the command of
# docs/paper_table.md) with T5-XXL and its T5 1.1 small, base and large drafts (beside the
# bigram, copy and copy + small drafts) on EnDe and CNN/DM at T 0 and 1, run by
# tpu/vm_paper_table.sh on the VM; its JSON, markdown and plot are copied back to results/.
# PAIR=t5_1_1 (default), t5_1_0 or flan picks the models (see vm_paper_table.sh), and
# NUM_EXAMPLES, PAPER_GAMMAS and ROUNDS are passed on to it.
set -euo pipefail
source "$(dirname "$0")/env.sh"
NUM_EXAMPLES="${NUM_EXAMPLES:-64}"
PAIR="${PAIR:-t5_1_1}"
PAPER_GAMMAS="${PAPER_GAMMAS:-3,5,7}"
ROUNDS="${ROUNDS:-1}"
on_tpu "cd ~/$REMOTE_DIR && NUM_EXAMPLES=$(quote_args "$NUM_EXAMPLES") \
PAIR=$(quote_args "$PAIR") PAPER_GAMMAS=$(quote_args "$PAPER_GAMMAS") \
ROUNDS=$(quote_args "$ROUNDS") bash tpu/vm_paper_table.sh"
mkdir -p results
for ext in json md png; do
  # shellcheck disable=SC2088  # the ~ is the VM's home, expanded there
  from_tpu "~/$REMOTE_DIR/results/paper_table.$ext" results/
done
echo "wrote results/paper_table.json, .md and .png"
