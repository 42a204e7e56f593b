"""Parity with Hugging Face T5 (v1.0 and v1.1): logits, greedy generation, conversion."""
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import hf_for_tests

torch = hf_for_tests.Lazy('torch')
transformers = hf_for_tests.Lazy('transformers')
hf_modules = hf_for_tests.required('torch', 'transformers')

from specjax.checkpoints import hf_t5  # noqa: E402
from specjax.models import t5_layers  # noqa: E402
from specjax.models.t5 import T5  # noqa: E402

VOCAB, EOS = 40, 1
# HF config, out-projection gain and seed per version; chosen so greedy outputs vary and
# (v1.1) one row stops at EOS before the others.
VERSIONS = {
    'v1_1': (dict(feed_forward_proj='gated-gelu', tie_word_embeddings=False), 1.0, 0),
    'v1_0': (dict(feed_forward_proj='relu', tie_word_embeddings=True), 3.0, 1),
}


def _hf_model(version):
  """A random tiny HF T5 with every weight (norm scales too) drawn non-trivially."""
  kwargs, out_gain, seed = VERSIONS[version]
  torch.manual_seed(seed)
  config = transformers.T5Config(d_model=16, d_kv=4, num_heads=4, d_ff=32, num_layers=2,
                                 vocab_size=VOCAB, decoder_start_token_id=0, **kwargs)
  model = transformers.T5ForConditionalGeneration(config).eval()
  with torch.no_grad():
    # HF's own init leaves tied v1.0 models predicting their input token forever.
    for name, p in model.named_parameters():
      if 'layer_norm' in name:
        p.copy_(1 + 0.2 * torch.randn_like(p))
      elif 'relative_attention_bias' in name or name == 'shared.weight':
        p.normal_(0, 1.0)
      elif name.endswith(('.o.weight', '.wo.weight')):
        p.normal_(0, out_gain * p.shape[1] ** -0.5)
      else:
        p.normal_(0, p.shape[1] ** -0.5)
  return model


@pytest.fixture(scope='module', params=list(VERSIONS))
def pair(request, tmp_path_factory):
  """(version, HF model, its save_pretrained dir, our model, params, jitted encode/decode)."""
  hf = _hf_model(request.param)
  path = str(tmp_path_factory.mktemp(request.param))
  hf.save_pretrained(path)
  config, params = hf_t5.load_hf_dir(path)
  model = T5(config)
  return (request.param, hf, path, model, params, jax.jit(model.encode),
          jax.jit(model.decode))


def _inputs():
  """Encoder inputs [3, 7] of lengths 7, 4, 2, right-padded with 0."""
  tokens = np.random.default_rng(0).integers(2, VOCAB, (3, 7))
  tokens[1, 4:] = 0
  tokens[2, 2:] = 0
  return tokens


def _hf_logits(hf, inputs, dec_tokens):
  with torch.no_grad():
    out = hf(input_ids=torch.tensor(inputs), attention_mask=torch.tensor(inputs != 0),
             decoder_input_ids=torch.tensor(dec_tokens))
  return out.logits.numpy()


def test_relative_position_buckets_match_hf():
  rel = np.arange(-300, 301)
  for bidirectional in (True, False):
    for num_buckets, max_distance in ((32, 128), (16, 64)):
      hf = transformers.models.t5.modeling_t5.T5Attention._relative_position_bucket(
          torch.tensor(rel), bidirectional, num_buckets, max_distance).numpy()
      ours = t5_layers.relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
      np.testing.assert_array_equal(ours, hf)
      ours_jax = t5_layers.relative_position_bucket(jnp.asarray(rel), bidirectional,
                                                    num_buckets, max_distance)
      np.testing.assert_array_equal(ours_jax, hf)


def test_config_from_hf(pair):
  version, hf, _, model, _, _, _ = pair
  cfg = model.config
  assert (cfg.vocab_size, cfg.emb_dim, cfg.num_heads, cfg.head_dim, cfg.mlp_dim) == (
      VOCAB, 16, 4, 4, 32)
  assert (cfg.num_encoder_layers, cfg.num_decoder_layers) == (2, 2)
  if version == 'v1_1':
    assert cfg.mlp_activations == ('gelu', 'linear') and not cfg.logits_via_embedding
  else:
    assert cfg.mlp_activations == ('relu',) and cfg.logits_via_embedding
  with pytest.raises(ValueError, match='feed_forward_proj'):
    hf_t5.config_from_hf(dict(hf.config.to_dict(), feed_forward_proj='gelu'))


