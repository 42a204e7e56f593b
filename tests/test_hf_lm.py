"""Parity with Hugging Face Llama (GQA, llama3 and linear rope scaling) and GPT-2 on tiny
random models saved by save_pretrained: logits, chunked cached decode, batched greedy
generation, and the checkpoint reading around them."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hf_for_tests

torch = hf_for_tests.Lazy('torch')
transformers = hf_for_tests.Lazy('transformers')
hf_modules = hf_for_tests.required('torch', 'transformers')

import specjax  # noqa: E402
from specjax.checkpoints import hf_files, hf_lm  # noqa: E402
from specjax.models import lm_layers  # noqa: E402
from specjax.models.lm import CausalLM  # noqa: E402
from lm_for_tests import VOCAB, hf_model, prompts  # noqa: E402

KINDS = ('llama', 'llama_linear', 'gpt2')


@pytest.fixture(scope='module', params=KINDS)
def pair(request, tmp_path_factory):
  """(kind, HF model, its save_pretrained dir, our model, params) via `load_model(path)`."""
  hf = hf_model(request.param)
  path = str(tmp_path_factory.mktemp(request.param))
  hf.save_pretrained(path)
  model, params = specjax.load_model(path)
  return request.param, hf, path, model, params


def _hf_logits(hf, tokens, mask=None):
  with torch.no_grad():
    return hf(input_ids=torch.tensor(tokens, dtype=torch.long),
              attention_mask=None if mask is None else torch.tensor(mask)).logits.numpy()


def test_config_from_hf(pair):
  kind, hf, _, model, params = pair
  cfg = model.config
  assert isinstance(model, CausalLM) and cfg.vocab_size == VOCAB
  assert (cfg.emb_dim, cfg.num_layers, cfg.num_heads) == (32, 2, 4)
  if kind == 'gpt2':
    assert cfg.family == 'gpt2' and cfg.tie_embeddings and cfg.pad_id == cfg.eos_id == 47
    assert 'position' in params and 'lm_head' not in params
  else:
    assert cfg.num_kv_heads == 2 and cfg.head_dim == 8
    assert params['layers_0']['attention']['key']['kernel'].shape == (32, 2, 8)  # M KV heads
    assert cfg.rope_type == ('llama3' if kind == 'llama' else 'linear')
    assert ('lm_head' in params) == (kind == 'llama')
    assert ('bias' in params['layers_1']['attention']['query']) == (kind == 'llama_linear')
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(params))


@pytest.mark.parametrize('rope', [
    {'rope_type': 'linear', 'factor': 2.5},
    {'rope_type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0,
     'original_max_position_embeddings': 64}])
def test_rope_frequencies_match_hf(rope):
  from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
  hf_cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=2, rope_theta=5000.0,
                                    rope_scaling=rope)
  expected, _ = ROPE_INIT_FUNCTIONS[rope['rope_type']](hf_cfg, 'cpu')
  ours = lm_layers.rope_frequencies(hf_lm.config_from_hf(hf_cfg.to_dict()))
  np.testing.assert_allclose(ours, expected.numpy(), rtol=1e-6)
  plain = lm_layers.rope_frequencies(hf_lm.config_from_hf(dict(hf_cfg.to_dict(),
                                                               rope_scaling=None)))
  assert not np.allclose(ours, plain)  # the scaling changed something


def test_teacher_forced_logits_match_hf(pair):
  _, hf, _, model, params = pair
  tokens = np.random.default_rng(1).integers(3, VOCAB - 1, (3, 20))
  ours = jax.jit(model.logits)(params, jnp.asarray(tokens))
  assert ours.dtype == jnp.float32
  np.testing.assert_allclose(ours, _hf_logits(hf, tokens), atol=1e-4)


def test_chunked_decode_at_per_row_positions_equals_teacher_forced(pair):
  """Rows at their own positions, fed in chunks of 1, 3 and 5 over stale cache entries."""
  _, _, _, model, params = pair
  cache_len = 24
  tokens = np.random.default_rng(2).integers(3, VOCAB - 1, (3, cache_len))
  expected = np.asarray(jax.jit(model.logits)(params, jnp.asarray(tokens)))  # [B, T, V]
  decode = jax.jit(model.decode)
  for chunk in (1, 3, 5):
    cache = model.init_cache(3, cache_len)
    _, cache = decode(params, {}, cache, jnp.asarray(tokens[::-1].copy()),
                      jnp.zeros(3, jnp.int32))  # other rows' K/V everywhere
    pos = np.array([0, 2, 5])
    _, cache = decode(params, {}, cache, jnp.asarray(tokens[:, :5]), jnp.zeros(3, jnp.int32))
    while pos.max() + chunk <= cache_len:
      feed = np.stack([tokens[b, p:p + chunk] for b, p in enumerate(pos)])
      logits, cache = decode(params, {}, cache, jnp.asarray(feed), jnp.asarray(pos))
      for b, p in enumerate(pos):
        np.testing.assert_allclose(logits[b], expected[b, p:p + chunk], atol=1e-4)
      pos = pos + chunk


@pytest.mark.parametrize('left', [False, True], ids=['right-padded', 'left-padded'])
def test_batched_greedy_equals_hf_generate(pair, left):
  """Three prompts of lengths 7, 4 and 2 in one batch: specjax's greedy decode (the prompt
  padded right or left) equals HF's left-padded `generate` token for token."""
  kind, hf, _, model, params = pair
  new = 12
  ours_in = prompts(kind, lengths=(7, 4, 2), left=left)
  hf_in = prompts(kind, lengths=(7, 4, 2), left=True)
  mask = (np.arange(8)[None] >= 8 - np.array([7, 4, 2])[:, None]).astype(np.int64)
  with torch.no_grad():
    out = hf.generate(torch.tensor(hf_in, dtype=torch.long), attention_mask=torch.tensor(mask),
                      do_sample=False, max_new_tokens=new, min_new_tokens=0,
                      pad_token_id=model.pad_id, eos_token_id=model.eos_id).numpy()[:, 8:]
  ours = np.asarray(specjax.autoregressive_decode(model, params, ours_in,
                                                  max_decode_len=new).tokens)
  np.testing.assert_array_equal(ours[:, :out.shape[1]], out)
  assert (ours[:, out.shape[1]:] == model.pad_id).all()
  assert len({tuple(r) for r in ours.tolist()}) == 3


