"""Small models shared by the tests: Markov chains with known structure, tiny transformers."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.decoder_only import DecoderOnlyConfig, DecoderOnlyTransformer
from specjax.models.markov import MarkovModel

VOCAB = 16
EOS = 1


def chain_markov(seed=0, vocab=VOCAB, strength=4.0):
  """A Markov target whose greedy path runs 2 -> 3 -> ... -> V-1 -> EOS, plus noise.

  Rows that start at different tokens end at different steps.
  """
  rng = np.random.default_rng(seed)
  logits = rng.normal(size=(vocab, vocab))
  for t in range(vocab):
    succ = t + 1 if 2 <= t < vocab - 1 else EOS
    logits[t, succ] += strength
  return MarkovModel(vocab), {'logits': jnp.asarray(logits, jnp.float32)}


def random_markov(seed, vocab=VOCAB, scale=2.0):
  model = MarkovModel(vocab)
  return model, model.init(jax.random.PRNGKey(seed), scale)


def tiny_transformer(seed=1, layers=2, eos_bias=0.5, vocab=VOCAB):
  """A random decoder-only transformer whose greedy rows end at different steps."""
  model = DecoderOnlyTransformer(DecoderOnlyConfig(vocab_size=vocab, num_layers=layers))
  params = model.init(jax.random.PRNGKey(seed))
  params['logits'] = params['logits'].at[:, EOS].add(eos_bias)
  return model, params


@dataclasses.dataclass(frozen=True)
class Negated:
  """An adversarial draft: the base model with negated logits (its argmax never matches)."""

  base: object

  @property
  def vocab_size(self):
    return self.base.vocab_size

  def encode(self, params, inputs):
    return self.base.encode(params, inputs)

  def decoder_prompt(self, inputs):
    return self.base.decoder_prompt(inputs)

  def init_cache(self, batch, max_len, dtype=None):
    return self.base.init_cache(batch, max_len, dtype)

  def decode(self, params, encoded, cache, tokens, positions):
    logits, cache = self.base.decode(params, encoded, cache, tokens, positions)
    return -logits, cache
