#!/usr/bin/env bash
# Runs ON the TPU VM (tpu/paper_table.sh calls it): the paper's Table 2 by the command that
# makes docs/paper_table.md on a CPU, `python -m specjax.bench --paper-table`, here on
# EnDe (WMT14 test) and CNN/DM (test) with T5-XXL and its T5 1.1 small, base and large
# drafts, the bigram table, copy and copy + small, at T 0 and 1; each cell keeps the best
# gamma of PAPER_GAMMAS, T=1 cells carry block verification, the paper's cells beside them.
# Writes $RESULTS_DIR/paper_table.{json,md,png}. One process runs every cell: a rerun
# starts over (only the inputs and the bigram table are kept).
#
# PAIR picks the models: t5_1_1 (default: the paper's T5-XXL with T5 1.1 drafts; their
# public checkpoints are pretrained on C4 only, so pass fine-tuned ones with
# TARGET_CHECKPOINT and DRAFT_CHECKPOINT_{SMALL,BASE,LARGE}), t5_1_0 (the original T5 11B
# with T5 small/base/large, multi-task trained with WMT EnDe and CNN/DM under these
# prefixes, so they translate and summarise as they are), or flan (Flan-T5 XXL and Flan-T5
# small/base/large). Every model loads in bfloat16 on one chip, as the paper ran them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-$HOME/venv/bin/python}"
NUM_EXAMPLES="${NUM_EXAMPLES:-64}"    # inputs per task; each cell decodes them per gamma
PAIR="${PAIR:-t5_1_1}"
PAPER_GAMMAS="${PAPER_GAMMAS:-3,5,7}"  # the gammas of the paper's cells
ROUNDS="${ROUNDS:-1}"                  # timing rounds per row (python -m specjax.bench)
DATA_DIR="${DATA_DIR:-data}"
RESULTS_DIR="${RESULTS_DIR:-results}"
BIGRAM_LINES="${BIGRAM_LINES:-20000}"  # train references per task the bigram table counts
BIGRAM_TABLE="${BIGRAM_TABLE:-$DATA_DIR/t5_bigram.npz}"
T5_VOCAB="${T5_VOCAB:-gs://t5-data/vocabs/cc_all.32000.100extra/sentencepiece.model}"
case "$PAIR" in
  t5_1_0) target=t5_1_0_11b; drafts=t5_1_0_ ;;
  flan) target=flan_t5_xxl; drafts=flan_t5_ ;;
  t5_1_1) target=t5_xxl; drafts=t5_ ;;
  *) echo "error: PAIR must be t5_1_1, t5_1_0 or flan, got '$PAIR'" >&2; exit 2 ;;
esac
mkdir -p "$DATA_DIR" "$RESULTS_DIR"

# Whether file $1 holds at least $2 lines.
has_lines() {
  [[ -f "$1" ]] && (($(wc -l < "$1") >= $2))
}

if ! has_lines "$DATA_DIR/ende.jsonl" "$NUM_EXAMPLES" \
    || ! has_lines "$DATA_DIR/cnndm.jsonl" "$NUM_EXAMPLES" \
    || { [[ ! -f "$BIGRAM_TABLE" ]] && ! has_lines "$DATA_DIR/references.jsonl" 1; }; then
  "$PY" -m pip install -q 'datasets==5.2.0'
  "$PY" - "$NUM_EXAMPLES" "$DATA_DIR" "$BIGRAM_LINES" <<'PYEOF'
import itertools, json, sys
from datasets import load_dataset
n, data, n_train = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
wmt = load_dataset('wmt/wmt14', 'de-en', split='test').select(range(n))
with open(f'{data}/ende.jsonl', 'w') as f:
  for ex in wmt:
    f.write(json.dumps({'inputs': ex['translation']['en'],
                        'targets': ex['translation']['de']}) + '\n')
cnn = load_dataset('abisee/cnn_dailymail', '3.0.0', split='test').select(range(n))
with open(f'{data}/cnndm.jsonl', 'w') as f:
  for ex in cnn:
    f.write(json.dumps({'inputs': ex['article'], 'targets': ex['highlights']}) + '\n')
# The bigram table's counts: train references of both tasks (streamed, not downloaded).
wmt = load_dataset('wmt/wmt14', 'de-en', split='train', streaming=True)
cnn = load_dataset('abisee/cnn_dailymail', '3.0.0', split='train', streaming=True)
with open(f'{data}/references.jsonl', 'w') as f:
  for ex in itertools.islice(wmt, n_train):
    f.write(json.dumps({'targets': ex['translation']['de']}) + '\n')
  for ex in itertools.islice(cnn, n_train):
    f.write(json.dumps({'targets': ex['highlights']}) + '\n')
PYEOF
fi
if [[ ! -f "$BIGRAM_TABLE" ]]; then
  "$PY" -m specjax.datastore bigram --input "$DATA_DIR/references.jsonl" --field targets \
    --vocab "$T5_VOCAB" --target t5_xxl --output "$BIGRAM_TABLE" --quiet
fi

checkpoints=()
if [[ -n "${TARGET_CHECKPOINT:-}" ]]; then checkpoints+=(--target-checkpoint "$TARGET_CHECKPOINT"); fi
if [[ -n "${DRAFT_CHECKPOINT_SMALL:-}" ]]; then checkpoints+=(--draft-checkpoint "$DRAFT_CHECKPOINT_SMALL"); fi
# A draft model of --paper-drafts is a registry name or a checkpoint directory.
base="${DRAFT_CHECKPOINT_BASE:-${drafts}base}"
large="${DRAFT_CHECKPOINT_LARGE:-${drafts}large}"
# Inputs past 512 tokens are cut rather than ending the table.
"$PY" -m specjax.bench --paper-table \
  --paper-tasks "ende=$DATA_DIR/ende.jsonl,cnndm=$DATA_DIR/cnndm.jsonl" \
  --target "$target" --draft "${drafts}small" \
  --paper-drafts "model,$base,$large,bigram,copy,copy+model" --bigram-table "$BIGRAM_TABLE" \
  --paper-gammas "$PAPER_GAMMAS" --temperatures 0,1 --num-examples "$NUM_EXAMPLES" \
  --batch-size 1 --max-input-len 512 --max-decode-len 128 --rounds "$ROUNDS" \
  --dtype bfloat16 --param-dtype bfloat16 \
  --json "$RESULTS_DIR/paper_table.json" --markdown "$RESULTS_DIR/paper_table.md" \
  --plot "$RESULTS_DIR/paper_table.png" ${checkpoints[@]+"${checkpoints[@]}"}
