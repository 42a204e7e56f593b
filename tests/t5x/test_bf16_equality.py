"""bfloat16 greedy decoding of the tiny t5x.train pair (docs/bfloat16.md): the speculative
decode, whose verify calls score gamma + 1 tokens at once, gives the tokens of specjax's
one-token-per-call decode; its verify logits stay within bfloat16's resolution of the
one-token step's; with `T5Config.t5x_rounding` it gives T5X's own bfloat16 greedy decode
wherever T5X's choices are not near-ties. scripts/bf16_equality.py measures the same on
whole splits."""
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import real_t5x

real_t5x.require_t5x()

import specjax  # pylint: disable=wrong-import-position
from specjax.models.t5 import T5  # pylint: disable=wrong-import-position

NUM, LENGTH, GAMMA = 24, 32, 4
# Margins (top logit minus the runner-up) this many bfloat16 spacings wide or wider are
# never flipped by the arithmetic differences measured in docs/bfloat16.md (at most 1.6).
SAFE_SPACINGS = 4.0


def _script():
  spec = importlib.util.spec_from_file_location(
      'bf16_equality', real_t5x.REPO / 'scripts' / 'bf16_equality.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.fixture(scope='module')
def pair(trained):
  """(script module, target config, target params, draft config, draft params, inputs)."""
  script = _script()
  out = []
  for name in ('target', 'draft'):
    model, params = specjax.load_model(None, str(trained[name]))
    out += [model.config.replace(name=''), jax.device_get(params)]
  inputs = script.task_inputs('specjax_demo_ende', 'test', NUM, LENGTH)
  return (script, *out, inputs)


def _models(target_cfg, draft_cfg, **changes):
  changes['dtype'] = 'bfloat16'
  return T5(target_cfg.replace(**changes)), T5(draft_cfg.replace(**changes))


def _chunked_logits(target, params, inputs, tokens, k):
  """[B, L, V]: decode calls of k tokens each along `tokens` (the start token 0 first)."""
  batch, length = tokens.shape
  encoded = target.encode(params, inputs)
  fed = jnp.pad(tokens, ((0, 0), (1, 0)))[:, :-1]
  cache, out = target.init_cache(batch, length), []
  for start in range(0, length, k):
    logits, cache = target.decode(params, encoded, cache, fed[:, start:start + k],
                                  jnp.full((batch,), start, jnp.int32))
    out.append(logits)
  return jnp.concatenate(out, axis=1)


def _over_resolution(a, b):
  """max |a - b| [B, L, V] in bfloat16 spacings at the magnitude of b's largest logit of
  the same position (the scale of the logits that decide the argmax)."""
  top = np.max(np.abs(b), axis=-1, keepdims=True)  # [B, L, 1]
  spacing = 2.0 ** (np.floor(np.log2(top)) - 7)
  return float(np.max(np.abs(a - b) / spacing))


def test_speculative_tokens_equal_the_one_token_decode(pair):
  script, target_cfg, target_params, draft_cfg, draft_params, inputs = pair
  for changes in ({}, {'t5x_rounding': True}):
    target, draft = _models(target_cfg, draft_cfg, **changes)
    speculative = script.specjax_decoder(target, draft, GAMMA, LENGTH)
    alone = script.specjax_decoder(target, None, 1, LENGTH)
    np.testing.assert_array_equal(speculative(target_params, draft_params, inputs),
                                  alone(target_params, None, inputs))


def test_verify_logits_within_resolution_of_the_one_token_step(pair):
  script, target_cfg, target_params, draft_cfg, _, inputs = pair
  target, _ = _models(target_cfg, draft_cfg, t5x_rounding=True)
  tokens = np.asarray(script.specjax_decoder(target, None, 1, LENGTH)(
      target_params, None, inputs))
  logits = {k: np.asarray(jax.jit(lambda p, x, t, k=k: _chunked_logits(target, p, x, t, k))(
      target_params, inputs, tokens)) for k in (1, GAMMA + 1)}
  assert _over_resolution(logits[GAMMA + 1], logits[1]) <= 1.0
  # The check can fail: the other rounding (t5x_rounding off) is many spacings away.
  other, _ = _models(target_cfg, draft_cfg)
  old = np.asarray(jax.jit(lambda p, x, t: _chunked_logits(other, p, x, t, GAMMA + 1))(
      target_params, inputs, tokens))
  assert _over_resolution(old, logits[1]) > 2.0


def test_speculative_equals_t5x_greedy_away_from_near_ties(pair):
  script, target_cfg, target_params, draft_cfg, draft_params, inputs = pair
  reference = script.T5XReference(script.t5x_module(target_cfg, 'bfloat16'), target_params,
                                  LENGTH)
  ref = reference.greedy(inputs)
  logits = reference.step_logits(inputs, ref)  # [B, L, V], T5X's own steps
  top2 = np.sort(logits, axis=-1)[..., -2:]
  spacing = 2.0 ** (np.floor(np.log2(np.abs(top2[..., 1]))) - 7)
  live = np.cumsum(np.pad(ref == 1, ((0, 0), (1, 0)))[:, :-1], axis=1) == 0
  clear = np.all(~live | (top2[..., 1] - top2[..., 0] > SAFE_SPACINGS * spacing), axis=1)
  assert clear.sum() >= NUM // 4
  target, draft = _models(target_cfg, draft_cfg, t5x_rounding=True)
  got = np.asarray(script.specjax_decoder(target, draft, GAMMA, LENGTH)(
      target_params, draft_params, inputs))
  np.testing.assert_array_equal(got[clear], ref[clear])
