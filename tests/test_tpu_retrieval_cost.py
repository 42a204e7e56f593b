"""scripts/tpu_retrieval_cost.py without compiling: its shapes, datastore sizes, the
lookup's reads, the predictions from measured rows and its report section."""
import json

import pytest

from scripts_for_tests import load_script

cost = load_script('tpu_retrieval_cost')


def _record(seconds, nbytes=1.0):
  return {'bytes': nbytes, 'flops': 1.0, 'seconds': seconds, 'bound': 'memory'}


def _costs():
  return {'t5_xxl step': _record(10.0), 't5_small step': _record(0.1),
          't5_xxl verify 9': _record(10.2), 't5_xxl verify 5': _record(10.1),
          't5_xxl tree verify 16': _record(10.4),
          'rest chain 8': _record(0.2), 'rest chain 8 sampled': _record(0.3),
          'rest dynamic:16:8:4': _record(0.25), 'suffix chain 8': _record(0.03),
          'suffix dynamic:16:8:4': _record(0.04),
          'gather probe': {**_record(0.01, 5e6), 'gathered_bytes': 512, 'array_bytes': 552}}


def test_shapes_are_chains_of_at_most_8_or_tries():
  assert cost.parse_shape('chain 8') == ('chain', 8)
  assert cost.label('dynamic:16:8') == 'dynamic:16:8:4'
  assert cost.verify_name('chain 4', 't5_xxl') == 't5_xxl verify 5'
  assert cost.verify_name('dynamic:32:8', 't5_xxl') == 't5_xxl tree verify 32'
  for bad in ('chain 9', '4,1,1,1'):
    with pytest.raises(ValueError):
      cost.parse_shape(bad)
  with pytest.raises(SystemExit):
    cost.parse_args(['--shapes', 'chain 9'])


def test_datastore_sizes_and_the_lookups_reads():
  sizes = cost.datastore_sizes(1_000_000, 12)
  assert sizes == {'tokens': 1_000_000, 'documents': 83_333, 'suffixes': 916_667}
  assert cost.search_steps(916_667) == 20 and cost.search_steps(1) == 1
  ds = {'max_query': 8, 'samples': 32, 'suffix_search_steps': 20, 'start_search_steps': 17}
  reads = cost.lookup_reads(ds, 8)
  assert reads['rounds'] == 74
  # 2 x 8 x 20 + 2 x 17 index entries, each with its 8-token window; 32 retrievals of
  # each of two matches.
  assert reads['gathered_bytes'] == 354 * 36 + 64 * 36
  assert reads['tile_bytes'] == (2 * 354 + 128) * 4096


def test_predictions_use_the_matching_proposal_and_verify():
  rows = [{'task': 'ende', 'proposer': 'rest', 'shape': 'chain 8', 'temperature': 0.0,
           'tokens_per_call': 2.0},
          {'task': 'ende', 'proposer': 'rest', 'shape': 'chain 8', 'temperature': 1.0,
           'tokens_per_call': 2.0},
          {'task': 'ende', 'proposer': 'model', 'shape': 'chain 4', 'temperature': 0.0,
           'tokens_per_call': 3.0},
          {'task': 'ende', 'proposer': 'copy', 'shape': 'chain 8', 'temperature': 0.0,
           'tokens_per_call': 1.5},  # not a retrieval proposer
          {'task': 'manlm', 'proposer': 'rest', 'shape': 'chain 8', 'temperature': 0.0,
           'tokens_per_call': 2.0},  # not a task asked for
          {'task': 'ende', 'proposer': 'suffix', 'shape': 'dynamic:32:8:4',
           'temperature': 0.0, 'tokens_per_call': 2.0}]  # not compiled: no verify of 32
  out = cost.predict({'B=1': _costs()}, rows, 't5_xxl', ('ende',))
  assert [(r['proposer'], r['shape'], r['temperature']) for r in out] == [
      ('rest', 'chain 8', 0.0), ('rest', 'chain 8', 1.0), ('model', 'chain 4', 0.0)]
  greedy, sampled, model = (r['B=1'] for r in out)
  assert greedy['c'] == pytest.approx(0.02) and greedy['v'] == pytest.approx(1.02)
  assert greedy['speedup'] == pytest.approx(2.0 / 1.04)
  assert sampled['c'] == pytest.approx(0.03)
  assert model['c'] == pytest.approx(0.04) and model['speedup'] == pytest.approx(3.0 / 1.05)


def test_the_section_is_written_in_place_of_its_own(tmp_path):
  data = {'settings': {'target': 't5_xxl', 'backend': 'compile-only TPU v4 chip (libtpu)',
                       'input_len': 128, 'max_decode_len': 128, 'tasks': 'ende',
                       'shapes': ['chain 8', 'dynamic:16:8:4'],
                       'measured_json': 'docs/retrieval_drafts.json',
                       'datastore': {'tokens': 1_000_000, 'documents': 83_333,
                                     'suffixes': 916_667, 'bytes': 8_333_336,
                                     'max_query': 8, 'samples': 32,
                                     'suffix_search_steps': 20, 'start_search_steps': 17}},
          'B=1': _costs(), 'predicted': None}
  path = tmp_path / 'cost.json'
  path.write_text(json.dumps(data))
  doc = tmp_path / 'tpu_speed.md'
  doc.write_text('# TPU\n\n## 8. Trees\n\nt\n\n## Drafts on the target\'s hidden states '
                 '(EAGLE, Medusa heads)\n\nheads\n')
  assert cost.main(['--render', '--json', str(path), '--markdown', str(doc)]) == 0
  text = doc.read_text()
  assert text.startswith('# TPU\n\n## 8. Trees\n\nt\n\n## Drafts on the target')
  assert text.count(cost.SECTION) == 1 and 'No prediction' in text
  assert '| 1 | rest chain 8 |' in text and '74 rounds' in text
  data['predicted'] = cost.predict({'B=1': _costs()}, [
      {'task': 'ende', 'proposer': 'suffix', 'shape': 'chain 8', 'temperature': 0.0,
       'tokens_per_call': 1.5}], 't5_xxl', ('ende',))
  path.write_text(json.dumps(data))
  assert cost.main(['--render', '--json', str(path), '--markdown', str(doc)]) == 0
  again = doc.read_text()
  assert again.count(cost.SECTION) == 1 and 'No prediction' not in again
  assert '| ende | suffix | chain 8 | 1.50 |' in again
