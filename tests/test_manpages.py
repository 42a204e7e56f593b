"""The man-page summarisation task's data: the roff parser on real pages (tests/data/manpages,
copied from Debian's /usr/share/man/man1), the pairs they make, the deduplicating split,
and the test split shipped in specjax/assets/manpages."""
import gzip
import json
import os
import random

import pytest

from specjax.demo import corpus, manpages

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = os.path.join(ROOT, 'tests', 'data', 'manpages')
TEST_SPLIT = os.path.join(ROOT, 'specjax', 'assets', 'manpages', 'test.jsonl')

# page -> (names, NAME description, DESCRIPTION's first paragraph or its start), read off
# the roff sources by hand.
EXPECTED = {
    'arch': ('arch', 'print machine hardware name (same as uname -m)',
             'Print machine architecture.'),
    'xzdiff': ('xzcmp, xzdiff, lzcmp, lzdiff', 'compare compressed files',
               'xzcmp and xzdiff invoke cmp(1) or diff(1) on files compressed with xz(1), '
               'lzma(1), gzip(1), bzip2(1), lzop(1), or zstd(1). All options specified are '
               'passed directly to cmp(1) or diff(1). If only one file is specified, then '
               'the files compared are file1 (which must have a suffix'),
    'zgrep': ('zgrep', 'search possibly compressed files for a regular expression',
              'The zgrep command invokes grep on compressed or gzipped files. All options '
              'specified are passed directly to grep. If no file is specified, then the '
              'standard input is decompressed if necessary and fed to grep.'),
    'bashbug': ('bashbug', 'report a bug in bash',
                'bashbug is a utility for reporting bugs in Bash to the maintainers.'),
}


def _path(name: str) -> str:
  return os.path.join(PAGES, f'{name}.1.gz')


def _source(name: str) -> str:
  with gzip.open(_path(name), 'rt', encoding='utf-8') as f:
    return f.read()


@pytest.mark.parametrize('name', sorted(EXPECTED))
def test_real_page_name_and_description(name):
  names, summary, start = EXPECTED[name]
  page = manpages.read_page(_path(name))
  assert page is not None
  assert (page.names, page.summary) == (names, summary)
  assert page.description[0].startswith(start)
  assert page == manpages.parse_page(_source(name))  # the file reader adds nothing
  for text in (page.names, page.summary) + page.description:
    assert '\\' not in text and text == ' '.join(text.split())


def test_escapes_and_fonts_resolve_to_plain_text():
  # arch: `arch \- print ...` and tags `\fB\-\-help\fR` after .TP
  assert 'arch \\- print machine' in _source('arch')
  assert '\\fB\\-\\-help\\fR' in _source('arch')
  assert manpages.read_page(_path('arch')).description[1:] == (
      '--help display this help and exit', '--version output version information and exit')
  # bashbug: `\fIbug\-report\-email\-addresses\fR\.` inside running text
  assert '\\fIbug\\-report\\-email\\-addresses\\fR\\.' in _source('bashbug')
  assert manpages.read_page(_path('bashbug')).description[1].endswith(
      'changed by giving a comma separated list of bug-report-email-addresses.')
  # xzdiff: `.BR cmp (1)` joins its arguments, `.B xzcmp` / `.I file1` keep theirs
  assert '.BR cmp (1)' in _source('xzdiff') and '.I file1' in _source('xzdiff')
  assert 'the files compared are file1 (which' in manpages.read_page(
      _path('xzdiff')).description[0]
  assert manpages.roff_text('\\fB\\-n\\fR \\fI\\,NUM\\/\\fP \\(em \\(aqx\\(aq \\e') == \
      "-n NUM - 'x' \\"
  assert manpages.roff_text('text \\" a comment') == 'text '


def test_pages_without_a_name_line_give_none():
  assert _source('init').startswith('.so ')  # a real redirect page: no NAME of its own
  assert manpages.read_page(_path('init')) is None
  lines = _source('arch').split('\n')
  start = lines.index('.SH NAME')
  without_name = '\n'.join(lines[:start] + lines[start + 2:])
  assert '.SH NAME' not in without_name and '.SH DESCRIPTION' in without_name
  assert manpages.parse_page(without_name) is None
  no_dash = _source('arch').replace('arch \\- print machine hardware name (same as uname -m)',
                                    'arch')
  assert no_dash != _source('arch') and manpages.parse_page(no_dash) is None
  no_description = _source('arch').replace('.SH DESCRIPTION', '.SH DETAILS')
  assert manpages.parse_page(no_description) is None
  assert manpages.read_page(os.path.join(PAGES, 'missing.1.gz')) is None


@pytest.mark.parametrize('name', sorted(EXPECTED))
def test_page_pair_form(name):
  page = manpages.read_page(_path(name))
  pair = manpages.page_pair(page)
  assert isinstance(pair, tuple) and len(pair) == 2
  text, summary = pair
  assert summary == EXPECTED[name][1]
  whole = ' '.join(page.description)
  assert whole.startswith(text)
  words = text.split()
  assert manpages.MIN_TEXT_WORDS <= len(words) <= manpages.MAX_TEXT_WORDS
  if len(whole.split()) > manpages.MAX_TEXT_WORDS:
    assert text.endswith('.')  # cut at the last sentence end within the limit
  assert manpages.make_example(text) == 'summarize: ' + text


