"""What a recorded sequence owns, held in one object that both of its replays are given.

1. ``Sequence.__init__`` (:mod:`.sequence`) makes one :class:`SequenceState` from the recording:
   the plan, the graph and its executable, the updater's ring, the target of every node a replay
   changes, the list of current input values, the launch counters and the lock.
2. :meth:`SequenceState.index` derives from it the tables every replay reads: a number for every
   use of every input and output, the last word staged for each use, the entries of a ring slot,
   and the host target of each use that has one. It runs again when a target moves from the device
   to the host (a node the driver refuses to update from the device), before any replay is made.
3. The Python replay (:mod:`.pyreplay`) is a function of the state. The compiled replay
   (``_claunch.Replay``, whose tables :mod:`.creplay` builds) is handed the very same objects: the
   list of current values, the counters and the staged words by their addresses, the lock. So a
   replay of either kind sees what the other last wrote.
4. :meth:`SequenceState.release` lets the graph, its memory pool, the ring and the held tensors go
   (``Sequence.close()``), through the finalizer that also runs when the sequence is collected.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .analysis import Leaf, Plan, Use
from .output_memory import Batch
from .updates import DEVICE, Ring, Target

__all__ = ["BROKEN", "LAUNCHES", "SequenceState"]

#: The words of :attr:`SequenceState.counters`: launches so far (the ring's), and "broken".
LAUNCHES, BROKEN = range(2)


def _counters() -> ctypes.Array[ctypes.c_uint64]:
    return (ctypes.c_uint64 * 2)()


@dataclass(eq=False)
class SequenceState:
    """Everything a :class:`~launchpad.sequences.sequence.Sequence` owns, and all that its replays
    read and write (see the module documentation). The first group is fixed by the recording, the
    second is owned until :meth:`release` (the modules until the sequence is collected), the third
    is derived by :meth:`index`."""

    # --- what the sequence was recorded with ---------------------------------------------------
    names: tuple[str, ...]  # the inputs, in fn's order
    device: int
    plan: Plan
    positional: int  # how many leading parameters of fn are inputs (positional argument i is input i)
    parameters: tuple[str, ...]  # fn's parameters, in order
    positions: dict[str, int] = field(init=False)  # per input name: its position
    #: The graph draws from torch's generators: a replay launches through torch's CUDAGraph.replay(),
    #: which writes each generator's seed and offset before the launch and advances the offset.
    rng: bool
    # --- what it owns until it is released ------------------------------------------------------
    graph: Any  # torch.cuda.CUDAGraph, instantiated (the fake GPU's stand-in in tests); None once released
    graph_exec: int  # its executable (cudaGraphExec_t)
    ring: Ring | None  # the updater's pinned ring, or None: every node is updated from the host
    targets: dict[int, Target]  # per node a replay changes (by index): how it is changed
    statics: dict[str, tuple[torch.Tensor, int]]  # copied inputs: the sequence's buffer and its span
    holders: dict[int, torch.Tensor]  # copied outputs: where the copy node writes
    current: list[Any]  # per input: the value the graph reads now (the one record of it; C writes it too)
    allocators: list[Callable[[], torch.Tensor]]  # per output storage: new memory for a replay
    modules: list[Any]  # the modules of its kernels: kept loaded until the sequence is collected
    note: str = ""  # why nodes are not updated from the device, where they are not
    counters: ctypes.Array[ctypes.c_uint64] = field(default_factory=_counters)  # LAUNCHES, BROKEN
    lock: threading.Lock = field(default_factory=threading.Lock)  # replays (both kinds) and close()
    #: Nodes the driver would not update from the device (updated from the host): ``(node, cudaError_t)``.
    refused: list[tuple[int, int]] = field(default_factory=list)
    finalizer: weakref.finalize | None = None  # drains the device and resets the graph (see sequence.py)
    closed: bool = False
    # --- derived by index(): every use (each input's, in input order, then each output storage's) -
    words: ctypes.Array[ctypes.c_uint64] = field(init=False)  # per use: the last word staged (one at least)
    uses: list[Use] = field(init=False)  # every use, by index
    input_uses: list[tuple[int, list[Use]]] = field(init=False)  # per input: its first use's index, its uses
    output_uses: list[tuple[int, list[Use]]] = field(init=False)  # per output storage, likewise
    entries: list[int] = field(init=False)  # per entry of a ring slot: its use's index (the device targets')
    entry_of: list[int] = field(init=False)  # per use: its entry, or -1 (a host target's use)
    hosts: list[Target | None] = field(init=False)  # per use: its host target (None: a device target's)
    views: dict[str, list[Leaf]] = field(init=False)  # per input: returned views a new value may misplace
    snapshot: bool = field(init=False)  # the result holds inputs: the current values are taken under the lock
    launch: Callable[[], Any] | None = field(init=False)  # torch's graph replay (rng), or None: cuGraphLaunch
    layouts: list[tuple | None] = field(init=False)  # per input: a tensor's (dtype, shape, strides); None: a number

    def __post_init__(self) -> None:
        self.positions = {name: i for i, name in enumerate(self.names)}

    def index(self) -> None:
        """Derive the tables every replay reads (the third group of fields) from the plan, the
        targets and the current values; also write the entries of every ring slot."""
        uses: list[Use] = []
        self.input_uses, self.output_uses = [], []
        for name in self.names:
            self.input_uses.append((len(uses), list(self.plan.inputs[name].uses)))
            uses += self.input_uses[-1][1]
        for storage in self.plan.storages:
            self.output_uses.append((len(uses), list(storage.uses)))
            uses += self.output_uses[-1][1]
        words = (ctypes.c_uint64 * max(len(uses), 1))()
        entries: list[int] = []
        entry_of: list[int] = []
        hosts: list[Target | None] = []
        for u, use in enumerate(uses):
            target = self.targets[use.node]
            device = target.kind == DEVICE
            recorded = self.plan.nodes[target.index].block if device else target.blob
            assert recorded is not None  # (a device target's node has its block; a host target its blob)
            words[u] = int.from_bytes(bytes(recorded[use.offset : use.offset + use.size]), "little")
            entry_of.append(len(entries) if device else -1)
            hosts.append(None if device else target)
            entries += [u] if device else []
        if self.ring is not None:
            self.ring.fill([(self.targets[uses[u].node].devnode, uses[u].offset, uses[u].size) for u in entries])
        views: dict[str, list[Leaf]] = {}
        for leaf in (leaf for leaf in self.plan.leaves if leaf.kind == "input"):
            size = leaf.dtype.itemsize  # (where it divides the element size and the offset, any value allows it)
            if self.current[self.positions[leaf.input]].element_size() % size or leaf.offset % size:
                views.setdefault(leaf.input, []).append(leaf)
        self.words, self.uses, self.entries, self.entry_of, self.hosts, self.views = (
            words, uses, entries, entry_of, hosts, views)  # fmt: skip
        self.snapshot = any(leaf.kind == "input" for leaf in self.plan.leaves)
        self.launch = self.graph.replay if self.rng else None
        self.layouts = [(v.dtype, v.shape, v.stride()) if isinstance(v, torch.Tensor) else None for v in self.current]

    def release(self) -> None:
        """Let go of the graph, its memory pool, the ring, the copy buffers and the tensors held
        (``Sequence.close()``; the caller holds the lock). The finalizer runs now: it waits for the
        device, then resets the graph. Later replays must be refused by the caller."""
        self.closed = True
        for allocate in self.allocators:  # (a batch's slots not taken: 32 KiB each)
            if isinstance(allocate, Batch):
                allocate.drop()
        self.targets, self.statics, self.holders, self.current = {}, {}, {}, []
        self.hosts, self.launch = [], None  # (the derived tables' references to targets and the graph)
        self.graph = self.ring = None
        if self.finalizer is not None:
            self.finalizer()
