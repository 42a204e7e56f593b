#!/usr/bin/env bash
# The tests of specjax inside real T5X (tests/t5x), then their 8-simulated-device part in its
# own process. They need t5x and seqio (README: Inside T5X; CI builds such an environment,
# .ci/run). Without them this script says so and stops; SPECJAX_REQUIRE_T5X=1 (CI) runs the
# tests anyway, so a missing t5x fails them.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SPECJAX_REQUIRE_T5X:-}" ] && ! python -c 'import seqio, t5x.models' >/dev/null 2>&1
then
  echo "tests/t5x not run: t5x is not installed in this environment (README: Inside T5X)"
  exit 0
fi
python -m pytest tests/t5x --ignore=tests/t5x/multidevice "$@"
XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m pytest tests/t5x/multidevice "$@"
