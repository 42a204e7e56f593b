"""CNN/DailyMail, target T5-XXL, draft T5-small, gamma 5 (paper: 3.1x at T=0, 2.3x at T=1).

Single chip (the paper's setting; XXL needs bfloat16 params there, see docs/scale.md):

  python -m specjax.decode --target t5_xxl --draft t5_small --gamma 5 --temperature 0.0 \
      --prefix 'summarize: ' --input data/cnndm.jsonl --max-input-len 512 \
      --max-decode-len 128 --batch-size 1 --dtype bfloat16 --param-dtype bfloat16 --json --truncate-inputs

v4-8 (4 chips): the same plus `--num-partitions 4`.
"""
from configs import CNNDM_PREFIX, RunConfig

SINGLE_CHIP = RunConfig(
    name='cnndm_t5xxl_t5small_g5', task='cnndm', target='t5_xxl', draft='t5_small', gamma=5,
    temperatures=(0.0, 1.0), prefix=CNNDM_PREFIX, input='data/cnndm.jsonl', max_input_len=512,
    max_decode_len=128, truncate_inputs=True, paper_speedup=(3.1, 2.3))
V4_8 = SINGLE_CHIP.replace(num_partitions=4)
