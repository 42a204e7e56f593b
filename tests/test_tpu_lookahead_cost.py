"""scripts/tpu_lookahead_cost.py: its specs, the cascade's call counts, the predictions
from measured rows, a dry run compiled on this CPU at tiny shapes (what the TPU run
compiles, with its report section checked against its JSON), and the committed report."""
import json
import os
import re

import pytest

from scripts_for_tests import load_script

cost = load_script('tpu_lookahead_cost')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _record(seconds):
  return {'bytes': 1.0, 'flops': 1.0, 'seconds': seconds, 'bound': 'memory'}


def _costs():
  return {'t5_xxl step': _record(10.0), 't5_small step': _record(0.1),
          't5_xxl verify 5': _record(10.5), 't5_xxl lookahead verify 18': _record(11.0),
          'lookahead:5,3,4': _record(0.02), 'lookahead:5,3,4 sampled': _record(0.03),
          'cascade bigram/3 chain 4, 1 calls': _record(0.2),
          'cascade bigram/3 chain 4, 2 calls': _record(0.3),
          'cascade bigram/3 chain 4, 1 calls sampled': _record(0.3),
          'cascade bigram/3 chain 4, 2 calls sampled': _record(0.5)}


def test_specs_and_the_cascades_calls():
  assert cost.parse_lookahead('lookahead:5,3,4') == (5, 3, 4) == cost.parse_lookahead('5,3,4')
  assert cost.lookahead_nodes(5, 3, 4) == 18 and cost.lookahead_nodes(4, 4, 4) == 24
  with pytest.raises(ValueError):
    cost.parse_lookahead('lookahead:5,1,4')
  assert cost.parse_cascade('cascade:demo_draft/bigram') == ('bigram', 3)
  assert cost.parse_cascade('cascade:demo_draft/suffix/2') == ('suffix', 2)
  assert cost.parse_cascade('cascade:demo_draft:2,rest') is None  # horizontal
  assert cost.parse_cascade('model') is None
  assert cost.calls_bounds(6, 3) == (2, 6) and cost.calls_bounds(2, 3) == (1, 2)
  assert cost.calls_estimate(6, 3, 1.5) == pytest.approx(4.0)
  assert cost.calls_estimate(6, 3, 10.0) == 2 and cost.calls_estimate(6, 3, 0.5) == 6
  # A cap of C calls: at most C, the fewest too where C is below them.
  assert cost.parse_cascade('cascade:demo_draft/bigram/3/4') == ('bigram', 3)
  assert cost.cascade_cap('cascade:demo_draft/bigram/3/4') == 4
  assert cost.cascade_cap('cascade:demo_draft/bigram/3') is None
  assert cost.cascade_cap('model') is None
  assert cost.calls_bounds(8, 3, 5) == (2, 5) and cost.calls_bounds(8, 3, 1) == (1, 1)
  assert cost.calls_estimate(8, 3, 1.0, 5) == 5
  with pytest.raises(SystemExit):
    cost.parse_args(['--cascades', 'eagle'])


def test_only_the_cascades_loop_is_traced_n_times():
  import jax  # pylint: disable=import-outside-toplevel
  original = jax.lax.while_loop

  class VerticalCascade:  # a body whose qualified name is the cascade's
    @staticmethod
    def body(c):
      return c + 1

  with cost.cascade_iterations(3):  # 3 calls: the first before the loop, 2 in it
    assert jax.lax.while_loop(lambda c: c < 100, VerticalCascade.body, 0) == 2
    other = jax.jit(lambda: jax.lax.while_loop(lambda c: c < 5, lambda c: c + 1, 0))()
    assert int(other) == 5
  assert jax.lax.while_loop is original


