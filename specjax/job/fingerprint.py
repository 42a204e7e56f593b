"""What a decode run's outputs depend on, as JSON: `--output` refuses to resume a file that
another run wrote (see `output.py`)."""
from __future__ import annotations

import dataclasses
import hashlib
import os

import jax
import numpy as np

# Values read from the start of each params leaf for its digest: enough to tell two
# checkpoints apart, cheap even for T5-XXL.
DIGEST_VALUES = 256


def params_digest(params) -> str:
  """sha256 over each leaf's path, shape, dtype and first DIGEST_VALUES values."""
  h = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    head = np.asarray(jax.device_get(leaf.reshape(-1)[:DIGEST_VALUES]))
    h.update(f'{jax.tree_util.keystr(path)}{leaf.shape}{leaf.dtype}'.encode())
    h.update(head.astype(np.float32).tobytes())
  return h.hexdigest()


def _model(name: str, checkpoint, model, params) -> dict:
  config = getattr(model, 'config', None)
  return {'name': name,
          'checkpoint': (os.path.abspath(checkpoint) if checkpoint and '://' not in checkpoint
                         else checkpoint),
          'config': (repr(dataclasses.asdict(config)) if dataclasses.is_dataclass(config)
                     else repr(model)),
          'params': params_digest(params)}


def run_fingerprint(job, target, tp, draft, dp, input_sha256: str, prefix: str, vocab,
                    gamma=None) -> dict:
  """Everything that changes an output of `job` (a DecodeConfig), as a flat JSON-able dict.

  Gamma (the one the run decodes with, `--gamma auto`'s choice: `gamma`, default
  `job.gamma`), the seed, the verification rule and the token tree count only when
  sampling (greedy outputs do not depend on them; 'tree' is there only for a sampled tree
  decode, so that a chain's fingerprint is as before);
  batch size, refill, padding and the mesh change no output and do not count.
  """
  sampled = not job.sampling.greedy
  gamma = job.gamma if gamma is None else gamma
  rule = job.rule
  tree = job.tree_json()
  return {
      'target': _model(job.target, job.target_checkpoint, target, tp),
      'draft': _model(job.draft, job.draft_checkpoint, draft, dp),
      'vocabulary': hashlib.sha256(vocab.serialized()).hexdigest(),
      'input': input_sha256,
      'input reading': [job.input_format, job.errors, prefix, job.max_input_len,
                        job.truncate_inputs],
      'sampling': [job.temperature, job.top_k, job.top_p],
      'seed and gamma': [job.seed, gamma] if sampled else None,
      'verification': ([rule.verification, rule.draft_threshold, rule.threshold_rule,
                        rule.lenience] if sampled else None),
      'max_decode_len': job.max_decode_len,
      'dtypes': [job.dtype, job.param_dtype],
      **({'tree': tree} if tree and sampled else {}),
  }
