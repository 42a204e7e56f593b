#!/usr/bin/env bash
# Copies this checkout to every worker and installs specjax with jax[tpu] in ~/venv.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$(dirname "$0")/.."
archive="$(mktemp -d)/specjax.tar.gz"
git ls-files -z | tar --null -czf "$archive" -T -   # tracked files only, no .venv
gcloud compute tpus tpu-vm scp "$archive" "$TPU_NAME:~/specjax.tar.gz" "${GCLOUD_FLAGS[@]}" --worker=all
on_tpu "set -euo pipefail
  sudo apt-get update -qq && sudo apt-get install -y -qq $PYTHON ${PYTHON}-venv
  mkdir -p ~/$REMOTE_DIR && tar -xzf ~/specjax.tar.gz -C ~/$REMOTE_DIR
  $PYTHON -m venv ~/venv && ~/venv/bin/pip install -q -U pip
  ~/venv/bin/pip install -q 'jax[tpu]==$JAX_VERSION' -e ~/$REMOTE_DIR
  ~/venv/bin/python -c 'import jax; print(jax.process_index(), jax.devices())'"
