"""python -m specjax.decode with the drafts that cost nothing (--draft copy, bigram,
copy+NAME) and the verification rules (--verification, --draft-threshold, --lenience)."""
import json

import pytest

from specjax import decode
from specjax.job import fingerprint

SENTENCES = ['Unable to open the file', 'Save changes before closing?', 'Print the page',
             'Open the file', 'Remove the file "notes.txt"']


@pytest.fixture(scope='module')
def src(tmp_path_factory):
  path = tmp_path_factory.mktemp('rules') / 'in.txt'
  path.write_text('\n'.join(SENTENCES) + '\n')
  return str(path)


def _summary(capsys, *args):
  assert decode.main(list(args) + ['--json', '--quiet', '--max-decode-len', '16']) == 0, (
      capsys.readouterr().err)
  out = capsys.readouterr().out
  return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize('draft, rule', [
    ('copy', []),
    ('bigram', ['--verification', 'block']),
    ('copy+demo_draft', ['--draft-threshold', '0.5']),
    ('demo_draft', ['--verification', 'block', '--draft-threshold', '0.3']),
    ('demo_draft', ['--draft-threshold', '0.3', '--threshold-rule', 'cumulative']),
])
def test_every_draft_and_rule_is_the_target_greedy_output(src, capsys, draft, rule):
  summary = _summary(capsys, '--input', src, '--draft', draft, '--gamma', '3',
                     '--batch-size', '2', *rule)
  assert summary['identical_to_target'] is True
  assert summary['draft'] == draft and summary['num_examples'] == len(SENTENCES)
  assert summary['verification'] == (rule[1] if rule[:1] == ['--verification'] else 'token')
  assert summary['drafted_tokens'] > 0 and 0.0 <= summary['alpha'] <= 1.0


def test_lenience_is_sampled_only_and_says_it_is_lossy(src, capsys):
  assert decode.main(['--input', src, '--lenience', '0.5', '--quiet']) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: lenience') and '\n' not in err and 'temperature' in err
  assert decode.main(['--input', src, '--lenience', '0.5', '--temperature', '1',
                      '--gamma', '3', '--max-decode-len', '16']) == 0
  out = capsys.readouterr().out
  assert 'lenience 0.5: NOT exact' in out and 'token verification' in out


@pytest.mark.parametrize('args, named', [
    (['--verification', 'block', '--draft-threshold', '1.5'], 'threshold must be in [0, 1]'),
    (['--draft', 'bigram', '--draft-checkpoint', '/nonexistent/table.npz'], 'table.npz'),
])
def test_bad_rules_and_tables_are_one_line_errors(src, capsys, args, named):
  assert decode.main(['--input', src, '--quiet'] + args) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: ') and '\n' not in err and named in err


def test_a_resumed_sampled_run_refuses_another_rule():
  """The rule changes sampled outputs (not greedy ones): the fingerprint holds it."""
  class Vocab:
    def serialized(self):
      return b'v'
  def fp(**kw):
    job = decode.parse_config(kw.pop('argv'))
    return fingerprint.run_fingerprint(job, None, {}, None, {}, 'sha', '', Vocab())
  sampled = ['--temperature', '1']
  assert fp(argv=sampled) != fp(argv=sampled + ['--verification', 'block'])
  assert fp(argv=sampled) != fp(argv=sampled + ['--lenience', '0.5'])
  threshold = sampled + ['--draft-threshold', '0.5']
  assert fp(argv=threshold) != fp(argv=threshold + ['--threshold-rule', 'cumulative'])
  assert fp(argv=[]) == fp(argv=['--verification', 'block', '--draft-threshold', '0.5'])


@pytest.mark.parametrize('draft', ['manpages_draft', 'bigram'])
def test_the_bundled_summarisation_pair_decodes_its_samples(tmp_path, capsys, draft):
  """manpages_* bring their vocabulary, 'summarize: ' prefix, samples and bigram table."""
  out = tmp_path / 'out.jsonl'
  summary = _summary(capsys, '--target', 'manpages_target', '--draft', draft, '--gamma', '3',
                     '--output', str(out))
  assert summary['identical_to_target'] is True and summary['num_examples'] == 8
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert all(r['inputs'].startswith('summarize: ') and r['prediction'] for r in records)
