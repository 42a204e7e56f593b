"""EAGLE heads: one decoder layer drafts the target's next hidden state from its last.

Greedy chains, static trees and dynamic trees are the target's own output on both bundled
pairs' test lines (with refill); each call's accepted drafts are exactly those of the head
on a teacher-forced pass of the target's own hidden states (a head that read its own
guesses where the target's are known would propose others); sampled, the first three
tokens follow the target's distribution (chi-square against enumerated probabilities; a
broken rule is rejected by the same test); python -m specjax.train_draft --kind eagle
trains a head that accepts more than where it started, a killed run resumes with nothing
lost, and the CLI decodes with it (--draft eagle:PATH). Decoder-only targets (Llama,
GPT-2) take a head of their own layer: greedy identical, sampled by the same test."""
import json
import os
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import decode, train_draft
from specjax.core import acceptance, tree, tree_accept
from specjax.drafting import data as data_lib
from specjax.drafting import eagle, fit, heads_io
from specjax.job import drafts
from specjax.proposers.eagle import EagleHead
from stats_util import chi_square_pvalue, enumerate_lm, enumerate_t5, tiny_lm, tiny_t5
from train_draft_util import train_on_demo_lines
from test_lm_speculative import _pair as lm_pair
from test_lm_speculative import _prompts as lm_prompts
from test_tree_decode import _demo_lines, _test_lines


@pytest.mark.parametrize('shape', [None, '2,2,1', tree.DynamicTree(8, 3, 2)],
                         ids=['chain3', 'tree2-2-1', 'dynamic8-3-2'])
