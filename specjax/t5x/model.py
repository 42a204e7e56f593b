"""SpeculativeEncoderDecoderModel: T5X's EncoderDecoderModel that predicts speculatively.

T5X's cached decode feeds one token per call, so a T5X `decode_fn` cannot verify gamma
draft tokens at once. This subclass overrides `predict_batch_with_aux` instead (the pattern
of t5x/contrib/calm) and runs specjax's decode on T5X's own params: a T5X T5 (the examples
network, or flaxformer's unscanned T5 1.1) has exactly the param tree of
`specjax.models.t5.T5`. The draft's params live in the same tree under `DRAFT_KEY`, so
T5X's partitioner shards them with its rules; `specjax.t5x.restore.fill_draft` fills them
from the draft's checkpoint when a target-only checkpoint is restored. The draft is a
model, trained heads on the target's hidden states (EAGLE, Medusa), the target's own
first layers, a draft with no model and no params (copy, suffix, lookahead, a REST
datastore, whose arrays are constants of the decode), or a cascade of a draft model and
one of those (`specjax.t5x.draft_kind`). Training, scoring
and evaluation losses are the parent's, on the target alone. Shape letters: B examples,
N decodes per example, S input length, L decoder length.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, MutableMapping, Optional, Tuple

import flax
import jax
import jax.numpy as jnp
from flax import traverse_util
from flax.linen import partitioning as flax_partitioning
from t5x import decoding as t5x_decoding
from t5x import models

from specjax import checkpoints
from specjax.checkpoints import t5x_scanned
from specjax.core import api
from specjax.core.rule import VerificationRule
from specjax.models.t5 import T5
from specjax.t5x import decode_settings, decoding, draft_kind as draft_kinds
from specjax.t5x import restore, run_stats

PyTree = Any
DRAFT_KEY = restore.DRAFT_KEY
_SAMPLING_KEYS = ('temperature', 'topk', 'topp')


def specjax_params(module, params: PyTree) -> PyTree:
  """A T5X module's params in specjax's layout: a scanned module's
  (`checkpoints.t5x_scanned.from_t5x`; jittable), others' as they are."""
  if getattr(module, 'scan_layers', False) and t5x_scanned.is_t5x_scanned(params):
    return t5x_scanned.from_t5x(params)
  return params


def specjax_t5(module, params: PyTree, t5x_rounding: bool = True) -> T5:
  """The specjax T5 that computes what the T5X module `module` computes with `params`.

  Sizes come from the params' shapes; activation dtype, MLP activations, tied logits and
  float32_attention_logits from the module's config where it has one (t5x/examples/t5
  `T5Config`). `t5x_rounding` rounds where T5X's network rounds in bfloat16
  (`specjax.models.t5_config.T5Config.t5x_rounding`; docs/bfloat16.md); float32 is the
  same either way.

  A scanned module (T5X's scalable_t5, `scan_layers=True`) gives a scanned T5 with a
  relative position table per layer, whose params are `specjax_params`'.

  Raises:
    ValueError: params that are not a T5 tree of T5X's names (one line).
  """
  params = specjax_params(module, params)
  fix = ('speculative prediction runs T5X T5 modules with the param tree of '
         't5x/examples/t5 or t5x/examples/scalable_t5 (token_embedder, encoder, decoder)')
  try:
    config = checkpoints.config_from_params(params)
  except (KeyError, TypeError, AttributeError) as e:
    raise ValueError(f'{type(module).__name__} params are not a T5 tree ({e!r} missing); '
                     f'{fix}') from e
  t5x_config = getattr(module, 'config', None)
  changes = {}
  dtype = getattr(t5x_config, 'dtype', None) or getattr(module, 'dtype', None)
  if dtype is not None:
    changes['dtype'] = jnp.dtype(dtype).name
  for field in ('mlp_activations', 'logits_via_embedding', 'float32_attention_logits'):
    if hasattr(t5x_config, field):
      value = getattr(t5x_config, field)
      changes[field] = tuple(value) if field == 'mlp_activations' else bool(value)
  changes['t5x_rounding'] = bool(t5x_rounding)
  model = T5(config.replace(**changes))
  try:
    checkpoints.check_params(params, jax.eval_shape(model.init, jax.random.PRNGKey(0)),
                             model.config)
  except ValueError as e:
    raise ValueError(f'{type(module).__name__} params differ from a T5\'s ({e}); '
                     f'{fix}') from e
  return model


