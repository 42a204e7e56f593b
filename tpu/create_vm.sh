#!/usr/bin/env bash
# Creates the TPU VM (default: one v4-8, 4 chips): bash tpu/create_vm.sh
set -euo pipefail
source "$(dirname "$0")/env.sh"
gcloud compute tpus tpu-vm create "$TPU_NAME" "${GCLOUD_FLAGS[@]}" \
  --accelerator-type "$ACCELERATOR_TYPE" --version "$TPU_VERSION"
gcloud compute tpus tpu-vm describe "$TPU_NAME" "${GCLOUD_FLAGS[@]}" \
  --format='value(state,acceleratorType)'
