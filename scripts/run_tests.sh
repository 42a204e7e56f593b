#!/usr/bin/env bash
# The test command of README.md: the single-device suite, then the 8-device suite in its own process.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest tests --ignore=tests/multidevice "$@"
if ls tests/multidevice/test_*.py >/dev/null 2>&1; then
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m pytest tests/multidevice "$@"
fi