def axes_collection(param_axes: PyTree) -> PyTree:
  """specjax's logical axes ({..., 'kernel': ('embed', 'mlp')}) as flax's `params_axes`
  collection ({..., 'kernel_axes': AxisMetadata(names=('embed', 'mlp'))}), which T5X's
  partitioner reads."""
  flat = traverse_util.flatten_dict(param_axes, is_leaf=lambda _, x: isinstance(x, tuple))
  return traverse_util.unflatten_dict({
      key[:-1] + (f'{key[-1]}_axes',): flax_partitioning.AxisMetadata(names=tuple(axes))
      for key, axes in flat.items()})


class SpeculativeEncoderDecoderModel(models.EncoderDecoderModel):
  """T5X's EncoderDecoderModel whose predictions are specjax's speculative decode.

  Same constructor as EncoderDecoderModel, whose `decode_fn` must be T5X's
  `temperature_sample` (the speculative decode replaces it and keeps its settings:
  `specjax.t5x.decode_settings`; a beam-search model is refused in one line), plus:
    draft_module: the draft's T5X network module (gin-configured like the target's); None
      builds a specjax T5 of the draft checkpoint's architecture instead.
    draft_checkpoint_path: the draft's checkpoint (T5X msgpack + zarr or Orbax, Hugging
      Face, specjax), or the directory of trained heads, read when T5X restores a
      checkpoint without the draft (`specjax.t5x.restore.fill_draft`) and, without
      draft_module, for its shapes.
    draft_kind: 'model' (a draft model), 'eagle' or 'medusa' (heads that `python -m
      specjax.train_draft` trained, at draft_checkpoint_path), 'layerskip:M' (the
      target's first M decoder layers: no module; no checkpoint, or the early exit
      `train_draft --kind layerskip` trained at draft_checkpoint_path), with no
      module, checkpoint or params 'copy', 'suffix', 'lookahead[:W,N,G]', 'rest:DIR' or
      'rest:DIR+suffix' (DIR a datastore, checked against output_vocabulary), or a
      cascade of the draft model and one of those, 'cascade:model/CHEAP[/K[/C]]' or
      'cascade:model:K,CHEAP'; `--draft`'s names (`specjax.t5x.draft_kind`).
    gamma: draft tokens per target call.
    temperature, topk, topp, max_decode_steps: the sampling defaults, T5X's conventions
      (temperature at most 1e-4 is greedy; topk 1, temperature_sample's default, is the
      argmax; topk 0 and topp 0 keep every token); None takes the model's own
      temperature_sample setting (its gin bindings or partial, else T5X's defaults);
      `decoder_params` override temperature, topk and topp per call.
    verification, draft_threshold, threshold_rule, lenience: the verification rule, the
      fields of `python -m specjax.decode`'s config of the same names
      (`specjax.core.rule.VerificationRule`).
    tree: a token tree verified in one target call instead of a chain of gamma drafts:
      children per depth ('4,2,2,1', as `--tree`), or a `specjax.core.tree.DynamicTree`;
      gamma is then the tree's depth. None: a chain. 'suffix' and 'rest' take a chain or
      a DynamicTree, 'copy' a chain or children per depth, a cascade a chain; 'lookahead'
      verifies its own tree (leave this None).
    t5x_rounding: compute in bfloat16 as T5X's network does (rounding its norms, position
      bias and attention where T5X does; docs/bfloat16.md); float32 is unaffected.
  """

  def __init__(self, module, input_vocabulary, output_vocabulary, optimizer_def,
               decode_fn=t5x_decoding.temperature_sample, feature_converter_cls=None,
               label_smoothing: float = 0.0, z_loss: float = 0.0,
               loss_normalizing_factor=None, default_decoder_params=None, *,
               draft_module=None, draft_checkpoint_path: Optional[str] = None,
               gamma: int = 4, temperature: Optional[float] = None,
               topk: Optional[int] = None, topp: Optional[float] = None,
               max_decode_steps: Optional[int] = None, verification: str = 'token',
               draft_threshold: float = 0.0, threshold_rule: str = 'token',
               lenience: float = 1.0, tree=None, t5x_rounding: bool = True,
               draft_kind: str = draft_kinds.MODEL):
    super().__init__(module, input_vocabulary, output_vocabulary, optimizer_def,
                     decode_fn=decode_fn, feature_converter_cls=feature_converter_cls,
                     label_smoothing=label_smoothing, z_loss=z_loss,
                     loss_normalizing_factor=loss_normalizing_factor,
                     default_decoder_params=default_decoder_params)
    # Everything is checked here, when gin builds the model, before any restore.
    config = getattr(module, 'config', None)
    self.draft_kind = draft_kinds.parse(
        draft_kind, draft_module, draft_checkpoint_path,
        getattr(config, 'num_decoder_layers', None), vocabulary=output_vocabulary,
        vocab_size=getattr(config, 'vocab_size', None))
    if not isinstance(gamma, int) or isinstance(gamma, bool) or gamma < 1:
      raise ValueError(f'GAMMA (speculative.from_model.gamma) must be an integer >= 1 (draft '
                       f'tokens per target call), got {gamma!r}')
    try:  # the decode checks the rule again against its sampling mode
      self.rule = VerificationRule(verification, draft_threshold, threshold_rule,
                                   lenience).checked(greedy=False)
    except ValueError as e:
      raise ValueError(f'speculative.from_model: {e}') from None
    try:
      self.tree = self.draft_kind.tree(api.tree_shape(tree))  # lookahead's own, or tree
    except ValueError as e:
      raise ValueError(f'speculative.from_model.tree: {e}') from None
    if self.tree is not None and (self.rule.verification != 'token' or
                                  self.rule.draft_threshold > 0.0):
      drop = 'or drop the tree' if tree is not None else f'as DRAFT_KIND {draft_kind!r} needs'
      raise ValueError('speculative.from_model.tree: a tree is verified by the tree rule; '
                       f'leave verification and draft_threshold unbound, {drop}')
    settings = decode_settings.sampling_settings(decode_fn)
    given = dict(temperature=temperature, topk=topk, topp=topp,
                 max_decode_steps=max_decode_steps)
    settings.update({k: v for k, v in given.items() if v is not None})
    self.max_decode_steps = settings.pop('max_decode_steps')
    self.sampling_defaults = settings
    self.draft_kind.check_gamma(gamma)
    if self.draft_kind.has_model and draft_module is None:
      try:  # the draft's architecture, and a bad path fails now, not after the restore
        restore.read_draft(draft_checkpoint_path)
      except (ValueError, FileNotFoundError, OSError) as e:
        raise ValueError(f'DRAFT_CHECKPOINT_PATH {draft_checkpoint_path!r}: '
                         f'{" ".join(str(e).split())}') from None
    self.draft_module = draft_module
    self.draft_checkpoint_path = draft_checkpoint_path
    self.gamma = gamma
    self.t5x_rounding = bool(t5x_rounding)
    self.run_stats = run_stats.RunStats()  # what speculation did, batch by batch

  # ------------------------------------------------------------------- params and models

  def _draft_variables(self, rng, input_shapes, input_types,
                       target_params: PyTree) -> Mapping[str, PyTree]:
    """The draft's initial {'params', 'params_axes'}."""
    if not self.draft_kind.has_model:  # heads: their shapes follow the target's
      heads = self.draft_kind.proposer(specjax_t5(self.module, target_params))
      return {'params': heads.init(rng), 'params_axes': axes_collection(heads.param_axes())}
    if self.draft_module is not None:
      plain = models.EncoderDecoderModel(self.draft_module, self.input_vocabulary,
                                         self.output_vocabulary, optimizer_def=None)
      return flax.core.unfreeze(plain.get_initial_variables(rng, input_shapes, input_types))
    config, _ = restore.read_draft(self.draft_checkpoint_path)
    draft = T5(config)
    return {'params': draft.init(rng), 'params_axes': axes_collection(draft.param_axes())}

  def get_initial_variables(self, rng, input_shapes, input_types=None):
    """The target's initial variables with the draft's added under `DRAFT_KEY` (none for a
    layer-skip draft, which reads the target's, nor for suffix, lookahead and rest)."""
    variables = flax.core.unfreeze(super().get_initial_variables(rng, input_shapes,
                                                                 input_types))
    if not self.draft_kind.has_params:
      return flax.core.freeze(variables)
    draft = self._draft_variables(jax.random.fold_in(rng, 1), input_shapes, input_types,
                                  variables['params'])
    variables['params'][DRAFT_KEY] = draft['params']
    if 'params_axes' in variables:
      variables['params_axes'][DRAFT_KEY] = draft['params_axes']
    return flax.core.freeze(variables)

  def specjax_models(self, params: PyTree) -> Tuple[T5, Any]:
    """(target, draft) from the shapes of a params tree: specjax T5 models, or the target
    and the proposer that drafts from it (heads, layer-skip, a cascade around the draft
    model, ...)."""
    target_params, draft_params = decoding.split_params(params, DRAFT_KEY)
    target = specjax_t5(self.module, target_params, self.t5x_rounding)
    if not self.draft_kind.has_model:
      return target, self.draft_kind.proposer(target)
    if self.draft_module is not None:
      draft = specjax_t5(self.draft_module, draft_params, self.t5x_rounding)
    else:  # the draft computes in the target's activation dtype
      draft = T5(specjax_t5(None, draft_params, self.t5x_rounding).config.replace(
          dtype=target.config.dtype))
    return target, self.draft_kind.around(target, draft)  # a cascade's, or the model

  def _compute_logits(self, params, batch, dropout_rng=None, mutable=False,
                      other_variables=None):
    """The parent's (training, scoring, eval loss), on the target's params alone."""
    if DRAFT_KEY in params:
      params = decoding.split_params(params, DRAFT_KEY)[0]
    return super()._compute_logits(params, batch, dropout_rng=dropout_rng, mutable=mutable,
                                   other_variables=other_variables)

  # -------------------------------------------------------------------------- predict

  def predict_batch_with_aux(
      self, params: PyTree, batch: Mapping[str, jnp.ndarray], rng: Optional[jax.Array] = None,
      decoder_params: Optional[MutableMapping[str, Any]] = None,
      return_all_decodes: Optional[bool] = None, num_decodes: Optional[int] = None,
      prompt_with_targets: bool = False) -> Tuple[jnp.ndarray, Mapping[str, jnp.ndarray]]:
    """Predicts speculatively: the target's own output (greedy) or distribution (sampled).

    Args:
      params: the model's params, the draft's under `DRAFT_KEY`.
      batch: T5X's batch: `encoder_input_tokens` [B, S] and `decoder_input_tokens` [B, L]
        (only its length L is used).
      rng: the decode's PRNG key (as `decoder_params['decode_rng']`).
      decoder_params: T5X's run-time decoder params: temperature (scalar or [B]), topk,
        topp, eos_id, decode_rng.
      return_all_decodes: return all N decodes per example (default from
        `default_decoder_params`).
      num_decodes: N samples per example.
      prompt_with_targets: not supported (raises).

    Returns:
      (decodes, aux): decodes [B, N, L] sorted by score, best last (or [B, L], the best,
      without return_all_decodes); aux 'scores' ([B, N] or [B]: the target's
      log-probability of each decode) and per-example [B] 'alpha', 'tokens_per_call' and
      'target_calls'.

    Raises:
      ValueError: prompt_with_targets, an rng given twice, or decoder params that
        speculative decoding does not take (one line each).
    """
    if prompt_with_targets:
      raise ValueError('prompt_with_targets is not supported by speculative prediction; '
                       'use EncoderDecoderModel for forced decoder prompts')
    if return_all_decodes is None:
      return_all_decodes = self._default_decoder_params.return_all_decodes
    if num_decodes is None:
      num_decodes = self._default_decoder_params.num_decodes
    decoder_params = dict(decoder_params or {})
    if rng is not None:
      if decoder_params.get('decode_rng') is not None:
        raise ValueError('got an rng both as `rng` and as decoder_params["decode_rng"]; '
                         'pass one')
      decoder_params['decode_rng'] = rng
    knobs = {k: decoder_params.pop(k, v) for k, v in self.sampling_defaults.items()}
    eos_id = decoder_params.pop('eos_id', self.output_vocabulary.eos_id or 1)
    decode_rng = decoder_params.pop('decode_rng', None)
    if decoder_params:
      raise ValueError(f'decoder params {sorted(decoder_params)} are not supported by '
                       f'speculative prediction; pass only {", ".join(_SAMPLING_KEYS)}, '
                       'eos_id and decode_rng')
    target, draft = self.specjax_models(params)
    target_params, draft_params = decoding.split_params(params, DRAFT_KEY)
    target_params = specjax_params(self.module, target_params)
    if self.draft_module is not None:
      draft_params = specjax_params(self.draft_module, draft_params)
    draft_params = self.draft_kind.draft_params(target, draft_params)  # + a datastore's
    length = batch['decoder_input_tokens'].shape[1]  # L
    steps = length if self.max_decode_steps is None else min(length,
                                                             int(self.max_decode_steps))
    prediction = decoding.predict(
        target, target_params, draft, draft_params, batch['encoder_input_tokens'],
        max_decode_len=steps, gamma=self.gamma, num_decodes=num_decodes,
        sampling=decoding.sampling_from_t5x(num_decodes=num_decodes, **knobs),
        rng=decode_rng, eos_id=int(eos_id), tree=self.tree, **dataclasses.asdict(self.rule))
    decodes = jnp.pad(prediction.decodes, ((0, 0), (0, 0), (0, length - steps)))  # [B, N, L]
    jax.debug.callback(self.run_stats.add, prediction.totals)  # logged, and written
    aux = dict(prediction.aux)
    if return_all_decodes:
      aux['scores'] = prediction.scores
      return decodes, aux
    aux['scores'] = prediction.scores[:, -1]
    return decodes[:, -1, :], aux


