"""Scanned layers (`specjax.models.scan`): a scanned model decodes token for token as its
unrolled twin, greedy and sampled, chains and trees, with refill, for T5 1.0 / 1.1 and the
Llama and GPT-2 families; the layouts convert both ways; the program holds one layer."""
import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core.tree import DynamicTree
from specjax.models import scan
from specjax.models.lm import CausalLM
from specjax.models.lm_config import LMConfig
from specjax.models.t5 import STACKS, T5
from specjax.models.t5_config import t5_1_0_tiny, t5_tiny, t5_tiny_draft
from specjax.proposers.layer_skip import LayerSkip

T5_INPUTS = np.array([[5, 9, 12, 7, 3, 1, 0, 0], [8, 4, 1, 0, 0, 0, 0, 0],
                      [30, 21, 17, 11, 6, 25, 19, 1], [3, 3, 1, 0, 0, 0, 0, 0],
                      [12, 6, 9, 1, 0, 0, 0, 0]], np.int32)
LM_INPUTS = np.array([[5, 9, 12, 7, 3, 0], [8, 0, 0, 0, 0, 0], [30, 21, 17, 0, 0, 0],
                      [11, 6, 25, 19, 4, 2]], np.int32)
T1 = specjax.SamplingConfig(temperature=1.0)


def _scanned(model):
  return dataclasses.replace(model, config=dataclasses.replace(model.config, scan_layers=True))


def _t5(cfg, seed, layers=3):
  model = T5(cfg.replace(num_decoder_layers=layers, num_encoder_layers=2))
  params = model.init(jax.random.PRNGKey(seed))
  kernel = params['decoder'].get('logits_dense', {}).get('kernel')
  if kernel is not None:  # EOS likelier: rows stop at different steps
    params['decoder']['logits_dense']['kernel'] = kernel.at[:, 1].add(0.9)
  else:
    params['token_embedder']['embedding'] = params['token_embedder']['embedding'].at[1].mul(-2)
  return model, params


def _lm(family, seed, layers=3):
  extra = dict(rope_type='llama3', rope_factor=4.0, rope_original_max_len=16) if (
      family == 'llama') else dict(activation='gelu_new', tie_embeddings=True)
  cfg = LMConfig(family=family, vocab_size=32, eos_id=1, pad_id=0, max_len=64, head_dim=8,
                 emb_dim=32, num_heads=4, num_kv_heads=2 if family == 'llama' else 4,
                 num_layers=layers, mlp_dim=64, **extra)
  model = CausalLM(cfg)
  params = model.init(jax.random.PRNGKey(seed))
  if cfg.tie_embeddings:  # EOS likelier: rows stop at different steps
    params['embed']['embedding'] = params['embed']['embedding'].at[1].mul(-4 / 1.6)
  else:
    params['lm_head']['kernel'] = params['lm_head']['kernel'].at[:, 1].add(0.6)
  return model, params


NAMES = ('gpt2', 'llama', 't5_1_0', 't5_1_1')


@functools.lru_cache(maxsize=None)
def _pair(name):
  """(target, params, draft, params, inputs) of a family: unrolled models, made when a test
  first asks (not when the file is collected, by every worker)."""
  if name.startswith('t5'):
    target, tp = _t5(t5_tiny if name == 't5_1_1' else t5_1_0_tiny, 0)
    draft, dp = _t5(t5_tiny_draft, 1, layers=1)
    return target, tp, draft, dp, T5_INPUTS
  target, tp = _lm(name, 1)
  draft, dp = _lm(name, 2, layers=1)
  return target, tp, draft, dp, LM_INPUTS


def _stacks(model):
  return STACKS if isinstance(model, T5) else ((),)


def _to_scanned(model, params):
  return _scanned(model), scan.to_scanned(params, _stacks(model))


def _same(a, b):
  np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
  np.testing.assert_array_equal(np.asarray(a.lengths), np.asarray(b.lengths))


