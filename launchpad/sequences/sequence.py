"""Recorded sequences: a function's launches captured once as one CUDA graph, replayed with new inputs.

``seq = launchpad.record(fn, *args, **kwargs)`` runs ``fn`` once as it is (the warm-up: modules
load, Triton compiles and tunes), then records it: every launch it makes on torch's current
stream (launchpad's kernels, torch's operations, cuBLAS) becomes a node of one CUDA graph,
captured through torch's own machinery so that what ``fn`` allocates lives in the graph's private
memory pool. Each argument of ``fn`` is an input: ``seq(*args, **kwargs)`` takes the same
arguments (any left out keep their last value), checks each new value as a launch would, points
every node that reads it at the new value (:mod:`launchpad.sequences.analysis` finds them by
comparing captures; :mod:`launchpad.sequences.updates` changes them), launches the graph on torch's
current stream, and returns what ``fn`` returned, in new memory that no later replay overwrites.

An input a node cannot be re-pointed for is copied into a buffer of the sequence's own by a copy
node at the graph's start (and back at its end where ``fn`` writes it); an output likewise by a copy
node at its end. :meth:`Sequence.explain` says which and why. Replays of one sequence from several
threads are serialized; the sequence holds ``fn`` (and what it binds), the tensors it currently
points at, the graph and its memory, and the modules of its kernels.
"""

from __future__ import annotations

import ctypes
import inspect
import threading
import weakref
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..core import driver as _driver
from ..errors import ArgumentError, ArgumentTypeError, LaunchpadError, RecordError
from ..launch import checks as _checks
from ..launch import executor as _executor
from ..launch.executor import SK_POINTER
from . import creplay as _creplay
from . import pyreplay as _pyreplay
from . import updates as _updates
from .analysis import Plan, Use, analyze, same_structure
from .capture import capture, far_probe, probe
from .outputs import find_outputs, flatten
from .pyreplay import torch_device

__all__ = ["RecordError", "Sequence", "record"]


def record(fn: Callable[..., Any], /, *args: Any, warmup: bool = True, compiled: bool | None = None,
           **kwargs: Any) -> Sequence:  # fmt: skip
    """Record the launches of ``fn(*args, **kwargs)`` once; return a :class:`Sequence` that
    replays them with new arguments and returns what ``fn`` returns.

    Parameters
    ----------
    fn : callable
        What to record: launches of launchpad kernels (C++, Triton, Numba) and torch operations on
        torch's current stream. Each of its arguments becomes an input of the sequence: a CUDA
        tensor or a scalar (int, float, bool). Values that decide what ``fn`` launches (a grid
        size, a shape, a branch) are not inputs: bind them with ``functools.partial`` or a
        closure. It may return tensors (alone, or in tuples, lists and dicts) and None.
    warmup : bool
        Run ``fn`` once as it is before recording (default), as torch's CUDA graphs ask: kernels
        load, Triton compiles and autotunes, outside the capture. That run's effects are real.
    compiled : bool, optional
        Replay through the compiled module (True), the Python replay (False), or the compiled one
        where it is built and not switched off by ``LAUNCHPAD_PYTHON_LAUNCH=1`` (None).

    Raises
    ------
    RecordError
        An input decides what ``fn`` launches (a kernel, grid or node changes with it), a launch
        takes a value computed from an input, an input reaches no launch, or reaches a node that
        cannot follow it (NCCL's kernels, child graphs, host and conditional nodes).
    ArgumentError
        An argument that cannot be an input (a CPU tensor, a tensor on another device, a string).
    """
    values = _bind(fn, args, kwargs)
    device = _checks.device_of_launch(None)
    for name, value in values.items():
        values[name] = _input_value(name, value, device)
    if warmup:  # (torch's capture synchronizes the device before it starts)
        fn(**values)
    base, control = capture(fn, values), capture(fn, values)  # both alive: their memory pools differ
    probed, probes = {}, {}
    for name, value in values.items():
        probed[name] = probe(value)
        probes[name] = capture(fn, {**values, name: probed[name]})
        probes[name].graph = None  # its memory goes back: only base and control must stay apart
        far = far_probe(value)
        if far is not None:
            try:
                nodes = capture(fn, {**values, name: far}).nodes
            except LaunchpadError:  # a value its kernels refuse (out of a parameter's range): no test there
                continue
            same_structure(name, base.nodes, nodes)
    seconds: dict[str, Any] = {}

    def capture_again(name: str) -> Any:  # a probe's second capture, where analyze must confirm a word
        if name not in seconds:
            seconds[name] = capture(fn, {**values, name: probed[name]})
            seconds[name].graph = None
        return seconds[name]

    plan = analyze(base, control, probes, values, probed, lambda a: _driver.pointer_device(a) is not None,
                   capture_again)  # fmt: skip
    find_outputs(plan, base, control, probes, values)
    del control, probes
    seconds.clear()
    return Sequence(fn, plan, values, device, compiled)


