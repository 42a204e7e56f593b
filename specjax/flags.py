"""Command-line flags derived from a frozen config's fields: a flag is one field.

A field declared with `flag(default, help, ...)` carries its help text, choices and parsing
rule in its metadata; `add_flags` makes the argparse flags of a config class from them (the
flag is the field's name with dashes; a True-by-default bool is switched off by its negated
flag, e.g. `--no-refill`, whose namespace attribute is `no_refill`), `from_args`
builds the config from the parsed namespace, and `to_args` turns a config back into the
flags that give it.
"""
from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence


def flag(default: Any, help: str, *, choices: Optional[Sequence[Any]] = None,  # pylint: disable=redefined-builtin
         parse: Optional[Callable[[str], Any]] = None, metavar: Optional[str] = None,
         negated: Optional[str] = None, name: Optional[str] = None,
         group: Optional[str] = None, cli: bool = True, least: Optional[float] = None,
         above: Optional[float] = None) -> Any:
  """A config field that is also a command-line flag.

  Args:
    default: the field's default (and the flag's).
    help: the flag's help text.
    choices: the values the flag accepts.
    parse: turns the flag's string into the field's value (default: the field's type).
    metavar: the flag's placeholder in --help.
    negated: for a bool that defaults to True, the flag that sets it False (e.g.
      '--no-refill'); a bool defaulting to False becomes a plain switch.
    name: the flag, when it is not the field's name with dashes (e.g. '--json' for a
      field json_path).
    group: the title of the --help section the flag is listed under.
    cli: False keeps the field off the command line (an API-only setting).
    least: the smallest value the field takes (`check_bounds`).
    above: a bound the field's value must exceed (`check_bounds`).
  """
  return dataclasses.field(default=default, metadata=dict(
      help=help, choices=choices, parse=parse, metavar=metavar, negated=negated, name=name,
      group=group, cli=cli, least=least, above=above))


def cli_fields(cls) -> List[dataclasses.Field]:
  """The fields of a config class that are command-line flags, in declaration order."""
  return [f for f in dataclasses.fields(cls) if f.metadata.get('cli')]


def flag_name(field: dataclasses.Field) -> str:
  """The flag of a field: '--max-input-len', its negated switch ('--no-refill'), or the
  name it was given."""
  meta = field.metadata
  return meta.get('negated') or meta.get('name') or '--' + field.name.replace('_', '-')


def _dest(field: dataclasses.Field) -> str:
  """The namespace attribute of a field's flag: the field's name, or 'no_refill'."""
  return ('no_' if field.metadata.get('negated') else '') + field.name


def _scalar_type(cls, field: dataclasses.Field):
  """The field's type with Optional[...] removed (int for Optional[int])."""
  hint = typing.get_type_hints(cls)[field.name]
  args = [a for a in typing.get_args(hint) if a is not type(None)]
  return args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint


def add_flags(parser: argparse.ArgumentParser, cls, only: Optional[Iterable[str]] = None,
              defaults: Optional[Dict[str, Any]] = None,
              required: Iterable[str] = (), helps: Optional[Dict[str, str]] = None) -> None:
  """Adds the flags of `cls`'s command-line fields to `parser`.

  Args:
    parser: the parser (or an argument group).
    cls: a dataclass whose fields were declared with `flag`.
    only: the field names to add (default: every command-line field), in this order.
    defaults: other defaults for some fields (e.g. a tool that measures at batch 1).
    required: fields the tool needs a value for.
    helps: other help texts for some fields (a tool that takes fewer of their values).
  """
  fields = {f.name: f for f in cli_fields(cls)}
  defaults, required = dict(defaults or {}), set(required)
  groups = {}
  for name in (fields if only is None else only):
    field = fields[name]
    meta, default = field.metadata, defaults.get(name, field.default)
    kind = _scalar_type(cls, field)
    kw = dict(dest=_dest(field), help=(helps or {}).get(name, meta['help']))
    if kind is bool:  # a switch: --NAME sets True, --no-NAME (dest no_NAME) sets False
      kw.update(action='store_true')
    else:
      kw.update(type=meta.get('parse') or kind, default=default)
      if meta.get('choices'):
        kw['choices'] = meta['choices']
      if meta.get('metavar'):
        kw['metavar'] = meta['metavar']
      if name in required:
        kw.update(required=True)
        kw.pop('default')
    title = meta.get('group')
    if title and title not in groups:
      groups[title] = parser.add_argument_group(title)
    (groups[title] if title else parser).add_argument(flag_name(field), **kw)


def check_bounds(values, cls) -> None:
  """One-line ValueErrors for a field of `cls` below its `least` or not above its
  `above`, read from `values` (a `cls` config, or the namespace its flags were parsed
  into): e.g. '--steps must be >= 1, got 0'."""
  for field in cli_fields(cls):
    value, meta = getattr(values, field.name, None), field.metadata
    if value is None:
      continue
    if meta.get('least') is not None and not value >= meta['least']:
      raise ValueError(f'{flag_name(field)} must be >= {meta["least"]}, got {value}')
    if meta.get('above') is not None and not value > meta['above']:
      raise ValueError(f'{flag_name(field)} must be > {meta["above"]}, got {value}')


def from_args(cls, args: argparse.Namespace, **extra):
  """The config of parsed flags: every field whose flag the namespace holds, then `extra`."""
  values = {}
  for field in cli_fields(cls):
    if hasattr(args, _dest(field)):
      value = getattr(args, _dest(field))
      values[field.name] = (not value) if field.metadata.get('negated') else value
  return cls(**{**values, **extra})


def to_args(config, only: Optional[Iterable[str]] = None, always: bool = False) -> List[str]:
  """The flags that give `config`, in field order (or `only`'s).

  Args:
    config: a config whose fields were declared with `flag`.
    only: the field names to write (default: every command-line field).
    always: write the fields of `only` at their default values too (a switch that is off
      and a value of None have no flag and are left out).

  Returns:
    The argv list, e.g. ['--gamma', '4', '--truncate-inputs'].
  """
  fields = {f.name: f for f in cli_fields(type(config))}
  out = []
  for name in (fields if only is None else only):
    field, value = fields[name], getattr(config, name)
    if value is None or (value == field.default and not (always and value is not False)):
      continue
    if isinstance(value, bool):
      out.append(flag_name(field))
    else:
      out += [flag_name(field), str(value)]
  return out
