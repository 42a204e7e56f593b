#!/usr/bin/env bash
# Runs python -m specjax.decode on the TPU VM (every worker: on a pod, pass --multihost).
# The checkpoints default to the public T5X ones on gs://t5-data, read directly.
# Example (v4-8, 4-way model parallel):
#   bash tpu/decode.sh --target t5_xxl --draft t5_small --gamma 7 --num-partitions 4 \
#     --dtype bfloat16 --param-dtype bfloat16 --input data/ende.jsonl --prefix 'translate English to German: '
set -euo pipefail
source "$(dirname "$0")/env.sh"
args="$(printf '%q ' "$@")"
on_tpu "cd ~/$REMOTE_DIR && ~/venv/bin/python -m specjax.decode $args"
