"""Training: the step lowers the loss, the loss ignores padding, batches are fixed-shape and
reproducible, and a stopped run resumes from its checkpoint."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.demo import training
from specjax.models.t5 import T5
from specjax.models.t5_config import t5_tiny

# Hand-made pairs over t5_tiny's 32 ids: the target reverses the input's content tokens.
INPUTS = [[5, 6, 7, 1], [9, 3, 1], [4, 8, 12, 20, 1], [11, 1], [30, 21, 17, 1], [13, 14, 1]]
TARGETS = [[7, 6, 5, 1], [3, 9, 1], [20, 12, 8, 4, 1], [11, 1], [17, 21, 30, 1], [14, 13, 1]]
BUCKET = training.Bucket(input_len=6, target_len=6, batch=6)


def _batch():
  return (training.pad_rows(INPUTS, BUCKET.input_len),
          training.pad_rows(TARGETS, BUCKET.target_len))


def test_step_lowers_the_loss():
  model, tx = T5(t5_tiny), training.make_optimizer()
  state = training.init_state(model, tx, jax.random.PRNGKey(0))
  step = training.make_train_step(model, tx)
  inputs, targets = _batch()
  losses = []
  for _ in range(30):
    state, metrics = step(state, jnp.float32(0.05), inputs, targets)
    losses.append(float(metrics['loss']))
  assert int(state.step) == 30
  assert metrics['tokens'] == sum(len(t) for t in TARGETS)  # EOS counted, pad not
  assert losses[-1] < 0.7 * losses[0], losses


def test_loss_ignores_pad_positions():
  _, targets = _batch()
  logits = jax.random.normal(jax.random.PRNGKey(1), targets.shape + (32,))  # [B, T, V]
  pad = (targets == 0)[..., None]  # [B, T, 1]
  noise = 100.0 * jax.random.normal(jax.random.PRNGKey(2), logits.shape)
  changed = jnp.where(pad, noise, logits)
  before, after = training.cross_entropy(logits, targets), training.cross_entropy(
      changed, targets)
  for a, b in zip(before, after):
    np.testing.assert_allclose(float(a), float(b), rtol=1e-6)
  assert float(before[1]) == np.sum(targets != 0)
  # ... while a change at a real target position does change it.
  moved = logits.at[0, 0, targets[0, 0]].add(5.0)
  assert float(training.cross_entropy(moved, targets)[0]) < float(before[0])


def test_soft_kl_is_zero_for_the_teacher_itself_and_ignores_pad():
  _, targets = _batch()
  logits = jax.random.normal(jax.random.PRNGKey(1), targets.shape + (32,))  # [B, T, V]
  logp, ids = jax.lax.top_k(jax.nn.log_softmax(logits), 32)  # K = V: the full teacher
  assert abs(float(training.soft_kl(logits, ids, logp, targets))) < 1e-4
  other = logits.at[..., 3].add(2.0)
  assert float(training.soft_kl(other, ids, logp, targets)) > 0.1
  pad = (targets == 0)[..., None]
  noisy = jnp.where(pad, 50.0 * jax.random.normal(jax.random.PRNGKey(2), logits.shape), other)
  np.testing.assert_allclose(float(training.soft_kl(noisy, ids, logp, targets)),
                             float(training.soft_kl(other, ids, logp, targets)), rtol=1e-6)


def test_shift_right_starts_with_zero():
  _, targets = _batch()
  shifted = np.asarray(training.shift_right(targets))
  np.testing.assert_array_equal(shifted[:, 0], 0)
  np.testing.assert_array_equal(shifted[:, 1:], targets[:, :-1])


def test_buckets_fixed_shapes_drop_long_and_replay():
  inputs = INPUTS * 4 + [[3] * 9 + [1]]  # the last pair fits no bucket
  targets = TARGETS * 4 + [[3, 1]]
  buckets = [training.Bucket(4, 4, 3), training.Bucket(6, 6, 2)]
  data = training.BucketedData(inputs, targets, buckets, seed=3)
  assert data.dropped == 1 and len(data) == 24
  shapes = {data.batch(k)[0].shape + data.batch(k)[1].shape for k in range(20)}
  assert shapes <= {(3, 4, 3, 4), (2, 6, 2, 6)}
  again = training.BucketedData(inputs, targets, buckets, seed=3)
  for k in (0, 5, data.steps_per_epoch + 1):
    np.testing.assert_array_equal(data.batch(k)[0], again.batch(k)[0])
  evals = training.eval_batches(inputs, targets, buckets)
  assert sum(int(np.sum(y[:, 0] != 0)) for _, y in evals) == 24


def _replay(model, data, state, steps, cfg):
  """The training loop's steps by hand: same batches, same learning-rate schedule."""
  tx = training.make_optimizer()
  step_fn = training.make_train_step(model, tx, cfg.soft_weight, cfg.dropout_rate, cfg.seed)
  for step in steps:
    lr = training.learning_rate(step, step / cfg.max_steps, cfg.peak_lr, cfg.warmup_steps)
    state, _ = step_fn(state, jnp.float32(lr), *data.batch(step))
  return state


