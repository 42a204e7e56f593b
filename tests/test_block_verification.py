"""Block verification: exact, never fewer accepted tokens than the token rule, and the token
rule itself for greedy rows."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core import acceptance
from specjax.models.markov import MarkovModel
from models_for_tests import chain_markov, random_markov
from stats_util import chi_square_pvalue, enumerate_markov

START = 0


def _random_chains(seed, vocab=3, power=3.0):
  rng = np.random.default_rng(seed)
  dist = lambda: (lambda x: x / x.sum(-1, keepdims=True))(rng.random((vocab, vocab)) ** power)
  return dist(), dist()  # target and draft transitions [V, V]


def _block_inputs(trans_p, trans_q, drafts):
  """p [D, G+1, V], q [D, G, V] for every draft sequence of a Markov pair from START."""
  prev = np.concatenate([np.full((len(drafts), 1), START), drafts], axis=1)  # [D, G+1]
  return (jnp.asarray(trans_p[prev], jnp.float32),
          jnp.asarray(trans_q[prev[:, :-1]], jnp.float32))


def _enumerate(trans_p, trans_q, gamma, rule):
  """Exact, from the implementation's own probabilities: E[accepted] per call, and the
  joint of the first G + 1 emitted tokens (a short block completed by the target)."""
  vocab = trans_p.shape[0]
  drafts = np.array(list(itertools.product(range(vocab), repeat=gamma)), np.int32)  # [D, G]
  p, q = _block_inputs(trans_p, trans_q, drafts)
  prev = np.concatenate([np.full((len(drafts), 1), START), drafts], axis=1)
  q_seq = np.prod(trans_q[prev[:, :-1], drafts], axis=1)  # [D]
  p64 = np.asarray(p, np.float64)
  if rule == 'block':
    h, w = (np.asarray(a, np.float64) for a in acceptance.block_stops(p, q, drafts))
    stop = np.concatenate([np.ones((len(drafts), 1)), h], axis=1)  # [D, G+1]: k = 0..G
    after = np.concatenate([np.cumprod((1 - h)[:, ::-1], axis=1)[:, ::-1],
                            np.ones((len(drafts), 1))], axis=1)
    prob_n = stop * after  # P(n = k | draft) = h_k prod_{j > k} (1 - h_j)
  else:
    ratio = np.minimum(1.0, np.asarray(p[:, :gamma] / q, np.float64)[
        np.arange(len(drafts))[:, None], np.arange(gamma), drafts])  # [D, G]
    reach = np.concatenate([np.ones((len(drafts), 1)), np.cumprod(ratio, axis=1)], axis=1)
    prob_n = reach * np.concatenate([1 - ratio, np.ones((len(drafts), 1))], axis=1)
    w = np.ones((len(drafts), gamma + 1))
  expected = float(np.sum(q_seq[:, None] * prob_n * np.arange(gamma + 1)))
  joint = {}
  for d, draft in enumerate(drafts):
    for k in range(gamma + 1):
      q_k = np.concatenate([np.asarray(q[d], np.float64), np.zeros((1, vocab))])[k]
      res = np.asarray(acceptance.residual(jnp.asarray(w[d, k] * p64[d, k], jnp.float32),
                                           jnp.asarray(q_k, jnp.float32)), np.float64)
      res = res / res.sum()
      for y in range(vocab):
        head = tuple(draft[:k]) + (y,)
        mass = q_seq[d] * prob_n[d, k] * res[y]
        for tail in itertools.product(range(vocab), repeat=gamma - k):
          seq, cont = head + tail, 1.0
          for a, b in zip(seq[k:-1], seq[k + 1:]):
            cont *= trans_p[a, b]
          joint[seq] = joint.get(seq, 0.0) + mass * cont
  return expected, joint


def _target_joint(trans_p, length):
  vocab = trans_p.shape[0]
  out = {}
  for seq in itertools.product(range(vocab), repeat=length):
    prob, last = 1.0, START
    for t in seq:
      prob, last = prob * trans_p[last, t], t
    out[seq] = prob
  return out


@pytest.mark.parametrize('seed', [0, 1, 2, 3])
def test_block_rule_is_exact_and_accepts_at_least_as_much_as_the_token_rule(seed):
  trans_p, trans_q = _random_chains(seed)
  gains = []
  for gamma in (2, 3):
    target = _target_joint(trans_p, gamma + 1)
    results = {rule: _enumerate(trans_p, trans_q, gamma, rule) for rule in ('token', 'block')}
    for rule, (_, joint) in results.items():
      err = max(abs(joint[s] - target[s]) for s in target)
      assert err < 2e-6, (rule, gamma, err)  # exactly the target's distribution
    gains.append(results['block'][0] - results['token'][0])
  assert min(gains) >= -1e-6
  assert max(gains) > 1e-3  # strictly more in these pairs


def test_a_broken_block_rule_is_not_exact():
  """Without the normalisation of h_j (S_j alone), the distribution is off."""
  trans_p, trans_q = _random_chains(1)
  exact = acceptance.block_stops

  def broken(p, q, x):
    h, w = exact(p, q, x)
    gamma = q.shape[1]
    owed = jnp.sum(jnp.maximum(w[:, 1:gamma, None] * p[:, 1:gamma] - q[:, 1:gamma], 0), -1)
    return jnp.concatenate([jnp.minimum(owed, 1.0), h[:, -1:]], axis=1), w

  acceptance.block_stops = broken
  try:
    _, joint = _enumerate(trans_p, trans_q, 3, 'block')
  finally:
    acceptance.block_stops = exact
  target = _target_joint(trans_p, 4)
  assert max(abs(joint[s] - target[s]) for s in target) > 1e-3


def _markov_pair():
  target = MarkovModel(6)
  return target, target.init(jax.random.PRNGKey(10), 1.5), target.init(jax.random.PRNGKey(11),
                                                                          3.0)


@pytest.mark.parametrize('config', [specjax.SamplingConfig(temperature=1.0),
                                    specjax.SamplingConfig(temperature=0.7, top_k=3)],
                         ids=['t1', 't0.7-top3'])
def test_block_decode_follows_the_target_on_the_first_three_tokens(config, monkeypatch,
                                                                   fresh_programs):
  target, tp, dp = _markov_pair()
  n, steps, start = 20_000, 3, 3
  kw = dict(gamma=3, max_decode_len=steps, sampling=config, rng=jax.random.PRNGKey(2))
  inputs = jnp.full((n, 1), start, jnp.int32)
  out = specjax.speculative_decode(target, tp, target, dp, inputs, verification='block', **kw)
  expected = enumerate_markov(target.transition_probs(tp, config), start, steps)
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3
  token = specjax.speculative_decode(target, tp, target, dp, inputs, **kw)
  assert out.stats.tokens_per_call >= token.stats.tokens_per_call - 0.02
  # the same test rejects a block rule whose stop probabilities are not normalised
  exact = acceptance.block_stops

  def broken(p, q, x):
    h, w = exact(p, q, x)
    return jnp.concatenate([jnp.sqrt(h[:, :-1]), h[:, -1:]], axis=1), w

  monkeypatch.setattr(acceptance, 'block_stops', broken)
  bad = specjax.speculative_decode(target, tp, target, dp, inputs, verification='block',
                                   **dict(kw, rng=jax.random.PRNGKey(3)))
  assert chi_square_pvalue(np.asarray(bad.tokens), expected) < 1e-3


def test_greedy_block_verification_is_the_token_rule():
  target, tp = chain_markov(0)
  draft, dp = random_markov(3)
  inputs = jnp.array([[3], [7], [12], [2]], jnp.int32)
  ref = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=12)
  for gamma in (1, 3):
    block = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=gamma,
                                       max_decode_len=12, verification='block')
    token = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=gamma,
                                       max_decode_len=12)
    np.testing.assert_array_equal(block.tokens, ref.tokens)
    np.testing.assert_array_equal(block.stats.accepted, token.stats.accepted)
  # one-hot p and q inside a sampled batch: the block rule is exact match too
  p = jax.nn.one_hot(jnp.array([[2, 0, 1]]), 3)
  q = jax.nn.one_hot(jnp.array([[2, 1]]), 3)
  keys = jax.random.split(jax.random.PRNGKey(0), 1)
  res = acceptance.accept_block(p, q, jnp.array([[2, 1]]), keys)
  assert int(res.n[0]) == 1 and int(res.y[0]) == 0
  with pytest.raises(ValueError, match="verification must be one of token, block"):
    specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=2, max_decode_len=4,
                               verification='tree')