def test_predictions_of_lookahead_chains_and_cascades():
  rows = [{'task': 'ende', 'proposer': 'lookahead:5,3,4', 'shape': 'own tree',
           'temperature': 0.0, 'tokens_per_call': 1.2},
          {'task': 'ende', 'proposer': 'lookahead:5,3,4', 'shape': 'own tree',
           'temperature': 1.0, 'tokens_per_call': 1.1},
          {'task': 'ende', 'proposer': 'model', 'shape': 'chain 4', 'temperature': 0.0,
           'tokens_per_call': 2.5},
          {'task': 'ende', 'proposer': 'cascade:demo_draft/bigram', 'shape': 'chain 4',
           'temperature': 0.0, 'tokens_per_call': 2.5},
          {'task': 'ende', 'proposer': 'bigram', 'shape': 'chain 2', 'temperature': 0.0,
           'tokens_per_call': 1.1},  # shorter than k = 3: not the one read
          {'task': 'ende', 'proposer': 'bigram', 'shape': 'chain 4', 'temperature': 0.0,
           'tokens_per_call': 2.0},
          {'task': 'ende', 'proposer': 'cascade:demo_draft:2,rest', 'shape': 'chain 4',
           'temperature': 0.0, 'tokens_per_call': 2.3},  # horizontal
          {'task': 'manlm', 'proposer': 'model', 'shape': 'chain 4', 'temperature': 0.0,
           'tokens_per_call': 2.0},  # not a task asked for
          {'task': 'ende', 'proposer': 'model', 'shape': 'chain 6', 'temperature': 0.0,
           'tokens_per_call': 2.7},  # not compiled: no verify of 7
          {'task': 'ende', 'proposer': 'cascade:demo_draft/bigram/3/1', 'shape': 'chain 4',
           'temperature': 0.0, 'tokens_per_call': 2.0}]  # capped at one call
  out = cost.predict({'B=1': _costs()}, rows, 't5_xxl', 't5_small', ('ende',), 4)
  assert [(r['proposer'], r['temperature']) for r in out] == [
      ('lookahead:5,3,4', 0.0), ('lookahead:5,3,4', 1.0), ('model', 0.0),
      ('cascade:demo_draft/bigram', 0.0), ('cascade:demo_draft/bigram/3/1', 0.0)]
  greedy, sampled, model, casc, capped = out
  assert greedy['B=1']['c'] == pytest.approx(0.002) and greedy['B=1']['v'] == 1.1
  assert greedy['B=1']['speedup'] == pytest.approx(1.2 / 1.102)
  assert sampled['B=1']['c'] == pytest.approx(0.003)
  assert model['B=1']['c'] == pytest.approx(0.04)
  assert model['B=1']['speedup'] == pytest.approx(2.5 / 1.09)
  # 1 call 0.2, each more 0.1 (0.3 - 0.2): 4 / 2.0 = 2 calls, 0.3; 1 to 4: 0.2 to 0.5.
  assert casc['inner_shape'] == 'chain 4' and casc['calls']['estimate'] == 2.0
  b = casc['B=1']
  assert b['c'] == pytest.approx(0.03) and b['v'] == 1.05
  assert b['speedup_fewest'] == pytest.approx(2.5 / 1.07)
  assert b['speedup_most'] == pytest.approx(2.5 / 1.1)
  assert b['speedup_most'] < b['speedup'] < b['speedup_fewest']
  # Capped at one call: its fewest, most and estimate are 1 call, 0.2.
  assert capped['calls'] == {'fewest': 1, 'most': 1, 'estimate': 1}
  assert capped['B=1']['c'] == pytest.approx(0.02) == capped['B=1']['c_most']
  assert capped['B=1']['speedup'] == pytest.approx(2.0 / 1.07)


def _table(text: str) -> dict:
  """(B, program) -> (accessed GB, roofline us, / target step) of the section's table."""
  out = {}
  for m in re.finditer(r'^\| (\d+) \| ([^|]+) \| ([\d.]+) GB \| [^|]+ \| ([\d.]+) \| '
                       r'\w+ \| ([\d.]+) \|$', text, re.M):
    out[(int(m.group(1)), m.group(2).strip())] = tuple(float(m.group(i)) for i in (3, 4, 5))
  return out


def _check_section(text: str, data: dict):
  """The section's table and predictions agree with the JSON it was written from."""
  target, draft = data['settings']['target'], data['settings']['draft']
  table = _table(text)
  for batch in (k for k in data if k.startswith('B=')):
    costs, b = data[batch], int(batch[2:])
    step = costs[f'{target} step']['seconds']
    for name, c in costs.items():
      if name.endswith(' sampled'):  # in the JSON only
        continue
      assert table[(b, name)] == pytest.approx(
          (round(c['bytes'] / 1e9, 3), round(c['seconds'] * 1e6, 1),
           round(c['seconds'] / step, 4)), abs=1e-9), name
  for row in data['predicted'] or ():
    assert f'| {row["task"]} | {row["proposer"]} | {row["shape"]} |' in text


