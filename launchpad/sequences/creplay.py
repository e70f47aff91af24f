"""The compiled replay of a recorded sequence: the tables ``_claunch.Replay`` (``replay.c``) runs.

1. The tables are built once per sequence from its
   :class:`~launchpad.sequences.state.SequenceState`, the one the Python replay is given: its
   targets, uses, output allocators and ring, and :meth:`~launchpad.sequences.state.SequenceState.index`'s
   staged words.
2. The compiled replay is handed the same objects the Python replay uses, not copies: the list of
   current values, the launch counters and the staged words (by their addresses), and the lock. So
   both replays agree on what the graph reads, and a replay of either kind may follow the other.
3. A sequence with a value the C side cannot check the way Python does (a Numba int that wraps, a
   returned view of an input that a new value may misplace) still gets a compiled replay: such a
   value goes to the Python replay call by call, as does every refusal.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import torch

from ..core import driver as _driver
from ..launch import executor as _executor
from . import pyreplay as _pyreplay
from .analysis import Use
from .outputs import Index
from .state import SequenceState
from .updates import DEVICE, KERNEL, Target

__all__ = ["compiled_replay"]


def compiled_replay(st: SequenceState, python_replay: Callable[..., Any], get_stream: Any = None) -> Any:
    """``_claunch.Replay`` of the sequence whose state is ``st``, or None where the compiled module is
    not built. ``get_stream``: torch's current stream on a device (None: the C side asks DLPack)."""
    if _executor._claunch is None:
        return None
    index = {node: k for k, node in enumerate(st.targets)}  # node index -> position in the targets table
    targets = tuple(_target(t, st) for t in st.targets.values())
    inputs = []
    for pos, name in enumerate(st.names):
        value, (first, uses) = st.current[pos], st.input_uses[pos]
        tensor = isinstance(value, torch.Tensor)
        dtype = _executor.dlpack_word(value.dtype) if tensor else 0
        shape, strides = (tuple(value.shape), tuple(value.stride())) if tensor else ((), ())
        inputs.append((name, tensor, dtype, shape, strides, _uses(uses, st.entry_of, index, first), name in st.views))
    outputs = tuple((allocate, _uses(uses, st.entry_of, index, first))
                    for allocate, (first, uses) in zip(st.allocators, st.output_uses))  # fmt: skip
    ring = st.ring
    ring_table = (ring.memory.data_ptr(), ring.slots, ring.capacity) if ring is not None else None
    return _executor._claunch.Replay(
        tuple(inputs), targets, outputs, st.graph_exec, st.device, _driver.graph_entry_points(),
        _driver.launch_entry_points()[2], ctypes.addressof(st.counters), ring_table,
        (ctypes.addressof(st.words), len(st.uses)), st.current, python_replay, _builder(st), st.lock,
        (st.targets, st.graph, ring, st.words, st), _executor._exchange_api_types(), get_stream, st.positional,
        st.snapshot, st.launch,
    )  # fmt: skip


def _uses(uses: list[Use], entry_of: list[int], index: dict[int, int], first: int) -> tuple:
    """The C table of consecutive uses from index ``first`` (each with its ring entry, or -1)."""
    return tuple((index[u.node], u.offset, u.size, u.slot, u.delta, u.align, u.multiple_of, entry_of[first + k])
                 for k, u in enumerate(uses))  # fmt: skip


def _target(t: Target, st: SequenceState) -> tuple:
    if t.kind == DEVICE:
        node = st.plan.nodes[t.index]
        return (DEVICE, t.devnode, len(node.block or b""))
    if t.kind == KERNEL:
        return (KERNEL, t.handle, t.function, t.grid, t.block_dim, t.shared_mem, t.context, t.blob, t.address)
    return (t.kind, t.handle, t.blob, t.context)


def _builder(st: SequenceState) -> Callable[[tuple, tuple | None], Any] | None:
    """How the compiled replay makes its result from the new outputs and the input values it took
    under the lock: None where the result is the one output as allocated (or None), else the
    Python replay's own builder."""
    leaves, template = st.plan.leaves, st.plan.template
    if template is None and not leaves:
        return None
    if isinstance(template, Index) and leaves[0].kind == "storage" and len(st.plan.storages) == 1:
        if getattr(st.allocators[0], "func", None) is torch.empty_strided:  # allocated as the leaf itself
            return None

    def build(fresh: tuple, current: tuple | None) -> Any:
        return _pyreplay.build(st, list(fresh), current)

    return build
