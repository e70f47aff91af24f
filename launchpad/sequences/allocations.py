"""What a capture allocated: the allocation facts the analysis maps every pointer word onto.

During a capture every allocation the recorded function makes (its intermediates, its outputs,
torch's and cuBLAS's workspaces) comes from the graph's private memory pool, and torch's caching
allocator reuses a block freed earlier in the same capture. So an address alone does not say
which allocation a word means: a word that points into a returned tensor's memory may mean a
temporary that sat there before it. :class:`History` reads the allocator's own record of every
allocation made during a capture (torch's memory history, ``action == "alloc"`` entries: address
and size, in order); :class:`Blocks` answers, for an address, which of them contain it.

Where the history cannot be read (the user records torch's memory history already and its
buffer is shared, or this torch has none), :attr:`History.blocks` is None and the analysis knows
nothing about the capture's memory: every output is then copied, never re-pointed.
"""

from __future__ import annotations

import bisect
from typing import Any

import torch

__all__ = ["Blocks", "History"]

#: Entries the allocator may keep while a capture runs; a capture that allocates more is read as
#: unknown (the history's oldest entries would be gone).
MAX_ENTRIES = 1 << 20


class History:
    """A context manager around one capture: afterwards ``blocks`` lists ``(address, size)`` of
    every allocation made meanwhile on ``device``, in order, or is None where it cannot be known.

    The history is switched on for the capture alone, and read from where it stood when switched on
    (a torch that cannot clear it on enabling keeps what earlier captures recorded)."""

    def __init__(self, device: int):
        self.device = device
        self.blocks: list[tuple[int, int]] | None = None
        self.pool: Any = None  # the graph's memory pool (its id), set once the capture has begun
        self._start = -1  # entries in the history when the capture began; -1: not ours to read

    def __enter__(self) -> History:
        # TODO(launchpad): re-pointing an output relies on torch's allocator history, read through torch's
        # private API (torch.cuda.memory._record_memory_history and _snapshot, torch._C._cuda_isHistoryEnabled),
        # which may change in any release; where it cannot be read (the user records the history already, or a
        # torch has none), every output is copied at the graph's end instead of re-pointed.
        enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
        if enabled is None or enabled():  # the user's history: not ours to clear or switch off
            return self
        memory = torch.cuda.memory
        try:
            memory._record_memory_history("all", context=None, stacks="python", max_entries=MAX_ENTRIES,
                                          clear_history=True)  # fmt: skip
        except TypeError:  # a torch without clear_history
            memory._record_memory_history("all", context=None, stacks="python", max_entries=MAX_ENTRIES)
        try:
            self._start = len(self._trace())
        except Exception:
            memory._record_memory_history(None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._start < 0:
            return
        try:
            if exc[0] is None:
                snapshot = torch.cuda.memory._snapshot()
                trace = self._trace(snapshot)
                if len(trace) < MAX_ENTRIES:  # (a full history has lost its oldest entries)
                    mine = _in_pool(snapshot, self.pool)
                    self.blocks = [(int(e["addr"]), int(e["size"])) for e in trace[self._start :]
                                   if e["action"] == "alloc" and mine(int(e["addr"]))]  # fmt: skip
        finally:
            torch.cuda.memory._record_memory_history(None)

    def _trace(self, snapshot: dict | None = None) -> list[dict]:
        traces = (snapshot or torch.cuda.memory._snapshot())["device_traces"]
        return traces[self.device] if self.device < len(traces) else []


def _in_pool(snapshot: dict, pool: Any) -> Any:
    """Whether an address lies in a segment of the graph's private pool: what the captured function
    allocated there moves with every capture; anything else it allocated (a generator's state made
    on first use, a library's workspace) is memory outside the graph, the same in every capture."""
    segments = [(int(s["address"]), int(s["total_size"])) for s in snapshot.get("segments", ())
                if pool is not None and tuple(s.get("segment_pool_id", ())) == tuple(pool)]  # fmt: skip
    if pool is None or not any("segment_pool_id" in s for s in snapshot.get("segments", ())):
        return lambda address: True  # (a torch that does not say which pool a segment is in: all of them)
    return lambda address: any(start <= address < start + size for start, size in segments)


class Blocks:
    """The allocations of one capture, for lookups: the ``k``-th allocation is ``blocks[k]``."""

    def __init__(self, blocks: list[tuple[int, int]]):
        self.blocks = blocks
        order = sorted(range(len(blocks)), key=lambda k: blocks[k][0])
        self._order = order
        self._starts = [blocks[k][0] for k in order]
        self._reach: list[int] = []  # the furthest end of any block at or before each position
        furthest = -1
        for k in order:
            furthest = max(furthest, blocks[k][0] + blocks[k][1])
            self._reach.append(furthest)

    def containing(self, address: int) -> tuple[tuple[int, int], ...]:
        """``(k, offset)`` for every allocation whose bytes, or whose end, ``address`` is at: an end
        pointer counts (a kernel given ``[begin, end)`` holds one), so an allocation that starts
        where another ends shares that address with it."""
        found = []
        j = bisect.bisect_right(self._starts, address) - 1
        while j >= 0 and self._reach[j] >= address:
            k = self._order[j]
            start, size = self.blocks[k]
            if address <= start + size:
                found.append((k, address - start))
            j -= 1
        return tuple(sorted(found))

    def find(self, start: int) -> int | None:
        """The allocation that starts at ``start`` (the last made, where several did), or None."""
        found = [k for k, (s, _) in enumerate(self.blocks) if s == start]
        return found[-1] if found else None

    def shares(self, k: int) -> bool:
        """Whether another allocation of the capture held any of allocation ``k``'s bytes: then an
        address inside ``k`` does not say which of them a word means. One that only touches ``k``
        (ends where ``k`` starts, starts where it ends: the caching allocator's neighbouring blocks)
        shares a single address with it, which every word holding it shows (:meth:`containing`
        gives both), and is judged word by word."""
        start, size = self.blocks[k]
        return any(j != k and s < start + size and start < s + n for j, (s, n) in enumerate(self.blocks))
