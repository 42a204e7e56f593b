"""Distilled draft models (python -m specjax.train_draft --kind distill, DistillSpec).

The loss is the forward KL divergence from the target's next-token distribution: zero for
a draft that is the target itself, positive for another; a few steps on the target's own
decodes of lines it will decode make a draft that gets more tokens accepted than the one
it started from, written as a checkpoint that --draft PATH decodes with, identical to
the target; what cannot run is refused in one line."""
import json
import shutil

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


def test_the_two_divergences_on_numbers_worked_by_hand():
  """p = (0.5, 0.5), q = (0.9, 0.1): TV = 0.5 (0.4 + 0.4) = 0.4 (an accepted sampled
  draft token: sum min(p, q) = 0.6 = 1 - TV); KL(p || q) = 0.5 ln(0.5 / 0.9) +
  0.5 ln(0.5 / 0.1) = 0.5108."""
  log_p, log_q = jnp.log(jnp.array([[0.5, 0.5]])), jnp.log(jnp.array([[0.9, 0.1]]))
  np.testing.assert_allclose(distill.divergence(log_p, log_q, 'tvd'), [0.4], rtol=1e-6)
  np.testing.assert_allclose(distill.divergence(log_p, log_q, 'kl'), [0.5108256], rtol=1e-6)
  np.testing.assert_allclose(distill.divergence(log_p, log_p, 'tvd'), [0.0], atol=1e-7)
  with pytest.raises(ValueError, match='kl or tvd'):
    distill.divergence(log_p, log_q, 'l2')


def test_on_policy_data_are_the_drafts_own_decodes_greedy_or_sampled(tmp_path):
  """The draft's greedy decodes are its autoregressive_decode's outputs; sampled ones
  differ from them, and a rerun reads the same samples back from the chunk files."""
  draft, dp = tiny_t5(32, seed=1, logit_scale=2.0)
  inputs = np.random.default_rng(0).integers(3, 32, (6, 5)).astype(np.int32)
  _, greedy, spans = data_lib.decodes(draft, dp, inputs, str(tmp_path / 'g'), 8,
                                      progress=False)
  out = specjax.autoregressive_decode(draft, dp, jnp.asarray(inputs), max_decode_len=8)
  expected, expected_spans = data_lib.sequences(draft, inputs, np.asarray(out.tokens),
                                                np.asarray(out.lengths))
  np.testing.assert_array_equal(greedy, expected)
  np.testing.assert_array_equal(spans, expected_spans)
  sample = lambda seed: data_lib.decodes(draft, dp, inputs, str(tmp_path / f's{seed}'), 8,
                                         progress=False, temperature=1.0, seed=seed)[1]
  sampled = sample(3)
  assert not np.array_equal(sampled, greedy)
  shutil.rmtree(tmp_path / 's3')  # sampled again from the seed, not read back
  np.testing.assert_array_equal(sample(3), sampled)
  assert not np.array_equal(sample(4), sampled)


def test_train_draft_distils_on_the_drafts_own_samples_by_total_variation(tmp_path, capsys):
  """A few steps on-policy (--distill-data draft --distill-temperature 1 --distill-loss
  tvd): the summary says so, the decodes are the draft's, and a rerun in the same
  --workdir with the other loss is refused before anything runs."""
  extra = ('--distill-data', 'draft', '--distill-temperature', '1', '--distill-loss', 'tvd')
  _, args, summary = train_on_demo_lines(tmp_path, capsys, 'distill', 2, '1e-4', 2, num=8,
                                         extra=extra)
  assert (summary['data'], summary['data_temperature'], summary['loss']) == (
      'draft', 1.0, 'tvd')
  assert 0.0 < summary['final_loss'] < 1.0  # a total variation
  assert sorted(p.name for p in (tmp_path / 'run').iterdir() if 'decodes' in p.name) == [
      'decodes_draft_t1']
  rerun = [a if a != 'tvd' else 'kl' for a in args]
  assert train_draft.main(rerun + ['--output', str(tmp_path / 'other')]) == 2
  err = capsys.readouterr().err
  assert '--distill-loss tvd (now kl)' in err, err


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
    (['--kind', 'distill', '--target', 't5_small'], 'pass --draft NAME'),
    (['--kind', 'medusa', '--distill-loss', 'tvd'], 'pass --kind distill, or drop them'),
    (['--kind', 'distill', '--distill-temperature', '-1'], '--distill-temperature must be')])
def test_train_draft_refuses_a_draft_it_cannot_use_in_one_line(tmp_path, capsys, bad, named):
  src = tmp_path / 'train.txt'
  src.write_text('Close the window\n')
  assert train_draft.main(['--input', str(src), '--workdir', str(tmp_path / 'w')] + bad) == 2
  err = capsys.readouterr().err.strip()
  assert named in err and '\n' not in err


@pytest.mark.parametrize('flag, value, least', [
    ('--max-examples', '-1', '>= 1'), ('--max-examples', '0', '>= 1'), ('--steps', '0', '>= 1'),
    ('--batch-size', '0', '>= 1'), ('--save-every', '0', '>= 1'), ('--heads', '0', '>= 1'),
    ('--max-decode-len', '0', '>= 1'), ('--warmup-steps', '-1', '>= 0'),
    ('--learning-rate', '0.0', '> 0')])
def test_train_draft_refuses_a_count_below_its_least_before_it_reads_anything(
    tmp_path, capsys, flag, value, least):
  work = tmp_path / 'w'
  assert train_draft.main(['--input', str(tmp_path / 'missing.txt'), '--workdir', str(work),
                           flag, value]) == 2
  err = capsys.readouterr().err.strip()
  assert err == f'error: {flag} must be {least}, got {value}', err
  assert not work.exists()  # nothing decoded, nothing written