def test_a_dry_run_on_this_cpu(tmp_path):
  """What the TPU run compiles, at tiny shapes, with measured rows of its own."""
  rows = [{'task': 'ende', 'proposer': 'lookahead:3,2,2', 'shape': 'own tree',
           'temperature': t, 'tokens_per_call': 1.1} for t in (0.0, 1.0)]
  rows += [{'task': 'ende', 'proposer': p, 'shape': 'chain 2', 'temperature': 0.0,
            'tokens_per_call': x} for p, x in (('model', 2.0), ('cascade:d/bigram', 2.0),
                                               ('bigram', 1.2))]
  measured = tmp_path / 'measured.json'
  measured.write_text(json.dumps({'rows': rows}))
  out, doc = tmp_path / 'cost.json', tmp_path / 'tpu_speed.md'
  doc.write_text('# TPU\n\n## Drafts with no draft model (REST, suffix)\n\nrest\n')
  assert cost.main(['--cpu', '--target', 't5_tiny', '--draft', 't5_tiny_draft',
                    '--input-len', '8', '--max-decode-len', '16', '--batches', '2',
                    '--lookaheads', '', '--chains', '', '--cascades', '',
                    '--measured-json', str(measured), '--tasks', 'ende',
                    '--json', str(out), '--markdown', str(doc)]) == 0
  data = json.loads(out.read_text())
  st = data['settings']
  assert st['lookaheads'] == [[3, 2, 2]] and st['chains'] == [2]
  assert st['cascades'] == [['bigram', 3]] and st['cascade_chain'] == 2
  assert st['backend'] == 'cpu (a dry run)'
  assert sorted(p.name for p in tmp_path.iterdir()) == ['cost.json', 'measured.json',
                                                        'tpu_speed.md']  # no partial
  costs = data['B=2']
  assert sorted(costs) == sorted([
      't5_tiny step', 't5_tiny_draft step', 't5_tiny verify 3', 't5_tiny lookahead verify 5',
      'lookahead:3,2,2', 'lookahead:3,2,2 sampled', 'cascade bigram/3 chain 2, 1 calls',
      'cascade bigram/3 chain 2, 2 calls', 'cascade bigram/3 chain 2, 3 calls',
      'cascade bigram/3 chain 2, 1 calls sampled', 'cascade bigram/3 chain 2, 2 calls sampled',
      'cascade bigram/3 chain 2, 3 calls sampled'])
  one, two, three = (costs[f'cascade bigram/3 chain 2, {n} calls'] for n in (1, 2, 3))
  small = costs['t5_tiny_draft step']
  # A second call of k + 1 = 4 tokens costs at least one draft step more; the first also
  # feeds the token before, the third adds what the second does.
  assert two['flops'] - one['flops'] > small['flops'] * 0.9
  assert one['flops'] > two['flops'] - one['flops']
  assert three['flops'] - two['flops'] == pytest.approx(two['flops'] - one['flops'], rel=0.05)
  assert costs['t5_tiny lookahead verify 5']['flops'] > costs['t5_tiny verify 3']['flops']
  assert costs['lookahead:3,2,2 sampled']['bytes'] > costs['lookahead:3,2,2']['bytes']
  assert [(r['proposer'], r['temperature']) for r in data['predicted']] == [
      ('lookahead:3,2,2', 0.0), ('lookahead:3,2,2', 1.0), ('model', 0.0),
      ('cascade:d/bigram', 0.0)]
  casc = data['predicted'][-1]
  assert casc['calls'] == {'fewest': 1, 'most': 2, 'estimate': pytest.approx(2 / 1.2)}
  text = doc.read_text()
  assert text.startswith('# TPU\n\n## Drafts with no draft model (REST, suffix)\n\nrest\n\n'
                         + cost.SECTION)
  _check_section(text, data)
  again = text
  assert cost.main(['--render', '--json', str(out), '--markdown', str(doc)]) == 0
  assert doc.read_text() == again  # the section is replaced, not added again
  # Batches run side by side, merged and predicted again.
  other = tmp_path / 'b3.json'
  other.write_text(json.dumps({**{k: v for k, v in data.items() if k != 'B=2'},
                               'B=3': costs}))
  merged = tmp_path / 'merged.json'
  assert cost.main(['--merge', str(out), str(other), '--measured-json', str(measured),
                    '--json', str(merged)]) == 0
  both = json.loads(merged.read_text())
  assert both['B=2'] == both['B=3'] == costs
  assert [r['B=3'] for r in both['predicted']] == [r['B=2'] for r in data['predicted']]
  with pytest.raises(ValueError, match='B=2 twice'):
    cost.main(['--merge', str(out), str(out), '--json', str(merged)])
  # --resume keeps what an interrupted run compiled (here: all of it, marked).
  marked = {k: {**v, 'flops': -1.0} for k, v in costs.items()}
  (tmp_path / 'cost.json.partial.json').write_text(json.dumps({'settings': st, 'B=2': marked}))
  assert cost.main(['--cpu', '--target', 't5_tiny', '--draft', 't5_tiny_draft',
                    '--input-len', '8', '--max-decode-len', '16', '--batches', '2',
                    '--lookaheads', '', '--chains', '', '--cascades', '',
                    '--measured-json', str(measured), '--tasks', 'ende', '--resume',
                    '--json', str(out)]) == 0
  assert json.loads(out.read_text())['B=2'] == marked
  assert not (tmp_path / 'cost.json.partial.json').exists()


