"""Adds the tasks of one `python -m specjax.bench --paper-table` run to a table measured
before, so that a new task does not re-time the others: the run's tasks (and their cells)
replace those of the same name, each keeping its run's date, and the markdown and plot
are rewritten from the merged JSON.

    python -m specjax.bench --paper-table --paper-tasks manlm --num-examples 32 \
        --json /tmp/manlm.json
    python scripts/paper_table_merge.py /tmp/manlm.json --json docs/paper_table.json \
        --markdown docs/paper_table.md --plot docs/paper_table.png

The runs must share the table's settings (gammas, temperatures, batch size, decode length,
rounds); a run that differs is refused.
"""
from __future__ import annotations

import argparse
import json
import sys

from specjax.bench import paper_report

SHARED = ('gammas', 'temperatures', 'batch_size', 'max_decode_len', 'rounds')


def merge(table: dict, run: dict) -> dict:
  """The table with the run's tasks in place of (or after) its own, each dated."""
  differ = [k for k in SHARED if table[k] != run[k]]
  if differ:
    raise ValueError(f'the run differs from the table in {", ".join(differ)}; rerun it with '
                     'the table\'s settings')
  names = {t['task'] for t in run['tasks']}
  for t in table['tasks']:
    t.setdefault('date', table['machine']['date'])
  tasks = [t for t in table['tasks'] if t['task'] not in names]
  tasks += [dict(t, date=run['machine']['date']) for t in run['tasks']]
  cells = [c for c in table['cells'] if c['task'] not in names] + run['cells']
  return dict(table, tasks=tasks, cells=cells)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('run', help='the new run\'s --json')
  p.add_argument('--json', required=True, help='the table, rewritten in place')
  p.add_argument('--markdown', help='rewrite this markdown from the merged table')
  p.add_argument('--plot', help='rewrite this plot from the merged table')
  args = p.parse_args(argv)
  with open(args.json, encoding='utf-8') as f:
    table = json.load(f)
  with open(args.run, encoding='utf-8') as f:
    run = json.load(f)
  try:
    merged = merge(table, run)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 1
  with open(args.json, 'w', encoding='utf-8') as f:
    json.dump(merged, f, indent=1)
  if args.plot:
    paper_report.plot(merged, args.plot)
  if args.markdown:
    paper_report.write_markdown(merged, args.markdown, args.plot)
  return 0


if __name__ == '__main__':
  sys.exit(main())
