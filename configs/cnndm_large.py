"""CNN/DailyMail, large draft, T = 0, 1: gamma 3, 3 (paper, T5-XXL + T5-large: 2.2x, 1.7x).

Single chip, T5 11B with the T5 large draft (bfloat16 params: 11B fits one 32 GiB v4 chip,
see docs/scale.md):

  python -m specjax.decode --target t5_1_0_11b --draft t5_1_0_large --gamma 3 \
      --temperature 0.0 --prefix 'summarize: ' --input data/cnndm.jsonl --max-input-len 512 \
      --max-decode-len 128 --batch-size 1 --dtype bfloat16 --param-dtype bfloat16 --json \
      --truncate-inputs

v4-8 (4 chips): the same plus `--num-partitions 4`. `FLAN`: Flan-T5 XXL with Flan-T5
large; `PAPER`: the paper's T5 1.1 XXL with T5 1.1 large (pretrained-only public
checkpoints: pass fine-tuned ones with --target-checkpoint / --draft-checkpoint).
"""
from configs import paper_runs

_RUNS = paper_runs('cnndm', 'large')
SINGLE_CHIP, V4_8, FLAN, PAPER = (_RUNS[k] for k in ('SINGLE_CHIP', 'V4_8', 'FLAN', 'PAPER'))
