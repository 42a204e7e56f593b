"""Configs of decoder-only language models (Llama family, GPT-2) and their named presets.

One frozen dataclass describes both families; `family` decides the block: 'llama' is
RMSNorm, rotary positions, SwiGLU and grouped-query attention, 'gpt2' is LayerNorm with
biases, learned absolute positions, a GELU MLP and biased projections. Letters of docs/design.md:
V vocab, D model dim, N query heads, M KV heads, H head dim, F mlp dim, L layers.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional

FAMILIES = ('llama', 'gpt2')
ROPE_TYPES = ('default', 'linear', 'llama3')
ACTIVATIONS = ('silu', 'gelu_new', 'gelu', 'relu')


@dataclasses.dataclass(frozen=True)
class LMConfig:
  """Sizes and choices of a decoder-only transformer.

  Attributes:
    family: 'llama' or 'gpt2' (see the module docstring).
    vocab_size: V.
    emb_dim: D.
    num_heads: N, query heads.
    num_kv_heads: M, key/value heads (M divides N; M < N is grouped-query attention).
    head_dim: H.
    num_layers: L.
    mlp_dim: F.
    activation: the MLP's ('silu' gated for llama; 'gelu_new' is GPT-2's tanh GELU).
    norm_eps: epsilon of RMSNorm / LayerNorm.
    tie_embeddings: logits through the token embedding (no separate lm_head).
    attention_bias: biases on the q/k/v/out projections (always on for gpt2).
    mlp_bias: biases on the MLP projections (always on for gpt2).
    rope_theta: base of the rotary frequencies.
    rope_type: 'default', 'linear' or 'llama3' (Hugging Face's rope_scaling.rope_type).
    rope_factor: the scaling factor of 'linear' and 'llama3'.
    rope_low_freq_factor, rope_high_freq_factor, rope_original_max_len: 'llama3' only.
    max_len: positions the model knows: GPT-2's learned table size (a hard limit); for
      rotary models only recorded (max_position_embeddings).
    bos_id: the beginning-of-sequence token (None: the tokenizer adds none).
    eos_id: the end-of-sequence token: a row is done once it emits it.
    pad_id: pads prompts and follows EOS in outputs (a token no prompt ends with).
    dtype: activations and caches.
    scan_layers: the layers as one body under `jax.lax.scan` (`specjax.models.scan`):
      params under `layers` with a leading layer axis, the cache {'layers': {'k', 'v':
      [B, L, M, H, T]}}; the same numbers as the unrolled layout.
    scan_unroll: layers per iteration of the scan (1: a loop of L bodies; L: straight-line
      code of stacked params, which XLA's cost analysis counts layer by layer).
    name: the preset's name, if any.
  """

  family: str = 'llama'
  vocab_size: int = 32
  emb_dim: int = 16
  num_heads: int = 4
  num_kv_heads: int = 2
  head_dim: int = 4
  num_layers: int = 2
  mlp_dim: int = 32
  activation: str = 'silu'
  norm_eps: float = 1e-5
  tie_embeddings: bool = False
  attention_bias: bool = False
  mlp_bias: bool = False
  rope_theta: float = 10000.0
  rope_type: str = 'default'
  rope_factor: float = 1.0
  rope_low_freq_factor: float = 1.0
  rope_high_freq_factor: float = 4.0
  rope_original_max_len: int = 8192
  max_len: int = 2048
  bos_id: Optional[int] = None
  eos_id: int = 1
  pad_id: int = 0
  dtype: str = 'float32'
  scan_layers: bool = False
  scan_unroll: int = 1
  name: str = ''

  def __post_init__(self):
    if self.family not in FAMILIES:
      raise ValueError(f'model family {self.family!r} is not supported; use one of {FAMILIES}')
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f'{self.num_heads} query heads do not split into groups over '
                       f'{self.num_kv_heads} KV heads; num_key_value_heads must divide '
                       'num_attention_heads')
    if self.rope_type not in ROPE_TYPES:
      raise ValueError(f'rope scaling {self.rope_type!r} is not supported; use one of '
                       f'{ROPE_TYPES}')
    if self.activation not in ACTIVATIONS:
      raise ValueError(f'activation {self.activation!r} is not supported; use one of '
                       f'{ACTIVATIONS}')

  def replace(self, **changes) -> 'LMConfig':
    """A copy with some fields changed."""
    return dataclasses.replace(self, **changes)

  @property
  def rotary(self) -> bool:
    """Rotary positions (llama) rather than a learned table (gpt2)."""
    return self.family == 'llama'

  @property
  def gated(self) -> bool:
    """A gated MLP: down(act(gate(x)) * up(x)) (llama)."""
    return self.family == 'llama'

  @property
  def biases(self) -> Dict[str, bool]:
    """Which projections carry a bias: {'attention': ..., 'mlp': ...}."""
    gpt2 = self.family == 'gpt2'
    return {'attention': gpt2 or self.attention_bias, 'mlp': gpt2 or self.mlp_bias}


def _llama3(**kw) -> LMConfig:
  base = dict(family='llama', vocab_size=128256, activation='silu', norm_eps=1e-5,
              rope_theta=500000.0, rope_type='llama3', rope_factor=8.0,
              rope_low_freq_factor=1.0, rope_high_freq_factor=4.0,
              rope_original_max_len=8192, max_len=131072, bos_id=128000, eos_id=128001,
              pad_id=128001, head_dim=128)
  return LMConfig(**dict(base, **kw))


# Shapes of the public checkpoints (weights are loaded from a Hugging Face directory).
llama3_8b = _llama3(name='llama3_8b', emb_dim=4096, num_heads=32, num_kv_heads=8,
                    num_layers=32, mlp_dim=14336)
llama3_2_1b = _llama3(name='llama3_2_1b', emb_dim=2048, num_heads=32, num_kv_heads=8,
                      head_dim=64, num_layers=16, mlp_dim=8192, rope_factor=32.0,
                      tie_embeddings=True)
gpt2 = LMConfig(name='gpt2', family='gpt2', vocab_size=50257, emb_dim=768, num_heads=12,
                num_kv_heads=12, head_dim=64, num_layers=12, mlp_dim=3072,
                activation='gelu_new', tie_embeddings=True, max_len=1024, eos_id=50256,
                pad_id=50256)
# Tiny random pairs for tests and smoke runs.
llama_tiny = LMConfig(name='llama_tiny', vocab_size=32, emb_dim=32, num_heads=4,
                      num_kv_heads=2, head_dim=8, num_layers=2, mlp_dim=64)
llama_tiny_draft = LMConfig(name='llama_tiny_draft', vocab_size=32, emb_dim=16, num_heads=2,
                            num_kv_heads=1, head_dim=8, num_layers=1, mlp_dim=32)
# The bundled decoder-only pair (man-page continuation, `specjax.demo.continuation`): the
# man-page pair's 2000-piece vocabulary, logits padded to 2048; no BOS, pad 0, eos 1.
manlm_target = LMConfig(name='manlm_target', vocab_size=2048, emb_dim=256, num_heads=4,
                        num_kv_heads=2, head_dim=64, num_layers=4, mlp_dim=704,
                        tie_embeddings=True, max_len=256)
manlm_draft = LMConfig(name='manlm_draft', vocab_size=2048, emb_dim=128, num_heads=2,
                       num_kv_heads=1, head_dim=64, num_layers=1, mlp_dim=384,
                       tie_embeddings=True, max_len=256)

LM_CONFIGS: Dict[str, LMConfig] = {c.name: c for c in (
    llama3_8b, llama3_2_1b, gpt2, llama_tiny, llama_tiny_draft, manlm_target, manlm_draft)}
