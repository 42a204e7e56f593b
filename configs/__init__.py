"""The paper's runs (Leviathan et al. 2023, Table 2) as importable run configs.

Each module holds one task x draft pair: `SINGLE_CHIP` (one device, as in the paper) and
`V4_8` (a v4-8 slice: 4 chips, 4-way model parallel), each a frozen `RunConfig` whose
`command(temperature)` is the `python -m specjax.decode` line that runs it.
"""
from __future__ import annotations

import dataclasses
import shlex
from typing import Optional, Tuple

# The paper's task prefixes (T5's own), and the encoder / decoder lengths used here.
ENDE_PREFIX = 'translate English to German: '
CNNDM_PREFIX = 'summarize: '


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """One speculative decoding run of the paper's table.

  Attributes:
    name: the config's name (its module name).
    task: 'ende' or 'cnndm'.
    target: target registry name (specjax.models.t5_config.T5_CONFIGS).
    draft: draft registry name.
    gamma: draft tokens per target call, as in the paper for this task and draft.
    temperatures: the paper's temperatures for this pair (0 is greedy).
    prefix: the task prefix added to each input.
    input: the inputs file (JSON lines with "inputs"; tpu/vm_paper_table.sh makes them).
    max_input_len: encoder length S.
    truncate_inputs: cut longer inputs (CNN/DM articles) instead of refusing them.
    max_decode_len: most tokens per output L.
    batch_size: B (the paper: 1).
    dtype: activation dtype.
    param_dtype: dtype params are held in (bfloat16: T5-XXL fits one 32 GiB v4 chip).
    num_partitions: model-parallel devices (None: unsharded, one device).
    paper_speedup: the paper's measured walltime speedup per temperature.
  """

  name: str
  task: str
  target: str
  draft: str
  gamma: int
  temperatures: Tuple[float, ...]
  prefix: str
  input: str
  max_input_len: int
  max_decode_len: int
  truncate_inputs: bool = False
  batch_size: int = 1
  dtype: str = 'bfloat16'
  param_dtype: str = 'bfloat16'
  num_partitions: Optional[int] = None
  paper_speedup: Tuple[float, ...] = ()

  def replace(self, **changes) -> 'RunConfig':
    """A copy with some fields changed."""
    return dataclasses.replace(self, **changes)

  def args(self, temperature: float) -> list:
    """The `python -m specjax.decode` flags of this run at one temperature."""
    args = ['--target', self.target, '--draft', self.draft, '--gamma', str(self.gamma),
            '--temperature', str(temperature), '--prefix', self.prefix, '--input', self.input,
            '--max-input-len', str(self.max_input_len), '--max-decode-len',
            str(self.max_decode_len), '--batch-size', str(self.batch_size), '--dtype',
            self.dtype, '--param-dtype', self.param_dtype, '--json']
    if self.truncate_inputs:
      args.append('--truncate-inputs')
    if self.num_partitions is not None:
      args += ['--num-partitions', str(self.num_partitions)]
    return args

  def command(self, temperature: Optional[float] = None) -> str:
    """The shell command (the first temperature by default)."""
    temperature = self.temperatures[0] if temperature is None else temperature
    return shlex.join(['python', '-m', 'specjax.decode'] + self.args(temperature))
