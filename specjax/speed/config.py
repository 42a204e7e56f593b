"""The flags of `python -m specjax.speed` (`measure.py`): a field of `MeasureConfig` each.

Shape letters: B batch, S input length, L max_decode_len.
"""
from __future__ import annotations

import argparse
import dataclasses

from specjax import flags
from specjax.flags import flag


INITS = ('random', 'zeros')  # how the timed programs' arguments are filled (`measure.fill`)


@dataclasses.dataclass(frozen=True)
class MeasureConfig:
  """What `python -m specjax.speed` times; each field is the flag of the same name."""

  target: str = flag('t5_xxl', 'target registry name')
  drafts: str = flag('t5_small,t5_base,t5_large', 'comma-separated')
  batch_sizes: str = flag('1,8,32', 'comma-separated B')
  input_len: int = flag(128, 'S')
  max_decode_len: int = flag(128, 'L')
  temperatures: str = flag('0,1', '0 greedy, 1 sampling')
  rounds: int = flag(10, 'timed calls per program')
  init: str = flag('random', 'random: floating-point arguments (weights, caches) drawn from '
                   'N(0, 0.02^2), integers zero; zeros: every argument zero',
                   choices=INITS)
  json: str = flag('tpu_speed_measured.json', 'rows and summaries')


def parser() -> argparse.ArgumentParser:
  """The command line of `python -m specjax.speed`."""
  p = argparse.ArgumentParser(prog='python -m specjax.speed',
                              description='Time the speed plan\'s programs on this device.',
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  flags.add_flags(p, MeasureConfig)
  return p
