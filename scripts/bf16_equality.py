"""Where specjax's greedy decode differs from T5X's own in a low-precision dtype, and why.

Decodes a task's inputs with T5X's examples network (`temperature_sample` at temperature 0,
the reference) and with specjax (speculative, gamma draft tokens per verify call; and the
target alone), both in `--dtype` activations on the same params. For every output that
differs from T5X's it reports the first differing position, the two tokens and the margin
between them under T5X's own single-token step (T5X's token's logit minus the other's),
next to the spacing of bfloat16 numbers at that logit (2^(floor(log2|logit|) - 7)): a
margin below it is a near-tie that any change of reduction order may flip.

Needs t5x and seqio. Examples (JSON on stdout, or in --output):

  python scripts/bf16_equality.py --pair demo --num 500 --output /tmp/demo.json
  python scripts/bf16_equality.py --target_checkpoint /tmp/pair/target \\
    --draft_checkpoint /tmp/pair/draft --feature_len 32 --num 200
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checkpoints
from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS
from specjax.core.sampling import SamplingParams
from specjax.core.traced import traced_decode
from specjax.models.t5 import T5


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--pair', default=None, choices=['demo'],
                 help='the bundled demo target and draft (else pass both checkpoints)')
  p.add_argument('--target_checkpoint', default=None, help='a T5X model dir or any checkpoint '
                 'specjax.load_model reads')
  p.add_argument('--draft_checkpoint', default=None, help='the draft\'s checkpoint')
  p.add_argument('--task', default='specjax_demo_ende', help='seqio task of the inputs')
  p.add_argument('--split', default='test')
  p.add_argument('--num', type=int, default=50, help='inputs decoded (the first of the split)')
  p.add_argument('--feature_len', type=int, default=64,
                 help='input width S and decode length L (TASK_FEATURE_LENGTHS)')
  p.add_argument('--batch_size', type=int, default=50)
  p.add_argument('--gamma', type=int, default=4)
  p.add_argument('--dtype', default='bfloat16', help='activation dtype of both decodes')
  p.add_argument('--param_dtype', default='float32',
                 help='params as restored (T5X\'s infer.gin restores bfloat16)')
  p.add_argument('--config', default='', help='T5Config fields for specjax\'s models, e.g. '
                 '"exact_step=True" (comma separated name=python_literal)')
  p.add_argument('--output', default=None, help='JSON file (default: stdout)')
  return p.parse_args(argv)


def load_pair(args):
  """(target config, target params, draft config, draft params), params in param_dtype."""
  if args.pair == 'demo':
    names = [('demo_target', DEFAULT_CHECKPOINTS['demo_target']),
             ('demo_draft', DEFAULT_CHECKPOINTS['demo_draft'])]
  elif args.target_checkpoint and args.draft_checkpoint:
    names = [(None, args.target_checkpoint), (None, args.draft_checkpoint)]
  else:
    raise SystemExit('pass --pair demo, or --target_checkpoint and --draft_checkpoint')
  out = []
  for name, path in names:
    model, params = checkpoints.load_model(name, path, param_dtype=args.param_dtype)
    out += [model.config.replace(name=''), jax.device_get(params)]
  return tuple(out)


def t5x_module(config, dtype: str):
  """T5X's examples network of a specjax T5Config."""
  from t5x.examples.t5 import network  # pylint: disable=import-outside-toplevel
  return network.Transformer(network.T5Config(
      vocab_size=config.vocab_size, dtype=dtype, emb_dim=config.emb_dim,
      num_heads=config.num_heads, num_encoder_layers=config.num_encoder_layers,
      num_decoder_layers=config.num_decoder_layers, head_dim=config.head_dim,
      mlp_dim=config.mlp_dim, mlp_activations=tuple(config.mlp_activations),
      dropout_rate=0.0, logits_via_embedding=config.logits_via_embedding))


def task_inputs(task_name: str, split: str, num: int, length: int) -> np.ndarray:
  """The first `num` examples' tokenized inputs (EOS appended, trimmed), [num, S] int32."""
  from specjax import tasks  # pylint: disable=import-outside-toplevel
  tasks.register_demo_task()
  tasks.register_manpages_task()
  ds = tasks.get_task(task_name).get_dataset({'inputs': length, 'targets': length},
                                             split=split, shuffle=False)
  out = np.zeros((num, length), np.int32)
  n = 0
  for n, ex in enumerate(ds.take(num).as_numpy_iterator()):
    out[n, :len(ex['inputs'])] = ex['inputs']
  return out[:n + 1]


