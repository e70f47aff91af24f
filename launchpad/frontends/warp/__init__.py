"""NVIDIA Warp: ``@wp.kernel`` functions compiled by Warp, launched from torch tensors without ``wp.launch``.

:mod:`.frontend` (``from_warp``: a kernel's module compiled for one architecture, its signature
to a spec), :mod:`.kernel` (``WarpKernel``: ``kernel[dim]`` with Warp's launch bounds and grid),
:mod:`.args` (the launch bounds, ``array_t`` and vector values packed from torch; imports no Warp,
so saved Warp kernels launch without it) and :mod:`.versions` (the Warp releases followed).

Imports: as every front end (``launchpad.frontends``); no other front end.
"""
