#!/usr/bin/env bash
# The pod variant: a multi-host v4 slice (default v4-32: 16 chips, 4 hosts). Creates it,
# installs on every worker, and runs the decode on all workers at once (--worker=all);
# each process calls jax.distributed.initialize() (--multihost) and host 0 writes.
set -euo pipefail
export TPU_NAME="${TPU_NAME:-specjax-v4-32}"
export ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-32}"
here="$(dirname "$0")"
source "$here/env.sh"
if ! gcloud compute tpus tpu-vm describe "$TPU_NAME" --zone "$ZONE" "${PROJECT_FLAG[@]}" \
    >/dev/null 2>&1; then
  bash "$here/create_vm.sh"
fi
bash "$here/setup.sh"
# 8-way model parallel x 2-way data parallel: the batch must be a multiple of 2.
bash "$here/decode.sh" --multihost --num-partitions "${NUM_PARTITIONS:-8}" \
  --batch-size "${BATCH_SIZE:-8}" --target t5_xxl --draft t5_small --gamma 7 \
  --dtype bfloat16 --param-dtype bfloat16 "$@"
