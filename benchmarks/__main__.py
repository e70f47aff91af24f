"""``python -m benchmarks [options]``: the same as ``python -m launchpad bench [options]``."""

import sys

from launchpad.cli import main

raise SystemExit(main(["bench", *sys.argv[1:]]))
