"""Recorded sequences (``launchpad.record``): a function's launches captured once as one CUDA graph
and replayed with new inputs, returning new outputs.

The modules, in the order a recording uses them:

1. :mod:`.capture` runs the function under stream capture and reads the graph's nodes and the
   capture's allocations (:mod:`.allocations`); :mod:`.same_launches` checks that captures launched the
   same work, and :mod:`.regions` cuts a node's parameters into the regions compared.
2. :mod:`.analysis` finds where each input goes, and :mod:`.outputs` where each output lives, both
   from allocation facts and captures compared byte by byte; :mod:`.scalars` packs a scalar as a
   launch does.
3. :mod:`.kept_capture` makes the capture a sequence keeps and follows the outputs in it.
4. :mod:`.sequence` is ``record`` and the ``Sequence``, which holds what its replays read and write
   in one :class:`~.state.SequenceState` (:mod:`.state`).
5. :mod:`.updates` changes the instantiated graph's nodes (from the device through launchpad's
   updater node and a pinned ring, or from the host); :mod:`.pyreplay` is the Python replay,
   :mod:`.creplay` the tables of the compiled one (``launchpad/launch/_claunch/replay.c``), and
   :mod:`.explain` what ``Sequence.explain`` says.
6. :mod:`.distributed` is what DDP steps need of a recording, and the release of sequences holding
   NCCL work before a process group is destroyed.

Imports: ``launchpad.core``, ``launchpad.launch`` and ``launchpad.errors``; nothing below imports it.
"""
