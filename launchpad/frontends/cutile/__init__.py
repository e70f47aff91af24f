"""cuTile: ``cuda.tile`` kernels compiled by cuTile's ahead-of-time export, launched without ``ct.launch``.

:mod:`.frontend` (``from_cutile``: a kernel and a signature to a spec), :mod:`.signature` (cuTile's
documented calling convention: parameter constraints to parameters and arguments, and the
signature ``ct.launch`` would compile for example arguments), :mod:`.args` (an array argument as
its pointer, shape and strides, with every compile-time assumption checked; imports no cuTile, so
saved cuTile kernels launch without it) and :mod:`.versions` (the cuTile and ``tileiras``
releases launchpad works with).

Imports: as every front end (``launchpad.frontends``); no other front end.
"""