def test_prompt_from_padded_handles_left_and_right_padding():
  model = CausalLM(hf_lm.config_from_hf(hf_model('llama').config.to_dict()))
  right, left = prompts('llama', lengths=(5, 3, 1)), prompts('llama', lengths=(5, 3, 1), left=True)
  for x in (right, left):
    prompt, lengths = model.decoder_prompt(jnp.asarray(x))
    np.testing.assert_array_equal(prompt, right)
    np.testing.assert_array_equal(lengths, [5, 3, 1])


def test_sharded_safetensors_and_bfloat16_params(tmp_path):
  hf = hf_model('llama')
  hf.save_pretrained(tmp_path, max_shard_size='20KB')
  assert (tmp_path / 'model.safetensors.index.json').exists()
  assert len(list(tmp_path.glob('model-0000*-of-0000*.safetensors'))) > 2
  model, params = specjax.load_model(str(tmp_path), dtype='bfloat16', param_dtype='bfloat16')
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(params))
  tokens = np.random.default_rng(3).integers(3, VOCAB - 1, (2, 10))
  logits = jax.jit(model.logits)(params, jnp.asarray(tokens))
  ref = _hf_logits(hf, tokens)
  assert np.mean(np.argmax(logits, -1) == np.argmax(ref, -1)) > 0.9
  assert np.abs(np.asarray(logits) - ref).max() < 0.1 * np.abs(ref).max()


def test_round_trip_to_hf_and_orbax(pair, tmp_path):
  """Our params written back as an HF dir reload in transformers with the same logits, and
  save_params + load_model(dir) rebuilds the decoder-only model from specjax.json."""
  kind, hf, _, model, params = pair
  hf_files.save_hf_lm_dir(str(tmp_path / 'hf'), model.config, params)
  again = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / 'hf')).eval()
  tokens = np.random.default_rng(4).integers(3, VOCAB - 1, (2, 9))
  np.testing.assert_allclose(_hf_logits(again, tokens), _hf_logits(hf, tokens), atol=1e-5)
  specjax.save_params(str(tmp_path / 'orbax'), params, model.config)
  model2, params2 = specjax.load_model(str(tmp_path / 'orbax'))
  assert model2 == model
  jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_malformed_checkpoints_raise_one_line_errors(tmp_path):
  hf = hf_model('gpt2')
  hf.save_pretrained(tmp_path)
  config = json.loads((tmp_path / 'config.json').read_text())
  (tmp_path / 'config.json').write_text(json.dumps(dict(config, n_layer=3)))
  with pytest.raises(ValueError, match='h.2.ln_1.weight is missing.*config.json'):
    specjax.load_model(str(tmp_path))
  (tmp_path / 'config.json').write_text(json.dumps(dict(config, model_type='mamba')))
  with pytest.raises(ValueError, match="model_type 'mamba' .* is not supported"):
    specjax.load_model(str(tmp_path))
  (tmp_path / 'config.json').write_text('{not json')
  with pytest.raises(ValueError, match='not valid JSON'):
    specjax.load_model(str(tmp_path))
  bad = dict(config, model_type='llama')
  (tmp_path / 'config.json').write_text(json.dumps(bad))
  with pytest.raises(ValueError, match="llama model has no 'num_attention_heads'; pass"):
    specjax.load_model(str(tmp_path))
  sharded = tmp_path / 'sharded'
  hf.save_pretrained(sharded, max_shard_size='20KB')
  os.remove(sorted(sharded.glob('model-0000*.safetensors'))[0])
  with pytest.raises(FileNotFoundError, match='named by .* is missing'):
    specjax.load_model(str(sharded))