def test_greedy_eagle_is_the_targets_on_demo_lines(demo_pair, shape):
  target, tp, _, _ = demo_pair
  inputs = _demo_lines(16)
  kw = dict(max_decode_len=20, slots=8)  # refill: 16 inputs through 8 rows
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  head, hp = drafts.resolve_draft('eagle', target, 'demo_target', None)  # the bundled
  out = specjax.speculative_decode(target, tp, head, hp, inputs, tree=shape,
                                   gamma=3 if shape is None else None, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  # the bundled head's tokens were accepted: more than one per call on these lines
  assert float(out.stats.accepted.sum()) > float(out.stats.target_calls.sum())


def test_greedy_eagle_is_the_targets_on_manpages_lines(manpages_pair):
  target, tp, _, _ = manpages_pair
  inputs = _test_lines('manpages_', 8)
  kw = dict(max_decode_len=16)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  head, hp = drafts.resolve_draft('eagle', target, 'manpages_target', None)
  out = specjax.speculative_decode(target, tp, head, hp, inputs, gamma=4, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0


def _teacher_forced_drafts(head):
  """drafts(tp, hp, src [1, S], seq [1, T]) -> [1, T], one compiled program: the head's top
  token when the root is at t, from the token at t and the target's hidden state at t - 1
  (zero at 0), its cache filled likewise (one teacher-forced pass of both). Causal: what
  follows t in seq (padding, say) does not change the draft at t."""
  target = head.target

  @jax.jit
  def drafts(tp, hp, src, seq):
    width = seq.shape[1]
    encoded = target.encode(tp, src)
    _, _, f = target.decode(tp, encoded, target.init_cache(1, width), seq,
                            jnp.zeros((1,), jnp.int32), return_hidden=True)  # [1, T, H]
    feats = jnp.concatenate([jnp.zeros_like(f[:, :1]), f[:, :-1]], axis=1)
    _, logits, _ = head.run({'target': tp, 'own': hp}, {'target': encoded},
                            head.init_cache(1, width), seq, feats, jnp.zeros((1,), jnp.int32))
    return jnp.argmax(logits, -1)

  return drafts


def _expected_accepted(drafts, hp, tp, src, tokens, width) -> int:
  """What a one-token chain must get accepted, greedy, on the target alone's output
  `tokens` for the input src [S], from `_teacher_forced_drafts` over the output padded to
  `width` (one shape for every row)."""
  seq = np.zeros((1, width), np.int32)
  seq[0, 1:len(tokens) + 1] = tokens
  proposed = np.asarray(drafts(tp, hp, jnp.asarray([src]), jnp.asarray(seq)))[0]
  root, accepted = 0, 0
  while root < len(tokens):
    hit = int(proposed[root] == int(seq[0, root + 1]))
    accepted, root = accepted + hit, root + hit + 1
  return accepted


def test_the_head_reads_the_targets_hidden_states_of_every_kept_token():
  """Greedy, one draft per call: each row's accepted drafts are exactly those of the head
  on a teacher-forced pass of the target's hidden states, counted here from the target
  alone's output. A random head, whose guesses are far from the target's states: where it
  kept its own guess of a kept token's state, or caught up one position short, these
  counts differ (both tried)."""
  target, tp = tiny_t5(32, seed=4, logit_scale=2.0)
  head = EagleHead(target)
  hp = head.init(jax.random.PRNGKey(4))
  rng = np.random.default_rng(0)
  src = rng.integers(3, 32, (6, 5)).astype(np.int32)
  kw = dict(max_decode_len=12)
  ref = specjax.autoregressive_decode(target, tp, jnp.asarray(src), **kw)
  out = specjax.speculative_decode(target, tp, head, hp, jnp.asarray(src), gamma=1, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  drafts = _teacher_forced_drafts(head)
  want = [_expected_accepted(drafts, hp, tp, s.tolist(),
                             np.asarray(ref.tokens)[b, :int(n)].tolist(), 1 + 12)
          for b, (s, n) in enumerate(zip(src, np.asarray(ref.lengths)))]
  assert np.asarray(out.stats.accepted).tolist() == want
  assert sum(want) >= 6


# The chi-square: a t5_tiny over 5 tokens, its EAGLE head started from its last layer.
V, STEPS, N = 5, 3, 20_000
SOURCE = [2, 3, 4, 1]


def _samples(model, params, head, hp, shape, rng=2):
  src = jnp.tile(jnp.array([SOURCE], jnp.int32), (N, 1))
  out = specjax.speculative_decode(
      model, params, head, hp, src, gamma=None if shape else 2, tree=shape,
      max_decode_len=STEPS, sampling=specjax.SamplingConfig(temperature=1.0),
      rng=jax.random.PRNGKey(rng))
  return np.asarray(out.tokens), out


@pytest.mark.parametrize('shape', [None, '2,1'], ids=['chain2', 'tree2-1'])
def test_sampled_eagle_follows_the_target_on_the_first_three_tokens(shape, fresh_programs,
                                                                   monkeypatch):
  model, params = tiny_t5(V, seed=8, logit_scale=3.0)
  expected = enumerate_t5(model, params, SOURCE, STEPS)
  head = EagleHead(model)
  hp = head.from_target(params)
  tokens, out = _samples(model, params, head, hp, shape)
  assert chi_square_pvalue(tokens, expected) > 1e-3
  assert int(out.stats.accepted.sum()) > N // 10  # the head's tokens were accepted
  if shape is None:  # a rule that accepts every draft token: the head's distribution
    monkeypatch.setattr(acceptance, 'accept_draft',
                        lambda p_x, q_x, r, q_scale=1.0: jnp.ones(p_x.shape, bool))
  else:  # a tree rule that draws from p itself after a rejected child
    monkeypatch.setattr(tree_accept, 'residual', lambda p, q, q_scale=1.0: p)
  broken, _ = _samples(model, params, head, hp, shape)
  assert chi_square_pvalue(broken, expected) < 1e-6


def test_a_stopped_training_resumes_with_nothing_lost(tmp_path):
  """A run stopped right after the checkpoint of step 2 (an exception out of the loop),
  then rerun on the same work directory: its head equals an uninterrupted run's, bit for
  bit, and it moved from where it started."""
  target, tp = tiny_t5(32, seed=0, logit_scale=1.0)
  rng = np.random.default_rng(0)
  inputs = rng.integers(3, 32, (12, 6)).astype(np.int32)
  inputs[:, -1] = 1
  head = EagleHead(target)
  settings = fit.Training(steps=6, batch=4, learning_rate=1e-2, warmup_steps=1,
                          save_every=2)

  def run(workdir, **kw):
    data = data_lib.decodes(target, tp, inputs, str(workdir / 'decodes'), 8,
                                   chunk=8, progress=False)
    return eagle.train(head, tp, data, str(workdir), settings, progress=False, **kw)

  class Stop(Exception):
    pass

  def stop(step):
    if step == 2:
      raise Stop

  whole = run(tmp_path / 'whole')
  with pytest.raises(Stop):
    run(tmp_path / 'stopped', on_save=stop)
  assert sorted(os.listdir(tmp_path / 'stopped' / 'checkpoints')) == ['2']
  resumed = run(tmp_path / 'stopped')
  jax.tree.map(np.testing.assert_array_equal, resumed['heads'], whole['heads'])
  assert resumed['loss'] == whole['loss']
  start = head.from_target(tp)
  assert float(jnp.abs(whole['heads']['fc']['kernel'] - start['fc']['kernel']).max()) > 0


def test_train_draft_cli_trains_a_head_that_accepts_more_and_decodes_with_it(tmp_path,
                                                                              capsys):
  """A few steps of python -m specjax.train_draft --kind eagle on the demo target's own
  decodes of test lines it will decode, then the decode CLI with --draft eagle:PATH:
  identical to the target, with more accepted tokens than the head it started from (the
  target's last layer); one-line refusals of what cannot run."""
  src, args, summary = train_on_demo_lines(tmp_path, capsys, 'eagle', 30, '2e-3', 30)
  path = summary['output']
  meta, params = heads_io.load_heads(path)
  assert meta['kind'] == 'eagle' and meta['examples'] == 24 and meta['hidden'] == 256
  assert meta['passes'] == 1  # the default: the target's states only
  # A rerun in the run's directory with another setting would resume its checkpoints.
  assert train_draft.main(args + ['--eagle-passes', '2', '--output',
                                  str(tmp_path / 'other')]) == 2
  err = capsys.readouterr().err.strip()
  assert '--eagle-passes 1 (now 2)' in err and 'another --workdir' in err and '\n' not in err
  assert params['fc']['kernel'].dtype == jnp.bfloat16  # what ships is stored small
  code = decode.main(['--input', str(src), '--draft', f'eagle:{path}', '--gamma', '3',
                      '--max-decode-len', '16', '--quiet', '--json'])
  assert code == 0, capsys.readouterr().err
  result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert result['identical_to_target'] is True
  for bad, named in ((['--draft', f'eagle:{path}', '--draft-threshold', '0.3'],
                      'drop --draft-threshold'),
                     (['--draft', f'medusa:{path}'], 'pass --draft eagle:'),
                     (['--draft', f'eagle:{tmp_path}'], 'train_draft')):
    assert decode.main(['--input', str(src), '--quiet'] + bad) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and '\n' not in err
  from specjax import checkpoints  # pylint: disable=import-outside-toplevel
  from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS  # pylint: disable=import-outside-toplevel
  target, tp = checkpoints.load_model('demo_target', DEFAULT_CHECKPOINTS['demo_target'])
  head = EagleHead(target)
  start = specjax.speculative_decode(target, tp, head, head.from_target(tp),
                                     _demo_lines(24), gamma=3, max_decode_len=16)
  assert result['accepted_tokens'] > int(start.stats.accepted.sum())


def test_an_eagle_head_is_refused_for_a_target_without_layer_pieces():
  with pytest.raises(ValueError, match='T5 and decoder-only') as e:
    EagleHead(types.SimpleNamespace(config=None))
  assert '\n' not in str(e.value)


@pytest.mark.parametrize('family, shape', [('llama', None), ('gpt2', '2,1,1'),
                                           ('llama', tree.DynamicTree(6, 3, 2))],
                         ids=['llama-chain3', 'gpt2-tree2-1-1', 'llama-dynamic6-3-2'])
def test_greedy_eagle_is_the_targets_for_decoder_only_pairs(family, shape):
  """A decoder-only target (Llama's rotary attention, GPT-2's learned positions and
  LayerNorm): the head is one of its layers, its final norm and its projection."""
  target, tp, _, _ = lm_pair(family, vocab=32, eos_bias=0.6 if family == 'llama' else 1.6)
  inputs = lm_prompts(32)
  kw = dict(max_decode_len=16, slots=2)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  head = EagleHead(target)
  hp = head.from_target(tp)
  assert set(hp['norm']) == ({'scale', 'bias'} if family == 'gpt2' else {'scale'})
  out = specjax.speculative_decode(target, tp, head, hp, inputs,
                                   gamma=3 if shape is None else None, tree=shape, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0


def test_sampled_eagle_follows_a_decoder_only_target_on_the_first_three_tokens(
    fresh_programs, monkeypatch):
  """A Llama-style target over 5 tokens, the head from its last layer, a chain of 2: the
  first three tokens after the prompt against their enumerated probabilities; an
  accept-all rule is rejected by the same test."""
  model, params = tiny_lm(V, num_layers=2, seed=8, logit_scale=3.0)
  prompt = [2, 3, 4]
  expected = enumerate_lm(model, params, prompt, STEPS)
  head = EagleHead(model)
  hp = head.from_target(params)

  def samples():
    out = specjax.speculative_decode(
        model, params, head, hp, jnp.tile(jnp.array([prompt]), (N, 1)), gamma=2,
        max_decode_len=STEPS, sampling=specjax.SamplingConfig(temperature=1.0),
        rng=jax.random.PRNGKey(2))
    return np.asarray(out.tokens), out

  tokens, out = samples()
  assert chi_square_pvalue(tokens, expected) > 1e-3
  assert int(out.stats.accepted.sum()) > N // 10
  monkeypatch.setattr(acceptance, 'accept_draft',
                      lambda p_x, q_x, r, q_scale=1.0: jnp.ones(p_x.shape, bool))
  broken, _ = samples()
  assert chi_square_pvalue(broken, expected) < 1e-6


def test_a_second_pass_learns_from_the_heads_own_states(tmp_path, capsys):
  """--eagle-passes 2: the loss is the mean of the first pass's (features: the target's f
  at t - 1) and a second pass's whose feature at t is the first pass's g at t - 1, the
  input of a chain step at depth 2, written out here from `EagleHead.run`; the reported
  agreement stays the first pass's. A second pass changes the loss and its gradient."""
  target, tp = tiny_t5(32, seed=0, logit_scale=3.0)
  rng = np.random.default_rng(1)
  inputs = rng.integers(3, 32, (6, 5)).astype(np.int32)
  inputs[:, -1] = 1
  inputs, seqs, spans = map(jnp.asarray, data_lib.decodes(
      target, tp, inputs, str(tmp_path / 'decodes'), 6, chunk=8, progress=False))
  head = EagleHead(target)
  own = head.init(jax.random.PRNGKey(3))
  # Each computation below is compiled as one program (not run operation by operation).
  loss = {p: jax.jit(lambda o, p=p: eagle.loss_fn(o, head, tp, inputs, seqs, spans,
                                                  passes=p)) for p in (1, 2)}
  one, acc_one = loss[1](own)
  two, acc_two = loss[2](own)

  @jax.jit
  def teacher_forced(own):
    batch, width = seqs.shape
    encoded = target.encode(tp, inputs)
    logits, _, f = target.decode(tp, encoded, target.init_cache(batch, width), seqs,
                                 jnp.zeros((batch,), jnp.int32), return_hidden=True)

    def head_over(states):  # feature at t: states at t - 1 (zero at 0)
      feats = jnp.pad(states[:, :-1], ((0, 0), (1, 0), (0, 0)))
      g, head_logits, _ = head.run({'target': tp, 'own': own}, {'target': encoded},
                                   head.init_cache(batch, width), seqs, feats,
                                   jnp.zeros((batch,), jnp.int32))
      return g, head_logits

    g1, _ = head_over(f)
    g2, logits2 = head_over(g1)
    return logits, f, g2, logits2

  logits, f, g2, logits2 = teacher_forced(own)
  width = seqs.shape[1]
  t = np.arange(width)[None]
  w = ((t >= np.asarray(spans)[:, :1] - 1) & (t + 1 < np.asarray(spans)[:, 1:])).astype(
      np.float32)
  d = np.abs(np.asarray(g2 - f))
  smooth = np.where(d < 1, 0.5 * d * d, d - 0.5).mean(-1)
  cross = -(np.asarray(jax.nn.softmax(logits)) *
            np.asarray(jax.nn.log_softmax(logits2))).sum(-1)
  second = ((smooth * w).sum() + 0.1 * (cross * w).sum()) / w.sum()
  assert float(two) == pytest.approx((float(one) + second) / 2, rel=1e-4)
  assert abs(second - float(one)) > 1e-3  # the second pass read other features
  assert float(acc_two) == float(acc_one)
  grads = [jax.jit(jax.grad(lambda o, p=p: loss[p](o)[0]))(own) for p in (1, 2)]
  assert not np.allclose(grads[0]['fc']['kernel'], grads[1]['fc']['kernel'])
  with pytest.raises(ValueError, match='passes must be >= 1'):
    eagle.train(head, tp, (inputs, seqs, spans), str(tmp_path / 'w'), fit.Training(steps=1),
                progress=False, passes=0)
  src = tmp_path / 'in.txt'
  src.write_text('a line\n')
  assert train_draft.main(['--kind', 'medusa', '--eagle-passes', '2', '--input', str(src),
                           '--workdir', str(tmp_path / 'm')]) == 2
  err = capsys.readouterr().err.strip()
  assert "--eagle-passes is the EAGLE head's" in err and '\n' not in err
