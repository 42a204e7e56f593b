"""Hugging Face checkpoint directories: config.json, safetensors (one file or shards with
their index) or pytorch_model.bin, read and written for the decoder-only models.

Arrays are read as stored (bfloat16 stays bfloat16, through ml_dtypes), so that a bf16
checkpoint loaded as bf16 params never takes a float32 copy.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Tuple

import numpy as np

from specjax.checkpoints import hf_lm
from specjax.models.lm_config import LMConfig

PyTree = Any
_WEIGHTS = ('model.safetensors', 'pytorch_model.bin')
T5_MODEL_TYPES = ('t5',)


def read_config(path: str) -> Dict[str, Any]:
  """The config.json dict of a `save_pretrained` directory.

  Raises:
    FileNotFoundError: no config.json there.
    ValueError: it is not valid JSON.
  """
  config_path = os.path.join(os.fspath(path), 'config.json')
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f'no config.json in {path}; pass a directory written by '
                            'save_pretrained')
  try:
    with open(config_path, encoding='utf-8') as f:
      return json.load(f)
  except json.JSONDecodeError as e:
    raise ValueError(f'{config_path} is not valid JSON ({e.msg}); restore the file '
                     'save_pretrained wrote') from None


def model_type(path: str) -> str:
  """config.json's model_type ('t5', 'llama', 'gpt2', ...; '' when it has none)."""
  return str(read_config(path).get('model_type', ''))


def is_decoder_only(path: str) -> bool:
  """Whether a Hugging Face directory holds one of the decoder-only models (else a T5).

  Raises:
    ValueError: config.json names a model_type that is neither (the message lists them).
  """
  kind = model_type(path)
  if kind in hf_lm.MODEL_TYPES:
    return True
  if kind in T5_MODEL_TYPES:
    return False
  raise ValueError(f'model_type {kind!r} in {path}/config.json is not supported; pass a '
                   f'checkpoint of one of {", ".join(hf_lm.MODEL_TYPES + T5_MODEL_TYPES)}')


def _read_safetensors(path: str) -> Dict[str, np.ndarray]:
  from safetensors import safe_open  # pylint: disable=import-outside-toplevel
  out = {}
  try:
    with safe_open(path, framework='numpy') as f:
      for key in f.keys():
        out[key] = f.get_tensor(key)
  except (TypeError, ValueError):  # an older safetensors without bfloat16 in numpy
    with safe_open(path, framework='flax') as f:
      for key in f.keys():
        out[key] = np.asarray(f.get_tensor(key))
  return out


def _read_torch(path: str) -> Dict[str, np.ndarray]:
  import torch  # pylint: disable=import-outside-toplevel
  state = torch.load(path, map_location='cpu', weights_only=True)
  return {k: v.float().numpy() for k, v in state.items()}


def read_state_dict(path: str) -> Dict[str, np.ndarray]:
  """Every tensor of a `save_pretrained` directory, shard by shard when it is sharded
  (`model.safetensors.index.json` and its `model-0000x-of-0000y.safetensors`).

  Raises:
    FileNotFoundError: no weights, or a shard the index names is missing.
    ValueError: an unreadable index.
  """
  path = os.fspath(path)
  for name, reader in (('model.safetensors', _read_safetensors),
                       ('pytorch_model.bin', _read_torch)):
    single, index = os.path.join(path, name), os.path.join(path, name + '.index.json')
    if os.path.isfile(single):
      return reader(single)
    if os.path.isfile(index):
      try:
        with open(index, encoding='utf-8') as f:
          shards = sorted(set(json.load(f)['weight_map'].values()))
      except (json.JSONDecodeError, KeyError, AttributeError):
        raise ValueError(f'{index} has no readable weight_map; restore the index '
                         'save_pretrained wrote') from None
      state = {}
      for shard in shards:
        file = os.path.join(path, shard)
        if not os.path.isfile(file):
          raise FileNotFoundError(f'shard {shard} named by {index} is missing; copy every '
                                  'shard of the checkpoint')
        state.update(reader(file))
      return state
  raise FileNotFoundError(f'no {" or ".join(_WEIGHTS)} (or its index) in {path}; pass a '
                          'directory written by save_pretrained')


def load_hf_lm_dir(path: str, name: str = '') -> Tuple[LMConfig, PyTree]:
  """(config, params) of a Llama-family or GPT-2 `save_pretrained` directory.

  Args:
    path: the directory (config.json + weights).
    name: recorded as the config's name.

  Returns:
    The LMConfig and a nested dict of numpy arrays in the checkpoint's dtype.
  """
  config = hf_lm.config_from_hf(read_config(path), name=name)
  return config, hf_lm.params_from_hf(read_state_dict(path), config)


def save_hf_lm_dir(path: str, config: LMConfig, params: PyTree) -> None:
  """Writes config.json + model.safetensors (float32) for `AutoModelForCausalLM`.

  Args:
    path: the output directory (created if needed).
    config: the model's LMConfig.
    params: its params (numpy or jax arrays).
  """
  from safetensors.numpy import save_file  # pylint: disable=import-outside-toplevel
  state = hf_lm.params_to_hf(config, params)
  if config.tie_embeddings:
    state.pop('lm_head.weight')  # HF re-ties it on load
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, 'config.json'), 'w', encoding='utf-8') as f:
    json.dump(hf_lm.config_to_hf(config), f, indent=2, sort_keys=True)
  save_file({k: np.ascontiguousarray(v) for k, v in state.items()},
            os.path.join(path, 'model.safetensors'), metadata={'format': 'pt'})
