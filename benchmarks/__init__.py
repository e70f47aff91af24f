"""launchpad's recorded benchmark results (``results/``).

The benchmarks themselves ship with the package, in :mod:`launchpad.bench`: run them with
``python -m launchpad bench`` (from a checkout, results are written to ``benchmarks/results``).
"""