def _assert_trees_close(a, b):
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)


def test_train_resumes_from_checkpoint(tmp_path):
  """The checkpoint holds the state the steps produced (params, optimizer state, step);
  a longer run resumes from it and ends where the same steps taken by hand end."""
  model, tx = T5(t5_tiny), training.make_optimizer()
  data = training.BucketedData(INPUTS, TARGETS, [BUCKET])
  val = training.eval_batches(INPUTS, TARGETS, [BUCKET])
  cfg = training.TrainConfig(minutes=0, max_steps=4, peak_lr=0.05, warmup_steps=1,
                             eval_every=2)
  first = training.train(model, data, val, str(tmp_path), cfg, log=lambda _: None)
  assert first['steps'] == 4
  start = training.init_state(model, tx, jax.random.PRNGKey(cfg.seed))
  by_hand = _replay(model, data, start, range(4), cfg)
  abstract = jax.eval_shape(lambda: start)
  saved, meta = training.restore_state(str(tmp_path / 'checkpoints'), abstract)
  assert int(saved.step) == 4 and meta['examples'] == 4 * len(INPUTS)
  _assert_trees_close(saved.params, by_hand.params)
  _assert_trees_close(saved.opt_state, by_hand.opt_state)  # the optimizer state too
  longer = training.TrainConfig(**{**cfg.__dict__, 'max_steps': 6})
  lines = []
  second = training.train(model, data, val, str(tmp_path), longer, log=lines.append)
  assert second['steps'] == 6 and lines[0].startswith('resumed at step 4')
  params = training.load_trained_params(model, str(tmp_path))
  _assert_trees_close(params, _replay(model, data, by_hand, range(4, 6), longer).params)
  assert not np.allclose(np.asarray(jax.tree.leaves(params)[0]),
                         np.asarray(jax.tree.leaves(by_hand.params)[0]))  # it did train on


def test_dropout_masks_scale_and_differ_per_call():
  from specjax.models.t5_layers import NO_DROPOUT, Dropout
  x = jnp.ones((200, 100))
  drop = Dropout(0.1, jax.random.PRNGKey(0))
  a, b = np.asarray(drop(x)), np.asarray(drop(x))
  assert abs((a == 0).mean() - 0.1) < 0.01 and abs((b == 0).mean() - 0.1) < 0.01
  np.testing.assert_allclose(a[a != 0], 1 / 0.9, rtol=1e-6)  # kept units scaled up
  assert (a != b).any()  # every call draws its own mask
  assert NO_DROPOUT(x) is x


def test_hashed_bits_are_uniform_and_independent_across_keys_and_neighbours():
  from scipy import stats
  from specjax.models.t5_layers import hashed_uniform_bits
  a = np.asarray(hashed_uniform_bits(jax.random.PRNGKey(0), (256, 256)))
  b = np.asarray(hashed_uniform_bits(jax.random.fold_in(jax.random.PRNGKey(0), 1), (256, 256)))
  for bits in (a >> 28, a & 15, b >> 28):  # high and low nibbles: 16 equally likely values
    assert stats.chisquare(np.bincount(bits.ravel(), minlength=16)).pvalue > 1e-3
  keep_a, keep_b = a.ravel() >= 2**31, b.ravel() >= 2**31
  for x, y in ((keep_a, keep_b), (keep_a[:-1], keep_a[1:]), (keep_a[:-256], keep_a[256:])):
    assert abs(np.corrcoef(x, y)[0, 1]) < 0.02  # other key, next column, next row


@pytest.mark.compute
def test_dropout_only_when_asked_and_reproducible_per_key():
  model = T5(t5_tiny)
  params = model.init(jax.random.PRNGKey(0))
  inputs, targets = _batch()
  dec = training.shift_right(targets)
  plain = model.logits(params, inputs, dec)
  k1, k2 = jax.random.PRNGKey(1), jax.random.PRNGKey(2)
  d1, d1_again, d2 = (model.logits(params, inputs, dec, 0.1, k) for k in (k1, k1, k2))
  np.testing.assert_array_equal(d1, d1_again)
  assert not np.allclose(d1, plain, atol=1e-3) and not np.allclose(d1, d2, atol=1e-3)
  np.testing.assert_array_equal(model.logits(params, inputs, dec, 0.0, k1), plain)


def test_step_with_dropout_lowers_the_loss_and_repeats_exactly():
  model, tx = T5(t5_tiny), training.make_optimizer()
  inputs, targets = _batch()
  runs = []
  for _ in range(2):
    state = training.init_state(model, tx, jax.random.PRNGKey(0))
    step = training.make_train_step(model, tx, dropout_rate=0.1, seed=3)
    losses = []
    for _ in range(30):
      state, metrics = step(state, jnp.float32(0.05), inputs, targets)
      losses.append(float(metrics['loss']))
    runs.append(losses)
  assert runs[0] == runs[1]  # masks come from (seed, step): a resumed run matches
  assert runs[0][-1] < 0.7 * runs[0][0], runs[0]
