"""docs/reliability.md says what each bad input really gets (tests/reliability_cases.py)."""
import pathlib
import re

import reliability_cases

TESTS = pathlib.Path(__file__).resolve().parent


def test_every_case_gets_what_the_doc_says():
  doc = reliability_cases.DOC.read_text()
  assert doc == reliability_cases.render(), (
      'docs/reliability.md is stale: run python tests/reliability_cases.py')


def test_every_exactness_claim_names_tests_that_exist():
  doc = reliability_cases.DOC.read_text()
  table = doc.split('## What exactness is proven by which test')[1]
  named = re.findall(r'`(tests/[\w/]+\.py)(?:::(\w+))?`', table)
  assert len(named) >= 12
  for path, name in named:
    source = (TESTS.parent / path).read_text()
    assert not name or f'def {name}(' in source, (path, name)
