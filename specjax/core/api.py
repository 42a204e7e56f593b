"""The public decode calls: `speculative_decode` and `autoregressive_decode`.

Both check their arguments on the host (one-line ValueErrors), build (once) the `Decoder`
of their configuration and call it: on one device or a mesh, a fixed batch or a refilled
stream of inputs through `slots` rows, the same loop runs. Shape letters: N inputs,
S input width, L max_decode_len.
"""
from __future__ import annotations

import functools
from typing import Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import decoder as decoder_lib
from specjax.core.rule import VerificationRule
from specjax.core.sampling import SamplingConfig, SamplingMode, SamplingParams
from specjax.core.state import DecodeOutput, LoopConfig
from specjax.core.tree import DynamicTree, TreeShape
from specjax.parallel import rules as axis_rules

Sampling = Union[SamplingConfig, Sequence[SamplingConfig], SamplingParams]


def _check_inputs(inputs, max_decode_len) -> None:
  """Raises one-line ValueErrors for a bad max_decode_len or inputs that are not 2-D."""
  if not isinstance(max_decode_len, (int, np.integer)) or max_decode_len < 1:
    raise ValueError(f'max_decode_len must be an integer >= 1, got {max_decode_len!r}')
  if getattr(inputs, 'ndim', None) != 2:
    raise ValueError(f'inputs must be a [batch, length] integer array, got shape '
                     f'{getattr(inputs, "shape", None)}')
  if 0 in inputs.shape:
    raise ValueError(f'inputs of shape {tuple(inputs.shape)} hold no input; pass at least one '
                     'row of at least one token')


def _check_ids(inputs, num: int, vocab_size: int, pad_id: int) -> None:
  """Refuses ids outside [0, V) and rows that hold only padding, before anything runs.

  The first `num` rows are checked (the others are never decoded). Traced inputs (a decode
  inside an outer jit) cannot be read and are not checked.
  """
  if isinstance(inputs, jax.core.Tracer):
    return
  rows = np.asarray(jax.device_get(inputs))[:num]
  bad = np.argwhere((rows < 0) | (rows >= vocab_size))
  if len(bad):
    row, col = (int(i) for i in bad[0])
    raise ValueError(f'input row {row} holds id {int(rows[row, col])} at position {col}, '
                     f'outside the model\'s vocabulary [0, {vocab_size}); tokenize the '
                     'inputs with the model\'s own vocabulary')
  empty = np.flatnonzero(~np.any(rows != pad_id, axis=1))
  if len(empty):
    raise ValueError(f'input row {int(empty[0])} holds only padding (id {pad_id}); drop it, '
                     'or decode only the rows before it (num_inputs)')


def _check_pair(target, draft, gamma) -> None:
  """Raises one-line ValueErrors for a bad gamma or a draft with another vocabulary."""
  if not isinstance(gamma, (int, np.integer)) or gamma < 1:
    raise ValueError(f'gamma must be an integer >= 1 (draft tokens per target call), '
                     f'got {gamma!r}')
  if target.vocab_size != draft.vocab_size:
    raise ValueError(f'target and draft vocab sizes differ ({target.vocab_size} vs '
                     f'{draft.vocab_size}); use a draft trained on the target\'s vocabulary')


def _check_call(inputs, num: int, num_inputs, row_ids, rng, eos_id, pad_id,
                vocab_size: int) -> None:
  """One-line ValueErrors for arguments of the wrong kind, shape or range: float or bool
  ids, num_inputs < 0, row_ids that are not [N] integers, an rng that is not a PRNG key,
  eos or pad ids outside the vocabulary."""
  dtype = np.dtype(getattr(inputs, 'dtype', np.int32))
  if not np.issubdtype(dtype, np.integer):
    raise ValueError(f'inputs must hold integer token ids, got dtype {dtype}; tokenize them '
                     '(int32)')
  if num_inputs is not None and (isinstance(num_inputs, bool) or not isinstance(
      num_inputs, (int, np.integer)) or num_inputs < 0):
    raise ValueError(f'num_inputs must be an integer >= 0 (the leading inputs to decode), '
                     f'got {num_inputs!r}')
  if row_ids is not None:
    ids_dtype = np.dtype(getattr(row_ids, 'dtype', np.asarray(row_ids).dtype))
    if np.shape(row_ids) != (num,) or not np.issubdtype(ids_dtype, np.integer):
      raise ValueError(f'row_ids must be [{num}] integers (one run index per input row), got '
                       f'shape {np.shape(row_ids)} of {ids_dtype}')
  if rng is not None:
    kind = getattr(rng, 'dtype', None)
    typed = kind is not None and jax.dtypes.issubdtype(kind, jax.dtypes.prng_key)
    raw = kind == np.uint32 and np.ndim(rng) == 1  # jax.random.PRNGKey's uint32 words
    if not (typed and np.ndim(rng) == 0) and not raw:
      raise ValueError(f'rng must be a PRNG key (jax.random.PRNGKey(seed) or '
                       f'jax.random.key(seed)), got {rng!r:.60}')
  for name, value in (('eos_id', eos_id), ('pad_id', pad_id)):
    if value is not None and (isinstance(value, bool) or not isinstance(
        value, (int, np.integer)) or not 0 <= value < vocab_size):
      raise ValueError(f'{name} must be an id in [0, {vocab_size}) (the vocabulary), got '
                       f'{value!r}')


