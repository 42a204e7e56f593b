#!/usr/bin/env bash
# Runs ON the TPU VM (tpu/paper_table.sh calls it): makes the inputs, runs every cell of
# the paper's table into results/<task>_<draft>_t<temperature>.json, then merges them.
# Cells already done are skipped, so a rerun resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-$HOME/venv/bin/python}"
NUM_EXAMPLES="${NUM_EXAMPLES:-500}"
MESH_FLAGS="${MESH_FLAGS:---num-partitions 4}"
mkdir -p data results
if [[ ! -f data/ende.jsonl || ! -f data/cnndm.jsonl ]]; then
  "$PY" -m pip install -q datasets
  "$PY" - "$NUM_EXAMPLES" <<'PYEOF'
import json, sys
from datasets import load_dataset
n = int(sys.argv[1])
wmt = load_dataset('wmt14', 'de-en', split='test').select(range(n))
with open('data/ende.jsonl', 'w') as f:
  for ex in wmt:
    f.write(json.dumps({'inputs': ex['translation']['en'],
                        'targets': ex['translation']['de']}) + '\n')
cnn = load_dataset('cnn_dailymail', '3.0.0', split='test').select(range(n))
with open('data/cnndm.jsonl', 'w') as f:
  for ex in cnn:
    f.write(json.dumps({'inputs': ex['article'], 'targets': ex['highlights']}) + '\n')
PYEOF
fi
for task in ende cnndm; do
  if [[ $task == ende ]]; then
    gamma=7; prefix='translate English to German: '; extra=(--max-input-len 128)
  else
    gamma=5; prefix='summarize: '; extra=(--max-input-len 512 --truncate-inputs)
  fi
  for draft in t5_small t5_base t5_large; do
    for temperature in 0.0 1.0; do
      out="results/${task}_${draft}_t${temperature}.json"
      [[ -s "$out" ]] && continue
      # shellcheck disable=SC2086  # MESH_FLAGS is a list of flags
      "$PY" -m specjax.decode --target t5_xxl --draft "$draft" --gamma "$gamma" \
        --temperature "$temperature" --prefix "$prefix" --input "data/$task.jsonl" \
        --output "results/${task}_${draft}_t${temperature}.jsonl" --max-decode-len 128 \
        --batch-size 1 --dtype bfloat16 --param-dtype bfloat16 --json --quiet "${extra[@]}" $MESH_FLAGS \
        > "$out.tmp"
      mv "$out.tmp" "$out"
    done
  done
done
"$PY" - <<'PYEOF'
import glob, json
rows = [dict(json.load(open(p)), file=p) for p in sorted(glob.glob('results/*_t*.json'))]
json.dump(rows, open('results/paper_table.json', 'w'), indent=1)
for r in rows:
  print(f"{r['file']}: alpha {r['alpha']:.3f} speedup {r['speedup'] or 0:.2f}x")
PYEOF
