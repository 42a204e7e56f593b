#!/usr/bin/env bash
# The test command of README.md: the single-device suite (two pytest workers), then the
# 8-device suite in its own processes, the two-process (multi-host) one, then the real-T5X
# tests (which skip where t5x is not installed). Files that share one costly module fixture
# are kept on one worker (their xdist_group). No persistent compilation cache: XLA:CPU's
# executable serialization (jax's put_executable_and_time) crashed a worker with SIGSEGV on
# the programs of two different tests, and the cache saved under a minute of compiling.
set -euo pipefail
cd "$(dirname "$0")/.."
unset JAX_COMPILATION_CACHE_DIR
python -m pytest -n "${SPECJAX_TEST_WORKERS:-2}" --dist loadgroup tests \
  --ignore=tests/multidevice \
  --ignore=tests/multihost \
  --ignore=tests/t5x "$@"
if ls tests/multidevice/test_*.py >/dev/null 2>&1; then
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m pytest \
    -n "${SPECJAX_TEST_WORKERS:-2}" tests/multidevice "$@"
fi
# Two decode processes joined by jax.distributed on localhost (they start their own).
python -m pytest tests/multihost "$@"
bash scripts/run_t5x_tests.sh "$@"
