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
# The gcloud flags every script passes: the zone, and the project where one is set. (An
# empty array expanded under `set -u` is an error in bash < 4.4, macOS's bash 3.2.)
GCLOUD_FLAGS=(--zone "$ZONE")
if [[ -n "${PROJECT:-}" ]]; then GCLOUD_FLAGS+=(--project "$PROJECT"); fi

# Runs a command on every worker of the TPU VM (one worker on a v4-8).
on_tpu() {
  gcloud compute tpus tpu-vm ssh "$TPU_NAME" "${GCLOUD_FLAGS[@]}" --worker=all --command "$1"
}

# Copies a file or folder from worker 0 of the TPU VM (under ~) to a local path.
from_tpu() {
  gcloud compute tpus tpu-vm scp --recurse "$TPU_NAME:$1" "$2" "${GCLOUD_FLAGS[@]}" --worker=0
}

# The arguments, each quoted for the remote shell (nothing at all for none).
quote_args() {
  if (($#)); then printf '%q ' "$@"; fi
}
