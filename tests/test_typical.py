"""Typical acceptance (Medusa's lossy rule, --verification typical[:EPS:DELTA]).

A draft token x is kept while p(x) > min(EPS, DELTA exp(-H(p))) and the next token is drawn
from p: the kept counts of hand-made distributions, in chains and trees; greedy rows of a
sampled batch stay the target's; with the bundled Medusa heads it keeps more than the exact
rule; the command line says it is not exact and refuses what it cannot run, in one line."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import decode
from specjax.core import acceptance, tree_accept
from specjax.core.rule import VerificationRule
from specjax.job import drafts
from test_tree_decode import _demo_lines

# Target distributions over 4 tokens: peaked (H ~ 0.17: bar min(0.09, 0.3 * 0.84) = 0.09)
# and flat (H = ln 4: bar min(0.09, 0.3 / 4) = 0.075).
PEAKED = [0.97, 0.01, 0.01, 0.01]
FLAT = [0.25, 0.25, 0.25, 0.25]


def test_a_chain_keeps_tokens_while_the_target_gives_them_more_than_the_bar():
  p = jnp.asarray([[PEAKED, FLAT, [0.02, 0.08, 0.1, 0.8]],   # x: 0 kept, 3 kept (0.25)
                   [PEAKED, FLAT, FLAT],                     # x: 1 (0.01 < 0.09) stops
                   [FLAT, [0.9, 0.05, 0.04, 0.01], FLAT]])   # x: 2 kept, 3 (0.01) stops
  x = jnp.asarray([[0, 3], [1, 0], [2, 3]])
  q = jax.nn.one_hot(x, 4)
  keys = jax.random.split(jax.random.PRNGKey(0), 3)
  result = acceptance.accept_typical(p, q, x, keys, 0.09, 0.3)
  assert np.asarray(result.n).tolist() == [2, 0, 1]
  # a row that keeps all draws from the last p: row 0 keeps 2, p[0, 2] is 0.8 on token 3
  draws = [int(acceptance.accept_typical(p, q, x, jax.random.split(
      jax.random.PRNGKey(s), 3), 0.09, 0.3).y[0]) for s in range(40)]
  assert 25 <= draws.count(3) <= 40 and set(draws) <= {0, 1, 2, 3}
  # drafted caps the count, as the exact rules do
  capped = acceptance.accept_typical(p, q, x, keys, 0.09, 0.3, jnp.asarray([1, 2, 2]))
  assert np.asarray(capped.n).tolist() == [1, 0, 1]


def test_a_tree_keeps_the_deepest_path_of_tokens_above_the_bar():
  """Root children a (token 1) and b (token 0); a's child c (token 2), b's child d
  (token 3). Under the root's peaked p only b's token passes; below b, d's token passes
  the flat p: the path b, d, though a and its child c were tried first."""
  tokens = jnp.asarray([[1, 0, 2, 3]])
  parents = jnp.asarray([[-1, -1, 0, 1]])
  depth = jnp.asarray([[1, 1, 2, 2]])
  p = jnp.asarray([[PEAKED, FLAT, FLAT, FLAT, FLAT]])  # slot 0 the root, slot i+1 node i
  q = jax.nn.one_hot(tokens, 4)
  keys = jax.random.split(jax.random.PRNGKey(0), 1)
  result = tree_accept.accept_tree_typical(p, q, tokens, parents, depth, keys, 2, 0.09, 0.3)
  assert int(result.n[0]) == 2 and np.asarray(result.path).tolist() == [[1, 3]]
  # the root's p peaked on token 1 instead: a passes, then c below it
  p = p.at[0, 0].set(jnp.asarray([0.01, 0.97, 0.01, 0.01]))
  result = tree_accept.accept_tree_typical(p, q, tokens, parents, depth, keys, 2, 0.09, 0.3)
  assert np.asarray(result.path).tolist() == [[0, 2]]


def test_typical_keeps_more_than_the_exact_rule_and_greedy_rows_stay_the_targets(demo_pair):
  target, tp, _, _ = demo_pair
  inputs = _demo_lines(16)
  heads, hp = drafts.resolve_draft('medusa', target, 'demo_target', None)
  rows = [specjax.SamplingConfig(temperature=t) for t in (0.0, 1.0) * 8]
  kw = dict(max_decode_len=20, slots=8, sampling=rows, rng=jax.random.PRNGKey(1), tree='2,2,1')
  exact = specjax.speculative_decode(target, tp, heads, hp, inputs, **kw)
  typical = specjax.speculative_decode(target, tp, heads, hp, inputs, verification='typical',
                                       **kw)
  alone = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=20)
  np.testing.assert_array_equal(np.asarray(typical.tokens)[::2],
                                np.asarray(alone.tokens)[::2])
  sampled = lambda out: int(np.asarray(out.stats.accepted)[1::2].sum())
  assert sampled(typical) > sampled(exact)


def test_the_rule_says_it_is_not_exact_and_checks_its_numbers():
  assert not VerificationRule('typical').exact and VerificationRule('token').exact
  assert VerificationRule('typical:0.2:0.5').typical == (0.2, 0.5)
  for bad, named in (('typical:x', 'typical:EPS:DELTA'), ('typical:2:0.3', '0 < EPS <= 1')):
    with pytest.raises(ValueError, match=named):
      VerificationRule(bad).checked(greedy=False)
  with pytest.raises(ValueError, match='sampled decoding only'):
    VerificationRule('typical').checked(greedy=True)


def test_cli_typical_says_not_exact_and_refuses_greedy(tmp_path, capsys):
  src = tmp_path / 'in.txt'
  src.write_text('Close the window\nPrint the page\n')
  base = ['--input', str(src), '--draft', 'medusa', '--max-decode-len', '12']
  assert decode.main(base + ['--verification', 'typical', '--temperature', '1',
                             '--gamma', '3']) == 0
  out = capsys.readouterr().out
  assert 'typical acceptance: NOT exact' in out
  assert decode.main(base + ['--verification', 'typical:0.2:0.5', '--temperature', '1',
                             '--tree', '2,1', '--quiet']) == 0
  capsys.readouterr()
  assert decode.main(base + ['--verification', 'typical', '--quiet']) == 2  # greedy
  err = capsys.readouterr().err.strip()
  assert 'sampled decoding only' in err and '\n' not in err
