"""Load a model and its params from any checkpoint (T5X, Hugging Face, orbax).

`load_model` is the one entry point: it resolves the config (a registry name, a T5Config or
LMConfig, or the checkpoint's own), detects the format (a Hugging Face directory of a
Llama-family or GPT-2 model gives a `CausalLM`, of a T5 a `T5`), checks the tree against
the config's shapes (`jax.eval_shape(model.init, key)`) and returns float32 params.
`save_params` writes the orbax format with a `specjax.json` that lets
`load_model(None, path)` (or `load_model(path)`) rebuild the config.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from specjax.checkpoints import hf_files, t5_tree, t5x, t5x_orbax, t5x_scanned
from specjax.checkpoints.t5_tree import config_from_params, in_layout
from specjax.models.lm import CausalLM
from specjax.models.lm_config import LM_CONFIGS, LMConfig
from specjax.models.t5 import T5
from specjax.models.t5_config import T5_CONFIGS, T5Config

PyTree = Any
CONFIG_FILE = 'specjax.json'
_HF_WEIGHTS = ('model.safetensors', 'pytorch_model.bin', 'model.safetensors.index.json',
               'pytorch_model.bin.index.json')
_ORBAX_MARKERS = (CONFIG_FILE, '_CHECKPOINT_METADATA', '_METADATA', 'manifest.ocdbt')


def _orbax():
  # Imported lazily: orbax is slow to import and only these two paths need it.
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  return ocp


# ----------------------------------------------------------------------------- configs


def resolve_config(name_or_config: Union[str, T5Config, LMConfig]) -> Union[T5Config, LMConfig]:
  """A registry name (e.g. 't5_small', 'llama3_8b') or a config -> the config.

  Raises:
    ValueError: the name is in neither `T5_CONFIGS` nor `LM_CONFIGS` (the message lists
      the known ones).
  """
  if isinstance(name_or_config, (T5Config, LMConfig)):
    return name_or_config
  if name_or_config in LM_CONFIGS:
    return LM_CONFIGS[name_or_config]
  if name_or_config not in T5_CONFIGS:
    raise ValueError(f'unknown model config {name_or_config!r}; pass one of '
                     f'{", ".join(sorted(T5_CONFIGS) + sorted(LM_CONFIGS))}, a checkpoint '
                     'directory, an LMConfig or a T5Config')
  return T5_CONFIGS[name_or_config]


def build_model(config: Union[T5Config, LMConfig]):
  """The model of a config: a `CausalLM` for an LMConfig, a `T5` for a T5Config."""
  return CausalLM(config) if isinstance(config, LMConfig) else T5(config)


def is_checkpoint_path(name: Any) -> bool:
  """Whether `load_model`'s first argument names a checkpoint rather than a registry entry:
  a string that is no registry name and is an existing path, a gs:// URL or has a '/'."""
  if not isinstance(name, (str, os.PathLike)):
    return False
  name = os.fspath(name)
  if name in T5_CONFIGS or name in LM_CONFIGS:
    return False
  return os.path.exists(name) or name.startswith('gs://') or '/' in name


def _config_to_json(config: Union[T5Config, LMConfig]) -> str:
  kind = {'model': 'lm'} if isinstance(config, LMConfig) else {}
  return json.dumps({'config': dataclasses.asdict(config), **kind}, indent=2)


def _config_from_json(text: str) -> Union[T5Config, LMConfig]:
  stored = json.loads(text)
  cls = LMConfig if stored.get('model') == 'lm' else T5Config
  fields = {f.name for f in dataclasses.fields(cls)}
  return cls(**{k: tuple(v) if isinstance(v, list) else v
                for k, v in stored['config'].items() if k in fields})


def _label(config: T5Config) -> str:
  return f'config {config.name}' if config.name else 'the given config'


def check_params(found: PyTree, expected: PyTree, config: T5Config) -> None:
  """Checks that a checkpoint's tree has the config's keys and shapes.

  Args:
    found: the checkpoint's params (arrays or anything with `.shape`).
    expected: the config's params, e.g. `jax.eval_shape(model.init, key)`.
    config: the config (named in the message).

  Raises:
    ValueError: one line naming up to three mismatching keys, both shapes, and the fix.
  """
  flat_found = traverse_util.flatten_dict(found, sep='/')
  flat_expected = traverse_util.flatten_dict(expected, sep='/')
  problems = []
  for key in sorted(set(flat_found) | set(flat_expected)):
    if key not in flat_found:
      problems.append(f'{key} is missing from the checkpoint')
    elif key not in flat_expected:
      problems.append(f'{key} is in the checkpoint but not in the config')
    else:
      have, want = tuple(flat_found[key].shape), tuple(flat_expected[key].shape)
      if have != want:
        problems.append(f'{key} has shape {have} in the checkpoint, {want} in the config')
  if problems:
    more = f' (and {len(problems) - 3} more)' if len(problems) > 3 else ''
    raise ValueError(f'checkpoint does not match {_label(config)}: '
                     f'{", ".join(problems[:3])}{more}; '
                     'pass the config the checkpoint was trained with')


