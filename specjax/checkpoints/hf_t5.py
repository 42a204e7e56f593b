"""Conversion between Hugging Face `T5ForConditionalGeneration` and specjax's T5X params.

HF stores `nn.Linear` weights as [out, in] and T5X kernels as [in, out], so every kernel
is transposed; the relative position bias lives only in HF's block 0 as [buckets, N] and in
T5X as `relpos_bias/rel_embedding` [N, buckets]. Both scale tied (v1.0) logits by
1/sqrt(d_model), so no weight is rescaled. torch is imported lazily, only to read
`pytorch_model.bin` files and bfloat16 safetensors.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Iterator, Tuple

import jax
import numpy as np

from specjax.checkpoints.tree_paths import get_path, set_path
from specjax.models import t5_layers
from specjax.models.t5 import T5
from specjax.models.t5_config import T5Config

PyTree = Any

# HF feed_forward_proj <-> T5X mlp_activations. HF's plain 'gelu' is the exact erf GELU,
# which T5X has no name for, so only the gated form (HF 'gelu_new' = T5X 'gelu') maps.
_FF_TO_ACTIVATIONS = {'relu': ('relu',), 'gated-gelu': ('gelu', 'linear'),
                      'gated-relu': ('relu', 'linear')}
_ACTIVATIONS_TO_FF = {v: k for k, v in _FF_TO_ACTIVATIONS.items()}
_HF_ACT_FN = {'relu': 'relu', 'gated-gelu': 'gelu_new', 'gated-relu': 'relu'}

# Names HF uses for the shared embedding besides `shared.weight` (tied copies), plus a
# stale key some old checkpoints carry that HF itself ignores on load.
_EMBEDDING_ALIASES = ('shared.weight', 'encoder.embed_tokens.weight',
                      'decoder.embed_tokens.weight')
_IGNORED = ('decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight',)

_ATTENTION = (('q', 'query'), ('k', 'key'), ('v', 'value'), ('o', 'out'))


def config_from_hf(hf_config: Dict[str, Any]) -> T5Config:
  """T5Config from a Hugging Face T5 config dict (config.json contents).

  Args:
    hf_config: dict with d_model, d_kv, d_ff, num_heads, num_layers, vocab_size, ...

  Returns:
    The matching T5Config (float32 activations; use `.replace(dtype=...)` to change).
  """
  ff = hf_config.get('feed_forward_proj', 'relu')
  if ff not in _FF_TO_ACTIVATIONS:
    raise ValueError(f'feed_forward_proj {ff!r} is not supported; use one of '
                     f'{sorted(_FF_TO_ACTIVATIONS)}.')
  num_layers = hf_config['num_layers']
  return T5Config(
      vocab_size=hf_config['vocab_size'], emb_dim=hf_config['d_model'],
      num_heads=hf_config['num_heads'], num_encoder_layers=num_layers,
      num_decoder_layers=hf_config.get('num_decoder_layers') or num_layers,
      head_dim=hf_config['d_kv'], mlp_dim=hf_config['d_ff'],
      mlp_activations=_FF_TO_ACTIVATIONS[ff],
      logits_via_embedding=bool(hf_config.get('tie_word_embeddings', True)),
      relative_attention_num_buckets=hf_config.get('relative_attention_num_buckets', 32),
      relative_attention_max_distance=hf_config.get('relative_attention_max_distance', 128))


def _key_map(cfg: T5Config) -> Iterator[Tuple[str, Tuple[str, ...], bool]]:
  """Yields (HF key, T5X path, transpose) for every parameter but the embedding."""
  mlp_names = t5_layers.mlp_kernel_names(cfg.mlp_activations) + ['wo']
  for stack, num_layers in (('encoder', cfg.num_encoder_layers),
                            ('decoder', cfg.num_decoder_layers)):
    yield (f'{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight',
           (stack, 'relpos_bias', 'rel_embedding'), True)
    yield f'{stack}.final_layer_norm.weight', (stack, f'{stack}_norm', 'scale'), False
    if stack == 'encoder':
      sublayers = (('SelfAttention', 'attention', 'pre_attention_layer_norm'),
                   ('DenseReluDense', 'mlp', 'pre_mlp_layer_norm'))
    else:
      sublayers = (('SelfAttention', 'self_attention', 'pre_self_attention_layer_norm'),
                   ('EncDecAttention', 'encoder_decoder_attention',
                    'pre_cross_attention_layer_norm'),
                   ('DenseReluDense', 'mlp', 'pre_mlp_layer_norm'))
    for i in range(num_layers):
      for j, (hf_name, name, norm) in enumerate(sublayers):
        hf = f'{stack}.block.{i}.layer.{j}'
        ours = (stack, f'layers_{i}')
        yield f'{hf}.layer_norm.weight', ours + (norm, 'scale'), False
        pairs = _ATTENTION if name != 'mlp' else [(n, n) for n in mlp_names]
        for hf_w, w in pairs:
          yield f'{hf}.{hf_name}.{hf_w}.weight', ours + (name, w, 'kernel'), True
  if not cfg.logits_via_embedding:
    yield 'lm_head.weight', ('decoder', 'logits_dense', 'kernel'), True


def _check_shape(key: str, array: np.ndarray, expected: Tuple[int, ...]) -> None:
  if array.shape != expected:
    raise ValueError(f'{key} has shape {array.shape} but the config expects {expected}; '
                     'check that the config matches the checkpoint.')


def params_from_hf(state_dict: Dict[str, np.ndarray], config: T5Config) -> PyTree:
  """T5X-layout float32 params from an HF T5ForConditionalGeneration state dict.

  Args:
    state_dict: HF key -> numpy array (Linear weights [out, in]). Tied copies of the
      embedding (encoder/decoder.embed_tokens, lm_head when tied) may be present or not.
    config: the matching T5Config (e.g. from `config_from_hf`).

  Returns:
    Nested dict of float32 numpy arrays with T5X names, kernels [in, out].
  """
  expected = jax.eval_shape(T5(config).init, jax.random.key(0))  # shapes, no weights
  params: dict = {}
  used = set(_IGNORED)
  for key in _EMBEDDING_ALIASES:
    if key in state_dict:
      emb = np.asarray(state_dict[key], np.float32)
      break
  else:
    raise ValueError('the state dict has no shared embedding (shared.weight); '
                   'is it a T5ForConditionalGeneration checkpoint?')
  _check_shape('shared.weight', emb, expected['token_embedder']['embedding'].shape)
  set_path(params, ('token_embedder', 'embedding'), emb)
  used.update(_EMBEDDING_ALIASES)
  if config.logits_via_embedding:
    used.add('lm_head.weight')  # a tied copy of the embedding
  for key, path, transpose in _key_map(config):
    if key not in state_dict:
      raise ValueError(f'{key} is missing from the state dict; check that the config '
                     '(layers, feed_forward_proj, tie_word_embeddings) matches it.')
    array = np.asarray(state_dict[key], np.float32)
    array = np.ascontiguousarray(array.T) if transpose else array
    _check_shape(key, array, get_path(expected, path).shape)
    set_path(params, path, array)
    used.add(key)
  unexpected = sorted(set(state_dict) - used)
  if unexpected:
    raise ValueError(f'unexpected keys {unexpected[:5]} in the state dict; check that the '
                     'config (layers, feed_forward_proj) matches the checkpoint.')
  return params


def params_to_hf(config: T5Config, params: PyTree) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
  """The HF config dict and full state dict (as `model.state_dict()` names it).

  Args:
    config: the model's T5Config.
    params: T5X-layout params (numpy or jax arrays).

  Returns:
    (hf_config_dict, state_dict): the state dict has float32 numpy arrays, [out, in]
    Linear weights, and every tied copy of the embedding, so that
    `model.load_state_dict(state_dict)` works in strict mode.
  """
  act = tuple(config.mlp_activations)
  if act not in _ACTIVATIONS_TO_FF:
    raise ValueError(f'mlp_activations {act} has no HF equivalent; use one of '
                     f'{sorted(_ACTIVATIONS_TO_FF)}.')
  ff = _ACTIVATIONS_TO_FF[act]
  hf_config = {
      'architectures': ['T5ForConditionalGeneration'], 'model_type': 't5',
      'vocab_size': config.vocab_size, 'd_model': config.emb_dim, 'd_kv': config.head_dim,
      'd_ff': config.mlp_dim, 'num_heads': config.num_heads,
      'num_layers': config.num_encoder_layers,
      'num_decoder_layers': config.num_decoder_layers,
      'relative_attention_num_buckets': config.relative_attention_num_buckets,
      'relative_attention_max_distance': config.relative_attention_max_distance,
      'feed_forward_proj': ff, 'dense_act_fn': _HF_ACT_FN[ff],
      'is_gated_act': ff.startswith('gated-'),
      'tie_word_embeddings': bool(config.logits_via_embedding),
      'layer_norm_epsilon': t5_layers.LAYER_NORM_EPS, 'dropout_rate': 0.1,
      'initializer_factor': 1.0, 'use_cache': True, 'is_encoder_decoder': True,
      'decoder_start_token_id': 0, 'pad_token_id': 0, 'eos_token_id': 1,
  }
  emb = np.asarray(params['token_embedder']['embedding'], np.float32)
  state_dict = {key: emb for key in _EMBEDDING_ALIASES}
  if config.logits_via_embedding:
    state_dict['lm_head.weight'] = emb
  for key, path, transpose in _key_map(config):
    array = np.asarray(get_path(params, path), np.float32)
    state_dict[key] = np.ascontiguousarray(array.T) if transpose else array
  return hf_config, state_dict


def _read_safetensors(path: str) -> Dict[str, np.ndarray]:
  from safetensors.numpy import load_file
  try:
    return load_file(path)
  except TypeError:  # numpy has no bfloat16: go through torch and upcast.
    from safetensors.torch import load_file as load_torch
    return {k: v.float().numpy() for k, v in load_torch(path).items()}


def _read_torch(path: str) -> Dict[str, np.ndarray]:
  import torch
  state = torch.load(path, map_location='cpu', weights_only=True)
  return {k: v.float().numpy() for k, v in state.items()}


def load_hf_dir(path: str) -> Tuple[T5Config, PyTree]:
  """Reads a `save_pretrained` directory (config.json + safetensors or pytorch_model.bin).

  Sharded checkpoints (`*.index.json`) are read shard by shard.

  Args:
    path: the directory.

  Returns:
    (config, params) with float32 numpy params in T5X layout.
  """
  config_path = os.path.join(path, 'config.json')
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f'no config.json in {path}; pass a directory written by '
                            'save_pretrained (or save_hf_dir).')
  with open(config_path) as f:
    config = config_from_hf(json.load(f))
  state_dict: Dict[str, np.ndarray] = {}
  for name, reader in (('model.safetensors', _read_safetensors),
                       ('pytorch_model.bin', _read_torch)):
    single, index = os.path.join(path, name), os.path.join(path, name + '.index.json')
    if os.path.isfile(single):
      state_dict = reader(single)
      break
    if os.path.isfile(index):
      with open(index) as f:
        shards = sorted(set(json.load(f)['weight_map'].values()))
      for shard in shards:
        state_dict.update(reader(os.path.join(path, shard)))
      break
  else:
    raise FileNotFoundError(f'no model.safetensors or pytorch_model.bin in {path}.')
  return config, params_from_hf(state_dict, config)


def save_hf_dir(path: str, config: T5Config, params: PyTree) -> None:
  """Writes config.json + model.safetensors for `T5ForConditionalGeneration.from_pretrained`.

  Args:
    path: output directory (created if needed).
    config: the model's T5Config.
    params: T5X-layout params.
  """
  from safetensors.numpy import save_file
  hf_config, state_dict = params_to_hf(config, params)
  # Like HF's own save_pretrained, store the shared embedding once; HF re-ties the rest.
  drop = set(_EMBEDDING_ALIASES[1:]) | ({'lm_head.weight'} if config.logits_via_embedding
                                        else set())
  state_dict = {k: v for k, v in state_dict.items() if k not in drop}
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, 'config.json'), 'w') as f:
    json.dump(hf_config, f, indent=2, sort_keys=True)
  save_file(state_dict, os.path.join(path, 'model.safetensors'), metadata={'format': 'pt'})
