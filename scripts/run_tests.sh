#!/usr/bin/env bash
# The test command of README.md: the single-device suite (two pytest workers), then the
# 8-device suite and the two-process (multi-host) test in their own processes, then the
# real-T5X tests (which skip where t5x is not installed). Every process of the run shares one JAX
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
# The 8-simulated-device tests, and in the same pytest run the two-process (multi-host)
# test, whose two decode processes (joined by jax.distributed on localhost) set their own
# device count: it takes the worker that finishes its 8-device files first, where a run of
# its own waited for the slower one and started pytest again (93 and 98 s against 101 and
# 111 s for the two runs in turn, two runs each).
XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m pytest \
  -n "${SPECJAX_TEST_WORKERS:-2}" --dist loadfile tests/multidevice tests/multihost "$@"
bash scripts/run_t5x_tests.sh "$@"
