"""docs/reliability.md says what each bad input really gets (tests/reliability_cases.py):
every case's outcome is checked against the one written out here, and so is the doc."""
import pathlib
import re

import pytest

import reliability_cases

TESTS = pathlib.Path(__file__).resolve().parent

# What each case of reliability_cases.CASES gets, written out: the doc must say the same.
EXPECTED = {
    'a text line that starts with "{"': (
        'exit 0, 2 records: `[{"inputs": "translate English to German: {0} not fou...", '
        '"input_line": 1}, {"inputs": "translate English to German: Open the fi...", '
        '"input_line": 2}]`'),
    'JSONL: every line a JSON object with "inputs"; other fields are carried through': (
        'exit 0, 2 records: `[{"inputs": "translate English to German: Open the fi...", "id": '
        '7, "input_line": 1}, {"inputs": "translate English to German: Print the p...", "id": '
        '8, "input_line": 2}]`'),
    'a JSONL file (its first line a JSON object) with a line that is not': (
        'exit 2: `error: in.txt:2: not a JSON object with a string "inputs" field; fix the '
        'line or pass --input-format text`'),
    'a JSONL line without "inputs"': (
        'exit 2: `error: in.txt:2: not a JSON object with a string "inputs" field; fix the '
        'line or pass --input-format text`'),
    'a JSONL field the output writes itself ("prediction")': (
        'exit 2: `error: in.txt:1: field "prediction" is one the output writes itself; '
        'rename it in the input`'),
    'a JSONL escape of a lone surrogate (\\ud800)': (
        'exit 2: `error: in.txt:1: a JSON escape encodes no character (a lone surrogate such '
        'as \\ud800); fix the line or pass --errors replace`'),
    'a JSONL file with a byte order mark': (
        'exit 0, 1 records: `[{"inputs": "translate English to German: Open the fi...", '
        '"input_line": 1}]`'),
    'lines ended by a lone CR': (
        'exit 0, 2 records: `[{"inputs": "translate English to German: Open the fi...", '
        '"input_line": 1}, {"inputs": "translate English to German: Print the p...", '
        '"input_line": 2}]`'),
    '--input-format jsonl with a line that is not JSON': (
        'exit 2: `error: in.txt:2: not a JSON object with a string "inputs" field; fix the line '
        'or pass --input-format text`'),
    'bytes that are not UTF-8': (
        'exit 2: `error: in.txt:2: byte 0xff at column 7 is not UTF-8; fix the file or pass '
        '--errors replace`'),
    'bytes that are not UTF-8, --errors replace': (
        'exit 0, 2 records: `[{"inputs": "translate English to German: Open the fi...", '
        '"input_line": 1}, {"inputs": "translate English to German: Print � pag...", '
        '"input_line": 2}]`'),
    'empty and blank lines': (
        'exit 0, 2 records: `[{"inputs": "translate English to German: Open the fi...", '
        '"input_line": 2}, {"inputs": "translate English to German: Print the p...", '
        '"input_line": 5}]`'),
    'a 10,000-character line': (
        'exit 2: `error: input line 2 has 10006 tokens with EOS, more than --max-input-len 64; '
        'raise it or pass --truncate-inputs`'),
    'a 10,000-character line, --truncate-inputs': (
        'exit 0, 2 records: `[{"inputs": "translate English to German: Open the fi...", '
        '"input_line": 1}, {"inputs": "translate English to German: aaaaaaaaaaa...", '
        '"input_line": 2, "truncated": true}]`'),
    'an empty file': (
        'exit 2: `error: input in.txt has no examples; pass --input with one text per line`'),
    'a file that does not exist': (
        'exit 2: `error: input file /nonexistent/in.txt does not exist; pass --input FILE (or - '
        'for stdin)`'),
    'inputs on standard input (--input -)': (
        'exit 0, 2 records: `[{"inputs": "translate English to German: Open the fi...", '
        '"input_line": 1}, {"inputs": "translate English to German: Print the p...", '
        '"input_line": 2}]`'),
    'weights that make the logits NaN for one input (line 2)': (
        "exit 2: `error: input line 2: the model's logits were NaN or infinite in 6 of its "
        "calls, so its output would not be the model's; likely a float overflow (T5 1.1 in "
        'bfloat16 or float16: pass --dtype float32) or corrupt weights (check the checkpoint)`'),
    'an --output written by a run with another seed': (
        'exit 2: `error: out.jsonl was written by a run with another seed and gamma; pass '
        'another --output, or delete it to start over`'),
    'an --output that another program wrote': (
        'exit 2: `error: notes.jsonl exists but has no notes.jsonl.run.json, so it cannot be '
        'resumed; pass another --output or delete the file`'),
    '--gamma 0': (
        'exit 2: `error: gamma must be an integer >= 1 (draft tokens per target call), got 0; '
        'or --gamma auto, which may pick 0 (the target alone)`'),
    '--top-p 1.5 with sampling': (
        'exit 2: `error: top_p must be in (0, 1] (1 keeps all), got 1.5`'),
    '--max-decode-len 0': (
        'exit 2: `error: max_decode_len must be an integer >= 1, got 0`'),
    '--gamma 100000': (
        'exit 2: `error: --gamma 100000 is more than --max-decode-len 6: no output holds that '
        'many draft tokens; pass --gamma at most --max-decode-len`'),
    '--seed 4294967296 (2**32)': (
        'exit 2: `error: --seed must be in [0, 2**32) (a PRNG key holds 32 bits of it), got '
        '4294967296`'),
    '--temperature inf': (
        'exit 2: `error: temperature must be finite and >= 0 (0 is greedy), got inf`'),
    '--output -: the records on standard output': (
        'exit 0, 2 records: `[{"inputs": "translate English to German: Open the fi...", '
        '"input_line": 1}, {"inputs": "translate English to German: Print the p...", '
        '"input_line": 2}]`'),
    '--output under a file, not a folder': (
        'exit 2: `error: cannot write --output /dev/null/records.jsonl: Not a directory; pass '
        'a writable path`'),
    '--vocab of another model (the man-page pair\'s, given to the demo pair)': (
        'exit 2: `error: demo_target was trained with its own vocabulary '
        '(specjax/assets/demo/spm.model), not specjax/assets/manpages/spm.model; drop '
        '--vocab`'),
    '--dtype foo': (
        'exit 2: `python -m specjax.decode: error: argument --dtype: invalid choice: \'foo\' '
        '(choose from \'float32\', \'bfloat16\', \'float16\')`'),
    'a checkpoint whose orbax _METADATA is cut short': (
        'exit 2: `error: cannot read the orbax checkpoint target (its _METADATA holds no tree '
        'of arrays): it is incomplete or damaged (a truncated copy?); copy it again, or save '
        'it again`'),
    'a checkpoint whose largest array file is cut short': (
        'exit 2: `error: cannot read the orbax checkpoint target (OUT_OF_RANGE): it is '
        'incomplete or damaged (a truncated copy?); copy it again, or save it again`'),
    '--gamma 1000000000 --max-decode-len 1000000000 (far more memory than there is)': (
        'exit 2: `error: --gamma 1000000000 with --max-decode-len 1000000000 at --batch-size '
        '2 needs about 157,356.3 GiB for the caches and logits, more than the N GiB of this '
        'host; lower --max-decode-len, --gamma or --batch-size`'),
    '--coordinator-address without --num-processes and --process-id': (
        'exit 2: `error: --coordinator-address, --num-processes and --process-id go together; '
        'pass all three (or none, on Cloud TPU)`'),
}


