"""The flags of `python -m specjax.plan`: the plan's own fields, and the decode's it shares.

`--dtype` and `--temperature` are the decode's `DecodeConfig` fields at the plan's defaults
(bfloat16, sampling); the rest, `--target` and `--draft` too (registry names only here,
not checkpoint directories), are fields of `PlanConfig`. Importing this module starts no
device, unlike `specjax.plan`, which sets up the simulated ones first.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Optional

from specjax import flags
from specjax import plan_sections
from specjax.flags import flag
from specjax.job.config import DecodeConfig

_SPEED = 'with --speed: '


@dataclasses.dataclass(frozen=True)
class PlanConfig:
  """The plan's own flags; each field is the flag of the same name."""

  target: str = flag('t5_xxl', 'target registry name')
  draft: str = flag('t5_small', 'draft registry name')
  gamma: Optional[int] = flag(None, 'draft tokens per iteration (default 7 for T5, '
                              f'{plan_sections.LM_GAMMA} for a decoder-only pair)')
  input_len: Optional[int] = flag(None, 'encoder length S, or a decoder-only pair\'s prompt '
                                  f'width (default 128 for T5, {plan_sections.LM_PROMPT} '
                                  'decoder-only)')
  quick: bool = flag(False, '1 and 4 chips, B 1 and 8, L 128')
  tpu: bool = flag(False, 'also compile for TPU v4 with libtpu (pip install libtpu; no TPU '
                   'needed)')
  speed: bool = flag(False, 'predict TPU v4 speed from the compiled programs\' cost analysis '
                     '(the report of docs/tpu_speed.md; needs libtpu)')
  cpu: bool = flag(False, _SPEED + 'compile for this CPU (a check of the arithmetic; --quick '
                   'does so where libtpu is absent)')
  targets: Optional[str] = flag(None, _SPEED + 'plan only these targets of the grid '
                                '(comma-separated; for runs in parallel, each with its own '
                                '--output)')
  chips: Optional[int] = flag(None, _SPEED + 'plan only the meshes of this many chips (1 or '
                              '4)')
  merge: Optional[str] = flag(None, _SPEED + 'add the rows of other runs\' .json files '
                              '(comma-separated; runs of other --targets or --chips) before '
                              'this one')
  render: bool = flag(False, _SPEED + 'write the report from the rows already measured, '
                      'compiling nothing')
  before: str = flag('docs/tpu_speed_before.json', _SPEED + 'excess-traffic rows of the '
                     'previous code, shown beside the new ones')
  output: Optional[str] = flag(None, 'markdown file to write when the grid is done (default '
                               'specjax_reports/scale.md, with --speed '
                               'specjax_reports/tpu_speed.md; the committed ones are in '
                               'docs/); the rows go to the same path with .partial.json as '
                               'they are measured, and with .json at the end')
  resume: bool = flag(False, 'keep the rows of that .partial.json (or .json) and plan only the '
                      'missing cells (after an interrupted run)')


# The decode's defaults the plan changes: T5-XXL's bfloat16 activations, sampling.
DECODE_DEFAULTS = dict(dtype='bfloat16', temperature=1.0)


def parser(description: str) -> argparse.ArgumentParser:
  """The plan's command line: its own flags with the decode's --dtype and --temperature."""
  p = argparse.ArgumentParser(prog='python -m specjax.plan', description=description,
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  flags.add_flags(p, PlanConfig, only=('target', 'draft', 'gamma', 'input_len'))
  flags.add_flags(p, DecodeConfig, only=('dtype', 'temperature'), defaults=DECODE_DEFAULTS)
  flags.add_flags(p, PlanConfig, only=[f.name for f in flags.cli_fields(PlanConfig)][4:])
  return p
