"""Trains the bundled decoder-only pair on this machine's CPUs: a small Llama-style target
(`manlm_target`) and draft (`manlm_draft`) that continue man pages
(`specjax.demo.continuation`), in specjax/assets/manlm.

Stages (each resumable: a rerun continues from the stage's latest checkpoint):
  target   next-token cross-entropy on the train split's texts (Adam, warmup and cosine).
  draft    the draft learns the target's distributions over the same texts: forward
           KL(target || draft) at every position (`specjax.drafting.distill`).
  export   both saved with `save_params` in bfloat16 to --assets/{target,draft}, and the
           task's test split (the man-page pair's test texts, split after their first
           words) to --assets/test.jsonl, its first 8 prompts to samples.jsonl.
  evaluate perplexity of both on the test texts, greedy speculative decoding of the test
           prompts (identical rows, alpha, tokens per target call at gamma 4, T=0 and 1);
           writes the model card (MODEL_CARD.md) in --assets.

Usage:
  python scripts/build_manpage_corpus.py --out data/manpages --assets ''
  python scripts/train_manlm.py [--data data/manpages] [--workdir runs/manlm]
      [--stages target,draft,export,evaluate] [--target-steps 1200] [--draft-steps 400]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checkpoints
from specjax.checkpoints.registry import MANLM_ASSETS, MANPAGES_ASSETS
from specjax.core import api
from specjax.core.sampling import SamplingConfig
from specjax.demo import bigram_card, continuation, datastore_card
from specjax.drafting import distill
from specjax.drafting import fit as fit_lib
from specjax.models.lm import CausalLM
from specjax.models.lm_config import manlm_draft, manlm_target

STAGES = ('target', 'draft', 'export', 'evaluate')


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter,
                              epilog=__doc__.split('\n\n', 1)[1])
  p.add_argument('--data', default='data/manpages',
                 help='folder with {train,validation,test}.jsonl of the man-page corpus')
  p.add_argument('--workdir', default='runs/manlm', help='checkpoints and logs')
  p.add_argument('--assets', default=MANLM_ASSETS, help='where export writes the pair')
  p.add_argument('--stages', default=','.join(STAGES), help='comma-separated: %(default)s')
  p.add_argument('--target-steps', type=int, default=1200)
  p.add_argument('--target-lr', type=float, default=2e-3)
  p.add_argument('--draft-steps', type=int, default=400)
  p.add_argument('--draft-lr', type=float, default=3e-3)
  p.add_argument('--batch', type=int, default=32, help='sequences per step')
  p.add_argument('--eval-rows', type=int, default=200, help='test prompts evaluate decodes')
  p.add_argument('--seed', type=int, default=0)
  args = p.parse_args(argv)
  unknown = set(args.stages.split(',')) - set(STAGES)
  if unknown:
    p.error(f'unknown stages {sorted(unknown)}; pick from {",".join(STAGES)}')
  return args


def log(args, msg: str) -> None:
  line = f'{datetime.datetime.now():%H:%M:%S} {msg}'
  print(line, flush=True)
  os.makedirs(args.workdir, exist_ok=True)
  with open(os.path.join(args.workdir, 'log.txt'), 'a', encoding='utf-8') as f:
    f.write(line + '\n')


def vocab():
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  return spm.SentencePieceProcessor(model_file=os.path.join(MANPAGES_ASSETS, 'spm.model'))


def split_data(args, split: str):
  path = os.path.join(args.data, f'{split}.jsonl')
  if not os.path.isfile(path):
    raise SystemExit(f'{path} not found; run scripts/build_manpage_corpus.py --out '
                     f'{args.data} --assets \'\' first')
  texts = continuation.read_texts(path)
  seqs, spans = continuation.token_sequences(vocab().encode, texts)
  return np.zeros((len(seqs), 1), np.int32), seqs, spans


def lm_loss(params, model, tp, inputs, seqs, spans):
  """(mean next-token cross-entropy over the counted positions, top-1 accuracy there)."""
  del tp, inputs
  width = seqs.shape[1]
  logits = model.logits(params, seqs)  # [B, T, V]
  nxt = jnp.concatenate([seqs[:, 1:], jnp.zeros_like(seqs[:, :1])], axis=1)
  logp = jax.nn.log_softmax(logits, -1)
  nll = -jnp.take_along_axis(logp, nxt[..., None], -1)[..., 0]
  weight = fit_lib.counted(spans, width).astype(jnp.float32)
  total = jnp.maximum(jnp.sum(weight), 1.0)
  right = (jnp.argmax(logits, -1) == nxt).astype(jnp.float32)
  return jnp.sum(nll * weight) / total, jnp.sum(right * weight) / total


def init_params(model, seed: int):
  """The model's random params with the embedding scaled to std 1/sqrt(D): through the
  tied output projection the first logits then have unit scale (a unit-normal embedding
  would start the loss near 100)."""
  params = model.init(jax.random.PRNGKey(seed))
  embed = params['embed']['embedding']
  params['embed']['embedding'] = embed / (jnp.std(embed) * np.sqrt(embed.shape[1]))
  return params


def _latest(workdir: str, name: str, template):
  """The final params of a stage's run, restored from its checkpoints."""
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  directory = os.path.abspath(os.path.join(workdir, name, 'checkpoints'))
  with ocp.CheckpointManager(directory) as manager:
    step = manager.latest_step()
    if step is None:
      raise SystemExit(f'no {name} checkpoint in {directory}; run the {name} stage first')
    tx = fit_lib.optimizer(fit_lib.Training(steps=2))
    restored = manager.restore(step, args=ocp.args.StandardRestore(
        {'heads': template, 'opt_state': tx.init(template)}))
  return restored['heads'], step


