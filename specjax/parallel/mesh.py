"""The ('data', 'model') device mesh, as T5X's PjitPartitioner builds it, and the
multi-host start-up of a TPU pod slice."""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence, Tuple

import jax
from jax.sharding import AxisType, Mesh

MESH_AXES = ('data', 'model')



def make_mesh(num_partitions: Optional[int] = None, shape: Optional[Tuple[int, int]] = None,
              devices: Optional[Sequence[Any]] = None) -> Mesh:
  """A ('data', 'model') mesh with Auto axis types (T5X-style sharding propagation).

  Args:
    num_partitions: the 'model' axis size; 'data' takes the remaining devices.
    shape: (data, model) explicitly instead; data * model may be fewer than the devices.
    devices: the devices to use (default: all, `jax.devices()`).

  Returns:
    A `jax.sharding.Mesh` with axes ('data', 'model').

  Raises:
    ValueError: neither or both of num_partitions / shape, or sizes that do not fit the
      device count (one line naming the fix).
  """
  devices = list(jax.devices() if devices is None else devices)
  count = len(devices)
  if (num_partitions is None) == (shape is None):
    raise ValueError('pass exactly one of num_partitions (--num-partitions N) or a mesh '
                     'shape (--mesh data=D,model=M)')
  if num_partitions is not None:
    if num_partitions < 1 or count % num_partitions:
      raise ValueError(f'--num-partitions {num_partitions} does not divide the {count} '
                       f'devices; pass a divisor of {count}')
    shape = (count // num_partitions, num_partitions)
  data, model = shape
  if data < 1 or model < 1 or data * model > count:
    raise ValueError(f'mesh data={data},model={model} needs {data * model} devices but '
                     f'{count} are available; pass a mesh whose sizes multiply to <= {count}')
  return jax.make_mesh((data, model), MESH_AXES, axis_types=(AxisType.Auto,) * 2,
                       devices=devices)


def parse_mesh_spec(spec: str) -> Tuple[int, int]:
  """'data=2,model=4' -> (2, 4); a missing axis is 1 ('model=8' -> (1, 8))."""
  sizes = {'data': 1, 'model': 1}
  for part in filter(None, (p.strip() for p in spec.split(','))):
    name, _, value = part.partition('=')
    name = name.strip()
    if name not in sizes or not value.strip().isdigit() or int(value) < 1:
      raise ValueError(f'bad mesh {spec!r}; write it as --mesh data=D,model=M with '
                       'positive integers')
    sizes[name] = int(value)
  return sizes['data'], sizes['model']


def mesh_from_spec(spec: str, devices: Optional[Sequence[Any]] = None) -> Mesh:
  """A mesh from 'data=D,model=M' (see `parse_mesh_spec` and `make_mesh`)."""
  return make_mesh(shape=parse_mesh_spec(spec), devices=devices)


def mesh_shape(mesh: Mesh) -> Tuple[int, int]:
  """(data, model) sizes of a ('data', 'model') mesh."""
  return mesh.shape['data'], mesh.shape['model']


def should_init_distributed(multihost: bool = False,
                            env: Optional[Mapping[str, str]] = None) -> bool:
  """Whether this process is one of several hosts (a TPU pod slice or `--multihost`).

  Args:
    multihost: the CLI's --multihost flag.
    env: environment to read (default os.environ): SPECJAX_MULTIHOST=1, or a TPU VM's
      TPU_WORKER_HOSTNAMES listing more than one host.
  """
  env = os.environ if env is None else env
  if multihost or env.get('SPECJAX_MULTIHOST', '').lower() in ('1', 'true', 'yes'):
    return True
  hosts = [h for h in env.get('TPU_WORKER_HOSTNAMES', '').split(',') if h.strip()]
  return len(hosts) > 1


def init_distributed(multihost: bool = False, env: Optional[Mapping[str, str]] = None,
                     coordinator_address: Optional[str] = None,
                     num_processes: Optional[int] = None,
                     process_id: Optional[int] = None) -> bool:
  """Calls `jax.distributed.initialize()` when `should_init_distributed` says so, or when
  a coordinator is given.

  Call it first, before anything touches a jax device. On Cloud TPU the coordinator and
  process ids come from the TPU metadata, so no arguments are needed; elsewhere (several
  CPU or GPU processes) pass all three.

  Returns:
    True if it initialized the distributed runtime.

  Raises:
    ValueError: some of coordinator_address, num_processes and process_id but not all, or
      a process id outside [0, num_processes).
  """
  given = [x is not None for x in (coordinator_address, num_processes, process_id)]
  if any(given) and not all(given):
    raise ValueError('--coordinator-address, --num-processes and --process-id go together; '
                     'pass all three (or none, on Cloud TPU)')
  if all(given) and not 0 <= process_id < num_processes:
    raise ValueError(f'--process-id must be in [0, --num-processes {num_processes}), got '
                     f'{process_id}')
  if not all(given) and not should_init_distributed(multihost, env):
    return False
  if all(given):
    jax.distributed.initialize(coordinator_address, num_processes, process_id)
  else:
    jax.distributed.initialize()
  return True
