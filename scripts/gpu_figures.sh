#!/usr/bin/env bash
# Speed figures measured on a GPU, in one run: at T5-XXL shapes and on the bundled pairs.
#
#   bash scripts/gpu_figures.sh OUT_DIR [SECONDS]
#
# Runs from the repository root (specjax is imported from it; jax with CUDA, flax, optax,
# orbax, sentencepiece and matplotlib must be installed) and stops starting steps when
# SECONDS (default 500) are spent; each step is capped so that the rest still get a turn.
# In order:
#   speed_small_b1  python -m specjax.speed: c, v(K), the loop's share at T5-XXL shapes
#                   (t5_xxl + t5_small, B 1, S 128, L 128, random bfloat16 weights)
#   bench_demo      python -m specjax.bench on the bundled EnDe pair (gammas 2 and 4)
#   bench_manlm     the same on the decoder-only pair (gamma 4, 32 test lines)
#   bench_manpages  the same on the man-page summary pair (gamma 4, 32 test lines)
#   speed_large_b1  as speed_small_b1 with t5_large
#   speed_small_b8  as speed_small_b1 at B 8
# Each step writes OUT_DIR/NAME.log and its JSON (the benches' Markdown too; a step cut off
# by its cap writes only what it had finished: the speed steps, each mode); machine.txt names
# the GPU, its driver and the versions, which a report of the figures gives beside them.
set -uo pipefail
out=${1:?usage: bash scripts/gpu_figures.sh OUT_DIR [SECONDS]}
budget=${2:-500}
py=${PYTHON:-python3}
end=$((SECONDS + budget))
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

step() {  # step NAME MOST_SECONDS COMMAND...: runs COMMAND for at most MOST_SECONDS
  local name=$1 most=$2 left=$((end - SECONDS))
  shift 2
  ((left < most)) && most=$left
  if ((most < 30)); then
    echo "== $name: skipped, ${left} s left"
    return
  fi
  echo "== $name: at most ${most} s"
  local start=$SECONDS
  timeout "$most" "$@" >"$out/$name.log" 2>&1
  echo "== $name: exit $? after $((SECONDS - start)) s"
  tail -n 6 "$out/$name.log" | tr '\r' '\n' | tail -n 6
}

{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  lscpu | grep -E '^(Model name|CPU\(s\))'
  "$py" -c 'import sys, jax, flax; print("python", sys.version.split()[0], "jax", jax.__version__,
"flax", flax.__version__, jax.devices())'
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

speed=("$py" -m specjax.speed --target t5_xxl --input-len 128 --max-decode-len 128 --rounds 10)
step speed_small_b1 170 "${speed[@]}" --drafts t5_small --batch-sizes 1 \
  --json "$out/speed_small_b1.json"
step bench_demo 150 "$py" -m specjax.bench --gammas 2,4 --json "$out/bench_demo.json" \
  --markdown "$out/bench_demo.md"
for pair in manlm manpages; do
  step "bench_$pair" 90 "$py" -m specjax.bench --target "${pair}_target" \
    --draft "${pair}_draft" --gammas 4 --num-examples 32 --json "$out/bench_$pair.json" \
    --markdown "$out/bench_$pair.md"
done
step speed_large_b1 120 "${speed[@]}" --drafts t5_large --batch-sizes 1 \
  --json "$out/speed_large_b1.json"
step speed_small_b8 120 "${speed[@]}" --drafts t5_small --batch-sizes 8 \
  --json "$out/speed_small_b8.json"
echo "== done after ${SECONDS} s"