def validation_loss(args, model, params, data) -> float:
  _, seqs, spans = data
  fn = jax.jit(lambda p, s, sp: lm_loss(p, model, None, None, s, sp))
  total = count = 0.0
  for i in range(0, len(seqs), 64):
    s, sp = seqs[i:i + 64], spans[i:i + 64]
    loss, _ = fn(params, s, sp)
    n = float(np.sum(np.maximum(sp[:, 1] - sp[:, 0], 0)))
    total, count = total + float(loss) * n, count + n
  return total / count


def stage_target(args) -> None:
  model = CausalLM(manlm_target)
  cfg = fit_lib.Training(steps=args.target_steps, batch=args.batch,
                         learning_rate=args.target_lr, warmup_steps=100, save_every=100,
                         seed=args.seed)
  start = time.time()
  out = fit_lib.fit(lambda tx: fit_lib.make_step(lm_loss, model, tx),
                    init_params(model, args.seed), None, split_data(args, 'train'),
                    os.path.join(args.workdir, 'target'), cfg, 'target')
  val = validation_loss(args, model, out['params'], split_data(args, 'validation'))
  log(args, f'target: {cfg.steps} steps, train loss {out["loss"]:.3f}, validation loss '
      f'{val:.3f} ({(time.time() - start) / 60:.1f} min this run)')


def stage_draft(args) -> None:
  target, draft = CausalLM(manlm_target), CausalLM(manlm_draft)
  tp, _ = _latest(args.workdir, 'target', target.init(jax.random.PRNGKey(0)))
  cfg = fit_lib.Training(steps=args.draft_steps, batch=args.batch,
                         learning_rate=args.draft_lr, warmup_steps=50, save_every=100,
                         seed=args.seed + 1)
  start = time.time()
  out = distill.train(distill.Distillation(target, draft), tp,
                      init_params(draft, args.seed + 1),
                      split_data(args, 'train'), os.path.join(args.workdir, 'draft'), cfg)
  val = validation_loss(args, draft, out['params'], split_data(args, 'validation'))
  log(args, f'draft: {cfg.steps} steps, KL {out["loss"]:.3f}, agreement '
      f'{out["accuracy"]:.3f}, validation loss {val:.3f} '
      f'({(time.time() - start) / 60:.1f} min this run)')


