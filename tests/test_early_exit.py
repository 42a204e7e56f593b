"""Layer-skip with a trained early exit (`train_draft --kind layerskip`, `--draft
layerskip:PATH`): the exit is the final norm and output projection of the target's params
tree and nothing else; the cut drafts with it in place of the target's; a few training
steps make the first layer accept more on the lines they saw, still identical to the target
alone; one-line refusals."""
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import decode, train_draft
from specjax.drafting import early_exit, heads_io
from specjax.models.lm import CausalLM
from specjax.models.lm_config import LMConfig
from specjax.proposers.layer_skip import LayerSkip, exit_params, overlay
from train_draft_util import train_on_demo_lines


def test_the_exit_is_the_final_norm_and_the_untied_projection(demo_pair):
  target, tp, _, _ = demo_pair
  got = exit_params(tp)
  assert set(got) == {'decoder'}
  assert set(got['decoder']) == {'decoder_norm', 'logits_dense'}
  assert got['decoder']['logits_dense']['kernel'] is tp['decoder']['logits_dense']['kernel']
  axes = exit_params(target.param_axes())
  assert axes['decoder']['logits_dense']['kernel'] == ('embed', 'vocab')
  for tied, names in ((False, {'final_norm', 'lm_head'}), (True, {'final_norm'})):
    lm = CausalLM(LMConfig(vocab_size=32, tie_embeddings=tied))
    assert set(exit_params(lm.init(jax.random.PRNGKey(0)))) == names
  mixed = overlay(tp, {'decoder': {'decoder_norm': {'scale': jnp.zeros(4)}}})
  assert mixed['decoder']['decoder_norm']['scale'].shape == (4,)
  assert mixed['decoder']['layers_0'] is tp['decoder']['layers_0']  # the rest is the target's
  assert mixed['encoder'] is tp['encoder'] and tp['decoder']['decoder_norm']['scale'].shape != (4,)


def test_the_cut_drafts_with_its_own_exit(demo_pair):
  """The first layer's proposals follow its exit: the target's gives the plain layer-skip
  draft's tokens, a changed one other tokens."""
  import specjax  # pylint: disable=import-outside-toplevel
  target, tp, _, _ = demo_pair
  inputs = np.asarray([[37, 90, 12, 8, 1, 0, 0, 0], [200, 14, 9, 1, 0, 0, 0, 0]], np.int32)
  kw = dict(gamma=3, max_decode_len=12)
  plain = specjax.speculative_decode(target, tp, LayerSkip(target, 1), {}, inputs, **kw)
  same = specjax.speculative_decode(target, tp, LayerSkip(target, 1, trained_exit=True),
                                    exit_params(tp), inputs, **kw)
  for counter in ('accepted', 'drafted', 'target_calls'):
    np.testing.assert_array_equal(getattr(same.stats, counter), getattr(plain.stats, counter))
  flipped = exit_params(tp)  # the projection negated: the least likely tokens instead
  flipped['decoder']['logits_dense'] = {'kernel': -flipped['decoder']['logits_dense']['kernel']}
  other = specjax.speculative_decode(target, tp, LayerSkip(target, 1, trained_exit=True),
                                     flipped, inputs, **kw)
  np.testing.assert_array_equal(other.tokens, plain.tokens)  # the target's output, always
  assert int(other.stats.accepted.sum()) < int(plain.stats.accepted.sum())


def test_train_draft_trains_an_exit_that_accepts_more_and_decodes_with_it(tmp_path, capsys):
  src, _, summary = train_on_demo_lines(tmp_path, capsys, 'layerskip', 30, '1e-3', 30,
                                        extra=('--layers', '1'))
  meta, params = heads_io.load_heads(summary['output'])
  assert meta['kind'] == 'layerskip' and meta['layers'] == 1
  assert set(params['decoder']) == {'decoder_norm', 'logits_dense'}  # the exit alone
  assert jax.tree.leaves(params)[0].dtype == jnp.bfloat16  # stored small
  accepted = {}
  for spec in ('layerskip:1', f'layerskip:{summary["output"]}'):
    code = decode.main(['--input', str(src), '--draft', spec, '--gamma', '3',
                        '--max-decode-len', '16', '--quiet', '--json'])
    assert code == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result['identical_to_target'] is True
    accepted[spec.split(':')[1] == '1'] = result['accepted_tokens']
  assert accepted[False] > accepted[True] * 1.2


def test_early_exit_training_refusals_are_one_line(tmp_path, capsys, demo_pair):
  src = tmp_path / 'train.txt'
  src.write_text('Close the window\n')
  for bad, named in ((['--kind', 'layerskip'], 'pass --kind layerskip with --layers M'),
                     (['--kind', 'medusa', '--layers', '2'], 'drop it for --kind medusa'),
                     (['--kind', 'layerskip', '--layers', '4'], '1 <= M < 4')):
    code = train_draft.main(['--input', str(src), '--workdir', str(tmp_path / 'w'),
                             '--quiet'] + bad)
    err = capsys.readouterr().err.strip()
    assert code == 2 and named in err and '\n' not in err, err
  with pytest.raises(ValueError, match='1 <= M < 4'):
    early_exit.EarlyExit(demo_pair[0], 0)
  medusa = heads_io.save_heads(str(tmp_path / 'medusa'), {'w': np.zeros((1, 2, 2))},
                               {'kind': 'medusa'})
  other = heads_io.save_heads(str(tmp_path / 'other'), {'w': np.zeros((2, 2))}, {
      'kind': 'layerskip', 'layers': 1, 'target': 'elsewhere', 'hidden': 8,
      'vocab_size': 4096})
  for spec, named in ((f'layerskip:{medusa}', 'holds a medusa draft, not an early exit'),
                      (f'layerskip:{other}', 'holds an early exit trained for elsewhere (hidden 8'),
                      ('layerskip:nowhere', 'or layerskip:PATH')):
    assert decode.main(['--input', str(src), '--draft', spec, '--quiet']) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith('error:') and named in err and '\n' not in err, err
