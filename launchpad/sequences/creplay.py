"""The compiled replay of a recorded sequence: the tables ``_claunch.Replay`` (``replay.c``) runs.

Built once per sequence from what the Python replay uses (the sequence's targets, uses, output
allocators, ring, lock, list of current values and :class:`~launchpad.sequences.pyreplay.ReplayState`:
one of each, shared, so both replays agree on what the graph reads). Sequences with a value the C
side cannot check the way Python does (a Numba int that wraps, a returned view of an input that a
new value may misplace) still get it: such a value goes to the Python replay call by call.
"""

from __future__ import annotations

import ctypes
import weakref
from collections.abc import Callable
from typing import Any

import torch

from ..core import driver as _driver
from ..launch import executor as _executor
from . import pyreplay as _pyreplay
from .analysis import Use
from .outputs import Index
from .updates import DEVICE, KERNEL

__all__ = ["compiled_replay"]


def compiled_replay(seq: Any, python_replay: Callable[..., Any]) -> Any:
    """``_claunch.Replay`` of ``seq``, or None where the compiled module is not built."""
    if _executor._claunch is None:
        return None
    st = _pyreplay.state_of(seq)
    index = {node: k for k, node in enumerate(seq._targets)}  # node index -> position in the targets table
    targets = tuple(_target(t, seq) for t in seq._targets.values())
    inputs = []
    for pos, name in enumerate(seq.inputs):
        value, (_, uses) = seq._current[pos], st.inputs[pos]
        tensor = isinstance(value, torch.Tensor)
        dtype = _executor.dlpack_word(value.dtype) if tensor else 0
        shape, strides = (tuple(value.shape), tuple(value.stride())) if tensor else ((), ())
        inputs.append((name, tensor, dtype, shape, strides, _uses(uses, st.entry_of, index, st.inputs[pos][0]),
                       name in st.views))  # fmt: skip
    outputs = tuple((allocate, _uses(uses, st.entry_of, index, first))
                    for allocate, (first, uses) in zip(seq._allocators, st.outputs))  # fmt: skip
    ring = st.ring
    ring_table = (ring.memory.data_ptr(), ring.slots, ring.capacity) if ring is not None else None
    return _executor._claunch.Replay(
        tuple(inputs), targets, outputs, seq._exec, seq.device, _driver.graph_entry_points(),
        _driver.launch_entry_points()[2], ctypes.addressof(seq._state), ring_table,
        (ctypes.addressof(st.words), len(st.uses)), seq._current, python_replay, _builder(seq), seq._lock,
        (seq._targets, seq._graph, ring, st), _executor._exchange_api_types(), seq._get_stream, st.positional,
        st.snapshot, st.launch,
    )  # fmt: skip


def _uses(uses: list[Use], entry_of: list[int], index: dict[int, int], first: int) -> tuple:
    """The C table of consecutive uses from index ``first`` (each with its ring entry, or -1)."""
    return tuple((index[u.node], u.offset, u.size, u.slot, u.delta, u.align, u.multiple_of, entry_of[first + k])
                 for k, u in enumerate(uses))  # fmt: skip


def _target(t: Any, seq: Any) -> tuple:
    if t.kind == DEVICE:
        node = seq._plan.nodes[t.index]
        return (DEVICE, t.devnode, len(node.block or b""))
    if t.kind == KERNEL:
        return (KERNEL, t.handle, t.function, t.grid, t.block_dim, t.shared_mem, t.context, t.blob, t.address)
    return (t.kind, t.handle, t.blob, t.context)


def _builder(seq: Any) -> Callable[[tuple, tuple | None], Any] | None:
    """How the compiled replay makes its result from the new outputs and the input values it took
    under the lock: None where the result is the one output as allocated (or None), else the
    Python replay's own builder."""
    leaves = seq._plan.leaves
    if seq._template is None and not leaves:
        return None
    if isinstance(seq._template, Index) and leaves[0].kind == "storage" and len(seq._plan.storages) == 1:
        if getattr(seq._allocators[0], "func", None) is torch.empty_strided:  # allocated as the leaf itself
            return None
    me = weakref.ref(seq)

    def build(fresh: tuple, current: tuple | None) -> Any:
        sequence = me()
        assert sequence is not None  # it holds the replay calling this
        return _pyreplay.build(sequence, list(fresh), current)

    return build