def stage_export(args) -> None:
  for name, config in (('target', manlm_target), ('draft', manlm_draft)):
    model = CausalLM(config)
    params, step = _latest(args.workdir, name, model.init(jax.random.PRNGKey(0)))
    params = jax.tree.map(lambda a: np.asarray(a, jnp.bfloat16), params)
    path = checkpoints.save_params(os.path.join(args.assets, name), params, config,
                                   force=True)
    log(args, f'{name} (step {step}) -> {path}')
  rows = continuation.test_rows(continuation.read_texts(os.path.join(args.data, 'test.jsonl')))
  with open(os.path.join(args.assets, 'test.jsonl'), 'w', encoding='utf-8') as f:
    for row in rows:
      f.write(json.dumps(row, ensure_ascii=False) + '\n')
  with open(os.path.join(args.assets, 'samples.jsonl'), 'w', encoding='utf-8') as f:
    for row in rows[:8]:  # the decode's default inputs
      f.write(json.dumps({'inputs': row['inputs']}, ensure_ascii=False) + '\n')
  log(args, f'{len(rows)} test rows -> {args.assets}/test.jsonl, 8 of them -> samples.jsonl')


def _size(path: str) -> str:
  total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
  return f'{total / 2**20:.1f} MB'


def stage_evaluate(args) -> None:
  target, tp = checkpoints.load_model(None, os.path.join(args.assets, 'target'))
  draft, dp = checkpoints.load_model(None, os.path.join(args.assets, 'draft'))
  sp = vocab()
  test = continuation.read_texts(os.path.join(args.data, 'test.jsonl'))
  data = (None,) + continuation.token_sequences(sp.encode, test)
  ppl = {name: float(np.exp(validation_loss(args, m, p, data)))
         for name, m, p in (('target', target, tp), ('draft', draft, dp))}
  with open(os.path.join(args.assets, 'test.jsonl'), encoding='utf-8') as f:
    rows = [json.loads(line) for line in f][:args.eval_rows]
  width = max(len(sp.encode(r['inputs'])) for r in rows)
  inputs = np.zeros((len(rows), width), np.int32)
  for i, r in enumerate(rows):
    ids = sp.encode(r['inputs'])
    inputs[i, :len(ids)] = ids
  inputs = jnp.asarray(inputs)
  stats = {}
  for temperature in (0.0, 1.0):
    sampling = SamplingConfig(temperature=temperature)
    kw = dict(max_decode_len=continuation.MAX_DECODE_LEN, sampling=sampling)
    ref = api.autoregressive_decode(target, tp, inputs, rng=jax.random.PRNGKey(0), **kw)
    out = api.speculative_decode(target, tp, draft, dp, inputs, gamma=4,
                                 rng=jax.random.PRNGKey(0), **kw)
    s = out.stats
    row = {'alpha': float(s.alpha), 'tokens_per_call': float(s.tokens_per_call)}
    if temperature == 0.0:
      row['identical'] = int(np.sum(np.all(np.asarray(out.tokens) == np.asarray(ref.tokens),
                                            axis=1)))
      row['example'] = {'prompt': rows[0]['inputs'],
                        'target': sp.decode([int(t) for t in np.asarray(ref.tokens[0])
                                             if t > 1])}
    stats[temperature] = row
  write_card(args, ppl, stats, len(rows))


