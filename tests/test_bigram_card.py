"""The model cards' "Bigram table" sections describe the tables that ship beside them."""
import os
import re
import shlex

import numpy as np
import pytest

from specjax.datastore import cli as datastore_cli
from specjax.demo import bigram_card
from specjax.job.drafts import DEFAULT_BIGRAMS
from specjax.proposers import bigram

SECTION = re.compile(
    r'## Bigram table\n\n`bigram\.npz` is the table of `--draft bigram` .*?'
    r"DEFAULT_BIGRAMS\['(?P<target>\w+)'\]`\): for each of the (?P<v>\d+) ids, its "
    r'(?P<k>\d+) most frequent next tokens \(`next`, (?P<next>\w+)\) and their '
    r'log-probabilities over those \d+ \(`logp`, (?P<logp>\w+)\).*? Built with '
    r'`(?P<command>[^`]+)`: (?P<bytes>[\d,]+) bytes\.\n')


@pytest.mark.parametrize('target', sorted(DEFAULT_BIGRAMS))
def test_each_bundled_card_describes_its_table(target):
  path = DEFAULT_BIGRAMS[target]
  card = open(os.path.join(os.path.dirname(path), 'MODEL_CARD.md'), encoding='utf-8').read()
  found = SECTION.search(card)
  assert found, f'no bigram section in the card beside {path}'
  with np.load(path) as table:
    assert (int(found['v']), int(found['k'])) == table['next'].shape
    assert (found['next'], found['logp']) == (str(table['next'].dtype),
                                              str(table['logp'].dtype))
  assert found['target'] == target
  assert int(found['bytes'].replace(',', '')) == os.path.getsize(path)
  # the command is one the datastore's parser takes, and writes where the table lies
  argv = shlex.split(found['command'])
  assert argv[:4] == ['python', '-m', 'specjax.datastore', 'bigram']
  args = datastore_cli.parse_args(argv[3:])
  package = os.path.dirname(os.path.dirname(os.path.dirname(path)))  # specjax/
  assert args.output == os.path.join('specjax', os.path.relpath(path, package))
  assert args.task and args.input is None


def test_the_card_names_the_command_the_proposer_names():
  assert bigram_card.BUILD_COMMAND == bigram.BUILD_COMMAND


def test_a_section_is_read_from_the_table_and_none_without_one(tmp_path):
  assets = tmp_path / 'pair'
  assets.mkdir()
  assert bigram_card.section(str(assets), 'task', 'pair_target', 'words') == []
  table = bigram.table_of([[3, 4, 1], [4, 3, 1], [5, 1]], vocab_size=7, top_k=3)
  bigram.save_table(str(assets / 'bigram.npz'), table)
  text = '\n'.join(bigram_card.section(str(assets), 'task', 'pair_target', 'words'))
  assert 'for each of the 7 ids, its 3 most frequent next tokens (`next`, uint16)' in text
  assert '(`logp`, float16)' in text
  assert ('`python -m specjax.datastore bigram --task task --output '
          'specjax/assets/pair/bigram.npz`') in text
  assert f'{os.path.getsize(assets / "bigram.npz"):,} bytes.' in text
