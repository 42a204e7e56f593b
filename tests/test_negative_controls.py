"""Negative controls: a deliberately broken rule must fail the checks that pass the real one.

Many tests trust a verdict the code computes itself (`identical_to_target`) or a chi-square
against the target's distribution. Here each check is shown to reject a broken decode: an
accept step that keeps every draft token, a correction drawn from p instead of the
residual, a sampler that squares its probabilities, rows that all take the first row's
settings, and a warp that forgets top-p. A patched function only runs once the programs
are traced again, so every broken run clears the compiled programs before and after.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import decode
from specjax.core import acceptance, sampling
from specjax.job import decode_job
from specjax.models.markov import MarkovModel
from stats_util import chi_square_pvalue, enumerate_markov

SENTENCES = ['Unable to open the file', 'Save changes before closing?', 'Print the page']
VOCAB, START, STEPS, N = 6, 3, 3, 10_000


@pytest.fixture
def retrace(fresh_programs):
  """A patch of the core must be traced: every decode here builds its programs anew."""
  del fresh_programs


def _accept_every_draft(target_tokens, x, drafted=None):
  """`accept_greedy` broken: every proposed draft token is accepted, right or wrong."""
  gamma = x.shape[1]
  n = (jnp.full(x.shape[:1], gamma, jnp.int32) if drafted is None
       else drafted.astype(jnp.int32))  # [B]
  accepted = jnp.arange(gamma)[None] < n[:, None]  # [B, G]
  y = jnp.take_along_axis(target_tokens, n[:, None], axis=1)[:, 0]  # [B]
  return acceptance.Acceptance(n=n, y=y, accepted=accepted, beta=accepted.astype(jnp.float32))


def test_a_broken_accept_rule_is_not_identical_to_the_target(tmp_path, monkeypatch, capsys,
                                                             retrace):
  """The job's summary says True for the real rule; once every draft token is accepted, it
  and the CLI's line say False on the same inputs and settings."""
  src = tmp_path / 'in.txt'
  src.write_text('\n'.join(SENTENCES) + '\n')
  args = ['--input', str(src), '--gamma', '3', '--batch-size', '3', '--max-decode-len', '12']
  job = decode_job.DecodeJob(input=str(src), gamma=3, batch_size=3, max_decode_len=12,
                             progress=False)
  assert decode_job.run(job)['identical_to_target'] is True
  monkeypatch.setattr(acceptance, 'accept_greedy', _accept_every_draft)
  broken = decode_job.run(job)
  assert broken['alpha'] == 1.0  # the patched rule is the one that ran
  assert broken['identical_to_target'] is False
  assert decode.main(args) == 0  # the CLI on the same programs
  out = capsys.readouterr().out
  assert 'identical to the target\'s own greedy output: False' in out


def _markov_pair():
  """The Markov pair of the sampling tests: a draft much sharper than its target."""
  target = MarkovModel(VOCAB)
  return target, target.init(jax.random.PRNGKey(10), 1.5), target.init(jax.random.PRNGKey(11),
                                                                          3.0)


def _three_tokens(config, rows=N, seed=0, gamma=2):
  target, tp, dp = _markov_pair()
  out = specjax.speculative_decode(target, tp, target, dp, jnp.full((rows, 1), START, jnp.int32),
                                   gamma=gamma, max_decode_len=STEPS, sampling=config,
                                   rng=jax.random.PRNGKey(seed))
  return np.asarray(out.tokens)


@pytest.mark.parametrize('config', [
    specjax.SamplingConfig(temperature=1.0),
    specjax.SamplingConfig(temperature=0.7, top_k=3),
    specjax.SamplingConfig(temperature=1.0, top_p=0.8),
], ids=['t1', 't0.7-top3', 'top-p0.8'])
def test_a_correction_drawn_from_p_fails_the_chi_square(config, monkeypatch, retrace):
  """test_sampling_exact's three-token check, with p in place of norm(max(0, p - q))."""
  target, tp, _ = _markov_pair()
  expected = enumerate_markov(target.transition_probs(tp, config), START, STEPS)
  monkeypatch.setattr(acceptance, 'residual', lambda p, q, q_scale=1.0: p)
  assert chi_square_pvalue(_three_tokens(config), expected) < 1e-3


def test_a_sampler_that_sharpens_fails_the_chi_square(monkeypatch, retrace):
  """test_sampling_exact's check of the target alone, drawing from p^2 normalised."""
  target, tp, _ = _markov_pair()
  config = specjax.SamplingConfig(temperature=1.0)
  expected = enumerate_markov(target.transition_probs(tp, config), START, STEPS)
  exact = sampling.sample
  monkeypatch.setattr(sampling, 'sample', lambda keys, probs, rows=None: exact(
      keys, probs ** 2 / jnp.sum(probs ** 2, -1, keepdims=True), rows))
  out = specjax.autoregressive_decode(target, tp, jnp.full((N, 1), START, jnp.int32),
                                      max_decode_len=STEPS, sampling=config,
                                      rng=jax.random.PRNGKey(3))
  assert chi_square_pvalue(np.asarray(out.tokens), expected) < 1e-3


def test_rows_that_take_the_first_rows_settings_fail_the_chi_square(monkeypatch, retrace):
  """test_sampling_exact's per-row settings check, every row warped as row 0."""
  target, tp, _ = _markov_pair()
  settings = [specjax.SamplingConfig(0.7, top_k=3), specjax.SamplingConfig(1.0, top_p=0.8)]
  expected = [enumerate_markov(target.transition_probs(tp, s), START, STEPS) for s in settings]
  rows = 4_000
  exact = sampling.warp
  monkeypatch.setattr(sampling, 'warp', lambda logits, params, mode: exact(
      logits, jax.tree.map(lambda a: jnp.broadcast_to(a[:1], a.shape), params), mode))
  tokens = _three_tokens([s for s in settings for _ in range(rows)], rows=2 * rows, seed=1)
  assert chi_square_pvalue(tokens[:rows], expected[0]) > 1e-3  # row 0's own setting
  assert chi_square_pvalue(tokens[rows:], expected[1]) < 1e-3


@pytest.mark.compute
def test_a_warp_without_top_p_fails_the_wide_nucleus_check(monkeypatch, retrace):
  """test_sampling_exact's first token over V = 4096 under top-p 0.9, top-p forgotten."""
  vocab, n = 4096, 8_000
  model = MarkovModel(vocab)
  tp, dp = (model.init(jax.random.PRNGKey(seed), scale=2.5) for seed in (20, 21))
  dp = {'logits': 0.7 * tp['logits'] + 0.3 * dp['logits']}
  config = specjax.SamplingConfig(temperature=1.0, top_p=0.9)
  p = np.asarray(sampling.warp_all(tp['logits'][START][None], config)[0], np.float64)
  expected = {(int(t),): float(p[t]) for t in np.flatnonzero(p > 0)}
  exact = sampling.warp
  monkeypatch.setattr(sampling, 'warp', lambda logits, params, mode: exact(
      logits, params.replace(top_p=jnp.ones_like(params.top_p)), mode))
  out = specjax.speculative_decode(model, tp, model, dp, jnp.full((n, 1), START, jnp.int32),
                                   gamma=1, max_decode_len=1, sampling=config,
                                   rng=jax.random.PRNGKey(9))
  assert chi_square_pvalue(np.asarray(out.tokens), expected) < 1e-3