@functools.lru_cache(maxsize=64)
def _param_shapes(model):
  """{path: shape} of the params `model.init` makes (traced, nothing computed)."""
  shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0))
  return {jax.tree_util.keystr(p): tuple(x.shape)
          for p, x in jax.tree_util.tree_flatten_with_path(shapes)[0]}


def check_params(model, params, name: str, other: str = '') -> None:
  """Raises a one-line ValueError when `params` are not a params tree of `model` (another
  model's, say the draft's passed as the target's): the first path or shape that differs.
  Models without `init` are not checked."""
  init = getattr(model, 'init', None)
  if init is None:
    return
  try:
    hash(model)
  except TypeError:
    return
  want = _param_shapes(model)
  try:
    got = {jax.tree_util.keystr(p): tuple(np.shape(x))
           for p, x in jax.tree_util.tree_flatten_with_path(params)[0]}
  except Exception:  # pylint: disable=broad-except
    got = {}
  if got == want:
    return
  missing = sorted(set(want) - set(got))
  extra = sorted(set(got) - set(want))
  if missing or extra:
    where = (f'lacks {missing[0]}' if missing else f'has {extra[0]}, which the model has not')
  else:
    path = next(k for k in want if want[k] != got[k])
    where = f'holds {path} of shape {got[path]}, the model\'s is {want[path]}'
  hint = f' (were {name} and {other} swapped?)' if other else ''
  raise ValueError(f'{name} do not fit the model: the tree {where}{hint}')


@functools.lru_cache(maxsize=64)
def _device_defaults(num: int, setting: Optional[SamplingConfig]):
  """Device arrays of the default arguments (kept: a repeated call moves nothing)."""
  sampling = None if setting is None else jax.tree.map(jnp.asarray,
                                                       SamplingParams.of(setting, num))
  return jnp.arange(num, dtype=jnp.int32), jnp.asarray(num, jnp.int32), sampling


def check_rule(verification: str, draft_threshold: float, lenience: float,
               greedy: bool, threshold_rule: str = 'token') -> None:
  """Checks the verification rule of a speculative decode (`VerificationRule.checked`).

  Raises:
    ValueError: an unknown verification or threshold rule, a threshold outside [0, 1], a
      lenience outside (0, 1], or a lenience with greedy decoding or block verification.
  """
  VerificationRule(verification, draft_threshold, threshold_rule, lenience).checked(greedy)


def tree_shape(tree):
  """A TreeShape from a sequence of children per depth or '4,2,2,1'; None, a TreeShape
  or a DynamicTree as they are."""
  if tree is None or isinstance(tree, (TreeShape, DynamicTree)):
    return tree
  if isinstance(tree, str):
    return TreeShape.parse(tree)
  if not all(isinstance(b, (int, np.integer)) and not isinstance(b, bool) for b in tree):
    raise ValueError(f'tree takes the children per depth as integers >= 1, got {tree!r}')
  return TreeShape(tuple(int(b) for b in tree))


def loop_config(model, gamma: int, max_decode_len: int, mode: SamplingMode,
                eos_id: Optional[int] = None, pad_id: Optional[int] = None,
                verification: str = 'token', draft_threshold: float = 0.0,
                lenience: float = 1.0, threshold_rule: str = 'token',
                tree=None) -> LoopConfig:
  """The static config of a decode, for every route (`decode` here, `traced_decode`).

  Eos and pad ids default to the ones the model declares; the verification rule is
  checked against the static sampling mode.

  Raises:
    ValueError: an unknown verification or threshold rule, a threshold outside [0, 1], a
      lenience outside (0, 1], or a lenience with greedy decoding or block verification.
  """
  rule = VerificationRule(verification, draft_threshold, threshold_rule, lenience)
  shape = tree_shape(tree)
  if shape is not None:
    if (verification != 'token' and rule.typical is None) or draft_threshold > 0.0:
      raise ValueError('a tree is verified by the tree rule: drop --verification block and '
                       '--draft-threshold, or drop the tree')
    if int(gamma) != shape.depth_count:
      raise ValueError(f'a tree of depth {shape.depth_count} drafts {shape.depth_count} '
                       f'tokens deep; gamma {gamma} disagrees (leave gamma out)')
  return LoopConfig(gamma=int(gamma), max_decode_len=int(max_decode_len), sampling=mode,
                    eos_id=int(getattr(model, 'eos_id', 1) if eos_id is None else eos_id),
                    pad_id=int(getattr(model, 'pad_id', 0) if pad_id is None else pad_id),
                    rule=rule.checked(mode.greedy), tree=shape)


