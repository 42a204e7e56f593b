"""Speculative decoding with decoder-only pairs (a tiny Llama target with a smaller Llama
draft, a GPT-2 pair): greedy output is the target's own, sampled output follows the
target's enumerated distribution."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.models.lm import CausalLM
from specjax.models.lm_config import LMConfig
from stats_util import chi_square_pvalue

EOS, PAD = 1, 0


def _pair(family: str, vocab: int, eos_bias: float = 0.0):
  """A random target (2 layers) and a smaller draft (1 layer, fewer heads) of a family."""
  common = dict(family=family, vocab_size=vocab, eos_id=EOS, pad_id=PAD, max_len=64,
                head_dim=8)
  if family == 'llama':
    common.update(rope_type='llama3', rope_factor=4.0, rope_original_max_len=16)
    target_cfg = LMConfig(emb_dim=32, num_heads=4, num_kv_heads=2, num_layers=2, mlp_dim=64,
                          **common)
    draft_cfg = LMConfig(emb_dim=16, num_heads=2, num_kv_heads=1, num_layers=1, mlp_dim=32,
                         tie_embeddings=True, **common)
  else:
    target_cfg = LMConfig(emb_dim=32, num_heads=4, num_kv_heads=4, num_layers=2, mlp_dim=64,
                          activation='gelu_new', tie_embeddings=True, **common)
    draft_cfg = LMConfig(emb_dim=16, num_heads=2, num_kv_heads=2, num_layers=1, mlp_dim=32,
                         activation='gelu_new', tie_embeddings=True, **common)
  target, draft = CausalLM(target_cfg), CausalLM(draft_cfg)
  tp, dp = target.init(jax.random.PRNGKey(1)), draft.init(jax.random.PRNGKey(2))
  key = 'embed' if target_cfg.tie_embeddings else 'lm_head'
  if eos_bias and key == 'lm_head':
    tp['lm_head']['kernel'] = tp['lm_head']['kernel'].at[:, EOS].add(eos_bias)
  elif eos_bias:
    tp['embed']['embedding'] = tp['embed']['embedding'].at[EOS].mul(eos_bias)
  return target, tp, draft, dp


def _prompts(vocab: int) -> np.ndarray:
  """Four right-padded prompts of lengths 5, 1, 3, 6."""
  rng = np.random.default_rng(0)
  out = np.full((4, 6), PAD, np.int32)
  for i, n in enumerate((5, 1, 3, 6)):
    out[i, :n] = rng.integers(2, vocab, n)
  return out


@pytest.mark.parametrize('family', ['llama', 'gpt2'])
def test_greedy_equals_target_alone_at_batch_1_and_4(family):
  target, tp, draft, dp = _pair(family, vocab=32, eos_bias=0.6 if family == 'llama' else 1.6)
  inputs = _prompts(32)
  kw = dict(max_decode_len=16)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  lengths = np.asarray(ref.lengths)
  assert len(set(lengths.tolist())) > 1 and lengths.min() < 16  # rows stop apart, at EOS
  batch = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=3, **kw)
  np.testing.assert_array_equal(batch.tokens, ref.tokens)
  assert 0 < batch.stats.acceptance_rate < 1
  for i in range(4):
    alone = specjax.speculative_decode(target, tp, draft, dp, inputs[i:i + 1], gamma=3, **kw)
    np.testing.assert_array_equal(alone.tokens[0], ref.tokens[i])
  if family == 'llama':  # prompts prefilled into a slot's caches on refill
    refilled = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=3, slots=2,
                                          **kw)
    np.testing.assert_array_equal(refilled.tokens, ref.tokens)


def _first_two_probs(model, params, prompt) -> dict:
  """Exact P(x1, x2) of the first two tokens after `prompt` (EOS then PAD)."""
  vocab = model.vocab_size
  p1 = np.asarray(jax.nn.softmax(model.logits(params, jnp.asarray([prompt]))[0, -1]),
                  np.float64)
  seqs = jnp.asarray([list(prompt) + [x] for x in range(vocab)])
  p2 = np.asarray(jax.nn.softmax(model.logits(params, seqs)[:, -1]), np.float64)  # [V, V]
  probs = {}
  for x1 in range(vocab):
    if x1 == EOS:
      probs[(EOS, PAD)] = p1[x1]
    else:
      for x2 in range(vocab):
        probs[(x1, x2)] = p1[x1] * p2[x1, x2]
  return probs


@pytest.mark.parametrize('family', ['llama', 'gpt2'])
def test_first_two_sampled_tokens_follow_the_target(family):
  target, tp, draft, dp = _pair(family, vocab=8)
  prompt = [3, 5, 2]
  n = 10_000
  out = specjax.speculative_decode(target, tp, draft, dp, np.tile(prompt, (n, 1)), gamma=2,
                                   max_decode_len=2, rng=jax.random.PRNGKey(7),
                                   sampling=specjax.SamplingConfig(temperature=1.0))
  expected = _first_two_probs(target, tp, prompt)
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3
  assert 0.05 < out.stats.acceptance_rate < 0.95  # the draft was used, and differs
  if family != 'llama':
    return
  # The draft's own distribution is rejected by the same test: it has the power to fail.
  draft_probs = _first_two_probs(draft, dp, prompt)
  mine = specjax.autoregressive_decode(draft, dp, np.tile(prompt, (n, 1)), max_decode_len=2,
                                       rng=jax.random.PRNGKey(8),
                                       sampling=specjax.SamplingConfig(temperature=1.0))
  assert chi_square_pvalue(np.asarray(mine.tokens), draft_probs) > 1e-3
  assert chi_square_pvalue(np.asarray(mine.tokens), expected) < 1e-3
