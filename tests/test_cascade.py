"""Cascades: a vertical cascade's chain is the draft model's own (greedy: token for token,
so the decode's every counter is the plain draft's; sampled: the chain follows the draft
model's distribution, by chi-square against its enumerated probabilities, and a broken
inner rule fails the same test); vertical and horizontal cascades keep the target's greedy
output on the demo lines and its distribution when sampled; a bigram table named by its
path ('bigram:TABLE') is the one that drafts; `--gamma auto` weighs a horizontal cascade's
gammas above its K; the command line refuses the forms that do not go together in one
line."""
import itertools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import decode
from specjax.core import acceptance
from specjax.core import proposal as proposal_lib
from specjax.core.sampling import SamplingConfig, SamplingParams
from specjax.core.state import LoopConfig, split_keys
from specjax.job import drafts
from specjax.models.markov import MarkovModel
from specjax.proposers.bigram import BigramDraft, read_table, save_table, table_from_counts
from specjax.proposers.cascade import HorizontalCascade, VerticalCascade
from specjax.core.model_proposer import as_proposer
from stats_util import chi_square_pvalue, enumerate_markov
from test_decode_cli import SENTENCES, _run_main
from test_tree_decode import _demo_lines

T1 = SamplingConfig(temperature=1.0)
T07 = SamplingConfig(temperature=0.7, top_k=3, top_p=0.9)
N, STEPS = 20_000, 3
PROMPT = [3, 4, 3, 5, 3, 2, 4, 3]


@pytest.fixture(scope='module')
def demo_bigram(_demo_pair):
  return drafts.resolve_draft('bigram', _demo_pair[0], 'demo_target', None)


@pytest.mark.parametrize('cheap', ['bigram', 'suffix'])
def test_a_greedy_vertical_cascade_drafts_the_draft_models_own_chain(demo_pair, demo_bigram,
                                                                     cheap):
  target, tp, draft, dp = demo_pair
  inner, ip = demo_bigram if cheap == 'bigram' else drafts.resolve_draft(
      'suffix', target, 'demo_target', None)
  inputs = _demo_lines(16)
  kw = dict(gamma=4, max_decode_len=24, slots=8)
  plain = specjax.speculative_decode(target, tp, draft, dp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, VerticalCascade(draft, inner, 3),
                                   {'draft': dp, 'inner': ip}, inputs, **kw)
  alone = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=24)
  np.testing.assert_array_equal(out.tokens, alone.tokens)
  for counter in ('target_calls', 'drafted', 'accepted', 'accepted_per_position'):
    np.testing.assert_array_equal(getattr(out.stats, counter), getattr(plain.stats, counter))


def test_a_greedy_horizontal_cascade_is_the_targets(demo_pair, demo_bigram):
  target, tp, draft, dp = demo_pair
  inner, ip = demo_bigram
  inputs = _demo_lines(16)
  out = specjax.speculative_decode(target, tp, HorizontalCascade(as_proposer(draft), inner, 2),
                                   {'first': dp, 'rest': ip}, inputs, gamma=4,
                                   max_decode_len=24, slots=8)
  alone = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=24)
  np.testing.assert_array_equal(out.tokens, alone.tokens)
  per_position = np.asarray(out.stats.accepted_per_position).sum(0)
  assert per_position[2] > 0  # the bigram's drafts past depth 2 were accepted


def test_a_table_named_by_its_path_is_the_one_that_drafts(demo_pair, demo_bigram, tmp_path):
  """'bigram:TABLE' drafts with TABLE, in a cascade as alone: the bundled table with each
  row's preferences reversed (its least likely kept token drafted first) keeps the
  target's greedy output and has fewer of the bigram's drafts accepted."""
  target, tp, draft, dp = demo_pair
  nxt, logp = read_table(drafts.DEFAULT_BIGRAMS['demo_target'])
  path = str(tmp_path / 'reversed.npz')
  save_table(path, {'next': nxt, 'logp': logp[:, ::-1]})
  load = lambda name: (draft, dp)
  spec = f'cascade:demo_draft:2,bigram:{path}'
  cascade, params = drafts.resolve_draft(spec, target, 'demo_target', load)
  alone = drafts.resolve_draft(f'bigram:{path}', target, 'demo_target', load)[1]
  np.testing.assert_array_equal(params['rest']['logp'], alone['logp'])
  assert cascade.rest == demo_bigram[0]  # the same proposer, another table
  inputs = _demo_lines(16)
  late = {}
  for name, table in (('bundled', demo_bigram[1]), ('reversed', params['rest'])):
    out = specjax.speculative_decode(target, tp, cascade, {'first': dp, 'rest': table},
                                     inputs, gamma=4, max_decode_len=24, slots=8)
    np.testing.assert_array_equal(
        out.tokens, specjax.autoregressive_decode(target, tp, inputs, max_decode_len=24).tokens)
    late[name] = int(np.asarray(out.stats.accepted_per_position).sum(0)[2:].sum())
  assert late['reversed'] < late['bundled']