@pytest.mark.parametrize('name', NAMES)
def test_scanned_decodes_as_unrolled(name):
  """Greedy and T=1, a chain (refilled: 5 or 4 inputs through 2 rows) and a dynamic tree,
  scanned target and draft against unrolled ones; greedy also against the target alone."""
  target, tp, draft, dp, inputs = _pair(name)
  s_target, s_tp = _to_scanned(target, tp)
  s_draft, s_dp = _to_scanned(draft, dp)
  kw = dict(max_decode_len=10, slots=2)
  alone = specjax.autoregressive_decode(target, tp, inputs, **kw)
  assert len(set(np.asarray(alone.lengths).tolist())) > 1  # rows stop at different steps
  _same(specjax.autoregressive_decode(s_target, s_tp, inputs, **kw), alone)
  for sampling in (specjax.SamplingConfig(), T1):
    for shape in (dict(gamma=3), dict(tree=DynamicTree(nodes=6, depth=3, top=2))):
      run = dict(kw, sampling=sampling, rng=jax.random.PRNGKey(3), **shape)
      unrolled = specjax.speculative_decode(target, tp, draft, dp, inputs, **run)
      scanned = specjax.speculative_decode(s_target, s_tp, s_draft, s_dp, inputs, **run)
      _same(scanned, unrolled)
      np.testing.assert_array_equal(scanned.stats.target_calls, unrolled.stats.target_calls)
      if sampling.temperature == 0:
        _same(scanned, alone)


def test_scanned_layer_order_matters():
  """Negative control: the comparison above can fail. The same stacked params with two
  layers swapped decode otherwise."""
  target, tp, _, _, inputs = _pair('t5_1_1')
  s_target, s_tp = _to_scanned(target, tp)
  swapped = jax.tree.map(lambda x: x[jnp.array([1, 0, 2])], s_tp['decoder'][scan.LAYERS])
  s_bad = {**s_tp, 'decoder': {**s_tp['decoder'], scan.LAYERS: swapped}}
  kw = dict(max_decode_len=10)
  good = specjax.autoregressive_decode(s_target, s_tp, inputs, **kw)
  bad = specjax.autoregressive_decode(s_target, s_bad, inputs, **kw)
  assert not np.array_equal(np.asarray(good.tokens), np.asarray(bad.tokens))


@pytest.mark.parametrize('name', ['t5_1_1', 'llama'])
def test_layer_skip_of_a_scanned_target(name):
  """The target's first 2 of 3 layers draft in its stacked cache: greedy output the
  target's own, and every counter the unrolled layer-skip's."""
  target, tp, _, _, inputs = _pair(name)
  s_target, s_tp = _to_scanned(target, tp)
  kw = dict(max_decode_len=10, gamma=3)
  unrolled = specjax.speculative_decode(target, tp, LayerSkip(target, 2), {}, inputs, **kw)
  scanned = specjax.speculative_decode(s_target, s_tp, LayerSkip(s_target, 2), {}, inputs,
                                       **kw)
  _same(scanned, unrolled)
  _same(scanned, specjax.autoregressive_decode(target, tp, inputs, max_decode_len=10))
  np.testing.assert_array_equal(scanned.stats.accepted, unrolled.stats.accepted)


@pytest.mark.parametrize('name', NAMES)
def test_layouts_convert_both_ways(name):
  """to_scanned stacks layer i at index i; to_unrolled gives back every array; a scanned
  model's init is its unrolled twin's draw stacked, and its param axes lead with
  'layers' on exactly the stacked leaves."""
  target, tp, _, _, _ = _pair(name)
  stacks = _stacks(target)
  scanned = scan.to_scanned(tp, stacks)
  for path in stacks:
    node_u, node_s = tp, scanned
    for key in path:
      node_u, node_s = node_u[key], node_s[key]
    assert 'layers_0' not in node_s
    for i in range(len(scan.layer_keys(node_u))):
      jax.tree.map(lambda a, b, i=i: np.testing.assert_array_equal(a[i], b),
                   node_s[scan.LAYERS], node_u[f'layers_{i}'])
  back = scan.to_unrolled(scanned, stacks)
  assert jax.tree.structure(back) == jax.tree.structure(tp)
  jax.tree.map(np.testing.assert_array_equal, back, tp)
  s_target = _scanned(target)
  jax.tree.map(np.testing.assert_array_equal,
               s_target.init(jax.random.PRNGKey(0)),
               scan.to_scanned(target.init(jax.random.PRNGKey(0)), stacks))
  is_axes = lambda x: isinstance(x, tuple) and all(isinstance(a, (str, type(None))) for a in x)
  axes = jax.tree.leaves(s_target.param_axes(), is_leaf=is_axes)
  shapes = jax.tree.leaves(jax.eval_shape(s_target.init, jax.random.PRNGKey(0)))
  assert len(axes) == len(shapes)
  assert all(len(a) == len(s.shape) for a, s in zip(axes, shapes))
  in_stacks = sum(scan.LAYERS in [p.key for p in path]
                  for path, _ in jax.tree_util.tree_leaves_with_path(scanned))
  assert in_stacks > 0
  assert sum(a[0] == scan.LAYERS for a in axes) == in_stacks


