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
from ..launch import layouts as L
from . import pyreplay as _pyreplay
from .analysis import Use
from .output_memory import Batch, Padded
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
        inputs.append(L.ReplayInput(name=name, is_tensor=tensor, dtype=dtype, shape=shape, strides=strides,
                                    uses=_uses(uses, st.entry_of, index, first), python_only=name in st.views))  # fmt: skip
    outputs = tuple(L.ReplayOutput(allocate=allocate.plain if isinstance(allocate, Batch) else allocate,
                                   uses=_uses(uses, st.entry_of, index, first),
                                   refill=allocate.refill if isinstance(allocate, Batch) else None)
                    for allocate, (first, uses) in zip(st.allocators, st.output_uses))  # fmt: skip
    ring = st.ring
    ring_table = (
        L.Ring(address=ring.memory.data_ptr(), slots=ring.slots, capacity=ring.capacity) if ring is not None else None
    )
    tables = L.ReplayTables(
        inputs=tuple(inputs), targets=targets, outputs=outputs, exec=st.graph_exec, device=st.device,
        entry_points=L.GraphEntryPoints(*_driver.graph_entry_points()),  # in the order its docstring gives
        ctx_get_device=_driver.launch_entry_points()[2], counters=ctypes.addressof(st.counters), ring=ring_table,
        staged=L.Staged(address=ctypes.addressof(st.words), words=len(st.uses)), current=st.current,
        fallback=python_replay, build=_builder(st), lock=st.lock, keep=(st.targets, st.graph, ring, st.words, st),
        tensor_types=_executor._exchange_api_types(), get_stream=get_stream, positional=st.positional,
        snapshot=st.snapshot, launch=st.launch,
    )  # fmt: skip
    return _executor._claunch.Replay(tables)


def _uses(uses: list[Use], entry_of: list[int], index: dict[int, int], first: int) -> tuple[L.ReplayUse, ...]:
    """The C table of consecutive uses from index ``first`` (each with its ring entry, or -1)."""
    return tuple(L.ReplayUse(target=index[u.node], offset=u.offset, size=u.size, kind=u.slot, delta=u.delta,
                             align=u.align, multiple_of=u.multiple_of, entry=entry_of[first + k])
                 for k, u in enumerate(uses))  # fmt: skip


def _target(t: Target, st: SequenceState) -> L.DeviceTarget | L.KernelTarget | L.CopyTarget:
    if t.kind == DEVICE:
        node = st.plan.nodes[t.index]
        return L.DeviceTarget(kind=DEVICE, handle=t.devnode, size=len(node.block or b""))
    assert t.blob is not None  # a host target's block or struct
    if t.kind == KERNEL:
        return L.KernelTarget(kind=KERNEL, handle=t.handle, function=t.function, grid=t.grid, block=t.block_dim,
                              shared_mem=t.shared_mem, context=t.context, blob=t.blob, pointers=t.address)  # fmt: skip
    return L.CopyTarget(kind=t.kind, handle=t.handle, blob=t.blob, context=t.context)


def _builder(st: SequenceState) -> Callable[[tuple, tuple | None], Any] | None:
    """How the compiled replay makes its result from the new outputs and the input values it took
    under the lock: None where the result is the one output as allocated (or None), else the
    Python replay's own builder."""
    leaves, template = st.plan.leaves, st.plan.template
    if template is None and not leaves:
        return None
    if isinstance(template, Index) and leaves[0].kind == "storage" and len(st.plan.storages) == 1:
        allocate = st.allocators[0]
        if isinstance(allocate, (Batch, Padded)) or getattr(allocate, "func", None) is torch.empty_strided:
            return None  # (allocated as the leaf itself)

    def build(fresh: tuple, current: tuple | None) -> Any:
        return _pyreplay.build(st, list(fresh), current)

    return build
