"""A program's cost from XLA's cost analysis, and its roofline time on a TPU v4 chip.

The time of a program is max(bytes accessed / HBM bandwidth, flops / peak bf16 FLOP/s),
with a TPU v4 chip's published figures (Cloud TPU documentation, "TPU v4": 275 TFLOP/s
bf16 and 1200 GB/s HBM2 per chip; Jouppi et al., ISCA 2023). A chip has two TensorCores:
a program compiled for one compile-only core with the chip's figures stands for a chip
running it on both (megacore); a program sharded over the cores of a slice runs on each
core with half a chip's figures.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

V4_CHIP_FLOPS = 275e12  # peak bf16 FLOP/s of one TPU v4 chip
V4_CHIP_HBM_BYTES_PER_S = 1200e9  # HBM2 bandwidth of one TPU v4 chip
V4_HBM_BYTES = 32 << 30  # HBM2 capacity of one TPU v4 chip
FIGURES_SOURCE = ('Cloud TPU documentation, "TPU v4" (peak compute per chip 275 TFLOP/s bf16; '
                  'HBM2 32 GiB at 1200 GB/s); Jouppi et al., "TPU v4", ISCA 2023')


@dataclasses.dataclass(frozen=True)
class Device:
  """The hardware one device of a compiled program stands for.

  Attributes:
    name: e.g. 'TPU v4 chip'.
    flops_per_s: peak bf16 FLOP/s of the device.
    bytes_per_s: its HBM bandwidth.
  """

  name: str
  flops_per_s: float
  bytes_per_s: float


V4_CHIP = Device('TPU v4 chip', V4_CHIP_FLOPS, V4_CHIP_HBM_BYTES_PER_S)
V4_CORE = Device('TPU v4 TensorCore (half a chip)', V4_CHIP_FLOPS / 2,
                 V4_CHIP_HBM_BYTES_PER_S / 2)


@dataclasses.dataclass(frozen=True)
class Cost:
  """What XLA's cost analysis says of one compiled program, per device.

  Attributes:
    bytes: 'bytes accessed'.
    flops: 'flops'.
    optimal_seconds: XLA's own 'optimal_seconds' where it is positive, else None.
  """

  bytes: float
  flops: float
  optimal_seconds: Optional[float] = None

  def seconds(self, device: Device) -> float:
    """The roofline time max(bytes / bandwidth, flops / peak) on `device`."""
    return max(self.bytes / device.bytes_per_s, self.flops / device.flops_per_s)

  def bound(self, device: Device) -> str:
    """'memory' or 'compute': which side of the roofline the program sits on."""
    memory = self.bytes / device.bytes_per_s >= self.flops / device.flops_per_s
    return 'memory' if memory else 'compute'

  def __add__(self, other: 'Cost') -> 'Cost':
    return Cost(self.bytes + other.bytes, self.flops + other.flops)

  def __sub__(self, other: 'Cost') -> 'Cost':
    return Cost(self.bytes - other.bytes, self.flops - other.flops)

  def scaled(self, factor: float) -> 'Cost':
    """This cost times `factor` (bytes and flops; XLA's own time dropped)."""
    return Cost(self.bytes * factor, self.flops * factor)

  def clipped(self) -> 'Cost':
    """Negative parts (a difference of estimates) set to 0."""
    return Cost(max(self.bytes, 0.0), max(self.flops, 0.0))


def cost_of(compiled: Any) -> Cost:
  """The Cost of a `jax.jit(...).lower(...).compile()` result (per device).

  Args:
    compiled: a compiled program.

  Returns:
    Its Cost; optimal_seconds only where XLA's value is positive (XLA:CPU has none).
  """
  analysis = compiled.cost_analysis()
  if isinstance(analysis, (list, tuple)):  # older jax: one dict per device program
    analysis = analysis[0]
  optimal = analysis.get('optimal_seconds')
  return Cost(bytes=float(analysis.get('bytes accessed', 0.0)),
              flops=float(analysis.get('flops', 0.0)),
              optimal_seconds=float(optimal) if optimal and optimal > 0 else None)


@dataclasses.dataclass(frozen=True)
class Timed:
  """A program's measured time, usable wherever a Cost is (its `seconds` ignore the device).

  Attributes:
    measured: seconds per call on the device it ran on.
  """

  measured: float

  def seconds(self, device: Device = None) -> float:  # pylint: disable=unused-argument
    """The measured time."""
    return self.measured

  def __add__(self, other: 'Timed') -> 'Timed':
    return Timed(self.measured + other.measured)

  def __sub__(self, other: 'Timed') -> 'Timed':
    return Timed(self.measured - other.measured)

  def scaled(self, factor: float) -> 'Timed':
    """This time times `factor`."""
    return Timed(self.measured * factor)

  def clipped(self) -> 'Timed':
    """A negative time (a difference of measurements) set to 0."""
    return Timed(max(self.measured, 0.0))
