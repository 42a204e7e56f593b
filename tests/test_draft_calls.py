"""scripts/draft_calls.py: the draft model's calls counted in a real decode. A chain of G
makes exactly G per proposal (encoder-decoder and decoder-only, the prompt's prefill not
counted); a vertical cascade one before its loop and one per iteration, none of its own
to catch the draft up, between its fewest and its most, and exactly its most when the
draft model keeps none of the cheap drafts."""
import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import checkpoints
from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS, MANLM_ASSETS, bundled
from specjax.job.inputs import tokenize
from scripts_for_tests import load_script
from specjax.core.sampling import SamplingConfig
from specjax.job import drafts
from specjax.proposers.bigram import BigramDraft
from specjax.proposers.cascade import VerticalCascade
from test_tree_decode import _demo_lines

calls = load_script('draft_calls')
LEN = 24


def _counted(target, tp, draft, dp, inputs, gamma, slots, temperature=0.0):
  return calls.counted_decode(target, tp, draft, dp, inputs, gamma=gamma, max_decode_len=LEN,
                              sampling=SamplingConfig(temperature=temperature),
                              rng=jax.random.PRNGKey(0), slots=slots)


def _never_kept(vocab: int) -> dict:
  """A bigram table (`BigramDraft(vocab, 1)`) whose one guess is always the vocabulary's
  last id, which the demo draft model never writes."""
  return {'next': np.full((vocab, 1), vocab - 1, np.int32),
          'logp': np.zeros((vocab, 1), np.float32)}


@pytest.mark.parametrize('gamma,slots', [(4, 8), (2, 1)])
def test_a_draft_models_chain_of_g_makes_g_calls(demo_pair, gamma, slots):
  target, tp, draft, dp = demo_pair
  inputs = _demo_lines(12)
  out = _counted(target, tp, draft, dp, inputs, gamma, slots)
  assert out['proposals'] > 0 and out['calls'] == gamma * out['proposals']
  plain = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=gamma,
                                     max_decode_len=LEN, slots=slots)
  np.testing.assert_array_equal(out['tokens'], plain.tokens)  # counting changes nothing
  assert out['proposals'] == int(plain.iterations)


def test_a_decoder_only_prompts_prefill_is_not_counted():
  target, tp = checkpoints.load_model('manlm_target', DEFAULT_CHECKPOINTS['manlm_target'])
  draft, dp = checkpoints.load_model('manlm_draft', DEFAULT_CHECKPOINTS['manlm_draft'])
  vocab = checkpoints.load_tokenizer(bundled('manlm_target').vocab, target)
  with open(os.path.join(MANLM_ASSETS, 'test.jsonl'), encoding='utf-8') as f:
    rows = [json.loads(line)['inputs'] for line in f][:10]
  inputs = jnp.asarray(tokenize(vocab, rows, 32, False)[0])
  assert inputs.shape[1] > 5  # prompts of several tokens: prefilled at start and refill
  out = _counted(target, tp, draft, dp, inputs, 4, 4)
  assert out['calls'] == 4 * out['proposals']
  # A call of the prompt's width is the prefill's, not counted; any other is.
  prompt = jnp.asarray(inputs[:2])
  zeros = jnp.zeros((2,), jnp.int32)
  for width, added in ((None, 1), (prompt.shape[1], 0), (prompt.shape[1] + 1, 1)):
    model = calls.Counted(draft, width)
    cache = model.init_cache(2, 2 * prompt.shape[1])
    _, cache = model.decode(dp, draft.encode(dp, prompt), cache, prompt, zeros)
    assert cache[calls.CALLS].tolist() == [added, added]


def test_a_vertical_cascades_calls_lie_between_its_fewest_and_most(demo_pair):
  target, tp, draft, dp = demo_pair
  inner, ip = drafts.resolve_draft('bigram', target, 'demo_target', None)
  gamma, k = 6, 3
  inputs = _demo_lines(12)
  out = _counted(target, tp, VerticalCascade(draft, inner, k), {'draft': dp, 'inner': ip},
                 inputs, gamma, 1)
  fewest, most = math.ceil(gamma / (k + 1)), gamma  # no call only to catch the draft up
  assert fewest < out['calls_per_proposal'] < most  # the draft kept some cheap drafts
  plain = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=gamma,
                                     max_decode_len=LEN, slots=1)
  np.testing.assert_array_equal(out['tokens'], plain.tokens)
  # Negative control: cheap drafts of one token the draft model never writes (the
  # vocabulary's last): every iteration keeps one token, the most calls.
  vocab = target.vocab_size
  assert vocab - 1 not in np.asarray(plain.tokens)
  out = _counted(target, tp, VerticalCascade(draft, BigramDraft(vocab, 1), k),
                 {'draft': dp, 'inner': _never_kept(vocab)}, inputs, gamma, 1)
  assert out['calls'] == most * out['proposals']


def test_a_capped_vertical_cascade_makes_at_most_c_calls_and_proposes_what_it_holds(
    demo_pair):
  """Batch 8, a chain of G = 6 capped at C = 2 calls of the draft model: no proposal makes
  more; a row short of G after them proposes the tokens it holds (2 to 6: each call keeps
  at least one), and the output stays the target's own."""
  target, tp, draft, dp = demo_pair
  inner, ip = drafts.resolve_draft('bigram', target, 'demo_target', None)
  gamma, k, cap = 6, 3, 2
  inputs = _demo_lines(12)
  alone = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=LEN)
  out = _counted(target, tp, VerticalCascade(draft, inner, k, max_calls=cap),
                 {'draft': dp, 'inner': ip}, inputs, gamma, 8)
  np.testing.assert_array_equal(out['tokens'], alone.tokens)
  assert out['proposals'] > 0 and out['calls'] <= cap * out['proposals']
  per_call = out['drafted'] / out['target_calls']  # [N]: each input's tokens per proposal
  assert per_call.min() >= cap and per_call.max() <= gamma
  assert per_call.min() < gamma  # the cap cut chains short
  assert per_call.max() > cap  # and the cheap drafts it kept made them longer than C
  # Control: cheap drafts the draft model never keeps: every call keeps one token, so each
  # proposal makes exactly C calls and proposes exactly C tokens.
  vocab = target.vocab_size
  out = _counted(target, tp, VerticalCascade(draft, BigramDraft(vocab, 1), k, max_calls=cap),
                 {'draft': dp, 'inner': _never_kept(vocab)}, inputs, gamma, 8)
  np.testing.assert_array_equal(out['tokens'], alone.tokens)
  assert out['calls'] == cap * out['proposals']
  np.testing.assert_array_equal(out['drafted'], cap * out['target_calls'])
