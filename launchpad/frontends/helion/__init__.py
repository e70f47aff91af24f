"""Helion: kernels written with ``@helion.kernel``, launched through launchpad.

:mod:`.frontend` (:class:`HelionKernel`, what ``launchpad.helion_kernel`` returns: Helion's
compiled host function per specialization, called with a launchpad launcher), :mod:`.keys` (the
specialization key, Helion's own computed cheaply), :mod:`.launch` (the ``_launcher`` handed to
Helion's host functions, and what it refuses) and :mod:`.versions` (the Helion releases whose
keying it follows).

Helion is imported lazily: importing launchpad never imports it.

Imports: as every front end (``launchpad.frontends``); no other front end. The Triton launcher
it launches through is given to :class:`HelionKernel` by ``launchpad/__init__.py`` (as the
autotuner is given the launcher class it wraps).
"""
