"""Recorded sequences: a function's launches captured once as one CUDA graph, replayed with new inputs.

(Over 400 lines, and whole: ``record`` and the ``Sequence`` it makes are one lifetime, the
captures a recording takes and what the sequence then owns of them.)

``seq = launchpad.record(fn, *args, **kwargs)`` goes in three steps:

1. It runs ``fn`` once as it is (the warm-up: modules load, Triton compiles and tunes).
2. It records it: every launch ``fn`` makes on torch's current stream (launchpad's kernels, torch's
   operations, cuBLAS) becomes a node of one CUDA graph, captured through torch's own machinery so
   that what ``fn`` allocates lives in the graph's private memory pool. Captures compared byte by
   byte find the nodes that read each input (:mod:`launchpad.sequences.analysis`) and where each
   output lives (:mod:`launchpad.sequences.outputs`); one more capture is the one kept and replayed
   (:mod:`launchpad.sequences.kept_capture`).
3. It makes the :class:`Sequence`, which holds what its replays read and write in one
   :class:`~launchpad.sequences.state.SequenceState`.

Each argument of ``fn`` is an input. A replay, ``seq(*args, **kwargs)``, takes the same arguments
(any left out keep their last value), checks each new value as a launch would, points every node
that reads it at the new value (:mod:`launchpad.sequences.updates` changes the nodes), launches the
graph on torch's current stream, and returns what ``fn`` returned, in new memory that no later
replay overwrites. An input a node cannot be re-pointed for is copied into a buffer of the
sequence's own by a copy node at the graph's start (and back at its end); an output likewise by a
copy node at its end. :meth:`Sequence.explain` says which and why. Replays of one sequence from
several threads are serialized.

What a sequence owns, and for how long: the graph, its executable and its private memory pool
(where the intermediates live; the outputs are new memory each replay), the buffers of its copy
nodes, the updater's ring and the tensors it currently points at (a tensor replaced by a replay is
released then), until :meth:`Sequence.close` or until the sequence is collected, whichever comes
first (the device is synchronized first if it ever launched); ``fn`` and what it binds, and the
modules of its kernels, until it is collected. torch's generators are not the sequence's: each
replay of a step that draws random numbers advances them, as torch's own graphs do.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import inspect
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ..core import driver as _driver
from ..errors import ArgumentError, ArgumentTypeError, LaunchpadError, LaunchpadWarning, RecordError
from ..launch import checks as _checks
from ..launch import config as _config
from ..launch import executor as _executor
from . import capture as _capture
from . import creplay as _creplay
from . import distributed as _distributed
from . import output_memory as _output_memory
from . import pyreplay as _pyreplay
from . import updates as _updates
from .analysis import Plan, Use, analyze
from .capture import Capture, failure, far_probe, probe, residue_probe, rewrapped
from .explain import explain as _explain
from .kept_capture import keep
from .outputs import classify
from .same_launches import same_structure
from .state import BROKEN, LAUNCHES, SequenceState

__all__ = ["RecordError", "Sequence", "record"]


def record(fn: Callable[..., Any], /, *args: Any, warmup: bool | int = True, compiled: bool | None = None,
           generators: Iterable[torch.Generator] = (), host_updates: bool = False, **kwargs: Any) -> Sequence:  # fmt: skip
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
    warmup : bool or int
        Run ``fn`` once as it is before recording (default), as torch's CUDA graphs ask: kernels
        load, Triton compiles and autotunes, outside the capture. That run's effects are real. It
        runs with torch's sync debug mode set to "error", so that a step that waits for the host
        (``.item()``, ``.cpu()``, a branch on a tensor's value) is refused before any capture. A step
        that runs a DistributedDataParallel module is run 11 times (its reducer's first iterations
        wait for the host; :mod:`launchpad.sequences.distributed`); an int runs it that many times.
    compiled : bool, optional
        Replay through the compiled module (True), the Python replay (False), or the compiled one
        where it is built and not switched off by ``LAUNCHPAD_PYTHON_LAUNCH=1`` (None).
    generators : iterable of torch.Generator
        CUDA generators ``fn`` draws from besides torch's default one: registered with the graph,
        so that each replay advances them as torch's own graphs do.
    host_updates : bool
        Change the graph's nodes from the host each replay (a driver call per node changed), not
        through launchpad's updater node on the device (default where the driver and GPU allow it).
        The updater costs the host less and the GPU more: on an H200, a small training step's
        GPU-bound loop ran up to 5% longer with it (docs/sequences.md). For steps whose loop waits on
        the GPU, not on the host.

    Raises
    ------
    RecordError
        An input decides what ``fn`` launches (a kernel, grid or node changes with it), a launch
        takes a value computed from an input, an input reaches no launch, or reaches a node that
        cannot follow it (NCCL's kernels, child graphs, host and conditional nodes), or ``fn``
        cannot be captured (it synchronizes with the host).
    ArgumentError
        An argument that cannot be an input (a CPU tensor, a tensor on another device, a string).
    ArgumentTypeError
        ``fn`` is a kernel or a configured launch (``k[grid, block]``) rather than a function that
        launches; ``warmup``, ``compiled``, ``host_updates`` or ``generators`` of the wrong type.
    RecordError
        Torch's current stream is capturing already (inside ``torch.cuda.graph``): refused before
        anything runs.
    """
    # The options' checks, before anything runs: "3" or 2.5 would pass int() as counts, "no" is truthy,
    # a lone generator is not iterable, and a kernel given as fn fails binding with a message about *args.
    if hasattr(fn, "spec") and hasattr(fn, "display_name"):  # a Kernel (sequences import nothing above launch)
        ins, config = ", ".join(fn.spec.arg_names), "grid" if fn.spec.plan.block else "grid, block"
        raise ArgumentTypeError(f"launchpad.record takes a function that launches, got kernel {fn.display_name!r}: "
                                f"write lp.record(lambda {ins}: k[{config}]({ins}), {ins})")  # fmt: skip
    if not isinstance(warmup, (bool, int, np.integer, np.bool_)):  # (a negative count: distributed.prepared says)
        fix = f": write warmup={int(warmup)}" if isinstance(warmup, str) and warmup.strip().isdigit() else ""
        raise ArgumentTypeError(f"launchpad.record: warmup takes a bool or an int >= 0 (a count of warm-up runs), "
                                f"got {type(warmup).__name__} {warmup!r:.40}{fix}")  # fmt: skip
    for option, value in (("compiled", compiled), ("host_updates", host_updates)):
        if not isinstance(value, bool) and (value is not None or option == "host_updates"):
            takes = "a bool or None" if option == "compiled" else "a bool"
            raise ArgumentTypeError(f"launchpad.record: {option} takes {takes}, got {type(value).__name__} "
                                    f"{value!r:.40}: write {option}=True or {option}=False")  # fmt: skip
    lone = isinstance(generators, torch.Generator) or not isinstance(generators, Iterable)
    gens = () if lone else tuple(generators)
    stray = [g for g in gens if not isinstance(g, torch.Generator)]
    if lone or stray:
        got = (
            f"{type(generators).__name__} {generators!r:.60}: write [gen]"
            if lone
            else (
                f"one holding {type(stray[0]).__name__} {stray[0]!r:.40}: pass the torch.Generator objects fn draws from"
            )
        )
        raise ArgumentTypeError(f"launchpad.record: generators takes a list of torch.Generator, got {got}")  # fmt: skip
    values, positional, parameters = _bind(fn, args, kwargs)
    device = _config.device_of_launch(None)
    if _driver.stream_is_capturing(_checks.current_raw_stream(device)):  # (its captures would nest in that one)
        raise RecordError("launchpad.record cannot record inside another capture (torch's current stream is "
                          "capturing a CUDA graph: torch.cuda.graph, or a capture of its own): call launchpad.record "
                          "outside the capture, and replay the sequence outside it too")  # fmt: skip
    for name, value in values.items():
        values[name] = _input_value(name, value, device)
    with _distributed.prepared(fn, values, device, warmup) as steps:  # (what DDP needs: see distributed.py)
        made = _record(fn, values, device, steps, compiled, gens, (positional, parameters),
                       host_updates)  # fmt: skip
    # (closed before a process group is destroyed, if it holds NCCL work)
    return _distributed.track(made, made._state.plan.nodes)