def _bind(fn: Callable[..., Any], args: tuple, kwargs: dict) -> dict[str, Any]:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"launchpad.record: {getattr(fn, '__name__', fn)!r} cannot take these "
                                f"arguments: {exc}") from None  # fmt: skip
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in inspect.signature(fn).parameters.values()):
        raise ArgumentTypeError("launchpad.record: the function must name each input (no *args or **kwargs)")
    return dict(bound.arguments)


def _input_value(name: str, value: Any, device: int) -> Any:
    """An input as the sequence keeps it: a CUDA tensor on the launch device, or a Python number."""
    if isinstance(value, torch.Tensor):
        if value.get_device() != device:
            raise ArgumentError(f"sequence input {name!r} must be a CUDA tensor on cuda:{device}, got "
                                f"{_checks.describe(value)}")  # fmt: skip
        return value
    if isinstance(value, np.generic) and value.shape == ():
        value = value.item()
    if isinstance(value, (bool, int, float)):
        return value
    raise ArgumentTypeError(f"sequence input {name!r} must be a CUDA tensor, an int, a float or a bool, got "
                            f"{_checks.describe(value)}")  # fmt: skip


def _writes(fn: Callable[..., Any], values: dict[str, Any], name: str) -> bool:
    """Whether ``fn`` writes input ``name``: run once on a copy of it, compared bit for bit."""
    x = values[name]
    copy = x.clone()
    fn(**{**values, name: copy})
    _driver.synchronize(_checks.current_raw_stream(x.get_device()))
    return not torch.equal(copy.view(torch.uint8) if copy.is_contiguous() else copy, x.view(torch.uint8) if
                           x.is_contiguous() else x)  # fmt: skip


