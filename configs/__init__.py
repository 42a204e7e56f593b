"""The paper's runs (Leviathan et al. 2023, Table 2) as importable run configs.

Each module holds one task x draft size, at the paper's gamma for each temperature:
`SINGLE_CHIP` (one device, as in the paper) and `V4_8` (a v4-8 slice: 4 chips, 4-way
model parallel) run pairs that translate and summarise as they are, the original T5 11B
target with the T5 (1.0) draft of that size (public T5X checkpoints, multi-task trained
with WMT EnDe and CNN/DM under these prefixes); `FLAN` runs Flan-T5 XXL with the Flan-T5
draft; `PAPER` the paper's own T5 1.1 pair, whose public checkpoints are pretrained only
(pass fine-tuned ones). Each is a frozen `RunConfig` whose `command(temperature)` is the
`python -m specjax.decode` line that runs it.
"""
from __future__ import annotations

import dataclasses
import shlex
from typing import Dict, Optional, Tuple

from specjax import flags
from specjax.job.config import DecodeConfig
from specjax.speed.paper import TABLE2

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
    temperatures: the paper's temperatures for this pair (0 is greedy).
    gammas: draft tokens per target call at each temperature, as the paper ran them.
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
  temperatures: Tuple[float, ...]
  gammas: Tuple[int, ...]
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

  def gamma(self, temperature: float) -> int:
    """The paper's gamma at this temperature."""
    return self.gammas[self.temperatures.index(temperature)]

  def decode_config(self, temperature: float) -> DecodeConfig:
    """The `python -m specjax.decode` config of this run at one temperature."""
    return DecodeConfig(
        target=self.target, draft=self.draft, gamma=self.gamma(temperature),
        temperature=temperature, prefix=self.prefix, input=self.input,
        max_input_len=self.max_input_len, max_decode_len=self.max_decode_len,
        batch_size=self.batch_size, dtype=self.dtype, param_dtype=self.param_dtype,
        json=True, truncate_inputs=self.truncate_inputs, num_partitions=self.num_partitions)

  def args(self, temperature: float) -> list:
    """The `python -m specjax.decode` flags of this run at one temperature."""
    return flags.to_args(self.decode_config(temperature), only=_ARGS, always=True)

  def command(self, temperature: Optional[float] = None) -> str:
    """The shell command (the first temperature by default)."""
    temperature = self.temperatures[0] if temperature is None else temperature
    return shlex.join(['python', '-m', 'specjax.decode'] + self.args(temperature))


# The decode flags a run's command names, in this order.
_ARGS = ('target', 'draft', 'gamma', 'temperature', 'prefix', 'input', 'max_input_len',
         'max_decode_len', 'batch_size', 'dtype', 'param_dtype', 'json', 'truncate_inputs',
         'num_partitions')

# The models of each kind of pair: target, and the draft's name before its size.
PAIRS = {'t5_1_0': ('t5_1_0_11b', 't5_1_0_'), 'flan': ('flan_t5_xxl', 'flan_t5_'),
         't5_1_1': ('t5_xxl', 't5_')}


def paper_runs(task: str, size: str) -> Dict[str, RunConfig]:
  """The runs of one task x draft size: SINGLE_CHIP, V4_8 (T5 11B + T5 `size`), FLAN
  (Flan-T5 XXL + Flan-T5 `size`) and PAPER (T5 1.1 XXL + T5 1.1 `size`), each at the
  paper's temperatures and gammas for that cell.

  Raises:
    ValueError: a task or size the paper's table has no cell for.
  """
  cells = [c for c in TABLE2 if c.task == task and c.draft == f't5_{size}']
  if not cells:
    raise ValueError(f'no cell of the paper\'s table for {task} with a {size} draft; pass '
                     'ende or cnndm, and small, base or large')
  ende = task == 'ende'
  runs = {}
  for key, pair in (('SINGLE_CHIP', 't5_1_0'), ('FLAN', 'flan'), ('PAPER', 't5_1_1')):
    target, draft = PAIRS[pair]
    runs[key] = RunConfig(
        name=f'{task}_{size}', task=task, target=target, draft=f'{draft}{size}',
        temperatures=tuple(c.temperature for c in cells),
        gammas=tuple(c.gamma for c in cells), prefix=ENDE_PREFIX if ende else CNNDM_PREFIX,
        input=f'data/{task}.jsonl', max_input_len=512, max_decode_len=128,
        truncate_inputs=True, paper_speedup=tuple(c.speedup for c in cells))
  runs['V4_8'] = runs['SINGLE_CHIP'].replace(num_partitions=4)
  return runs
