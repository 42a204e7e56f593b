"""The retrieval drafts end to end: `--draft rest` (the bundled datastores), `--draft
suffix` and their mixture `rest+suffix` are greedy-identical to the target alone on both bundled encoder-decoder tasks and
on the decoder-only pair, chains and tries, with refill; the command line refuses an
empty, damaged or foreign datastore and the flags that do not go with them in one line,
before any model loads."""
import json
import os
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import checkpoints, decode
from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS, MANLM_ASSETS, bundled
from specjax.core import tree
from specjax.datastore import store
from specjax.job import decode_job, drafts, pair as pair_lib
from specjax.job.inputs import tokenize
from test_tree_decode import _test_lines

SHAPES = [4, tree.DynamicTree(16, 6)]
SHAPE_IDS = ['chain4', 'trie16-6']


def _decode(target, tp, draft, dp, inputs, shape, **kw):
  gamma, shape = (shape, None) if isinstance(shape, int) else (None, shape)
  return specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=gamma, tree=shape,
                                    **kw)


@pytest.fixture(scope='module')
def manlm():
  target, tp = checkpoints.load_model('manlm_target', DEFAULT_CHECKPOINTS['manlm_target'])
  vocab = checkpoints.load_tokenizer(bundled('manlm_target').vocab, target)
  with open(os.path.join(MANLM_ASSETS, 'test.jsonl'), encoding='utf-8') as f:
    rows = [json.loads(line)['inputs'] for line in f][:12]
  return target, tp, vocab, jnp.asarray(tokenize(vocab, rows, 32, False)[0])


def _vocab(name):
  return checkpoints.load_vocab(bundled(name).vocab)


@pytest.mark.parametrize('shape', SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize('spec', ['rest', 'suffix', 'rest+suffix'])
@pytest.mark.parametrize('task', ['demo', 'manpages'])
def test_greedy_retrieval_is_the_targets_on_the_encoder_decoder_tasks(demo_pair, manpages_pair,
                                                                     task, spec, shape):
  target, tp, _, _ = demo_pair if task == 'demo' else manpages_pair
  name = f'{task}_target'
  draft, dp = drafts.resolve_draft(spec, target, name, None, vocab=_vocab(name))
  inputs = _test_lines(f'{task}_', 12)
  kw = dict(max_decode_len=24, slots=4)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  out = _decode(target, tp, draft, dp, inputs, shape, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0  # retrieved tokens were accepted


@pytest.mark.parametrize('shape', SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize('spec', ['rest', 'suffix', 'rest+suffix'])
def test_greedy_retrieval_is_the_targets_on_the_decoder_only_pair(manlm, spec, shape):
  target, tp, vocab, prompts = manlm
  draft, dp = drafts.resolve_draft(spec, target, 'manlm_target', None, vocab=vocab)
  kw = dict(max_decode_len=24, slots=4)
  ref = specjax.autoregressive_decode(target, tp, prompts, **kw)
  out = _decode(target, tp, draft, dp, prompts, shape, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0


def test_the_job_refuses_a_datastore_of_another_vocabulary_once_it_is_loaded(manpages_pair):
  """With --vocab or a checkpoint the vocabulary is only known once loaded: the job's."""
  target = manpages_pair[0]
  with pytest.raises(ValueError, match='another vocabulary'):
    drafts.resolve_draft('rest', target, 'manpages_target', None, vocab=_vocab('demo_target'))
  job = decode.parse_config(['--target', 'manpages_target', '--draft',
                             'rest:' + store.DEFAULT_DATASTORES['demo_target']])
  with pytest.raises(ValueError, match='another vocabulary'):
    pair_lib.load_pair(job.replace(vocab=bundled('manpages_target').vocab))


@pytest.fixture(scope='module')
def bad_stores(tmp_path_factory):
  """An empty directory, a datastore with its suffix array cut short, and the demo task's
  datastore given to the man-page target."""
  root = tmp_path_factory.mktemp('stores')
  empty = root / 'empty'
  empty.mkdir()
  damaged = root / 'damaged'
  shutil.copytree(store.DEFAULT_DATASTORES['manpages_target'], damaged)
  suffixes = np.load(damaged / 'suffixes.npy')
  np.save(damaged / 'suffixes.npy', suffixes[:10])
  return {'empty': str(empty), 'damaged': str(damaged),
          'foreign': store.DEFAULT_DATASTORES['demo_target']}


@pytest.mark.parametrize('args, named', [
    (['--draft', 'rest:{empty}'], 'not a datastore'),
    (['--draft', 'rest:{damaged}'], 'rebuild'),
    (['--draft', 'rest:{foreign}'], 'another vocabulary'),
    (['--draft', 'rest:/nonexistent/store'], 'python -m specjax.datastore build'),
    (['--draft', 'rest', '--tree', '2,1'], '--tree-nodes N --tree-depth D'),
    (['--draft', 'suffix', '--tree', '2,1'], '--tree-nodes N --tree-depth D'),
], ids=['empty', 'damaged', 'foreign', 'missing', 'rest-static-tree', 'suffix-static-tree'])
def test_bad_datastores_and_flags_are_one_line_errors_before_any_model_loads(
    bad_stores, capsys, monkeypatch, args, named):
  def no_load(*a, **k):
    raise AssertionError('a model was loaded')
  monkeypatch.setattr(decode_job, 'load_pair', no_load)
  monkeypatch.setattr(checkpoints, 'load_model', no_load)
  args = [a.format(**bad_stores) for a in args]
  assert decode.main(['--target', 'manpages_target', '--quiet'] + args) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: ') and '\n' not in err and named in err, err
