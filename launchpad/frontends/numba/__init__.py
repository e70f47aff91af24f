"""Numba: kernels compiled by Numba, launched without its dispatcher.

:mod:`.frontend` (``from_numba``: a signature to parameters), :mod:`.compile` (Numba's compiler,
the files it links), :mod:`.args` (arrays, records and complex numbers as Numba's ABI passes them;
imports no Numba, so saved Numba kernels launch without it).

Imports: as every front end (``launchpad.frontends``); no other front end.
"""
