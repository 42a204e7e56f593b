"""T5 configurations (v1.0 and v1.1) as frozen dataclasses, and the named presets.

Sizes follow T5X's gin files (t5x/examples/t5/t5_1_1/*.gin and t5_1_0/*.gin).
"""
from __future__ import annotations

import dataclasses
from typing import Tuple


@dataclasses.dataclass(frozen=True)
class T5Config:
  """A T5 encoder-decoder. Hashable, so it can be a static jit argument.

  Attributes:
    vocab_size: V, the logits width (32128 for the public checkpoints: 32100 padded).
    emb_dim: D, the model width.
    num_heads: N, attention heads.
    num_encoder_layers: encoder depth.
    num_decoder_layers: decoder depth.
    head_dim: H, width of one head.
    mlp_dim: F, the MLP's hidden width.
    mlp_activations: ('gelu', 'linear') for v1.1's gated GELU, ('relu',) for v1.0.
    logits_via_embedding: True for v1.0 (tied logits scaled by 1/sqrt(D)), False for v1.1.
    dtype: activation (and cache) dtype name; params stay float32, logits are float32.
    relative_attention_num_buckets: buckets of the relative position bias.
    relative_attention_max_distance: distance beyond which all offsets share a bucket.
    t5x_rounding: round where T5X's examples network (t5x/examples/t5) rounds in a
      low-precision dtype, so that its greedy decode is reproduced op for op: the
      normalized activations before the norm's scale, the relative position bias, and
      (unless float32_attention_logits) the attention scores and softmax in `dtype`.
      Off: those stay float32. The same values in float32.
    float32_attention_logits: with t5x_rounding, attention scores and softmax in float32
      (T5X's field of that name); without t5x_rounding they always are.
    relpos_per_layer: each layer has its own relative position table, under its own
      relpos_bias (T5X's scalable_t5 and flaxformer's scanned T5 share none); else one
      table per stack, under encoder/relpos_bias and decoder/relpos_bias.
    scan_layers: the layers of each stack as one body under `jax.lax.scan` (T5X's
      `scan_layers`): params under encoder/layers and decoder/layers with a leading layer
      axis, the cache and cross-attention K/V [B, L, N, H, T] (`specjax.models.scan`).
      The same numbers as the unrolled layout (`scan.to_scanned`, `scan.to_unrolled`).
    scan_unroll: layers per iteration of the scan (1: a loop of L bodies; L: straight-line
      code of stacked params, which XLA's cost analysis counts layer by layer).
    name: the preset's registry name ('' for ad-hoc configs).
  """

  vocab_size: int = 32128
  emb_dim: int = 512
  num_heads: int = 6
  num_encoder_layers: int = 8
  num_decoder_layers: int = 8
  head_dim: int = 64
  mlp_dim: int = 1024
  mlp_activations: Tuple[str, ...] = ('gelu', 'linear')
  logits_via_embedding: bool = False
  dtype: str = 'float32'
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  t5x_rounding: bool = False
  float32_attention_logits: bool = False
  relpos_per_layer: bool = False
  scan_layers: bool = False
  scan_unroll: int = 1
  name: str = ''

  def replace(self, **changes) -> 'T5Config':
    """A copy with some fields changed (e.g. dtype='bfloat16')."""
    return dataclasses.replace(self, **changes)

  def decode_step_macs(self, cache_len: int = 0, encoder_len: int = 0) -> int:
    """Multiply-adds of one decoder step for one token, logits included.

    Projections and MLPs per layer (self-attention q, k, v, o; cross-attention q, o, its
    keys and values being computed once per input), attention over `cache_len` cached and
    `encoder_len` encoded positions, then the D x V logits. The encoder is not counted: it
    runs once per input, not once per token.

    Args:
      cache_len: T, decoder positions attended to.
      encoder_len: S, encoder positions attended to.

    Returns:
      The count, an int.
    """
    inner = self.num_heads * self.head_dim
    attention = 6 * self.emb_dim * inner + 2 * inner * (cache_len + encoder_len)
    mlp = (len(self.mlp_activations) + 1) * self.emb_dim * self.mlp_dim
    return self.num_decoder_layers * (attention + mlp) + self.emb_dim * self.vocab_size


def _v1_1(name, emb_dim, num_heads, num_layers, mlp_dim):
  return T5Config(emb_dim=emb_dim, num_heads=num_heads, num_encoder_layers=num_layers,
                  num_decoder_layers=num_layers, head_dim=64, mlp_dim=mlp_dim, name=name)