def _record(fn: Callable[..., Any], values: dict[str, Any], device: int, steps: _distributed.Steps,
            compiled: bool | None, generators: tuple, signature: tuple[int, tuple[str, ...]],
            host_updates: bool = False) -> Sequence:  # fmt: skip
    """:func:`record` once its inputs are checked: the warm-up, the captures and the analysis."""
    rng = (
        steps.warm_up(functools.partial(fn, **values), functools.partial(_warm_up, fn, values, device))
        if steps.runs
        else True
    )  # (no warm-up: assume it draws)
    take = functools.partial(_capture.capture, generators=generators)
    base = take(fn, values)
    decoys = [probe(v) for v in values.values() if isinstance(v, torch.Tensor)]  # the allocations a probe makes
    control = take(fn, values)
    del decoys
    probed, probes, fars, multiples = {}, {}, {}, {}
    for name, value in values.items():
        probed[name] = probe(value)
        probes[name] = take(fn, {**values, name: probed[name]})
        probes[name].release()  # its memory goes back: only base and control must stay apart
        far = far_probe(value)
        if far is not None:
            try:
                fars[name] = (far, take(fn, {**values, name: far}))
            except LaunchpadError:  # a value its kernels refuse (out of a parameter's range): no test there
                pass
            else:
                fars[name][1].release()
                same_structure(name, base.nodes, fars[name][1].nodes)
        if _specialized(take, fn, values, name, base):
            multiples[name] = 16
    # More controls after the probes: uninitialized bytes hold the host's leftovers, which differ by now,
    # and differ after the host work a probe does before its capture: one control after that same work
    # (a decoy probe of each input in turn); one more through new host objects (see rewrapped).
    lates = [take(fn, values), take(fn, {name: rewrapped(v) for name, v in values.items()})]
    for value in values.values():
        decoy = probe(value)  # held across the capture, as a probe is
        lates.append(take(fn, values))
        del decoy
    for late in lates:
        late.release()
    seconds: dict[tuple[str, bool], Any] = {}
    thirds: dict[str, int] = {}  # the address of each input's third place (capture_again(name, elsewhere=True))
    recorded = base.nodes

    def capture_again(name: str, elsewhere: bool = False) -> Any:  # where analyze must confirm a byte
        if (name, elsewhere) not in seconds:  # (through new host objects: see rewrapped)
            value = probe(values[name]) if elsewhere else probed[name]  # (a third address: the probe is held)
            again = take(fn, {n: rewrapped(v) for n, v in {**values, name: value}.items()})
            again.release()
            same_structure(name, recorded, again.nodes)
            seconds[name, elsewhere] = again
            if elsewhere:
                thirds[name] = value.data_ptr()
        return seconds[name, elsewhere]

    def third_place(name: str) -> tuple[Capture, int]:  # where classify must confirm an input's view
        return capture_again(name, elsewhere=True), thirds[name]

    plan = analyze(base, control, probes, values, probed, lambda a: _driver.pointer_device(a) is not None,
                   capture_again, fars, lates)  # fmt: skip
    for name, multiple in multiples.items():
        p = plan.inputs[name]
        p.multiple_of = multiple
        p.uses = [replace(u, multiple_of=max(u.multiple_of, multiple)) for u in p.uses]
    firsts = classify(plan, base, control, probes, values, probed, third_place)
    del base, control, probes, fars, lates
    seconds.clear()
    return Sequence(fn, plan, values, device, compiled, firsts=firsts, rng=rng, generators=generators,
                    signature=signature, host_updates=host_updates)  # fmt: skip


