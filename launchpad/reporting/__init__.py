"""What ``python -m launchpad`` and the benchmarks print: the environment and text tables.

Imports: anything in launchpad. Only the CLI and ``launchpad.bench`` import this folder.
"""
