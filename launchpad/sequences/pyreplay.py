"""The Python replay of a recorded sequence: the reference for every check and message, and where
the compiled replay (``_claunch.Replay``, built by :mod:`launchpad.sequences.creplay`) hands what it
does not take.

A replay checks every new value first (a tensor's device, dtype, shape, strides and the alignment
its nodes were recorded with; a scalar's type and range, packed as a launch packs it), gives each
output new memory, and only then, under the sequence's lock, writes the changes: every
device-side word into the ring slot of this launch (the full state, from :class:`ReplayState`'s
last staged word of each use), host-side ones into their nodes (restored if the driver refuses
one or the launch fails), launches the graph, records the new values as current and takes the
values its result is built from; the result is built after the lock is released.
"""

from __future__ import annotations

import ctypes
import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core import driver as _driver
from ..errors import ArgumentError, ArgumentTypeError, LaunchpadError
from ..launch import checks as _checks
from ..launch.executor import SK_INT, SK_UINT
from .analysis import Leaf, Use
from .outputs import Index
from .scalars import scalar_bytes
from .updates import DEVICE, DRIFT, Target

__all__ = [
    "ReplayState",
    "allocators",
    "build",
    "failure_message",
    "refuse_broken",
    "replay_for",
    "replay_state",
    "state_of",
]

#: ``Sequence._state`` words: launches so far, and "broken".
LAUNCHES, BROKEN = range(2)

CAPTURING = ("a sequence cannot be replayed inside another capture (torch's current stream is capturing a CUDA "
             "graph): record the whole step with launchpad.record, or replay the sequence outside the capture")  # fmt: skip


@dataclass
class ReplayState:
    """What both replays of a sequence share, made once (:func:`replay_state`). Every use (each
    input's, in input order, then each output storage's) has an index; ``words`` holds the last
    word staged for each (its recorded bytes until a replay changes it), which every replay writes
    into its ring slot whole."""

    words: Any  # ctypes.c_uint64 array, one word per use (at least one)
    uses: list[Use]  # every use, by index
    inputs: list[tuple[int, list[Use]]]  # per input position: its first use's index, its uses
    outputs: list[tuple[int, list[Use]]]  # per output storage, likewise
    entries: list[int]  # per entry of a ring slot: its use's index (the uses of device targets)
    entry_of: list[int]  # per use: its entry, or -1 (a host target's use)
    hosts: list[Target | None]  # per use: its host target (None: a device target's)
    ring: Any  # updates.Ring or None
    positional: int  # how many leading parameters of fn are inputs (positional argument i is input i)
    parameters: tuple[str, ...]  # fn's parameters, in order
    views: dict[str, list[Leaf]]  # per input: returned views whose byte position a new value may not allow
    snapshot: bool  # whether the result holds inputs: the current values are taken under the lock
    launch: Callable[[], Any] | None  # torch's graph replay (random numbers: it moves the generators), or None
    layouts: list[tuple | None]  # per input: a tensor's recorded (dtype, shape, strides); None for a number


def replay_state(seq: Any) -> ReplayState:
    """The state the replays of ``seq`` share (see :class:`ReplayState`); also writes the entries
    of every ring slot. ``seq`` has its plan, targets, ring, graph and current values by then."""
    uses: list[Use] = []
    inputs, outputs = [], []
    for name in seq.inputs:
        inputs.append((len(uses), list(seq._plan.inputs[name].uses)))
        uses += inputs[-1][1]
    for storage in seq._plan.storages:
        outputs.append((len(uses), list(storage.uses)))
        uses += outputs[-1][1]
    words = (ctypes.c_uint64 * max(len(uses), 1))()
    entries: list[int] = []
    entry_of: list[int] = []
    hosts: list[Target | None] = []
    for u, use in enumerate(uses):
        target = seq._targets[use.node]
        device = target.kind == DEVICE
        recorded = seq._plan.nodes[target.index].block if device else target.blob
        words[u] = int.from_bytes(bytes(recorded[use.offset : use.offset + use.size]), "little")
        entry_of.append(len(entries) if device else -1)
        hosts.append(None if device else target)
        entries += [u] if device else []
    if seq._ring is not None:
        seq._ring.fill([(seq._targets[uses[u].node].devnode, uses[u].offset, uses[u].size) for u in entries])
    views: dict[str, list[Leaf]] = {}
    for leaf in (leaf for leaf in seq._plan.leaves if leaf.kind == "input"):
        size = leaf.dtype.itemsize  # (where it divides the input's element size and the offset, any value allows it)
        if seq._current[seq._positions[leaf.input]].element_size() % size or leaf.offset % size:
            views.setdefault(leaf.input, []).append(leaf)
    return ReplayState(words, uses, inputs, outputs, entries, entry_of, hosts, seq._ring,
                       getattr(seq, "_positional", len(seq.inputs)), tuple(getattr(seq, "_parameters", seq.inputs)),
                       views, any(leaf.kind == "input" for leaf in seq._plan.leaves),
                       seq._graph.replay if getattr(seq, "_rng", False) else None,
                       [(v.dtype, v.shape, v.stride()) if isinstance(v, torch.Tensor) else None
                        for v in seq._current])  # fmt: skip


