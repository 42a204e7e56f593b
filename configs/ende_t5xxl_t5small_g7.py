"""WMT EnDe, target T5-XXL, draft T5-small, gamma 7 (paper: 3.4x at T=0, 2.6x at T=1).

Single chip (the paper's setting; XXL needs bfloat16 params there, see docs/scale.md):

  python -m specjax.decode --target t5_xxl --draft t5_small --gamma 7 --temperature 0.0 \
      --prefix 'translate English to German: ' --input data/ende.jsonl --max-input-len 128 \
      --max-decode-len 128 --batch-size 1 --dtype bfloat16 --param-dtype bfloat16 --json

v4-8 (4 chips): the same plus `--num-partitions 4`.
"""
from configs import ENDE_PREFIX, RunConfig

SINGLE_CHIP = RunConfig(
    name='ende_t5xxl_t5small_g7', task='ende', target='t5_xxl', draft='t5_small', gamma=7,
    temperatures=(0.0, 1.0), prefix=ENDE_PREFIX, input='data/ende.jsonl', max_input_len=128,
    max_decode_len=128, paper_speedup=(3.4, 2.6))
V4_8 = SINGLE_CHIP.replace(num_partitions=4)
