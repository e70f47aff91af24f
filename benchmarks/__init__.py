"""launchpad's recorded benchmark results (``results/``).

The benchmarks themselves ship with the package, in :mod:`launchpad.bench`: run them with
``python -m launchpad bench`` (results go to ``./launchpad-bench``; ``--out benchmarks/results``
records a run here)."""