def state_of(seq: Any) -> ReplayState:
    """``seq._staged``, made here where the sequence has not made it."""
    state = getattr(seq, "_staged", None)
    if state is None:
        state = seq._staged = replay_state(seq)
    return state


def replay_for(seq: Any) -> Callable[..., Any]:
    """The Python replay of ``seq`` (holding it weakly: the sequence holds its replay)."""
    state_of(seq)
    me = weakref.ref(seq)

    def python_replay(*args: Any, **kwargs: Any) -> Any:
        sequence = me()
        assert sequence is not None  # it holds the replay calling this
        return replay(sequence, args, kwargs)

    return python_replay


def replay(seq: Any, args: tuple, kwargs: dict) -> Any:
    st: ReplayState = seq._staged
    refuse_broken(seq, st)
    new = _named(seq, st, args, kwargs)
    _follow_left_out(seq, st, new)
    device = _checks.device_of_launch(None)
    if device != seq.device:
        raise ArgumentError(f"this sequence was recorded on cuda:{seq.device}, but the current device is "
                            f"cuda:{device}")  # fmt: skip
    stream = _checks.current_raw_stream(device)
    if _driver.stream_is_capturing(stream):  # (its launch would join that capture, its updates would not)
        raise LaunchpadError(CAPTURING)
    changes: list[tuple[int, int]] = []  # (use, its new word)
    commits: list[tuple[int, Any]] = []
    for name, value in new.items():
        pos = seq._positions[name]
        first, uses = st.inputs[pos]
        old = seq._current[pos]
        if isinstance(old, torch.Tensor):
            _check_tensor(seq, name, st.layouts[pos], value)
            if name in st.views:
                _check_views(name, value, st.views[name])
            address = value.data_ptr()
            changes += [(first + k, _pointer(seq, name, use, address)) for k, use in enumerate(uses)]
        else:
            if isinstance(value, np.generic) and value.shape == ():
                value = value.item()
            if not isinstance(value, (bool, int, float)):
                raise ArgumentTypeError(f"sequence input {name!r} is a number, got {_checks.describe(value)}")
            changes += [(first + k, _scalar(seq, name, use, value)) for k, use in enumerate(uses)]
        commits.append((pos, value))
    fresh = [allocate() for allocate in seq._allocators]
    for (first, uses), t in zip(st.outputs, fresh):
        address = t.data_ptr()
        changes += [(first + k, address + use.delta) for k, use in enumerate(uses)]
    with seq._lock:
        _apply(seq, st, changes, stream)
        replaced = [seq._current[pos] for pos, _ in commits]
        for pos, value in commits:
            seq._current[pos] = value
        current = tuple(seq._current) if st.snapshot else None  # (another replay may change them once unlocked)
    del replaced  # (released unlocked: a finalizer of theirs may replay this sequence)
    if st.ring is not None and st.ring.failure is not None:  # known already: this result is not returned as good
        refuse_broken(seq, st)
    return build(seq, fresh, current)


def _follow_left_out(seq: Any, st: ReplayState, new: dict[str, Any]) -> None:
    """A tensor input left out whose tensor changed since the graph was pointed at it (``x.set_()``, a
    ``resize_``, ``x.data = ...``: other memory, or another layout) is taken as given: checked, and
    followed."""
    for pos, name in enumerate(seq.inputs):
        current, (first, uses) = seq._current[pos], st.inputs[pos]
        if name not in new and uses and isinstance(current, torch.Tensor):
            layout = (current.dtype, current.shape, current.stride())
            if current.data_ptr() + uses[0].delta != st.words[first] or layout != st.layouts[pos]:
                new[name] = current


def failure_message(seq: Any, st: ReplayState) -> str | None:
    """What a failed device-side update of ``seq`` did, or None where none has failed."""
    failure = st.ring.failure if st.ring is not None else None
    if failure is None:
        return None
    entry, error, launch = failure
    what = f"cudaError_t {error}"
    if entry == DRIFT:
        what = "the ring slot it read was written for another launch (the host's count of launches drifted)"
    elif 0 <= entry < len(st.entries):
        u = st.entries[entry]
        owner = next((f"sequence input {name!r}" for name, (first, uses) in zip(seq.inputs, st.inputs)
                      if first <= u < first + len(uses)), "an output")  # fmt: skip
        use = st.uses[u]
        what = f"{owner}, read by {seq._targets[use.node].name}, {use.label}: {what}"
    return (f"a device-side update of this sequence failed in replay {launch + 1} ({what}); that replay and every one "
            "after it ran with stale node values (their results are wrong), and the updater applies none since: "
            "record it again")  # fmt: skip


