"""launchpad's benchmarks: launch overhead against peers, the argument-count sweep, compile,
cache and import times.

``python -m launchpad bench`` runs them (``--quick`` for a run under a minute, ``--help`` for the
options) on whichever peers are installed: Triton, cuda.core, CuPy, Numba, torch's static Triton
launcher, tvm-ffi. Every launcher is timed the same way (:mod:`launchpad.bench.harness`) and
compared with a C loop calling ``cuLaunchKernel`` in the same run (:class:`~launchpad.bench.context.CFloor`);
results go to ``latest.json``, ``latest.md`` and ``latest.png`` (:mod:`launchpad.bench.runner`).

Modules: ``harness`` (timing method, statistics, tables, JSON and chart), ``context`` (kernels,
tensors, the C floor), ``launchers`` (one factory per launcher), ``targets`` (the performance
targets and their verdicts), ``compile_times``, ``breakdown`` (where a launch's time goes), and
``runner`` (the command).

Imports: anything in launchpad (it measures the library through its public names and its
executors). Only the CLI imports this folder; the library never does.
"""

from .runner import run

__all__ = ["run"]