def _bind(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[dict[str, Any], int, tuple[str, ...]]:
    """The inputs (``fn``'s arguments given, by name, in its order), how many of ``fn``'s leading
    positional parameters are inputs, and ``fn``'s parameter names."""
    try:
        signature = inspect.signature(fn)
        bound = signature.bind(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"launchpad.record: {getattr(fn, '__name__', fn)!r} cannot take these arguments: "
                                f"{exc} (record a function that names each input and launches: lp.record(lambda x, n: "
                                f"k[grid, block](x, n), x, n))") from None  # fmt: skip
    parameters = signature.parameters.values()
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
        raise ArgumentTypeError(
            "launchpad.record: the function must name each input (no *args or **kwargs): for a "
            "launch k[grid, block], record lp.record(lambda x, n: k[grid, block](x, n), x, n)"
        )
    positional = 0
    for p in parameters:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.name not in bound.arguments:
            break
        positional += 1
    return dict(bound.arguments), positional, tuple(signature.parameters)


def _warm_up(fn: Callable[..., Any], values: dict[str, Any], device: int) -> bool:
    """Run ``fn`` once as it is, with torch's sync debug mode at "error": a step that waits for the
    host is refused here, before any capture could fail on it. A step that compiles on first use
    (``torch.compile``: Inductor waits for the host while it compiles) runs again unchecked once
    its compile failed so; Triton's autotuning (it times on the host) is done by the first attempt.
    Whether it drew random numbers."""
    before, compiling = _random_offset(device), False
    for attempt in range(2):
        try:
            with _no_host_sync() if attempt == 0 or not compiling else contextlib.nullcontext():
                fn(**values)
            break
        except RuntimeError as exc:
            if "synchroniz" not in str(exc):
                raise
            compiling = _in_inductor_compile(exc)  # (torch.compile's backend: the compile runs again)
            if attempt == 0 and (compiling or _in_triton(exc)):  # Triton tunes on first use, torch.compile compiles
                continue  # (both wait for the host): again, the compile unchecked (Triton's tuning is done)
            raise RecordError(
                f"the function waits for the host ({failure(exc)}): a CUDA graph cannot capture that. Keep "
                "host reads (.item(), .cpu(), printing a tensor, a branch on a tensor's value, GradScaler's "
                "inf check) outside the recorded function"
            ) from exc
    return _random_offset(device) != before


@contextlib.contextmanager
def _no_host_sync() -> Iterator[None]:
    mode = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(mode)


def _random_offset(device: int) -> int:
    """Where torch's default CUDA generator is: a step that draws random numbers moves it."""
    return int(torch.cuda.default_generators[device].get_offset())


def _in_triton(exc: BaseException) -> bool:
    return any("/triton/" in f.filename for f in traceback.extract_tb(exc.__traceback__))


def _in_inductor_compile(exc: BaseException) -> bool:
    """Whether ``exc`` came from Inductor compiling: Dynamo's ``BackendCompilerFailed`` (a forward, at
    the first call), or a frame of ``torch/_inductor/compile_fx.py`` (also a backward AOTAutograd
    compiles at the first ``backward()``)."""
    if type(exc).__name__ == "BackendCompilerFailed":
        return True
    return any("/torch/_inductor/compile_fx" in f.filename for f in traceback.extract_tb(exc.__traceback__))


def _specialized(take: Callable[..., Capture], fn: Callable[..., Any], values: dict[str, Any], name: str,
                 base: Capture) -> bool:  # fmt: skip
    """Whether an int input that is a multiple of 16 launches other kernels when it is not (Triton's
    divisibility specialization): then every replay's value must be a multiple of 16 too."""
    other = residue_probe(values[name])
    if other is None:
        return False
    try:  # (relaxed: a kernel compiled for the other value loads during this capture)
        nodes = take(fn, {**values, name: other}, relaxed=True).nodes
    except LaunchpadError:  # refused outright, or it broke the capture: it does not take any value
        return True
    try:
        same_structure(name, base.nodes, nodes)
    except RecordError:
        return True
    return False


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


class Sequence:
    """Launches recorded by :func:`launchpad.record`, replayed with new inputs.

    Call it with the recorded function's arguments (positional or by name, any of them left out
    to keep its last value); it checks each new value, points the graph's nodes at it, launches
    the graph on torch's current stream and returns what the function returned (its tensors in
    new memory each replay). ``inputs`` names the inputs, ``nodes`` counts the graph's nodes;
    :meth:`explain` says how each input and output is followed.
    """

    def __init__(self, fn: Callable[..., Any], plan: Plan, values: dict[str, Any], device: int,
                 compiled: bool | None = None, *, firsts: list[int] | None = None, rng: bool = False,
                 generators: tuple = (), signature: tuple[int, tuple[str, ...]] | None = None,
                 host_updates: bool = False):  # fmt: skip
        self.inputs = tuple(values)
        self.device = device
        self._fn = fn  # what the graph's bound tensors belong to: kept as long as the graph
        #: How many of fn's leading parameters are inputs (positional argument i is input i below it),
        #: and fn's parameter names: a positional argument that lands on another parameter is refused.
        positional, parameters = signature or (len(self.inputs), self.inputs)
        function, note = (0, "record(..., host_updates=True)") if host_updates else _updates.updater(device)
        kept = keep(fn, plan, values, firsts or [], device, function, generators)
        changed = sorted({u.node for u in _all_uses(plan)})
        targets = {index: _target(plan, index, kept.ring, device) for index in changed}
        graph = kept.final.graph
        graph.instantiate()
        graph_exec = int(graph.raw_cuda_graph_exec())
        if kept.ring is not None:  # device-side updates need the graph on the device before its first launch
            _driver.graph_upload(graph_exec, _checks.current_raw_stream(self.device))
        #: Everything the sequence owns that its replays read and write (see state.py): one object,
        #: given to both replays, released by close() (and by its finalizer when the sequence is collected).
        self._state = st = SequenceState(
            names=self.inputs, device=device, plan=plan, positional=positional, parameters=parameters,
            rng=rng or bool(generators), graph=graph, graph_exec=graph_exec, ring=kept.ring, targets=targets,
            statics=kept.statics, holders=kept.holders, current=[values[name] for name in self.inputs],
            allocators=_output_memory.allocators(plan, device), note=note,
            modules=[n.module for n in plan.nodes if n.module is not None],  # kernels stay loaded
        )  # fmt: skip
        self.nodes = len(plan.nodes)
        st.finalizer = weakref.finalize(self, _drain, st.counters, device, graph, kept.ring)
        st.index()  # what both replays read: the last word of every use, the ring's entries
        if function and kept.ring is not None:
            self._host_update_refused(function)
        use = _executor.launch_path()[0] == "compiled" if compiled is None else compiled
        self._replay: Callable[..., Any] = _pyreplay.replay_for(st)
        if use:
            self._replay = _creplay.compiled_replay(st, self._replay, self._get_stream) or self._replay

    @property
    def update_note(self) -> str:
        """Why the graph's nodes are not updated from the device, where they are not ("" where they are)."""
        return self._state.note

    @property
    def refused_device_updates(self) -> list[tuple[int, int]]:
        """Nodes the driver would not update from the device (updated from the host): ``(node, cudaError_t)``."""
        return self._state.refused

    def _host_update_refused(self, function: int) -> None:
        """Try every device-side update once before any replay (:func:`launchpad.sequences.updates.refused_nodes`):
        a node the driver refuses is updated from the host instead, so no replay depends on an update never tried."""
        st = self._state
        devnodes = {t.devnode: t.index for t in st.targets.values() if t.kind == _updates.DEVICE}
        entries = [(st.targets[st.uses[u].node].devnode, st.uses[u].offset, st.uses[u].size, st.words[u])
                   for u in st.entries]  # fmt: skip
        refused = _updates.refused_nodes(function, entries, self.device, _checks.current_raw_stream(self.device))
        if not refused:
            return
        # TODO(launchpad): every cuTile node lands here: the driver answers cudaErrorNotSupported (801) to a
        # device-side update of any node of a tileiras-compiled function (docs/sequences.md), so it is updated
        # from the host (cuGraphExecKernelNodeSetParams), a few microseconds of host time each replay.
        for devnode, error in refused.items():
            index = devnodes[devnode]
            st.targets[index] = _updates.host_target(index, st.plan.nodes[index], self.device)
            st.refused.append((index, error))
        st.refused.sort()
        st.index()  # (the ring's entries again, without the refused nodes)

    def __repr__(self) -> str:
        copied = [p.name for p in self._state.plan.inputs.values() if p.copy]
        extra = f", copies {', '.join(copied)}" if copied else ""
        extra += f", {self.fallbacks} fallbacks to the Python replay" if self.fallbacks else ""
        return f"<launchpad.Sequence of {self.nodes} nodes, inputs {', '.join(self.inputs)}{extra}>"

    def explain(self) -> str:
        """How each input and output is followed: the nodes re-pointed, the copies and why, and
        whether the graph's nodes are updated from the device or the host."""
        return _explain(self._state, repr(self))

    @property
    def replay_path(self) -> str:
        """``"compiled"`` or ``"python"``: which replay runs this sequence."""
        return "compiled" if type(self._replay).__name__ == "Replay" else "python"

    @property
    def fallbacks(self) -> int:
        """How many replays the compiled replay handed to the Python one (0 on the Python path),
        refusals and values only Python checks included; ``LAUNCHPAD_NO_FALLBACK=1`` makes one the
        Python replay completes raise (see :attr:`launchpad.Kernel.fallbacks`)."""
        return int(getattr(self._replay, "fallbacks", 0))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Replay with the arguments given (see the class documentation)."""
        return self._replay(*args, **kwargs)

    def check(self) -> None:
        """Raise :class:`LaunchpadError` if a device-side update of a replay so far has failed.

        A replay changes the graph's nodes from the device where it can; a failure there is known
        only once the GPU has run that replay's updater (a replay that already knows it raises
        instead of returning). This waits, without synchronizing the device, until the updater has
        run for every replay launched, then raises where one failed: that replay's results and every
        later one's are wrong. Host-side updates raise in the replay itself.
        """
        st = self._state
        if st.closed:
            raise LaunchpadError("this sequence is closed")
        ring = st.ring
        if ring is not None:
            ring.wait(int(st.counters[LAUNCHES]) + ring.slots - 1)  # (the updater ran every launch so far)
            if ring.failure is not None:
                with st.lock:
                    _pyreplay.refuse_broken(st)

    def close(self) -> None:
        """Release the graph, its memory pool, the ring and the tensors the sequence holds, after
        the device has finished its replays (a device-wide synchronization). Later replays raise.
        Idempotent; also what leaving a ``with`` block does, and what collection does."""
        st = self._state
        if st.closed:
            return
        with st.lock:
            self._replay = _refuse_closed
            st.release()

    def __enter__(self) -> Sequence:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    #: torch's current stream on a device, for the compiled replay (None: it asks DLPack itself).
    _get_stream: Any = None


def _target(plan: Plan, index: int, ring: Any, device: int) -> _updates.Target:
    node = plan.nodes[index]
    devnode = _driver.make_device_updatable(node.handle) if ring is not None and node.kind == "kernel" else None
    if devnode:
        return _updates.Target(_updates.DEVICE, index, node.describe(index), node.handle, devnode)
    return _updates.host_target(index, node, device)


def _all_uses(plan: Plan) -> list[Use]:
    return [u for p in plan.inputs.values() for u in p.uses] + [u for s in plan.storages for u in s.uses]


def _refuse_closed(*args: Any, **kwargs: Any) -> Any:
    raise LaunchpadError("this sequence is closed: record the step again")


def _drain(counters: ctypes.Array[ctypes.c_uint64], device: int, graph: Any, ring: _updates.Ring | None) -> None:
    """Before the graph, its memory pool and the ring go: let the device finish the last launch (its
    updater reads the ring; its kernels use the pool, which the allocator may hand out again once the
    graph is gone). The device, not the launch's stream: that stream may be gone already (a thread's
    own). A failed device-side update no replay or :meth:`Sequence.check` reported warns."""
    if counters[LAUNCHES]:
        # TODO(launchpad): this (close() and collection alike) synchronizes the whole device, so it also
        # waits for work that is not this sequence's. Nothing records which streams the replays launched
        # on, nor an event after each launch, which would let it wait for this sequence's launches alone.
        try:
            _driver.synchronize_device(device)
        except Exception:  # a finalizer raises nothing; a dead context has nothing left to run
            pass
    failure = ring.failure if ring is not None else None
    if failure is not None and not counters[BROKEN]:
        warnings.warn(f"a launchpad sequence is released whose replay {failure[2] + 1} failed a device-side update "
                      f"(cudaError_t {failure[1]}): that replay's results and every later one's were wrong",
                      LaunchpadWarning, stacklevel=2)  # fmt: skip
    if graph is not None and hasattr(graph, "reset"):
        graph.reset()  # (torch's CUDAGraph: its executable, its graph and its pool's memory, now)
    del graph
