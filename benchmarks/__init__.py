"""launchpad's benchmarks: launch overhead against peers, argument-count sweep, compile times.

Run them with ``python -m launchpad bench`` from the repository root (``--quick`` for a run
under a minute, ``--help`` for the options). Results go to ``benchmarks/results/``.
"""

#: Marks this package as launchpad's benchmarks (``launchpad bench`` checks it, since other
#: distributions may install a top-level package named ``benchmarks``).
LAUNCHPAD_BENCHMARKS = True
