"""python -m specjax.t5x.export: write any checkpoint specjax reads as a T5X checkpoint.

T5X restores only its own formats; this writes the msgpack + zarr layout that every T5X
version restores (`checkpoint_<step>/` under a model dir), e.g. for the bundled demo target:

  python -m specjax.t5x.export --model demo_target --output /tmp/demo_target_t5x

The checkpoint holds params only, no optimizer state. `t5x.infer` and `t5x.eval` restore
it as it is; `t5x.train` fine-tunes it when told to start the optimizer's state afresh:

  --gin.utils.RestoreCheckpointConfig.path=\"/tmp/demo_target_t5x/checkpoint_0\"
  --gin.utils.RestoreCheckpointConfig.mode=\"specific\"
  --gin.utils.RestoreCheckpointConfig.assignment_map="((r'state/param_states.*', None),)"
  --gin.utils.RestoreCheckpointConfig.fallback_to_scratch=True

Imports no t5x.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Optional

import jax

from specjax import checkpoints
from specjax import flags
from specjax.checkpoints import t5x
from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS
from specjax.flags import flag


@dataclasses.dataclass(frozen=True)
class ExportConfig:
  """The flags of `python -m specjax.t5x.export`; each field is the flag of the same name."""

  model: Optional[str] = flag(None, 'registry name (e.g. demo_target)')
  checkpoint: Optional[str] = flag(None, 'checkpoint to read (default: the model\'s own)')
  output: Optional[str] = flag(None, 'T5X model dir to write')
  step: int = flag(0, 'training step to record')


def export(model: str | None, checkpoint: str | None, output: str, step: int = 0) -> str:
  """Writes a model's params as a T5X checkpoint.

  Args:
    model: a registry name (its bundled or public checkpoint unless `checkpoint` is given),
      or None to take the architecture from `checkpoint`.
    checkpoint: any checkpoint `specjax.load_model` reads.
    output: the T5X model dir to write `checkpoint_<step>/` into.
    step: the step recorded.

  Returns:
    The `checkpoint_<step>` directory.

  Raises:
    ValueError: neither a model with a checkpoint nor a checkpoint was given.
  """
  if checkpoint is None:
    if model not in DEFAULT_CHECKPOINTS:
      raise ValueError('pass --checkpoint PATH, or --model with a bundled or public checkpoint '
                       f'({", ".join(sorted(DEFAULT_CHECKPOINTS))})')
    checkpoint = DEFAULT_CHECKPOINTS[model]
  _, params = checkpoints.load_model(model, checkpoint)
  return t5x.write_t5x_checkpoint(output, jax.device_get(params), step=step)


def parse_args(argv=None) -> argparse.Namespace:
  """The flags of `ExportConfig` (--output required), parsed."""
  p = argparse.ArgumentParser(prog='python -m specjax.t5x.export', description=__doc__.split(
      '\n')[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  flags.add_flags(p, ExportConfig, required=('output',))
  return p.parse_args(argv)


def main(argv=None) -> int:
  args = parse_args(argv)
  try:
    print(export(args.model, args.checkpoint, args.output, args.step))
  except (ValueError, FileNotFoundError, FileExistsError, OSError) as e:
    print(f'error: {" ".join(str(e).split())}', file=sys.stderr)
    return 2
  return 0


if __name__ == '__main__':
  sys.exit(main())
