"""An EAGLE head: one decoder layer that drafts the target's next hidden state from its last.

EAGLE drafts at the feature level. The input of the head at position t is the target's
final hidden state f[t-1] (the one whose logits chose the token at t) and the token at t,
joined by a linear map fc [2H, H]; one decoder layer of the target's family (self-attention
over the head's own cache of earlier positions, for T5 cross-attention to the target's
encoder output, MLP) and a final norm make g[t], an estimate of f[t], which the target's
own output projection
(frozen; `Model.project`) turns into the logits of the token at t + 1. Deeper drafts feed
the head its own g in place of the target's f: a chain step or a tree node reads its
parent's g. The cross-attention reads the target's last decoder layer's encoder keys and
values (`encode` computed them once per input), with the head's own query and output
projections, so the head adds nothing per input.

The verify call hands the target's hidden states of the root and the kept nodes
(`specjax.core.proposal.wants_hidden`); the head keeps them in a buffer over positions,
so that f[t-1] of every committed position t is the target's own. Each proposal starts
with a catch-up call over the last depth + 1 committed positions (the tokens the last
iteration kept, at most depth, and the new root), which rewrites the head's cache there
from the target's states instead of its own guesses (the last root's entry was written
from them already); the root's output drafts the first token.

State (per row, laid out like a cache: 'batch' and 'length' axes): the head's
self-attention K/V {'k', 'v': [B, N, Hd, T]} and the feature buffer 'feat' [B, H, T]
(feat[.., t] the target's f[t] at committed positions, the head's g above them). A row
starts from a zero feature before its first token (the first call after its prompt, a
refilled row); what the buffer and the cache hold above a row's committed positions is
never read before it is written, so sampled outputs do not depend on the batch or the
refill (a mesh test compares refilled rows with rows decoded at once).

Exact like any proposer: a chain draws each token from the head's warped distribution
(q), a tree's several children per node are point masses; the target's verify decides.
For T5 targets (`specjax.models.t5.T5`) and decoder-only ones (`specjax.models.lm.CausalLM`:
Llama, GPT-2), through their public layer pieces (`self_attention_layout`, `embed`,
`decoder_layer`, their final norm and `project`).

Shape letters: B rows, K tokens of a call, C catch-up positions, H the target's hidden
width, N heads, Hd head width, T positions, V vocab.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp

from specjax.core import proposal as proposal_lib
from specjax.core import steps, tree_draft
from specjax.models import base
from specjax.proposers.of_target import OfTarget

# The head's layer: a T5 decoder layer without the cross-attention's key and value kernels
# (it reads the target's last layer's projected encoder output).
_CROSS_READ = ('query', 'out')


def _layer_axes() -> dict:
  attention = lambda names: {n: {'kernel': ('joined_kv', 'embed') if n == 'out' else
                                 ('embed', 'joined_kv')} for n in names}
  return {'pre_self_attention_layer_norm': {'scale': ('embed',)},
          'self_attention': attention(('query', 'key', 'value', 'out')),
          'pre_cross_attention_layer_norm': {'scale': ('embed',)},
          'encoder_decoder_attention': attention(_CROSS_READ),
          'pre_mlp_layer_norm': {'scale': ('embed',)}}


@dataclasses.dataclass(frozen=True)
class EagleHead(OfTarget):
  """The EAGLE head of a `target` (params {'fc': {'kernel': [2H, H]}, 'layer': a decoder
  layer's, 'norm': the final norm's ({'scale': [H]}, GPT-2's with 'bias')}).

  Attributes:
    target: the target model (a `specjax.models.t5.T5` or `specjax.models.lm.CausalLM`:
      its layer code and projection).
  """

  target: Any

  wants_hidden = True

  def __post_init__(self):
    if not hasattr(self.target, 'decoder_layer'):
      raise ValueError('EAGLE heads draft for T5 and decoder-only (Llama, GPT-2) targets; '
                       'pass --draft medusa, layerskip:M or a draft model for this target')
    if getattr(self.target.config, 'scan_layers', False):
      raise ValueError('an EAGLE head reads its target\'s unrolled layers: decode without '
                       '--scan-layers (or convert with specjax.models.scan.as_unrolled)')
    if getattr(self.target.config, 'relpos_per_layer', False):
      raise ValueError('an EAGLE head shares its target\'s relative position table, and this '
                       'target has one per layer (a scanned T5X checkpoint\'s); pass --draft '
                       'layerskip:M, medusa or a draft model')

  @property
  def _t5(self) -> bool:
    """An encoder-decoder target (its decoder's params under 'decoder', cross-attention)."""
    return hasattr(self.target.config, 'num_decoder_layers')

  @property
  def config(self):
    """The target's config (sharding rules read sizes from it)."""
    return self.target.config

  @property
  def width(self) -> int:
    """H, the target's hidden width."""
    return self.target.config.emb_dim

  def _layers(self, tp: dict) -> tuple:
    """(the target's decoder layers' params by name, its final norm's params)."""
    if self._t5:
      return tp['decoder'], tp['decoder']['decoder_norm']
    return tp, tp['final_norm']

  def _last(self) -> str:
    cfg = self.target.config
    return f'layers_{(cfg.num_decoder_layers if self._t5 else cfg.num_layers) - 1}'

  def init(self, rng: jax.Array) -> dict:
    """Random params: the layer as a fresh decoder layer's, fc the sum of the two inputs
    (tests; training starts from `from_target`)."""
    one = (dict(num_encoder_layers=0, num_decoder_layers=1) if self._t5 else
           dict(num_layers=1))
    fresh = type(self.target)(dataclasses.replace(self.target.config, **one)).init(rng)
    layers, norm = self._layers(fresh)
    return self._assemble(layers['layers_0'], norm)

  def from_target(self, tp: dict) -> dict:
    """The params training starts from: the target's last decoder layer and final norm,
    fc the sum of the feature and the token's embedding."""
    layers, norm = self._layers(tp)
    return self._assemble(layers[self._last()], norm)

  def _assemble(self, layer: dict, norm: dict) -> dict:
    eye = jnp.eye(self.width, dtype=jnp.float32)
    layer = dict(layer)
    if self._t5:
      layer['encoder_decoder_attention'] = {
          n: layer['encoder_decoder_attention'][n] for n in _CROSS_READ}
      keep = _layer_axes()
      layer = {k: v for k, v in layer.items() if k in keep or k == 'mlp'}
    own = {'fc': {'kernel': jnp.concatenate([eye, eye], axis=0)}, 'layer': layer,
           'norm': dict(norm)}
    return jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), own)

  def param_axes(self) -> dict:
    axes = self.target.param_axes()
    if not self._t5:
      return {'fc': {'kernel': (None, 'embed')}, 'layer': axes['layers_0'],
              'norm': axes['final_norm']}
    mlp_axes = axes['decoder']['layers_0']['mlp']
    return {'fc': {'kernel': (None, 'embed')}, 'layer': {**_layer_axes(), 'mlp': mlp_axes},
            'norm': {'scale': ('embed',)}}

  def init_cache(self, batch: int, length: int, dtype: Any = None) -> dict:
    cache = self.target.init_cache(batch, length, dtype)
    return {'layers_0': cache['layers_0'] if self._t5 else cache[0],
            'feat': jnp.zeros((batch, self.width, length), jnp.float32)}

  def cache_axes(self) -> dict:
    axes = self.target.cache_axes()
    return {'layers_0': axes['layers_0'] if self._t5 else axes[0],
            'feat': ('batch', 'embed', 'length')}

  def prefill(self, params, encoded, state, prompt: jax.Array) -> dict:
    """Nothing before the first proposal: the catch-up call reads the prompt's last
    positions (with zero features where the target has given none)."""
    del params, encoded, prompt
    return state

  def run(self, params, encoded, state, tokens: jax.Array, feats: jax.Array,
          positions: jax.Array, tree: Optional[base.Tree] = None):
    """The head over tokens [B, K] with their input features feats [B, K, H] (f or g of
    the position before each): (g [B, K, H] float32, logits [B, K, V], the state with
    the layer's cache written; 'feat' untouched)."""
    target, tp = self.target, params['target']
    dtype = jnp.dtype(target.config.dtype)
    own = jax.tree.map(lambda a: a.astype(dtype), params['own'])
    cache = state['layers_0']
    layout = target.self_attention_layout(tp, positions, tokens.shape[1],
                                          cache['k'].shape[-1], tree)
    embedded = (target.embed(tp, tokens) if self._t5 else
                target.embed(tp, tokens, layout.query_pos))
    x = jnp.concatenate([feats.astype(dtype), embedded], axis=-1)
    x = x @ own['fc']['kernel']  # [B, K, H]
    if self._t5:
      enc = encoded['target']
      x, cache = target.decoder_layer(own['layer'], x, cache, layout,
                                      enc['cross'][self._last()], enc['mask'])
      g = target.rms_norm(x, own['norm']['scale'])
    else:
      x, cache = target.decoder_layer(own['layer'], x, cache, layout)
      g = target.final_norm(own['norm'], x)
    return g.astype(jnp.float32), target.project(tp, g), {**state, 'layers_0': cache}

  def catch_up(self, params, encoded, state, seq: jax.Array, pos: jax.Array, depth: int):
    """The call over the C = depth + 1 positions ending at each row's root (from 0 where
    there are fewer), each from the target's f of the position before: (the logits after
    the root [B, V], the state with the root's g at feat[.., pos])."""
    count = depth + 1
    start = jnp.maximum(pos - count + 1, 0)  # [B]
    at = start[:, None] + jnp.arange(count)[None]  # [B, C]
    width = seq.shape[1]
    tokens = jnp.take_along_axis(seq, jnp.minimum(at, width - 1), axis=1)
    before = jnp.take_along_axis(state['feat'], jnp.maximum(at - 1, 0)[:, None], axis=2)
    feats = jnp.where((at >= 1)[:, None], before, 0.0).transpose(0, 2, 1)  # [B, C, H]
    g, logits, state = self.run(params, encoded, state, tokens, feats, start)
    root = (pos - start)[:, None, None]
    g_root = jnp.take_along_axis(g, root, axis=1)  # [B, 1, H]
    feat = base.write_cache(state['feat'], g_root.transpose(0, 2, 1), pos)
    return jnp.take_along_axis(logits, root, axis=1)[:, 0], {**state, 'feat': feat}

  def _scores(self, params, encoded, root_logits: jax.Array):
    """The chain and tree builders' scores: their catch-up call (two tokens) gets the
    root's logits (computed by `catch_up`); a chain step or tree nodes run the head from
    their parent's g, and write theirs where the K/V go."""
    def decode(state, tokens, positions, tree=None):
      if tree is None and tokens.shape[1] == 2:
        return jnp.broadcast_to(root_logits[:, None], root_logits.shape[:1] + (2,) +
                                root_logits.shape[1:]), state
      if tree is None:  # a chain step at positions: its parent sits at the slot before
        parent = positions[:, None] - 1 + jnp.arange(tokens.shape[1])[None]  # [B, K]
        write = positions
      else:
        slots = tree.offset[:, None] + jnp.arange(tokens.shape[1])[None]  # [B, K]
        depth = jnp.take_along_axis(tree.depth, slots, axis=1)  # [B, K]
        is_parent = tree.visible & (tree.depth[:, None, :] == depth[:, :, None] - 1)
        parent = tree.base[:, None] + jnp.argmax(is_parent, axis=-1)  # [B, K] cache slots
        write = tree.base + tree.offset
      feats = jnp.take_along_axis(state['feat'], parent[:, None], axis=2).transpose(0, 2, 1)
      g, logits, state = self.run(params, encoded, state, tokens, feats, positions, tree)
      feat = base.write_cache(state['feat'], g.transpose(0, 2, 1), write)
      return logits, {**state, 'feat': feat}
    return decode

  def propose(self, params, encoded, state, seq: jax.Array, pos: jax.Array, keys, sampling,
              cfg, active: Optional[jax.Array] = None) -> proposal_lib.Proposal:
    """A chain of cfg.gamma drafts, or the tree cfg.tree (static or dynamic)."""
    del active
    depth = cfg.tree.depth_count if cfg.tree is not None else cfg.gamma
    # The head's params in the compute dtype once per proposal, not in each of its calls
    # (`run` casts them again, a no-op then).
    dtype = jnp.dtype(self.target.config.dtype)
    params = {**params, 'own': jax.tree.map(lambda a: a.astype(dtype), params['own'])}
    root_logits, state = self.catch_up(params, encoded, state, seq, pos, depth)
    scorer = proposal_lib.Scorer(self._scores(params, encoded, root_logits))
    if cfg.tree is not None:
      p = tree_draft.propose(scorer, state, seq, pos, keys, sampling, cfg)
      return p._replace(slots=None, scratch=0)
    d = steps.draft_block(scorer, state, seq, pos, keys, sampling, cfg)
    return proposal_lib.chain(d.x, d.q, d.cache, d.nonfinite, d.confidence)

  def accepted(self, state, proposal, path, n, pos, hidden=None) -> dict:
    """The target's f of the root and the kept nodes go to feat at pos .. pos + n (the
    rest of the D + 1 written above them is overwritten before it is read)."""
    del proposal, path, n
    if hidden is None:
      return state
    feat = base.write_cache(state['feat'], hidden.astype(jnp.float32).transpose(0, 2, 1),
                            pos)
    return {**state, 'feat': feat}

