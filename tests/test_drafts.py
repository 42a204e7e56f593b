"""Drafts that cost nothing (copy, bigram, copy + a model), per-row dynamic gamma, lenience."""
import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.models import base
from specjax.proposers.bigram import BigramDraft, table_from_counts
from specjax.proposers.copy import CopyDraft
from specjax.proposers.hybrid import HybridDraft
from specjax.models.markov import MarkovModel
from models_for_tests import chain_markov, random_markov
from stats_util import chi_square_pvalue, enumerate_markov

T1 = specjax.SamplingConfig(temperature=1.0)


@dataclasses.dataclass(frozen=True)
class CopyTarget:
  """An encoder-decoder whose output repeats its input: output token t is input token t
  (then EOS), most likely; the rest of the mass is spread over the vocabulary."""

  vocab_size: int = 16
  eos_id: int = 1
  pad_id: int = 0

  def encode(self, params, inputs):
    return {'source': inputs}

  def encoded_axes(self):
    return {'source': ('batch', 'length')}

  def decoder_prompt(self, inputs):
    return base.encoder_decoder_prompt(inputs)

  def init_cache(self, batch, max_len, dtype=None):
    return {}

  def cache_axes(self):
    return {}

  def decode(self, params, encoded, cache, tokens, positions):
    source = encoded['source']  # [B, S]
    at = positions[:, None] + jnp.arange(tokens.shape[1])[None]  # [B, K]: next is source[at]
    nxt = jnp.take_along_axis(source, jnp.clip(at, 0, source.shape[1] - 1), axis=1)
    nxt = jnp.where((at < source.shape[1]) & (nxt != 0), nxt, 1)
    onehot = jax.nn.one_hot(nxt, self.vocab_size)
    return params['strength'] * onehot + params['noise'][tokens], cache


def _copy_task(n=8, length=24, seed=0):
  rng = np.random.default_rng(seed)
  inputs = rng.integers(2, 16, (n, length)).astype(np.int32)
  inputs[:, -1] = 1
  params = {'strength': jnp.float32(6.0),
            'noise': jax.random.normal(jax.random.PRNGKey(seed), (16, 16))}
  return CopyTarget(), params, inputs


def test_copy_draft_on_a_copy_task_yields_over_three_tokens_per_call():
  target, tp, inputs = _copy_task()
  ref = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=28)
  assert np.array_equal(np.asarray(ref.tokens)[:, :24], inputs)  # the task copies
  out = specjax.speculative_decode(target, tp, CopyDraft(16), {}, inputs, gamma=4,
                                   max_decode_len=28)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert out.stats.tokens_per_call > 3.0
  sampled = specjax.speculative_decode(target, tp, CopyDraft(16), {}, inputs, gamma=4,
                                       max_decode_len=28, sampling=T1)
  assert sampled.stats.tokens_per_call > 2.0  # a sampled slip shifts this positional copy


@pytest.mark.parametrize('draft_kind', ['copy', 'hybrid'])
def test_copy_drafts_sample_the_target_exactly(draft_kind):
  """A decoder-only Markov target whose prompt repeats itself: the copy draft finds
  matches in the prompt; chi-square of the first three tokens."""
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(10), 1.5)
  copy = CopyDraft(6, ngram=2, source=False)
  if draft_kind == 'copy':
    draft, dp = copy, {}
  else:
    draft, dp = HybridDraft(copy, target), target.init(jax.random.PRNGKey(11), 3.0)
  n, steps = 20_000, 3
  prompt = jnp.tile(jnp.array([[3, 4, 5, 2, 3]]), (n, 1))
  out = specjax.speculative_decode(target, tp, draft, dp, prompt, gamma=3,
                                   max_decode_len=steps, sampling=T1,
                                   rng=jax.random.PRNGKey(1))
  expected = enumerate_markov(target.transition_probs(tp, T1), 3, steps)
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3
  assert 0.05 < out.stats.acceptance_rate < 0.95


def test_copy_and_hybrid_drafts_are_greedy_exact_on_demo_test_lines(demo_pair):
  from specjax import checkpoints
  from specjax.checkpoints.registry import ASSETS, DEMO_PREFIX, DEMO_VOCAB
  from specjax.job.inputs import pad_to_bucket, tokenize
  target, tp, draft, dp = demo_pair
  vocab = checkpoints.load_vocab(DEMO_VOCAB)
  rows = [json.loads(line) for line in (pathlib.Path(ASSETS) / 'test.jsonl').open()][:48]
  inputs = pad_to_bucket(tokenize(vocab, [DEMO_PREFIX + r['en'] for r in rows], 64, True)[0])
  kw = dict(max_decode_len=24, slots=16)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  copy = CopyDraft(target.vocab_size)
  for d, p in ((copy, {}), (HybridDraft(copy, draft), dp)):
    out = specjax.speculative_decode(target, tp, d, p, inputs, gamma=3, **kw)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    assert out.stats.accepted.sum() > 0


