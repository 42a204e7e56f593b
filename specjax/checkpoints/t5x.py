"""The legacy T5X checkpoint format (VERSION 3): read a `target` tree, write an exportable one.

Layout (t5x/checkpoints.py): `<model_dir>/checkpoint_<step>/checkpoint` is a flax msgpack of
`{'version': 3, 'optimizer': {'target': params, 'state': {'step', 'param_states'}}}`. Small
leaves are stored inline; the others are TensorStore spec dicts pointing at one zarr array per
leaf, e.g. `target.encoder.layers_0.attention.key.kernel/`, with a path RELATIVE to the
checkpoint dir (and, on GCS, the dummy bucket 't5x-dummy-bucket'), so both are patched here.
Only the `target` arrays are read; optimizer slots are never touched.
"""
from __future__ import annotations

import functools
import os
import re
import socket
import time
from typing import Any, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import tensorstore as ts
from flax import serialization, traverse_util

PyTree = Any
VERSION = 3
_INDEX = 'checkpoint'
_STEP_DIR = re.compile(r'^checkpoint_(\d+)$')
_DUMMY_BUCKET = 't5x-dummy-bucket'
# T5X targets 64 MiB zarr chunks.
_CHUNK_BYTES = 64 * 1024 * 1024


# ----------------------------------------------------------------------------- storage


def _split_gs(path: str) -> Tuple[str, str]:
  """'gs://bucket/a/b' -> ('bucket', 'a/b')."""
  match = re.fullmatch(r'gs://([^/]+)/?(.*)', path, re.DOTALL)
  if match is None:
    raise ValueError(f'malformed GCS path {path!r}; pass gs://<bucket>/<path>')
  return match.group(1), match.group(2).rstrip('/')


def _gcs_timeout() -> float:
  """Seconds to wait for one small GCS request (env SPECJAX_GCS_TIMEOUT, default 60).

  Without credentials or network tensorstore retries for a long time; a bound turns that
  into a one-line error naming the flag that overrides the path.
  """
  return float(os.environ.get('SPECJAX_GCS_TIMEOUT', '60'))


# GCS's host, unless an environment variable sends tensorstore elsewhere (a proxy, or
# another endpoint such as an emulator): then only a request can tell.
GCS_HOST = 'storage.googleapis.com'
ROUTED_ELSEWHERE = ('TENSORSTORE_GCS_HTTP_URL', 'https_proxy', 'HTTPS_PROXY', 'all_proxy',
                     'ALL_PROXY')


@functools.lru_cache(maxsize=None)
def gcs_unreachable() -> Optional[str]:
  """Why GCS cannot be reached from this machine (its host's name does not resolve), or
  None when it may be.

  Offline, tensorstore retries a request until `_gcs_timeout()` (a minute) and logs
  credential warnings on the way; a name lookup says the same in milliseconds. The answer
  is kept for the process (`gcs_unreachable.cache_clear()` asks again).
  """
  if any(os.environ.get(name) for name in ROUTED_ELSEWHERE):
    return None
  try:
    socket.getaddrinfo(GCS_HOST, 443)
  except OSError as e:
    return f'{GCS_HOST} does not resolve: {e.strerror or e}'
  return None


def gcs_failure() -> str:
  """Why a gs:// read failed, in a few words: `gcs_unreachable`'s reason, or a guess."""
  why = gcs_unreachable()
  return f'no GCS access, {why}' if why else 'no GCS access?'


def _gcs_store(bucket: str) -> ts.KvStore:
  """The bucket's store; OSError at once when GCS cannot be reached (`gcs_unreachable`)."""
  if gcs_unreachable() is not None:
    raise OSError(gcs_failure())
  return ts.KvStore.open({'driver': 'gcs', 'bucket': bucket}).result(timeout=_gcs_timeout())


def read_bytes(path: str) -> Optional[bytes]:
  """The bytes of a local or gs:// file, or None when it does not exist."""
  if path.startswith('gs://'):
    bucket, key = _split_gs(path)
    result = _gcs_store(bucket).read(key).result(timeout=_gcs_timeout())
    return bytes(result.value) if result.state == 'value' else None
  if not os.path.isfile(path):
    return None
  with open(path, 'rb') as f:
    return f.read()


def write_bytes(path: str, data: bytes) -> None:
  """Writes a local or gs:// file."""
  if path.startswith('gs://'):
    bucket, key = _split_gs(path)
    _gcs_store(bucket).write(key, data).result()
    return
  with open(path, 'wb') as f:
    f.write(data)


