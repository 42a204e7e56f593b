"""A decode traces each kind of layer once, however deep the model, and computes exactly
what the plain loop over its layers computes (`specjax.models.base.traced_once`)."""
import jax
import jax.numpy as jnp
import numpy as np

from specjax.models import base
from specjax.models import t5_layers
from specjax.models.lm import CausalLM
from specjax.models.lm_config import LMConfig
from specjax.models.t5 import T5
from specjax.models.t5_config import T5Config

# Own names: traced_once keeps one jitted layer per model, and these are no other test's.
DEEP_T5 = T5Config(vocab_size=40, emb_dim=16, num_heads=4, num_encoder_layers=3,
                   num_decoder_layers=4, head_dim=4, mlp_dim=32, name='traced_layers_t5')
DEEP_LM = LMConfig(name='traced_layers_lm', vocab_size=32, emb_dim=32, num_heads=4,
                   num_kv_heads=2, head_dim=8, num_layers=3, mlp_dim=64)


def _counted(monkeypatch, cls, method: str) -> list:
  """Patches cls.method to note each (Python) call: each one is a trace of the layer."""
  calls, plain = [], getattr(cls, method)

  def counted(self, *args, **kwargs):
    calls.append(method)
    return plain(self, *args, **kwargs)
  monkeypatch.setattr(cls, method, counted)
  return calls


def _t5_call(model, dropout):
  """encode then a 3-token decode from position 0, jitted: (logits, cache)."""
  def run(params, inputs, tokens):
    encoded = model.encode(params, inputs, dropout=dropout)
    cache = model.init_cache(inputs.shape[0], 8)
    return model.decode(params, encoded, cache, tokens, jnp.zeros((2,), jnp.int32),
                        dropout=dropout)
  return jax.jit(run)


def test_t5_traces_one_encoder_and_one_decoder_layer_and_computes_the_plain_loop(
    monkeypatch):
  model = T5(DEEP_T5)
  params = model.init(jax.random.PRNGKey(0))
  inputs = jnp.asarray([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0]], jnp.int32)
  tokens = jnp.asarray([[0, 3, 4], [0, 11, 12]], jnp.int32)
  enc_calls = _counted(monkeypatch, T5, 'encoder_layer')
  dec_calls = _counted(monkeypatch, T5, 'decoder_layer')
  logits, cache = _t5_call(model, t5_layers.NO_DROPOUT)(params, inputs, tokens)
  assert (len(enc_calls), len(dec_calls)) == (1, 1)
  # Dropout at rate 0 other than NO_DROPOUT takes the plain loop: one trace per layer.
  enc_calls.clear()
  dec_calls.clear()
  plain_logits, plain_cache = _t5_call(model, t5_layers.Dropout(0.0, None))(
      params, inputs, tokens)
  assert (len(enc_calls), len(dec_calls)) == (3, 4)
  np.testing.assert_array_equal(np.asarray(logits), np.asarray(plain_logits))
  jax.tree.map(np.testing.assert_array_equal, cache, plain_cache)
  assert np.isfinite(np.asarray(logits)).all() and np.ptp(np.asarray(logits)) > 0


def test_a_decoder_only_model_traces_one_layer_and_computes_the_plain_loop(monkeypatch):
  model = CausalLM(DEEP_LM)
  params = model.init(jax.random.PRNGKey(0))
  tokens = jnp.asarray([[3, 4, 5], [6, 7, 8]], jnp.int32)
  run = lambda: jax.jit(lambda p, t: model.decode(p, {}, model.init_cache(2, 8), t,
                                                  jnp.zeros((2,), jnp.int32)))
  calls = _counted(monkeypatch, CausalLM, 'decoder_layer')
  logits, cache = run()(params, tokens)
  assert len(calls) == 1 and len(cache) == DEEP_LM.num_layers
  calls.clear()
  monkeypatch.setattr(base, 'traced_once', getattr)  # the plain loop
  plain_logits, plain_cache = run()(params, tokens)
  assert len(calls) == DEEP_LM.num_layers
  np.testing.assert_array_equal(np.asarray(logits), np.asarray(plain_logits))
  jax.tree.map(np.testing.assert_array_equal, cache, plain_cache)
