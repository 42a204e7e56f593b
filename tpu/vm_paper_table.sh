#!/usr/bin/env bash
# Runs ON the TPU VM (tpu/paper_table.sh calls it): makes the inputs, runs every cell of the
# paper's Table 2 (task x draft size x temperature, at the paper's gamma for that cell) into
# $RESULTS_DIR/cells/<pair>_<task>_<size>_t<temperature>_g<gamma>.json, then merges them
# into $RESULTS_DIR/paper_table.json. Cells already done are skipped, so a rerun resumes.
#
# PAIR picks the models: t5_1_0 (default: the original T5 11B with T5 small/base/large,
# multi-task trained with WMT EnDe and CNN/DM under these prefixes, so they translate and
# summarise as they are), flan (Flan-T5 XXL with Flan-T5 small/base/large), or t5_1_1 (the
# paper's T5 1.1 models: the public checkpoints are pretrained only, pass fine-tuned ones
# with TARGET_CHECKPOINT and DRAFT_CHECKPOINT_{SMALL,BASE,LARGE}).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-$HOME/venv/bin/python}"
NUM_EXAMPLES="${NUM_EXAMPLES:-500}"
MESH_FLAGS="${MESH_FLAGS---num-partitions 4}"  # unset: a v4-8 4-way; "": one chip
PAIR="${PAIR:-t5_1_0}"
DATA_DIR="${DATA_DIR:-data}"
RESULTS_DIR="${RESULTS_DIR:-results}"
case "$PAIR" in
  t5_1_0) target=t5_1_0_11b; drafts=t5_1_0_ ;;
  flan) target=flan_t5_xxl; drafts=flan_t5_ ;;
  t5_1_1) target=t5_xxl; drafts=t5_ ;;
  *) echo "error: PAIR must be t5_1_0, flan or t5_1_1, got '$PAIR'" >&2; exit 2 ;;
esac
mkdir -p "$DATA_DIR" "$RESULTS_DIR/cells"
if [[ ! -f "$DATA_DIR/ende.jsonl" || ! -f "$DATA_DIR/cnndm.jsonl" ]]; then
  "$PY" -m pip install -q 'datasets==5.2.0'
  "$PY" - "$NUM_EXAMPLES" "$DATA_DIR" <<'PYEOF'
import json, sys
from datasets import load_dataset
n, data = int(sys.argv[1]), sys.argv[2]
wmt = load_dataset('wmt/wmt14', 'de-en', split='test').select(range(n))
with open(f'{data}/ende.jsonl', 'w') as f:
  for ex in wmt:
    f.write(json.dumps({'inputs': ex['translation']['en'],
                        'targets': ex['translation']['de']}) + '\n')
cnn = load_dataset('abisee/cnn_dailymail', '3.0.0', split='test').select(range(n))
with open(f'{data}/cnndm.jsonl', 'w') as f:
  for ex in cnn:
    f.write(json.dumps({'inputs': ex['article'], 'targets': ex['highlights']}) + '\n')
PYEOF
fi
mesh=()
read -r -a mesh <<< "$MESH_FLAGS"
# Inputs past 512 tokens are cut (--truncate-inputs) rather than ending the table.
# The paper's Table 2: task, draft size, temperature, gamma.
cells=("ende small 0.0 7" "ende base 0.0 7" "ende large 0.0 7"
  "ende small 1.0 7" "ende base 1.0 5" "ende large 1.0 3"
  "cnndm small 0.0 5" "cnndm base 0.0 5" "cnndm large 0.0 3"
  "cnndm small 1.0 5" "cnndm base 1.0 3" "cnndm large 1.0 3")
for cell in "${cells[@]}"; do
  read -r task size temperature gamma <<< "$cell"
  prefix='summarize: '
  if [[ $task == ende ]]; then prefix='translate English to German: '; fi
  checkpoints=()
  if [[ -n "${TARGET_CHECKPOINT:-}" ]]; then checkpoints+=(--target-checkpoint "$TARGET_CHECKPOINT"); fi
  draft_checkpoint="DRAFT_CHECKPOINT_$(printf '%s' "$size" | tr '[:lower:]' '[:upper:]')"
  if [[ -n "${!draft_checkpoint:-}" ]]; then checkpoints+=(--draft-checkpoint "${!draft_checkpoint}"); fi
  name="${PAIR}_${task}_${size}_t${temperature}_g${gamma}"
  out="$RESULTS_DIR/cells/$name.json"
  [[ -s "$out" ]] && continue
  "$PY" -m specjax.decode --target "$target" --draft "${drafts}${size}" --gamma "$gamma" \
    --temperature "$temperature" --prefix "$prefix" --input "$DATA_DIR/$task.jsonl" \
    --output "$RESULTS_DIR/cells/$name.jsonl" --max-decode-len 128 --batch-size 1 \
    --dtype bfloat16 --param-dtype bfloat16 --json --quiet \
    --max-input-len 512 --truncate-inputs \
    ${checkpoints[@]+"${checkpoints[@]}"} ${mesh[@]+"${mesh[@]}"} > "$out.tmp"
  mv "$out.tmp" "$out"
done
"$PY" - "$RESULTS_DIR" <<'PYEOF'
import glob, json, os, sys
results = sys.argv[1]
rows = []
for path in sorted(glob.glob(os.path.join(results, 'cells', '*.json'))):
  pair, task, size = os.path.basename(path).split('_t')[0].rsplit('_', 2)
  rows.append(dict(json.load(open(path)), pair=pair, task=task, draft_size=size, file=path))
json.dump(rows, open(os.path.join(results, 'paper_table.json'), 'w'), indent=1)
for r in rows:
  print(f"{r['pair']} {r['task']} {r['draft_size']} T={r['temperature']:g} "
        f"gamma {r['gamma']}: alpha {r['alpha']:.3f} speedup {r['speedup'] or 0:.2f}x")
PYEOF
