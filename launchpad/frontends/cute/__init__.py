"""CuTe DSL: ``@cute.kernel`` functions compiled by CuTe DSL (``nvidia-cutlass-dsl``), launched without its JIT call.

:mod:`.frontend` (``from_cute``: a kernel, or the ``@cute.jit`` function launching it, and example
arguments to a spec), :mod:`.layout` (CuTe's calling convention: a ``!cute.memref`` type to the
by-value struct the kernel takes), :mod:`.args` (a tensor argument packed into that struct, with
every compile-time assumption checked; imports no CuTe DSL, so saved CuTe kernels launch without
it) and :mod:`.versions` (the CuTe DSL releases launchpad works with).

Imports: as every front end (``launchpad.frontends``); no other front end.
"""
