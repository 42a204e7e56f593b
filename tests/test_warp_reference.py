"""top-k and top-p against references independent of `warp`: hand-enumerated cases and
Hugging Face's own logits warpers."""
import numpy as np
import pytest

from specjax.core.sampling import SamplingConfig, warp_all
import hf_for_tests


def _warp(logits, **kw):
  return np.asarray(warp_all(np.asarray([logits], np.float32), SamplingConfig(**kw))[0],
                    np.float64)


def _softmax(x):
  e = np.exp(np.asarray(x, np.float64) - np.max(x))
  return e / e.sum()


@pytest.mark.parametrize('logits, kw, keep', [
    ([3.0, 2.0, 2.0, 1.0], dict(top_k=2), [0, 1, 2]),  # ties with the k-th value stay
    ([3.0, 2.0, 2.0, 1.0], dict(top_k=1), [0]),
    ([1.0, 3.0, 2.0, 0.0], dict(top_k=4), [0, 1, 2, 3]),  # k = V keeps all
    ([0.0, 0.0, 0.0, 0.0], dict(top_k=2), [0, 1, 2, 3]),  # all tied: all stay
    (np.log([0.5, 0.3, 0.2]), dict(top_p=0.7), [0, 1]),  # mass before 0.3 is 0.5 < 0.7
    (np.log([0.5, 0.3, 0.2]), dict(top_p=0.5), [0]),  # mass before 0.3 is 0.5, not < 0.5
    (np.log([0.2, 0.5, 0.3]), dict(top_p=0.9), [0, 1, 2]),
    (np.log([0.4, 0.3, 0.3]), dict(top_p=0.5), [0, 1, 2]),  # ties with the last one stay
    (np.log([0.1, 0.6, 0.3]), dict(top_p=0.01), [1]),  # the most likely token always stays
    ([3.0, 2.0, 1.0, 0.0], dict(top_k=3, top_p=0.8), [0, 1]),  # top-k, then top-p
])
def test_hand_enumerated_supports_and_renormalised_probabilities(logits, kw, keep):
  got = _warp(logits, temperature=1.0, **kw)
  want = np.zeros(len(logits))
  want[keep] = _softmax(np.asarray(logits)[keep])
  np.testing.assert_allclose(got, want, atol=1e-6)
  assert set(np.flatnonzero(got > 0)) == set(keep)


def test_temperature_comes_before_top_p():
  """At T = 0.5 the distribution sharpens, so the same top-p keeps fewer tokens."""
  logits = np.log([0.4, 0.35, 0.25])
  assert set(np.flatnonzero(_warp(logits, temperature=1.0, top_p=0.7) > 0)) == {0, 1}
  sharp = _softmax(logits / 0.5)  # [0.47, 0.36, 0.17]
  assert set(np.flatnonzero(_warp(logits, temperature=0.5, top_p=0.45) > 0)) == {0}
  np.testing.assert_allclose(_warp(logits, temperature=0.5), sharp, atol=1e-6)


@pytest.mark.parametrize('temperature, top_k, top_p', [
    (1.0, 5, 1.0), (0.7, 40, 1.0), (1.0, 0, 0.9), (1.3, 0, 0.3), (0.7, 40, 0.9),
    (1.0, 1, 0.5),
])
def test_matches_hugging_face_warpers(temperature, top_k, top_p):
  torch = hf_for_tests.require('torch')
  generation = hf_for_tests.require('transformers.generation.logits_process')
  logits = np.random.default_rng(7).normal(size=(64, 512)).astype(np.float32) * 3.0
  warpers = [generation.TemperatureLogitsWarper(temperature)]
  if top_k:
    warpers.append(generation.TopKLogitsWarper(top_k))
  if top_p < 1.0:
    warpers.append(generation.TopPLogitsWarper(top_p))
  scores = torch.from_numpy(logits)
  for w in warpers:
    scores = w(None, scores)
  want = torch.softmax(scores, dim=-1).numpy().astype(np.float64)
  got = np.asarray(warp_all(logits, SamplingConfig(temperature, top_k, top_p)), np.float64)
  np.testing.assert_array_equal(got > 0, want > 0)
  np.testing.assert_allclose(got, want, atol=1e-6)
  assert (got > 0).sum(-1).min() >= 1
