"""python -m specjax.bench (see `specjax.bench.cli`)."""
import sys

from specjax.bench import cli

if __name__ == '__main__':
  sys.exit(cli.main())
