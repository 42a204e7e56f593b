"""python -m specjax.speed: time the speed plan's programs on this device (see measure.py)."""
import sys

from specjax.speed.measure import main

sys.exit(main())