def _v1_0(name, emb_dim, num_heads, num_layers, head_dim, mlp_dim):
  return T5Config(emb_dim=emb_dim, num_heads=num_heads, num_encoder_layers=num_layers,
                  num_decoder_layers=num_layers, head_dim=head_dim, mlp_dim=mlp_dim,
                  mlp_activations=('relu',), logits_via_embedding=True, name=name)


# T5 1.1, the paper's models (target t5_xxl, drafts t5_small / t5_base / t5_large).
t5_small = _v1_1('t5_small', 512, 6, 8, 1024)
t5_base = _v1_1('t5_base', 768, 12, 12, 2048)
t5_large = _v1_1('t5_large', 1024, 16, 24, 2816)
t5_xl = _v1_1('t5_xl', 2048, 32, 24, 5120)
t5_xxl = _v1_1('t5_xxl', 4096, 64, 24, 10240)

# The original T5 (v1.0): ReLU MLP, tied logits.
t5_1_0_small = _v1_0('t5_1_0_small', 512, 8, 6, 64, 2048)
t5_1_0_base = _v1_0('t5_1_0_base', 768, 12, 12, 64, 3072)
t5_1_0_large = _v1_0('t5_1_0_large', 1024, 16, 24, 64, 4096)
t5_1_0_3b = _v1_0('t5_1_0_3b', 1024, 32, 24, 128, 16384)
t5_1_0_11b = _v1_0('t5_1_0_11b', 1024, 128, 24, 128, 65536)

# Flan-T5 (instruction-tuned T5 1.1, LM-adapted): the T5 1.1 architectures under their own
# names, so that each checkpoint has a registry name (specjax.checkpoints.registry).
flan_t5_small, flan_t5_base, flan_t5_large, flan_t5_xl, flan_t5_xxl = (
    c.replace(name=f'flan_{c.name}') for c in (t5_small, t5_base, t5_large, t5_xl, t5_xxl))

# Tiny models for tests (T5X's tiny test sizes; small vocab so that tests can enumerate).
t5_tiny = T5Config(vocab_size=32, emb_dim=8, num_heads=4, num_encoder_layers=2,
                   num_decoder_layers=2, head_dim=3, mlp_dim=16, name='t5_tiny')
t5_tiny_draft = T5Config(vocab_size=32, emb_dim=8, num_heads=2, num_encoder_layers=1,
                         num_decoder_layers=1, head_dim=4, mlp_dim=8, name='t5_tiny_draft')
t5_1_0_tiny = t5_tiny.replace(mlp_activations=('relu',), logits_via_embedding=True,
                              name='t5_1_0_tiny')

# The bundled English-German demo pair (specjax/assets/demo): a 4000-piece SentencePiece
# vocabulary padded to 4096 logits. The draft's decode step is under a tenth of the
# target's multiply-adds (`decode_step_macs`: logits 80x4096 + two narrow layers vs
# 256x4096 + four layers); its encoder, which runs once per input, is deeper.
demo_target = T5Config(vocab_size=4096, emb_dim=256, num_heads=4, num_encoder_layers=3,
                       num_decoder_layers=4, head_dim=64, mlp_dim=1024, name='demo_target')
demo_draft = T5Config(vocab_size=4096, emb_dim=80, num_heads=2, num_encoder_layers=3,
                      num_decoder_layers=2, head_dim=40, mlp_dim=256, name='demo_draft')

# The bundled man-page summarisation pair (specjax/assets/manpages): a 2000-piece
# vocabulary of English man pages padded to 2048 logits, embeddings tied to the logits
# (as T5 1.0) to keep the shipped weights small.
manpages_target = T5Config(vocab_size=2048, emb_dim=192, num_heads=3, num_encoder_layers=3,
                           num_decoder_layers=3, head_dim=64, mlp_dim=512,
                           logits_via_embedding=True, name='manpages_target')
manpages_draft = T5Config(vocab_size=2048, emb_dim=64, num_heads=2, num_encoder_layers=2,
                          num_decoder_layers=1, head_dim=32, mlp_dim=192,
                          logits_via_embedding=True, name='manpages_draft')

T5_CONFIGS = {c.name: c for c in (
    demo_target, demo_draft, manpages_target, manpages_draft,
    t5_small, t5_base, t5_large, t5_xl, t5_xxl,
    t5_1_0_small, t5_1_0_base, t5_1_0_large, t5_1_0_3b, t5_1_0_11b,
    flan_t5_small, flan_t5_base, flan_t5_large, flan_t5_xl, flan_t5_xxl,
    t5_tiny, t5_tiny_draft, t5_1_0_tiny)}