class Sequence:
    """Launches recorded by :func:`launchpad.record`, replayed with new inputs.

    Call it with the recorded function's arguments (positional or by name, any of them left out
    to keep its last value); it checks each new value, points the graph's nodes at it, launches
    the graph on torch's current stream and returns what the function returned (its tensors in
    new memory each replay). ``inputs`` names the inputs, ``nodes`` counts the graph's nodes;
    :meth:`explain` says how each input and output is followed.
    """

    def __init__(self, fn: Callable[..., Any], plan: Plan, values: dict[str, Any], device: int,
                 compiled: bool | None = None):  # fmt: skip
        self.inputs = tuple(values)
        self.device = device
        self._fn = fn  # what the graph's bound tensors belong to: kept as long as the graph
        self._lock = threading.Lock()
        self._positions = {name: i for i, name in enumerate(self.inputs)}
        self._current = [values[name] for name in self.inputs]  # the one record of what the graph reads
        self._state = (ctypes.c_uint64 * 2)()  # launches so far (the ring's), and "broken"
        function, self.update_note = _updates.updater(device)
        self._build(plan, values, function)
        self.nodes = len(self._plan.nodes)
        self._template = self._plan.template
        self._allocators = _pyreplay.allocators(self)
        self._modules = [n.module for n in self._plan.nodes if n.module is not None]  # kernels stay loaded
        weakref.finalize(self, _drain, self._state, self.device, self._graph, self._ring)
        use = _executor.launch_path()[0] == "compiled" if compiled is None else compiled
        self._replay: Callable[..., Any] = _pyreplay.replay_for(self)
        if use:
            self._replay = _creplay.compiled_replay(self, self._replay) or self._replay

    def _build(self, plan: Plan, values: dict[str, Any], function: int) -> None:
        """The kept capture: launchpad's updater first where nodes are updated from the device, copies
        in (and back) of the inputs no node can be re-pointed for, the function, copies of the
        outputs no re-pointing can follow; then each node a replay changes made a target."""
        copies = [p for p in plan.inputs.values() if p.copy]
        for p in copies:
            p.writes = _writes(self._fn, values, p.name)
        statics = {p.name: _static_like(values[p.name]) for p in copies}
        copied = [k for k, s in enumerate(plan.storages) if s.copy]
        firsts = {k: next(i for i, leaf in enumerate(plan.leaves) if leaf.storage == k) for k in copied}
        holders = {k: torch.empty(max(plan.storages[k].nbytes, 1), dtype=torch.uint8, device=torch_device(self.device))
                   for k in copied}  # fmt: skip
        wants_device = function and any(plan.nodes[u.node].kind == "kernel" for u in _all_uses(plan))
        ring = _updates.Ring(self.device, _capacity(plan)) if wants_device else None

        def recorded(**kw: Any) -> Any:
            stream = _checks.current_raw_stream(self.device)
            if ring is not None:
                ring.prologue(function)
            for p in copies:  # an input into the sequence's buffer: a copy node whose source a replay moves
                static, span = statics[p.name]
                _driver.copy_device_to_device(static.data_ptr(), values[p.name].data_ptr(), span, stream)
            result = self._fn(**kw)
            for p in copies:
                if p.writes:
                    static, span = statics[p.name]
                    _driver.copy_device_to_device(values[p.name].data_ptr(), static.data_ptr(), span, stream)
            leaves = flatten(result)[1]
            for k in copied:  # an output into new memory: a copy node whose destination a replay moves
                start = leaves[firsts[k]].untyped_storage().data_ptr()
                _driver.copy_device_to_device(holders[k].data_ptr(), start, plan.storages[k].nbytes, stream)
            return result

        run = {**values, **{name: static for name, (static, _) in statics.items()}}
        final = capture(recorded, run, skip=frozenset({function}) if ring is not None else frozenset())
        before, backs = len(copies), sum(p.writes for p in copies)
        after = before + len(plan.nodes)
        same_structure("", plan.nodes, final.nodes[before:after])
        if [n.kind for n in final.nodes[:before] + final.nodes[after:]] != ["memcpy"] * (before + backs + len(copied)):
            raise RecordError("launchpad's copies were not captured as copy nodes")  # (a driver that merges them)
        shift = lambda u: replace(u, node=u.node + before)
        for p in plan.inputs.values():
            p.uses = [shift(u) for u in p.uses]
        for k, p in enumerate(copies):
            p.uses = [Use(k, 48, 8, SK_POINTER, "the source address of its copy")]
            if p.writes:
                back = after + sum(q.writes for q in copies[:k])
                p.uses.append(Use(back, 136, 8, SK_POINTER, "the destination address of its copy back"))
        for j, k in enumerate(copied):
            plan.storages[k].uses = [Use(after + backs + j, 136, 8, SK_POINTER, "the destination of its copy")]
        for k, storage in enumerate(plan.storages):
            if k not in holders:
                storage.uses = [shift(u) for u in storage.uses]
        plan.nodes = final.nodes
        self._plan, self._graph, self._statics, self._holders = plan, final.graph, statics, holders
        self._targets = {index: self._target(index, ring) for index in sorted({u.node for u in _all_uses(plan)})}
        final.graph.instantiate()
        self._exec = int(final.graph.raw_cuda_graph_exec())
        self._ring = ring
        if ring is not None:  # device-side updates need the graph on the device before its first launch
            _driver.graph_upload(self._exec, _checks.current_raw_stream(self.device))

    def _target(self, index: int, ring: Any) -> _updates.Target:
        node = self._plan.nodes[index]
        devnode = _driver.make_device_updatable(node.handle) if ring is not None and node.kind == "kernel" else None
        if devnode:
            return _updates.Target(_updates.DEVICE, index, node.describe(index), node.handle, devnode)
        return _updates.host_target(index, node, self.device)

    def __repr__(self) -> str:
        copied = [p.name for p in self._plan.inputs.values() if p.copy]
        extra = f", copies {', '.join(copied)}" if copied else ""
        return f"<launchpad.Sequence of {self.nodes} nodes, inputs {', '.join(self.inputs)}{extra}>"

    def explain(self) -> str:
        """How each input and output is followed: the nodes re-pointed, the copies and why, and
        whether the graph's nodes are updated from the device or the host."""
        return _pyreplay.explain(self)

    @property
    def replay_path(self) -> str:
        """``"compiled"`` or ``"python"``: which replay runs this sequence."""
        return "compiled" if type(self._replay).__name__ == "Replay" else "python"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Replay with the arguments given (see the class documentation)."""
        return self._replay(*args, **kwargs)

    #: torch's current stream on a device, for the compiled replay (None: it asks DLPack itself).
    _get_stream: Any = None


def _static_like(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """A buffer of the sequence's own with ``x``'s layout, holding ``x``'s data; its byte span."""
    span = (1 + sum((n - 1) * s for n, s in zip(x.shape, x.stride()))) * x.element_size() if x.numel() else 0
    flat = torch.empty(max(span // x.element_size(), 1), dtype=x.dtype, device=x.device)
    static = flat.as_strided(x.shape, x.stride())
    static.copy_(x)
    return static, span


def _capacity(plan: Plan) -> int:
    return sum(len(p.uses) for p in plan.inputs.values()) + sum(len(s.uses) + 1 for s in plan.storages)


def _all_uses(plan: Plan) -> list[Use]:
    return [u for p in plan.inputs.values() for u in p.uses] + [u for s in plan.storages for u in s.uses]


def _drain(state: Any, device: int, graph: Any, ring: Any) -> None:
    """Before the graph and the ring go: let the device finish the last launch (its updater reads the
    ring). The device, not the launch's stream: that stream may be gone already (a thread's own)."""
    if state[0] and ring is not None:
        try:
            _driver.synchronize_device(device)
        except Exception:  # a finalizer raises nothing; a dead context has nothing left to run
            pass
    del graph