def refuse_broken(seq: Any, st: ReplayState) -> None:
    message = failure_message(seq, st)
    if message is not None:
        seq._state[BROKEN] = 1
        raise LaunchpadError(message)
    if seq._state[BROKEN]:
        raise LaunchpadError("this sequence's graph could not be restored after a failed update: record it again")


def _named(seq: Any, st: ReplayState, args: tuple, kwargs: dict) -> dict[str, Any]:
    if len(args) > st.positional:
        extra = st.parameters[st.positional] if st.positional < len(st.parameters) else None
        if extra is not None and extra not in seq._positions:
            raise ArgumentTypeError(f"parameter {extra!r} is not an input of this sequence (it kept its default when "
                                    "recorded; pass inputs by name)")  # fmt: skip
        rest = f": pass {', '.join(seq.inputs[st.positional :])} by name" if st.positional < len(seq.inputs) else ""
        raise ArgumentTypeError(f"this sequence takes at most {st.positional} arguments "
                                f"({', '.join(seq.inputs[: st.positional])}), got {len(args)}{rest}")  # fmt: skip
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


def _check_tensor(seq: Any, name: str, layout: Any, value: Any) -> None:
    """``value`` against the input's recorded ``(dtype, shape, strides)``, on the sequence's device."""
    if not isinstance(value, torch.Tensor):
        raise ArgumentTypeError(f"sequence input {name!r} is a tensor, got {_checks.describe(value)}")
    dtype, shape, stride = layout
    problem = (
        f"is on {value.device}, not cuda:{seq.device}" if value.get_device() != seq.device else
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


def _pointer(seq: Any, name: str, use: Use, data_ptr: int) -> int:
    address = data_ptr + use.delta
    if use.align and address % use.align:
        assumed = "the kernel was compiled assuming it is" if use.param is not None else \
            "that node was recorded with such an address (its kernel may rely on it)"  # fmt: skip
        raise ArgumentError(f"{_where(seq, name, use)}: pointer {address:#x} is not {use.align}-byte aligned, but "
                            f"{assumed}")  # fmt: skip
    return address


def _scalar(seq: Any, name: str, use: Use, value: Any) -> int:
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
    return int.from_bytes(data, "little")


def _apply(seq: Any, st: ReplayState, changes: list[tuple[int, int]], stream: int) -> None:
    """Write every change and launch, all or nothing (the lock is held)."""
    words, ring = st.words, st.ring
    launch = int(seq._state[LAUNCHES])
    if ring is not None:
        if launch - ring.consumed >= ring.slots:  # the slot's last launch has not started: wait for the device
            ring.wait(launch)
            if ring.failure is not None:
                refuse_broken(seq, st)
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
            touched[index].apply(seq._exec)
            applied.append(touched[index])
        if st.launch is not None:
            st.launch()
        else:
            _driver.graph_launch(seq._exec, stream)
    except BaseException:
        for target, offset, data in reversed(saved):
            assert target.blob is not None
            target.blob[offset : offset + len(data)] = data
        try:
            for target in applied:
                target.apply(seq._exec)
        except Exception:
            seq._state[BROKEN] = 1
        raise
    for u, word in changes:
        words[u] = word
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
            out.append(functools.partial(torch.empty_strided, leaf.shape, leaf.stride, dtype=leaf.dtype, device=device))
        else:
            out.append(functools.partial(torch.empty, max(storage.nbytes, 1), dtype=torch.uint8, device=device))
    return out


def torch_device(device: int) -> torch.device:
    """torch's device of a launch device (negative: the CPU tensors of launchpad's fake GPU in tests)."""
    return torch.device("cuda", device) if device >= 0 else torch.device("cpu")


def build(seq: Any, fresh: list[torch.Tensor], current: tuple | None) -> Any:
    """The replay's result: the recorded function's, each tensor in this replay's memory; a view
    of an input from ``current``, the input values taken under the lock (None: the result holds
    no input)."""
    leaves = []
    for leaf in seq._plan.leaves:
        if leaf.kind == "storage":
            t = fresh[leaf.storage]
            if t.dtype is not leaf.dtype or t.shape != leaf.shape or t.stride() != leaf.stride:
                t = torch.empty(0, dtype=leaf.dtype, device=t.device).set_(t.untyped_storage(), leaf.offset,
                                                                          leaf.shape, leaf.stride)  # fmt: skip
            leaves.append(t)
        elif leaf.kind == "input":
            assert current is not None
            leaves.append(_view_of(current[seq._positions[leaf.input]], leaf))
        else:
            leaves.append(leaf.tensor)
    return _fill(seq._template, leaves)


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