def write_card(args, ppl, stats, n_rows) -> None:
  def params_of(config):
    shapes = jax.eval_shape(CausalLM(config).init, jax.random.PRNGKey(0))
    return sum(int(np.prod(a.shape)) for a in jax.tree.leaves(shapes)) / 1e6
  g, t = stats[0.0], stats[1.0]
  lines = [
      '# specjax demo models: man-page continuation, a decoder-only (Llama-style) pair', '',
      'A small Llama-style target and a much smaller draft trained from scratch on this '
      'machine, the decoder-only pair of the bench and the paper table. Written by '
      '`scripts/train_manlm.py` (evaluate stage); do not edit by hand.', '',
      '## Data', '',
      'The man-page corpus of `scripts/build_manpage_corpus.py` (the DESCRIPTION\'s first '
      'words of every man page of this system, deduplicated, split by hash: 7599 train, '
      '500 validation, 500 test texts). Each text is followed by EOS and cut to '
      f'{continuation.SEQUENCE_LEN} tokens. Vocabulary: the man-page pair\'s '
      '`specjax/assets/manpages/spm.model` (2000 SentencePiece pieces, pad 0, eos 1, no '
      'BOS), logits padded to 2048. The task: continue a text from its first '
      f'{continuation.PROMPT_WORDS} words (`specjax.demo.continuation`); `test.jsonl` '
      'holds the test texts so split ({"inputs": prompt, "targets": continuation}).', '',
      '## Models and training', '',
      'Both are Llama blocks (RMSNorm, rotary positions, SwiGLU, grouped-query attention, '
      'tied embeddings). Adam, linear warmup then cosine decay. The target learns the '
      'texts (next-token cross-entropy); the draft learns the target\'s distributions '
      'over the same texts (forward KL at every position).', '',
      '| model | config | layers x width | params | steps | lr | test perplexity | size |',
      '|---|---|---|---|---|---|---|---|',
      f'| target | `manlm_target` | {manlm_target.num_layers} x {manlm_target.emb_dim} | '
      f'{params_of(manlm_target):.2f} M | {args.target_steps} x {args.batch} | '
      f'{args.target_lr:g} | {ppl["target"]:.2f} | {_size(os.path.join(args.assets, "target"))} |',
      f'| draft | `manlm_draft` | {manlm_draft.num_layers} x {manlm_draft.emb_dim} | '
      f'{params_of(manlm_draft):.2f} M | {args.draft_steps} x {args.batch} | '
      f'{args.draft_lr:g} | {ppl["draft"]:.2f} | {_size(os.path.join(args.assets, "draft"))} |',
      '',
      'Weights are stored as bfloat16; `load_model` restores float32. Machine: '
      f'{os.cpu_count()} CPU cores ({platform.machine()}), jax {jax.__version__} on CPU.', '',
      f'## Speculative decoding, the first {n_rows} test prompts, gamma 4', '',
      f'At most {continuation.MAX_DECODE_LEN} new tokens.', '',
      '| sampling | alpha | tokens per target call |', '|---|---|---|',
      f'| greedy | {g["alpha"]:.3f} | {g["tokens_per_call"]:.2f} |',
      f'| temperature 1 | {t["alpha"]:.3f} | {t["tokens_per_call"]:.2f} |', '',
      f'Greedy speculative outputs equal the target\'s own greedy outputs on '
      f'{g["identical"]} of {n_rows} rows.', '',
      f'Example: "{g["example"]["prompt"]}" -> "{g["example"]["target"]}"', '',
      'Load with `checkpoints.load_model(\'manlm_target\', '
      'DEFAULT_CHECKPOINTS[\'manlm_target\'])` (and `manlm_draft`), or run '
      '`python -m specjax.decode --target manlm_target --draft manlm_draft`. Toy models: '
      'they continue man pages, nothing else.', '',
      *datastore_card.section(args.assets),
      *bigram_card.section(args.assets, 'manlm', 'manlm_target',
                           'the texts, whole')]
  with open(os.path.join(args.assets, 'MODEL_CARD.md'), 'w', encoding='utf-8') as f:
    f.write('\n'.join(lines))
  log(args, f'card -> {args.assets}/MODEL_CARD.md: greedy alpha {g["alpha"]:.3f}, '
      f'{g["tokens_per_call"]:.2f} tokens per call, {g["identical"]}/{n_rows} identical')


def main(argv=None) -> None:
  args = parse_args(argv)
  stages = args.stages.split(',')
  for name in STAGES:
    if name in stages:
      log(args, f'stage {name}')
      globals()[f'stage_{name}'](args)


if __name__ == '__main__':
  main()
