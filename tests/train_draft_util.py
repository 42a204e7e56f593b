"""A few steps of python -m specjax.train_draft on the demo target's own decodes of the
first test lines (the lines the tests then decode), as the CLI tests of every kind run it."""
import json
import os

import specjax
from specjax import train_draft


def train_on_demo_lines(tmp_path, capsys, kind: str, steps: int, learning_rate: str,
                        save_every: int, num: int = 24, extra: tuple = ()):
  """(the input file, the command's arguments, its JSON summary) of a run that succeeded.

  Raises:
    AssertionError: the run failed (with its stderr).
  """
  src = tmp_path / 'train.txt'
  test = os.path.join(os.path.dirname(specjax.__file__), 'assets', 'demo', 'test.jsonl')
  with open(test, encoding='utf-8') as f:
    lines = [json.loads(line)['en'] for line in f][:num]
  src.write_text('\n'.join(lines) + '\n')
  args = ['--kind', kind, '--input', str(src), '--workdir', str(tmp_path / 'run'),
          '--steps', str(steps), '--batch-size', '8', '--learning-rate', learning_rate,
          '--warmup-steps', '2', '--save-every', str(save_every), '--max-decode-len', '16',
          '--quiet', '--json', *extra]
  assert train_draft.main(args) == 0, capsys.readouterr().err
  return src, args, json.loads(capsys.readouterr().out.strip().splitlines()[-1])
