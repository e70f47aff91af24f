"""``python -m launchpad``: the command line (see :mod:`launchpad.cli`)."""

from launchpad.cli import main

raise SystemExit(main())
