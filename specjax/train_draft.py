"""python -m specjax.train_draft: trains a draft from the target itself.

    python -m specjax.train_draft --kind medusa --target demo_target --input train.txt \
        --workdir runs/medusa

The target decodes the inputs (greedy; its outputs are the labels, so the draft learns
what the target says, not a reference), then the draft learns on the target's own hidden
states: K Medusa heads the tokens 1..K past each position (--kind medusa), or an EAGLE
head the target's next hidden state from its last one and the next token (--kind eagle);
or a draft model is fine-tuned on the target's distributions (--kind distill, DistillSpec:
the forward KL divergence or the total variation from the target's next-token
distribution, --distill-loss, over the target's decodes or, on-policy, the draft's own,
greedy or sampled: --distill-data, --distill-temperature), or the early exit of
the target's first --layers decoder layers is (--kind layerskip: a copy of the final norm
and output projection, by the same divergence).
The decodes and checkpoints live in --workdir: a killed run, rerun with the same flags,
resumes with nothing lost. The heads go to --output (bfloat16, with draft.json);
`python -m specjax.decode --draft medusa:PATH` (eagle:PATH, layerskip:PATH; a distilled
draft: PATH)
decodes with them, exactly as the target alone would.
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
from specjax.checkpoints.registry import BUNDLED, bundled
from specjax.drafting import data as data_lib
from specjax.drafting import distill, eagle, early_exit, fit, heads_io, medusa
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


# The flags of a distilled draft's data and loss; other kinds keep their defaults.
DISTILL_FLAGS = ('distill_data', 'distill_temperature', 'distill_loss')
# What a run's decodes and checkpoints depend on: a rerun in its --workdir repeats them.
RUN_SETTINGS = ('kind', 'target', 'target_checkpoint', 'draft', 'layers', 'heads',
                'eagle_passes', *DISTILL_FLAGS, 'max_examples', 'max_input_len',
                'max_decode_len', 'steps', 'batch_size', 'learning_rate', 'warmup_steps',
                'seed')


def _distill_defaults(cfg: TrainDraftConfig, names=DISTILL_FLAGS) -> bool:
  """Whether `names` of cfg are as the config declares them by default."""
  defaults = TrainDraftConfig()
  return all(getattr(cfg, name) == getattr(defaults, name) for name in names)


def _decodes_dir(cfg: TrainDraftConfig) -> str:
  """The work directory's folder of the decodes a run learns from: 'decodes' for the
  target's greedy ones (the default data), else named by whose and the temperature."""
  if _distill_defaults(cfg, ('distill_data', 'distill_temperature')):
    return 'decodes'
  return f'decodes_{cfg.distill_data}_t{cfg.distill_temperature:g}'


