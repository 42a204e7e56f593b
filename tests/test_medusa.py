"""Medusa heads: K heads on the target's last hidden state propose the next K tokens.

Greedy chains and Medusa trees are the target's own output on both bundled pairs' test
lines (with refill) and on Llama and GPT-2 targets; the heads read the hidden state the
verify call returns (a head that sees the next token's hidden state learns what a fresh
one proposes); sampled, the first three tokens follow the target's distribution
(chi-square against enumerated probabilities; a broken rule is rejected by the same test);
python -m specjax.train_draft trains heads that accept more than untrained ones, resumes a
killed run with nothing lost, and the CLI decodes with them (--draft medusa:PATH)."""
import json
import os
import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import decode, train_draft
from specjax.core import acceptance, tree, tree_accept
from specjax.drafting import data as data_lib
from specjax.drafting import heads_io, medusa
from specjax.job import drafts
from specjax.models.t5 import T5
from specjax.models.t5_config import t5_tiny
from specjax.proposers.medusa import MedusaHeads
from stats_util import chi_square_pvalue, enumerate_lm, tiny_lm
from train_draft_util import train_on_demo_lines
from test_lm_speculative import _pair as lm_pair
from test_lm_speculative import _prompts
from test_tree_decode import _demo_lines, _test_lines


def _random_heads(target, num=3, seed=0):
  heads = MedusaHeads(target, num)
  return heads, heads.init(jax.random.PRNGKey(seed), scale=1.0)


@pytest.mark.parametrize('shape', [None, '2,2,1', tree.DynamicTree(8, 3, 2)],
                         ids=['chain3', 'medusa-tree2-2-1', 'dynamic8-3-2'])
