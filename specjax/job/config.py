"""The one config of a decode run: every flag of `python -m specjax.decode` is a field here.

`DecodeConfig` is frozen; the command line (`specjax.flags.add_flags`), the decode job,
its resume fingerprint, `python -m specjax.evaluate`, the bench, the paper's run configs
(configs/) and the T5X route's verification rule all read it, so a new setting is one field.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Callable, Optional, Union

from specjax.core.rule import THRESHOLD_RULES, VerificationRule
from specjax.core.sampling import SamplingConfig
from specjax.core.tree import DynamicTree, TreeShape
from specjax.flags import flag
from specjax.job import draft_auto, drafts, tree_auto, tree_checks
from specjax.job.inputs import PAD_MODES
from specjax.job.reader import INPUT_FORMATS
from specjax.job.tree_checks import AUTO, TREE_TOP
from specjax.proposers import draft_names
from specjax.proposers.bigram import read_table

SEEDS = 2 ** 32  # seeds in [0, SEEDS) give distinct PRNG keys


def parse_gamma(text: str) -> Union[int, str]:
  """--gamma's value: an integer, or 'auto'."""
  if text == AUTO:
    return AUTO
  try:
    return int(text)
  except ValueError:
    raise argparse.ArgumentTypeError(
        f'--gamma must be an integer >= 1 or "auto", got {text!r}') from None


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
  """Everything one decode run needs; each field is the flag of the same name."""

  target: str = flag('demo_target', 'target registry name (demo_target, t5_xxl, t5_1_0_11b, '
                     'manlm_target: the bundled decoder-only pair\'s, ...) or checkpoint '
                     'directory (a Hugging Face Llama, GPT-2 or T5 directory, T5X, orbax)')
  draft: str = flag('demo_draft', 'draft registry name (demo_draft, t5_small, manlm_draft, '
                    '...) or checkpoint directory; copy: copy from the input; bigram: the '
                    'target\'s bigram table (bundled for the bundled targets, else '
                    '--draft-checkpoint TABLE.npz); bigram:TABLE: the table python -m '
                    'specjax.datastore bigram wrote to TABLE; copy+NAME: copy where the '
                    'output repeats the input, the model NAME elsewhere; layerskip:M: the '
                    'target\'s own first M decoder layers (no draft model; layerskip:PATH: '
                    'with the early exit train_draft --kind layerskip trained); medusa:PATH: '
                    'Medusa heads trained by python -m specjax.train_draft (medusa: the ones '
                    'bundled for '
                    'demo_target, manpages_target and manlm_target); eagle:PATH: an EAGLE '
                    'head trained the same way, for T5 and decoder-only targets (eagle: the '
                    'bundled ones); rest:DIR: continuations retrieved from a datastore that '
                    'python -m specjax.datastore build made (rest: the one bundled for '
                    'demo_target, manpages_target or manlm_target); suffix: continuations of '
                    'the row\'s own earlier text (its output and input); rest+suffix: one '
                    'trie of both\'s continuations; rest and suffix '
                    'verify a chain or the trie of what they retrieve (--tree-nodes N '
                    '--tree-depth D; with --gamma auto and no tree flag, --tree auto '
                    'weighs both); lookahead:W,N,G: lookahead decoding, the target\'s own '
                    'Jacobi window of W guesses in N - 1 levels and G of its n-grams of N '
                    'tokens verified as one tree (lookahead: 5,3,4); cascade:NAME/CHEAP[/K[/C]]: '
                    'the draft model NAME\'s chain drafted K (3) tokens at a time by CHEAP '
                    '(bigram, copy, suffix, rest) and verified by NAME, in at most C calls '
                    'of NAME (default: until the chain is whole); cascade:NAME:K,CHEAP: '
                    'NAME\'s first K drafts, then CHEAP\'s (chains); auto: no draft model: '
                    '--gamma auto calibrates each proposer of --auto-drafts and keeps the one '
                    'measured fastest against the target alone, or the target alone')
  target_checkpoint: Optional[str] = flag(None, 'T5X, Hugging Face or orbax checkpoint of '
                                          'the target (default: bundled for demo_*, '
                                          'manpages_* and manlm_*, the public T5X one on '
                                          'GCS for t5_*)')
  draft_checkpoint: Optional[str] = flag(None, 'checkpoint of the draft (defaults as above)')
  vocab: Optional[str] = flag(None, 'SentencePiece model or tokenizer.json (default: '
                              'bundled for demo_*, manpages_* and manlm_*, the tokenizer in a '
                              'checkpoint directory, '
                              'gs://t5-data/vocabs/cc_all.32000.100extra/sentencepiece.model '
                              'for t5_*)')
  draft_vocab: Optional[str] = flag(None, 'the draft\'s vocabulary, if stored apart; it must '
                                    'equal the target\'s')
  input: Optional[str] = flag(None, 'text file (one input per line, or JSONL with an '
                              '"inputs" field); - for stdin (default: the bundled sample '
                              'sentences)')
  input_format: str = flag('auto', 'auto: JSONL when every non-empty line is a JSON object '
                           'with an "inputs" string, else one text per line',
                           choices=INPUT_FORMATS)
  errors: str = flag('strict', 'input bytes that are not UTF-8: stop naming the line, or '
                     'replace them', choices=('strict', 'replace'))
  task: Optional[str] = flag(None, 'decode a seqio Task\'s split instead of --input, and '
                             'report its metrics (e.g. specjax_demo_ende; needs seqio)')
  split: str = flag('test', 'the --task split to decode')
  max_examples: Optional[int] = flag(None, 'decode only the first n inputs (or examples of '
                                     'the --task split)')
  output: Optional[str] = flag(None, 'write one JSON line per input, in input order, as each '
                               'batch finishes (inputs, input_line, prediction, stats); '
                               'rerunning the same command after an interruption resumes '
                               'where it stopped; missing folders are made; - for stdout')
  prefix: Optional[str] = flag(None, 'task prefix added to inputs that lack it (default: '
                               '"translate English to German: " for the demo pair, none '
                               'otherwise)')
  gamma: Union[int, str] = flag(AUTO, 'draft tokens per target call (an integer, or "auto": '
                                'measure c, v(K) and alpha at this batch size, pick the gamma '
                                'the formula predicts fastest, and fall back to the target '
                                'alone (gamma 0) when that measures slower); a run reuses '
                                'the choice of the sampled run it resumes, or the one cached '
                                'for its setting, so that reruns write the same file',
                                parse=parse_gamma)
  max_gamma: int = flag(8, 'with --gamma auto: the largest gamma considered (1..N, and at '
                        'most --max-decode-len)')
  recalibrate: bool = flag(False, 'with --gamma auto: calibrate again even where a choice '
                           'is cached for this setting (and cache the new one)')
  verification: str = flag('token', 'token: the paper\'s rule, each draft token in turn; '
                           'block: block verification, which keeps at least as many tokens '
                           'per call; both exact. typical or typical:EPS:DELTA (sampled '
                           'only; chains and trees): Medusa\'s typical acceptance, NOT exact: '
                           'keeps a draft token x while p(x) > min(EPS, DELTA exp(-H(p))) '
                           '(default 0.09, 0.3), then draws from p', metavar='RULE')
  draft_threshold: float = flag(0.0, 'per-row dynamic gamma: a row stops drafting at its '
                                'first token the draft gives less than this probability (0: '
                                'always gamma tokens); the target then scores only as far as '
                                'the longest proposal; exact')
  threshold_rule: str = flag('token', 'what --draft-threshold is compared with: token, each '
                             'draft token\'s own probability (as Hugging Face\'s '
                             'assistant_confidence_threshold); cumulative, their product '
                             'over the row\'s proposals so far (the draft\'s estimate that '
                             'all are accepted)', choices=THRESHOLD_RULES)
  lenience: float = flag(1.0, 'sampled decoding only: accept when r*lenience*q < p; below 1 '
                         'the output no longer follows the target\'s distribution (lossy, '
                         'faster)')
  tree: Optional[str] = flag(None, 'a static token tree instead of a chain: children per '
                             'depth, e.g. 4,2,2,1 (the draft\'s top 4 tokens below the last '
                             'one, its top 2 below each of those, ...); the target verifies '
                             'every node in ONE call and keeps the deepest path the exact '
                             'tree rule accepts; gamma is the depth (not calibrated); '
                             'with --draft copy: the next tokens of the best different '
                             'earlier matches, with --draft bigram: the table\'s top tokens. '
                             'auto: --gamma auto picks the best chain, one of the trees of '
                             '--auto-trees, or the target alone, by their predicted speedups '
                             'and a timing of the best against the target alone',
                             metavar='B1,B2,...|auto')
  auto_trees: Optional[str] = flag(None, 'with --tree auto: the candidate trees, separated by '
                                   '";": children per depth (2,1,1,1) or dynamic:N:D[:TOP] '
                                   f'(default: {tree_auto.DEFAULT}, those the draft grows)',
                                   metavar='TREES')
  auto_drafts: Optional[str] = flag(None, 'with --draft auto: the proposers weighed, '
                                    'separated by ";" (default: '
                                    f'{";".join(draft_auto.DEFAULT)}, less bigram and rest '
                                    'where the target has no table or datastore)',
                                    metavar='DRAFTS')
  tree_nodes: Optional[int] = flag(None, 'a dynamic token tree (EAGLE-2) instead: N nodes '
                                   'verified per call, grown per row from the draft\'s '
                                   'probabilities; with --tree-depth', metavar='N')
  tree_depth: Optional[int] = flag(None, 'with --tree-nodes: D, the dynamic tree\'s depth '
                                   '(gamma is D)', metavar='D')
  tree_top: int = flag(TREE_TOP, 'with --tree-nodes: the nodes expanded at each depth, and '
                       'the children each gets', metavar='K')
  temperature: float = flag(0.0, '0 is greedy')
  top_k: int = flag(0, '0 keeps every token')
  top_p: float = flag(1.0, '1 keeps every token')
  seed: int = flag(0, 'sampling seed')
  batch_size: int = flag(8, 'rows decoded at once')
  refill: bool = flag(True, 'decode fixed batches, each running until its slowest row is '
                      'done (default: a finished row takes the next input at once, on a '
                      'mesh too)', negated='--no-refill')
  max_input_len: int = flag(64, 'encoder length; longer inputs are an error unless '
                            '--truncate-inputs')
  truncate_inputs: bool = flag(False, 'cut inputs longer than --max-input-len instead of '
                               'failing')
  pad_inputs: str = flag('bucket', 'bucket: pad each batch to the smallest power of two (>= '
                         '8) that fits its longest input, one compilation per width; max: '
                         'pad every batch to --max-input-len, one compilation (T5X\'s fixed '
                         'feature lengths)', choices=PAD_MODES)
  max_decode_len: int = flag(64, 'most tokens per output')
  dtype: Optional[str] = flag(None, 'activation and cache dtype (default: the model\'s)',
                              choices=('float32', 'bfloat16', 'float16'))
  param_dtype: str = flag('float32', 'dtype params are held in; bfloat16 halves their memory '
                          '(T5-XXL on one TPU v4 chip needs it)',
                          choices=('float32', 'bfloat16'))
  num_partitions: Optional[int] = flag(None, 'shard over all devices: N-way model parallel '
                                       '(T5X num_partitions), data parallel over the rest')
  mesh: Optional[str] = flag(None, 'explicit mesh instead, e.g. data=2,model=4 (sizes may use '
                             'fewer than all devices)')
  parameter_partitioning_dims: int = flag(1, '2 also shards the params\' embed axis over data '
                                          '(T5X 2-D params)', choices=(1, 2))
  multihost: bool = flag(False, 'call jax.distributed.initialize() first (automatic on a '
                         'multi-host TPU pod slice); run on every host')
  coordinator_address: Optional[str] = flag(None, 'with --multihost off Cloud TPU: host:port '
                                            'of process 0, where the others connect')
  num_processes: Optional[int] = flag(None, 'with --multihost off Cloud TPU: how many '
                                      'processes run the decode')
  process_id: Optional[int] = flag(None, 'with --multihost off Cloud TPU: this process\'s '
                                   'index, 0 (the one that writes) to --num-processes - 1')
  compare: bool = flag(True, 'skip the target-only decode (no speedup and no identity check '
                       'in the summary)', negated='--no-compare')
  compile_cache: Optional[str] = flag(None, 'keep the compiled programs in DIR and load them '
                                      'in later runs instead of compiling again (default: '
                                      '$JAX_COMPILATION_CACHE_DIR if set, else the xla folder '
                                      'of the specjax cache: $SPECJAX_CACHE_DIR, '
                                      '$XDG_CACHE_HOME/specjax or ~/.cache/specjax)',
                                      metavar='DIR')
  use_compile_cache: bool = flag(True, 'compile every program afresh, reading and writing no '
                                 'compile cache', negated='--no-compile-cache')
  scan_layers: bool = flag(False, 'run each stack of layers as one scanned body (T5X\'s '
                           'scan_layers): the same output, and a program whose compile time '
                           'does not grow with depth (README, "Scanned layers")')
  json: bool = flag(False, 'print the summary as one JSON object')
  quiet: bool = flag(False, 'no progress bar, no translations')
  progress: bool = flag(True, 'a progress bar on stderr', cli=False)

  @property
  def sampling(self) -> SamplingConfig:
    """The sampling settings (temperature, top-k, top-p)."""
    return SamplingConfig(self.temperature, self.top_k, self.top_p)

  @property
  def say(self) -> Optional[Callable[[str], None]]:
    """Writes a progress line to stderr, for work that shows nothing else for seconds (a
    calibration); None where there is no progress bar either (--quiet)."""
    return (lambda line: print(line, file=sys.stderr, flush=True)) if self.progress else None

  @property
  def auto_gammas(self) -> int:
    """The largest gamma `--gamma auto` considers: --max-gamma, at most L."""
    return min(self.max_gamma, self.max_decode_len)

  @property
  def rule(self) -> VerificationRule:
    """The verification rule (token or block, the draft threshold, the lenience)."""
    return VerificationRule(self.verification, self.draft_threshold, self.threshold_rule,
                            self.lenience)

  @property
  def token_tree(self) -> Optional[Union[TreeShape, DynamicTree]]:
    """The tree of --tree (a TreeShape) or --tree-nodes (a DynamicTree); None: a chain.

    Raises:
      ValueError: a bad --tree string or dynamic tree (one line naming the flags).
    """
    if self.tree == AUTO:  # chosen by the calibration: `with_tree` gives the choice
      return None
    if self.tree is not None:
      return TreeShape.parse(self.tree)
    if self.tree_nodes is None and drafts.is_lookahead(self.draft):
      return draft_names.lookahead_tree(self.draft)
    if self.tree_nodes is None:
      return None
    for name in ('tree_nodes', 'tree_depth', 'tree_top'):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f'--{name.replace("_", "-")} must be an integer >= 1, got {value!r}')
    return DynamicTree(self.tree_nodes, self.tree_depth, self.tree_top)

  def tree_json(self) -> Optional[dict]:
    """The tree as the summary and the resume fingerprint name it, or None: a chain (and
    --tree auto before its choice)."""
    return tree_auto.to_json(self.token_tree)

  @property
  def auto_tree_candidates(self) -> list:
    """The trees --tree auto weighs against the chain: --auto-trees' (default
    `tree_auto.DEFAULT`, of the kinds the draft grows: static shapes for copy, dynamic
    trees for retrieval), cut to --max-decode-len deep; [] without --tree auto."""
    if self.tree != AUTO:
      return []
    trees = tree_auto.parse(self.auto_trees)
    if self.auto_trees is None:
      trees = tree_auto.of_kinds(trees, static=not drafts.is_retrieval(self.draft),
                                 dynamic=self.draft != drafts.COPY)
    return tree_auto.fit(trees, self.max_decode_len)

  def tree_auto_setting(self) -> Optional[list]:
    """What --tree auto's choice depends on beyond the run's fingerprint (the candidates
    and --max-gamma), for its cache key; None without --tree auto."""
    if self.tree != AUTO:
      return None
    return [self.max_gamma] + [tree_auto.label(t) for t in self.auto_tree_candidates]

  def with_tree(self, tree: Optional[dict]) -> 'DecodeConfig':
    """A copy that decodes with `tree` as `tree_json` names one (None: a chain): the
    config --tree auto's choice resolves to.

    Raises:
      ValueError: not a tree `tree_json` names.
    """
    shape = tree_auto.from_json(tree)
    if shape is None:
      return self.replace(tree=None, tree_nodes=None, tree_depth=None, tree_top=TREE_TOP)
    if isinstance(shape, DynamicTree):
      return self.replace(tree=None, tree_nodes=shape.nodes, tree_depth=shape.depth,
                          tree_top=shape.top)
    return self.replace(tree=tree_auto.label(shape), tree_nodes=None, tree_depth=None,
                        tree_top=TREE_TOP)

  def replace(self, **changes) -> 'DecodeConfig':
    """A copy with some fields changed."""
    return dataclasses.replace(self, **changes)

  def check(self) -> None:
    """Checks the settings that need no model, before anything loads.

    Raises:
      ValueError: a batch size, input length, example count, seed or gamma out of range
        (gamma above max_decode_len included), a bad verification rule, or a tree that is
        malformed or does not go with the other flags (one line each).
    """
    for name in ('batch_size', 'max_input_len'):
      if getattr(self, name) < 1:
        raise ValueError(f'--{name.replace("_", "-")} must be >= 1, got {getattr(self, name)}')
    if self.draft == draft_auto.AUTO:  # each candidate is checked as --draft checks it
      draft_auto.check(self)
      return
    if self.auto_drafts is not None:
      raise ValueError(f'{draft_auto.FLAG} lists the proposers --draft auto weighs: pass '
                       '--draft auto, or drop it')
    if self.max_examples is not None and self.max_examples < 1:
      raise ValueError(f'--max-examples must be >= 1, got {self.max_examples}')
    if drafts.is_lookahead(self.draft):
      drafts.parse_lookahead(self.draft)
      given = [f for f, v in (('--tree', self.tree), ('--tree-nodes', self.tree_nodes),
                              ('--tree-depth', self.tree_depth)) if v is not None]
      if given or self.gamma != AUTO or self.draft_threshold > 0:
        flags = given + (['--gamma'] if self.gamma != AUTO else []) + (
            ['--draft-threshold'] if self.draft_threshold > 0 else [])
        raise ValueError(f'--draft {self.draft} verifies its window and n-grams as one tree '
                         f'of its own shape: drop {" and ".join(flags)}')
    tree_checks.check_tree(self)
    if self.gamma != AUTO and (not isinstance(self.gamma, int) or isinstance(self.gamma, bool)
                               or self.gamma < 1):
      raise ValueError(f'gamma must be an integer >= 1 (draft tokens per target call), got '
                       f'{self.gamma!r}; or --gamma auto, which may pick 0 (the target alone)')
    # Temperature and top-p now; top-k against the vocabulary once the target is loaded.
    self.sampling.validate(vocab_size=max(self.top_k, 0))
    if not 0 <= self.seed < SEEDS:
      raise ValueError(f'--seed must be in [0, 2**32) (a PRNG key holds 32 bits of it), got '
                       f'{self.seed}')
    if self.max_decode_len < 1:  # as the API says it
      raise ValueError(f'max_decode_len must be an integer >= 1, got {self.max_decode_len}')
    if self.gamma != AUTO and self.gamma > self.max_decode_len:
      raise ValueError(f'--gamma {self.gamma} is more than --max-decode-len '
                       f'{self.max_decode_len}: no output holds that many draft tokens; pass '
                       '--gamma at most --max-decode-len')
    if self.max_gamma < 1:
      raise ValueError(f'--max-gamma must be >= 1, got {self.max_gamma}')
    cheap = self.draft
    if self.draft.startswith(drafts.CASCADE):
      parsed = drafts.parse_cascade(self.draft)
      cheap = parsed.cheap
      if not parsed.vertical and self.gamma != AUTO and self.gamma <= parsed.count:
        raise ValueError(f'--draft {self.draft} drafts its first {parsed.count} tokens with '
                         f'{parsed.model} and the rest with {parsed.cheap}: pass --gamma '
                         f'above {parsed.count}')
      if not parsed.vertical and self.gamma == AUTO and self.auto_gammas <= parsed.count:
        raise ValueError(f'--draft {self.draft} drafts its first {parsed.count} tokens with '
                         f'{parsed.model} and the rest with {parsed.cheap}: --gamma auto '
                         f'weighs gammas up to {self.auto_gammas}; pass --max-gamma above '
                         f'{parsed.count}')
    if drafts.is_bigram(cheap) and (cheap != drafts.BIGRAM or self.draft_checkpoint):
      # a table named by its path reads, before any model loads
      read_table(drafts.bigram_table(cheap, self.target, self.draft_checkpoint))
    if drafts.is_retrieval(cheap) and cheap != drafts.SUFFIX:
      drafts.check_datastore(cheap, self.target,
                             own_vocab=not (self.vocab or self.target_checkpoint))
    if drafts.trained_kind(self.draft) and self.draft_threshold > 0:
      raise ValueError(f'--draft {self.draft} drafts from the target\'s hidden states, which '
                       'the verify call returns for every draft: drop --draft-threshold')
    self.rule.checked(self.sampling.greedy)
