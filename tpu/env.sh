#!/usr/bin/env bash
# Shared settings of the tpu/ scripts; override any of them in the environment.
set -euo pipefail
TPU_NAME="${TPU_NAME:-specjax-v4-8}"
ZONE="${ZONE:-us-central2-b}"                  # a zone with TPU v4
ACCELERATOR_TYPE="${ACCELERATOR_TYPE:-v4-8}"   # v4-8 = 4 chips, one host
TPU_VERSION="${TPU_VERSION:-tpu-ubuntu2204-base}"
JAX_VERSION="${JAX_VERSION:-0.10.2}"
PYTHON="${PYTHON:-python3.11}"
REMOTE_DIR="${REMOTE_DIR:-specjax}"           # the checkout on the VM, under ~
PROJECT_FLAG=()
if [[ -n "${PROJECT:-}" ]]; then PROJECT_FLAG=(--project "$PROJECT"); fi

# Runs a command on every worker of the TPU VM (one worker on a v4-8).
on_tpu() {
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone "$ZONE" "${PROJECT_FLAG[@]}" \
    --worker=all --command "$1"
}
