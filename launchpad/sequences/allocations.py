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

Where a block held a temporary before an output, the graph's nodes say which of the two a word
means by when they were made. A :class:`NodeClock` around a capture ticks before and after every
torch op: it reads the capturing graph's node count and puts a tick's number in the allocator's
metadata (``torch.cuda.memory._set_memory_metadata``, one per thread), which every allocation and
free of that thread carries in the history until its next tick. So an allocation that carries
tick ``s`` was made when the graph held at least ``count(s)`` nodes, and a free, when it held at
most the count of the thread's next tick: a node made before the first cannot use the
allocation, one made after the second cannot use it either (:meth:`Blocks.possible`). Bounds that
cannot be read (another thread's, a torch whose metadata is not per thread) say nothing.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import sys
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..core import driver as _driver

__all__ = ["Blocks", "History", "NodeClock", "clock_available", "lifetimes", "node_clock"]

#: Entries the allocator may keep while a capture runs; a capture that allocates more is read as
#: unknown (the history's oldest entries would be gone).
MAX_ENTRIES = 1 << 20


class History:
    """A context manager around one capture: afterwards ``blocks`` lists ``(address, size)`` of
    every allocation made meanwhile on ``device``, in order, or is None where it cannot be known.

    The history is switched on for the capture alone, and read from where it stood when switched on
    (a torch that cannot clear it on enabling keeps what earlier captures recorded)."""

    def __init__(self, device: int, clock: NodeClock | None = None):
        self.device = device
        self.clock = clock  # set once the capture has begun, where its allocations are timed
        self.blocks: list[tuple[int, int]] | None = None
        self.lifetimes: list[tuple[int, int]] | None = None  # per block: see :func:`lifetimes`
        self.pool: Any = None  # the graph's memory pool (its id), set once the capture has begun
        self.skip = (0, 0)  # entries of the history [start, end) that are not the captured function's
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
                    first, end = self.skip
                    entries = [e for j, e in enumerate(trace) if j >= self._start and not first <= j < end and
                               e["action"] in _ACTIONS and mine(int(e["addr"]))]  # fmt: skip
                    self.blocks = [(int(e["addr"]), int(e["size"])) for e in entries if e["action"] == "alloc"]
                    if self.clock is not None:
                        self.lifetimes = lifetimes(entries, self.clock.token, self.clock.ticks)
        finally:
            torch.cuda.memory._record_memory_history(None)

    def mark(self) -> int:
        """Where the history stands now (its entries so far; -1 where it is not read): bounds
        :attr:`skip`."""
        return len(self._trace()) if self._start >= 0 else -1

    def _trace(self, snapshot: dict | None = None) -> list[dict]:
        traces = (snapshot or torch.cuda.memory._snapshot())["device_traces"]
        return traces[self.device] if self.device < len(traces) else []


_ACTIONS = ("alloc", "free_requested", "free_completed")


def lifetimes(entries: list[dict], token: str, ticks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(first, end)`` per allocation of ``entries`` (the history's allocations and frees, in
    order): the nodes ``first <= i < end`` are all that may have used it, by the ticks of a
    :class:`NodeClock` (``(node count, thread)`` each; the metadata ``token + str(tick)``). An
    allocation made at tick ``s`` came after ``count(s)`` nodes; a free at tick ``s``, before the
    thread's next tick (it would carry that one's number otherwise), so before its count's node.
    Without a tick of this clock, ``first`` is 0 and ``end`` unbounded (``sys.maxsize``)."""
    following: list[int | None] = [None] * len(ticks)
    last: dict[int, int] = {}
    for s in range(len(ticks) - 1, -1, -1):
        following[s] = last.get(ticks[s][1])
        last[ticks[s][1]] = s

    def tick(entry: dict) -> int | None:
        label = entry.get("user_metadata")
        if not isinstance(label, str) or not label.startswith(token) or not label[len(token) :].isdigit():
            return None
        number = int(label[len(token) :])
        return number if number < len(ticks) else None

    found: list[list[int]] = []
    alive: dict[int, int] = {}  # address -> its allocation's index in found
    for entry in entries:
        address, at = int(entry["addr"]), tick(entry)
        if entry["action"] == "alloc":
            alive[address] = len(found)
            found.append([ticks[at][0] if at is not None else 0, sys.maxsize])
        elif (k := alive.pop(address, None)) is not None:  # (its free_requested; free_completed is later)
            after = following[at] if at is not None else None
            found[k][1] = ticks[after][0] if after is not None else sys.maxsize
    return [(first, end) for first, end in found]


class NodeClock(TorchDispatchMode):
    """A tick before and after each torch op of a capture (see the module documentation): the
    capturing graph's node count then, in :attr:`ticks`, and the tick's number in the allocator's
    metadata of the thread that runs the op. The thread that made the clock keeps its last tick
    between ops and gets its own metadata back at the end; any other (autograd's) gets its own back
    after each op, so that nothing of the clock outlives the capture."""

    def __init__(self, graph: int):
        super().__init__()
        self.graph = graph
        self.token = f"launchpad-node-clock-{id(self):x}:"
        self.ticks: list[tuple[int, int]] = []  # (node count, thread ident)
        self._lock = threading.Lock()
        self._owner = threading.get_ident()
        self._saved = torch.cuda.memory._get_memory_metadata()

    @classmethod
    def ignore_compile_internals(cls) -> bool:  # (torch.compile's code runs compiled under it, not eagerly)
        return True

    def tick(self, label: bool = True) -> None:
        with self._lock:
            self.ticks.append((_driver.graph_node_count(self.graph), threading.get_ident()))
            if label:
                torch.cuda.memory._set_memory_metadata(f"{self.token}{len(self.ticks) - 1}")

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        mine = threading.get_ident() == self._owner
        before = None if mine else torch.cuda.memory._get_memory_metadata()
        self.tick()
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.tick(label=mine)
            if before is not None:
                torch.cuda.memory._set_memory_metadata(before)

    def close(self) -> None:
        torch.cuda.memory._set_memory_metadata(self._saved)


@contextlib.contextmanager
def node_clock(stream: int) -> Iterator[NodeClock | None]:
    """A :class:`NodeClock` on the graph ``stream`` captures into, while the block runs; None where
    this torch cannot give one (no allocator metadata, or metadata shared by all threads)."""
    graph = _driver.capturing_graph(stream) if clock_available() else 0
    if not graph:
        yield None
        return
    clock = NodeClock(graph)
    try:
        with clock:
            clock.tick()
            yield clock
    finally:
        clock.close()


@functools.cache
def clock_available() -> bool:
    """Whether this torch can time a capture: its allocator keeps metadata per thread (2.11 does; a
    free's bound needs it), and torch.compile's code runs compiled under a dispatch mode that asks
    so (``ignore_compile_internals``; else the timed capture would run it eagerly, other nodes)."""
    memory = torch.cuda.memory
    if not hasattr(memory, "_set_memory_metadata") or not hasattr(memory, "_get_memory_metadata"):
        return False
    if not hasattr(TorchDispatchMode, "ignore_compile_internals"):
        return False
    saved, seen = memory._get_memory_metadata(), []
    memory._set_memory_metadata("launchpad-probe")
    try:
        thread = threading.Thread(target=lambda: seen.append(memory._get_memory_metadata()))
        thread.start()
        thread.join()
    finally:
        memory._set_memory_metadata(saved)
    return seen != ["launchpad-probe"]


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

    def __init__(self, blocks: list[tuple[int, int]], lifetimes: list[tuple[int, int]] | None = None):
        self.blocks = blocks
        self.lifetimes = lifetimes  # per block, the nodes that may use it (:func:`lifetimes`); None: any
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

    def possible(self, k: int, node: int) -> bool:
        """Whether the node at ``node`` in the graph's order may use allocation ``k``: made after it
        was allocated and before it was freed, as far as the lifetimes tell (without them: yes)."""
        if self.lifetimes is None:
            return True
        first, end = self.lifetimes[k]
        return first <= node < end