def test_greedy_medusa_is_the_targets_on_demo_lines(demo_pair, shape):
  target, tp, _, _ = demo_pair
  inputs = _demo_lines(16)
  kw = dict(max_decode_len=20, slots=8)  # refill: 16 inputs through 8 rows
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  heads, hp = drafts.resolve_draft('medusa', target, 'demo_target', None)  # the bundled
  out = specjax.speculative_decode(target, tp, heads, hp, inputs, tree=shape,
                                   gamma=3 if shape is None else None, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0  # the bundled heads' tokens were accepted


def test_greedy_medusa_is_the_targets_on_manpages_lines(manpages_pair):
  target, tp, _, _ = manpages_pair
  inputs = _test_lines('manpages_', 8)
  kw = dict(max_decode_len=16)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  heads, hp = drafts.resolve_draft('medusa', target, 'manpages_target', None)
  out = specjax.speculative_decode(target, tp, heads, hp, inputs, gamma=4, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0


@pytest.mark.parametrize('family, shape', [('llama', '2,1'), ('gpt2', None)],
                         ids=['llama-tree2-1', 'gpt2-chain2'])
def test_greedy_medusa_is_the_targets_for_decoder_only_pairs(family, shape):
  target, tp, _, _ = lm_pair(family, vocab=32, eos_bias=0.6 if family == 'llama' else 1.6)
  inputs = _prompts(32)
  kw = dict(max_decode_len=16, slots=2)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  heads, hp = _random_heads(target, 2)
  out = specjax.speculative_decode(target, tp, heads, hp, inputs, tree=shape,
                                   gamma=2 if shape is None else None, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)


def _expected_accepted(target, tp, heads, hp, prompt, tokens, gamma: int) -> int:
  """What the heads must get accepted, greedy, on the target alone's output `tokens`
  after `prompt`: each call proposes head k's top token on the target's hidden state
  after the token before the root (the one whose logits chose the root; all zero before
  the first call), and accepts the leading matches."""
  seq = jnp.asarray([list(prompt) + list(tokens)])
  _, _, hidden = target.decode(tp, {}, target.init_cache(1, seq.shape[1]), seq,
                               jnp.zeros((1,), jnp.int32), return_hidden=True)  # [1, T, D]
  root, end, accepted = len(prompt) - 1, len(prompt) + len(tokens), 0
  while root + 1 < end:
    h = hidden[0, root - 1] if root > len(prompt) - 1 else jnp.zeros_like(hidden[0, 0])
    state = {'hidden': h[None], 'at': jnp.array([root], jnp.int32)}
    proposal = np.asarray(jnp.argmax(heads.logits({'target': tp, 'own': hp}, state,
                                                  jnp.array([root])), -1))[0, :gamma]
    n = 0
    while n < gamma and root + 1 + n < end and int(seq[0, root + 1 + n]) == proposal[n]:
      n += 1
    accepted, root = accepted + n, root + n + 1
  return accepted


def test_heads_read_the_hidden_state_after_the_last_kept_token():
  """Greedy, each call's accepted drafts are exactly those of the heads on the target's
  hidden state after the token before the root, counted here from the target alone's
  output and a teacher-forced pass; the hidden state of another token (the call's
  first, or the previous call's) proposes others."""
  target, tp = tiny_lm(5, num_layers=1, seed=3, logit_scale=4.0)
  heads = MedusaHeads(target, 3)
  hp = heads.init(jax.random.PRNGKey(0), scale=0.5)
  prompts = np.array([[2, 3, 4], [4, 4, 2], [3, 2, 2], [2, 2, 2], [3, 3, 4], [4, 2, 3]])
  kw = dict(max_decode_len=12)
  ref = specjax.autoregressive_decode(target, tp, jnp.asarray(prompts), **kw)
  out = specjax.speculative_decode(target, tp, heads, hp, jnp.asarray(prompts), gamma=3, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  want = [_expected_accepted(target, tp, heads, hp, p.tolist(),
                             np.asarray(ref.tokens)[b, :int(n)].tolist(), 3)
          for b, (p, n) in enumerate(zip(prompts, np.asarray(ref.lengths)))]
  assert np.asarray(out.stats.accepted).tolist() == want
  assert sum(want) >= 3


# The chi-square: a 2-layer decoder-only target over 5 tokens, 2 random Medusa heads.
V, STEPS, N = 5, 3, 20_000
PROMPT = [2, 3, 4]


def _samples(model, params, heads, hp, shape, rng=2):
  prompt = jnp.tile(jnp.array([PROMPT]), (N, 1))
  out = specjax.speculative_decode(
      model, params, heads, hp, prompt, gamma=None if shape else 2, tree=shape,
      max_decode_len=STEPS, sampling=specjax.SamplingConfig(temperature=1.0),
      rng=jax.random.PRNGKey(rng))
  return np.asarray(out.tokens), out


@pytest.mark.parametrize('shape', [None, '2,1'], ids=['chain2', 'medusa-tree2-1'])
def test_sampled_medusa_follows_the_target_on_the_first_three_tokens(shape, fresh_programs,
                                                                    monkeypatch):
  model, params = tiny_lm(V, num_layers=2, seed=8, logit_scale=3.0)
  expected = enumerate_lm(model, params, PROMPT, STEPS)
  heads = MedusaHeads(model, 2)
  hp = heads.init(jax.random.PRNGKey(5), scale=2.0)
  tokens, out = _samples(model, params, heads, hp, shape)
  assert chi_square_pvalue(tokens, expected) > 1e-3
  assert int(out.stats.accepted.sum()) > N // 10  # the heads' tokens were accepted
  if shape is None:  # a rule that accepts every draft token: the heads' distribution
    monkeypatch.setattr(acceptance, 'accept_draft',
                        lambda p_x, q_x, r, q_scale=1.0: jnp.ones(p_x.shape, bool))
  else:  # a tree rule that draws from p itself after a rejected child
    monkeypatch.setattr(tree_accept, 'residual', lambda p, q, q_scale=1.0: p)
  broken, _ = _samples(model, params, heads, hp, shape)
  assert chi_square_pvalue(broken, expected) < 1e-6


def _tiny_data(num=12, seed=0):
  target = T5(t5_tiny)
  tp = target.init(jax.random.PRNGKey(seed))
  rng = np.random.default_rng(seed)
  inputs = rng.integers(3, 32, (num, 6)).astype(np.int32)
  inputs[:, -1] = 1
  return target, tp, inputs


SETTINGS = medusa.MedusaTraining(steps=6, batch=4, learning_rate=1e-2, warmup_steps=1,
                                 save_every=2)


def test_a_killed_training_resumes_with_nothing_lost(tmp_path, monkeypatch):
  """SIGKILL right after the checkpoint of step 2, then a rerun of the same work
  directory: its heads equal an uninterrupted run's, bit for bit, and the target's decodes
  of the first run are read back, not decoded again."""
  target, tp, inputs = _tiny_data()
  heads = MedusaHeads(target, 2)

  def run(workdir, **kw):
    data = data_lib.decodes(target, tp, inputs, str(workdir / 'decodes'), 8,
                                   chunk=8, progress=False)
    return medusa.train(heads, tp, data, str(workdir), SETTINGS, progress=False, **kw)

  whole = run(tmp_path / 'whole')
  killed = tmp_path / 'killed'
  script = textwrap.dedent(f'''
      import os, signal, sys
      sys.path.insert(0, {os.path.dirname(__file__)!r})
      import numpy as np, pathlib
      import test_medusa as t
      from specjax.drafting import data as data_lib, medusa
      from specjax.proposers.medusa import MedusaHeads
      target, tp, inputs = t._tiny_data()
      workdir = pathlib.Path({str(killed)!r})
      data = data_lib.decodes(target, tp, inputs, str(workdir / 'decodes'), 8,
                                     chunk=8, progress=False)
      def die(step):
        if step == 2:
          os.kill(os.getpid(), signal.SIGKILL)
      medusa.train(MedusaHeads(target, 2), tp, data, str(workdir), t.SETTINGS,
                   progress=False, on_save=die)
      ''')
  done = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                        timeout=300, check=False)
  assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
  assert sorted(os.listdir(killed / 'checkpoints')) == ['2']
  monkeypatch.setattr(data_lib.api, 'autoregressive_decode',
                      lambda *a, **k: pytest.fail('decoded again'))
  resumed = run(killed)
  for name in ('w', 'b'):
    np.testing.assert_array_equal(resumed['heads'][name], whole['heads'][name])
  assert resumed['loss'] == whole['loss']
  # the heads moved: training did something
  assert float(np.abs(np.asarray(whole['heads']['w'])).max()) > 0


def test_train_draft_cli_trains_heads_that_accept_more_and_decodes_with_them(tmp_path,
                                                                              capsys):
  """A few steps of python -m specjax.train_draft on the demo target's own decodes of
  test lines it will decode, then the decode CLI with --draft medusa:PATH: identical to
  the target, with more accepted tokens than untrained (zero-residual) heads; the output
  directory is never overwritten, and a missing or mismatched one is a one-line error."""
  src, args, summary = train_on_demo_lines(tmp_path, capsys, 'medusa', 40, '3e-3', 20)
  path = summary['output']
  meta, params = heads_io.load_heads(path)
  assert meta['kind'] == 'medusa' and meta['num_heads'] == 4 and meta['examples'] == 24
  assert params['w'].dtype == jnp.bfloat16  # what ships is stored small
  assert train_draft.main(args) == 2  # the heads exist: nothing is overwritten
  err = capsys.readouterr().err.strip()
  assert 'exists' in err and '\n' not in err
  assert train_draft.main(['--input', str(tmp_path / 'none.txt'), '--workdir',
                           str(tmp_path / 'other')]) == 2
  err = capsys.readouterr().err.strip()
  assert 'none.txt does not exist' in err and '\n' not in err
  accepted = {}
  for name, spec in (('trained', f'medusa:{path}'), ('missing', f'medusa:{tmp_path}')):
    code = decode.main(['--input', str(src), '--draft', spec, '--gamma', '3',
                        '--max-decode-len', '16', '--quiet', '--json'])
    if name == 'missing':
      assert code == 2
      err = capsys.readouterr().err.strip()
      assert 'train_draft' in err and '\n' not in err
      continue
    assert code == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result['identical_to_target'] is True
    accepted[name] = result['accepted_tokens']
  for bad, named in ((['--draft-threshold', '0.3'], 'drop --draft-threshold'),
                     (['--gamma', '6'], 'heads reach 4')):
    assert decode.main(['--input', str(src), '--draft', f'medusa:{path}', '--quiet'] + bad) == 2
    err = capsys.readouterr().err.strip()
    assert named in err and '\n' not in err
  from specjax import checkpoints  # pylint: disable=import-outside-toplevel
  from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS  # pylint: disable=import-outside-toplevel
  target, tp = checkpoints.load_model('demo_target', DEFAULT_CHECKPOINTS['demo_target'])
  untrained = MedusaHeads(target, 4)
  inputs = _demo_lines(24)
  base = specjax.speculative_decode(target, tp, untrained, untrained.init(
      jax.random.PRNGKey(0)), inputs, gamma=3, max_decode_len=16)
  assert accepted['trained'] > int(base.stats.accepted.sum())
