"""Unchanged T5X commands with the speculative gin include: `python -m t5x.infer` writes the
predictions of T5X's own greedy temperature_sample on the same target, with speculative
aux values; `python -m t5x.eval` reports the same BLEU for both."""
import glob
import json
import subprocess
import sys

import jax
import numpy as np

import real_t5x

real_t5x.require_t5x()

TARGET_GIN = 'tests/t5x/gin/tiny_target.gin'
SPECULATIVE_GIN = 'specjax/t5x/configs/speculative.gin'
GREEDY_GIN = 'tests/t5x/gin/greedy.gin'


def _checkpoint(trained):
  return trained['target'] / 'checkpoint_150'


def _only(pattern):
  paths = glob.glob(pattern)
  assert len(paths) == 1, (pattern, paths)
  return paths[0]


def test_infer_predictions_equal_t5x_greedy(trained, tmp_path):
  greedy, spec = tmp_path / 'greedy', tmp_path / 'speculative'
  common = dict(CHECKPOINT_PATH=real_t5x.quoted(_checkpoint(trained)))
  real_t5x.run_t5x_together('infer', [
      ([TARGET_GIN, GREEDY_GIN, 'tests/t5x/gin/infer.gin'],
       dict(INFER_OUTPUT_DIR=real_t5x.quoted(greedy), **common)),
      # The draft as its whole model dir (load_model takes the latest step).
      ([TARGET_GIN, GREEDY_GIN, SPECULATIVE_GIN, 'tests/t5x/gin/infer.gin'],
       dict(INFER_OUTPUT_DIR=real_t5x.quoted(spec),
            DRAFT_CHECKPOINT_PATH=real_t5x.quoted(trained['draft']),
            **{'infer.mode': '"predict_with_aux"'}, **common))])
  ref = real_t5x.read_jsonl(_only(f'{greedy}/*-predict.jsonl-00000-of-00001'))
  got = real_t5x.read_jsonl(_only(f'{spec}/*-predict_with_aux.jsonl-00000-of-00001'))
  assert len(ref) == len(got) == 500
  assert [r['inputs'] for r in got] == [r['inputs'] for r in ref]
  assert [r['prediction'] for r in got] == [r['prediction'] for r in ref]
  assert len({r['prediction'] for r in ref}) > 50  # the target says different things
  aux = [r['aux'] for r in got]
  assert all(0.0 <= a['alpha'] <= 1.0 and a['target_calls'] >= 1 and a['scores'] < 0
             for a in aux)
  assert all(1.0 <= a['tokens_per_call'] <= 5.0 for a in aux)  # GAMMA 4: at most 5
  assert sum(a['alpha'] for a in aux) / len(aux) > 0.1  # the trained draft is being used
  # The run's statistics beside the outputs, summed on the host batch by batch: the same
  # target calls as the per-example aux values, written independently of them.
  stats = json.loads((spec / 'speculative_stats.json').read_text())
  assert stats['total']['examples'] == 500 and len(stats['batches']) == 10
  assert stats['total']['target_calls'] == sum(a['target_calls'] for a in aux)
  assert 1.0 < stats['total']['tokens_per_call'] <= 5.0
  assert 0.1 < stats['total']['alpha'] <= 1.0