def test_every_case_has_its_expectation_in_order():
  assert [case.name for case in reliability_cases.CASES] == list(EXPECTED)


@pytest.mark.parametrize('case', reliability_cases.CASES, ids=lambda case: case.name)
def test_each_case_gets_what_is_written_here(case):
  assert reliability_cases.outcome(case) == EXPECTED[case.name]


def test_the_doc_says_what_each_case_gets():
  rows = ''.join(f'| {name} | {what} |\n' for name, what in EXPECTED.items())
  quick = ' '.join(reliability_cases.QUICK)
  assert reliability_cases.DOC.read_text() == (
      reliability_cases.HEADER.format(quick=quick) + rows + reliability_cases.ELSEWHERE +
      reliability_cases.EXACTNESS), (
          'docs/reliability.md is stale: run python tests/reliability_cases.py')


@pytest.mark.parametrize('section, at_least', [
    ('## Cases that take more than one decode', 15),
    ('## What exactness is proven by which test', 12)])
def test_every_claim_names_tests_that_exist(section, at_least):
  doc = reliability_cases.DOC.read_text()
  table = doc.split(section)[1].split('\n## ')[0]
  named = re.findall(r'`(tests/[\w/]+\.py)(?:::(\w+))?`', table)
  assert len(named) >= at_least
  for path, name in named:
    source = (TESTS.parent / path).read_text()
    assert not name or f'def {name}(' in source, (path, name)
