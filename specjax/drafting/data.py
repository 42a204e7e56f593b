"""The data drafts learn from: a model's own decodes of training inputs (the target's
greedy ones; for a distilled draft, the target's or the draft's own, greedy or sampled).

Decoded in chunks, each written to the work directory as it finishes
(`chunk_00000.npz`: the inputs [n, S] and the decoder sequences [n, P + L], prompt and
output, padded), so a killed run keeps what it decoded and a rerun decodes only the rest.
"""
from __future__ import annotations

import os
from typing import Tuple

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import api
from specjax.core.sampling import SamplingConfig


def sequences(target, inputs: np.ndarray, outputs: np.ndarray, lengths: np.ndarray
              ) -> Tuple[np.ndarray, np.ndarray]:
  """Each row's decoder prompt followed by its output: (sequences [n, P + L], padded with
  the pad id, and spans [n, 2]: the prompt's length and the sequence's)."""
  prompt, prompt_len = (np.asarray(a) for a in target.decoder_prompt(jnp.asarray(inputs)))
  n, width = len(inputs), prompt.shape[1] + outputs.shape[1]
  seqs = np.full((n, width), target.pad_id, np.int32)
  for b in range(n):
    p, o = int(prompt_len[b]), int(lengths[b])
    seqs[b, :p] = prompt[b, :p]
    seqs[b, p:p + o] = outputs[b, :o]
  spans = np.stack([prompt_len, prompt_len + np.asarray(lengths)], axis=1).astype(np.int32)
  return seqs, spans


def decodes(model, params, inputs: np.ndarray, directory: str, max_decode_len: int,
            chunk: int = 256, batch: int = 64, progress: bool = True,
            temperature: float = 0.0, seed: int = 0
            ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(inputs [N, S], sequences [N, P + L], spans [N, 2]) of `model`'s decodes of `inputs`
  (`sequences`): greedy, or sampled at `temperature` (chunk i with the key
  fold_in(PRNGKey(seed), i), so a rerun samples what a killed run would have).

  Args:
    model, params: the model that decodes (the target, or a draft on-policy).
    inputs: [N, S] int32, right-padded with the model's pad id.
    directory: where the chunks are kept (made if missing).
    max_decode_len: L, the most tokens per output.
    chunk: inputs per chunk file.
    batch: rows decoded at once (refilled).
    progress: a progress bar over the inputs.
    temperature: 0 greedy, > 0 sampled.
    seed: of the sampled decodes.
  """
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  os.makedirs(directory, exist_ok=True)
  starts = range(0, len(inputs), chunk)
  bar = tqdm(total=len(inputs), unit='ex', desc='decodes', disable=not progress)
  got_inputs, got_seqs, got_spans = [], [], []
  for i, start in enumerate(starts):
    path = os.path.join(directory, f'chunk_{i:05d}.npz')
    rows = inputs[start:start + chunk]
    if os.path.exists(path):
      with np.load(path) as f:
        saved_inputs, seqs, spans = f['inputs'], f['sequences'], f['spans']
      if not np.array_equal(saved_inputs, rows):
        raise ValueError(f'{path} holds the decodes of other inputs: pass another '
                         '--workdir, or remove it')
    else:
      out = api.autoregressive_decode(
          model, params, rows, max_decode_len=max_decode_len, slots=min(batch, len(rows)),
          sampling=SamplingConfig(temperature), rng=jax.random.fold_in(
              jax.random.PRNGKey(seed), i))
      seqs, spans = sequences(model, rows, np.asarray(jax.device_get(out.tokens)),
                              np.asarray(jax.device_get(out.lengths)))
      tmp = path + '.tmp.npz'
      np.savez(tmp, inputs=rows, sequences=seqs, spans=spans)
      os.replace(tmp, path)
    got_inputs.append(rows)
    got_seqs.append(seqs)
    got_spans.append(spans)
    bar.update(len(rows))
  bar.close()
  width = max(s.shape[1] for s in got_seqs)
  seqs = np.concatenate([np.pad(s, ((0, 0), (0, width - s.shape[1])),
                                constant_values=model.pad_id) for s in got_seqs])
  return np.concatenate(got_inputs), seqs, np.concatenate(got_spans)