def test_bigram_table_and_exact_sampling():
  counts = np.zeros((6, 6))
  counts[2, 3], counts[2, 4], counts[2, 5] = 6, 3, 1
  table = table_from_counts(counts, top_k=2)
  assert table['next'][2].tolist() == [3, 4]
  np.testing.assert_allclose(np.exp(table['logp'][2]), [6 / 9, 3 / 9], atol=1e-3)
  assert table['next'][0].tolist()[0] in (3, 4, 5)  # an unseen row gets the unigram's
  draft = BigramDraft(6, top_k=2)
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(10), 1.5)
  rng = np.random.default_rng(1)
  dp = table_from_counts(rng.integers(0, 9, (6, 6)), top_k=3)
  draft = BigramDraft(6, top_k=3)
  n, steps = 20_000, 3
  out = specjax.speculative_decode(target, tp, draft, dp, jnp.full((n, 1), 3, jnp.int32),
                                   gamma=2, max_decode_len=steps, sampling=T1,
                                   rng=jax.random.PRNGKey(2))
  expected = enumerate_markov(target.transition_probs(tp, T1), 3, steps)
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3
  chain, cp = chain_markov(0)
  ref = specjax.autoregressive_decode(chain, cp, jnp.array([[3], [9]]), max_decode_len=10)
  greedy = specjax.speculative_decode(chain, cp, BigramDraft(16, 3), table_from_counts(
      rng.integers(0, 9, (16, 16)), 3), jnp.array([[3], [9]]), gamma=3, max_decode_len=10)
  np.testing.assert_array_equal(greedy.tokens, ref.tokens)


@pytest.mark.parametrize('verification, rule', [('token', 'token'), ('block', 'token'),
                                                ('token', 'cumulative')])
def test_dynamic_gamma_is_exact_and_drafts_less(verification, rule):
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(10), 1.5)
  dp = target.init(jax.random.PRNGKey(11), 3.0)
  n, steps = 20_000, 3
  kw = dict(gamma=4, max_decode_len=steps, sampling=T1, rng=jax.random.PRNGKey(4),
            verification=verification)
  inputs = jnp.full((n, 1), 3, jnp.int32)
  out = specjax.speculative_decode(target, tp, target, dp, inputs, draft_threshold=0.6,
                                   threshold_rule=rule, **kw)
  expected = enumerate_markov(target.transition_probs(tp, T1), 3, steps)
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3
  s = jax.tree.map(np.asarray, out.stats)
  assert s.drafted.sum() < 4 * s.target_calls.sum()  # rows stopped early
  assert np.all(s.drafted >= s.target_calls)  # but always proposed one
  fixed = specjax.speculative_decode(target, tp, target, dp, inputs, **kw)
  assert jax.tree.map(np.asarray, fixed.stats).drafted.sum() == 4 * int(
      fixed.stats.target_calls.sum())


def test_dynamic_gamma_greedy_equals_the_target_alone():
  target, tp = chain_markov(0)
  draft, dp = random_markov(3)
  inputs = jnp.array([[3], [7], [12], [2]], jnp.int32)
  ref = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=12)
  for threshold in (0.3, 0.9):
    for rule in ('token', 'cumulative'):
      out = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=4,
                                       max_decode_len=12, draft_threshold=threshold,
                                       threshold_rule=rule)
      np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.drafted.sum()) < 4 * int(out.stats.target_calls.sum())


