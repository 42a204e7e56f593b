"""Token trees on 8 simulated CPU devices: a static and a dynamic tree decode of the tiny T5
pair on ('data', 'model') meshes, with refill, equal the unsharded tree decode, greedy and
sampled (the same run key), token for token and counter for counter; and the command line's
--tree on a mesh writes the single-device output file."""
import json
import os

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8')

import jax  # pylint: disable=wrong-import-position
import numpy as np
import pytest

import specjax
from specjax import decode
from specjax.core.tree import DynamicTree
from specjax.models.t5 import T5
from specjax.models.t5_config import t5_tiny, t5_tiny_draft
from specjax.parallel import mesh as mesh_lib
from specjax.datastore import store
from specjax.proposers import rest
from specjax.proposers.bigram import BigramDraft, table_from_counts
from specjax.proposers.copy import CopyDraft
from specjax.proposers.eagle import EagleHead
from specjax.proposers.layer_skip import LayerSkip, exit_params
from specjax.proposers.lookahead import LookaheadDraft
from specjax.proposers.medusa import MedusaHeads
from specjax.proposers.suffix import SuffixDraft

MAX_LEN = 12
RNG = jax.random.PRNGKey(5)
TREES = {'static2-2-1': '2,2,1', 'dynamic6-3-2': DynamicTree(6, 3, 2)}


def _kw(name, temperature):
  return dict(tree=TREES[name], max_decode_len=MAX_LEN, rng=RNG,
              sampling=specjax.SamplingConfig(temperature=temperature))


@pytest.fixture(scope='module')
def references(pair_and_inputs):
  """Each tree's unsharded decode of the 16 inputs in one fixed batch, greedy and sampled."""
  target, tp, draft, dp, inputs = pair_and_inputs
  return {(name, t): specjax.speculative_decode(target, tp, draft, dp, inputs, **_kw(name, t))
          for name in TREES for t in (0.0, 1.0)}


@pytest.mark.parametrize('temperature', [0.0, 1.0], ids=['greedy', 'sampled'])
@pytest.mark.parametrize('name, shape', [('static2-2-1', (2, 4)), ('dynamic6-3-2', (4, 2))],
                         ids=['static2-2-1-mesh2x4', 'dynamic6-3-2-mesh4x2'])
def test_tree_decode_on_a_mesh_with_refill_equals_unsharded(pair_and_inputs, references,
                                                            name, temperature, shape):
  target, tp, draft, dp, inputs = pair_and_inputs
  ref = references[(name, temperature)]
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, slots=8,
                                   mesh=mesh_lib.make_mesh(shape=shape),
                                   **_kw(name, temperature))
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  for counter in ('target_calls', 'drafted', 'accepted', 'accepted_per_position'):
    np.testing.assert_array_equal(getattr(out.stats, counter), getattr(ref.stats, counter))
  np.testing.assert_allclose(out.stats.beta_sum, ref.stats.beta_sum, rtol=1e-5)
  assert out.tokens.sharding.is_fully_replicated
  assert len(set(np.asarray(ref.lengths).tolist())) > 1  # rows end at different steps
  assert int(ref.stats.accepted.sum()) > 0  # paths below the root were accepted
  if temperature == 0.0:  # greedy: the target's own output
    alone = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=MAX_LEN)
    np.testing.assert_array_equal(out.tokens, alone.tokens)


@pytest.mark.parametrize('kind', ['copy', 'bigram', 'layerskip', 'layerskip+exit', 'medusa',
                                  'eagle', 'rest', 'suffix', 'lookahead'])
