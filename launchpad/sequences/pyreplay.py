"""The Python replay of a recorded sequence: the reference for every check and message, and where
the compiled replay (``_claunch.Replay``, built by :mod:`launchpad.sequences.creplay`) hands what it
does not take.

A replay checks every new value first (a tensor's device, dtype, shape, strides and the alignment
its nodes were recorded with; a scalar's type and range, packed as a launch packs it), gives each
output new memory, and only then, under the sequence's lock, writes the changes: device-side ones
into the ring slot of this launch, host-side ones into their nodes (restored if the driver
refuses one or the launch fails), launches the graph, and records the new values as current.
"""

from __future__ import annotations

import functools
import struct
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..core import driver as _driver
from ..errors import ArgumentError, ArgumentTypeError, LaunchpadError
from ..launch import checks as _checks
from ..launch.executor import SK_INT, SK_UINT
from .analysis import Use
from .outputs import Index
from .scalars import scalar_bytes
from .updates import DEVICE

__all__ = ["allocators", "build", "explain", "replay_for"]

#: ``Sequence._state`` words: launches so far, and "broken".
LAUNCHES, BROKEN = range(2)


def replay_for(seq: Any) -> Callable[..., Any]:
    """The Python replay of ``seq`` (holding it weakly: the sequence holds its replay)."""
    me = weakref.ref(seq)

    def python_replay(*args: Any, **kwargs: Any) -> Any:
        sequence = me()
        assert sequence is not None  # it holds the replay calling this
        return replay(sequence, args, kwargs)

    return python_replay


def replay(seq: Any, args: tuple, kwargs: dict) -> Any:
    if seq._state[BROKEN]:
        raise LaunchpadError("this sequence's graph could not be restored after a failed update: record it again")
    new = _named(seq, args, kwargs)
    device = _checks.device_of_launch(None)
    if device != seq.device:
        raise ArgumentError(f"this sequence was recorded on cuda:{seq.device}, but the current device is "
                            f"cuda:{device}")  # fmt: skip
    staged: list[tuple[Use, bytes]] = []
    commits: list[tuple[int, Any]] = []
    for name, value in new.items():
        pos, plan = seq._positions[name], seq._plan.inputs[name]
        old = seq._current[pos]
        if isinstance(old, torch.Tensor):
            _check_tensor(seq, name, old, value)
            staged += [(use, _pointer(seq, name, use, value.data_ptr())) for use in plan.uses]
        else:
            if isinstance(value, np.generic) and value.shape == ():
                value = value.item()
            if not isinstance(value, (bool, int, float)):
                raise ArgumentTypeError(f"sequence input {name!r} is a number, got {_checks.describe(value)}")
            staged += [(use, _scalar(seq, name, use, value)) for use in plan.uses]
        commits.append((pos, value))
    fresh = [allocate() for allocate in seq._allocators]
    for storage, t in zip(seq._plan.storages, fresh):
        staged += [(use, struct.pack("<Q", t.data_ptr() + use.delta)) for use in storage.uses]
    stream = _checks.current_raw_stream(device)
    with seq._lock:
        _apply(seq, staged, stream)
        for pos, value in commits:
            seq._current[pos] = value
    return build(seq, fresh)