def _decoder(target, draft, gamma, max_decode_len, params: SamplingParams, eos_id, pad_id,
             mesh, rules, slots, **rule) -> decoder_lib.Decoder:
  cfg = loop_config(target, gamma, max_decode_len, params.mode(), eos_id, pad_id, **rule)
  rules = axis_rules.STANDARD_RULES if rules is None else tuple(rules)
  return decoder_lib.build(target, draft, cfg, None if slots is None else int(slots), mesh,
                           rules)


def decoder_of(target, draft, *, gamma: int, max_decode_len: int, sampling: Sampling,
               rows: int, eos_id: Optional[int] = None, pad_id: Optional[int] = None,
               mesh=None, rules=None, slots: Optional[int] = None,
               **rule) -> decoder_lib.Decoder:
  """The Decoder that a decode of `rows` inputs with these arguments runs (built once and
  kept): its `traces` tell how often its programs were traced. `rule`: verification,
  draft_threshold, threshold_rule, lenience (as `speculative_decode`)."""
  return _decoder(target, draft, gamma, max_decode_len, SamplingParams.of(sampling, rows),
                  eos_id, pad_id, mesh, rules, slots, **rule)


def decode(target, target_params, draft, draft_params, inputs, *, gamma: int,
           max_decode_len: int, sampling: Sampling = SamplingConfig(),
           rng: Optional[jax.Array] = None, eos_id: Optional[int] = None,
           pad_id: Optional[int] = None, mesh=None, rules=None, slots: Optional[int] = None,
           num_inputs: Optional[int] = None, row_ids=None, **rule) -> DecodeOutput:
  """`speculative_decode` (draft given) or `autoregressive_decode` (draft None, gamma 0)."""
  _check_inputs(inputs, max_decode_len)
  num = int(np.shape(inputs)[0])
  if slots is not None and (not isinstance(slots, (int, np.integer)) or slots < 1):
    raise ValueError(f'slots must be an integer >= 1, got {slots!r}')
  _check_call(inputs, num, num_inputs, row_ids, rng, eos_id, pad_id, target.vocab_size)
  n = num if num_inputs is None else min(int(num_inputs), num)
  _check_ids(inputs, n, target.vocab_size, getattr(target, 'pad_id', 0))
  check_params(target, target_params, 'target_params',
               'draft_params' if draft is not None else '')
  if draft is not None:
    check_params(draft, draft_params, 'draft_params', 'target_params')
  params = SamplingParams.of(sampling, num)  # host values: validated, and the static mode
  params.validate(target.vocab_size)
  dec = _decoder(target, draft, gamma, max_decode_len, params, eos_id, pad_id, mesh, rules,
                 slots, **rule)
  default_ids, default_num, default_params = _device_defaults(
      num, sampling if isinstance(sampling, SamplingConfig) else None)
  return dec(target_params, draft_params, inputs, default_num if num_inputs is None else n,
             default_ids if row_ids is None else row_ids,
             jax.random.PRNGKey(0) if rng is None else rng,
             params if default_params is None else default_params)


