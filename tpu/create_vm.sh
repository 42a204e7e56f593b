#!/usr/bin/env bash
# Creates the TPU VM (default: one v4-8, 4 chips): bash tpu/create_vm.sh
set -euo pipefail
source "$(dirname "$0")/env.sh"
gcloud compute tpus tpu-vm create "$TPU_NAME" --zone "$ZONE" "${PROJECT_FLAG[@]}" \
  --accelerator-type "$ACCELERATOR_TYPE" --version "$TPU_VERSION"
gcloud compute tpus tpu-vm describe "$TPU_NAME" --zone "$ZONE" "${PROJECT_FLAG[@]}" \
  --format='value(state,acceleratorType)'
