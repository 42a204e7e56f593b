"""python -m specjax.datastore: from text, tokenised with a target's vocabulary, each
document followed by EOS as the decoder writes it, `build` writes a retrieval datastore
(`specjax.datastore.store`, for --draft rest:DIR) and `bigram` a bigram table (for --draft
bigram:TABLE).

Examples:
  python -m specjax.datastore build --task specjax_demo_ende --output DIR
  python -m specjax.datastore build --input docs.txt --vocab spm.model --output DIR
  python -m specjax.datastore build --input rows.jsonl --field targets --target manpages_target \\
      --output DIR
  python -m specjax.datastore bigram --input rows.jsonl --vocab spm.model --output TABLE.npz

--input reads one document per line, or JSON lines (the --field of each line's object).
--task reads a bundled task's corpus split (built by scripts/build_demo_corpus.py or
scripts/build_manpage_corpus.py under --data): specjax_demo_ende the German targets,
specjax_demo_manpages the man-page summaries, manlm the whole man-page texts.
The vocabulary is --vocab (a SentencePiece model, or a tokenizer.json with a decoder-only
--target), else the --target's (default: the task's bundled target, demo_target for
--input). A bigram table counts each document's bigrams after the start token (the pad id)
and keeps each token's --top-k next tokens. Problems are one line on stderr and exit code
2, before the slow imports; an interrupted run writes nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
from typing import List, Optional, Sequence

from specjax import flags, interrupt
from specjax.flags import flag
from specjax.datastore import layout, sources

DEFAULT_TARGET = 'demo_target'  # the vocabulary of a plain --input


class _Parser(argparse.ArgumentParser):
  """An argument parser whose errors are one line: `error: ...`, exit 2."""

  def error(self, message: str):
    interrupt.error_line(f'error: {message} (see {self.prog} --help)')
    sys.exit(2)


@dataclasses.dataclass(frozen=True)
class SourceConfig:
  """The settings both commands share: the text and the vocabulary; each field is its flag."""

  input: Optional[str] = flag(None, 'text, one document per line, or JSON lines; - for '
                              'stdin (this or --task)', metavar='FILE')
  task: Optional[str] = flag(None, 'a bundled task: its corpus split\'s targets (manlm: '
                             'texts) (this or --input)', choices=sorted(sources.TASKS))
  output: Optional[str] = flag(None, 'the datastore directory to create (must not exist)',
                               metavar='DIR')
  vocab: Optional[str] = flag(None, 'SentencePiece model or tokenizer.json (default: the '
                              '--target\'s)', metavar='PATH')
  target: Optional[str] = flag(None, 'registry name of the target whose vocabulary to use '
                               f'(default: the task\'s bundled target; {DEFAULT_TARGET} for '
                               '--input)', metavar='NAME')
  field: Optional[str] = flag(None, f'the JSON lines field to read (default '
                              f'"{sources.DEFAULT_FIELD}", else the first of '
                              f'{", ".join(sources.FALLBACK_FIELDS)})', metavar='NAME')
  split: str = flag('train', 'the --task corpus split', choices=sources.SPLITS)
  data: Optional[str] = flag(None, 'the --task corpus folder (default data/demo or '
                             'data/manpages)', metavar='DIR')
  max_documents: Optional[int] = flag(None, 'keep the first N documents (in file order)',
                                      metavar='N')
  json: bool = flag(False, 'print the summary as JSON')
  quiet: bool = flag(False, 'no progress bars')


@dataclasses.dataclass(frozen=True)
class BuildConfig(SourceConfig):
  """The settings of `python -m specjax.datastore build`; each field is its flag."""

  max_query: int = flag(layout.MAX_QUERY, 'tokens of each suffix the array is sorted by: '
                        f'the longest lookup (1-{layout.MAX_QUERY_LIMIT})', metavar='Q')


@dataclasses.dataclass(frozen=True)
class BigramConfig(SourceConfig):
  """The settings of `python -m specjax.datastore bigram`; each field is its flag."""

  output: Optional[str] = flag(None, 'the .npz table to write (must not exist)',
                               metavar='FILE')
  top_k: int = flag(8, 'next tokens kept per token (1-64)', metavar='K')


TOP_K_LIMIT = 64  # a bigram table's widest rows


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  p = _Parser(prog='python -m specjax.datastore', description=__doc__.split('\n\n')[0])
  sub = p.add_subparsers(dest='command', required=True, metavar='COMMAND')
  epilog = __doc__.split('\n\n', 1)[1]
  for name, cls, helped in (('build', BuildConfig, 'build a retrieval datastore from text'),
                            ('bigram', BigramConfig, 'build a bigram table from text')):
    c = sub.add_parser(name, help=helped, description=helped, epilog=epilog,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.add_flags(c, cls, required=('output',))
  args = p.parse_args(argv)
  if (args.input is None) == (args.task is None):
    p.error(f'{args.command} takes one of --input FILE and --task NAME')
  return args


def _check(args) -> None:
  """The arguments' problems that need no file read, as ValueError."""
  if args.command == 'build' and not 1 <= args.max_query <= layout.MAX_QUERY_LIMIT:
    raise ValueError(f'--max-query must be in [1, {layout.MAX_QUERY_LIMIT}], got '
                     f'{args.max_query}; pass one in range (default {layout.MAX_QUERY})')
  if args.command == 'bigram':
    if not 1 <= args.top_k <= TOP_K_LIMIT:
      raise ValueError(f'--top-k must be in [1, {TOP_K_LIMIT}], got {args.top_k}')
    if not args.output.endswith('.npz'):
      raise ValueError(f'--output {args.output}: a bigram table is an .npz file; pass a '
                       'path ending in .npz')
    if os.path.lexists(args.output):
      raise ValueError(f'{args.output} already exists; remove it or pass another --output')
  if args.max_documents is not None and args.max_documents < 1:
    raise ValueError(f'--max-documents must be at least 1, got {args.max_documents}')
  if args.command == 'build' and layout.occupied(args.output):
    raise ValueError(f'{args.output} already exists; remove it (rm -r {args.output}) or pass '
                     'another --output')
  if args.input and (args.split != 'train' or args.data):
    raise ValueError('--split and --data choose a --task corpus; drop them with --input')
  if args.task and args.field:
    raise ValueError('--field reads an --input file; a --task knows its field: drop --field')


