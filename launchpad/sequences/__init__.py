"""Recorded sequences (``launchpad.record``): a function's launches captured once as one CUDA graph
and replayed with new inputs, returning new outputs.

:mod:`.capture` runs the function under stream capture and reads the graph's nodes and the
capture's allocations; :mod:`.analysis` finds where each input goes, :mod:`.outputs` where each
output lives, both from allocation facts and captures compared byte by byte; :mod:`.scalars`
packs a scalar as a launch does; :mod:`.updates` changes the instantiated graph's nodes (from the
device through launchpad's updater node and a pinned ring, or from the host); :mod:`.sequence` is
``record`` and the ``Sequence``; :mod:`.pyreplay` its Python replay, :mod:`.creplay` the tables
of its compiled one (``launchpad/launch/_claunch/replay.c``) and :mod:`.explain` what
``Sequence.explain`` says; :mod:`.distributed` what DDP steps need of a recording, and the release
of sequences holding NCCL work before a process group is destroyed.

Imports: ``launchpad.core``, ``launchpad.launch`` and ``launchpad.errors``; nothing below imports it.
"""