def speculative_decode(target, target_params, draft, draft_params, inputs, *,
                       gamma: Optional[int] = None, max_decode_len: int, sampling: Sampling = SamplingConfig(),
                       rng: Optional[jax.Array] = None, eos_id: Optional[int] = None,
                       pad_id: Optional[int] = None, mesh=None, rules=None,
                       slots: Optional[int] = None, num_inputs: Optional[int] = None,
                       row_ids=None, verification: str = 'token',
                       draft_threshold: float = 0.0, lenience: float = 1.0,
                       threshold_rule: str = 'token', tree=None) -> DecodeOutput:
  """Decodes with the target's exact output distribution, G draft tokens per target call.

  Args:
    target: the target model (the contract of specjax.models.base.Model).
    target_params: its params pytree.
    draft: the draft model; must share the target's vocabulary.
    draft_params: its params pytree.
    inputs: [N, S] int32 encoder inputs (or decoder-only prompts), right-padded with the
      target's pad id; ids outside [0, V) and rows of padding alone are refused.
    gamma: G >= 1, draft tokens per iteration (with a tree: its depth, or None).
    max_decode_len: L >= 1, the most tokens generated per row (EOS included).
    sampling: a SamplingConfig for every row, one SamplingConfig per row, or
      SamplingParams ([N] arrays): temperature (0 greedy), top-k, top-p, applied
      identically to target and draft. The values are traced (no recompilation when they
      change); only "every row greedy or not" and whether any row uses top-k / top-p are
      static.
    rng: PRNG key of the run (PRNGKey(0) when None).
    eos_id: end-of-sequence token (default: the model's).
    pad_id: what outputs hold after EOS (default: the model's; inputs are padded with the
      model's own pad id).
    mesh: optional ('data', 'model') mesh (`specjax.parallel.mesh.make_mesh`): params,
      caches and state are sharded by T5X's logical axis rules and the axes the models
      declare; the decode runs as two jitted programs (start, then the loop with its
      carry donated). The rows (slots) must divide by 'data'.
    rules: logical axis rules for `mesh` (default T5X's standard ones).
    slots: decode the N inputs through this many rows, a finished row taking the next
      input at once (refill); None: all N at once, until the slowest is done.
    num_inputs: decode only the first n inputs (later rows come back empty).
    row_ids: [N] int32, each input's index in the run (default 0..N-1): its randomness is
      fold_in(rng, index), so a sampled output does not depend on the batch, the slot,
      refill, the mesh, or where a resumed run starts.
    verification: 'token', the paper's rule, or 'block', block verification (the draft
      verified as a whole: exact too, and at least as many tokens per call in
      expectation); the same for greedy rows.
    draft_threshold: per-row dynamic gamma: a row stops proposing once its confidence is
      below it (see threshold_rule), the draft steps end once every row has, and the verify
      call scores only as far as the longest proposal (exact: the rule reads the draft
      only); 0 drafts G always.
    lenience: l in (0, 1], sampled decoding with the token rule only: accept when
      r * l * q(x) < p(x) (the paper's appendix F). Below 1 the output is NOT the
      target's distribution any more; faster, lossy.
    threshold_rule: 'token', each draft token's own confidence (the draft's largest
      probability) against draft_threshold, or 'cumulative', the product of the row's
      confidences so far (the draft's estimate that all it proposed is accepted), which
      drafts on through runs of sure tokens and stops sooner after unsure ones.
    tree: a token tree instead of a chain: children per depth ('4,2,2,1', (4, 2, 2, 1) or
      a `specjax.core.tree.TreeShape`; the draft proposes its top tokens below each node,
      a sample where a depth has one child), or a `specjax.core.tree.DynamicTree` (grown
      per row from the draft's probabilities, EAGLE-2). The target scores all N nodes in ONE call
      with a tree mask, and the exact tree rule (`specjax.core.tree_accept`) keeps the
      deepest root path it accepts plus one token of the target's. The draft model must
      take tree calls (`specjax.models.base.Tree`).

  Returns:
    DecodeOutput(tokens [N, L], lengths [N], stats, iterations): greedy output equals the
    target's own greedy decode token for token; sampled output follows the target's
    distribution. With a mesh, the output is replicated on every device.
  """
  shape = tree_shape(tree)
  if shape is not None and gamma is None:
    gamma = shape.depth_count
  _check_pair(target, draft, gamma)
  return decode(target, target_params, draft, draft_params, inputs, gamma=gamma,
                max_decode_len=max_decode_len, sampling=sampling, rng=rng, eos_id=eos_id,
                pad_id=pad_id, mesh=mesh, rules=rules, slots=slots, num_inputs=num_inputs,
                row_ids=row_ids, verification=verification,
                draft_threshold=draft_threshold, lenience=lenience,
                threshold_rule=threshold_rule, tree=shape)


def autoregressive_decode(target, target_params, inputs, *, max_decode_len: int,
                          sampling: Sampling = SamplingConfig(),
                          rng: Optional[jax.Array] = None, eos_id: Optional[int] = None,
                          pad_id: Optional[int] = None, mesh=None, rules=None,
                          slots: Optional[int] = None, num_inputs: Optional[int] = None,
                          row_ids=None) -> DecodeOutput:
  """Decodes one token per target call: the reference for every exactness test.

  Args and returns as `speculative_decode`, without the draft; stats count target calls.
  """
  return decode(target, target_params, None, None, inputs, gamma=0,
                max_decode_len=max_decode_len, sampling=sampling, rng=rng, eos_id=eos_id,
                pad_id=pad_id, mesh=mesh, rules=rules, slots=slots, num_inputs=num_inputs,
                row_ids=row_ids)
