"""docs/tpu_speed.md's section on scanned layers is what scripts/scan_compile_times.py
makes of docs/scan_compile.json, and the README's figures are that run's."""
import json
import pathlib

import scripts_for_tests

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_the_section_is_the_json_s():
  script = scripts_for_tests.load_script('scan_compile_times')
  data = json.loads((ROOT / 'docs' / 'scan_compile.json').read_text())
  doc = (ROOT / 'docs' / 'tpu_speed.md').read_text()
  assert script.section(data).strip() in doc
  rows = {(r['model'], r['program'], r['batch'], r['layout']): r for r in data['tpu']}
  readme = ' '.join((ROOT / 'README.md').read_text().split())  # lines wrapped anywhere
  verify = rows[('t5_xxl', 'verify', 1, 'scanned')]['compile_seconds']
  unrolled = rows[('t5_xxl', 'verify', 1, 'unrolled')]['compile_seconds']
  assert f'compiles in {verify:.1f} s scanned against {unrolled:.1f} s unrolled' in readme


def test_the_section_reads_every_layout_it_compares():
  """A row missing one layout is left out rather than compared with nothing."""
  script = scripts_for_tests.load_script('scan_compile_times')
  data = json.loads((ROOT / 'docs' / 'scan_compile.json').read_text())
  data = dict(data, slice=[])  # the one-chip table alone
  full = script.section(data)
  cut = dict(data, tpu=[r for r in data['tpu'] if not (
      r['model'] == 't5_small' and r['layout'] == 'scanned')])
  fewer = script.section(cut)
  assert '| t5_small step |' in full and '| t5_small step |' not in fewer
  assert fewer.count('| t5_xxl') == full.count('| t5_xxl') == 8  # cost and floor tables


def test_the_floor_table_is_the_one_layer_rows():
  """Each program compiled with one layer is a row beside its unrolled and scanned
  compiles, the README quotes T5-XXL's range, and a run without one-layer rows has no
  floor table."""
  script = scripts_for_tests.load_script('scan_compile_times')
  data = json.loads((ROOT / 'docs' / 'scan_compile.json').read_text())
  seconds = {(r['model'], r['program'], r['batch'], r['layout']): r['compile_seconds']
             for r in data['tpu']}
  text = script.section(data)
  ceilings = []
  for model, program, _ in script.TPU_PROGRAMS:
    for batch in (1, 8):
      u, sc, one = (seconds[(model, program, batch, layout)]
                    for layout in ('unrolled', 'scanned', script.ONE_LAYER))
      assert f'| {u:.1f} | {one:.1f} | {sc:.1f} | {u / one:.1f} | {sc / one:.2f} |' in text
      ceilings += [u / one] if model == 't5_xxl' else []
  readme = ' '.join((ROOT / 'README.md').read_text().split())
  assert (f'cut to one layer compiles only {min(ceilings):.1f}-{max(ceilings):.1f}x faster'
          in readme)
  older = dict(data, tpu=[r for r in data['tpu'] if r['layout'] != script.ONE_LAYER])
  assert 'compile floor' not in script.section(older) and 'compile floor' in text


def test_the_slice_table_is_the_json_s():
  """Each program compiled on the v4 slice is a row of the section, and the README quotes
  the verify's times."""
  script = scripts_for_tests.load_script('scan_compile_times')
  data = json.loads((ROOT / 'docs' / 'scan_compile.json').read_text())
  rows = {(r['model'], r['program'], r['layout']): r['compile_seconds'] for r in data['slice']}
  text = script.section(data)
  for model, program, _ in script.SLICE_PROGRAMS:
    u, s = rows[(model, program, 'unrolled')], rows[(model, program, 'scanned')]
    assert f'| {u:.1f} | {s:.1f} | {u / s:.1f} |' in text
  readme = ' '.join((ROOT / 'README.md').read_text().split())  # lines wrapped anywhere
  u, s = rows[('t5_xxl', 'verify', 'unrolled')], rows[('t5_xxl', 'verify', 'scanned')]
  assert f'the verify in {s:.1f} against {u:.1f} s' in readme