def find_steps(model_dir: str) -> List[int]:
  """Steps N with a `<model_dir>/checkpoint_N/checkpoint` index, ascending."""
  if model_dir.startswith('gs://'):
    bucket, prefix = _split_gs(model_dir)
    prefix = f'{prefix}/' if prefix else ''
    keys = _gcs_store(bucket).list(
        ts.KvStore.KeyRange(inclusive_min=prefix + 'checkpoint_',
                            exclusive_max=prefix + 'checkpoint`')).result(
                                timeout=_gcs_timeout())
    pattern = re.compile(re.escape(prefix) + r'checkpoint_(\d+)/checkpoint$')
    matches = [pattern.match(k.decode()) for k in keys]
    return sorted(int(m.group(1)) for m in matches if m)
  if not os.path.isdir(model_dir):
    return []
  steps = []
  for name in os.listdir(model_dir):
    match = _STEP_DIR.match(name)
    if match and os.path.isfile(os.path.join(model_dir, name, _INDEX)):
      steps.append(int(match.group(1)))
  return sorted(steps)


def find_checkpoint(path: str) -> Tuple[str, bytes]:
  """Resolves a model_dir (latest step), a `checkpoint_<step>` dir or the msgpack file.

  Args:
    path: local path or gs:// URL.

  Returns:
    (checkpoint_dir, msgpack_bytes): the `checkpoint_<step>` directory (relative zarr paths
    resolve against it) and the contents of its `checkpoint` index.

  Raises:
    FileNotFoundError: nothing that looks like a T5X checkpoint is at `path`.
  """
  path = os.fspath(path).rstrip('/')
  if not path.startswith('gs://') and not os.path.exists(path):
    raise FileNotFoundError(
        f'checkpoint path {path} does not exist; pass an existing T5X model_dir, '
        'checkpoint_<step> dir or its checkpoint file')
  if os.path.basename(path) == _INDEX:
    data = read_bytes(path)
    if data is not None:
      return os.path.dirname(path), data
  data = read_bytes(f'{path}/{_INDEX}')
  if data is not None:
    return path, data
  steps = find_steps(path)
  if steps:
    ckpt_dir = f'{path}/checkpoint_{steps[-1]}'
    return ckpt_dir, read_bytes(f'{ckpt_dir}/{_INDEX}')
  raise FileNotFoundError(
      f'no T5X checkpoint at {path}: expected a msgpack "checkpoint" file or '
      'checkpoint_<step>/ subdirs; pass a T5X model_dir or checkpoint_<step> dir')


# ----------------------------------------------------------------------------- reading


def _is_spec(node: Any) -> bool:
  return isinstance(node, dict) and 'driver' in node and 'kvstore' in node


def resolve_spec(spec: Dict[str, Any], ckpt_dir: str) -> Dict[str, Any]:
  """A copy of a stored TensorStore spec whose relative path points into `ckpt_dir`.

  Args:
    spec: a spec dict from the msgpack index (kvstore driver 'file', 'gfile' or 'gcs'; the
      path either in `kvstore` (tensorstore >= 0.1.14) or at the top level (older)).
    ckpt_dir: the `checkpoint_<step>` directory, local or gs://.

  Returns:
    An openable spec dict: a 'file' kvstore for local dirs, a 'gcs' kvstore with the real
    bucket for gs:// dirs.
  """
  spec = dict(spec)
  kvstore = dict(spec['kvstore'])
  relative = kvstore.pop('path', None) or spec.pop('path', None)
  spec.pop('path', None)
  if relative is None:
    raise ValueError(f'malformed T5X checkpoint in {ckpt_dir}: a TensorStore spec has no '
                     'path; re-export the checkpoint with T5X')
  if ckpt_dir.startswith('gs://'):
    bucket, prefix = _split_gs(ckpt_dir)
    kvstore = {'driver': 'gcs', 'bucket': bucket, 'path': f'{prefix}/{relative}'}
  else:
    kvstore = {'driver': 'file', 'path': os.path.join(os.path.abspath(ckpt_dir), relative)}
  spec['kvstore'] = kvstore
  return spec


def _target(contents: Dict[str, Any], ckpt_dir: str) -> Dict[str, Any]:
  if 'target' in contents:
    return contents['target']
  optimizer = contents.get('optimizer')
  if isinstance(optimizer, dict) and 'target' in optimizer:
    return optimizer['target']
  raise ValueError(f'T5X checkpoint in {ckpt_dir} has no target params (top-level keys '
                   f'{sorted(contents)}); pass a checkpoint written by a T5X trainer')