# ----------------------------------------------------------------------------- formats


def detect_format(path: str) -> str:
  """Which reader a checkpoint needs.

  Args:
    path: a local directory or file, or a gs:// URL (always taken as T5X).

  Returns:
    't5x' (a msgpack `checkpoint` file, a dir holding one, or a model_dir with
    `checkpoint_<step>/` subdirs), 't5x_orbax' (current T5X: `checkpoint_<step>/state/`,
    the checkpoint_<step> or state dir, or a model_dir of them), 'hf' (config.json plus
    model.safetensors or pytorch_model.bin) or 'orbax' (written by `save_params`, or any
    orbax checkpoint).

  Raises:
    FileNotFoundError: `path` does not exist.
    ValueError: it exists but is none of the above.
  """
  path = os.fspath(path).rstrip('/')
  if path.startswith('gs://'):
    return 't5x'
  if not os.path.exists(path):
    raise FileNotFoundError(f'checkpoint path {path} does not exist; pass an existing T5X, '
                            'Hugging Face or orbax checkpoint (--checkpoint)')
  if os.path.isfile(path):
    if os.path.basename(path) == 'checkpoint':
      return 't5x'
    names = []
  else:
    names = os.listdir(path)
  if 'checkpoint' in names and os.path.isfile(os.path.join(path, 'checkpoint')):
    return 't5x'
  if 'config.json' in names and any(w in names for w in _HF_WEIGHTS):
    return 'hf'
  if CONFIG_FILE not in names and t5x_orbax.find_state_dir(path):
    return 't5x_orbax'
  if any(m in names for m in _ORBAX_MARKERS):
    return 'orbax'
  if t5x.find_steps(path):
    return 't5x'
  raise ValueError(
      f'cannot tell the checkpoint format of {path}: pass a T5X checkpoint (a msgpack '
      '"checkpoint" file, checkpoint_<step>/ dirs or their state/), a Hugging Face dir (config.json + '
      'model.safetensors or pytorch_model.bin) or a dir written by save_params')


def save_params(path: str, params: PyTree, config: Optional[T5Config] = None,
                force: bool = False) -> str:
  """Saves params with orbax (and the config in `<path>/specjax.json`).

  Args:
    path: the checkpoint directory to create (local or any path orbax accepts).
    params: the param tree (jax or numpy arrays; dtypes are kept).
    config: recorded so that `load_model(None, path)` rebuilds the model.
    force: overwrite an existing checkpoint at `path`.

  Returns:
    The absolute checkpoint path.
  """
  path = os.fspath(path)
  path = path if '://' in path else os.path.abspath(path)
  ocp = _orbax()
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(path, params, force=force)
  if config is not None:
    t5x.write_bytes(f'{path}/{CONFIG_FILE}', _config_to_json(config).encode())
  return path


def _damaged(path: str, e: Exception) -> ValueError:
  """The one-line error of an orbax checkpoint that cannot be read whole."""
  # The kind of failure, not its details: which array a truncated file fails first varies.
  reason = ' '.join(str(e).split()).split(':')[0][:120] or type(e).__name__
  return ValueError(f'cannot read the orbax checkpoint {path} ({reason}): it is incomplete or '
                    'damaged (a truncated copy?); copy it again, or save it again')


def _orbax_shapes(path: str) -> PyTree:
  """The stored tree with `jax.ShapeDtypeStruct` leaves, read from orbax's metadata."""
  path = os.fspath(path)
  path = path if '://' in path else os.path.abspath(path)  # orbax needs absolute paths
  try:
    with _orbax().StandardCheckpointer() as checkpointer:
      meta = checkpointer.metadata(path)
  except Exception as e:  # pylint: disable=broad-except
    raise _damaged(path, e) from e
  tree = getattr(meta, 'item_metadata', meta)
  tree = getattr(tree, 'tree', tree)
  if not isinstance(tree, dict) or not tree:
    raise _damaged(path, ValueError('its _METADATA holds no tree of arrays'))
  return jax.tree.map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype), tree,
                      is_leaf=lambda m: hasattr(m, 'shape'))


def load_params_orbax(path: str, abstract_params: Optional[PyTree] = None) -> PyTree:
  """Restores params saved by `save_params` (or any orbax StandardCheckpointer save).

  Args:
    path: the checkpoint directory.
    abstract_params: tree of `jax.ShapeDtypeStruct` (with shardings to restore sharded);
      leaves are cast to its dtypes. None restores the stored tree as saved.

  Returns:
    The param tree.
  """
  path = os.fspath(path)
  path = path if '://' in path else os.path.abspath(path)
  try:
    with _orbax().StandardCheckpointer() as checkpointer:
      return checkpointer.restore(path, abstract_params)
  except FileNotFoundError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise _damaged(path, e) from e


# ----------------------------------------------------------------------------- load_model


