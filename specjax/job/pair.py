"""Loading the job's target, draft and vocabulary, and the mesh they run on.

A model is a registry name (its checkpoint from --target-checkpoint or the registry's) or a
checkpoint path itself (T5X, Hugging Face T5 / Llama / GPT-2, orbax): `--target PATH`.
The draft may also be one that costs nothing (`copy`, `bigram`, `copy+NAME`:
`specjax.job.drafts`).
"""
from __future__ import annotations

import os
from typing import Optional

import jax

from specjax import checkpoints
from specjax.checkpoints.registry import BUNDLED, DEFAULT_CHECKPOINTS, T5_VOCAB, bundled
from specjax.checkpoints import t5x
from specjax.job import drafts
from specjax.models.lm import CausalLM
from specjax.models import scan
from specjax.models.lm_config import LM_CONFIGS
from specjax.models.t5_config import T5_CONFIGS
from specjax.parallel import mesh as mesh_lib
from specjax.parallel import rules as axis_rules


def job_mesh(job):
  """The job's ('data', 'model') mesh, or None to run unsharded on one device.

  Raises:
    ValueError: both --num-partitions and --mesh, or sizes that do not fit the devices.
  """
  if job.num_partitions is None and job.mesh is None:
    return None
  if job.num_partitions is not None and job.mesh is not None:
    raise ValueError('pass either --num-partitions or --mesh, not both')
  if job.mesh is not None:
    return mesh_lib.mesh_from_spec(job.mesh)
  return mesh_lib.make_mesh(num_partitions=job.num_partitions)


def job_rules(job) -> axis_rules.Rules:
  """T5X's standard logical axis rules for the job's parameter partitioning dims."""
  return axis_rules.standard_logical_axis_rules(job.parameter_partitioning_dims)


def _default(name: str, given: Optional[str], flag: str) -> str:
  if given:
    return given
  if checkpoints.is_checkpoint_path(name):
    return name
  if name not in T5_CONFIGS and name not in LM_CONFIGS:
    raise ValueError(f'unknown model {name!r}; pass a checkpoint directory or one of '
                     f'{", ".join(sorted(T5_CONFIGS) + sorted(LM_CONFIGS))}')
  if name not in DEFAULT_CHECKPOINTS:
    raise ValueError(f'{name} has no published checkpoint; pass {flag} PATH')
  return DEFAULT_CHECKPOINTS[name]


def _load(name: str, path: str, flag: str, dtype, mesh=None, rules=axis_rules.STANDARD_RULES,
          param_dtype='float32'):
  named = not checkpoints.is_checkpoint_path(name)
  shardings = None
  if mesh is not None and named:
    shardings = axis_rules.param_shardings(
        checkpoints.build_model(checkpoints.resolve_config(name)), mesh, rules)
  try:
    model, params = checkpoints.load_model(name if named else None, path, dtype=dtype,
                                           shardings=shardings, param_dtype=param_dtype)
  except (ValueError, FileNotFoundError, OSError) as e:
    if path.startswith('gs://'):
      raise ValueError(f'cannot read {path} ({t5x.gcs_failure()}); copy it locally and pass '
                       f'{flag} PATH') from e
    raise
  if mesh is not None and not named:  # the config came with the checkpoint: place it now
    params = jax.device_put(params, axis_rules.param_shardings(model, mesh, rules))
  return model, params


def _layout(job, model, params):
  """(model, params) in the layout --scan-layers asks for (the checkpoints are unrolled)."""
  return scan.as_scanned(model, params) if job.scan_layers else (model, params)


def _vocab(job, model, checkpoint: str, given: Optional[str], target: bool = True):
  """The vocabulary of a model: a decoder-only model's tokenizer (--vocab, else the one a
  bundled pair (manlm_*) ships with, else the one in its checkpoint directory), a T5's
  SentencePiece model (--vocab, else the one that ships with a bundled pair (demo_*,
  manpages_*), spiece.model in a Hugging Face directory, else the public T5 one)."""
  pair = bundled(job.target) if target and not job.target_checkpoint else None
  if isinstance(model, CausalLM):
    return checkpoints.load_tokenizer(given or (pair.vocab if pair else checkpoint), model)
  if given:
    vocab = checkpoints.load_vocab(given)
    if pair and vocab.serialized() != checkpoints.load_vocab(
        pair.vocab).serialized():
      raise ValueError(f'{job.target} was trained with its own vocabulary ({pair.vocab}), '
                       f'not {given}; drop --vocab')
    return vocab
  if bundled(job.target):
    return checkpoints.load_vocab(bundled(job.target).vocab)
  local = os.path.join(checkpoint, 'spiece.model')
  return checkpoints.load_vocab(local if os.path.isfile(local) else T5_VOCAB)


def load_target(job, mesh=None):
  """Loads the target and its vocabulary: (target, target_params, vocab) (params straight
  into their shardings on `mesh`)."""
  target_path = _default(job.target, job.target_checkpoint, '--target-checkpoint')
  target, tp = _layout(job, *_load(job.target, target_path, '--target-checkpoint', job.dtype,
                                    mesh, job_rules(job), job.param_dtype))
  return target, tp, _vocab(job, target, target_path, job.vocab)


def load_pair(job, mesh=None):
  """Loads target, draft and vocabulary, checking that they fit together.

  Args:
    job: the run's settings.
    mesh: optional mesh; params are then loaded straight into their shardings.

  Returns:
    (target, target_params, draft, draft_params, vocab).
  """
  target, tp, vocab = load_target(job, mesh)
  rules = job_rules(job)
  loaded = {}  # the draft model's name, path and model, when --draft involves one

  def load_draft(name):  # NAME of copy+NAME, or --draft itself
    path = _default(name, job.draft_checkpoint if name == job.draft else None,
                    '--draft-checkpoint')
    model, params = _layout(job, *_load(name, path, '--draft-checkpoint', job.dtype, mesh,
                                        rules, job.param_dtype))
    loaded.update(name=name, path=path, model=model)
    return model, params

  draft, dp = drafts.resolve_draft(job.draft, target, job.target, load_draft,
                                   table=job.draft_checkpoint, vocab=vocab)
  if job.draft_vocab and loaded:
    draft_vocab = _vocab(job, loaded['model'], loaded['path'], job.draft_vocab, target=False)
    if draft_vocab.serialized() != vocab.serialized():
      raise ValueError(f'the draft vocabulary {job.draft_vocab} differs from the target\'s '
                       f'{vocab.path}; speculative decoding needs one shared vocabulary')
  if loaded and isinstance(target, CausalLM) != isinstance(loaded['model'], CausalLM):
    own = next((f'{p}draft' for p in BUNDLED if job.target == f'{p}target'), None)
    raise ValueError('the target and the draft must both be decoder-only or both be T5; '
                     'pick a draft of the target\'s kind'
                     + (f' (--draft {own})' if own else ''))
  if loaded and target.vocab_size != loaded['model'].vocab_size:
    raise ValueError(f'the draft {loaded["name"]} has {loaded["model"].vocab_size} logits '
                     f'but the target {job.target} has {target.vocab_size}; pick a draft trained on the '
                     'target\'s vocabulary')
  vocab.check_fits(target.vocab_size)
  return target, tp, draft, dp, vocab