def read_t5x_checkpoint(path: str, dtype: Any = None) -> PyTree:
  """Reads the model parameters (`target`) of a legacy T5X checkpoint.

  Every array is read whole (no partitioning), concurrently, onto the host.

  Args:
    path: a T5X model_dir (its latest `checkpoint_<step>` is used), a `checkpoint_<step>`
      directory, or the msgpack `checkpoint` file itself; local or gs://.
    dtype: optional dtype to cast every leaf to (e.g. 'float32'); None keeps the stored
      dtypes (bfloat16 and float32 both occur).

  Returns:
    The nested dict of numpy arrays, with T5X names (e.g. params['encoder']['layers_0']
    ['attention']['query']['kernel'] of shape [D, N*H]), without the `target/` prefix.

  Raises:
    FileNotFoundError: no checkpoint at `path`.
    ValueError: the index has no target tree.
  """
  ckpt_dir, data = find_checkpoint(path)
  contents = serialization.msgpack_restore(data)
  flat = traverse_util.flatten_dict(_target(contents, ckpt_dir),
                                    is_leaf=lambda _, node: _is_spec(node))
  futures = {k: ts.open(resolve_spec(v, ckpt_dir), open=True, read=True)
             for k, v in flat.items() if _is_spec(v)}
  futures = {k: f.result().read() for k, f in futures.items()}
  arrays = {k: (futures[k].result() if k in futures else np.asarray(v)) for k, v in flat.items()}
  if contents.get('version', VERSION) < 3:
    # Before version 3, T5X stored bfloat16 arrays as their uint16 bits.
    arrays = {k: v.view(jnp.bfloat16) if v.dtype == np.uint16 else v for k, v in arrays.items()}
  if dtype is not None:
    arrays = {k: v.astype(jnp.dtype(dtype)) for k, v in arrays.items()}
  return traverse_util.unflatten_dict(arrays)


# ----------------------------------------------------------------------------- writing


def _chunk_shape(shape: Tuple[int, ...], itemsize: int) -> List[int]:
  """Largest chunk (dims divide `shape`) under 64 MiB, splitting the largest dim first."""
  chunks = [max(1, d) for d in shape]
  while int(np.prod(chunks)) * itemsize > _CHUNK_BYTES:
    dim = int(np.argmax(chunks))
    divisors = [c for c in range(chunks[dim] - 1, 0, -1) if shape[dim] % c == 0]
    chunks[dim] = divisors[0]
  return chunks


def _zarr_spec(relative: str, arr: np.ndarray, gcs: bool) -> Dict[str, Any]:
  """The spec stored in the index, exactly as T5X writes it (relative path)."""
  kvstore = {'driver': 'file', 'path': relative}
  if gcs:
    kvstore = {'driver': 'gcs', 'bucket': _DUMMY_BUCKET, 'path': relative}
  spec = {'driver': 'zarr', 'dtype': jnp.dtype(arr.dtype).name, 'kvstore': kvstore,
          'metadata': {'compressor': {'id': 'gzip'}, 'shape': list(arr.shape),
                       'chunks': _chunk_shape(arr.shape, arr.dtype.itemsize)}}
  return ts.Spec(spec).to_json()


def write_t5x_checkpoint(model_dir: str, params: PyTree, step: int = 0,
                         inline_max_ndim: int = 1) -> str:
  """Writes params as a legacy T5X (VERSION 3) checkpoint that T5X itself can restore.

  Arrays with more than `inline_max_ndim` dims (the kernels and embeddings) go to one
  gzip-compressed zarr array each, named `target.<path joined by dots>`; smaller leaves
  (layer-norm scales, scalars) are stored inline in the msgpack. Dtypes are kept (bfloat16
  natively). Locally the step dir is written as `checkpoint_<step>.tmp-<time>` and renamed.

  Args:
    model_dir: the T5X model_dir (local or gs://); created if missing.
    params: a nested dict of arrays with T5X names (no `target/` prefix).
    step: the training step recorded in the index and in the directory name.
    inline_max_ndim: leaves with at most this many dims are stored inline.

  Returns:
    The `checkpoint_<step>` directory written.

  Raises:
    FileExistsError: `checkpoint_<step>` already exists there.
  """
  model_dir = os.fspath(model_dir).rstrip('/')
  gcs = model_dir.startswith('gs://')
  final_dir = f'{model_dir}/checkpoint_{step}'
  work_dir = final_dir if gcs else f'{final_dir}.tmp-{int(time.time())}'
  if not gcs:
    if os.path.exists(final_dir):
      raise FileExistsError(f'{final_dir} already exists; pass another step or model_dir')
    os.makedirs(work_dir, exist_ok=True)
  flat = traverse_util.flatten_dict(jax.device_get(params))
  stored, writes = {}, []
  for key, value in flat.items():
    arr = np.asarray(value)
    if arr.ndim <= inline_max_ndim:
      stored[key] = arr
      continue
    relative = '.'.join(('target',) + tuple(key))
    stored[key] = _zarr_spec(relative, arr, gcs)
    store = ts.open(resolve_spec(stored[key], work_dir), create=True,
                    delete_existing=True).result()
    writes.append(store.write(arr))
  for write in writes:
    write.result()
  index = {'version': VERSION,
           'optimizer': {'target': traverse_util.unflatten_dict(stored),
                         'state': {'step': np.asarray(step, np.int32), 'param_states': {}}}}
  write_bytes(f'{work_dir}/{_INDEX}', serialization.msgpack_serialize(index))
  if not gcs:
    os.rename(work_dir, final_dir)
  return final_dir
