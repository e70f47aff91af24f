"""Triton: kernels Triton compiled, launched with the calling convention of the release that
compiled them.

:mod:`.frontend` (``from_triton``), :mod:`.cache_folder` (``load_triton``, no Triton needed),
:mod:`.spec` (the spec all three build), :mod:`.versions` (the convention of each release),
:mod:`.launcher` (``triton_launcher``), :mod:`.autotune` (``@triton.autotune`` and
``@triton.heuristics``), :mod:`.hooks` (Triton's launch hooks) and :mod:`.tensordesc` (tensor
descriptors as kernel arguments).

Imports: as every front end (``launchpad.frontends``); no other front end.
"""

# Triton's launch hooks and the tensor descriptor converter register on import: every kernel this
# front end makes (and a saved one, :func:`launchpad.load`) finds them.
from . import hooks as _hooks  # noqa: F401
from . import tensordesc as _tensordesc  # noqa: F401