def test_a_table_with_more_ids_than_the_targets_logits_is_refused(demo_pair, tmp_path):
  target = demo_pair[0]
  nxt, logp = read_table(drafts.DEFAULT_BIGRAMS['demo_target'])
  rows = target.vocab_size + 1
  path = str(tmp_path / 'wide.npz')
  save_table(path, {'next': np.resize(nxt, (rows, nxt.shape[1])),
                    'logp': np.resize(logp, (rows, nxt.shape[1]))})
  with pytest.raises(ValueError, match=f'built with a vocabulary of {rows} ids, more than the '
                     f"target's {target.vocab_size} logits"):
    drafts.resolve_draft(f'bigram:{path}', target, 'demo_target', None)


def test_gamma_auto_weighs_a_horizontal_cascades_gammas_above_k(tmp_path, capsys):
  """`--gamma auto` with 'cascade:NAME:2,CHEAP' measures and predicts gammas 3..4 only (a
  chain of 2 or fewer leaves CHEAP nothing), and keeps the target's greedy output."""
  src = tmp_path / 'in.txt'
  src.write_text('\n'.join(SENTENCES) + '\n')
  code, stdout, stderr = _run_main(['--input', str(src), '--draft', 'cascade:demo_draft:2,bigram',
                                    '--gamma', 'auto', '--json', '--batch-size', '3',
                                    '--max-decode-len', '16', '--max-gamma', '4'], capsys)
  assert code == 0, stderr
  assert '--gamma auto: measuring gammas 3..4 on 3 inputs' in stderr
  summary = json.loads(stdout.strip().splitlines()[-1])
  assert summary['identical_to_target'] is True
  from specjax.core import theory  # pylint: disable=import-outside-toplevel
  cal = summary['gamma_calibration']
  predicted = {g: theory.speedup(cal['alpha'], g, cal['c'], cal['v'][str(g + 1)])
               for g in (3, 4)}
  assert cal['predicted_best'] == max(predicted, key=predicted.get)
  assert 'over 3..4,' in summary['gamma_reason']
  assert summary['gamma'] == (cal['predicted_best'] if cal['measured_speedup'] >= 1 else 0)


def _markov_cascade(k=2):
  draft = MarkovModel(6)
  dp = draft.init(jax.random.PRNGKey(11), 1.5)
  table = table_from_counts(np.random.default_rng(2).integers(0, 9, (6, 6)), 3)
  return VerticalCascade(draft, BigramDraft(6, 3), k), {'draft': dp, 'inner': table}


def _chains(config, cascade, params, gamma=3):
  """N chains of the cascade below PROMPT's last token, and the draft model's exact
  probabilities of each chain (a chain continues past EOS: it is a draft)."""
  params_rows = SamplingParams.of(config, N)
  cfg = LoopConfig(gamma=gamma, max_decode_len=gamma, sampling=params_rows.mode())
  seq = jnp.tile(jnp.array([PROMPT + [0] * 8]), (N, 1))
  pos = jnp.full((N,), len(PROMPT) - 1, jnp.int32)
  keys = split_keys(jax.random.split(jax.random.PRNGKey(7), N), gamma)

  @jax.jit
  def propose(params, keys, rows):
    return cascade.propose(params, {'draft': {}, 'inner': {}}, {}, seq, pos, keys, rows, cfg)

  x = np.asarray(propose(params, keys, jax.tree.map(jnp.asarray, params_rows)).tokens)
  trans = cascade.draft.transition_probs(params['draft'], config)
  expected = {}
  for chain in itertools.product(range(6), repeat=gamma):
    p, state = 1.0, PROMPT[-1]
    for tok in chain:
      p, state = p * trans[state, tok], tok
    if p > 0:
      expected[chain] = p
  return x, expected


@pytest.mark.parametrize('config', [T1, T07], ids=['t1', 't0.7-top3-top0.9'])
def test_a_sampled_vertical_cascades_chain_follows_the_draft_model(config):
  x, expected = _chains(config, *_markov_cascade())
  assert chi_square_pvalue(x, expected) > 1e-3


def test_a_cascade_whose_inner_rule_keeps_the_residual_is_rejected(monkeypatch):
  """The negative control: a broken inner rule's chains fail the same test."""
  monkeypatch.setattr(acceptance, 'residual', lambda r, q, q_scale=1.0: r)
  x, expected = _chains(T1, *_markov_cascade())
  assert chi_square_pvalue(x, expected) < 1e-6


