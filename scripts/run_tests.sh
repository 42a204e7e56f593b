#!/usr/bin/env bash
# The test command of README.md: the single-device suite, then the 8-device suite in its own
# process, then the real-T5X tests (which skip where t5x is not installed).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest tests --ignore=tests/multidevice --ignore=tests/t5x "$@"
if ls tests/multidevice/test_*.py >/dev/null 2>&1; then
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m pytest tests/multidevice "$@"
fi
bash scripts/run_t5x_tests.sh "$@"
