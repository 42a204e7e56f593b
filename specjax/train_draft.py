"""python -m specjax.train_draft: trains a draft from the target itself.

    python -m specjax.train_draft --kind medusa --target demo_target --input train.txt \
        --workdir runs/medusa

The target decodes the inputs (greedy; its outputs are the labels, so the draft learns
what the target says, not a reference), then the draft learns on the target's own hidden
states: K Medusa heads the tokens 1..K past each position (--kind medusa), or an EAGLE
head the target's next hidden state from its last one and the next token (--kind eagle).
The decodes and checkpoints live in --workdir: a killed run, rerun with the same flags,
resumes with nothing lost. The heads go to --output (bfloat16, with draft.json);
`python -m specjax.decode --draft medusa:PATH` (or eagle:PATH) decodes with them,
exactly as the target alone would.
"""
from __future__ import annotations

import os
import sys

from specjax import interrupt

if __name__ == '__main__':  # before the imports below, which take seconds
  interrupt.exit_at_once(lambda: 'the decodes and checkpoints so far are in --workdir; '
                         'rerun the same command to resume')

# pylint: disable=wrong-import-position
import argparse
import json

from specjax import flags
from specjax.checkpoints.registry import bundled
from specjax.drafting import data as data_lib
from specjax.drafting import eagle, fit, heads_io, medusa
from specjax.drafting.config import TrainDraftConfig
from specjax.job.config import DecodeConfig
from specjax.job.inputs import tokenize
from specjax.job.pair import load_pair
from specjax.job.reader import read_inputs
from specjax.proposers.eagle import EagleHead
from specjax.proposers.medusa import MedusaHeads


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(prog='python -m specjax.train_draft',
                              description=__doc__.split('\n', 1)[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  flags.add_flags(p, TrainDraftConfig, required=('input', 'workdir'))
  return p.parse_args(argv)


def _examples(cfg: TrainDraftConfig) -> list:
  """The training examples (the bundled pair's task prefix added): read before any model
  loads, so that a bad file fails at once."""
  pair = bundled(cfg.target)
  examples, _ = read_inputs(cfg.input, pair.prefix if pair else '')
  if not examples:
    raise ValueError(f'{cfg.input} holds no inputs')
  return examples[:cfg.max_examples]


def _inputs(cfg: TrainDraftConfig, examples: list, vocab):
  """The training inputs [N, S], tokenized (cut at --max-input-len)."""
  ids, _ = tokenize(vocab, [e['inputs'] for e in examples], cfg.max_input_len, True)
  width = max(int((ids != getattr(vocab, 'pad_id', 0)).sum(1).max()), 1)
  return ids[:, :width]


def run(cfg: TrainDraftConfig) -> dict:
  """Decodes, trains and writes the heads; returns the summary."""
  output = cfg.output or os.path.join(cfg.workdir, 'heads')
  if os.path.exists(output):
    raise FileExistsError(f'{output} exists; pass another --output, or remove it')
  examples = _examples(cfg)
  job = DecodeConfig(target=cfg.target, target_checkpoint=cfg.target_checkpoint,
                     vocab=cfg.vocab, draft='copy', dtype='float32')
  target, tp, _, _, vocab = load_pair(job)
  inputs = _inputs(cfg, examples, vocab)
  model = EagleHead(target) if cfg.kind == 'eagle' else MedusaHeads(target, cfg.heads)
  data = data_lib.target_decodes(target, tp, inputs, os.path.join(cfg.workdir, 'decodes'),
                                 cfg.max_decode_len, progress=not cfg.quiet)
  settings = fit.Training(steps=cfg.steps, batch=cfg.batch_size,
                          learning_rate=cfg.learning_rate, warmup_steps=cfg.warmup_steps,
                          save_every=cfg.save_every, seed=cfg.seed)
  if cfg.kind == 'eagle':
    result = eagle.train(model, tp, data, cfg.workdir, settings, progress=not cfg.quiet)
    sizes = {'layers': 1, 'final_accuracy': result['accuracy']}
  else:
    result = medusa.train(model, tp, data, cfg.workdir, settings, progress=not cfg.quiet)
    sizes = {'num_heads': cfg.heads, 'final_accuracy_per_head': result['accuracy']}
  meta = {'kind': cfg.kind, 'target': cfg.target, **sizes,
          'hidden': model.width, 'vocab_size': target.vocab_size,
          'examples': int(len(inputs)), 'input': os.path.basename(cfg.input),
          'steps': cfg.steps, 'batch_size': cfg.batch_size,
          'learning_rate': cfg.learning_rate, 'final_loss': result['loss']}
  path = heads_io.save_heads(output, result['heads'], meta)
  return {**meta, 'output': path}


def main(argv=None) -> int:
  cfg = flags.from_args(TrainDraftConfig, parse_args(argv))
  try:
    summary = run(cfg)
  except (ValueError, FileNotFoundError, FileExistsError, OSError) as e:
    interrupt.error_line(f'error: {" ".join(str(e).split())}')
    return 2
  if cfg.json:
    print(json.dumps(summary))
  else:
    if summary['kind'] == 'eagle':
      acc = summary['final_accuracy']
      print(f'An EAGLE head for {summary["target"]} trained on {summary["examples"]} of its '
            f'own decodes, {summary["steps"]} steps: loss {summary["final_loss"]:.3f}, '
            f'agreement with its argmax {acc:.3f} -> {summary["output"]}')
    else:
      acc = ', '.join(f'{a:.3f}' for a in summary['final_accuracy_per_head'])
      print(f'{summary["num_heads"]} Medusa heads for {summary["target"]} trained on '
            f'{summary["examples"]} of its own decodes, {summary["steps"]} steps: loss '
            f'{summary["final_loss"]:.3f}, accuracy per head {acc} -> {summary["output"]}')
  return 0


if __name__ == '__main__':
  code = main()
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(code)