def _read_checkpoint(fmt: str, path: str, config: Optional[T5Config]
                     ) -> Tuple[T5Config, PyTree]:
  """(config, params) from a checkpoint; `config` None means the checkpoint's own."""
  if fmt in ('t5x', 't5x_orbax'):
    read = t5x.read_t5x_checkpoint if fmt == 't5x' else t5x_orbax.read_t5x_orbax
    params = read(path)
    if t5x_scanned.is_t5x_scanned(params):
      params = t5x_scanned.from_t5x(params)
    config = config or config_from_params(params)
    return config, in_layout(params, config)
  if fmt == 'hf' and hf_files.is_decoder_only(path):
    lm_config, params = hf_files.load_hf_lm_dir(path)
    return config or lm_config, params
  if fmt == 'hf':
    from specjax.checkpoints import hf_t5  # pylint: disable=g-import-not-at-top
    hf_config, params = hf_t5.load_hf_dir(path)
    return config or t5_tree.named(hf_config), params
  if config is None:
    text = t5x.read_bytes(f'{path.rstrip("/")}/{CONFIG_FILE}')
    if text is None:
      raise ValueError(f'orbax checkpoint {path} has no {CONFIG_FILE}; pass the model '
                       'config name it was saved with')
    config = _config_from_json(text.decode())
  return config, None


def load_model(name_or_config: Union[str, T5Config, LMConfig, None] = None,
               checkpoint: Optional[str] = None, dtype: Any = None,
               shardings: Optional[PyTree] = None,
               param_dtype: Any = 'float32') -> Tuple[Any, PyTree]:
  """Builds a model and its params from a registry name, a config and/or a checkpoint.

  Args:
    name_or_config: a `T5_CONFIGS` or `LM_CONFIGS` name, a T5Config or LMConfig, None to
      take the config from the checkpoint (HF config.json, the specjax.json of
      `save_params`, or the shapes of a T5X tree), or the checkpoint path itself
      (`load_model('path/to/llama')`, config from the checkpoint).
    checkpoint: a T5X model_dir / checkpoint_<step> dir / checkpoint file (local or gs://),
      a T5X Orbax model_dir / checkpoint_<step> dir / its state dir, a Hugging Face dir,
      or an orbax dir from `save_params`; None gives random params
      from `model.init(jax.random.PRNGKey(0))`.
    dtype: the activation (and cache) dtype, e.g. 'bfloat16'; sets `config.dtype`.
    shardings: optional tree of `jax.sharding.Sharding` matching the params; by default
      params land on the default device.
    param_dtype: the dtype params are stored in memory with, whatever the checkpoint
      holds: 'float32' (default), or 'bfloat16' to halve their memory (T5-XXL on one
      TPU v4 chip needs it).

  Returns:
    (model, params): a `T5` or `CausalLM`; params is a nested dict of `param_dtype` jax
    arrays with T5X-style names.

  Raises:
    FileNotFoundError: the checkpoint path does not exist.
    ValueError: unknown registry name or format, or a checkpoint whose tree does not
      match the config (the message names the keys, both shapes and the fix).
  """
  param_dtype = jnp.dtype(param_dtype)
  if param_dtype not in (jnp.float32, jnp.bfloat16, jnp.float16):
    raise ValueError(f'param dtype {param_dtype.name} is not supported; pass float32, '
                     'bfloat16 or float16')
  if is_checkpoint_path(name_or_config):
    if checkpoint is not None:
      raise ValueError(f'load_model got two checkpoints ({name_or_config} and {checkpoint}); '
                       'pass the path once, first or as checkpoint=')
    name_or_config, checkpoint = None, name_or_config
  config = None if name_or_config is None else resolve_config(name_or_config)
  params = None
  if checkpoint is not None:
    checkpoint = os.fspath(checkpoint)
    fmt = detect_format(checkpoint)
    config, params = _read_checkpoint(fmt, checkpoint, config)
  elif config is None:
    raise ValueError('load_model needs a model config name, a T5Config or a checkpoint; '
                     f'pass one of {", ".join(sorted(T5_CONFIGS))} or --checkpoint')
  if dtype is not None:
    config = config.replace(dtype=jnp.dtype(dtype).name)
  model = build_model(config)
  key = jax.random.PRNGKey(0)
  abstract = jax.eval_shape(model.init, key)
  if checkpoint is None:
    init = lambda k: jax.tree.map(lambda x: x.astype(param_dtype), model.init(k))
    if shardings is None:
      return model, init(key)
    return model, jax.jit(init, out_shardings=shardings)(key)
  if params is None:  # orbax: check shapes from the metadata before reading any array
    check_params(_orbax_shapes(checkpoint), abstract, config)
    # Restored straight into param_dtype (and onto the shardings): no float32 copy first.
    if shardings is not None:
      restore_as = jax.tree.map(
          lambda a, s: jax.ShapeDtypeStruct(a.shape, param_dtype, sharding=s), abstract,
          shardings)
    else:
      restore_as = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, param_dtype), abstract)
    params = load_params_orbax(checkpoint, restore_as)
  check_params(params, abstract, config)
  params = jax.tree.map(lambda x: np.asarray(x, param_dtype) if isinstance(x, np.ndarray)
                        else x.astype(param_dtype), params)
  return model, jax.device_put(params, shardings)