def _sampled_first_tokens(kind):
  """The first STEPS tokens of N sampled decodes of PROMPT with a cascade of `kind`, and
  their exactly enumerated target probabilities."""
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(10), 1.5)
  vertical, params = _markov_cascade()
  if kind == 'horizontal':
    cascade = HorizontalCascade(as_proposer(vertical.draft), vertical.inner, 1)
    params = {'first': params['draft'], 'rest': params['inner']}
  else:  # capped: one call of the draft model keeps 1 to 3 of the chain of 3
    cascade = VerticalCascade(vertical.draft, vertical.inner, 2,
                              max_calls=1 if kind == 'vertical-capped' else None)
  out = specjax.speculative_decode(target, tp, cascade, params,
                                   jnp.tile(jnp.array([PROMPT]), (N, 1)), gamma=3,
                                   max_decode_len=STEPS, sampling=T1,
                                   rng=jax.random.PRNGKey(4))
  expected = enumerate_markov(target.transition_probs(tp, T1), PROMPT[-1], STEPS)
  return out, expected


@pytest.mark.parametrize('kind', ['vertical', 'vertical-capped', 'horizontal'])
def test_sampled_cascades_follow_the_target_on_the_first_three_tokens(kind):
  out, expected = _sampled_first_tokens(kind)
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3
  assert int(out.stats.accepted.sum()) > 0
  if kind == 'vertical-capped':  # the cap cut chains short, and not all of them
    drafted = np.asarray(out.stats.drafted) / np.asarray(out.stats.target_calls)
    assert drafted.min() < 3 and drafted.max() > 1


def test_a_capped_cascade_that_claims_its_whole_chain_is_rejected(monkeypatch, fresh_programs):
  """The negative control: a capped cascade that says it proposed all G tokens, those past
  what it holds included (cheap guesses its draft model turned down), fails the same test."""
  del fresh_programs
  whole = proposal_lib.chain
  monkeypatch.setattr(proposal_lib, 'chain', lambda x, q, state, bad, drafted: whole(
      x, q, state, bad, jnp.full_like(drafted, x.shape[1])))
  out, expected = _sampled_first_tokens('vertical-capped')
  assert chi_square_pvalue(np.asarray(out.tokens), expected) < 1e-6


@pytest.mark.parametrize('args, named', [
    (['--draft', 'cascade:demo_draft/demo_draft'], 'must read only the sequence'),
    (['--draft', 'cascade:demo_draft'], 'cascade:NAME/CHEAP'),
    (['--draft', 'cascade:demo_draft:4,bigram', '--gamma', '3'], 'pass --gamma above 4'),
    (['--draft', 'cascade:demo_draft/bigram', '--tree-nodes', '4', '--tree-depth', '2'],
     'drafts chains'),
    (['--draft', 'cascade:demo_draft/rest:/nonexistent'], 'python -m specjax.datastore build'),
    (['--draft', 'cascade:demo_draft/bigram/3/0'], 'must be >= 1'),
    (['--draft', 'cascade:demo_draft:2,bigram', '--max-gamma', '2'],
     '--gamma auto weighs gammas up to 2; pass --max-gamma above 2'),
    (['--draft', 'cascade:demo_draft/bigram:/nonexistent.npz'],
     'bigram table /nonexistent.npz does not exist; build one with python -m '
     'specjax.datastore bigram'),
    (['--draft', f'bigram:{__file__}'], r'is not a bigram table (not an .npz archive)'),
    (['--draft', 'bigram:'], 'pass bigram:TABLE.npz'),
    (['--draft', 'bigram:/a.npz', '--draft-checkpoint', '/b.npz'],
     'names its table, and --draft-checkpoint /b.npz another: pass one of them'),
], ids=['cheap-model', 'no-cheap', 'gamma-below-k', 'tree', 'missing-datastore', 'no-calls',
        'auto-gamma-below-k', 'missing-table', 'not-a-table', 'no-table', 'two-tables'])
def test_cascade_flags_that_do_not_go_together_are_one_line_errors(capsys, args, named):
  assert decode.main(['--quiet'] + args) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: ') and '\n' not in err and named in err, err


def test_a_cascade_spec_parses_both_forms():
  assert drafts.parse_cascade('cascade:demo_draft/rest:/a/b') == drafts.Cascade(
      True, 'demo_draft', 'rest:/a/b', 3)
  assert drafts.parse_cascade('cascade:demo_draft/bigram/5').count == 5
  assert drafts.parse_cascade('cascade:demo_draft/rest:/a/2/5/3') == drafts.Cascade(
      True, 'demo_draft', 'rest:/a/2', 5, 3)
  assert drafts.parse_cascade('cascade:demo_draft:2,copy') == drafts.Cascade(
      False, 'demo_draft', 'copy', 2)