def _texts(args) -> sources.Texts:
  """The documents as text, cut to --max-documents."""
  texts = (sources.read_task(args.task, args.split, args.data) if args.task
           else sources.read_file(args.input, args.field))
  if args.max_documents and len(texts.texts) > args.max_documents:
    return sources.Texts(texts.texts[:args.max_documents],
                         f'{texts.source}; the first {args.max_documents} of '
                         f'{len(texts.texts)} documents')
  return texts


def _vocabulary(path: Optional[str], target: str):
  """The vocabulary to tokenise with: a decoder-only target's tokenizer (`path`, else its
  bundled one), a T5 target's SentencePiece model (`path`, else its bundled one, else the
  public T5 one)."""
  from specjax import checkpoints  # pylint: disable=import-outside-toplevel
  from specjax.checkpoints import registry  # pylint: disable=import-outside-toplevel
  from specjax.models.lm import CausalLM  # pylint: disable=import-outside-toplevel
  model = checkpoints.build_model(checkpoints.resolve_config(target))
  pair = registry.bundled(target)
  if isinstance(model, CausalLM):
    if not path and not pair:
      raise ValueError(f'{target} has no bundled tokenizer; pass its tokenizer.json or '
                       'tokenizer.model with --vocab')
    return checkpoints.load_tokenizer(path or pair.vocab, model)
  path = path or (pair.vocab if pair else registry.T5_VOCAB)
  if path.endswith('.json'):
    raise ValueError(f'{path} is a tokenizer.json but {target} is a T5 model; pass --target '
                     'NAME of the decoder-only model it belongs to')
  try:
    return checkpoints.load_vocab(path)
  except RuntimeError as e:  # sentencepiece's parse error
    reason = ' '.join(str(e).split())[:160]
    raise ValueError(f'cannot read vocabulary {path} ({reason}); pass a SentencePiece model '
                     'with --vocab') from None