def test_the_cumulative_rule_stops_where_the_product_of_confidences_falls_under():
  """A draft whose largest probability is 0.8 at every step (sampled, so the same q
  throughout): 'token' at 0.5 drafts all 4, 'cumulative' stops once 0.8^k < 0.5, after
  0.8, 0.64 (k = 3 would be 0.512: proposed; k = 4, 0.41: not): 3 per call."""
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(10), 1.5)
  logits = jnp.log(jnp.full((6, 6), 0.2 / 5).at[jnp.arange(6), (jnp.arange(6) + 1) % 6].set(
      0.8))
  dp = {'logits': logits}
  assert jax.tree.structure(dp) == jax.tree.structure(tp)
  inputs = jnp.full((8, 1), 3, jnp.int32)
  kw = dict(gamma=4, max_decode_len=40, sampling=T1, rng=jax.random.PRNGKey(0),
            draft_threshold=0.5)
  drafted = lambda rule: jax.tree.map(np.asarray, specjax.speculative_decode(
      target, tp, target, dp, inputs, threshold_rule=rule, **kw).stats)
  token, cumulative = drafted('token'), drafted('cumulative')
  assert token.drafted.sum() == 4 * token.target_calls.sum()
  assert cumulative.drafted.sum() == 3 * cumulative.target_calls.sum()
  with pytest.raises(ValueError) as err:
    specjax.speculative_decode(target, tp, target, dp, inputs, threshold_rule='mean', **kw)
  assert '\n' not in str(err.value) and 'cumulative' in str(err.value)


def test_lenience_accepts_more_and_is_no_longer_exact():
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(10), 1.5)
  dp = target.init(jax.random.PRNGKey(11), 3.0)
  n, steps = 20_000, 3
  inputs = jnp.full((n, 1), 3, jnp.int32)
  kw = dict(gamma=3, max_decode_len=steps, sampling=T1, rng=jax.random.PRNGKey(5))
  exact = specjax.speculative_decode(target, tp, target, dp, inputs, **kw)
  lenient = specjax.speculative_decode(target, tp, target, dp, inputs, lenience=0.2, **kw)
  assert lenient.stats.acceptance_rate > exact.stats.acceptance_rate + 0.1
  expected = enumerate_markov(target.transition_probs(tp, T1), 3, steps)
  assert chi_square_pvalue(np.asarray(lenient.tokens), expected) < 1e-3
  for bad in (dict(lenience=0.0), dict(lenience=0.5, sampling=specjax.SamplingConfig()),
              dict(lenience=0.5, verification='block'), dict(draft_threshold=1.5)):
    with pytest.raises(ValueError) as err:
      specjax.speculative_decode(target, tp, target, dp, inputs[:2], **{**kw, **bad})
    assert '\n' not in str(err.value)


def test_verify_scores_only_as_far_as_the_longest_proposal():
  from specjax.core import steps  # pylint: disable=import-outside-toplevel
  from specjax.models.t5 import T5  # pylint: disable=import-outside-toplevel
  from specjax.models.t5_config import t5_tiny  # pylint: disable=import-outside-toplevel
  model = T5(t5_tiny)
  params = model.init(jax.random.PRNGKey(0))
  inputs = jax.random.randint(jax.random.PRNGKey(1), (2, 6), 2, t5_tiny.vocab_size)
  bound = steps.Bound(model, params, model.encode(params, inputs))
  cache = model.init_cache(2, 16)
  x = jax.random.randint(jax.random.PRNGKey(2), (2, 4), 2, t5_tiny.vocab_size)
  last, pos = jnp.array([0, 0]), jnp.array([0, 0])
  full, _ = steps.verify(bound, cache, last, x, pos)
  for longest in (1, 2, 4):
    logits, new_cache = jax.jit(lambda c, n: steps.verify_proposed(bound, c, last, x, pos, n))(
        cache, jnp.int32(longest))
    assert logits.shape == full.shape
    np.testing.assert_allclose(logits[:, :longest + 1], full[:, :longest + 1], atol=1e-5)
    assert np.all(np.asarray(logits[:, longest + 1:]) == 0)  # not scored
    # Then the next call, from the positions written, sees the same cache as after a full one.
    nxt = jnp.full((2, 1), 5, jnp.int32)
    after, _ = model.decode(params, bound.encoded, new_cache, nxt, pos + longest + 1)
    ref, _ = model.decode(params, bound.encoded, steps.verify(bound, cache, last, x, pos)[1],
                          nxt, pos + longest + 1)
    np.testing.assert_allclose(after, ref, atol=1e-5)


def test_dynamic_gamma_t5_greedy_equals_the_target_alone_with_refill(tiny_t5_pair):
  from specjax.models.t5_config import t5_tiny  # pylint: disable=import-outside-toplevel
  target, tp, draft, dp = tiny_t5_pair()
  inputs = jax.random.randint(jax.random.PRNGKey(3), (5, 7), 2, t5_tiny.vocab_size)
  ref = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=10)
  for threshold in (0.1, 0.5):
    out = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=4, max_decode_len=10,
                                     draft_threshold=threshold, slots=2)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    calls = int(out.stats.target_calls.sum())
    assert calls <= int(out.stats.drafted.sum()) < 4 * calls  # rows stopped early
