"""seqio Tasks for specjax: the bundled demo data, and T5's public WMT and CNN/DM tasks.

Importing this module registers `DEMO_TASK` (English -> German, the bundled demo pair's
vocabulary; the bundled `test` split, and `train` / `validation` when
`scripts/build_demo_corpus.py` has written them under `SPECJAX_DEMO_DATA`, default
`data/demo`), `MANPAGES_TASK` (man-page DESCRIPTION -> NAME line, the man-page pair's
vocabulary, ROUGE; its bundled `test` split, and `train` / `validation` from
`scripts/build_manpage_corpus.py` under `SPECJAX_MANPAGES_DATA`, default `data/manpages`),
and T5's `wmt_t2t_ende_v003` and `cnn_dailymail_v002` when their TFDS data
is present (`get_task` names how to get it otherwise). A T5X gin file registers them
with `import specjax.tasks`. Needs seqio and TensorFlow (`pip install seqio`); the rest
of specjax never imports this module.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Dict, List, Sequence, Tuple

import seqio
import tensorflow as tf

from specjax.checkpoints.registry import ASSETS, DEMO_PREFIX, DEMO_VOCAB, MANPAGES_ASSETS
from specjax.demo import manpages

DEMO_TASK = 'specjax_demo_ende'
DEMO_DATA_ENV = 'SPECJAX_DEMO_DATA'
MANPAGES_TASK = 'specjax_demo_manpages'
MANPAGES_DATA_ENV = 'SPECJAX_MANPAGES_DATA'
# T5's default vocabulary (t5.data.get_default_vocabulary), which its tasks use.
T5_TASK_VOCAB = 'gs://t5-data/vocabs/cc_all.32000/sentencepiece.model'
# Public task name -> (TFDS name, what to build, prefix builder's keys, metric names).
PUBLIC_TASKS = {
    'wmt_t2t_ende_v003': ('wmt_t2t_translate/de-en:1.0.0', 'wmt_t2t_translate/de-en',
                          'translate', ('bleu',)),
    'cnn_dailymail_v002': ('cnn_dailymail:3.4.0', 'cnn_dailymail', 'summarize', ('rouge',)),
}


def bleu(targets: Sequence[str], predictions: Sequence[str]) -> Dict[str, float]:
  """Corpus BLEU exactly as T5 reports it (t5.evaluation.metrics.bleu): sacrebleu with the
  'intl' tokenizer, exponential smoothing, cased. Returns {'bleu': score in [0, 100]}."""
  import sacrebleu  # pylint: disable=import-outside-toplevel
  score = sacrebleu.corpus_bleu(list(predictions), [list(targets)], smooth_method='exp',
                                smooth_value=0.0, force=False, lowercase=False,
                                tokenize='intl', use_effective_order=False)
  return {'bleu': score.score}


def rouge(targets: Sequence[str], predictions: Sequence[str]) -> Dict[str, float]:
  """ROUGE exactly as T5 reports it for CNN/DM (t5.evaluation.metrics.rouge): rouge1,
  rouge2 and rougeLsum F-measures in [0, 100]. Needs t5 and rouge-score."""
  try:
    from t5.evaluation import metrics  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ValueError(f'ROUGE is T5\'s metric; pip install t5 rouge-score ({e})') from e
  return metrics.rouge(list(targets), list(predictions))


def demo_vocabulary() -> seqio.SentencePieceVocabulary:
  """The demo pair's SentencePiece vocabulary (4000 pieces, pad 0, eos 1, unk 2)."""
  return seqio.SentencePieceVocabulary(DEMO_VOCAB)


def demo_files() -> Dict[str, str]:
  """Split -> JSONL file of {"en", "de"} pairs: the bundled test split, and the train and
  validation splits when `scripts/build_demo_corpus.py` wrote them."""
  files = {'test': os.path.join(ASSETS, 'test.jsonl')}
  root = os.environ.get(DEMO_DATA_ENV, os.path.join('data', 'demo'))
  for split in ('train', 'validation'):
    path = os.path.join(root, f'{split}.jsonl')
    if os.path.isfile(path):
      files[split] = path
  return files


