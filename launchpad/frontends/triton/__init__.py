"""Triton: kernels Triton compiled, launched with the calling convention of the release that
compiled them.

:mod:`.in_process` (``from_triton``), :mod:`.cache_folder` (``load_triton``, no Triton needed),
:mod:`.spec` (the spec all three build), :mod:`.versions` (the convention of each release),
:mod:`.launcher` (``triton_launcher``), :mod:`.autotune` (``@triton.autotune`` and
``@triton.heuristics``), :mod:`.hooks` (Triton's launch hooks) and :mod:`.tensordesc` (tensor
descriptors as kernel arguments).

Imports: as every front end (``launchpad.frontends``); no other front end.
"""
