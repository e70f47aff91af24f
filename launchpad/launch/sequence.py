"""Recorded sequences: launches captured once as one CUDA graph, replayed with new inputs.

``seq = launchpad.record(fn, *args, **kwargs)`` runs ``fn`` once as it is (the warm-up: modules
load, Triton compiles and tunes), then records it: every launch it makes on torch's current
stream (launchpad's, and any other: torch operations too) becomes a node of one CUDA graph,
captured through torch's own machinery so that what ``fn`` allocates lives in the graph's private
memory pool. Each argument of ``fn`` is an input of the sequence: ``seq(*args, **kwargs)`` takes
the same arguments (any of them may be left out: they keep their last value), writes each new
value into the kernel nodes that read it (``cuGraphExecKernelNodeSetParams``) after the checks a
launch makes, and launches the graph on torch's current stream as one call (``cuGraphLaunch``).
Where each input goes is learned by comparing captures (:mod:`launchpad.launch.recording`).

Replays of one sequence from several threads are serialized (each replay's updates and launch are
one step); the sequence holds the tensors it currently points at, the graph's memory, and the
modules of its kernels (``Kernel.close`` does not unload them while the sequence lives).
"""

from __future__ import annotations

import ctypes
import inspect
import struct
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..core import driver as _driver
from ..core.params import parameter_block
from ..errors import ArgumentError, ArgumentTypeError, LaunchpadError, RecordError
from . import checks as _checks
from . import executor as _executor
from .recording import Plan, Use, analyze, capture, encode, far_probe, probe, same_structure

__all__ = ["RecordError", "Sequence", "record"]


def record(fn: Callable[..., Any], /, *args: Any, warmup: bool = True, compiled: bool | None = None,
           **kwargs: Any) -> Sequence:  # fmt: skip
    """Record the launches of ``fn(*args, **kwargs)`` once; return a :class:`Sequence` that
    replays them with new arguments.

    Parameters
    ----------
    fn : callable
        What to record: launches of launchpad kernels (C++, Triton, Numba) and torch operations on
        torch's current stream. Each of its arguments becomes an input of the sequence: a CUDA
        tensor or a scalar (int, float, bool). Values that decide what ``fn`` launches (a grid
        size, a shape, a branch) are not inputs: bind them with ``functools.partial`` or a
        closure. launchpad records ``fn`` again with each input changed (a tensor moved, a scalar
        near and far) and refuses an input whose change alters what runs; a branch that none of
        those values reaches goes unseen, so keep Python decisions off scalar inputs.
    warmup : bool
        Run ``fn`` once as it is before recording (default), as torch's CUDA graphs ask: kernels
        load, Triton compiles and autotunes, outside the capture. That run's effects on the data
        are real.
    compiled : bool, optional
        Replay through the compiled module (True), the Python replay (False), or the compiled one
        where it is built and not switched off by ``LAUNCHPAD_PYTHON_LAUNCH=1`` (None).

    Raises
    ------
    RecordError
        An input decides what ``fn`` launches (a kernel, grid or node changes with it), a launch
        takes a value computed from an input, or an input reaches no launch.
    ArgumentError
        An argument that cannot be an input (a CPU tensor, a tensor on another device, a string).
    """
    values = _bind(fn, args, kwargs)
    device = _checks.device_of_launch(None)
    for name, value in values.items():
        values[name] = _input_value(name, value, device)
    if warmup:  # (torch's capture synchronizes the device before it starts)
        fn(**values)
    graph, base = capture(fn, values)
    probed = {name: probe(value) for name, value in values.items()}
    probes = {}
    for name, value in values.items():
        _, probes[name] = capture(fn, {**values, name: probed[name]})  # its graph (and memory) dropped here
        far = far_probe(value)
        if far is not None:
            try:
                _, nodes = capture(fn, {**values, name: far})
            except LaunchpadError:  # a value its kernels refuse (out of a parameter's range): no test there
                continue
            same_structure(name, base, nodes)
    plan = analyze(base, probes, values, probed, lambda a: _driver.pointer_device(a) is not None)
    graph.instantiate()
    return Sequence(plan, values, int(graph.raw_cuda_graph_exec()), device, graph, tuple(values), compiled)


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
    if isinstance(value, (np.generic,)) and value.shape == ():
        value = value.item()
    if isinstance(value, (bool, int, float)):
        return value
    raise ArgumentTypeError(f"sequence input {name!r} must be a CUDA tensor, an int, a float or a bool, got "
                            f"{_checks.describe(value)}")  # fmt: skip


@dataclass
class _NodeState:
    """A kernel node whose arguments a replay rewrites: its parameter block and pointer array."""

    index: int
    handle: int
    function: int
    grid: tuple
    block: tuple
    shared_mem: int
    context: int
    buffer: bytearray
    pointers: Any  # ctypes array of the parameters' addresses in ``buffer`` (it pins ``buffer``)
    name: str


