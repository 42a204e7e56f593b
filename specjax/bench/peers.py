"""Peers for the benchmark: Hugging Face transformers on the same weights and inputs.

The pair is exported with `hf_t5.save_hf_dir` (T5) or `hf_files.save_hf_lm_dir` (Llama
family, GPT-2), loaded by transformers, and decoded with plain greedy `generate` and with
assisted generation (`assistant_model=`), torch on CPU, one example at a time (assisted
generation supports batch 1 only).
"""
from __future__ import annotations

import os
import tempfile
import time
from typing import Dict, Sequence

import jax
import numpy as np

from specjax.bench import decodes
from specjax.checkpoints import hf_files, hf_t5
from specjax.core import api
from specjax.core.sampling import SamplingConfig
from specjax.job.inputs import pad_to_bucket
from specjax.models.lm import CausalLM


def _export_and_load(model, params, path: str):
  """The model as transformers' own, through a `save_pretrained`-style directory."""
  # pylint: disable-next=import-outside-toplevel
  from transformers import AutoModelForCausalLM, T5ForConditionalGeneration
  if isinstance(model, CausalLM):
    hf_files.save_hf_lm_dir(path, model.config, params)
    return AutoModelForCausalLM.from_pretrained(path).eval()
  hf_t5.save_hf_dir(path, model.config, params)
  return T5ForConditionalGeneration.from_pretrained(path).eval()


def _prompt(model, row: np.ndarray) -> np.ndarray:
  """An input row's tokens without padding: the encoder input, or the decoder prompt."""
  if not isinstance(model, CausalLM):
    return row[row != 0]
  real = np.flatnonzero(row != model.pad_id)
  return row[real[0]:real[-1] + 1] if len(real) else row[:1]


def run_hf_peers(target, tp, draft, dp, examples: Sequence[np.ndarray], max_decode_len: int,
                 num_draft_tokens: int, threads: int) -> Dict[str, dict]:
  """Greedy-decodes each example with HF greedy and HF assisted generation.

  Args:
    target, tp, draft, dp: the specjax pair (T5 or decoder-only models) and params.
    examples: rows [S] int32 of encoder inputs, EOS-terminated, right-padded with 0 (or
      decoder-only prompts right-padded with the target's pad id).
    max_decode_len: L, the most new tokens (EOS included).
    num_draft_tokens: the assistant's tokens per step (gamma), fixed (no heuristic).
    threads: torch intra-op threads (the same count as the JAX process uses).

  Returns:
    {'hf_greedy': {...}, 'hf_assisted': {...}}, each with seconds, tokens,
    tokens_per_second and outputs (a list of [n] int arrays, EOS included).
  """
  import torch  # pylint: disable=import-outside-toplevel
  torch.set_num_threads(threads)
  with tempfile.TemporaryDirectory() as tmp:
    hf_target = _export_and_load(target, tp, os.path.join(tmp, 'target'))
    hf_draft = _export_and_load(draft, dp, os.path.join(tmp, 'draft'))
  hf_draft.generation_config.num_assistant_tokens = num_draft_tokens
  hf_draft.generation_config.num_assistant_tokens_schedule = 'constant'
  hf_draft.generation_config.assistant_confidence_threshold = 0.0  # always draft gamma
  results = {}
  for name, extra in (('hf_greedy', {}), ('hf_assisted', {'assistant_model': hf_draft})):
    try:
      results[name] = _generate_all(hf_target, [_prompt(target, r) for r in examples],
                                    max_decode_len, extra, target)
    except Exception as e:  # pylint: disable=broad-except
      # A peer's own failure is a result to report, not a reason to lose the others.
      results[name] = {'error': f'{type(e).__name__}: {" ".join(str(e).split())}'}
  return results


def _generate_all(hf_target, examples, max_decode_len, extra, target) -> dict:
  """Times greedy `generate` over the unpadded examples one at a time (the first call
  warms up)."""
  import torch  # pylint: disable=import-outside-toplevel
  causal = isinstance(target, CausalLM)
  eos = getattr(target, 'eos_id', 1)
  if causal:
    extra = dict(extra, pad_token_id=target.pad_id, eos_token_id=eos)
  outputs, seconds, tokens = [], 0.0, 0
  for i, row in enumerate(list(examples[:1]) + list(examples)):  # first call warms up
    ids = torch.tensor(row[None].astype(np.int64))
    start = time.perf_counter()
    if 'assistant_model' not in extra and not causal:
      # A config-sized cache takes the encoder's layer count for the decoder's; grow lazily.
      from transformers import DynamicCache, EncoderDecoderCache  # pylint: disable=import-outside-toplevel
      extra = dict(extra, past_key_values=EncoderDecoderCache(DynamicCache(), DynamicCache()))
    with torch.no_grad():
      out = hf_target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=max_decode_len, **extra)
    if i == 0:
      continue
    seconds += time.perf_counter() - start
    new = out[0, len(row) if causal else 1:].numpy()  # drop the prompt / the start token
    at = np.flatnonzero(new == eos)
    new = new[:at[0] + 1] if len(at) else new
    outputs.append(new)
    tokens += len(new)
  return {'seconds': seconds, 'tokens': tokens,
          'tokens_per_second': tokens / max(seconds, 1e-9), 'outputs': outputs}


def peer_summary(target, tp, draft, dp, inputs, max_len, gamma, greedy_tokens, seed,
                 pad_inputs: str = 'bucket') -> dict:
  """specjax at batch 1 next to transformers' greedy and assisted generation."""
  pad = target.pad_id if isinstance(target, CausalLM) else 0
  rows = [pad_to_bucket(inputs[i:i + 1], pad_inputs, pad) for i in range(len(inputs))]
  rng = jax.random.PRNGKey(seed)
  ours = decodes.timed_decode(lambda x: api.speculative_decode(
      target, tp, draft, dp, x, gamma=gamma, max_decode_len=max_len,
      sampling=SamplingConfig(), rng=rng), rows)
  ref = [t[:n] for t, n in zip(greedy_tokens, _lengths(greedy_tokens,
                                                        getattr(target, 'eos_id', 1)))]
  runs = {'specjax': {'tokens_per_second': ours['num_tokens'] / ours['seconds'],
                      'seconds': ours['seconds'], 'tokens': ours['num_tokens'],
                      'identical': bool(np.array_equal(ours['tokens'], greedy_tokens))}}
  threads = int(os.environ.get('SPECJAX_THREADS', os.cpu_count() or 1))
  for name, run in run_hf_peers(target, tp, draft, dp, list(inputs), max_len, gamma,
                                      threads).items():
    if 'error' in run:
      runs[name] = {'error': run['error'], 'tokens_per_second': None, 'identical': None}
      continue
    same = all(np.array_equal(a, b) for a, b in zip(run['outputs'], ref))
    runs[name] = {'tokens_per_second': run['tokens_per_second'], 'seconds': run['seconds'],
                  'tokens': run['tokens'], 'identical': bool(same)}
  assisted = runs['hf_assisted']['tokens_per_second']
  return {'gamma': gamma, 'threads': threads, 'runs': runs,
          'specjax_over_hf_assisted': (runs['specjax']['tokens_per_second'] / assisted
                                       if assisted else None)}


def _lengths(tokens, eos_id: int = 1):
  """Generated length of each row: up to and including the first EOS."""
  out = []
  for row in tokens:
    eos = np.flatnonzero(row == eos_id)
    out.append(int(eos[0]) + 1 if len(eos) else len(row))
  return out