def test_teacher_forced_logits_match_hf(pair):
  _, hf, _, model, params, _, _ = pair
  inputs = _inputs()
  dec_tokens = np.random.default_rng(1).integers(2, VOCAB, (3, 9))
  dec_tokens[:, 0] = 0
  ours = jax.jit(model.logits)(params, jnp.asarray(inputs), jnp.asarray(dec_tokens))
  assert ours.dtype == jnp.float32
  np.testing.assert_allclose(ours, _hf_logits(hf, inputs, dec_tokens), atol=1e-4)


def test_chunked_decode_matches_hf(pair):
  """Chunks of 1, 3, 5 with each row at its own position, over stale cache entries."""
  _, hf, _, model, params, encode, decode = pair
  inputs, length, cache_len = _inputs(), 8, 15
  dec_tokens = np.random.default_rng(2).integers(2, VOCAB, (3, cache_len))
  dec_tokens[:, 0] = 0
  expected = _hf_logits(hf, inputs, dec_tokens[:, :length])  # [B, T, V]
  encoded = encode(params, jnp.asarray(inputs))
  stale = np.roll(dec_tokens, 1, axis=0)  # other rows' tokens: wrong K/V everywhere
  for chunk in (1, 3, 5):
    cache = model.init_cache(3, cache_len)
    for start in range(0, cache_len, chunk):
      start = min(start, cache_len - chunk)
      _, cache = decode(params, encoded, cache, stale[:, start:start + chunk],
                        jnp.full((3,), start, jnp.int32))
    for start in range(0, 2, chunk):  # make positions 0 and 1 valid in every row
      _, cache = decode(params, encoded, cache, dec_tokens[:, start:start + chunk],
                        jnp.full((3,), start, jnp.int32))
    pos = np.array([2, 1, 0])  # then the rows run at different positions
    while pos.min() < length:
      tokens = np.stack([dec_tokens[b, p:p + chunk] for b, p in enumerate(pos)])
      logits, cache = decode(params, encoded, cache, tokens, jnp.asarray(pos, jnp.int32))
      logits = np.asarray(logits)
      for b, p in enumerate(pos):
        n = max(0, min(chunk, length - p))
        np.testing.assert_allclose(logits[b, :n], expected[b, p:p + n], atol=1e-4)
      pos = pos + chunk


def _greedy(model, params, encode, decode, inputs, steps):
  """Plain-Python greedy loop over `decode` with K = 1: [B, 1 + steps], pad 0 after EOS."""
  batch = inputs.shape[0]
  encoded = encode(params, jnp.asarray(inputs))
  tokens, lengths = model.decoder_prompt(jnp.asarray(inputs))
  cache = model.init_cache(batch, steps)
  out, done = [np.asarray(tokens[:, 0])], np.zeros(batch, bool)
  positions = np.asarray(lengths) - 1
  for _ in range(steps):
    logits, cache = decode(params, encoded, cache, tokens, jnp.asarray(positions))
    nxt = np.where(done, 0, np.asarray(logits[:, -1]).argmax(-1))
    out.append(nxt)
    done |= nxt == EOS
    tokens, positions = jnp.asarray(nxt[:, None], jnp.int32), positions + 1
  return np.stack(out, axis=1)


def test_greedy_matches_hf_generate(pair):
  version, hf, _, model, params, encode, decode = pair
  inputs, steps = _inputs(), 12
  with torch.no_grad():
    expected = hf.generate(input_ids=torch.tensor(inputs),
                           attention_mask=torch.tensor(inputs != 0), do_sample=False,
                           max_new_tokens=steps).numpy()
  ours = _greedy(model, params, encode, decode, inputs, steps)
  np.testing.assert_array_equal(ours[:, :expected.shape[1]], expected)
  assert not ours[:, expected.shape[1]:].any()  # HF stops once every row is done
  assert len(np.unique(ours)) > 4
  if version == 'v1_1':  # the EOS path is exercised: one row ends early, padded after
    assert (ours == EOS).any(axis=1).tolist() == [False, False, True]


def test_export_import_roundtrip_exact(pair):
  _, hf, _, model, params, _, _ = pair
  hf_config, state_dict = hf_t5.params_to_hf(model.config, params)
  hf_state = {k: v.numpy() for k, v in hf.state_dict().items()}
  assert set(state_dict) == set(hf_state)  # tied copies included, as torch names them
  for key, value in hf_state.items():
    np.testing.assert_array_equal(state_dict[key], value, err_msg=key)
  again = hf_t5.params_from_hf(state_dict, hf_t5.config_from_hf(hf_config))
  jax.tree.map(np.testing.assert_array_equal, again, params)
  assert hf_t5.config_from_hf(hf_config) == model.config