def test_the_committed_report_matches_its_json():
  path = os.path.join(ROOT, 'docs', 'tpu_lookahead_cost.json')
  if not os.path.exists(path):
    pytest.skip('no TPU run committed')
  with open(path, encoding='utf-8') as f:
    data = json.load(f)
  with open(os.path.join(ROOT, 'docs', 'tpu_speed.md'), encoding='utf-8') as f:
    doc = f.read()
  at = doc.index(cost.SECTION + '\n')
  end = doc.find('\n## ', at + 1)
  text = doc[at:end + 1 if end >= 0 else None]
  assert text.rstrip('\n') == cost.section(data).rstrip('\n')
  assert data['settings']['backend'] == 'compile-only TPU v4 chip (libtpu)'
  _check_section(text, data)
  for row in data['predicted']:
    for batch in ('B=1', 'B=8'):
      p = row[batch]
      assert p['speedup'] == pytest.approx(row['tokens_per_call'] / (p['c'] + p['v']))


def test_a_cascades_counted_calls_price_it_where_counted():
  rows = [{'task': 'ende', 'proposer': 'cascade:demo_draft/bigram', 'shape': 'chain 4',
           'temperature': 0.0, 'tokens_per_call': 2.5, 'draft_calls': {'B=1': 4.0}},
          {'task': 'ende', 'proposer': 'bigram', 'shape': 'chain 4', 'temperature': 0.0,
           'tokens_per_call': 2.0}]
  costs = _costs()
  out = cost.predict({'B=1': costs, 'B=2': costs}, rows, 't5_xxl', 't5_small', ('ende',), 4)
  (casc,) = out
  # B=1: 4 calls counted, one per iteration: 0.2 + 3 x 0.1.
  assert casc['calls']['counted'] == {'B=1': 4.0}
  assert casc['B=1']['c'] == pytest.approx(0.05)
  # B=2 counted none: the estimate, 4 / 2.0 = 2 iterations, 0.3.
  assert casc['calls']['estimate'] == 2.0 and casc['B=2']['c'] == pytest.approx(0.03)


def test_the_third_cascade_calls_share_of_the_seconds_is_reported():
  def chain(*seconds):
    return {f'cascade bigram/3 chain 6, {n} calls': {'seconds': s}
            for n, s in enumerate(seconds, 1)}

  data = {'settings': {}, 'B=1': chain(1.0, 1.5, 2.0), 'B=8': chain(1.0, 2.0, 3.2)}
  assert cost.linearity_note(data) == ('; the third adds 1.00-1.20 times what the second '
                                       'adds, greedy and sampled, at each batch')
  # A loop whose second iteration was cheaper than its third (as the cascade's was, when a
  # call of its own caught the draft up) shows.
  assert '1.00-1.90' in cost.linearity_note({'B=8': chain(1.0, 1.5, 2.45), 'B=1': chain(1, 2, 3)})
  assert cost.linearity_note({'B=1': chain(1.0, 1.5)}) == ''  # no third: nothing said
