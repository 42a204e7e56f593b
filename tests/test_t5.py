"""T5 model: parameter tree and sizes, cached decode vs teacher forcing, masking, dtypes."""
import functools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.core import decoder as decoder_lib
from specjax.core.sampling import SamplingConfig, SamplingParams
from specjax.core.state import LoopConfig
from specjax.models import t5_layers
from specjax.models.t5 import T5
from specjax.models.t5_config import T5_CONFIGS, T5Config

# Small enough to run fast on CPU, big enough (V, T) for varied argmaxes and positions.
V11 = T5Config(vocab_size=40, emb_dim=16, num_heads=4, num_encoder_layers=2,
               num_decoder_layers=2, head_dim=4, mlp_dim=32, name='test_v1_1')
V10 = V11.replace(mlp_activations=('relu',), logits_via_embedding=True, name='test_v1_0')


def _inputs(batch=3, length=7, vocab=40, seed=0):
  """Right-padded encoder inputs [B, S] of different lengths (no 0/1 inside)."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(2, vocab, (batch, length))
  lengths = [length, length - 3, 2][:batch]
  for b, n in enumerate(lengths):
    tokens[b, n:] = 0
  return jnp.asarray(tokens, jnp.int32)


@pytest.mark.parametrize('name,millions', [
    ('t5_small', 77.0), ('t5_base', 247.6), ('t5_large', 783.2), ('t5_xl', 2850.0),
    ('t5_xxl', 11140.0), ('t5_1_0_small', 60.5), ('t5_1_0_11b', 11300.0)])
def test_param_counts_match_t5x(name, millions):
  shapes = jax.eval_shape(T5(T5_CONFIGS[name]).init, jax.random.key(0))
  count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
  assert abs(count / 1e6 - millions) / millions < 0.005
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(shapes))


@pytest.mark.parametrize('name', ['t5_small', 't5_1_0_small', 't5_tiny'])
def test_param_axes_match_params(name):
  model = T5(T5_CONFIGS[name])
  shapes = jax.eval_shape(model.init, jax.random.key(0))
  axes = model.param_axes()
  is_axes = lambda x: isinstance(x, tuple)
  assert jax.tree.structure(axes, is_leaf=is_axes) == jax.tree.structure(shapes)
  for ax, x in zip(jax.tree.leaves(axes, is_leaf=is_axes), jax.tree.leaves(shapes)):
    assert len(ax) == x.ndim
  enc = axes['encoder']['layers_0']
  assert enc['attention']['query']['kernel'] == ('embed', 'joined_kv')
  assert enc['attention']['out']['kernel'] == ('joined_kv', 'embed')
  assert axes['token_embedder']['embedding'] == ('vocab', 'embed')
  assert axes['encoder']['relpos_bias']['rel_embedding'] == ('heads', 'relpos_buckets')


def test_t5x_names_and_shapes():
  shapes = jax.eval_shape(T5(T5_CONFIGS['t5_small']).init, jax.random.key(0))
  dec = shapes['decoder']
  assert dec['layers_7']['self_attention']['query']['kernel'].shape == (512, 384)
  assert dec['layers_0']['encoder_decoder_attention']['out']['kernel'].shape == (384, 512)
  assert dec['layers_0']['mlp']['wi_1']['kernel'].shape == (512, 1024)
  assert dec['logits_dense']['kernel'].shape == (512, 32128)
  assert shapes['encoder']['relpos_bias']['rel_embedding'].shape == (6, 32)
  v10 = jax.eval_shape(T5(T5_CONFIGS['t5_1_0_small']).init, jax.random.key(0))
  assert set(v10['encoder']['layers_0']['mlp']) == {'wi', 'wo'}
  assert 'logits_dense' not in v10['decoder']


@functools.lru_cache(maxsize=None)
def _setup(cfg):
  """Model, params and jitted functions, built once per config (XLA compiles are the cost)."""
  model = T5(cfg)
  # An 'rbg' key: XLA compiles its RNG ~2x faster on CPU than threefry's; init is the same.
  params = jax.jit(model.init)(jax.random.key(1, impl='rbg'))
  return model, params, jax.jit(model.logits), jax.jit(model.encode), jax.jit(model.decode)


def _decoder_tokens(vocab=40, batch=3, length=12, seed=1):
  tokens = np.random.default_rng(seed).integers(2, vocab, (batch, length))
  tokens[:, 0] = 0
  return jnp.asarray(tokens, jnp.int32)


@pytest.mark.parametrize('cfg', [V11, V10], ids=['v1_1', 'v1_0'])
def test_chunked_decode_matches_teacher_forcing(cfg):
  """Rows at different positions, over a cache full of stale entries, in chunks of K."""
  model, params, logits_fn, encode, decode = _setup(cfg)
  inputs, dec_tokens = _inputs(), _decoder_tokens()
  batch, length = dec_tokens.shape
  reference = np.asarray(logits_fn(params, inputs, dec_tokens))  # [B, T, V]
  # Varied argmaxes: a random model must not collapse onto one token.
  assert len(np.unique(reference.argmax(-1))) > 5

  encoded = encode(params, inputs)
  chunk_max, prefill = 5, 2
  cache_len = length + chunk_max
  padded = np.pad(np.asarray(dec_tokens), ((0, 0), (0, chunk_max)))
  rng = np.random.default_rng(2)
  for chunk in (1, 3, 5):
    # Garbage everywhere: only entries written at positions < the query's may matter.
    cache = jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype),
                         model.init_cache(batch, cache_len))
    pos = np.zeros(batch, np.int64)
    while pos[0] < prefill:  # same-position prefill in chunks of K
      _, cache = decode(params, encoded, cache, padded[:, pos[0]:pos[0] + chunk],
                        jnp.asarray(pos, jnp.int32))
      pos += chunk
    pos = np.array([prefill, 1, 0])  # then each row rewinds to a different position
    while pos.min() < length:
      tokens = np.stack([padded[b, p:p + chunk] for b, p in enumerate(pos)])
      logits, cache = decode(params, encoded, cache, tokens, jnp.asarray(pos, jnp.int32))
      assert logits.shape == (batch, chunk, cfg.vocab_size) and logits.dtype == jnp.float32
      logits = np.asarray(logits)
      for b, p in enumerate(pos):
        n = max(0, min(chunk, length - p))
        np.testing.assert_allclose(logits[b, :n], reference[b, p:p + n], atol=1e-4)
      pos = pos + chunk


def test_encoder_padding_is_masked():
  _, params, logits_fn, _, _ = _setup(V11)
  inputs, dec_tokens = _inputs(), _decoder_tokens()
  longer = jnp.pad(inputs, ((0, 0), (0, 4)))  # more trailing padding: same logits
  np.testing.assert_allclose(logits_fn(params, inputs, dec_tokens),
                             logits_fn(params, longer, dec_tokens), atol=1e-5)


def test_decoder_is_causal():
  _, params, logits_fn, _, _ = _setup(V10)
  inputs, a = _inputs(), _decoder_tokens()
  b = a.at[:, 6].set(9)
  la, lb = logits_fn(params, inputs, a), logits_fn(params, inputs, b)
  np.testing.assert_allclose(la[:, :6], lb[:, :6], atol=1e-6)
  assert not np.allclose(la[:, 6:], lb[:, 6:])


def test_contract_shapes():
  model = T5(V11.replace(dtype='bfloat16'))
  inputs = _inputs()
  tokens, lengths = model.decoder_prompt(inputs)
  assert tokens.shape == (3, 1) and tokens.dtype == jnp.int32 and not tokens.any()
  assert lengths.tolist() == [1, 1, 1]
  cache = model.init_cache(3, 10)
  assert set(cache) == {'layers_0', 'layers_1'}
  assert cache['layers_0']['k'].shape == (3, 4, 4, 10)  # [B, N, H, T], heads-major
  assert cache['layers_0']['k'].dtype == jnp.bfloat16
  assert model.init_cache(3, 10, jnp.float32)['layers_1']['v'].dtype == jnp.float32
  encoded = jax.eval_shape(model.encode, jax.eval_shape(model.init, jax.random.key(0)),
                           inputs)
  assert encoded['mask'].shape == (3, 7)
  assert encoded['cross']['layers_1']['k'].shape == (3, 4, 4, 7)  # [B, N, H, S]
  assert encoded['cross']['layers_1']['k'].dtype == jnp.bfloat16
  assert model.vocab_size == 40


@pytest.mark.parametrize('cfg', [V11, V10], ids=['v1_1', 'v1_0'])
def test_bfloat16_close_to_float32(cfg):
  _, params, logits_fn, _, _ = _setup(cfg)
  inputs, dec_tokens = _inputs(), _decoder_tokens()
  f32 = logits_fn(params, inputs, dec_tokens)
  bf16 = jax.jit(T5(cfg.replace(dtype='bfloat16')).logits)(params, inputs, dec_tokens)
  assert bf16.dtype == jnp.float32
  scale = float(jnp.abs(f32).max())
  assert float(jnp.abs(bf16 - f32).max()) < 0.1 * scale
  assert (bf16.argmax(-1) == f32.argmax(-1)).mean() > 0.8


def _compiled_decode_step(cfg):
  """The compiled 1-token decode step of a batch-1 model (encoder 16, cache 32)."""
  model = T5(cfg)
  params = jax.eval_shape(model.init, jax.random.key(0))
  encoded = jax.eval_shape(model.encode, params, jax.ShapeDtypeStruct((1, 16), jnp.int32))
  cache = jax.eval_shape(lambda: model.init_cache(1, 32))
  return jax.jit(model.decode).lower(
      params, encoded, cache, jax.ShapeDtypeStruct((1, 1), jnp.int32),
      jax.ShapeDtypeStruct((1,), jnp.int32)).compile()


@pytest.mark.parametrize('name', ['demo_target', 'demo_draft', 't5_small', 't5_1_0_small'])
def test_decode_step_macs_match_xla_cost_analysis(name):
  """The hand count agrees with the flops XLA counts in a compiled 1-token decode step."""
  cfg = T5_CONFIGS[name]
  cost = _compiled_decode_step(cfg).cost_analysis()
  cost = cost[0] if isinstance(cost, list) else cost
  # XLA also counts the elementwise work (norms, softmax, activations): a few percent.
  assert 1.0 <= cost['flops'] / 2 / cfg.decode_step_macs(32, 16) < 1.05


def test_decode_step_copies_no_weight_matrix():
  """A decode step must not relayout weights (no copy as large as an attention kernel):
  XLA:CPU once copied every attention out kernel on every step, and would copy any kernel
  a product reads in a layout other than its stored one."""
  cfg = T5_CONFIGS['demo_target']
  text = _compiled_decode_step(cfg).as_text()
  copies = re.findall(r'= \w+\[([\d,]*)\]\{[^}]*\} copy\(', text)
  sizes = [math.prod(int(d) for d in dims.split(',') if d) for dims in copies]
  assert max(sizes, default=0) < cfg.num_heads * cfg.head_dim * cfg.emb_dim, copies


def test_both_key_value_products_are_the_same_projection():
  """`project_kv` takes the T-major product on CPU and the T-minor one elsewhere (TPU):
  both must be the same [B, N, H, T] keys."""
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(2, 5, 8)), jnp.float32)
  kernel = jnp.asarray(rng.normal(size=(8, 12)), jnp.float32)
  major = t5_layers.project_kv_t_major(x, kernel, 3)
  assert major.shape == (2, 3, 4, 5)
  np.testing.assert_allclose(t5_layers.project_kv_t_minor(x, kernel, 3), major, rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(major[1, 2, :, 4], x[1, 4] @ kernel[:, 8:12], rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(t5_layers.project_kv(x, kernel, 3), major)  # CPU: T-major


def test_decode_loop_relayouts_no_cache_and_no_cross_kv():
  """Caches and cross K/V are stored heads-major, as the attention products read them.

  Stored [B, T, N, H], XLA:CPU relayouted every cache and every cross-attention K/V in
  every target and draft call of the loop (16 copies to [N, H, T] per demo-target call).
  Copies that keep a leaf's shape (XLA's buffer copies around in-place cache writes) are
  not relayouts.
  """
  target, draft = T5(T5_CONFIGS['demo_target']), T5(T5_CONFIGS['demo_draft'])
  params = [jax.eval_shape(m.init, jax.random.key(0)) for m in (target, draft)]
  cfg = LoopConfig(gamma=3, max_decode_len=32)
  inputs = jax.ShapeDtypeStruct((1, 16), jnp.int32)
  text = _lower_whole(target, params[0], draft, params[1], inputs, cfg).compile().as_text()
  loop_text = '\n'.join(_loop_bodies(text))
  squeeze = lambda dims: tuple(d for d in dims if d != 1)
  leaves = [(m.init_cache(1, 37), jax.eval_shape(m.encode, p, inputs)['cross'])
            for m, p in zip((target, draft), params)]
  leaf_shapes = {squeeze(x.shape) for x in jax.tree.leaves(leaves)}
  smallest = min(math.prod(s) for s in leaf_shapes)
  relayouts = []
  for name, dims in re.findall(r'%(copy[\w.-]*) = \w+\[([\d,]*)\]', loop_text):
    shape = squeeze(int(d) for d in dims.split(',') if d)
    if math.prod(shape) >= smallest and shape not in leaf_shapes:
      relayouts.append((name, shape))
  assert not relayouts, (relayouts, leaf_shapes)


def _lower_whole(target, tp, draft, dp, inputs, cfg):
  """The one program a single-device decode runs, lowered against shapes."""
  num = inputs.shape[0]
  ints = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32)
  sampling = SamplingParams.of(SamplingConfig(), num)
  return jax.jit(decoder_lib.Decoder(target, draft, cfg).whole).lower(
      tp, dp, inputs, ints(), ints(num), jax.random.PRNGKey(0), sampling)


def _loop_bodies(text: str) -> list:
  """The computations of a compiled HLO text other than the entry and the fusions."""
  return [c for c in text.split('\n\n') if not c.lstrip().startswith(
      ('ENTRY', '%fused', 'fused', '%wrapped', 'wrapped'))]


@pytest.mark.parametrize('gamma', [0, 3], ids=['target_alone', 'speculative'])
def test_batch_one_steps_copy_each_cache_leaf_at_most_once(gamma):
  """At B = 1 a one-token call copies each cache leaf once at most (a new buffer for the
  loop's carry). Written as a dynamic-update-slice, XLA:CPU cloned the write into the
  attention's matrix-vector products and copied every leaf 4 times per draft step and per
  target-alone step."""
  target, draft = T5(T5_CONFIGS['demo_target']), T5(T5_CONFIGS['demo_draft'])
  params = [jax.eval_shape(m.init, jax.random.key(0)) for m in (target, draft)]
  cfg = LoopConfig(gamma=gamma, max_decode_len=32)
  inputs = jax.ShapeDtypeStruct((1, 16), jnp.int32)
  if gamma:
    lowered = _lower_whole(target, params[0], draft, params[1], inputs, cfg)
  else:
    lowered = _lower_whole(target, params[0], None, {}, inputs, cfg)
  width = cfg.width(1)
  leaves = {}
  for model in (target, draft) if gamma else (target,):
    for leaf in jax.tree.leaves(model.init_cache(1, width)):
      dims = ','.join(map(str, leaf.shape))
      leaves[dims] = leaves.get(dims, 0) + 1
  bodies = _loop_bodies(lowered.compile().as_text())
  assert bodies
  for body in bodies:
    for dims, count in leaves.items():
      copies = len(re.findall(rf'= f32\[{dims}\]\{{[^}}]*\}} copy\(', body))
      assert copies <= count, (dims, copies, body.split('\n', 1)[0][:80])


def test_demo_draft_step_costs_under_a_tenth_of_the_target():
  target, draft = T5_CONFIGS['demo_target'], T5_CONFIGS['demo_draft']
  for cache_len, encoder_len in ((0, 0), (48, 64)):
    assert (draft.decode_step_macs(cache_len, encoder_len)
            <= 0.1 * target.decode_step_macs(cache_len, encoder_len))
