"""python -m specjax.datastore (see `specjax.datastore.cli`)."""
import sys

from specjax.datastore import cli

if __name__ == '__main__':
  sys.exit(cli.main())
