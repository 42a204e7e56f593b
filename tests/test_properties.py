"""Invariants of acceptance and commit for random distributions, drafts, positions, EOS
placements and lengths (hypothesis). Shapes are fixed per test so that each compiles once."""
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from specjax.core import acceptance, sampling
from specjax.core.state import DecodeState, DecodeStats, LoopConfig, commit, extract_output

B, G, V, W, EOS, PAD = 6, 3, 5, 16, 1, 0
SETTINGS = settings(max_examples=60, deadline=None)

_accept = jax.jit(acceptance.accept)
_accept_greedy = jax.jit(acceptance.accept_greedy)


def _distributions(weights, zeros):
  """Rows of weights with some entries zeroed (never a whole row), normalised."""
  w = np.where(zeros, 0.0, weights)
  w[..., 0] = np.where(w.sum(-1) == 0, 1.0, w[..., 0])
  return (w / w.sum(-1, keepdims=True)).astype(np.float32)


@SETTINGS
@given(p_w=hnp.arrays(np.float64, (B, G + 1, V), elements=st.floats(0.01, 1.0)),
       p_zero=hnp.arrays(bool, (B, G + 1, V)),
       q_w=hnp.arrays(np.float64, (B, G, V), elements=st.floats(0.01, 1.0)),
       q_zero=hnp.arrays(bool, (B, G, V)), seed=st.integers(0, 2**31 - 1))
def test_acceptance_keeps_a_prefix_of_supported_tokens(p_w, p_zero, q_w, q_zero, seed):
  p, q = _distributions(p_w, p_zero), _distributions(q_w, q_zero)
  keys = jax.random.split(jax.random.PRNGKey(seed), B + 1)
  x = np.asarray(jax.vmap(lambda k, row: sampling.sample(jax.random.split(k, G), row))(
      keys[:B], q))  # [B, G] drawn from q
  res = jax.tree.map(np.asarray, _accept(p, q, x, keys[1:]))
  assert np.all((0 <= res.n) & (res.n <= G))
  np.testing.assert_array_equal(res.accepted, np.arange(G)[None] < res.n[:, None])
  rows = np.arange(B)
  for i in range(G):  # an accepted draft token is one the target can emit
    accepted = res.accepted[:, i]
    assert np.all(p[rows, i, x[:, i]][accepted] > 0)
  assert np.all(p[rows, res.n, res.y] > 0)  # the extra token too, rejection or bonus
  assert np.all((res.beta >= 0) & (res.beta <= 1 + 1e-6))


@SETTINGS
@given(target=hnp.arrays(np.int32, (B, G + 1), elements=st.integers(0, V - 1)),
       agree=hnp.arrays(bool, (B, G)), other=hnp.arrays(np.int32, (B, G),
                                                        elements=st.integers(1, V - 1)))
def test_greedy_acceptance_is_the_matching_prefix(target, agree, other):
  x = np.where(agree, target[:, :G], (target[:, :G] + other) % V).astype(np.int32)
  res = jax.tree.map(np.asarray, _accept_greedy(target, x))
  for b in range(B):
    n = 0
    while n < G and x[b, n] == target[b, n]:
      n += 1
    assert res.n[b] == n and res.y[b] == target[b, n]


_CFG = LoopConfig(gamma=G, max_decode_len=8, eos_id=EOS, pad_id=PAD)
_commit = jax.jit(lambda state, block, count: commit(state, block, count, _CFG))


@SETTINGS
@given(prompt_len=hnp.arrays(np.int32, (B,), elements=st.integers(1, 3)),
       length=hnp.arrays(np.int32, (B,), elements=st.integers(0, 7)),
       done=hnp.arrays(bool, (B,)),
       block=hnp.arrays(np.int32, (B, G + 1), elements=st.integers(1, V - 1)),
       count=hnp.arrays(np.int32, (B,), elements=st.integers(1, G + 1)),
       seq=hnp.arrays(np.int32, (B, W), elements=st.integers(2, V - 1)))
def test_commit_writes_at_most_its_block_never_past_eos_or_the_length(
    prompt_len, length, done, block, count, seq):
  pos = prompt_len - 1 + length
  state = DecodeState(seq=seq, prompt_len=prompt_len, pos=pos, length=length, done=done,
                      target_cache={}, draft_cache={}, keys=jnp.zeros((B, 2), jnp.uint32),
                      sampling=None, stats=DecodeStats.zeros(B, G), step=jnp.int32(0))
  new_seq, new_pos, new_len, new_done, active = jax.tree.map(
      np.asarray, _commit(state, block, count))
  added = new_len - length
  np.testing.assert_array_equal(active, ~done)
  assert np.all(added[done] == 0) and np.all(new_done[done])  # done rows stay as they were
  assert np.all((0 <= added) & (added <= count))  # at most the block's count
  assert np.all(new_len <= _CFG.max_decode_len)  # never past max_decode_len
  np.testing.assert_array_equal(new_pos, prompt_len - 1 + new_len)  # lengths agree
  for b in range(B):
    np.testing.assert_array_equal(new_seq[b, :pos[b] + 1], seq[b, :pos[b] + 1])  # prefix kept
    new = new_seq[b, pos[b] + 1:pos[b] + 1 + added[b]]
    np.testing.assert_array_equal(new, block[b, :added[b]])
    if EOS in new.tolist():  # EOS ends the row: it is the last token written
      assert new.tolist().index(EOS) == added[b] - 1 and new_done[b]
    if not done[b]:
      eos_in = EOS in block[b, :count[b]].tolist()
      assert new_done[b] == (eos_in or new_len[b] == _CFG.max_decode_len)
  out = np.asarray(extract_output(state.replace(seq=new_seq, length=new_len), _CFG))
  for b in range(B):
    np.testing.assert_array_equal(out[b, :new_len[b]],
                                  new_seq[b, prompt_len[b]:prompt_len[b] + new_len[b]])
    assert np.all(out[b, new_len[b]:] == PAD)  # pad after the output's end