def manpages_files() -> Dict[str, str]:
  """Split -> JSONL file of the man-page task: the bundled test split ({"inputs":
  "summarize: ...", "targets"}), and the train and validation splits ({"text", "summary"})
  when `scripts/build_manpage_corpus.py` wrote them."""
  files = {'test': os.path.join(MANPAGES_ASSETS, 'test.jsonl')}
  root = os.environ.get(MANPAGES_DATA_ENV, os.path.join('data', 'manpages'))
  for split in ('train', 'validation'):
    path = os.path.join(root, f'{split}.jsonl')
    if os.path.isfile(path):
      files[split] = path
  return files


def read_manpage_pairs(path: str) -> Tuple[List[str], List[str]]:
  """(texts, summaries) of a man-page split in either form: {"text", "summary"} rows, or
  {"inputs", "targets"} rows whose inputs carry the task prefix (removed here)."""
  with open(path, encoding='utf-8') as f:
    rows = [json.loads(line) for line in f if line.strip()]
  texts, summaries = [], []
  for r in rows:
    if 'text' in r:
      texts.append(r['text'])
      summaries.append(r['summary'])
    else:
      text = r['inputs']
      texts.append(text[len(manpages.TASK_PREFIX):] if text.startswith(
          manpages.TASK_PREFIX) else text)
      summaries.append(r['targets'])
  return texts, summaries


def _read_pairs(path: str) -> Tuple[List[str], List[str]]:
  with open(path, encoding='utf-8') as f:
    rows = [json.loads(line) for line in f if line.strip()]
  return [r['en'] for r in rows], [r['de'] for r in rows]


def _demo_dataset_fn(files: Dict[str, str]) -> Callable[..., tf.data.Dataset]:
  def dataset_fn(split: str, shuffle_files: bool, seed=None) -> tf.data.Dataset:
    del shuffle_files, seed  # one file per split, read in order
    en, de = _read_pairs(files[split])
    return tf.data.Dataset.from_tensor_slices({'en': en, 'de': de})
  return dataset_fn


def _manpages_dataset_fn(files: Dict[str, str]) -> Callable[..., tf.data.Dataset]:
  def dataset_fn(split: str, shuffle_files: bool, seed=None) -> tf.data.Dataset:
    del shuffle_files, seed  # one file per split, read in order
    texts, summaries = read_manpage_pairs(files[split])
    return tf.data.Dataset.from_tensor_slices({'text': texts, 'summary': summaries})
  return dataset_fn