def test_scanned_training_is_refused():
  """Dropout runs only unrolled: one line naming the conversion."""
  target, tp, _, _, inputs = _pair('t5_1_1')
  s_target, s_tp = _to_scanned(target, tp)
  with pytest.raises(ValueError, match='to_scanned'):
    s_target.logits(s_tp, jnp.asarray(inputs), jnp.zeros((5, 3), jnp.int32),
                    dropout_rate=0.1, dropout_rng=jax.random.PRNGKey(0))


@pytest.mark.parametrize('name', ['t5_1_1', 'llama'])
def test_one_layer_in_the_program(name):
  """The scanned decode step's program does not grow with depth (one layer body); the
  unrolled one's does."""
  target, _, _, _, _ = _pair(name)

  def size(model):
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0))
    inputs = jnp.zeros((2, 8), jnp.int32)
    enc = jax.eval_shape(model.encode, params, inputs)
    cache = jax.eval_shape(lambda: model.init_cache(2, 16))
    step = lambda p, e, c, t: model.decode(p, e, c, t, jnp.zeros((2,), jnp.int32))
    text = jax.jit(step).lower(params, enc, cache, jnp.zeros((2, 1), jnp.int32)).as_text()
    return len(text.splitlines())

  def deeper(model, layers):
    field = 'num_decoder_layers' if isinstance(model, T5) else 'num_layers'
    return dataclasses.replace(model, config=dataclasses.replace(model.config,
                                                                 **{field: layers}))

  s_target = _scanned(target)
  assert size(deeper(s_target, 8)) == size(deeper(s_target, 2))
  assert size(deeper(target, 8)) > size(deeper(target, 2))


def test_the_command_line_decodes_as_unrolled_with_scan_layers(tmp_path, capsys):
  """`python -m specjax.decode --scan-layers` writes what the unrolled pair writes (the
  bundled demo pair, converted at load), identical to the target alone."""
  from specjax import decode  # pylint: disable=import-outside-toplevel
  src = tmp_path / 'in.txt'
  src.write_text('Invalid token was supplied\nMove objects and refs by archive\n')
  outs = []
  for extra in ([], ['--scan-layers']):
    out = tmp_path / f'out{len(outs)}.jsonl'
    args = ['--input', str(src), '--output', str(out), '--gamma', '3', '--json', '--quiet',
            '--no-compile-cache'] + extra
    assert decode.main(args) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary['identical_to_target'] is True
    outs.append(out.read_text())
  assert outs[0] == outs[1] and outs[0].count('\n') == 2


def test_an_eagle_head_refuses_a_scanned_target():
  target, _, _, _, _ = _pair('t5_1_1')
  from specjax.proposers.eagle import EagleHead  # pylint: disable=import-outside-toplevel
  with pytest.raises(ValueError, match='without --scan-layers'):
    EagleHead(_scanned(target))


def test_scan_unroll_keeps_the_output():
  """scan_unroll (layers per scan iteration: straight-line code at L) changes the program,
  not the tokens."""
  target, tp, _, _, inputs = _pair('t5_1_1')
  s_target, s_tp = _to_scanned(target, tp)
  unrolled_scan = dataclasses.replace(s_target, config=s_target.config.replace(scan_unroll=3))
  kw = dict(max_decode_len=10)
  _same(specjax.autoregressive_decode(unrolled_scan, s_tp, inputs, **kw),
        specjax.autoregressive_decode(target, tp, inputs, **kw))


def test_the_first_layers_run_without_a_copy_of_the_stack():
  """A scan of the first M of L layers (layer-skip's draft) reads each layer from the whole
  stack: by XLA's cost analysis (a loop's body counted once) it reads what the whole
  scan's program reads, where a stack cut to M layers first added a copy of them."""
  w, x = jnp.ones((8, 64, 64)), jnp.ones((2, 64))
  body = lambda h, p, i: (jnp.tanh(h @ p['w']), None)
  read = lambda fn: jax.jit(fn).lower(w, x).compile().cost_analysis()['bytes accessed']
  whole = read(lambda w, x: scan.run(body, x, {'w': w}, 8)[0])
  first = read(lambda w, x: scan.run(body, x, {'w': w}, 4)[0])
  cut = read(lambda w, x: scan.run(body, x, {'w': w[:4]}, 4)[0])  # the stack cut first
  assert first < 1.1 * whole
  assert cut > 2 * whole  # negative control: the copy shows in the same measure
  np.testing.assert_allclose(scan.run(body, x, {'w': w * 0.01}, 4)[0],
                             scan.run(body, x, {'w': w[:4] * 0.01}, 4)[0])
