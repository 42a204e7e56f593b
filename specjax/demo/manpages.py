"""A summarisation task from this system's manual pages: DESCRIPTION -> the NAME line.

A man page (roff with the man(7) macros) says what a command does twice: at length in its
DESCRIPTION section and in one line in NAME ("ls \\- list directory contents"). The task
summarises the first one into the second, whose words mostly come from the first, as
CNN/DM's highlights come from their articles. `parse_page` reads one page, `page_pair`
makes its (text, summary) pair, `build_splits` dedupes and splits the pairs by hash as the
EnDe corpus is split (`corpus.split_key`). Pages in mdoc(7) (`.Sh`, `.Nd`) are not read.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from specjax.demo import corpus

TASK_PREFIX = 'summarize: '
SPLITS = corpus.SPLITS
# A pair's text is the DESCRIPTION's first words; a summary longer than this is no summary.
MAX_TEXT_WORDS, MIN_TEXT_WORDS = 48, 6
MAX_SUMMARY_WORDS, MIN_SUMMARY_WORDS = 16, 2

# Special characters \(xx and \[xx] that carry text; any other is dropped.
_CHARS = {
    'em': '-', 'en': '-', 'hy': '-', 'mi': '-', 'aq': "'", 'dq': '"', 'lq': '"', 'rq': '"',
    'oq': "'", 'cq': "'", 'bu': '*', 'co': '(C)', 'rg': '(R)', 'tm': '(TM)', 'mu': 'x',
    'ga': '`', 'ti': '~', 'ha': '^', 'rs': '\\', 'sl': '/', 'ba': '|', 'or': '|',
    'pl': '+', 'eq': '=', 'lt': '<', 'gt': '>', '<=': '<=', '>=': '>=', 'de': ' degrees',
    'Fo': '<<', 'Fc': '>>', 'fo': '<', 'fc': '>', 'ct': 'c', 'ss': 'ss', '->': '->',
    '<-': '<-', 'R': '(R)', 'Tm': '(TM)', 'Eq': '=', 'Ne': '!=',
}
# One roff escape: what follows the backslash. Order matters: longer forms first.
_ESCAPE = re.compile(r"""\\(?:
    "(?P<comment>.*)$                               # \" comment to the end of the line
  | f(?:\[[^\]]*\]|\(..|.)                          # font: \fB \f(CW \f[BI]
  | s(?:\[[^\]]*\]|[-+]?\(..|[-+]?\d\d?)            # size: \s-1 \s0 \s(12 \s[+2]
  | \((?P<char2>..)                                 # character \(em
  | \[(?P<charn>[^\]]*)\]                           # character \[em] \[u00E9]
  | \*(?:\[(?P<strn>[^\]]*)\]|\((?P<str2>..)|(?P<str1>.))   # string \*(lq \*R
  | [nmMFgkz$](?:\[[^\]]*\]|\(..|.)                 # registers, colours, marks
  | [hvwlLNXDobxZABCRSY]'[^']*'                     # escapes with a quoted argument
  | (?P<lit>[-e\\.'`])                              # characters: \- \e \\ \. \' \`
  | (?P<space>[ ~0])                                # unbreakable spaces
  | [&|^,/:)c%pdurtaE]                              # zero-width and motion escapes
  | (?P<other>.)
)""", re.VERBOSE)
_LITERAL = {'-': '-', 'e': '\\', '\\': '\\', '.': '.', "'": "'", '`': '`'}
# Macros whose arguments are text (fonts); the others are layout or definitions.
_FONT_JOINED = {'BR', 'BI', 'IB', 'IR', 'RB', 'RI'}
_FONT_SPACED = {'B', 'I', 'SM', 'SB'}
# Macros that end a paragraph.
_BREAKS = {'PP', 'P', 'LP', 'TP', 'TQ', 'IP', 'HP', 'sp', 'SS', 'RS', 'RE', 'EX', 'EE',
           'nf', 'fi', 'UR', 'UE', 'MT', 'ME', 'in', 'ti', 'bp', 'Sp'}
_RELEASE_TRACK = re.compile(r'\(?\b(?:alpha|beta)\b\)?', re.IGNORECASE)
_WORD = re.compile(r'[^\W_]+')


def roff_text(line: str) -> str:
  """One line of roff text with its escapes resolved to plain characters.

  `\\-` is a hyphen, `\\(em` and `\\[em]` dashes, `\\(aq` / `\\*(lq` quotes, `\\e` a
  backslash; fonts (`\\fB`), sizes, motions and zero-width escapes vanish; a `\\"`
  comment ends the line.

  Args:
    line: a text line or a macro's argument.

  Returns:
    The text, whitespace not collapsed.
  """
  def sub(m: re.Match) -> str:
    if m.group('comment') is not None:
      return ''
    char = m.group('char2') or m.group('charn')
    if char is not None:
      return _CHARS.get(char, '')
    string = m.group('strn') or m.group('str2') or m.group('str1')
    if string is not None:
      return _CHARS.get(string, '"' if string in ('lq', 'rq', 'Q', 'U') else '')
    if m.group('lit'):
      return _LITERAL[m.group('lit')]
    if m.group('space'):
      return ' '
    return m.group('other') or ''
  return _ESCAPE.sub(sub, line)


def macro_args(rest: str) -> List[str]:
  """A macro line's arguments: space-separated, `"double quoted"` ones may hold spaces
  (`""` inside quotes is a literal quote)."""
  args, i = [], 0
  while i < len(rest):
    if rest[i] in ' \t':
      i += 1
    elif rest[i] == '"':
      j, arg = i + 1, []
      while j < len(rest):
        if rest[j] == '"':
          if rest[j + 1:j + 2] == '"':
            arg.append('"')
            j += 2
            continue
          break
        arg.append(rest[j])
        j += 1
      args.append(''.join(arg))
      i = j + 1
    else:
      j = i
      while j < len(rest) and rest[j] not in ' \t':
        j += 1
      args.append(rest[i:j])
      i = j
  return args


@dataclasses.dataclass(frozen=True)
class ManPage:
  """What a page says of itself.

  Attributes:
    names: the NAME line before its dash ("ls", "gzip, gunzip, zcat").
    summary: the NAME line after the dash ("list directory contents").
    description: the DESCRIPTION section's running text, one paragraph per item (no-fill
      blocks such as examples left out).
  """

  names: str
  summary: str
  description: Tuple[str, ...]


def _sections(text: str) -> Dict[str, List[str]]:
  """Section title (upper case) -> its paragraphs of plain text, in page order."""
  text = re.sub(r'\\\n', '', text)  # an escaped newline continues the line
  sections: Dict[str, List[str]] = {}
  paragraphs: Optional[List[str]] = None
  current: List[str] = []
  fill, skip_until, heading_next = True, None, False

  def end_paragraph():
    if paragraphs is not None and current:
      para = ' '.join(' '.join(current).split())
      if para:
        paragraphs.append(para)
    current.clear()

  for raw in text.split('\n'):
    if skip_until is not None:
      if skip_until in raw:
        skip_until = None
      continue
    if raw[:1] in ('.', "'"):
      name, _, rest = raw[1:].lstrip().partition(' ')
      name, rest = name.strip(), rest.strip()
      if name.startswith('\\"') or not name:
        continue
      if name == 'de' or name == 'ig':
        skip_until = '..'
        continue
      if name in ('if', 'ie', 'el'):
        if '\\{' in raw and '\\}' not in raw:
          skip_until = '\\}'
        continue
      if name == 'SH':
        end_paragraph()
        title = ' '.join(roff_text(' '.join(macro_args(rest))).split()).upper()
        if title:
          paragraphs = sections.setdefault(title, [])
        else:
          heading_next = True
        fill = True
        continue
      if name in _BREAKS:
        end_paragraph()
        if name in ('nf', 'EX'):
          fill = False
        elif name in ('fi', 'EE'):
          fill = True
        if name in ('IP', 'HP') and rest:
          args = macro_args(rest)
          tag = roff_text(args[0]) if args else ''
          if tag.strip() and tag.strip() not in ('*', '-', 'o', '\u2022'):
            current.append(tag)
            end_paragraph()
        continue
      if name in _FONT_JOINED:
        line = ''.join(roff_text(a) for a in macro_args(rest))
      elif name in _FONT_SPACED:
        line = ' '.join(roff_text(a) for a in macro_args(rest))
      else:
        continue  # .TH, .br, .ad, .nh, registers, strings, traps ...
    else:
      line = roff_text(raw)
    if heading_next:
      heading_next = False
      paragraphs = sections.setdefault(' '.join(line.split()).upper(), [])
      continue
    if not line.strip():
      end_paragraph()
    elif fill:
      current.append(line)
  end_paragraph()
  return sections


_DASH = re.compile(r'\s+[-\u2014\u2013]+\s+|\s+-+(?=[A-Za-z])')


def parse_page(text: str) -> Optional[ManPage]:
  """Reads one man(7) page.

  Args:
    text: the page's roff source.

  Returns:
    Its ManPage, or None when it has no NAME section with a `name \\- summary` line, no
    DESCRIPTION with text, or is only a `.so` link to another page.
  """
  if text.lstrip().startswith('.so '):
    return None
  sections = _sections(text)
  name = ' '.join(sections.get('NAME', []))
  parts = _DASH.split(name, maxsplit=1)
  description = tuple(sections.get('DESCRIPTION', []))
  if len(parts) != 2 or not parts[1].strip() or not description:
    return None
  return ManPage(names=parts[0].strip(), summary=parts[1].strip(), description=description)


def read_page(path: str | os.PathLike) -> Optional[ManPage]:
  """`parse_page` of a page file (gzip or plain), decoded as UTF-8 with Latin-1 as the
  fallback; None also when the file cannot be read."""
  try:
    opener = gzip.open if os.fspath(path).endswith('.gz') else open
    with opener(path, 'rb') as f:
      data = f.read()
  except (OSError, EOFError):
    return None
  try:
    text = data.decode('utf-8')
  except UnicodeDecodeError:
    text = data.decode('latin-1')
  return parse_page(text)


def _clean(text: str) -> str:
  text = ''.join(c if c.isprintable() else ' ' for c in text)
  return ' '.join(text.split())


def page_pair(page: ManPage, max_words: int = MAX_TEXT_WORDS) -> Optional[Tuple[str, str]]:
  """The (text, summary) pair of a page.

  The text is the DESCRIPTION's paragraphs in order, cut after `max_words` words (at the
  last sentence end within them when there is one); the summary is the NAME line's,
  without a final period.

  Returns:
    The pair, or None when the text has fewer than `MIN_TEXT_WORDS` words, the summary
    is outside `MIN_SUMMARY_WORDS..MAX_SUMMARY_WORDS` words, or either has no letters.
  """
  summary = _clean(page.summary).rstrip('.').strip()
  words = _clean(' '.join(page.description)).split()
  if len(words) > max_words:
    cut = ' '.join(words[:max_words])
    end = max(cut.rfind('. '), cut.rfind('.) '))
    words = cut[:end + 1].split() if end >= len(cut) // 2 else words[:max_words]
  text = ' '.join(words)
  if not MIN_SUMMARY_WORDS <= len(summary.split()) <= MAX_SUMMARY_WORDS:
    return None
  if len(words) < MIN_TEXT_WORDS or not _WORD.search(summary) or not _WORD.search(text):
    return None
  return text, summary


def dedupe_key(text: str) -> str:
  """What two inputs must differ in to both be kept: their case-folded words, without
  gcloud's release-track markers ("(ALPHA)", "gcloud beta ..."), which repeat a page."""
  return ' '.join(_WORD.findall(_RELEASE_TRACK.sub(' ', text).casefold()))


