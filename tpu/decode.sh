#!/usr/bin/env bash
# Runs python -m specjax.decode on the TPU VM (every worker: on a pod, pass --multihost).
# The checkpoints default to the public T5X ones on gs://t5-data, read directly.
# Example (one v4 chip; T5 11B with a T5 small draft, both multi-task trained on EnDe):
#   bash tpu/decode.sh --target t5_1_0_11b --draft t5_1_0_small --gamma 7 \
#     --dtype bfloat16 --param-dtype bfloat16 --input data/ende.jsonl \
#     --prefix 'translate English to German: '
set -euo pipefail
source "$(dirname "$0")/env.sh"
on_tpu "cd ~/$REMOTE_DIR && ~/venv/bin/python -m specjax.decode $(quote_args "$@")"