def check_workdir(cfg: TrainDraftConfig, record: bool = False) -> None:
  """Refuses a rerun in --workdir with other settings than its train_draft.json, which
  would resume another run's checkpoints; with `record`, writes that file where it is
  missing (when the training starts: a run that failed before leaves none)."""
  settings = {k: getattr(cfg, k) for k in RUN_SETTINGS}
  path = os.path.join(cfg.workdir, 'train_draft.json')
  if os.path.exists(path):
    with open(path, encoding='utf-8') as f:
      saved = json.load(f)
    changed = [k for k in RUN_SETTINGS if k in saved and saved[k] != settings[k]]
    if changed:
      was = ', '.join(f'--{k.replace("_", "-")} {saved[k]} (now {settings[k]})'
                      for k in changed)
      raise ValueError(f'{cfg.workdir} holds a run started with other settings: {was}; '
                       'rerun with them to resume it, or pass another --workdir')
  elif record:
    os.makedirs(cfg.workdir, exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
      json.dump(settings, f, indent=1)


def run(cfg: TrainDraftConfig) -> dict:
  """Decodes, trains and writes the heads; returns the summary."""
  flags.check_bounds(cfg, TrainDraftConfig)  # before anything is read or decoded
  output = cfg.output or os.path.join(cfg.workdir, 'heads')
  if os.path.exists(output):
    raise FileExistsError(f'{output} exists; pass another --output, or remove it')
  examples = _examples(cfg)
  if cfg.kind != 'distill' and cfg.draft is not None:
    raise ValueError(f'--draft names the draft model to distil: pass --kind distill, or drop '
                     f'it for --kind {cfg.kind}')
  draft_name = cfg.draft or next((f'{prefix}draft' for prefix in BUNDLED
                                  if cfg.target == f'{prefix}target'), None)
  if (cfg.kind == 'layerskip') != (cfg.layers is not None):
    raise ValueError('--layers M is the early exit\'s: pass --kind layerskip with --layers M '
                     '(the target\'s first M decoder layers draft)' if cfg.kind == 'layerskip'
                     else f'--layers is for --kind layerskip; drop it for --kind {cfg.kind}')
  if cfg.eagle_passes < 1 or (cfg.eagle_passes > 1 and cfg.kind != 'eagle'):
    raise ValueError(f'--eagle-passes is the EAGLE head\'s (an integer >= 1); got '
                     f'{cfg.eagle_passes} with --kind {cfg.kind}')
  if cfg.kind != 'distill' and not _distill_defaults(cfg):
    raise ValueError('--distill-data, --distill-temperature and --distill-loss are a '
                     f'distilled draft\'s: pass --kind distill, or drop them for --kind '
                     f'{cfg.kind}')
  if not cfg.distill_temperature >= 0.0:
    raise ValueError(f'--distill-temperature must be >= 0 (0: greedy decodes), got '
                     f'{cfg.distill_temperature}')
  if cfg.kind == 'distill' and draft_name is None:
    raise ValueError('--kind distill needs the draft model to distil: pass --draft NAME')
  check_workdir(cfg)
  job = DecodeConfig(target=cfg.target, target_checkpoint=cfg.target_checkpoint,
                     vocab=cfg.vocab, dtype='float32',
                     draft=draft_name if cfg.kind == 'distill' else 'copy')
  target, tp, draft, dp, vocab = load_pair(job)
  inputs = _inputs(cfg, examples, vocab)
  if cfg.kind == 'eagle':
    model = EagleHead(target)
  elif cfg.kind == 'medusa':
    model = MedusaHeads(target, cfg.heads)
  elif cfg.kind == 'layerskip':
    model = early_exit.EarlyExit(target, cfg.layers)
  else:
    model = distill.Distillation(target, draft, cfg.distill_loss)
  source, params = (draft, dp) if cfg.distill_data == 'draft' else (target, tp)
  data = data_lib.decodes(source, params, inputs, os.path.join(cfg.workdir, _decodes_dir(cfg)),
                          cfg.max_decode_len, progress=not cfg.quiet,
                          temperature=cfg.distill_temperature, seed=cfg.seed)
  settings = fit.Training(steps=cfg.steps, batch=cfg.batch_size,
                          learning_rate=cfg.learning_rate, warmup_steps=cfg.warmup_steps,
                          save_every=cfg.save_every, seed=cfg.seed)
  check_workdir(cfg, record=True)
  config = None
  if cfg.kind == 'eagle':
    result = eagle.train(model, tp, data, cfg.workdir, settings, progress=not cfg.quiet,
                         passes=cfg.eagle_passes)
    sizes = {'layers': 1, 'hidden': model.width, 'passes': cfg.eagle_passes,
             'final_accuracy': result['accuracy']}
  elif cfg.kind == 'medusa':
    result = medusa.train(model, tp, data, cfg.workdir, settings, progress=not cfg.quiet)
    sizes = {'num_heads': cfg.heads, 'hidden': model.width,
             'final_accuracy_per_head': result['accuracy']}
  elif cfg.kind == 'layerskip':
    result = early_exit.train(model, tp, data, cfg.workdir, settings, progress=not cfg.quiet)
    result['heads'] = result.pop('params')
    sizes = {'layers': cfg.layers, 'hidden': target.config.emb_dim,
             'final_accuracy': result['accuracy']}
  else:
    result = distill.train(model, tp, dp, data, cfg.workdir, settings,
                           progress=not cfg.quiet)
    result['heads'] = result.pop('params')
    config = draft.config.replace(name=f'{draft.config.name or "draft"}_distilled')
    sizes = {'draft': draft_name, 'data': cfg.distill_data,
             'data_temperature': cfg.distill_temperature, 'loss': cfg.distill_loss,
             'final_accuracy': result['accuracy']}
  meta = {'kind': cfg.kind, 'target': cfg.target, **sizes,
          'vocab_size': target.vocab_size,
          'examples': int(len(inputs)), 'input': os.path.basename(cfg.input),
          'steps': cfg.steps, 'batch_size': cfg.batch_size,
          'learning_rate': cfg.learning_rate, 'final_loss': result['loss']}
  path = heads_io.save_heads(output, result['heads'], meta, config)
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
    if summary['kind'] == 'distill':
      whose = summary['draft'] if summary['data'] == 'draft' else summary['target']
      how = 'greedy' if summary['data_temperature'] == 0 else \
          f'sampled at T={summary["data_temperature"]:g}'
      print(f'{summary["draft"]} distilled on {summary["examples"]} of {whose}\'s own '
            f'decodes ({how}), {summary["steps"]} steps: {summary["loss"].upper()} '
            f'{summary["final_loss"]:.3f}, agreement with the target\'s argmax '
            f'{summary["final_accuracy"]:.3f} -> {summary["output"]} (--draft PATH decodes '
            'with it)')
    elif summary['kind'] == 'layerskip':
      print(f'An early exit for {summary["target"]}\'s first {summary["layers"]} decoder '
            f'layers trained on {summary["examples"]} of its own decodes, {summary["steps"]} '
            f'steps: KL {summary["final_loss"]:.3f}, agreement with its argmax '
            f'{summary["final_accuracy"]:.3f} -> {summary["output"]} (--draft '
            f'layerskip:PATH decodes with it)')
    elif summary['kind'] == 'eagle':
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