def test_infer_runs_from_outside_the_repository_with_the_installed_package(trained,
                                                                          tmp_path):
  """As a user runs it: the package installed (not the source tree), another directory,
  the include named by its package path."""
  site = tmp_path / 'site'
  subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-deps', '--target',
                  str(site), str(real_t5x.REPO)], check=True, capture_output=True,
                 timeout=600)
  work = tmp_path / 'elsewhere'
  work.mkdir()
  out = tmp_path / 'infer'
  args = [f'--gin_file={real_t5x.GIN / "tiny_target.gin"}',
          f'--gin_file={real_t5x.GIN / "greedy.gin"}', f'--gin_file={SPECULATIVE_GIN}',
          f'--gin_file={real_t5x.GIN / "infer.gin"}',
          f'--gin.CHECKPOINT_PATH={real_t5x.quoted(_checkpoint(trained))}',
          f'--gin.DRAFT_CHECKPOINT_PATH={real_t5x.quoted(trained["draft"])}',
          f'--gin.INFER_OUTPUT_DIR={real_t5x.quoted(out)}']
  env = dict(real_t5x.env(), PYTHONPATH=str(site))
  proc = subprocess.run([sys.executable, '-m', 't5x.infer', *args], cwd=work, env=env,
                        capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-6000:]
  assert 'speculative decoding, batch 10: 50 examples' in proc.stderr
  got = real_t5x.read_jsonl(_only(f'{out}/*-predict.jsonl-00000-of-00001'))
  assert len(got) == 500 and all(r['prediction'] for r in got[:10])
  assert f'{site}/specjax/t5x/configs/speculative.gin' in proc.stderr  # the installed copy


def test_eval_reports_the_same_bleu(trained, tmp_path):
  runs = {'greedy': ([TARGET_GIN, GREEDY_GIN], {}),
          'speculative': ([TARGET_GIN, GREEDY_GIN, SPECULATIVE_GIN], {
              'DRAFT_CHECKPOINT_PATH': real_t5x.quoted(trained['draft'] / 'checkpoint_150')})}
  real_t5x.run_t5x_together('eval', [
      (gins + ['tests/t5x/gin/eval.gin'],
       dict(CHECKPOINT_PATH=real_t5x.quoted(_checkpoint(trained)),
            EVAL_OUTPUT_DIR=real_t5x.quoted(tmp_path / name), **extra))
      for name, (gins, extra) in runs.items()])
  results = {}
  for name in runs:
    out = tmp_path / name
    metrics = real_t5x.read_jsonl(_only(f'{out}/inference_eval/*-metrics.jsonl'))
    outputs = real_t5x.read_jsonl(_only(f'{out}/inference_eval/specjax_demo_ende-*[0-9].jsonl'))
    results[name] = (metrics[-1]['bleu'], [o['prediction'] for o in outputs])
  stats = json.loads((tmp_path / 'speculative' / 'speculative_stats.json').read_text())
  assert stats['total']['examples'] == 500
  assert results['speculative'][0] == results['greedy'][0]
  assert results['speculative'][1] == results['greedy'][1]
  assert len(results['greedy'][1]) == 500


def test_train_fine_tunes_an_exported_checkpoint(trained, tmp_path):
  """An exported checkpoint holds params only: t5x.train starts from them with the
  bindings that README and specjax.t5x.export give, the optimizer state started afresh."""
  import specjax  # pylint: disable=import-outside-toplevel
  exported = tmp_path / 'exported'
  real_t5x.run_module('specjax.t5x.export', '--checkpoint', str(_checkpoint(trained)),
                      '--output', str(exported))
  tuned = tmp_path / 'tuned'
  real_t5x.run_t5x('train', [TARGET_GIN, 'tests/t5x/gin/train.gin'], **{
      'MODEL_DIR': real_t5x.quoted(tuned), 'TRAIN_STEPS': '2',
      'utils.SaveCheckpointConfig.period': '2',
      'utils.RestoreCheckpointConfig.path': real_t5x.quoted(exported / 'checkpoint_0'),
      'utils.RestoreCheckpointConfig.mode': '"specific"',
      'utils.RestoreCheckpointConfig.assignment_map': "((r'state/param_states.*', None),)",
      'utils.RestoreCheckpointConfig.fallback_to_scratch': 'True'})
  leaves = lambda path: jax.tree.leaves(specjax.load_model(None, str(path))[1])
  start, after, source = (leaves(p) for p in (tuned / 'checkpoint_0', tuned / 'checkpoint_2',
                                              _checkpoint(trained)))
  assert all(np.array_equal(a, b) for a, b in zip(start, source))  # began at the export
  assert not all(np.array_equal(a, b) for a, b in zip(after, source))  # and trained on
