#!/usr/bin/env bash
# The tests of specjax inside real T5X (tests/t5x), then their 8-simulated-device part in its
# own process. They need t5x (bash ../shared/t5x/install.sh in a separate environment) and
# skip without it; SPECJAX_REQUIRE_T5X=1 (CI) turns a missing t5x into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest tests/t5x --ignore=tests/t5x/multidevice "$@"
XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m pytest tests/t5x/multidevice "$@"
