"""`scripts/tpu_tree_speed.py --compaction` on this CPU (the quick grid: t5_tiny, a tree of
8 nodes): the iteration compiled with the earlier move, the current one and none, and
each move alone, merged into a report's rows as their 'tree_compaction'."""
import json

from scripts_for_tests import load_script


def test_compaction_rows_are_merged_into_a_reports_rows(tmp_path, capsys):
  script = load_script('tpu_tree_speed')
  rows_path = tmp_path / 'tpu_speed.json'
  rows_path.write_text(json.dumps({'programs': [], 'run': {'quick': True}}))
  assert script.main(['--cpu', '--compaction', str(rows_path)]) == 0
  data = json.loads(rows_path.read_text())
  assert data['programs'] == [] and data['run'] == {'quick': True}  # kept
  rows = data['tree_compaction']
  got = {(r['move'], r['program']) for r in rows}
  assert got == {(m, p) for m in ('before', 'after') for p in (
      'tree_iteration', 'move target cache', 'move draft cache')} | {('none', 'tree_iteration')}
  by = {(r['move'], r['program']): r['bytes'] for r in rows}
  assert by[('none', 'tree_iteration')] < by[('after', 'tree_iteration')]
  table = capsys.readouterr().out
  assert '| 1 | N=8 | after |' in table and '| 1 | N=8 | before |' in table


def test_the_earlier_move_and_the_current_one_move_alike():
  """The script's copy of the earlier move (compiled as 'before') moves what
  `tree.compact` moves: the comparison measures the same work."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from specjax.core import tree  # pylint: disable=import-outside-toplevel
  script = load_script('tpu_tree_speed')
  cache = {'k': jnp.arange(2 * 3 * 12, dtype=jnp.float32).reshape(2, 3, 12)}
  axes = {'k': ('batch', 'kv', 'length')}
  args = (jnp.array([2, 5]), jnp.array([[1, 4], [0, -1]]), jnp.array([2, 1]), 6)
  before = script.window_compact(cache, axes, *args)['k']
  after = tree.compact(cache, axes, *args)['k']
  np.testing.assert_array_equal(np.asarray(before), np.asarray(after))
  assert not np.array_equal(np.asarray(after), np.asarray(cache['k']))