def _named(seq: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    if len(args) > len(seq.inputs):
        raise ArgumentTypeError(f"this sequence takes at most {len(seq.inputs)} arguments "
                                f"({', '.join(seq.inputs)}), got {len(args)}")  # fmt: skip
    new = dict(zip(seq.inputs, args))
    for name, value in kwargs.items():
        if name not in seq._positions:
            raise ArgumentTypeError(f"this sequence has no input {name!r} (its inputs: {', '.join(seq.inputs)})")
        if name in new:
            raise ArgumentTypeError(f"this sequence got input {name!r} twice")
        new[name] = value
    return new


def _where(seq: Any, name: str, use: Use) -> str:
    return f"sequence input {name!r}, read by {seq._targets[use.node].name}, {use.label}"


def _check_tensor(seq: Any, name: str, old: torch.Tensor, value: Any) -> None:
    if not isinstance(value, torch.Tensor):
        raise ArgumentTypeError(f"sequence input {name!r} is a tensor, got {_checks.describe(value)}")
    problem = (
        f"is on {value.device}, not cuda:{seq.device}" if value.get_device() != old.get_device() else
        f"is {value.dtype}" if value.dtype != old.dtype else
        f"has shape {tuple(value.shape)}" if value.shape != old.shape else
        f"has strides {value.stride()}" if value.stride() != old.stride() else ""
    )  # fmt: skip
    if problem:  # (the message is built only here: this check runs on every replay)
        recorded = f"recorded with a {old.dtype} tensor of shape {tuple(old.shape)}, strides {old.stride()}"
        raise ArgumentError(f"sequence input {name!r} {problem}; it was {recorded} (shapes and layouts decide "
                            "grids and kernels: record again for another)")  # fmt: skip


def _pointer(seq: Any, name: str, use: Use, data_ptr: int) -> bytes:
    address = data_ptr + use.delta
    if use.align and address % use.align:
        assumed = "the kernel was compiled assuming it is" if use.param is not None else \
            "that node was recorded with such an address (its kernel may rely on it)"  # fmt: skip
        raise ArgumentError(f"{_where(seq, name, use)}: pointer {address:#x} is not {use.align}-byte aligned, but "
                            f"{assumed}")  # fmt: skip
    return struct.pack("<Q", address)


def _scalar(seq: Any, name: str, use: Use, value: Any) -> bytes:
    if use.wrap and isinstance(value, int) and use.slot in (SK_INT, SK_UINT) and use.param is not None:
        low, fits = _checks.wrapped_int(use.param, value)  # as a launch takes it (checks.int_bits)
        if fits:
            value = low
    try:
        data = scalar_bytes(use.slot, use.size, value)
    except TypeError as exc:
        raise ArgumentTypeError(f"{_where(seq, name, use)}: {exc}") from None
    except ValueError as exc:
        raise ArgumentError(f"{_where(seq, name, use)}: {exc}") from None
    if use.multiple_of and value % use.multiple_of:
        raise ArgumentError(f"{_where(seq, name, use)}: {value} is not a multiple of {use.multiple_of}, but the "
                            "kernel was compiled assuming it is")  # fmt: skip
    return data


def _apply(seq: Any, staged: list[tuple[Use, bytes]], stream: int) -> None:
    """Write the staged changes and launch, all or nothing (the lock is held)."""
    entries: list[tuple[int, int, int, bytes]] = []
    host: dict[int, list[tuple[int, bytes]]] = {}
    for use, data in staged:
        target = seq._targets[use.node]
        if target.kind == DEVICE:
            entries.append((target.devnode, use.offset, use.size, data))
        else:
            host.setdefault(use.node, []).append((use.offset, data))
    launch = int(seq._state[LAUNCHES])
    ring = seq._ring
    if ring is not None:
        if launch - ring.consumed >= ring.slots:  # the slot's last launch has not started: let the device catch up
            _driver.synchronize_device(seq.device)
        ring.write(launch, entries)
    saved: list[tuple[Any, int, bytes]] = []
    applied: list[Any] = []
    try:
        for index, writes in host.items():
            target = seq._targets[index]
            for offset, data in writes:
                saved.append((target, offset, bytes(target.blob[offset : offset + len(data)])))
                target.blob[offset : offset + len(data)] = data
            target.apply(seq._exec)
            applied.append(target)
        _driver.graph_launch(seq._exec, stream)
    except BaseException:
        for target, offset, data in reversed(saved):
            target.blob[offset : offset + len(data)] = data
        try:
            for target in applied:
                target.apply(seq._exec)
        except Exception:
            seq._state[BROKEN] = 1
        raise
    seq._state[LAUNCHES] = launch + 1


def allocators(seq: Any) -> list[Callable[[], torch.Tensor]]:
    """How a replay gives each returned allocation new memory: one tensor of its leaf's own layout
    where it is the allocation's only view from its start, else bytes its views are cut from."""
    device = torch_device(seq.device)
    out: list[Callable[[], torch.Tensor]] = []
    for k, storage in enumerate(seq._plan.storages):
        views = [leaf for leaf in seq._plan.leaves if leaf.storage == k]
        leaf = views[0]
        span = (1 + sum((n - 1) * s for n, s in zip(leaf.shape, leaf.stride))) * leaf.dtype.itemsize
        if len(views) == 1 and leaf.offset == 0 and span == storage.nbytes:
            out.append(_partial(torch.empty_strided, leaf.shape, leaf.stride, dtype=leaf.dtype, device=device))
        else:
            out.append(_partial(torch.empty, max(storage.nbytes, 1), dtype=torch.uint8, device=device))
    return out


def torch_device(device: int) -> torch.device:
    """torch's device of a launch device (negative: the CPU tensors of launchpad's fake GPU in tests)."""
    return torch.device("cuda", device) if device >= 0 else torch.device("cpu")


def _partial(fn: Callable[..., torch.Tensor], *args: Any, **kwargs: Any) -> Callable[[], torch.Tensor]:
    return functools.partial(fn, *args, **kwargs)


def build(seq: Any, fresh: list[torch.Tensor]) -> Any:
    """The replay's result: the recorded function's, each tensor in this replay's memory."""
    leaves = []
    for leaf in seq._plan.leaves:
        if leaf.kind == "storage":
            t = fresh[leaf.storage]
            if t.dtype is not leaf.dtype or t.shape != leaf.shape or t.stride() != leaf.stride:
                t = torch.empty(0, dtype=leaf.dtype, device=t.device).set_(t.untyped_storage(), leaf.offset,
                                                                          leaf.shape, leaf.stride)  # fmt: skip
            leaves.append(t)
        elif leaf.kind == "input":
            x = seq._current[seq._positions[leaf.input]]
            leaves.append(x.as_strided(leaf.shape, leaf.stride, x.storage_offset() + leaf.offset))
        else:
            leaves.append(leaf.tensor)
    return _fill(seq._template, leaves)


def _fill(template: Any, leaves: list[Any]) -> Any:
    if isinstance(template, Index):
        return leaves[template.index]
    if isinstance(template, tuple):
        return tuple(_fill(t, leaves) for t in template)
    if isinstance(template, list):
        return [_fill(t, leaves) for t in template]
    if isinstance(template, dict):
        return {k: _fill(t, leaves) for k, t in template.items()}
    return template


def explain(seq: Any) -> str:
    """What :meth:`Sequence.explain` prints."""
    plan = seq._plan
    kinds = {t.kind for t in seq._targets.values()}
    how = "from the device (launchpad's updater node reads each replay's changes)" if DEVICE in kinds else \
        "from the host (cuGraphExec*SetParams)"  # fmt: skip
    lines = [f"{seq!r}", f"nodes are updated {how}" + (f"; no device-side updates: {seq.update_note}"
                                                        if seq.update_note and DEVICE not in kinds else "")]  # fmt: skip
    for name, p in plan.inputs.items():
        nodes = sorted({seq._targets[u.node].name for u in p.uses})
        if p.copy:
            lines.append(f"input {name!r}: copied into the sequence's own buffer before each replay"
                         + (" and back after it" if p.writes else "") + f", because {p.copy}")  # fmt: skip
        else:
            lines.append(f"input {name!r}: written into {len(p.uses)} place(s): {', '.join(nodes)}")
    for k, leaf in enumerate(plan.leaves):
        if leaf.kind == "storage":
            s = plan.storages[leaf.storage]
            why = f"copied there at the graph's end, because {s.copy}" if s.copy else \
                f"written there by {len(s.uses)} re-pointed place(s)"  # fmt: skip
            lines.append(f"output {k}: new memory each replay, {why}")
        elif leaf.kind == "input":
            lines.append(f"output {k}: input {leaf.input!r} (or a view of it)")
        else:
            lines.append(f"output {k}: memory the function was given (the same tensor each replay)")
    return "\n".join(lines)