class T5XReference:
  """T5X's greedy decode and its single-token step logits along a path."""

  def __init__(self, module, params, length: int):
    from t5x import decoding  # pylint: disable=import-outside-toplevel
    from t5x import models  # pylint: disable=import-outside-toplevel
    vocab = None
    self.module, self.params, self.length = module, params, length
    self.model = models.EncoderDecoderModel(module, vocab, vocab, None, decode_fn=(
        functools.partial(decoding.temperature_sample, temperature=0.0)))
    self._predict = jax.jit(lambda p, b: self.model.predict_batch_with_aux(
        p, b, decoder_params={'eos_id': 1})[0])
    self._steps = jax.jit(self._step_logits)

  def _batch(self, inputs):
    zeros = np.zeros((inputs.shape[0], self.length), np.int32)
    return {'encoder_input_tokens': inputs, 'decoder_input_tokens': zeros,
            'decoder_target_tokens': zeros, 'decoder_loss_weights': zeros}

  def greedy(self, inputs: np.ndarray) -> np.ndarray:
    """[B, L] int32, T5X's temperature_sample at temperature 0."""
    return np.asarray(self._predict(self.params, self._batch(inputs)))

  def _step_logits(self, params, inputs, tokens):
    """[B, L, V] float32: T5X's decode-mode step t fed tokens[:, t-1] (the start 0 first),
    as temperature_sample calls it (cache of length L, one token per call)."""
    module = self.module
    encoded = module.apply({'params': params}, inputs, enable_dropout=False,
                           method=module.encode)
    ones = jnp.ones((inputs.shape[0], self.length), jnp.int32)
    _, init = module.apply({'params': params}, encoder_input_tokens=jnp.ones_like(inputs),
                           decoder_input_tokens=ones, decoder_target_tokens=ones,
                           mutable=['cache'], decode=True, enable_dropout=False)
    fed = jnp.pad(tokens, ((0, 0), (1, 0)))[:, :-1]  # [B, L]

    def step(cache, token):  # token [B]
      logits, new = module.apply(
          {'params': params, 'cache': cache}, encoded, inputs, token[:, None],
          token[:, None], enable_dropout=False, decode=True, max_decode_length=self.length,
          mutable=['cache'], method=module.decode)
      return new['cache'], logits[:, 0].astype(jnp.float32)

    _, logits = jax.lax.scan(step, init['cache'], fed.T)
    return jnp.swapaxes(logits, 0, 1)

  def step_logits(self, inputs, tokens) -> np.ndarray:
    return np.asarray(self._steps(self.params, inputs, tokens))


def specjax_decoder(target, draft, gamma: int, length: int):
  """jitted (target_params, draft_params, inputs) -> [B, L] greedy tokens."""
  greedy = SamplingParams(np.float32(0), np.int32(0), np.float32(1))

  def run(target_params, draft_params, inputs):
    return traced_decode(target, target_params, draft, draft_params, inputs, gamma=gamma,
                         max_decode_len=length, sampling=greedy, eos_id=1).tokens
  return jax.jit(run)


def resolution(x: float) -> float:
  """The spacing of bfloat16 numbers at |x| (8 significant bits)."""
  return 2.0 ** (math.floor(math.log2(abs(x))) - 7) if x else 2.0 ** -133


def first_differences(ref: np.ndarray, got: np.ndarray, logits: np.ndarray,
                      other_logits: np.ndarray | None = None) -> list:
  """For each row where got != ref: the first differing position, both tokens and the
  margin under `logits` [B, L, V] (ref's token's logit minus got's); with other_logits
  (the other decode's step along ref's path) also that margin, as 'other_margin'."""
  out = []
  for row in np.nonzero(np.any(ref != got, axis=1))[0]:
    pos = int(np.argmax(ref[row] != got[row]))
    a, b = int(ref[row, pos]), int(got[row, pos])
    la, lb = float(logits[row, pos, a]), float(logits[row, pos, b])
    out.append({'row': int(row), 'position': pos, 'reference_token': a, 'other_token': b,
                'reference_logit': la, 'other_logit': lb, 'margin': la - lb,
                'resolution': resolution(la), 'above_resolution': la - lb > resolution(la)})
    if other_logits is not None:
      out[-1]['other_margin'] = float(other_logits[row, pos, a] - other_logits[row, pos, b])
  return out


def summary(diffs: list) -> dict:
  return {'differing': len(diffs),
          'above_resolution': sum(d['above_resolution'] for d in diffs),
          'max_margin_over_resolution': max(
              [d['margin'] / d['resolution'] for d in diffs], default=0.0),
          'differences': diffs}


def parse_config(text: str) -> dict:
  """'a=1,b=True' -> {'a': 1, 'b': True} (values as Python literals)."""
  import ast  # pylint: disable=import-outside-toplevel
  out = {}
  for item in filter(None, (s.strip() for s in text.split(','))):
    name, value = item.split('=', 1)
    out[name.strip()] = ast.literal_eval(value.strip())
  return out