def from_model(model: models.EncoderDecoderModel, *, draft_module=None,
               draft_checkpoint_path: Optional[str] = None, gamma: int = 4,
               temperature: Optional[float] = None, topk: Optional[int] = None,
               topp: Optional[float] = None, max_decode_steps: Optional[int] = None,
               verification: str = 'token', draft_threshold: float = 0.0,
               threshold_rule: str = 'token', lenience: float = 1.0, tree=None,
               t5x_rounding: bool = True,
               draft_kind: str = draft_kinds.MODEL) -> SpeculativeEncoderDecoderModel:
  """The speculative version of a configured EncoderDecoderModel: the same module,
  vocabularies, optimizer, losses, feature converter and default decoder params (what
  `specjax/t5x/configs/speculative.gin` wraps any T5 model gin's MODEL with).

  Args:
    model: the target's EncoderDecoderModel, as its gin file builds it.
    draft_module, draft_checkpoint_path, gamma, temperature, topk, topp,
      max_decode_steps, verification, draft_threshold, threshold_rule, lenience, tree,
      t5x_rounding, draft_kind: as
      SpeculativeEncoderDecoderModel (None: the model's own temperature_sample setting).

  Raises:
    ValueError: the model decodes with beam search or another decode_fn, or a setting is
      out of range (one line naming the gin binding).
  """
  return SpeculativeEncoderDecoderModel(
      model.module, model.input_vocabulary, model.output_vocabulary, model.optimizer_def,
      decode_fn=model.decode_fn, feature_converter_cls=model.FEATURE_CONVERTER_CLS,
      label_smoothing=getattr(model, '_label_smoothing', 0.0),
      z_loss=getattr(model, '_z_loss', 0.0),
      loss_normalizing_factor=getattr(model, '_loss_normalizing_factor', None),
      default_decoder_params=getattr(model, '_default_decoder_params', None),
      draft_module=draft_module, draft_checkpoint_path=draft_checkpoint_path, gamma=gamma,
      temperature=temperature, topk=topk, topp=topp, max_decode_steps=max_decode_steps,
      verification=verification,
      draft_threshold=draft_threshold, threshold_rule=threshold_rule, lenience=lenience,
      tree=tree, t5x_rounding=t5x_rounding, draft_kind=draft_kind)