def test_trees_of_the_copy_and_bigram_proposers_on_a_mesh_equal_unsharded(pair_and_inputs,
                                                                          kind):
  """Sampled with refill on a 2x4 mesh: the copy's static tree of earlier matches, the
  bigram table's dynamic tree, the target's first decoder layer's static tree (layer-skip:
  the target's params and encoding, sharded, are what it drafts with; with an exit of its
  own, sharded by the target's axes), Medusa heads' tree
  (the target's hidden states, sharded, are what they read), an EAGLE head's tree (its
  own cache and feature buffer, sharded like a cache), the tries of REST's retrievals (its
  datastore, replicated: the target's own outputs here) and of the suffix draft's earlier
  matches, and lookahead's window and n-grams (its state sharded by rows); greedy rows of
  the same run stay the target's."""
  target, tp, _, _, inputs = pair_and_inputs
  vocab = target.vocab_size
  if kind == 'copy':
    draft, dp, shape = CopyDraft(vocab, eos_id=target.eos_id), {}, '3,1,1'
  elif kind == 'layerskip':
    draft, dp, shape = LayerSkip(target, 1), {}, '2,2,1'
  elif kind == 'layerskip+exit':  # an exit of its own: the target's, perturbed
    draft, shape = LayerSkip(target, 1, trained_exit=True), '2,2,1'
    dp = jax.tree.map(lambda a: a * 1.5, exit_params(tp))
  elif kind == 'medusa':
    draft = MedusaHeads(target, 2)
    dp, shape = draft.init(jax.random.PRNGKey(2), scale=1.0), '2,1'
  elif kind == 'eagle':
    draft, dp, shape = EagleHead(target), EagleHead(target).from_target(tp), '2,2,1'
  elif kind == 'rest':
    alone = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=MAX_LEN)
    documents = [row[:n].tolist() for row, n in zip(np.asarray(alone.tokens),
                                                     np.asarray(alone.lengths))]
    built = store.build(documents, vocab, 'tiny', max_query=4)
    draft, dp = rest.from_arrays(built.tokens, built.suffixes, built.max_query, target)
    shape = DynamicTree(6, 3, 2)
  elif kind == 'lookahead':  # its window and n-gram pool: per-row state, sharded by rows
    draft, dp = LookaheadDraft(vocab, 3, 2, 2, eos_id=target.eos_id), {}
    shape = draft.tree_spec()
  elif kind == 'suffix':
    draft, dp = SuffixDraft(vocab, eos_id=target.eos_id, pad_id=target.pad_id), {}
    shape = DynamicTree(6, 3, 2)
  else:
    draft, dp = BigramDraft(vocab, 3), table_from_counts(
        np.random.default_rng(4).integers(0, 9, (vocab, vocab)), 3)
    shape = DynamicTree(6, 3, 2)
  rows = [specjax.SamplingConfig(temperature=t) for t in (0.0, 1.0) * 8]
  kw = dict(tree=shape, max_decode_len=MAX_LEN, rng=RNG, sampling=rows)
  ref = specjax.speculative_decode(target, tp, draft, dp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, slots=8,
                                   mesh=mesh_lib.make_mesh(shape=(2, 4)), **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  for counter in ('target_calls', 'drafted', 'accepted'):
    np.testing.assert_array_equal(getattr(out.stats, counter), getattr(ref.stats, counter))
  alone = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=MAX_LEN)
  np.testing.assert_array_equal(np.asarray(out.tokens)[::2], np.asarray(alone.tokens)[::2])


SENTENCES = ['Unable to open the file', 'Save changes before closing?', 'Print the page',
             'Close the window', 'Delete the selected messages', 'Undo']


def test_cli_tree_on_a_mesh_writes_the_single_device_output_file(tmp_path, capsys):
  """Sampled, batch 4 with refill on a 2x4 mesh against batch 2 on one device (the
  dynamic tree's flags: the static tree's CLI route is the same one)."""
  tree = ['--tree-nodes', '4', '--tree-depth', '2', '--tree-top', '2']
  src = tmp_path / 'in.txt'
  src.write_text('\n'.join(SENTENCES) + '\n')
  args = ['--input', str(src), '--max-decode-len', '12', '--temperature', '1', '--seed', '3',
          '--no-compare', '--quiet', '--json'] + tree
  files = {}
  for name, extra in (('single', ['--batch-size', '2', '--no-refill']),
                      ('mesh', ['--batch-size', '4', '--mesh', 'data=2,model=4'])):
    out = tmp_path / f'{name}.jsonl'
    assert decode.main(args + extra + ['--output', str(out)]) == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary['tree'] is not None
    files[name] = out.read_text()
  assert files['mesh'] == files['single']
