"""Training a layer-skip draft's early exit on the target's own decodes (LayerSkip).

The draft is the target's first M decoder layers (`specjax.proposers.layer_skip`). Closed
by the target's own final norm and output projection, those layers were never trained to
predict: the exit is the last layer's job. This fine-tunes a copy of the final norm and of
the (untied) output projection for the cut: the target is frozen, and the cut model,
teacher-forced over the target's own decoder sequences with the exit in training, learns
the target's next-token distributions by the forward KL divergence
(`specjax.drafting.distill.loss_fn`), from the prompt's last token on. The loop, its
checkpoints and its resume are `specjax.drafting.fit`'s.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax

from specjax.drafting import distill
from specjax.drafting import fit as fit_lib
from specjax.proposers.layer_skip import exit_params, overlay, truncated


@dataclasses.dataclass(frozen=True)
class EarlyExit:
  """What an early-exit training trains: the exit of the target's first `layers` layers.

  Attributes:
    target: the target model (frozen).
    layers: M, the decoder layers that draft (1 <= M < L).
  """

  target: Any
  layers: int

  def __post_init__(self):
    truncated(self.target, self.layers)  # the range check, at construction

  @property
  def pair(self) -> distill.Distillation:
    """The target and its cut, as a distillation pair (the cut reads the target's params
    with the exit in training in place)."""
    return distill.Distillation(self.target, truncated(self.target, self.layers))


def loss_fn(own, model: EarlyExit, tp, inputs: jax.Array, seqs: jax.Array,
            spans: jax.Array):
  """(the mean forward KL from the target's distributions to the cut's with exit `own`,
  the cut's top-1 agreement with the target's argmax), over the counted positions."""
  return distill.loss_fn(overlay(tp, own), model.pair, tp, inputs, seqs, spans)


def make_step(model: EarlyExit, tx: optax.GradientTransformation) -> Callable:
  """`specjax.drafting.fit.make_step` of `loss_fn`."""
  return fit_lib.make_step(loss_fn, model, tx)


def train(model: EarlyExit, tp, data: tuple, workdir: str, cfg: fit_lib.Training,
          progress: bool = True, on_save: Optional[Callable[[int], None]] = None) -> dict:
  """Trains the exit, starting from the target's own (`specjax.drafting.fit.fit`);
  returns {'params' (the exit: `exit_params`' part of a params tree), 'step', 'loss',
  'accuracy'} of the last step.

  Args:
    model: the target and M.
    tp: the target's params (frozen).
    data: (inputs [N, S], sequences [N, T], spans [N, 2]) of `specjax.drafting.data`.
    workdir: checkpoints go to workdir/checkpoints; a rerun resumes from the latest.
    cfg: the run's settings.
    progress: a progress bar with the loss.
    on_save: called with the step after each checkpoint (tests stop a run there).
  """
  start = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), exit_params(tp))
  return fit_lib.fit(lambda tx: make_step(model, tx), start, tp, data, workdir, cfg,
                     'early exit', progress, on_save)
