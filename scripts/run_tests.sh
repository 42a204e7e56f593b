#!/usr/bin/env bash
# The test command of README.md: the single-device suite (two pytest workers) and, beside
# it, the 8-device suite then the two-process (multi-host) one, each in its own process;
# then the real-T5X tests (which skip where t5x is not installed).
#
# Every process of the run shares one JAX compilation cache, made empty here and removed at
# the end, so a program compiled once (by one worker, or by a `python -m` subprocess) is not
# compiled again by the others. Each test file runs whole on one worker (--dist loadfile):
# its tests share the module fixtures and the programs the worker compiled for them (596 s
# against 683 s for single tests spread over the workers, one run each). The side suites
# take the share of the two cores the workers leave idle (625 s for the three against 639 s
# one after another, one run each); their output follows the single-device suite's.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=$(mktemp -d "${TMPDIR:-/tmp}/specjax-tests-jax-cache.XXXXXX")
side_log="$cache.side.log"
side=
cleanup() {
  if [ -n "$side" ]; then  # interrupted: the side suites stop too
    pkill -TERM -P "$side" 2>/dev/null || true
    kill "$side" 2>/dev/null || true
  fi
  rm -rf "$cache" "$side_log"
}
trap cleanup EXIT
export JAX_COMPILATION_CACHE_DIR="$cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0.5
(
  set -e
  if ls tests/multidevice/test_*.py >/dev/null 2>&1; then
    XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m pytest -p no:xdist \
      tests/multidevice "$@"
  fi
  # Two decode processes joined by jax.distributed on localhost (they start their own).
  python -m pytest -p no:xdist tests/multihost "$@"
) >"$side_log" 2>&1 &
side=$!
status=0
python -m pytest -n "${SPECJAX_TEST_WORKERS:-2}" --dist loadfile tests \
  --ignore=tests/multidevice \
  --ignore=tests/multihost \
  --ignore=tests/t5x "$@" || status=$?
side_status=0
wait "$side" || side_status=$?
side=
echo
echo "== tests/multidevice (8 simulated devices), then tests/multihost: run beside the above =="
cat "$side_log"
if [ "$status" -ne 0 ]; then exit "$status"; fi
if [ "$side_status" -ne 0 ]; then exit "$side_status"; fi
bash scripts/run_t5x_tests.sh "$@"
