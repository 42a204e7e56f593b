#!/usr/bin/env bash
# The test command of README.md: the single-device suite (two pytest workers), then the
# 8-device suite in its own processes, the two-process (multi-host) one, then the real-T5X
# tests (which skip where t5x is not installed). Every process of the run shares one JAX
# compilation cache, made empty here and removed at the end, so a program compiled once (by
# one worker, or by a `python -m` subprocess) is not compiled again by the others. Each test
# file runs whole on one worker (--dist loadfile): its tests share the module fixtures and
# the programs the worker compiled for them (596 s against 683 s for single tests spread
# over the workers, one run each; the 8-device suite 112-115 s against 127-134 s).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=$(mktemp -d "${TMPDIR:-/tmp}/specjax-tests-jax-cache.XXXXXX")
trap 'rm -rf "$cache"' EXIT
export JAX_COMPILATION_CACHE_DIR="$cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0.5
python -m pytest -n "${SPECJAX_TEST_WORKERS:-2}" --dist loadfile tests \
  --ignore=tests/multidevice \
  --ignore=tests/multihost \
  --ignore=tests/t5x "$@"
if ls tests/multidevice/test_*.py >/dev/null 2>&1; then
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m pytest \
    -n "${SPECJAX_TEST_WORKERS:-2}" --dist loadfile tests/multidevice "$@"
fi
# Two decode processes joined by jax.distributed on localhost (they start their own).
python -m pytest tests/multihost "$@"
bash scripts/run_t5x_tests.sh "$@"