def test_hf_loads_what_save_hf_dir_wrote(pair, tmp_path):
  _, hf, _, model, params, _, _ = pair
  hf_t5.save_hf_dir(str(tmp_path), model.config, params)
  with open(tmp_path / 'config.json') as f:
    written = json.load(f)
  assert written['decoder_start_token_id'] == 0 and written['eos_token_id'] == EOS
  loaded, info = transformers.T5ForConditionalGeneration.from_pretrained(
      str(tmp_path), output_loading_info=True)
  assert not any(info.values()), info
  inputs = _inputs()
  dec_tokens = np.array([[0, 5, 6, 7]] * 3)
  np.testing.assert_allclose(_hf_logits(loaded.eval(), inputs, dec_tokens),
                             _hf_logits(hf, inputs, dec_tokens), atol=1e-6)
  config, again = hf_t5.load_hf_dir(str(tmp_path))
  assert config == model.config
  jax.tree.map(np.testing.assert_array_equal, again, params)


def test_load_pytorch_bin_and_bfloat16(pair, tmp_path):
  _, hf, _, _, params, _, _ = pair
  hf.save_pretrained(tmp_path / 'bin', safe_serialization=False)
  assert (tmp_path / 'bin' / 'pytorch_model.bin').exists()
  jax.tree.map(np.testing.assert_array_equal, hf_t5.load_hf_dir(str(tmp_path / 'bin'))[1],
               params)
  bf16 = _hf_model(pair[0]).to(torch.bfloat16)
  bf16.save_pretrained(tmp_path / 'bf16')
  _, loaded = hf_t5.load_hf_dir(str(tmp_path / 'bf16'))
  expected = bf16.shared.weight.detach().float().numpy()
  np.testing.assert_array_equal(loaded['token_embedder']['embedding'], expected)


def test_mismatches_fail_with_a_message(pair, tmp_path):
  _, _, path, model, params, _, _ = pair
  with pytest.raises(FileNotFoundError, match='config.json'):
    hf_t5.load_hf_dir(str(tmp_path))
  _, state_dict = hf_t5.params_to_hf(model.config, params)
  with pytest.raises(ValueError, match='unexpected keys'):
    hf_t5.params_from_hf(state_dict, model.config.replace(num_decoder_layers=1))
  with pytest.raises(ValueError, match='missing'):
    hf_t5.params_from_hf(state_dict, model.config.replace(num_encoder_layers=3))
  with pytest.raises(ValueError, match='shape'):
    hf_t5.params_from_hf(state_dict, model.config.replace(mlp_dim=8))


def test_a_directory_missing_a_weight_is_a_one_line_cli_error(pair, tmp_path, capsys):
  from safetensors.numpy import save_file
  from specjax import decode
  _, _, path, model, params, _, _ = pair
  _, state_dict = hf_t5.params_to_hf(model.config, params)
  gone = sorted(k for k in state_dict if k.startswith('decoder.block.0.'))[0]
  shutil.copy(os.path.join(path, 'config.json'), tmp_path)
  save_file({k: np.ascontiguousarray(v) for k, v in state_dict.items() if k != gone},
            str(tmp_path / 'model.safetensors'))
  assert decode.main(['--target', str(tmp_path), '--draft', str(tmp_path), '--quiet']) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: ') and '\n' not in err and f'{gone} is missing' in err


def test_sharded_safetensors_load_through_their_index(pair, tmp_path):
  """save_pretrained with a small max_shard_size writes model-0000x-of-0000y.safetensors
  and model.safetensors.index.json: load_model reads every shard, the logits are HF's."""
  from specjax import checkpoints
  _, hf, _, model, params, _, _ = pair
  hf.save_pretrained(str(tmp_path), max_shard_size='20KB')
  shards = sorted(p.name for p in tmp_path.glob('model-*-of-*.safetensors'))
  assert len(shards) > 2 and (tmp_path / 'model.safetensors.index.json').exists()
  assert not (tmp_path / 'model.safetensors').exists()
  loaded_model, loaded = checkpoints.load_model(model.config, str(tmp_path))
  jax.tree.map(np.testing.assert_array_equal, loaded, params)
  inputs, dec_tokens = _inputs(), np.array([[0, 5, 6, 7]] * 3)
  encoded = loaded_model.encode(loaded, inputs)
  logits, _ = loaded_model.decode(loaded, encoded, loaded_model.init_cache(3, 4), dec_tokens,
                                  np.zeros(3, np.int32))
  np.testing.assert_allclose(logits, _hf_logits(hf, inputs, dec_tokens), atol=1e-4)
