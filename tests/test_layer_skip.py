"""Layer-skip self-speculation: the target's own first M decoder layers draft for it.

Greedy chains and trees are the target's own output on both bundled pairs'
test lines (with refill) and on Llama and GPT-2 targets; more of the target's layers accept
more (the draft reads the target's encoding and params, not noise); sampled, the first three
tokens follow the target's distribution (chi-square against enumerated probabilities,
with a broken rule that the same test rejects); an M outside 1 .. L - 1 and a malformed
spec are one-line errors."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import decode
from specjax.core import acceptance
from specjax.job import drafts
from specjax.proposers.layer_skip import LayerSkip, truncated
from stats_util import chi_square_pvalue, enumerate_lm, tiny_lm
from test_lm_speculative import _pair as lm_pair
from test_lm_speculative import _prompts
from test_tree_decode import _demo_lines, _test_lines


@pytest.mark.parametrize('shape', [None, '2,2,1'], ids=['chain4', 'static2-2-1'])
def test_greedy_layer_skip_is_the_targets_on_demo_lines(demo_pair, shape):
  target, tp, _, _ = demo_pair
  inputs = _demo_lines(16)
  kw = dict(max_decode_len=20, slots=8)  # refill: 16 inputs through 8 rows
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, LayerSkip(target, 2), {}, inputs, tree=shape,
                                   gamma=4 if shape is None else None, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0


def test_more_of_the_targets_layers_accept_more_on_manpages_lines(manpages_pair):
  """Greedy-exact at every M, and the tokens per call rise with M: the draft is the
  target's own first layers over the target's encoding (drafting from noise, as a draft
  that missed the encoding would, accepts about nothing)."""
  target, tp, _, _ = manpages_pair
  inputs = _test_lines('manpages_', 8)
  kw = dict(max_decode_len=16)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  per_call = []
  for m in (1, 2):  # of the target's 3 decoder layers
    out = specjax.speculative_decode(target, tp, LayerSkip(target, m), {}, inputs, gamma=3,
                                     **kw)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    per_call.append(float(out.stats.tokens_per_call))
  assert 1.1 < per_call[0] < per_call[1], per_call


@pytest.mark.parametrize('family, shape', [('llama', None), ('gpt2', '2,1,1')],
                         ids=['llama-chain3', 'gpt2-tree2-1-1'])
def test_greedy_layer_skip_is_the_targets_for_decoder_only_pairs(family, shape):
  target, tp, _, _ = lm_pair(family, vocab=32, eos_bias=0.6 if family == 'llama' else 1.6)
  inputs = _prompts(32)
  kw = dict(max_decode_len=16, slots=2)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, LayerSkip(target, 1), {}, inputs,
                                   gamma=3 if shape is None else None, tree=shape, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0


def test_the_cut_model_keeps_the_targets_params_tree_and_refuses_a_bad_depth(demo_pair):
  target = demo_pair[0]
  cut = truncated(target, 3)
  assert cut.config.num_decoder_layers == 3 and target.config.num_decoder_layers == 4
  assert cut.config.num_encoder_layers == target.config.num_encoder_layers
  assert set(cut.cache_axes()) == {'layers_0', 'layers_1', 'layers_2'}
  for m in (0, 4):
    with pytest.raises(ValueError, match=r'1 <= M < 4.*layerskip:M with M in 1\.\.3'):
      LayerSkip(target, m)


# The chi-square: a 3-layer decoder-only target over 5 tokens, its first layer drafting.
V, STEPS, N = 5, 3, 20_000
PROMPT = [2, 3, 4]


def _tiny_lm():
  # Larger logits: the first layer's joint of three tokens is then 0.54 in total variation
  # from the target's (EOS first 0.07, no outcome above 0.22).
  return tiny_lm(V, num_layers=3, seed=8, logit_scale=3.0)


def _enumerated(model, params):
  return enumerate_lm(model, params, PROMPT, STEPS)


def _layer_skip_samples(model, params, shape):
  prompt = jnp.tile(jnp.array([PROMPT]), (N, 1))
  out = specjax.speculative_decode(
      model, params, LayerSkip(model, 1), {}, prompt, gamma=None if shape else 3, tree=shape,
      max_decode_len=STEPS, sampling=specjax.SamplingConfig(temperature=1.0),
      rng=jax.random.PRNGKey(2))
  return np.asarray(out.tokens), out


@pytest.mark.parametrize('shape', [None, '2,1,1'], ids=['chain3', 'tree2-1-1'])
def test_sampled_layer_skip_follows_the_target_on_the_first_three_tokens(shape,
                                                                       fresh_programs,
                                                                       monkeypatch):
  model, params = _tiny_lm()
  expected = _enumerated(model, params)
  tokens, out = _layer_skip_samples(model, params, shape)
  assert chi_square_pvalue(tokens, expected) > 1e-3
  assert int(out.stats.accepted.sum()) > N // 4  # the first layer's drafts were accepted
  # Negative control: a rule that accepts every draft token (the first layer's
  # distribution, not the target's) is rejected by the same test.
  if shape is None:
    monkeypatch.setattr(acceptance, 'accept_draft',
                        lambda p_x, q_x, r, q_scale=1.0: jnp.ones(p_x.shape, bool))
    broken, _ = _layer_skip_samples(model, params, shape)
    assert chi_square_pvalue(broken, expected) < 1e-6


def test_cli_layer_skip_and_its_one_line_errors(tmp_path, capsys):
  src = tmp_path / 'in.txt'
  src.write_text('Open the file\nSave changes before closing?\nPrint the page\n')
  assert decode.main(['--input', str(src), '--draft', 'layerskip:3', '--gamma', '3',
                      '--max-decode-len', '16', '--json', '--quiet']) == 0
  summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert summary['identical_to_target'] is True and summary['draft'] == 'layerskip:3'
  assert summary['accepted_tokens'] > 0
  for spec, named in (('layerskip:4', '1 <= M < 4'), ('layerskip:x', 'layerskip:M')):
    assert decode.main(['--input', str(src), '--draft', spec, '--quiet']) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith('error:') and named in err and '\n' not in err
  assert drafts.model_name('layerskip:2') is None and drafts.is_builtin('layerskip:2')
