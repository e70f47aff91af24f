"""The Python replay of a recorded sequence: the reference for every check and message, and where
the compiled replay (``_claunch.Replay``, built by :mod:`launchpad.sequences.creplay`) hands what it
does not take. Every function here is given the sequence's one
:class:`~launchpad.sequences.state.SequenceState`. A replay goes in four steps:

1. It refuses a sequence whose device-side update failed, binds the arguments to the inputs
   (positional ones, then names), and takes as given any tensor input left out whose tensor moved
   since the graph was pointed at it.
2. It checks every new value before anything changes: a tensor's device, dtype, shape, strides and
   the alignment its nodes were recorded with; a scalar's type and range, packed as a launch packs
   it. It refuses a current stream that is capturing, and gives each output new memory.
3. Under the sequence's lock, it writes the changes: every device-side word into the ring slot of
   this launch (the full state: the last staged word of every use, with this replay's new ones),
   the host-side ones into their nodes (restored if the driver refuses one or the launch fails).
   It launches the graph, records the new values as current and takes the values its result is
   built from.
4. After the lock is released, it builds the result from the new outputs and those values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..core import driver as _driver
from ..errors import ArgumentError, ArgumentTypeError, LaunchpadError
from ..launch import checks as _checks
from ..launch import config as _config
from ..launch.executor import SK_INT, SK_UINT
from .analysis import Leaf, Use
from .outputs import Index
from .scalars import scalar_bytes
from .state import BROKEN, LAUNCHES, SequenceState
from .updates import DRIFT, Target

__all__ = ["build", "failure_message", "refuse_broken", "replay_for"]

CAPTURING = ("a sequence cannot be replayed inside another capture (torch's current stream is capturing a CUDA "
             "graph): record the whole step with launchpad.record, or replay the sequence outside the capture")  # fmt: skip


def replay_for(st: SequenceState) -> Callable[..., Any]:
    """The Python replay of the sequence whose state is ``st`` (indexed: :meth:`SequenceState.index`)."""

    def python_replay(*args: Any, **kwargs: Any) -> Any:
        return replay(st, args, kwargs)

    return python_replay


def replay(st: SequenceState, args: tuple, kwargs: dict) -> Any:
    refuse_broken(st)
    new = _named(st, args, kwargs)
    _follow_left_out(st, new)
    device = _config.device_of_launch(None)
    if device != st.device:
        raise ArgumentError(f"this sequence was recorded on cuda:{st.device}, but the current device is "
                            f"cuda:{device}")  # fmt: skip
    stream = _checks.current_raw_stream(device)
    if _driver.stream_is_capturing(stream):  # (its launch would join that capture, its updates would not)
        raise LaunchpadError(CAPTURING)
    changes: list[tuple[int, int]] = []  # (use, its new word)
    commits: list[tuple[int, Any]] = []
    for name, value in new.items():
        pos = st.positions[name]
        first, uses = st.input_uses[pos]
        old = st.current[pos]
        if isinstance(old, torch.Tensor):
            _check_tensor(st, name, st.layouts[pos], value)
            if name in st.views:
                _check_views(name, value, st.views[name])
            address = value.data_ptr()
            changes += [(first + k, _pointer(st, name, use, address)) for k, use in enumerate(uses)]
        else:
            if isinstance(value, np.generic) and value.shape == ():
                value = value.item()
            if not isinstance(value, (bool, int, float)):
                raise ArgumentTypeError(f"sequence input {name!r} is a number, got {_checks.describe(value)}")
            changes += [(first + k, _scalar(st, name, use, value)) for k, use in enumerate(uses)]
        commits.append((pos, value))
    fresh = [allocate() for allocate in st.allocators]
    for (first, uses), t in zip(st.output_uses, fresh):
        address = t.data_ptr()
        changes += [(first + k, address + use.delta) for k, use in enumerate(uses)]
    with st.lock:
        _apply(st, changes, stream)
        replaced = [st.current[pos] for pos, _ in commits]
        for pos, value in commits:
            st.current[pos] = value
        current = tuple(st.current) if st.snapshot else None  # (another replay may change them once unlocked)
    del replaced  # (released unlocked: a finalizer of theirs may replay this sequence)
    if st.ring is not None and st.ring.failure is not None:  # known already: this result is not returned as good
        refuse_broken(st)
    return build(st, fresh, current)


def _follow_left_out(st: SequenceState, new: dict[str, Any]) -> None:
    """A tensor input left out whose tensor changed since the graph was pointed at it (``x.set_()``, a
    ``resize_``, ``x.data = ...``: other memory, or another layout) is taken as given: checked, and
    followed."""
    for pos, name in enumerate(st.names):
        current, (first, uses) = st.current[pos], st.input_uses[pos]
        if name not in new and uses and isinstance(current, torch.Tensor):
            layout = (current.dtype, current.shape, current.stride())
            if current.data_ptr() + uses[0].delta != st.words[first] or layout != st.layouts[pos]:
                new[name] = current


def failure_message(st: SequenceState) -> str | None:
    """What a failed device-side update of the sequence did, or None where none has failed."""
    failure = st.ring.failure if st.ring is not None else None
    if failure is None:
        return None
    entry, error, launch = failure
    what = f"cudaError_t {error}"
    if entry == DRIFT:
        what = "the ring slot it read was written for another launch (the host's count of launches drifted)"
    elif 0 <= entry < len(st.entries):
        u = st.entries[entry]
        owner = next((f"sequence input {name!r}" for name, (first, uses) in zip(st.names, st.input_uses)
                      if first <= u < first + len(uses)), "an output")  # fmt: skip
        use = st.uses[u]
        what = f"{owner}, read by {st.targets[use.node].name}, {use.label}: {what}"
    return (f"a device-side update of this sequence failed in replay {launch + 1} ({what}); that replay and every one "
            "after it ran with stale node values (their results are wrong), and the updater applies none since: "
            "record it again")  # fmt: skip


def refuse_broken(st: SequenceState) -> None:
    message = failure_message(st)
    if message is not None:
        st.counters[BROKEN] = 1
        raise LaunchpadError(message)
    if st.counters[BROKEN]:
        raise LaunchpadError("this sequence's graph could not be restored after a failed update: record it again")


def _named(st: SequenceState, args: tuple, kwargs: dict) -> dict[str, Any]:
    if len(args) > st.positional:
        extra = st.parameters[st.positional] if st.positional < len(st.parameters) else None
        if extra is not None and extra not in st.positions:
            raise ArgumentTypeError(f"parameter {extra!r} is not an input of this sequence (it kept its default when "
                                    "recorded; pass inputs by name)")  # fmt: skip
        rest = f": pass {', '.join(st.names[st.positional :])} by name" if st.positional < len(st.names) else ""
        raise ArgumentTypeError(f"this sequence takes at most {st.positional} arguments "
                                f"({', '.join(st.names[: st.positional])}), got {len(args)}{rest}")  # fmt: skip
    new = dict(zip(st.names, args))
    for name, value in kwargs.items():
        if name not in st.positions:
            raise ArgumentTypeError(f"this sequence has no input {name!r} (its inputs: {', '.join(st.names)})")
        if name in new:
            raise ArgumentTypeError(f"this sequence got input {name!r} twice")
        new[name] = value
    return new


def _where(st: SequenceState, name: str, use: Use) -> str:
    return f"sequence input {name!r}, read by {st.targets[use.node].name}, {use.label}"


def _check_tensor(st: SequenceState, name: str, layout: Any, value: Any) -> None:
    """``value`` against the input's recorded ``(dtype, shape, strides)``, on the sequence's device."""
    if not isinstance(value, torch.Tensor):
        raise ArgumentTypeError(f"sequence input {name!r} is a tensor, got {_checks.describe(value)}")
    dtype, shape, stride = layout
    problem = (
        f"is on {value.device}, not cuda:{st.device}" if value.get_device() != st.device else
        f"is {value.dtype}" if value.dtype != dtype else
        f"has shape {tuple(value.shape)}" if value.shape != shape else
        f"has strides {value.stride()}" if value.stride() != stride else ""
    )  # fmt: skip
    if problem:  # (the message is built only here: this check runs on every replay)
        recorded = f"recorded with a {dtype} tensor of shape {tuple(shape)}, strides {stride}"
        raise ArgumentError(f"sequence input {name!r} {problem}; it was {recorded} (shapes and layouts decide "
                            "grids and kernels: record again for another)")  # fmt: skip


def _check_views(name: str, x: torch.Tensor, leaves: list[Leaf]) -> None:
    """A returned view of another element size must start at a whole element of its dtype."""
    for leaf in leaves:
        start = x.storage_offset() * x.element_size() + leaf.offset
        if start % leaf.dtype.itemsize:
            raise ArgumentError(
                f"sequence input {name!r}: the recorded function returns a {leaf.dtype} view of it {leaf.offset} bytes "
                f"in, which this tensor would place {start} bytes into its storage, not a whole number of "
                f"{leaf.dtype.itemsize}-byte elements: pass a tensor at an offset that allows the view"
            )


def _pointer(st: SequenceState, name: str, use: Use, data_ptr: int) -> int:
    address = data_ptr + use.delta
    if use.align and address % use.align:
        assumed = "the kernel was compiled assuming it is" if use.param is not None else \
            "that node was recorded with such an address (its kernel may rely on it)"  # fmt: skip
        raise ArgumentError(f"{_where(st, name, use)}: pointer {address:#x} is not {use.align}-byte aligned, but "
                            f"{assumed}")  # fmt: skip
    return address


def _scalar(st: SequenceState, name: str, use: Use, value: Any) -> int:
    if use.wrap and isinstance(value, int) and use.slot in (SK_INT, SK_UINT) and use.param is not None:
        low, fits = _checks.wrapped_int(use.param, value)  # as a launch takes it (checks.int_bits)
        if fits:
            value = low
    try:
        data = scalar_bytes(use.slot, use.size, value)
    except TypeError as exc:
        raise ArgumentTypeError(f"{_where(st, name, use)}: {exc}") from None
    except ValueError as exc:
        raise ArgumentError(f"{_where(st, name, use)}: {exc}") from None
    if use.multiple_of and value % use.multiple_of:
        raise ArgumentError(f"{_where(st, name, use)}: {value} is not a multiple of {use.multiple_of}, but the "
                            "kernel was compiled assuming it is")  # fmt: skip
    return int.from_bytes(data, "little")


def _apply(st: SequenceState, changes: list[tuple[int, int]], stream: int) -> None:
    """Write every change and launch, all or nothing (the lock is held)."""
    words, ring = st.words, st.ring
    launch = int(st.counters[LAUNCHES])
    if ring is not None:
        if launch - ring.consumed >= ring.slots:  # the slot's last launch has not started: wait for the device
            ring.wait(launch)
            if ring.failure is not None:
                refuse_broken(st)
        values = [words[u] for u in st.entries]  # the full state: what no one changes now as last written
        for u, word in changes:
            if st.entry_of[u] >= 0:
                values[st.entry_of[u]] = word
        ring.put(launch, values)
    saved: list[tuple[Target, int, bytes]] = []
    applied: list[Target] = []
    try:
        touched: dict[int, Target] = {}
        for u, word in changes:
            target = st.hosts[u]
            if target is None:
                continue
            use = st.uses[u]
            assert target.blob is not None
            saved.append((target, use.offset, bytes(target.blob[use.offset : use.offset + use.size])))
            target.blob[use.offset : use.offset + use.size] = word.to_bytes(8, "little")[: use.size]
            touched[target.index] = target
        for index in sorted(touched):  # (in node order, as the compiled replay hands them over)
            touched[index].apply(st.graph_exec)
            applied.append(touched[index])
        if st.launch is not None:
            st.launch()
        else:
            _driver.graph_launch(st.graph_exec, stream)
    except BaseException:
        for target, offset, data in reversed(saved):
            assert target.blob is not None
            target.blob[offset : offset + len(data)] = data
        try:
            for target in applied:
                target.apply(st.graph_exec)
        except Exception:
            st.counters[BROKEN] = 1
        raise
    for u, word in changes:
        words[u] = word
    st.counters[LAUNCHES] = launch + 1


def build(st: SequenceState, fresh: list[torch.Tensor], current: tuple | None) -> Any:
    """The replay's result: the recorded function's, each tensor in this replay's memory; a view
    of an input from ``current``, the input values taken under the lock (None: the result holds
    no input)."""
    leaves = []
    for leaf in st.plan.leaves:
        if leaf.kind == "storage":
            t = fresh[leaf.storage]
            if t.dtype is not leaf.dtype or t.shape != leaf.shape or t.stride() != leaf.stride:
                t = torch.empty(0, dtype=leaf.dtype, device=t.device).set_(t.untyped_storage(), leaf.offset,
                                                                          leaf.shape, leaf.stride)  # fmt: skip
            leaves.append(t)
        elif leaf.kind == "input":
            assert current is not None
            leaves.append(_view_of(current[st.positions[leaf.input]], leaf))
        else:
            leaves.append(leaf.tensor)
    return _fill(st.plan.template, leaves)


def _view_of(x: torch.Tensor, leaf: Leaf) -> torch.Tensor:
    """The leaf's view of input ``x``: its dtype, shape and strides, ``leaf.offset`` bytes from ``x``'s
    first element (a whole number of its elements: checked where a value could break it)."""
    size = x.element_size()
    if leaf.dtype == x.dtype and leaf.offset % size == 0:  # (a view of x's own: torch's autograd sees it as one)
        return x.as_strided(leaf.shape, leaf.stride, x.storage_offset() + leaf.offset // size)
    start = (x.storage_offset() * size + leaf.offset) // leaf.dtype.itemsize
    return torch.empty(0, dtype=leaf.dtype, device=x.device).set_(x.untyped_storage(), start, leaf.shape, leaf.stride)


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
