"""Lookahead decoding (`--draft lookahead:W,N,G`): the Jacobi step of the window's levels and
the n-gram pool (hand-checked), the window always verified, a refilled row starting afresh;
greedy identical to the target alone on both bundled encoder-decoder tasks and the
decoder-only pair with refill; sampled, the target's distribution (chi-square of the first
three tokens, and a broken tree rule that the same test rejects); bad W, N, G and flags in
one line before any model loads."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import checkpoints, decode
from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS, MANLM_ASSETS, bundled
from specjax.core import tree_accept
from specjax.core.sampling import SamplingConfig
from specjax.core.state import LoopConfig
from specjax.job import decode_job, drafts, tree_checks
from specjax.job.inputs import tokenize
from specjax.models.markov import MarkovModel
from specjax.proposers.lookahead import LookaheadDraft
from stats_util import chi_square_pvalue, enumerate_markov
from test_tree_decode import _test_lines

T1 = SamplingConfig(temperature=1.0)
T07 = SamplingConfig(temperature=0.7, top_k=3, top_p=0.9)


def test_the_levels_take_a_jacobi_step_past_the_committed_tokens_and_feed_the_pool():
  draft = LookaheadDraft(20, window=3, ngram=3, guesses=1, pool=8, source=False)
  state = draft.init_cache(1, 16)
  # Trunk 1 2 3, level 1 4 5 6; the branches' tips (4, 5, 6 below 1, 2, 3) are nodes 3 4 5.
  state = {**state, 'window': jnp.array([[[1, 2, 3], [4, 5, 6]]]),
           'nodes': jnp.array([[3, 4, 5]])}
  # The target's argmax after the root (slot 0) and after each node (slot node + 1).
  verdicts = jnp.array([[7, 8, 9, 10, 11, 12, 13, 14, 15]])
  new = draft.accepted(state, None, None, jnp.array([1]), jnp.array([4]),
                       target_tokens=verdicts)
  # The tips' argmax 11 12 13 is the new top level, level 1 the new trunk; two tokens
  # committed (n = 1): both move on by one more, their last guess repeated.
  assert new['window'].tolist() == [[[5, 6, 6], [12, 13, 13]]]
  # Each branch read down: trunk, level 1, the argmax at its tip.
  assert new['pool'][0, :3].tolist() == [[1, 4, 11], [2, 5, 12], [3, 6, 13]]
  assert int(new['next'][0]) == 3 and int(new['root'][0]) == 4


def test_the_window_is_always_verified_and_pool_n_grams_after_the_root_join_it():
  draft = LookaheadDraft(10, window=2, ngram=3, guesses=2, pool=4, source=False)
  cfg = LoopConfig(gamma=2, max_decode_len=8, tree=draft.tree_spec())
  assert (draft.tree_spec().nodes, draft.tree_spec().depth) == ((2 + 2) * 2, 2 + 1)
  state = draft.init_cache(1, 16)
  # A row at position 3 (root token 5) whose last call's root was 2; its pool holds
  # 5 6 7 and 4 1 2; its trunk guesses 6 3, its level 1 7 8.
  state.update(window=jnp.array([[[6, 3], [7, 8]]]), root=jnp.array([2]), next=jnp.array([2]),
               pool=state['pool'].at[0, :2].set(jnp.array([[5, 6, 7], [4, 1, 2]])))
  seq = jnp.array([[0, 2, 9, 5, 0, 0, 0, 0]])
  p = draft.propose({}, {}, state, seq, jnp.array([3]), None, None, cfg)
  # Branch 0 is 6 7, branch 1 is 6 3 8; the n-gram 6 7 is branch 0 (one node each). No
  # other n-gram begins with 5, so the rest are fallbacks.
  assert p.tokens[0, :4].tolist() == [6, 7, 3, 8]
  assert p.parents[0, :4].tolist() == [-1, 0, 0, 2]
  assert p.state['nodes'][0].tolist() == [1, 3]  # the branches' tips
  # The tokens committed since the last call joined the pool: '2 9 5' ends at position 3.
  assert [2, 9, 5] in p.state['pool'][0].tolist()


def test_a_fresh_window_guesses_the_source_copied_in_place_or_the_last_tokens_repeated():
  """An encoder-decoder's first call: level l's d-th guess is the source's token d + l
  (padding, -2, is none: the decoder's own last tokens stand in); a decoder-only row's
  window is its last W tokens repeated, level l l places on."""
  draft = LookaheadDraft(20, window=3, ngram=3, guesses=1, pool=8, source=True)
  cfg = LoopConfig(gamma=2, max_decode_len=8, tree=draft.tree_spec())
  seq = jnp.array([[0, 0, 0, 0, 0, 0, 0, 0]])
  source = {'source': jnp.array([[11, 12, 13, -2, -2]])}
  # Each proposal as one compiled program (op by op, eager jnp compiles each operation).
  propose = lambda d, enc, tokens, pos: jax.jit(lambda e, q, at: d.propose(
      {}, e, d.init_cache(1, 8), q, at, None, None, cfg))(enc, tokens, pos)
  p = propose(draft, source, seq, jnp.array([0]))
  assert p.state['window'].tolist() == [[[11, 12, 13], [12, 13, 0]]]
  assert p.state['pool'][0, 0].tolist() == [11, 12, 13]  # the source's n-gram seeds the pool
  # A decoder-only target (no source) at position 3 of 5 6 7 8.
  plain = LookaheadDraft(20, window=3, ngram=3, guesses=1, pool=8, source=False)
  seq = jnp.array([[5, 6, 7, 8, 0, 0, 0, 0]])
  p = propose(plain, source, seq, jnp.array([3]))
  assert p.state['window'].tolist() == [[[6, 7, 8], [7, 8, 8]]]


def test_the_summary_says_lookahead_calibrates_nothing_without_offering_tree_auto():
  """--gamma auto (the default) has nothing to choose for lookahead, whose tree its W, N, G
  shape; --tree auto, which it refuses, is named only for a tree given by flags."""
  job = decode.parse_config(['--draft', 'lookahead:4,4,4'])
  reason = tree_checks.given_tree_reason(job, job.token_tree)
  assert 'its own tree of 24 nodes (gamma 6' in reason and '--tree auto' not in reason
  plain = decode.parse_config(['--tree-nodes', '8', '--tree-depth', '4'])
  assert '--tree auto picks' in tree_checks.given_tree_reason(plain, plain.token_tree)


def _lines(task, count=12):
  return _test_lines(f'{task}_', count)


@pytest.mark.parametrize('task', ['demo', 'manpages'])
def test_greedy_lookahead_is_the_targets_on_the_encoder_decoder_tasks(demo_pair, manpages_pair,
                                                                     task):
  target, tp, _, _ = demo_pair if task == 'demo' else manpages_pair
  draft, dp = drafts.resolve_draft('lookahead', target, f'{task}_target', None)
  inputs = _lines(task)
  kw = dict(max_decode_len=24, slots=4)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, tree=draft.tree_spec(), **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0


def test_greedy_lookahead_is_the_targets_on_the_decoder_only_pair():
  target, tp = checkpoints.load_model('manlm_target', DEFAULT_CHECKPOINTS['manlm_target'])
  vocab = checkpoints.load_tokenizer(bundled('manlm_target').vocab, target)
  with open(os.path.join(MANLM_ASSETS, 'test.jsonl'), encoding='utf-8') as f:
    rows = [json.loads(line)['inputs'] for line in f][:12]
  prompts = jnp.asarray(tokenize(vocab, rows, 32, False)[0])
  draft, dp = drafts.resolve_draft('lookahead:4,3,3', target, 'manlm_target', None)
  kw = dict(max_decode_len=24, slots=4)
  ref = specjax.autoregressive_decode(target, tp, prompts, **kw)
  out = specjax.speculative_decode(target, tp, draft, dp, prompts, tree=draft.tree_spec(), **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0


N, STEPS = 20_000, 3
PROMPT = [3, 4, 3, 5, 3, 2, 4, 3]


def _draws(config, slots=None, rows=N):
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(10), 1.5)
  draft = LookaheadDraft(6, window=3, ngram=2, guesses=2, pool=8, source=False)
  prompt = jnp.tile(jnp.array([PROMPT]), (rows, 1))
  out = specjax.speculative_decode(target, tp, draft, {}, prompt, tree=draft.tree_spec(),
                                   max_decode_len=STEPS, sampling=config, slots=slots,
                                   rng=jax.random.PRNGKey(4))
  expected = enumerate_markov(target.transition_probs(tp, config), PROMPT[-1], STEPS)
  return np.asarray(out.tokens), expected, out


@pytest.mark.parametrize('config', [T1, T07], ids=['t1', 't0.7-top3-top0.9'])
def test_sampled_lookahead_follows_the_target_on_the_first_three_tokens(config):
  tokens, expected, out = _draws(config)
  assert chi_square_pvalue(tokens, expected) > 1e-3
  assert int(out.stats.accepted.sum()) > 0


def test_a_lookahead_tree_under_a_rule_that_keeps_the_residual_is_rejected(monkeypatch,
                                                                          fresh_programs):
  """The negative control: the same test on lookahead's tree fails the broken rule."""
  monkeypatch.setattr(tree_accept, 'residual', lambda r, q, q_scale=1.0: r)
  tokens, expected, _ = _draws(T1)
  assert chi_square_pvalue(tokens, expected) < 1e-6


def test_a_refilled_row_starts_afresh_so_its_sampled_output_does_not_depend_on_the_slot():
  fixed, _, _ = _draws(T1, rows=12)
  refilled, _, _ = _draws(T1, slots=3, rows=12)
  np.testing.assert_array_equal(refilled, fixed)


@pytest.mark.parametrize('args, named', [
    (['--draft', 'lookahead:5,1,4'], 'N in 2..8'),
    (['--draft', 'lookahead:5,3'], 'lookahead:W,N,G'),
    (['--draft', 'lookahead:0,3,4'], 'W in 1..32'),
    (['--draft', 'lookahead', '--gamma', '3'], 'drop --gamma'),
    (['--draft', 'lookahead', '--tree-nodes', '4', '--tree-depth', '2'],
     'drop --tree-nodes and --tree-depth'),
], ids=['n-1', 'two-values', 'w-0', 'gamma', 'tree'])
def test_bad_lookahead_settings_are_one_line_errors_before_any_model_loads(
    capsys, monkeypatch, args, named):
  def no_load(*a, **k):
    raise AssertionError('a model was loaded')
  monkeypatch.setattr(decode_job, 'load_pair', no_load)
  assert decode.main(['--quiet'] + args) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: ') and '\n' not in err and named in err, err
