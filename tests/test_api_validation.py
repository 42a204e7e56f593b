"""The API refuses arguments of the wrong kind, shape or range with one-line ValueErrors,
before anything compiles: float and bool ids, row_ids and SamplingParams of the wrong
length, num_inputs < 0, eos and pad ids outside the vocabulary, an int rng, and the draft's
params passed as the target's, and inputs with no rows or no tokens."""
import jax
import numpy as np
import pytest

import specjax
from specjax.core.sampling import SamplingConfig, SamplingParams

INPUTS = np.array([[3, 4, 1], [5, 6, 1]], np.int32)


def _decode(pair, **changes):
  target, tp, draft, dp = pair()
  kw = dict(gamma=2, max_decode_len=4)
  kw.update(changes)
  tp, dp = kw.pop('tp', tp), kw.pop('dp', dp)
  inputs = kw.pop('inputs', INPUTS)
  return specjax.speculative_decode(target, tp, draft, dp, inputs, **kw)


@pytest.mark.parametrize('changes, message', [
    (dict(inputs=INPUTS.astype(np.float32)),
     'inputs must hold integer token ids, got dtype float32; tokenize them (int32)'),
    (dict(inputs=INPUTS.astype(bool)),
     'inputs must hold integer token ids, got dtype bool; tokenize them (int32)'),
    (dict(row_ids=np.arange(3, dtype=np.int32)),
     'row_ids must be [2] integers (one run index per input row), got shape (3,) of int32'),
    (dict(row_ids=np.arange(2.0)),
     'row_ids must be [2] integers (one run index per input row), got shape (2,) of float64'),
    (dict(num_inputs=-1),
     'num_inputs must be an integer >= 0 (the leading inputs to decode), got -1'),
    (dict(eos_id=32), 'eos_id must be an id in [0, 32) (the vocabulary), got 32'),
    (dict(pad_id=-1), 'pad_id must be an id in [0, 32) (the vocabulary), got -1'),
    (dict(rng=3), 'rng must be a PRNG key (jax.random.PRNGKey(seed) or jax.random.key(seed)), '
     'got 3'),
    (dict(sampling=[SamplingConfig(1.0)] * 3),
     '3 sampling settings for 2 rows; pass one SamplingConfig or one per row'),
    (dict(sampling=SamplingParams(np.ones(3, np.float32), np.zeros(2, np.int32),
                                  np.ones(2, np.float32))),
     'SamplingParams.temperature has shape (3,) for 2 rows; pass [2] arrays (one value per '
     'row)'),
    (dict(sampling=SamplingConfig(1.0, top_k=2.5)),
     'top_k must be an integer (0 keeps all), got 2.5'),
    (dict(inputs=np.zeros((0, 3), np.int32)),
     'inputs of shape (0, 3) hold no input; pass at least one row of at least one token'),
    (dict(inputs=np.zeros((2, 0), np.int32)),
     'inputs of shape (2, 0) hold no input; pass at least one row of at least one token'),
])
def test_bad_arguments_are_one_line_value_errors(tiny_t5_pair, changes, message):
  with pytest.raises(ValueError) as e:
    _decode(tiny_t5_pair, **changes)
  assert str(e.value) == message


def test_swapped_params_are_named(tiny_t5_pair):
  target, tp, draft, dp = tiny_t5_pair()
  with pytest.raises(ValueError) as e:
    specjax.speculative_decode(target, dp, draft, tp, INPUTS, gamma=2, max_decode_len=4)
  assert str(e.value).startswith('target_params do not fit the model: the tree ')
  assert str(e.value).endswith('(were target_params and draft_params swapped?)')
  assert '\n' not in str(e.value)
  with pytest.raises(ValueError, match='^draft_params do not fit the model'):
    specjax.speculative_decode(target, tp, draft, tp, INPUTS, gamma=2, max_decode_len=4)
  with pytest.raises(ValueError, match=r"^target_params do not fit the model: the tree lacks"):
    specjax.autoregressive_decode(target, {'decoder': tp['decoder']}, INPUTS,
                                  max_decode_len=4)


def test_good_arguments_of_every_kind_decode(tiny_t5_pair):
  """The same checks pass what is right: a typed key, int64 ids, numpy row ids, bfloat16
  params (dtypes are not shapes)."""
  target, tp, draft, dp = tiny_t5_pair()
  half = jax.tree.map(lambda x: x.astype('bfloat16'), dp)
  out = specjax.speculative_decode(target, tp, draft, half, INPUTS.astype(np.int64), gamma=2,
                                   max_decode_len=4, rng=jax.random.key(1),
                                   row_ids=np.array([7, 9]), num_inputs=0)
  assert np.asarray(out.lengths).tolist() == [0, 0]  # num_inputs 0: nothing decoded
