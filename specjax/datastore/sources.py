"""The texts a datastore is built from: a file (one document per line, or JSON lines) or a
split of a bundled task's corpus. Every problem is a ValueError of one line naming the fix.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Callable, List, Optional, Tuple

from specjax.demo import continuation, corpus, manpages

DEFAULT_FIELD = 'targets'
# Tried in turn when a JSON lines file has no DEFAULT_FIELD and no --field was given.
FALLBACK_FIELDS = ('summary', 'de', 'text')
SPLITS = corpus.SPLITS


@dataclasses.dataclass(frozen=True)
class Texts:
  """Documents as text.

  Attributes:
    texts: the documents, blank ones dropped.
    source: where they came from, for the datastore's meta.
  """

  texts: List[str]
  source: str


@dataclasses.dataclass(frozen=True)
class Task:
  """A bundled task whose train targets make a datastore.

  Attributes:
    name: the task's name (`--task`).
    target: the bundled target that decodes it (its vocabulary is the datastore's).
    data: the corpus folder its build script writes by default.
    script: the script that builds the corpus.
    script_args: what else to pass it besides --out (to leave the bundled assets as
      they are).
    what: what the documents are, for the datastore's meta.
    read: (split, folder) -> the documents' texts.
  """

  name: str
  target: str
  data: str
  script: str
  script_args: str
  what: str
  read: Callable[[str, str], List[str]]


TASKS = {t.name: t for t in (
    Task('specjax_demo_ende', 'demo_target', 'data/demo', 'scripts/build_demo_corpus.py',
         "--samples ''", 'targets (the German side)',
         lambda s, d: [de for _, de in corpus.load_pairs(s, d)]),
    Task('specjax_demo_manpages', 'manpages_target', 'data/manpages',
         'scripts/build_manpage_corpus.py', "--assets ''", 'targets (the NAME-line summaries)',
         lambda s, d: [t for _, t in manpages.load_pairs(s, d)]),
    Task('manlm', 'manlm_target', 'data/manpages', 'scripts/build_manpage_corpus.py',
         "--assets ''", 'texts (whole, as the decoder-only model writes them)',
         lambda s, d: continuation.read_texts(os.path.join(d, f'{s}.jsonl'))),
)}


def _read_all(path: str) -> Tuple[str, str]:
  """(the text of `path`, or of stdin for '-'; how to name it)."""
  if path == '-':
    try:
      return sys.stdin.read(), 'stdin'
    except UnicodeDecodeError as e:
      raise ValueError(f'cannot read stdin ({e.reason} at byte {e.start}); pipe UTF-8 text, '
                       'one document per line') from None
  try:
    with open(path, encoding='utf-8') as f:
      return f.read(), path
  except UnicodeDecodeError as e:
    raise ValueError(f'cannot read {path}: not UTF-8 ({e.reason} at byte {e.start}); pass a '
                     'UTF-8 text file, one document per line, or JSON lines') from None
  except OSError as e:
    raise ValueError(f'cannot read {path} ({e.strerror or e}); pass an existing text file '
                     '(--input FILE, or - for stdin)') from None


def _pick_field(row: dict, field: Optional[str], name: str, line: int) -> str:
  """The field of the first JSON row to read: `field`, else DEFAULT_FIELD or a fallback."""
  wanted = [field] if field else [DEFAULT_FIELD, *FALLBACK_FIELDS]
  for key in wanted:
    if key in row:
      return key
  found = ', '.join(f'"{k}"' for k in row) or 'none'
  expected = ' or '.join(f'"{k}"' for k in wanted)
  raise ValueError(f'{name} line {line} has no {expected} field (its fields: {found}); pass '
                   '--field NAME')


def _json_texts(lines, field: Optional[str], name: str) -> Tuple[List[str], str]:
  """(the texts of the JSON lines' field, the field read)."""
  texts, key = [], None
  for number, line in lines:
    try:
      row = json.loads(line)
    except ValueError as e:
      raise ValueError(f'{name} line {number} is not JSON ({e.msg}) though line '
                       f'{lines[0][0]} is; make every line a JSON object, or pass plain '
                       'text, one document per line') from None
    if not isinstance(row, dict):
      raise ValueError(f'{name} line {number} is not a JSON object; make every line one')
    key = key or _pick_field(row, field, name, number)
    if key not in row:
      raise ValueError(f'{name} line {number} has no "{key}" field (line {lines[0][0]} has '
                       'it); give every line the field, or pass --field NAME')
    if not isinstance(row[key], str):
      raise ValueError(f'{name} line {number}: "{key}" is {type(row[key]).__name__}, not '
                       'text; pass --field NAME of a text field')
    texts.append(row[key].strip())
  return texts, key


def _is_json_object(line: str) -> bool:
  if not line.lstrip().startswith('{'):
    return False
  try:
    return isinstance(json.loads(line), dict)
  except ValueError:
    return False


def read_file(path: str, field: Optional[str] = None) -> Texts:
  """The documents of a file: one per non-blank line, or, when its first non-blank line is
  a JSON object, the `field` of every line's object (default DEFAULT_FIELD, else the first
  of FALLBACK_FIELDS the first line has).

  Args:
    path: the file, or '-' for stdin.
    field: the JSON field to read (None: DEFAULT_FIELD or a fallback).

  Raises:
    ValueError: the file cannot be read, holds no text, or its JSON lines lack the field.
  """
  text, name = _read_all(os.fspath(path))
  lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
  if not lines:
    raise ValueError(f'no text in {name}: it has no non-blank line; pass a file with one '
                     'document per line, or JSON lines')
  if _is_json_object(lines[0][1]):
    texts, key = _json_texts(lines, field, name)
    source = f'{name}, field "{key}"'
  else:
    texts, source = [line.strip() for _, line in lines], f'{name}, one document per line'
  texts = [t for t in texts if t]
  if not texts:
    raise ValueError(f'no text in {name}: every document is blank; pass documents with text')
  return Texts(texts, source)


def read_task(name: str, split: str = 'train', data: Optional[str] = None) -> Texts:
  """The documents of a bundled task's corpus split (`TASKS`).

  Args:
    name: a key of TASKS.
    split: one of SPLITS.
    data: the corpus folder (default: the task's).

  Raises:
    ValueError: an unknown task or split, or the corpus is missing (the message names the
      script that builds it) or holds no text.
  """
  if name not in TASKS:
    raise ValueError(f'unknown task {name!r}; pass one of {", ".join(sorted(TASKS))}')
  if split not in SPLITS:
    raise ValueError(f'unknown split {split!r}; pass one of {", ".join(SPLITS)}')
  task = TASKS[name]
  data = data or task.data
  path = os.path.join(data, f'{split}.jsonl')
  command = f'python {task.script} --out {data} {task.script_args}'
  if not os.path.isfile(path):
    raise ValueError(f'{path} not found; build the corpus with {command} (or pass --data '
                     'DIR)')
  try:
    texts = [t.strip() for t in task.read(split, data)]
  except (ValueError, KeyError, TypeError, OSError) as e:
    reason = ' '.join(str(e).split())
    raise ValueError(f'cannot read {path} ({type(e).__name__}: {reason}); rebuild it with '
                     f'{command}') from None
  texts = [t for t in texts if t]
  if not texts:
    raise ValueError(f'no text in {path}; rebuild it with {command}')
  return Texts(texts, f'{name} {split} {task.what} of {path} ({task.script})')
