"""Trains a bundled demo pair on this machine's CPUs: English->German (specjax/assets/demo)
or, with --task manpages, man-page summaries (specjax/assets/manpages).

Stages (each resumable; a rerun continues where it stopped):
  target        train the target (`demo_target`, `manpages_target`) on the train split
                (Adafactor, time budget).
  distill-data  greedy-decode the validation, train and unlabelled inputs (English-only
                messages, data/demo/unlabelled.jsonl) with the trained target, and keep
                its top-K log-probs along each output.
  draft         train the draft (`demo_draft`, `manpages_draft`) on the target's greedy
                outputs (what raises alpha).
  export        save both with `save_params` (bfloat16) to the task's assets/{target,draft}.
  evaluate      BLEU (EnDe) or ROUGE (manpages) of both on the test split, alpha (greedy
                and T=1, gamma 4) and tokens per target call of the pair; writes the
                pair's MODEL_CARD.md.

Usage:
  python scripts/train_demo.py [--task ende|manpages]
      [--stages target,distill-data,draft,export,evaluate]
      [--workdir runs/TASK] [--target-minutes 60] [--draft-minutes 30]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import time

import jax
import jax.numpy as jnp
import numpy as np
import sacrebleu

from specjax import checkpoints
from specjax.demo import corpus, manpages, training
from specjax.core.api import autoregressive_decode, speculative_decode
from specjax.models.t5 import T5
from specjax.core.sampling import SamplingConfig

from specjax.demo.card import bleu_by_kind, paired_bootstrap, write_card
from specjax.demo import manpages_card
from specjax.demo.demo_tasks import DEMO_TASKS

STAGES = ('target', 'distill-data', 'draft', 'export', 'evaluate')


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=__doc__.split('\n\n', 1)[1])
  p.add_argument('--task', default='ende', choices=sorted(DEMO_TASKS),
                 help='which bundled pair: its data, vocabulary, configs and assets')
  p.add_argument('--stages', default=','.join(STAGES),
                 help='comma-separated subset of: %(default)s')
  p.add_argument('--workdir', help='checkpoints, distilled data, logs (runs/<task>)')
  p.add_argument('--data', help='folder with {train,validation,test}.jsonl (the task\'s)')
  p.add_argument('--vocab', help='SentencePiece model (the task\'s bundled one)')
  p.add_argument('--assets', help='where export writes target/ and draft/ (the task\'s)')
  p.add_argument('--buckets', help='training batch shapes LEN:BATCH or LEN:TARGET_LEN:BATCH '
                 '(inputs padded to LEN, targets to TARGET_LEN or LEN); longer pairs are '
                 'dropped from training (default: the task\'s)')
  p.add_argument('--target-minutes', type=float, default=60.0)
  p.add_argument('--target-steps', type=int, default=0, help='0: the time budget decides')
  p.add_argument('--target-lr', type=float, default=0.05, help='peak Adafactor rate')
  p.add_argument('--target-dropout', type=float, default=0.1,
                 help='dropout rate of the target (T5 1.1 fine-tuning uses 0.1; without it '
                 'the target memorises the train split)')
  p.add_argument('--draft-minutes', type=float, default=30.0)
  p.add_argument('--draft-steps', type=int, default=0, help='0: the time budget decides')
  p.add_argument('--draft-lr', type=float, default=0.05, help='peak Adafactor rate')
  p.add_argument('--draft-dropout', type=float, default=0.0, help='dropout rate of the draft')
  p.add_argument('--draft-soft-weight', type=float, default=0.5,
                 help='weight of KL(target || draft) per token (the rest: cross-entropy on '
                 'the target\'s greedy tokens); 0 trains on the greedy tokens alone')
  p.add_argument('--soft-top-k', type=int, default=16,
                 help='target log-probs kept per position for the draft\'s KL term')
  p.add_argument('--distill-splits', help='inputs whose target outputs the draft learns '
                 '(validation is always decoded, to measure the draft); default '
                 'train,unlabelled for ende, train for manpages')
  p.add_argument('--draft-real-fraction', type=float, default=0.0,
                 help='share of real references added to the distilled draft data')
  p.add_argument('--draft-learns', default='target', choices=('target', 'references'),
                 help='target: the target\'s own greedy outputs and distributions (what the '
                 'bundled drafts learned); references: the train split\'s references alone, '
                 'by cross-entropy, as a draft is usually trained (a baseline for '
                 'train_draft --kind distill)')
  p.add_argument('--warmup-steps', type=int, default=100)
  p.add_argument('--eval-every', type=int, default=100, help='steps between val losses')
  p.add_argument('--decode-batch', type=int, default=256)
  p.add_argument('--max-decode-len', type=int, help='default: the task\'s (40 or 32)')
  p.add_argument('--gamma', type=int, default=4, help='draft tokens per target call')
  p.add_argument('--seed', type=int, default=0)
  p.add_argument('--limit', type=int, default=0, help='use only the first N pairs of each '
                 'split (smoke tests); 0: all')
  args = p.parse_args(argv)
  task = args.task = DEMO_TASKS[args.task]
  args.workdir = args.workdir or f'runs/{task.name}'
  args.data, args.assets = args.data or task.data, args.assets or task.assets
  args.vocab = args.vocab or task.path('spm.model')
  args.buckets = args.buckets or task.buckets
  args.max_decode_len = args.max_decode_len or task.max_decode_len
  args.distill_splits = args.distill_splits or (
      'train,unlabelled' if task.name == 'ende' else 'train')
  args.stages = [s.strip() for s in args.stages.split(',') if s.strip()]
  args.distill_splits = [s.strip() for s in args.distill_splits.split(',') if s.strip()]
  unknown = set(args.stages) - set(STAGES)
  if unknown:
    p.error(f'unknown stage(s) {", ".join(sorted(unknown))}; pick from {",".join(STAGES)}')
  shapes = [[int(n) for n in item.split(':')] for item in args.buckets.split(',')]
  if any(len(s) not in (2, 3) for s in shapes):
    p.error(f'--buckets takes LEN:BATCH or LEN:TARGET_LEN:BATCH items, got {args.buckets!r}')
  args.buckets = [training.Bucket(s[0], s[-2], s[-1]) for s in shapes]
  return args


def log(msg: str) -> None:
  print(f'[{datetime.datetime.now():%H:%M:%S}] {msg}', flush=True)


def encode(vocab, texts):
  """Texts -> id lists ending in EOS."""
  return [ids + [corpus.EOS_ID] for ids in vocab.encode(list(texts))]


def load_split(args, vocab, split):
  """(input id lists, target id lists, pairs) of one split."""
  pairs = args.task.load_pairs(split, args.data)
  pairs = pairs[:args.limit] if args.limit else pairs
  return (encode(vocab, [args.task.make_example(en) for en, _ in pairs]),
          encode(vocab, [de for _, de in pairs]), pairs)


def load_inputs(args, vocab, split):
  """Input id lists of a split, including 'unlabelled' (English only, for distillation)."""
  if split != 'unlabelled':
    return load_split(args, vocab, split)[0]
  path = os.path.join(args.data, 'unlabelled.jsonl')
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} is missing; run scripts/build_demo_corpus.py, or pass '
                            '--distill-splits train')
  with open(path, encoding='utf-8') as f:
    english = [json.loads(line)['en'] for line in f if line.strip()]
  english = english[:args.limit] if args.limit else english
  return encode(vocab, [corpus.make_example(en) for en in english])


def _sp(args):
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  return spm.SentencePieceProcessor(model_file=args.vocab)


def _train(args, name, config, inputs, targets, val_inputs, val_targets, minutes, steps, lr,
           dropout, soft=None, soft_weight=0.0, extra=None):
  data = training.BucketedData(inputs, targets, args.buckets, seed=args.seed, soft=soft)
  val = training.eval_batches(val_inputs, val_targets, args.buckets)
  log(f'{name}: {len(data)} training pairs ({data.dropped} longer than the largest bucket '
      f'dropped), {data.steps_per_epoch} steps per epoch')
  cfg = training.TrainConfig(minutes=minutes, max_steps=steps, peak_lr=lr,
                             warmup_steps=args.warmup_steps, eval_every=args.eval_every,
                             seed=args.seed, soft_weight=soft_weight, dropout_rate=dropout)
  summary = training.train(T5(config), data, val, os.path.join(args.workdir, name), cfg,
                           log=lambda m: log(f'{name}: {m}'))
  summary.update(training_pairs=len(data), dropped=data.dropped, peak_lr=lr,
                 buckets=[vars(b) for b in args.buckets], soft_weight=soft_weight,
                 dropout_rate=dropout,
                 **(extra or {}))
  with open(os.path.join(args.workdir, name, 'summary.json'), 'w') as f:
    json.dump(summary, f, indent=2)


def stage_target(args):
  sp = _sp(args)
  x, y, _ = load_split(args, sp, 'train')
  vx, vy, _ = load_split(args, sp, 'validation')
  _train(args, 'target', args.task.target, x, y, vx, vy, args.target_minutes, args.target_steps,
         args.target_lr, args.target_dropout)


def greedy_decode(model, params, inputs, args, batch=None, width=None):
  """Greedy outputs [N, L] of id lists `inputs`, in length-sorted batches (fewer compiles
  and less waiting on long rows); `width` pads every batch to one input length."""
  batch = batch or args.decode_batch
  order = np.argsort([len(x) for x in inputs], kind='stable')
  out = np.zeros((len(inputs), args.max_decode_len), np.int32)
  for k in range(0, len(order), batch):
    rows = order[k:k + batch]
    longest = max(len(inputs[i]) for i in rows)
    rows_in = [inputs[i] for i in rows]  # a short last batch repeats its first row
    padded = training.pad_rows(rows_in + rows_in[:1] * (batch - len(rows)),
                               width or -(-longest // 16) * 16)
    tokens = autoregressive_decode(model, params, padded, max_decode_len=args.max_decode_len)
    out[rows] = np.asarray(tokens.tokens)[:len(rows)]
  return out


def teacher_top_k(model, params, inputs, outputs, args):
  """The target's top-K (ids int16, log-probs float16), each [N, L, K], at every position
  of its own outputs [N, L] given `inputs` (id lists); length-sorted batches."""
  fn = jax.jit(lambda p, x, y: jax.lax.top_k(jax.nn.log_softmax(
      model.logits(p, x, training.shift_right(y))), args.soft_top_k))
  n, length = outputs.shape
  ids = np.zeros((n, length, args.soft_top_k), np.int16)
  logp = np.zeros((n, length, args.soft_top_k), np.float16)
  out_len = np.argmax(np.concatenate([outputs, np.ones((n, 1), outputs.dtype)], 1) == 1, 1)
  order = np.argsort(np.maximum([len(x) for x in inputs], out_len + 1), kind='stable')
  for k in range(0, n, args.decode_batch):
    rows = order[k:k + args.decode_batch]
    rows = np.concatenate([rows, rows[:1].repeat(args.decode_batch - len(rows))])
    # Inputs and outputs padded apart: a summary's input is longer than its output.
    in_width = -(-max(len(inputs[i]) for i in rows) // 16) * 16
    width = min(length, -(-(out_len[rows].max() + 1) // 16) * 16)
    x = training.pad_rows([inputs[i] for i in rows], max(in_width, 16))
    top_logp, top_ids = fn(params, x, outputs[rows, :width])
    ids[rows, :width], logp[rows, :width] = np.asarray(top_ids), np.asarray(top_logp)
  return ids, logp


def stage_distill(args):
  sp, model = _sp(args), T5(args.task.target)
  params = training.load_trained_params(model, os.path.join(args.workdir, 'target'))
  limit = max(b.input_len for b in args.buckets)
  os.makedirs(os.path.join(args.workdir, 'distill'), exist_ok=True)
  for split in ['validation'] + [s for s in args.distill_splits if s != 'validation']:
    path = os.path.join(args.workdir, 'distill', f'{split}.npz')
    saved = dict(np.load(path)) if os.path.exists(path) else {}
    if 'soft_ids' in saved and saved['soft_ids'].shape[-1] == args.soft_top_k:
      log(f'distill-data: {path} exists, skipping')
      continue
    inputs = load_inputs(args, sp, split)
    start = time.time()
    if 'outputs' not in saved:
      index = np.array([i for i, x in enumerate(inputs) if len(x) <= limit])
      # Chunks of 16 batches are saved as they finish so that a restart loses little.
      chunk, parts = 16 * args.decode_batch, []
      for c in range(0, len(index), chunk):
        part = os.path.join(args.workdir, 'distill', f'{split}.part{c // chunk:03d}.npy')
        if not os.path.exists(part):
          np.save(part, greedy_decode(model, params, [inputs[i] for i in index[c:c + chunk]],
                                      args))
          log(f'distill-data: {split} {min(c + chunk, len(index))}/{len(index)} '
              f'({(time.time() - start) / 60:.1f} min)')
        parts.append(part)
      saved = {'index': index, 'outputs': np.concatenate([np.load(p) for p in parts]),
               'minutes': (time.time() - start) / 60}
      np.savez(path, **saved)
      for p in parts:
        os.remove(p)
    finished = np.any(saved['outputs'] == corpus.EOS_ID, axis=1).mean()
    log(f'distill-data: {split}: {len(saved["index"])} outputs, {finished:.1%} end in EOS')
    top = time.time()
    saved['soft_ids'], saved['soft_logp'] = teacher_top_k(
        model, params, [inputs[i] for i in saved['index']], saved['outputs'], args)
    saved['minutes'] = float(saved['minutes']) + (time.time() - top) / 60
    np.savez(path, **saved)
    log(f'distill-data: {split}: top-{args.soft_top_k} soft targets in '
        f'{(time.time() - top) / 60:.1f} min')


def _distilled(args, sp, split):
  """(inputs, target-greedy outputs, (soft ids, soft logp) [N, L, K]) of a split, for the
  rows whose output ended in EOS."""
  inputs = load_inputs(args, sp, split)
  saved = np.load(os.path.join(args.workdir, 'distill', f'{split}.npz'))
  keep = np.any(saved['outputs'] == corpus.EOS_ID, axis=1)
  xs = [inputs[i] for i in saved['index'][keep]]
  ys = [[int(t) for t in row[:np.argmax(row == corpus.EOS_ID) + 1]]
        for row in saved['outputs'][keep]]
  return xs, ys, (saved['soft_ids'][keep], saved['soft_logp'][keep])


def stage_draft(args):
  sp = _sp(args)
  if args.draft_learns == 'references':
    x, y, _ = load_split(args, sp, 'train')
    vx, vy, _ = load_split(args, sp, 'validation')
    _train(args, 'draft', args.task.draft, x, y, vx, vy, args.draft_minutes, args.draft_steps,
           args.draft_lr, args.draft_dropout, extra={'learned': 'references'})
    return
  parts = [_distilled(args, sp, split) for split in args.distill_splits]
  x, y = sum((p[0] for p in parts), []), sum((p[1] for p in parts), [])
  soft = tuple(np.concatenate([p[2][i] for p in parts]) for i in range(2))
  distilled = {split: len(p[0]) for split, p in zip(args.distill_splits, parts)}
  log(f'draft: distilled pairs {distilled}')
  if args.draft_real_fraction > 0:
    rx, ry, _ = load_split(args, sp, 'train')
    pick = np.random.default_rng(args.seed).permutation(len(rx))
    pick = pick[:int(args.draft_real_fraction * len(x))]
    x, y = x + [rx[i] for i in pick], y + [ry[i] for i in pick]
    (_, length, k) = soft[0].shape
    ids = training.pad_rows([ry[i][:length] for i in pick], length)
    one_hot = (np.pad(ids[:, :, None], ((0, 0), (0, 0), (0, k - 1))),  # all mass on top-1
               np.pad(np.zeros(ids.shape + (1,)), ((0, 0), (0, 0), (0, k - 1)),
                      constant_values=-1e4))
    soft = tuple(np.concatenate([a, b.astype(a.dtype)]) for a, b in zip(soft, one_hot))
  vx, vy, _ = _distilled(args, sp, 'validation')  # val accuracy ~ agreement with the target
  _train(args, 'draft', args.task.draft, x, y, vx, vy, args.draft_minutes, args.draft_steps,
         args.draft_lr, args.draft_dropout, soft if args.draft_soft_weight > 0 else None,
         args.draft_soft_weight, extra={'distilled': distilled})


def stage_export(args):
  for name, config in (('target', args.task.target), ('draft', args.task.draft)):
    if not os.path.isdir(os.path.join(args.workdir, name)):
      log(f'export: no {name} trained in {args.workdir}, skipping it')
      continue
    params = training.load_trained_params(T5(config), os.path.join(args.workdir, name))
    # Stored as bfloat16 (half the bytes); load_model restores float32.
    params = jax.tree.map(lambda a: np.asarray(a, jnp.bfloat16), params)
    path = checkpoints.save_params(os.path.join(args.assets, name), params, config=config,
                                   force=True)
    log(f'export: {name} -> {path} ({_du(path)})')


def _du(path):
  return subprocess.run(['du', '-sh', path], capture_output=True, text=True,
                        check=False).stdout.split('\t')[0]


def _pair_stats(args, target, tp, draft, dp, inputs, sampling):
  """Speculative decoding (gamma G) of all inputs: (DecodeStats of all rows, tokens)."""
  width, stats, tokens = -(-max(len(x) for x in inputs) // 16) * 16, [], []
  for k in range(0, len(inputs), args.decode_batch):
    rows = inputs[k:k + args.decode_batch]
    padded = training.pad_rows(rows + rows[:1] * (args.decode_batch - len(rows)), width)
    out = speculative_decode(target, tp, draft, dp, padded, gamma=args.gamma,
                             max_decode_len=args.max_decode_len, sampling=sampling,
                             rng=jax.random.PRNGKey(args.seed + k))
    stats.append(jax.tree.map(lambda a, n=len(rows): a[:n], out.stats))
    tokens.append(np.asarray(out.tokens)[:len(rows)])
  return jax.tree.map(lambda *a: jnp.concatenate(a), *stats), np.concatenate(tokens)


def stage_evaluate(args):
  vocab = checkpoints.load_vocab(args.vocab)
  target, tp = checkpoints.load_model(None, os.path.join(args.assets, 'target'))
  draft, dp = checkpoints.load_model(None, os.path.join(args.assets, 'draft'))
  inputs, _, pairs = load_split(args, _sp(args), 'test')
  refs = [de for _, de in pairs]
  width = -(-max(len(x) for x in inputs) // 16) * 16
  result, hyps = {}, {}
  for name, model, params in (('target', target, tp), ('draft', draft, dp)):
    start = time.time()
    tokens = greedy_decode(model, params, inputs, args, width=width)
    hyps[name] = [vocab.decode(row) for row in tokens]
    if args.task.metric == 'rouge':
      result[f'{name}_rouge'] = manpages_card.rouge_scores(hyps[name], refs)
    else:
      result[f'{name}_bleu'] = round(sacrebleu.corpus_bleu(hyps[name], [refs]).score, 2)
    result[f'{name}_params'] = int(sum(np.size(a) for a in jax.tree.leaves(params)))
    log(f'evaluate: {name} {result.get(f"{name}_bleu", result.get(f"{name}_rouge"))} '
        f'({time.time() - start:.0f} s)')
    if name == 'target':
      target_tokens = tokens
  train_sources = [en for en, _ in args.task.load_pairs('train', args.data)]
  near = corpus.near_duplicates([en for en, _ in pairs], train_sources)
  if args.task.metric == 'rouge':
    result['bootstrap'] = manpages_card.paired_bootstrap_rouge(hyps['target'], hyps['draft'],
                                                               refs)
    result['by_kind'] = manpages_card.rouge_by_kind(hyps, refs, near)
    result['copy_rate'] = {'references': manpages.copy_rate([s for s, _ in pairs], refs),
                           **{n: manpages.copy_rate([s for s, _ in pairs], h)
                              for n, h in hyps.items()}}
  else:
    result['bootstrap'] = paired_bootstrap(hyps['target'], hyps['draft'], refs)
    result['by_kind'] = bleu_by_kind(hyps, refs, near)
  log(f'evaluate: bootstrap {result["bootstrap"]}, by kind {result["by_kind"]}')
  for label, sampling in (('greedy', SamplingConfig()), ('t1', SamplingConfig(1.0))):
    stats, tokens = _pair_stats(args, target, tp, draft, dp, inputs, sampling)
    result[label] = {'alpha': round(stats.alpha, 4), 'target_calls': int(jnp.sum(
        stats.target_calls)), 'acceptance_rate': round(stats.acceptance_rate, 4),
                     'tokens_per_call': round(stats.tokens_per_call, 4)}
    if label == 'greedy':
      result['greedy_matches_target'] = int(np.sum(np.all(tokens == target_tokens, axis=1)))
    log(f'evaluate: {label}: {result[label]}')
  result['sizes'] = {n: _du(os.path.join(args.assets, n)) for n in ('target', 'draft')}
  with open(os.path.join(args.workdir, 'eval.json'), 'w') as f:
    json.dump(result, f, indent=2)
  card = manpages_card.write_card if args.task.metric == 'rouge' else write_card
  log(f'evaluate: wrote {card(args, result)}')


def main(argv=None):
  args = parse_args(argv)
  os.makedirs(args.workdir, exist_ok=True)
  run = {'target': stage_target, 'distill-data': stage_distill, 'draft': stage_draft,
         'export': stage_export, 'evaluate': stage_evaluate}
  for stage in STAGES:
    if stage in args.stages:
      start = time.time()
      log(f'== {stage}')
      run[stage](args)
      log(f'== {stage} done in {(time.time() - start) / 60:.1f} min')


if __name__ == '__main__':
  main()