def translate_en_de(ex: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """{'en', 'de'} -> {'inputs': 'translate English to German: ' + en, 'targets': de}, as
  T5's `translate` preprocessor writes them."""
  return {'inputs': tf.strings.join([DEMO_PREFIX, ex['en']]), 'targets': ex['de']}


def summarize_article(ex: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """{'article', 'highlights'} -> {'inputs': 'summarize: ' + article, 'targets'}, as T5's
  `summarize` preprocessor writes them."""
  return {'inputs': tf.strings.join(['summarize:', ex['article']], separator=' '),
          'targets': ex['highlights']}


def summarize_page(ex: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """{'text', 'summary'} -> {'inputs': 'summarize: ' + text, 'targets': summary}: the
  man-page pair's input form (`specjax.demo.manpages.make_example`)."""
  return {'inputs': tf.strings.join([manpages.TASK_PREFIX, ex['text']]),
          'targets': ex['summary']}


def _features(vocab) -> Dict[str, seqio.Feature]:
  return {'inputs': seqio.Feature(vocabulary=vocab, add_eos=True, required=False),
          'targets': seqio.Feature(vocabulary=vocab, add_eos=True)}


def _map(fn):
  return seqio.map_over_dataset(fn)


def register_demo_task(name: str = DEMO_TASK) -> seqio.Task:
  """Registers (once) the demo English -> German task. Returns it."""
  if name in seqio.TaskRegistry.names():
    return seqio.TaskRegistry.get(name)
  files = demo_files()
  return seqio.TaskRegistry.add(
      name,
      source=seqio.FunctionDataSource(_demo_dataset_fn(files), splits=tuple(files)),
      preprocessors=[_map(translate_en_de), seqio.preprocessors.tokenize,
                     seqio.preprocessors.append_eos_after_trim],
      output_features=_features(demo_vocabulary()),
      metric_fns=[bleu], shuffle_buffer_size=None)


def register_manpages_task(name: str = MANPAGES_TASK) -> seqio.Task:
  """Registers (once) the man-page summarisation task (ROUGE, as T5's CNN/DM). Returns it."""
  if name in seqio.TaskRegistry.names():
    return seqio.TaskRegistry.get(name)
  files = manpages_files()
  vocab = seqio.SentencePieceVocabulary(os.path.join(MANPAGES_ASSETS, 'spm.model'))
  return seqio.TaskRegistry.add(
      name,
      source=seqio.FunctionDataSource(_manpages_dataset_fn(files), splits=tuple(files)),
      preprocessors=[_map(summarize_page), seqio.preprocessors.tokenize,
                     seqio.preprocessors.append_eos_after_trim],
      output_features=_features(vocab), metric_fns=[rouge], shuffle_buffer_size=None)


def tfds_data_dir() -> str:
  """Where TFDS data is looked for: $TFDS_DATA_DIR, else ~/tensorflow_datasets."""
  return os.environ.get('TFDS_DATA_DIR', os.path.expanduser('~/tensorflow_datasets'))


def _tfds_present(tfds_name: str) -> bool:
  name, version = tfds_name.split(':')
  return os.path.isdir(os.path.join(tfds_data_dir(), name, version))


def register_public_task(name: str) -> seqio.Task:
  """Registers (once) one of T5's public tasks as T5 defines it.

  Raises:
    ValueError: its TFDS data is not under `tfds_data_dir()`, or t5's metrics are missing
      (one line naming the fix).
  """
  if name in seqio.TaskRegistry.names():
    return seqio.TaskRegistry.get(name)
  tfds_name, build, kind, _ = PUBLIC_TASKS[name]
  if not _tfds_present(tfds_name):
    raise ValueError(f'task {name} needs the TFDS dataset {tfds_name}, not found under '
                     f'{tfds_data_dir()}; pip install tensorflow-datasets, run `tfds build '
                     f'{build}` and set TFDS_DATA_DIR to its data dir')
  try:
    from t5.evaluation import metrics  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ValueError(f'task {name} reports T5\'s metrics; pip install t5 rouge-score '
                     f'({e})') from e
  vocab = seqio.SentencePieceVocabulary(T5_TASK_VOCAB, extra_ids=100)
  first, metric = ((_map(translate_en_de), metrics.bleu) if kind == 'translate' else
                   (_map(summarize_article), metrics.rouge))
  return seqio.TaskRegistry.add(
      name, source=seqio.TfdsDataSource(tfds_name),
      preprocessors=[first, seqio.preprocessors.tokenize, seqio.CacheDatasetPlaceholder(),
                     seqio.preprocessors.append_eos_after_trim],
      output_features=_features(vocab), metric_fns=[metric])


def get_task(name: str) -> seqio.Task:
  """A registered seqio Task by name: a demo task, a public one, or any task another
  module registered.

  Raises:
    ValueError: an unknown name, or a public task whose data is missing (one line).
  """
  if name in PUBLIC_TASKS:
    return register_public_task(name)
  if name not in seqio.TaskRegistry.names():
    known = sorted({DEMO_TASK, MANPAGES_TASK, *PUBLIC_TASKS})
    raise ValueError(f'unknown task {name!r}; pass one of {", ".join(known)} or import the '
                     'module that registers it')
  return seqio.TaskRegistry.get(name)


register_demo_task()
register_manpages_task()
for _name, (_tfds_name, *_) in PUBLIC_TASKS.items():
  if _tfds_present(_tfds_name):
    try:
      register_public_task(_name)
    except ValueError:
      pass  # get_task(name) raises the one-line error
