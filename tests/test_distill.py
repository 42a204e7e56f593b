"""Distilled draft models (python -m specjax.train_draft --kind distill, DistillSpec).

The loss is the forward KL divergence from the target's next-token distribution: zero for
a draft that is the target itself, positive for another; a few steps on the target's own
decodes of lines it will decode make a draft that gets more tokens accepted than the one
it started from, written as a checkpoint that --draft PATH decodes with, identical to
the target; what cannot run is refused in one line."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import decode, train_draft
from specjax.checkpoints import loader
from specjax.drafting import data as data_lib
from specjax.drafting import distill, heads_io
from stats_util import tiny_t5
from train_draft_util import train_on_demo_lines


def test_the_loss_is_zero_for_the_target_itself_and_positive_for_another_draft():
  target, tp = tiny_t5(32, seed=0, logit_scale=2.0)
  other, op = tiny_t5(32, seed=1, logit_scale=2.0)
  rng = np.random.default_rng(0)
  inputs = rng.integers(3, 32, (6, 5)).astype(np.int32)
  out = specjax.autoregressive_decode(target, tp, jnp.asarray(inputs), max_decode_len=8)
  seqs, spans = data_lib.sequences(target, inputs, np.asarray(out.tokens),
                                   np.asarray(out.lengths))
  args = (jnp.asarray(inputs), jnp.asarray(seqs), jnp.asarray(spans))
  same, agree = distill.loss_fn(tp, distill.Distillation(target, target), tp, *args)
  assert abs(float(same)) < 1e-5 and float(agree) == 1.0
  apart, agree = distill.loss_fn(op, distill.Distillation(target, other), tp, *args)
  assert float(apart) > 0.1 and float(agree) < 1.0


def test_train_draft_distils_a_draft_that_accepts_more_and_decodes_with_it(tmp_path, capsys):
  """A few steps of python -m specjax.train_draft --kind distill (demo_draft, the demo
  pair's) on the demo target's own decodes of test lines it will decode, then the decode
  CLI with --draft PATH: identical to the target, more accepted tokens than demo_draft's."""
  src, args, summary = train_on_demo_lines(tmp_path, capsys, 'distill', 30, '1e-3', 30)
  path = summary['output']
  meta, params = heads_io.load_heads(path)
  assert meta['kind'] == 'distill' and meta['draft'] == 'demo_draft'
  assert jax.tree.leaves(params)[0].dtype == jnp.bfloat16  # stored small
  model, _ = loader.load_model(None, path)
  assert model.config.name == 'demo_draft_distilled'
  accepted = {}
  for name, draft in (('distilled', path), ('demo_draft', 'demo_draft')):
    code = decode.main(['--input', str(src), '--draft', draft, '--gamma', '3',
                        '--max-decode-len', '16', '--quiet', '--json'])
    assert code == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result['identical_to_target'] is True
    accepted[name] = result['accepted_tokens']
  assert accepted['distilled'] > accepted['demo_draft']


@pytest.mark.parametrize('bad, named', [
    (['--kind', 'medusa', '--draft', 'demo_draft'], 'pass --kind distill'),
    (['--kind', 'distill', '--target', 't5_small'], 'pass --draft NAME')])
def test_train_draft_refuses_a_draft_it_cannot_use_in_one_line(tmp_path, capsys, bad, named):
  src = tmp_path / 'train.txt'
  src.write_text('Close the window\n')
  assert train_draft.main(['--input', str(src), '--workdir', str(tmp_path / 'w')] + bad) == 2
  err = capsys.readouterr().err.strip()
  assert named in err and '\n' not in err