class _Documents:
  """The texts' ids, each followed by EOS, encoded as they are read (sized, for the
  progress bar)."""

  def __init__(self, texts: List[str], vocab):
    self._texts, self._vocab = texts, vocab

  def __len__(self) -> int:
    return len(self._texts)

  def __iter__(self):
    for text in self._texts:
      yield list(self._vocab.encode(text)) + [self._vocab.eos_id]


def _shown(path: str) -> str:
  """`path` relative to the working directory when it is below it (the meta of a bundled
  datastore names no machine's directories)."""
  rel = os.path.relpath(os.path.abspath(path))
  return path if rel.startswith('..') else rel


def _target(args) -> str:
  """The registry name whose vocabulary tokenises the text."""
  return args.target or (sources.TASKS[args.task].target if args.task else DEFAULT_TARGET)


def build(args, argv: Sequence[str]) -> dict:
  """Builds and writes the datastore of `args`; its summary."""
  _check(args)
  texts = _texts(args)
  from specjax.datastore import store  # pylint: disable=import-outside-toplevel
  target = _target(args)
  vocab = _vocabulary(args.vocab, target)
  built = store.build(_Documents(texts.texts, vocab), vocab.vocab_size,
                      store.vocab_fingerprint(vocab), args.max_query,
                      progress=not args.quiet, source=texts.source)
  own = {'target': target} if args.target or not args.vocab else {}  # what chose the vocab
  meta = {**built.meta, **own, 'vocab': _shown(vocab.path),
          'command': f'{layout.BUILD_COMMAND} {shlex.join(argv[1:])}'.rstrip()}
  built = dataclasses.replace(built, meta=meta)
  interrupt.raise_from_here()  # the write removes its temporary directory as it unwinds
  store.write(built, args.output)
  return store.summary(built, args.output)


def bigram(args) -> dict:
  """Counts the bigrams of `args`'s text and writes its table; its summary."""
  _check(args)
  texts = _texts(args)
  from specjax.proposers import bigram as bigram_lib  # pylint: disable=import-outside-toplevel
  from specjax.datastore import store  # pylint: disable=import-outside-toplevel
  vocab = _vocabulary(args.vocab, _target(args))
  documents = list(store.with_progress(_Documents(texts.texts, vocab), not args.quiet,
                                       desc='tokenising', unit='doc'))
  table = bigram_lib.table_of(documents, vocab.vocab_size, args.top_k, vocab.pad_id)
  interrupt.raise_from_here()  # the write removes its temporary file as it unwinds
  bigram_lib.save_table(args.output, table)
  return {'path': args.output, 'documents': len(documents),
          'bigrams': sum(len(d) for d in documents), 'top_k': args.top_k,
          'vocab_size': vocab.vocab_size, 'vocab': _shown(vocab.path),
          'source': texts.source, 'bytes': os.path.getsize(args.output)}


def main(argv: Optional[Sequence[str]] = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parse_args(argv)
  written = 'datastore' if args.command == 'build' else 'table'
  # Until the write, a Ctrl-C ends the run at once (during the imports too, where a
  # KeyboardInterrupt can be swallowed by a garbage collector callback); nothing is on disk.
  interrupt.exit_at_once(lambda: f'no {written} written to {args.output}')
  try:
    out = build(args, argv) if args.command == 'build' else bigram(args)
  except KeyboardInterrupt:
    interrupt.error_line(f'interrupted: no {written} written to {args.output}')
    return 130
  except (ValueError, OSError) as e:
    interrupt.error_line(f'error: {" ".join(str(e).split())}')
    return 2
  if args.json:
    print(json.dumps(out))
  elif args.command == 'build':
    print(f'{out["path"]}: {out["documents"]} documents, {out["tokens"]} tokens, '
          f'{layout.human_size(out["bytes"])} on disk (max_query {out["max_query"]}, '
          f'{out["vocab_size"]} ids)')
  else:
    print(f'{out["path"]}: {out["documents"]} documents, {out["bigrams"]} bigrams, top '
          f'{out["top_k"]} next tokens of each of {out["vocab_size"]} ids, '
          f'{layout.human_size(out["bytes"])} on disk')
  return 0
