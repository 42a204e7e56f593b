"""python -m specjax.bench (see `specjax.bench.cli`)."""
from specjax import interrupt

if __name__ == '__main__':  # before the imports below, which take seconds
  interrupt.exit_at_once(lambda: 'nothing was written (the bench writes its --json, '
                         '--plot and --markdown files whole, when its rows are done)')

from specjax.bench import cli  # pylint: disable=wrong-import-position

if __name__ == '__main__':
  interrupt.finish(cli.main())
