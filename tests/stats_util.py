"""Exact enumeration of sequence probabilities (a Markov chain's, a tiny language model's)
and a chi-square check."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

EOS, PAD = 1, 0


def enumerate_markov(trans: np.ndarray, start: int, length: int) -> dict:
  """Exact probability of every first-`length` output of a Markov chain from `start`.

  EOS ends a sequence: later positions are PAD, as the decoders write them.
  """
  probs = {}
  vocab = trans.shape[0]

  def walk(prefix, state, prob):
    if len(prefix) == length:
      probs[tuple(prefix)] = probs.get(tuple(prefix), 0.0) + prob
      return
    if EOS in prefix:
      walk(prefix + [PAD], state, prob)
      return
    for tok in range(vocab):
      if trans[state, tok] > 0:
        walk(prefix + [tok], tok, prob * trans[state, tok])

  walk([], start, 1.0)
  return probs


def chi_square_pvalue(samples: np.ndarray, expected: dict, min_count: float = 5.0) -> float:
  """p-value of observed rows of `samples` [N, length] against `expected` probabilities.

  Outcomes with expected count < min_count are pooled; an outcome of probability 0 that
  occurs makes the p-value 0.
  """
  n = samples.shape[0]
  observed = {}
  for row in map(tuple, samples.tolist()):
    observed[row] = observed.get(row, 0) + 1
  if any(k not in expected for k in observed):
    return 0.0
  obs, exp, pool_obs, pool_exp = [], [], 0, 0.0
  for key, p in expected.items():
    if p * n >= min_count:
      obs.append(observed.get(key, 0))
      exp.append(p * n)
    else:
      pool_obs += observed.get(key, 0)
      pool_exp += p * n
  if pool_exp > 0:
    obs.append(pool_obs)
    exp.append(pool_exp)
  exp = np.asarray(exp) * (n / np.sum(exp))
  return float(stats.chisquare(obs, exp).pvalue)


def tiny_lm(vocab: int, num_layers: int, seed: int, logit_scale: float):
  """A random Llama-style CausalLM over `vocab` tokens (EOS 1, pad 0) whose output
  projection is scaled by logit_scale (a peaked target): (model, params)."""
  from specjax.models.lm import CausalLM  # pylint: disable=import-outside-toplevel
  from specjax.models.lm_config import LMConfig  # pylint: disable=import-outside-toplevel
  cfg = LMConfig(family='llama', vocab_size=vocab, eos_id=1, pad_id=0, max_len=16,
                 head_dim=4, emb_dim=8, num_heads=2, num_kv_heads=1, num_layers=num_layers,
                 mlp_dim=16)
  model = CausalLM(cfg)
  params = model.init(jax.random.PRNGKey(seed))
  params['lm_head']['kernel'] = params['lm_head']['kernel'] * logit_scale
  return model, params


def enumerate_lm(model, params, prompt, steps: int) -> dict:
  """P(the first `steps` tokens after `prompt`) of a decoder-only model at T=1, by scoring
  every continuation, as a decode shows them (pad 0 after EOS 1, the continuations' mass
  summed)."""
  vocab = model.vocab_size
  seqs = np.array(list(itertools.product(range(vocab), repeat=steps)))
  tokens = np.concatenate([np.tile(np.array(prompt), (len(seqs), 1)), seqs], 1)
  logp = jax.nn.log_softmax(model.logits(params, jnp.asarray(tokens)), -1)
  at = len(prompt) - 1
  total = sum(jnp.take_along_axis(logp[:, at + i], jnp.asarray(seqs[:, i:i + 1]), 1)[:, 0]
              for i in range(steps))
  return _as_shown(seqs, total, steps)


def tiny_t5(vocab: int, seed: int, logit_scale: float):
  """A random t5_tiny over `vocab` tokens (EOS 1, pad and start 0) whose output
  projection is scaled by logit_scale (a peaked target): (model, params)."""
  from specjax.models.t5 import T5  # pylint: disable=import-outside-toplevel
  from specjax.models.t5_config import t5_tiny  # pylint: disable=import-outside-toplevel
  model = T5(t5_tiny.replace(vocab_size=vocab, name=f't5_tiny_v{vocab}'))
  params = model.init(jax.random.PRNGKey(seed))
  dense = params['decoder']['logits_dense']
  dense['kernel'] = dense['kernel'] * logit_scale
  return model, params


def enumerate_t5(model, params, inputs, steps: int) -> dict:
  """P(the first `steps` output tokens for the encoder input `inputs` [S]) of a T5 at T=1,
  by scoring every continuation, as a decode shows them (pad 0 after EOS 1)."""
  vocab = model.vocab_size
  seqs = np.array(list(itertools.product(range(vocab), repeat=steps)))
  fed = np.concatenate([np.zeros((len(seqs), 1), np.int64), seqs[:, :-1]], 1)
  src = jnp.tile(jnp.asarray([inputs], jnp.int32), (len(seqs), 1))
  logp = jax.nn.log_softmax(model.logits(params, src, jnp.asarray(fed, jnp.int32)), -1)
  total = sum(jnp.take_along_axis(logp[:, i], jnp.asarray(seqs[:, i:i + 1]), 1)[:, 0]
              for i in range(steps))
  return _as_shown(seqs, total, steps)


def _as_shown(seqs: np.ndarray, logp: jax.Array, steps: int) -> dict:
  """Continuations seqs [n, steps] with log-probabilities logp [n] -> {as a decode shows
  them (pad 0 after EOS 1): probability}, the mass of those shown alike summed."""
  out = {}
  for seq, p in zip(seqs.tolist(), np.exp(np.asarray(logp, np.float64))):
    end = seq.index(1) + 1 if 1 in seq else steps
    shown = tuple(seq[:end] + [0] * (steps - end))
    out[shown] = out.get(shown, 0.0) + p
  return out