def measure(args) -> dict:
  """Runs both decodes on `args.num` inputs and compares them (the JSON report)."""
  target_cfg, target_params, draft_cfg, draft_params = load_pair(args)
  inputs = task_inputs(args.task, args.split, args.num, args.feature_len)
  length = args.feature_len
  changes = dict(parse_config(args.config), dtype=args.dtype)
  target, draft = T5(target_cfg.replace(**changes)), T5(draft_cfg.replace(**changes))
  reference = T5XReference(t5x_module(target_cfg, args.dtype), target_params, length)
  speculative = specjax_decoder(target, draft, args.gamma, length)
  alone = specjax_decoder(target, None, 1, length)
  alone_steps = jax.jit(lambda p, x, t: specjax_step_logits(target, p, x, t))
  res = {k: [] for k in ('t5x', 't5x_steps', 'speculative', 'alone', 'alone_steps')}
  start = time.time()
  for i in range(0, len(inputs), args.batch_size):
    batch = inputs[i:i + args.batch_size]
    if len(batch) < args.batch_size:  # one shape for every batch: no recompiles
      batch = np.pad(batch, ((0, args.batch_size - len(batch)), (0, 0)))
    ref = reference.greedy(batch)
    res['t5x'].append(ref)
    res['t5x_steps'].append(reference.step_logits(batch, ref))
    res['speculative'].append(np.asarray(speculative(target_params, draft_params, batch)))
    res['alone'].append(np.asarray(alone(target_params, None, batch)))
    res['alone_steps'].append(np.asarray(alone_steps(target_params, batch, ref)))
  n = len(inputs)
  res = {k: np.concatenate(v)[:n] for k, v in res.items()}
  ref, logits = res['t5x'], res['t5x_steps']
  # The step logits along T5X's path must reproduce T5X's own choices (else the margins
  # below would not be T5X's).
  live = np.cumsum(np.pad(ref == 1, ((0, 0), (1, 0)))[:, :-1], axis=1) == 0
  step_mismatch = int(np.sum((np.argmax(logits, -1) != ref) & live))
  report = {
      'setup': {k: v for k, v in vars(args).items() if k != 'output'},
      'target': {k: getattr(target.config, k) for k in (
          'emb_dim', 'num_heads', 'head_dim', 'num_encoder_layers', 'num_decoder_layers',
          'mlp_dim', 'vocab_size')},
      'specjax_config_changes': changes,
      'inputs': n, 'seconds': round(time.time() - start, 1),
      't5x_step_argmax_mismatches': step_mismatch,
      'speculative_vs_t5x': summary(first_differences(ref, res['speculative'], logits,
                                                      res['alone_steps'])),
      'alone_vs_t5x': summary(first_differences(ref, res['alone'], logits,
                                                res['alone_steps'])),
      'speculative_vs_alone': summary(speculative_vs_alone(res, target, target_params,
                                                           inputs)),
  }
  return report


def specjax_step_logits(target, params, inputs, tokens):
  """[B, L, V] float32: specjax's decode fed one token per call along `tokens` (the start
  token 0 first), with a cache of length L."""
  batch, length = tokens.shape
  encoded = target.encode(params, inputs)
  fed = jnp.pad(tokens, ((0, 0), (1, 0)))[:, :-1]  # [B, L]

  def step(cache, t):
    logits, cache = target.decode(params, encoded, cache, jax.lax.dynamic_slice_in_dim(
        fed, t, 1, axis=1), jnp.full((batch,), t, jnp.int32))
    return cache, logits[:, 0]

  _, logits = jax.lax.scan(step, target.init_cache(batch, length), jnp.arange(length))
  return jnp.swapaxes(logits, 0, 1)


def speculative_vs_alone(res, target, target_params, inputs) -> list:
  """Differences of the speculative decode from specjax's own target-alone decode, margins
  under specjax's single-token step along the target-alone path."""
  alone = res['alone']
  rows = np.nonzero(np.any(alone != res['speculative'], axis=1))[0]
  if not len(rows):
    return []
  logits = np.zeros((len(alone),) + (alone.shape[1], target.vocab_size), np.float32)
  steps = jax.jit(lambda p, x, t: specjax_step_logits(target, p, x, t))
  logits[rows] = np.asarray(steps(target_params, inputs[rows], alone[rows]))
  return first_differences(alone, res['speculative'], logits)


def main(argv=None) -> int:
  args = parse_args(argv)
  text = json.dumps(measure(args), indent=1)
  if args.output:
    with open(args.output, 'w', encoding='utf-8') as f:
      f.write(text + '\n')
  print(text if not args.output else f'wrote {args.output}')
  return 0


if __name__ == '__main__':
  sys.exit(main())
