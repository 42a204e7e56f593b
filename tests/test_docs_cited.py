"""Every .md file the code, tests, scripts and configs name is in the repository.

A citation is a name with a folder (`docs/algorithm.md`, `assets/demo/MODEL_CARD.md`) or a
capitalised one (`README.md`, `MODEL_CARD.md`); a bare lower-case name is a file a program
writes where it is told (`tmp_path / 'b.md'`), and a name after a shell variable
(`$RESULTS_DIR/x.md`) or under the generators' default folder (`specjax_reports/`) is an
output path.
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCANNED = ('specjax', 'tests', 'scripts', 'configs', 'tpu', 'docs')
SUFFIXES = {'.py', '.sh', '.gin', '.md', '.txt', '.toml', '.cfg', '.yaml', '.yml'}
# Notes that are not part of the repository: nothing may name them.
OUTSIDE = tuple(n + '.md' for n in ('PAPER', 'STYLE', 'DESIGN')) + ('T5X' + '_NOTES',)
OUTPUTS = 'specjax_reports/'  # where the plans write unless told (specjax.reports)
NAME = re.compile(r'(?<![\w./$-])([\w.-]+/)*\w[\w.-]*\.md\b')


def _scanned_files():
  yield ROOT / 'README.md'
  for top in SCANNED:
    for path in sorted((ROOT / top).rglob('*')):
      if path.is_file() and path.suffix in SUFFIXES and '__pycache__' not in path.parts:
        yield path


def _repository_md():
  """Paths (relative, posix) of the .md files in the working tree."""
  return {p.relative_to(ROOT).as_posix() for p in ROOT.rglob('*.md')
          if not any(part.startswith('.') or part.endswith('.egg-info')
                     for part in p.relative_to(ROOT).parts)}


def cited_names(text: str) -> list:
  """The .md names of `text` that are citations (see the module docstring)."""
  names = []
  for match in NAME.finditer(text):
    name = match.group(0)
    if name.startswith(OUTPUTS):
      continue
    if '/' in name or name[0].isupper():
      names.append(name)
  return names


def exists(name: str, files: set) -> bool:
  """A name with a folder matches a file path ending in it; a bare name, a file's name."""
  if '/' in name:
    return any(f == name or f.endswith('/' + name) for f in files)
  return any(f.rpartition('/')[2] == name for f in files)


def test_cited_md_files_exist():
  files = _repository_md()
  missing = []
  for path in _scanned_files():
    for name in cited_names(path.read_text(errors='replace')):
      if not exists(name, files):
        missing.append(f'{path.relative_to(ROOT)}: {name}')
  assert not missing


def test_no_file_names_notes_outside_the_repository():
  named = [f'{path.relative_to(ROOT)}: {n}' for path in _scanned_files()
           for n in OUTSIDE if n in path.read_text(errors='replace')]
  assert not named


def test_the_checks_catch_a_missing_and_an_outside_name():
  files = {'docs/algorithm.md', 'README.md', 'specjax/assets/demo/MODEL_CARD.md'}
  gone = 'docs/' + 'gone.md'  # spelt in two parts: this file must pass its own check
  text = (f"see docs/algorithm.md and {gone}, assets/demo/MODEL_CARD.md, README.md; "
          "writes tmp_path / 'b.md' and $OUT/x.md; " + OUTSIDE[0])
  names = cited_names(text)
  assert names == ['docs/algorithm.md', gone, 'assets/demo/MODEL_CARD.md', 'README.md',
                   OUTSIDE[0]]
  assert [n for n in names if not exists(n, files)] == [gone, OUTSIDE[0]]
