"""A flag is a config field: add_flags, from_args and to_args agree on every config."""
import argparse
import dataclasses
from typing import Optional

import pytest

from specjax import flags
from specjax.flags import flag


@dataclasses.dataclass(frozen=True)
class Toy:
  """A config with every kind of field the tools declare."""

  name: str = flag('a', 'a string')
  count: int = flag(3, 'an int')
  limit: Optional[int] = flag(None, 'an optional int')
  rate: float = flag(0.5, 'a float', metavar='R')
  mode: str = flag('x', 'a choice', choices=('x', 'y'))
  fast: bool = flag(False, 'a switch')
  check: bool = flag(True, 'on unless --no-check', negated='--no-check')
  json_path: Optional[str] = flag(None, 'a flag named apart', name='--json')
  level: int = flag(1, 'in a section', group='extras', parse=lambda s: int(s) * 10)
  hidden: bool = flag(True, 'not a flag', cli=False)


def _parse(argv, **kw):
  p = argparse.ArgumentParser()
  flags.add_flags(p, Toy, **kw)
  return p.parse_args(argv)


def test_defaults_parse_to_the_default_config():
  args = _parse([])
  assert vars(args) == dict(name='a', count=3, limit=None, rate=0.5, mode='x', fast=False,
                            no_check=False, json_path=None, level=1)
  assert flags.from_args(Toy, args) == Toy()
  assert flags.to_args(Toy()) == []


@pytest.mark.parametrize('config', [
    Toy(name='b', count=7, limit=2, rate=0.25, mode='y', fast=True, check=False,
        json_path='out.json'),
    Toy(limit=0, check=True, fast=False),
    Toy(count=0, rate=0.0),
])
def test_a_config_goes_to_flags_and_back(config):
  argv = flags.to_args(config)
  assert flags.from_args(Toy, _parse(argv)) == config


def test_flag_names_negated_switch_and_parse():
  assert flags.to_args(Toy(check=False, json_path='j', fast=True)) == [
      '--fast', '--no-check', '--json', 'j']
  args = _parse(['--no-check', '--json', 'j', '--level', '2'])
  assert args.no_check and args.json_path == 'j' and args.level == 20
  config = flags.from_args(Toy, args)
  assert not config.check and config.json_path == 'j' and config.level == 20
  assert [flags.flag_name(f) for f in flags.cli_fields(Toy)] == [
      '--name', '--count', '--limit', '--rate', '--mode', '--fast', '--no-check', '--json',
      '--level']  # hidden is no flag


def test_choices_metavar_and_group_reach_argparse():
  p = argparse.ArgumentParser()
  flags.add_flags(p, Toy)
  text = p.format_help()
  assert '--rate R' in text and '{x,y}' in text and 'extras:' in text
  assert '--hidden' not in text
  with pytest.raises(SystemExit):
    p.parse_args(['--mode', 'z'])


def test_only_defaults_and_required():
  args = _parse(['--name', 'c'], only=('name', 'count', 'fast'), defaults={'count': 9},
                required=('name',))
  assert vars(args) == dict(name='c', count=9, fast=False)
  # A field the parser lacks keeps the class default; extra overrides.
  assert flags.from_args(Toy, args, rate=0.75) == Toy(name='c', count=9, rate=0.75)
  with pytest.raises(SystemExit):
    _parse([], only=('name',), required=('name',))
  assert flags.to_args(Toy(count=3, fast=False), only=('count', 'fast'), always=True) == [
      '--count', '3']
