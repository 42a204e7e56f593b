"""What the proposers that draft from the target itself share: the target's sizes and
special ids, no encoding of their own (they read the target's: `reads_target`, see
`specjax.core.proposal.draft_view`)."""
from __future__ import annotations

import jax


class OfTarget:
  """Mixin of a proposer with a `target` attribute (the target model) that reads the
  target's params and encoding."""

  reads_target = True

  @property
  def vocab_size(self) -> int:
    return self.target.vocab_size

  @property
  def eos_id(self) -> int:
    return self.target.eos_id

  @property
  def pad_id(self) -> int:
    return self.target.pad_id

  def encode(self, params, inputs: jax.Array) -> dict:
    """Nothing of its own: it reads the target's encoding."""
    del params, inputs
    return {}

  def encoded_axes(self) -> dict:
    return {}
