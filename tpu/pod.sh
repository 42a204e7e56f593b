#!/usr/bin/env bash
# The pod variant: a multi-host v4 slice (default v4-32: 16 chips, 4 hosts). Creates it,
# installs on every worker, and runs the decode on all workers at once (--worker=all);
# each process calls jax.distributed.initialize() (--multihost) and host 0 writes
# results/pod.jsonl and the summary results/pod_summary.json, copied back here.
set -euo pipefail
export TPU_NAME="${TPU_NAME:-specjax-v4-32}"
export ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-32}"
here="$(dirname "$0")"
source "$here/env.sh"
if ! gcloud compute tpus tpu-vm describe "$TPU_NAME" "${GCLOUD_FLAGS[@]}" >/dev/null 2>&1; then
  bash "$here/create_vm.sh"
fi
bash "$here/setup.sh"
# 8-way model parallel x 2-way data parallel: the batch must be a multiple of 2.
args=(--multihost --num-partitions "${NUM_PARTITIONS:-8}" --batch-size "${BATCH_SIZE:-8}"
  --target "${TARGET:-t5_1_0_11b}" --draft "${DRAFT:-t5_1_0_small}" --gamma "${GAMMA:-7}"
  --dtype bfloat16 --param-dtype bfloat16 --output results/pod.jsonl --json --quiet "$@")
on_tpu "cd ~/$REMOTE_DIR && mkdir -p results && ~/venv/bin/python -m specjax.decode \
$(quote_args "${args[@]}") > results/pod_summary.json"
mkdir -p results
# shellcheck disable=SC2088  # the ~ is the VM's home, expanded there
from_tpu "~/$REMOTE_DIR/results/pod.jsonl" results/
# shellcheck disable=SC2088
from_tpu "~/$REMOTE_DIR/results/pod_summary.json" results/
echo "wrote results/pod.jsonl and results/pod_summary.json"
