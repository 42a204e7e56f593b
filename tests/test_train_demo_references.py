"""scripts/train_demo.py --draft-learns references: a draft trained on the references alone
(no target decodes needed), exported as a checkpoint the decode loads: the baseline a
distilled draft is compared with."""
import json
import os

import jax
import numpy as np

from specjax.checkpoints import loader
from specjax.checkpoints.registry import ASSETS

from scripts_for_tests import load_script

def test_a_draft_trained_on_references_alone_is_exported_and_loads(tmp_path):
  rows = [json.loads(line) for line in open(os.path.join(ASSETS, 'test.jsonl'),
                                            encoding='utf-8')]
  data = tmp_path / 'data'
  data.mkdir()
  for split, part in (('train', rows[:48]), ('validation', rows[48:56])):
    (data / f'{split}.jsonl').write_text(''.join(
        json.dumps({'en': r['en'], 'de': r['de']}) + '\n' for r in part))
  work, assets = tmp_path / 'work', tmp_path / 'assets'
  train_demo = load_script('train_demo')
  train_demo.main(['--task', 'ende', '--stages', 'draft,export', '--draft-learns', 'references',
                   '--data', str(data), '--workdir', str(work), '--assets', str(assets),
                   '--draft-steps', '4', '--warmup-steps', '1', '--eval-every', '2',
                   '--buckets', '32:8'])
  summary = json.loads((work / 'draft' / 'summary.json').read_text())
  assert summary['learned'] == 'references' and summary['soft_weight'] == 0.0
  assert summary['training_pairs'] == 48  # the references, not a target's decodes
  assert not (work / 'distill').exists() and not (assets / 'target').exists()
  model, params = loader.load_model(None, str(assets / 'draft'))
  bundled, bundled_params = loader.load_model('demo_draft')
  assert model.config == bundled.config  # the bundled draft's architecture, other weights
  first = lambda tree: np.asarray(jax.tree.leaves(tree)[0], np.float32)
  assert first(params).shape == first(bundled_params).shape
  assert not np.allclose(first(params), first(bundled_params))

