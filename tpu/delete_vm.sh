#!/usr/bin/env bash
# Deletes the TPU VM (stops the billing): bash tpu/delete_vm.sh
set -euo pipefail
source "$(dirname "$0")/env.sh"
gcloud compute tpus tpu-vm delete "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --quiet