class Sequence:
    """Launches recorded by :func:`launchpad.record`, replayed with new inputs.

    Call it with the recorded function's arguments (positional or by name, any of them left out
    to keep its last value); it checks each new value, writes it into the kernel nodes that read
    it and launches the graph on torch's current stream. ``inputs`` names the inputs, ``nodes``
    counts the graph's nodes.
    """

    def __init__(self, plan: Plan, values: dict[str, Any], exec_: int, device: int, graph: Any,
                 inputs: tuple[str, ...], compiled: bool | None = None):  # fmt: skip
        self.inputs = inputs
        self.device = device
        self.nodes = len(plan.nodes)
        self._plan = plan
        self._values = dict(values)  # what the graph now reads: the tensors are held
        self._exec = exec_
        self._graph = graph  # the instantiated graph and the memory pool of what fn allocated
        self._modules = [n.module for n in plan.nodes if n.module is not None]  # kernels stay loaded
        self._lock = threading.Lock()
        self._states = {i: self._state(i) for i in sorted({u.node for uses in plan.uses.values() for u in uses})}
        self._positions = {name: i for i, name in enumerate(inputs)}
        use = _executor.launch_path()[0] == "compiled" if compiled is None else compiled
        self._replay: Callable[..., None] = self._compiled_replay() if use else self._python_replay

    def _state(self, index: int) -> _NodeState:
        node = self._plan.nodes[index]
        spec = node.spec
        assert spec is not None and node.params is not None
        buffer, pointers = parameter_block(spec.params, spec.param_bytes)
        for param, data in zip(spec.params, node.params):
            buffer[param.offset : param.offset + param.size] = data
        return _NodeState(index, node.handle, node.function, node.grid, node.block, node.shared_mem, node.context,
                          buffer, pointers, spec.display_name)  # fmt: skip

    def __repr__(self) -> str:
        return f"<launchpad.Sequence of {self.nodes} nodes, inputs {', '.join(self.inputs)}>"

    @property
    def replay_path(self) -> str:
        """``"compiled"`` or ``"python"``: which replay runs this sequence."""
        return "compiled" if type(self._replay).__name__ == "Replay" else "python"

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        """Replay with the arguments given (see the class documentation)."""
        self._replay(*args, **kwargs)

    def _compiled_replay(self) -> Callable[..., None]:
        """The compiled replay (``_claunch.Replay``): the same checks and updates in C, the Python
        replay behind it for everything it hands back."""
        inputs = []
        for name in self.inputs:
            value, uses = self._values[name], self._plan.uses[name]
            tensor = isinstance(value, torch.Tensor)
            dtype = _executor.dlpack_word(value.dtype) if tensor else 0
            shape, strides = (tuple(value.shape), tuple(value.stride())) if tensor else ((), ())
            table = tuple((u.node, u.param.offset, u.param.size, _executor.slot_kind(u.param), u.delta, u.align,
                           u.multiple_of) for u in uses)  # fmt: skip
            inputs.append((name, tensor, dtype, shape, strides, table, bool(self._plan.foreign[name]), value))
        nodes = tuple(
            (s.handle, s.function, s.grid, s.block, s.shared_mem, s.context, s.buffer, ctypes.addressof(s.pointers))
            if (s := self._states.get(i)) is not None else None
            for i in range(self.nodes)
        )  # fmt: skip
        set_params, graph_launch = _driver.graph_entry_points()
        me = weakref.ref(self)  # the replay's way back here, without a reference cycle

        def python_replay(*args: Any, **kwargs: Any) -> None:
            sequence = me()
            assert sequence is not None  # it holds the replay calling this
            sequence._python_replay(*args, **kwargs)

        return _executor._claunch.Replay(
            tuple(inputs), nodes, self._exec, self.device, set_params, graph_launch,
            _driver.launch_entry_points()[2], python_replay, self._lock, (self._states, self._graph),
            _executor._exchange_api_types(), self._get_stream,
        )  # fmt: skip

    #: torch's current stream on a device, for the compiled replay (None: it asks DLPack itself).
    _get_stream: Any = None

    def _python_replay(self, *args: Any, **kwargs: Any) -> None:
        """The replay in Python: the reference, and where the compiled one hands what it does not take."""
        new = self._named(args, kwargs)
        writes = [(name, value, self._writes(name, value)) for name, value in new.items()]
        device = _checks.device_of_launch(None)
        if device != self.device:
            raise ArgumentError(f"this sequence was recorded on cuda:{self.device}, but the current device is "
                                f"cuda:{device}")  # fmt: skip
        stream = _checks.current_raw_stream(device)
        with self._lock:
            dirty = {}
            for name, value, changes in writes:
                for state, offset, data in changes:
                    state.buffer[offset : offset + len(data)] = data
                    dirty[state.index] = state
                self._values[name] = value
            for s in dirty.values():
                _driver.set_kernel_node_params(self._exec, s.handle, s.function, s.grid, s.block, s.shared_mem,
                                               ctypes.addressof(s.pointers), s.context)  # fmt: skip
            _driver.graph_launch(self._exec, stream)

    def _named(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        if len(args) > len(self.inputs):
            raise ArgumentTypeError(f"this sequence takes at most {len(self.inputs)} arguments "
                                    f"({', '.join(self.inputs)}), got {len(args)}")  # fmt: skip
        new = dict(zip(self.inputs, args))
        for name, value in kwargs.items():
            if name not in self._positions:
                raise ArgumentTypeError(f"this sequence has no input {name!r} (its inputs: {', '.join(self.inputs)})")
            if name in new:
                raise ArgumentTypeError(f"this sequence got input {name!r} twice")
            new[name] = value
        return new

    def _writes(self, name: str, value: Any) -> list[tuple[_NodeState, int, bytes]]:
        """The bytes a new value puts where, after every check; raises naming the input and kernel."""
        old = self._values[name]
        foreign = self._plan.foreign[name]
        if isinstance(old, torch.Tensor):
            self._check_tensor(name, old, value)
            if foreign and value.data_ptr() != old.data_ptr():
                raise ArgumentError(
                    f"sequence input {name!r} is also read by {foreign[0]}, which launchpad cannot update: replay "
                    f"with the recorded tensor (copy new data into it: {name}.copy_(new))"
                )
            return [self._pointer(name, use, value.data_ptr()) for use in self._plan.uses[name]]
        if isinstance(value, np.generic) and value.shape == ():
            value = value.item()
        if not isinstance(value, (bool, int, float)):
            raise ArgumentTypeError(f"sequence input {name!r} is a number, got {_checks.describe(value)}")
        if foreign and value != old:
            raise ArgumentError(
                f"sequence input {name!r} is also read by {foreign[0]}, which launchpad cannot update: it keeps its "
                f"recorded value {old!r}"
            )
        return [self._scalar(name, use, value) for use in self._plan.uses[name]]

    def _where(self, name: str, use: Use) -> str:
        return f"sequence input {name!r}, read by kernel {self._states[use.node].name!r} (node {use.node}), " \
               f"{use.param.label}"  # fmt: skip

    def _check_tensor(self, name: str, old: torch.Tensor, value: Any) -> None:
        if not isinstance(value, torch.Tensor):
            raise ArgumentTypeError(f"sequence input {name!r} is a tensor, got {_checks.describe(value)}")
        recorded = f"recorded with a {old.dtype} tensor of shape {tuple(old.shape)}, strides {old.stride()}"
        problem = (
            f"is on {value.device}, not cuda:{self.device}" if value.get_device() != old.get_device() else
            f"is {value.dtype}" if value.dtype != old.dtype else
            f"has shape {tuple(value.shape)}" if value.shape != old.shape else
            f"has strides {value.stride()}" if value.stride() != old.stride() else ""
        )  # fmt: skip
        if problem:
            raise ArgumentError(f"sequence input {name!r} {problem}; it was {recorded} (shapes and layouts decide "
                                "grids and kernels: record again for another)")  # fmt: skip

    def _pointer(self, name: str, use: Use, data_ptr: int) -> tuple[_NodeState, int, bytes]:
        address = data_ptr + use.delta
        if use.align and address % use.align:
            raise ArgumentError(f"{self._where(name, use)}: pointer {address:#x} is not {use.align}-byte aligned, "
                                "but the kernel was compiled assuming it is")  # fmt: skip
        return self._states[use.node], use.param.offset, struct.pack("<Q", address)

    def _scalar(self, name: str, use: Use, value: Any) -> tuple[_NodeState, int, bytes]:
        param = use.param
        if use.wrap and isinstance(value, int) and param.kind == "int":  # as a launch takes it (checks.int_bits)
            low, fits = _checks.wrapped_int(param, value)
            if fits:
                value = low
        if param.kind in ("int", "bool") and isinstance(value, float):
            raise ArgumentTypeError(f"{self._where(name, use)}: expected an int, got float {value!r}")
        data = encode(param, value)
        if data is None:
            raise ArgumentError(f"{self._where(name, use)}: {value!r} is out of range for {param.type}")
        if use.multiple_of and value % use.multiple_of:
            raise ArgumentError(f"{self._where(name, use)}: {value} is not a multiple of {use.multiple_of}, but the "
                                "kernel was compiled assuming it is")  # fmt: skip
        return self._states[use.node], param.offset, data
