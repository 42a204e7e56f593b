"""The memory plan of a decoder-only pair (compiled against shapes only), and the sections
of the plan file that keep each pair's tables apart."""
import jax

from specjax import plan_sections
from specjax.models.lm import CausalLM
from specjax.models.lm_config import llama_tiny, llama_tiny_draft
from specjax.parallel import mesh as mesh_lib
from specjax.parallel import rules as axis_rules
from specjax.speed import memory_plan


def test_memory_plan_of_a_tiny_llama_pair():
  mesh = mesh_lib.make_mesh(shape=(1, 1))
  row = memory_plan.plan_decode(mesh, llama_tiny, llama_tiny_draft, gamma=3, batch=2,
                                input_len=5, max_decode_len=6, param_dtype='bfloat16',
                                hbm=memory_plan.TPU_V5E_HBM)
  n_params = sum(x.size for m in (llama_tiny, llama_tiny_draft)
                 for x in jax.tree.leaves(axis_rules.abstract_params(CausalLM(m))))
  assert row.params == 2 * n_params  # bfloat16
  # bfloat16 KV caches of P + L + G + 1 = 15 positions, KV heads only: target 2 layers x
  # k, v x [2, M=2, H=8, 15]; draft 1 layer x k, v x [2, 1, 8, 15]. No cross-attention.
  assert row.caches == (2 * 2 * 2 * 2 * 8 * 15 + 1 * 2 * 2 * 1 * 8 * 15) * 2
  assert row.loop['argument'] >= row.params + row.caches and row.fits
  assert row.hbm == memory_plan.TPU_V5E_HBM
  table = memory_plan.to_markdown([row])
  assert 'fits 16 GiB' in table and '| 1 | 1x1 | bfloat16 | 2 | 6 |' in table
  assert memory_plan.PlanRow.from_json(row.to_json()) == row
  too_big = memory_plan.PlanRow.from_json(dict(row.to_json(), hbm=row.chip_peak - 1))
  assert not too_big.fits


def test_each_pair_rewrites_only_its_own_section(tmp_path):
  path = str(tmp_path / 'scale.md')
  plan_sections.write(path, '# T5 plan\n\nold table\n')
  plan_sections.write(path, '## Decoder-only: a + b\n\nfirst\n', 'a+b')
  plan_sections.write(path, '## Decoder-only: c + d\n\nother\n', 'c+d')
  plan_sections.write(path, '# T5 plan\n\nnew table\n')  # the T5 rerun keeps the sections
  plan_sections.write(path, '## Decoder-only: a + b\n\nsecond\n', 'a+b')
  text = open(path, encoding='utf-8').read()
  head, sections = plan_sections.split(text)
  assert head.strip() == '# T5 plan\n\nnew table'
  assert list(sections) == ['a+b', 'c+d']
  assert 'second' in sections['a+b'] and 'first' not in text and 'old table' not in text
  assert 'other' in sections['c+d']
  assert plan_sections.rows_path('docs/scale.md', 'a', 'b') == 'docs/scale_a+b.json'


def test_summary_names_the_chip_kind():
  row = memory_plan.PlanRow(mesh=(1, 1), batch=8, max_decode_len=256, param_dtype='bfloat16',
                            params=0, caches=0, prefill={}, loop={}, compile_seconds=0.0,
                            error='out of HBM', hbm=memory_plan.TPU_V5E_HBM)
  ok = memory_plan.PlanRow(mesh=(1, 8), batch=8, max_decode_len=256, param_dtype='bfloat16',
                           params=0, caches=0, compile_seconds=0.0, devices_per_chip=2,
                           prefill=dict(argument=1, output=0, alias=0, temp=0),
                           loop=dict(argument=1, output=0, alias=0, temp=0))
  text = plan_sections.summarize([row, ok])
  assert '- 1 v5e chip (16 GiB each), bfloat16 params: fits nothing' in text
  assert '- 4 v4 chips (32 GiB each), bfloat16 params: fits every planned B and L' in text