def build_splits(pairs: Iterable[Tuple[str, str]], n_test: int = 500,
                 n_validation: int = 500) -> Dict[str, List[Tuple[str, str]]]:
  """Dedupes and splits (text, summary) pairs.

  A pair is dropped when its `dedupe_key` or its case-folded summary was seen before (a
  command under gcloud's alpha, beta and GA tracks, or two pages with one summary, would
  otherwise sit in train and test at once). The rest are ordered by `corpus.split_key`
  of the text: the first `n_test` go to test, the next `n_validation` to validation.

  Returns:
    `{"train": [...], "validation": [...], "test": [...]}`, each in hash order.
  """
  seen, kept = set(), []
  for text, summary in pairs:
    keys = (dedupe_key(text), 'summary:' + dedupe_key(summary))
    if any(k in seen for k in keys):
      continue
    seen.update(keys)
    kept.append((text, summary))
  return corpus.hash_split(kept, n_test, n_validation)


def make_example(text: str) -> str:
  """The model input for a page's text: T5's summarisation prefix + text."""
  return TASK_PREFIX + text


def load_pairs(split: str, root: str | os.PathLike = 'data/manpages'
               ) -> List[Tuple[str, str]]:
  """Loads one split written by `scripts/build_manpage_corpus.py`: (text, summary) pairs."""
  if split not in SPLITS:
    raise ValueError(f'split must be one of {SPLITS}, got {split!r}')
  path = os.path.join(root, f'{split}.jsonl')
  if not os.path.exists(path):
    raise FileNotFoundError(f'{path} not found; run scripts/build_manpage_corpus.py first')
  with open(path, encoding='utf-8') as f:
    return [(row['text'], row['summary']) for row in map(json.loads, f) if row]


def copy_rate(texts: Sequence[str], summaries: Sequence[str]) -> float:
  """Share of summary words (case-folded) that occur in their text: how much a summary
  copies."""
  found = total = 0
  for text, summary in zip(texts, summaries):
    words = set(_WORD.findall(text.casefold()))
    summary_words = _WORD.findall(summary.casefold())
    found += sum(w in words for w in summary_words)
    total += len(summary_words)
  return found / max(total, 1)