def test_page_pair_cut_summary_period_and_refusals():
  text, summary = manpages.page_pair(manpages.read_page(_path('xzdiff')))
  assert text == ('xzcmp and xzdiff invoke cmp(1) or diff(1) on files compressed with xz(1), '
                  'lzma(1), gzip(1), bzip2(1), lzop(1), or zstd(1). All options specified '
                  'are passed directly to cmp(1) or diff(1).')
  assert summary == 'compare compressed files'
  page = manpages.ManPage('x', 'does one thing.', ('one two three four five six seven.',))
  assert manpages.page_pair(page) == ('one two three four five six seven.', 'does one thing')
  assert manpages.page_pair(manpages.ManPage('x', 'does things', ('too short',))) is None
  assert manpages.page_pair(manpages.ManPage('x', 'one', page.description)) is None
  long_summary = ' '.join(['word'] * (manpages.MAX_SUMMARY_WORDS + 1))
  assert manpages.page_pair(manpages.ManPage('x', long_summary, page.description)) is None


# --- the split ----------------------------------------------------------------------


def _unique_pairs():
  pairs = [manpages.page_pair(manpages.read_page(_path(n))) for n in sorted(EXPECTED)]
  pairs += [(f'gcloud compute thing-{i} creates thing {i} in a project.', f'create thing {i}')
            for i in range(30)]
  return pairs


def _duplicates(pairs):
  """Pairs that repeat one of `pairs`: exactly, in case and punctuation, under a gcloud
  release track, or by summary alone."""
  (z_text, z_summary), = [p for p in pairs if p[1].startswith('search possibly')]
  return [
      pairs[0],
      (z_text.upper().replace('.', ' ;'), 'another summary of zgrep'),
      ('(ALPHA) gcloud alpha compute thing-3 creates thing 3 in a project.',
       'create thing 3 (alpha)'),
      ('gcloud beta compute thing-4 creates thing 4 in a project.', 'other words for four'),
      ('An unrelated text that only shares its summary with zgrep.', z_summary.upper() + '.'),
  ]


def test_build_splits_dedupes_and_keeps_splits_apart():
  unique = _unique_pairs()
  splits = manpages.build_splits(unique + _duplicates(unique), n_test=8, n_validation=6)
  assert list(splits) == ['train', 'validation', 'test']
  assert [len(splits[s]) for s in ('test', 'validation', 'train')] == [8, 6, len(unique) - 14]
  kept = [p for rows in splits.values() for p in rows]
  assert sorted(kept) == sorted(unique)  # each duplicate dropped, its first pair kept once
  keys = {s: {manpages.dedupe_key(t) for t, _ in rows} for s, rows in splits.items()}
  assert not keys['train'] & keys['validation'] and not keys['train'] & keys['test']
  assert not keys['validation'] & keys['test']
  for rows in splits.values():
    hashes = [corpus.split_key(t) for t, _ in rows]
    assert hashes == sorted(hashes)
  assert max(corpus.split_key(t) for t, _ in splits['test']) < min(
      corpus.split_key(t) for t, _ in splits['validation'] + splits['train'])


def test_dedupe_key_ignores_case_punctuation_and_release_tracks():
  key = manpages.dedupe_key
  assert key('Create a VM.') == key('create a vm') == key('(BETA) create, a VM!')
  assert key('gcloud alpha compute ssh') == key('gcloud compute ssh')
  assert key('create a VM') != key('create a disk')


def test_build_splits_is_deterministic_and_order_free():
  unique = _unique_pairs()
  first = manpages.build_splits(unique, n_test=8, n_validation=6)
  assert manpages.build_splits(list(unique), n_test=8, n_validation=6) == first
  shuffled = list(unique)
  random.Random(0).shuffle(shuffled)
  assert manpages.build_splits(shuffled, n_test=8, n_validation=6) == first


# --- the shipped test split ---------------------------------------------------------


@pytest.fixture(scope='module')
def shipped():
  with open(TEST_SPLIT, encoding='utf-8') as f:
    return [json.loads(line) for line in f if line.strip()]


def test_shipped_test_split_form(shipped):
  assert len(shipped) == 500
  assert all(set(r) == {'inputs', 'targets'} for r in shipped)
  inputs = [r['inputs'] for r in shipped]
  assert len(set(inputs)) == 500
  assert all(i.startswith('summarize: ') for i in inputs)
  assert all(r['targets'].strip() and r['targets'] == r['targets'].strip() for r in shipped)
  texts = [i[len('summarize: '):] for i in inputs]
  assert all(len(t.split()) <= manpages.MAX_TEXT_WORDS for t in texts)
  assert len({manpages.dedupe_key(t) for t in texts}) == 500  # deduplicated
  hashes = [corpus.split_key(t) for t in texts]
  assert hashes == sorted(hashes)  # the first 500 of the hash order, in that order


def test_shipped_summaries_copy_from_their_inputs(shipped):
  texts = [r['inputs'][len('summarize: '):] for r in shipped]
  summaries = [r['targets'] for r in shipped]
  own = manpages.copy_rate(texts, summaries)
  shuffled = list(summaries)
  random.Random(0).shuffle(shuffled)
  other = manpages.copy_rate(texts, shuffled)
  assert own > 0.6 and own > 3 * other
