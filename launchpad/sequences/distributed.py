"""Recorded steps on several GPUs: what ``torch.distributed`` needs of :func:`launchpad.record`.

A step whose collectives are ``torch.distributed`` calls (``dist.all_reduce`` inside the function,
FSDP2's all-gathers and reduce-scatters) records as any other: NCCL's kernels become nodes of the
graph, which replays them. Two things need more, and this module does them:

- **DistributedDataParallel.** Its reducer times its first 10 iterations with CUDA events it waits
  for on the host, and rebuilds its buckets after the first (a host read): neither can be captured,
  so a step that runs a DDP module is warmed up :data:`DDP_WARMUP` times (torch's documented
  recipe), not once. Its gradient accumulators are autograd nodes that keep the stream they were
  made on: made on the default stream (DDP built there, as users build it), every capture fails
  (the default stream cannot join a capture). Where torch can redirect such a stale stream to the
  capturing one (``torch.autograd.graph.set_override_stale_capture_stream``) that is switched on
  while recording; else the reducer is built again on a side stream (as DDP's own ``__setstate__``
  builds it), where the warm-ups then run, as torch's recipe runs them. :func:`prepared` finds the
  DDP modules a step reaches (:func:`ddp_modules`: its closure, bound object, the globals it names,
  its arguments) and does all of it before any capture; a step it cannot prepare is refused before
  any capture, with the recipe. (Nothing hooks the modules' calls to find others: a global module
  hook would change what ``torch.compile`` guards on between the warm-up and the captures.)
- **Teardown.** ``dist.destroy_process_group()`` waits for every CUDA graph holding NCCL work to be
  destroyed: it hangs while such a graph lives. :func:`track` keeps a weak set of the sequences whose
  graph holds an NCCL kernel and wraps ``destroy_process_group`` once (and registers an exit hook)
  so that they are closed (``Sequence.close()``) first.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
import threading
import types
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..errors import ArgumentError, RecordError

__all__ = ["DDP_WARMUP", "Steps", "close_nccl_sequences", "ddp_modules", "holds_nccl", "prepared", "track"]

#: Warm-up steps before a DDP step is captured: its reducer times iterations 1 to 10 on the host
#: (torch's CUDA graphs documentation asks for at least 11 DDP iterations before capture).
DDP_WARMUP = 11
#: How deep :func:`ddp_modules` follows references from the function, how many objects at most, and
#: how many references of one object (a container's items).
DEPTH, LIMIT, ITEMS = 6, 20_000, 1_000
#: DDP's runtime statistics are taken every this many iterations (torch's ``kDDPRuntimeLoggingSampleRate``),
#: with a host wait: while recording, every capture is an iteration of the reducer, so it is raised meanwhile.
SAMPLE_RATE = 100
#: The side stream of each device that rebuilt reducers (on a torch that cannot redirect stale streams)
#: make their gradient accumulators on, and their warm-ups run on.
_STREAMS: dict[int, Any] = {}

RECIPE = (
    "A DistributedDataParallel step records after its reducer's first 10 iterations (leave warmup=True: "
    f"launchpad runs {DDP_WARMUP} warm-up steps, or pass warmup=N with N >= {DDP_WARMUP}), with the module's "
    "gradient accumulators on a stream a capture can join: build it on a side stream "
    "(s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream()); with torch.cuda.stream(s): "
    "model = DDP(model); then warm up there) and drop references to earlier steps' autograd graphs (a "
    "loss kept from an eager step) before recording"
)


def _ddp_class() -> type | None:
    """DDP's class, where a DDP module can exist: torch.distributed is there and a process group is made."""
    if not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return None
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel


def ddp_modules(fn: Callable[..., Any], values: dict[str, Any]) -> list[Any]:
    """The DistributedDataParallel modules ``fn(**values)`` can reach without running: through
    ``fn`` itself (a module, a bound method's object, a ``functools.partial``'s function and
    arguments, a callable object's attributes and its ``__call__``), a function's closure, defaults
    and the globals its code names (functions it calls, followed alike), the arguments, and the
    containers and plain objects among them; a module's submodules. Modules (Python's), classes,
    tensors and strings are not followed."""
    ddp = _ddp_class()
    if ddp is None:
        return []
    found: dict[int, Any] = {}
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(fn, 0)] + [(v, 1) for v in values.values()]
    while stack and len(seen) < LIMIT:
        obj, depth = stack.pop()
        if id(obj) in seen or depth > DEPTH or isinstance(obj, _LEAVES):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.nn.Module):
            found.update((id(m), m) for m in obj.modules() if isinstance(m, ddp))
            stack.extend((v, depth + 1) for k, v in vars(obj).items() if not k.startswith("_"))
            continue
        try:
            refs = _references(obj)
        except Exception:  # (an object whose attributes cannot be read plainly: not followed)
            continue
        stack.extend((v, depth + 1) for v in refs[:ITEMS])
    return list(found.values())


_LEAVES = (torch.Tensor, str, bytes, int, float, complex, bool, type(None), types.ModuleType, type,
           types.BuiltinFunctionType, torch.optim.Optimizer)  # fmt: skip


def _references(obj: Any) -> list[Any]:
    """What :func:`ddp_modules` follows from one object."""
    if isinstance(obj, types.MethodType):
        return [obj.__func__, obj.__self__]
    if isinstance(obj, functools.partial):
        return [obj.func, *obj.args, *obj.keywords.values()]
    if isinstance(obj, types.FunctionType):
        refs = [c.cell_contents for c in obj.__closure__ or () if _filled(c)]
        refs += list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
        return refs + [obj.__globals__[n] for n in _names(obj.__code__) if n in obj.__globals__]
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return list(obj)
    try:
        refs = list(vars(obj).values())
    except TypeError:  # (no __dict__: slots, objects of C types)
        refs = []
    call = vars(type(obj)).get("__call__")
    if isinstance(call, types.FunctionType):  # a callable object: its own code's globals too
        refs.append(call)
    return refs


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 (an empty cell raises)
    except ValueError:
        return False
    return True


def _names(code: types.CodeType) -> set[str]:
    """The global names a function's code (and the code nested in it) may read."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


class Steps:
    """How :func:`launchpad.record` warms a step up: ``runs`` times (0: not at all), the last one
    checked for host waits; on ``stream`` (None: torch's current one)."""

    def __init__(self, runs: int, device: int, explicit: bool):
        self.runs = runs
        self.device = device
        self.explicit = explicit  # (the user gave the count)
        self.ddps: list[Any] = []
        self.stream: Any = None
        self._overridden = False
        self._restore: list[Callable[[], None]] = []

    def warm_up(self, plain: Callable[[], Any], checked: Callable[[], bool]) -> bool:
        """Run the warm-ups: ``plain()`` but the last, ``checked()`` the last (it checks for host waits,
        which a DDP reducer's first iterations make, and says whether the step draws random numbers)."""
        for _ in range(self.runs - 1):
            with self._on_stream():
                plain()
        with self._on_stream():
            return checked()

    @contextlib.contextmanager
    def _on_stream(self) -> Iterator[None]:
        if self.stream is None:
            yield
            return
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            yield
        current.wait_stream(self.stream)

    def _prepare(self, ddps: list[Any]) -> None:
        """Make these DDP modules capturable (see the module documentation)."""
        self.ddps += ddps
        override = getattr(torch._C, "_set_override_stale_capture_stream", None)
        if override is not None and not self._overridden:
            self._restore.append(functools.partial(override, bool(torch._C._override_stale_capture_stream())))
            override(True)
            self._overridden = True
        elif override is None and self.runs >= DDP_WARMUP:  # (a rebuilt reducer counts from 0 again)
            if self.stream is None:
                if self.device not in _STREAMS:
                    _STREAMS[self.device] = torch.cuda.Stream(self.device)
                self.stream = _STREAMS[self.device]
            for m in ddps:
                _rebuild_reducer(m, self.stream)
        for m in ddps:  # (after a rebuild: the new reducer's)
            if hasattr(m, "_set_ddp_runtime_logging_sample_rate"):
                m._set_ddp_runtime_logging_sample_rate(2**31 - 1)
                self._restore.append(functools.partial(m._set_ddp_runtime_logging_sample_rate, SAMPLE_RATE))

    def refuse(self, ddps: list[Any], done: int = 0) -> None:
        """Refuse, before any capture, a step whose DDP module would be captured within its reducer's
        first 10 iterations (fewer warm-ups than that, ``done`` of them run, and the module not run
        that often before), or looks for unused parameters on the host every iteration."""
        for m in ddps:
            if getattr(m, "find_unused_parameters", False) and not getattr(m, "static_graph", False):
                raise RecordError("the function runs a DistributedDataParallel module built with "
                                  "find_unused_parameters=True, which looks for unused parameters on the host every "
                                  "iteration: build it with static_graph=True instead (a recorded step uses the same "
                                  f"parameters every replay). {RECIPE}")  # fmt: skip
            if self.runs < DDP_WARMUP and _iterations(m) + self.runs - done < DDP_WARMUP:
                raise RecordError(f"the function runs a DistributedDataParallel module that has run "
                                  f"{_iterations(m)} iteration(s), and warmup={self.runs} adds too few. "
                                  f"{RECIPE}")  # fmt: skip

    def close(self) -> None:
        while self._restore:
            self._restore.pop()()


def _iterations(ddp: Any) -> int:
    """How many iterations a DDP module's reducer has run, as far as its logging data tells (it is
    written on iterations 1 to 10, one behind): exact up to :data:`DDP_WARMUP`, 0 where unknown."""
    try:
        logged = int(ddp._get_ddp_logging_data().get("iteration", 0))
    except Exception:  # (a torch without it: unknown)
        return 0
    return logged + 1 if logged else 0


def _rebuild_reducer(ddp: Any, stream: Any) -> None:
    """Build ``ddp``'s reducer again with ``stream`` current, as DDP's ``__setstate__`` builds it,
    so that its gradient accumulators (autograd nodes the reducer keeps, which keep the stream they
    were made on) are made on that stream. The old reducer and logger go first, so that the
    accumulators go with them. Refused, with the recipe, where DDP's internals differ or a
    communication hook is registered (a rebuilt reducer would not have it)."""
    if getattr(ddp, "_launchpad_stream", None) is stream:
        return
    needed = ("_build_params_for_reducer", "_build_debug_param_to_name_mapping", "_ddp_init_helper")
    if getattr(ddp, "_comm_hooks", None) or getattr(ddp, "_use_python_reducer", False) or \
            not all(hasattr(ddp, n) for n in needed) or \
            not hasattr(getattr(ddp, "reducer", None), "_remove_autograd_hooks"):  # fmt: skip
        raise RecordError(f"launchpad cannot prepare this DistributedDataParallel module for capture (a "
                          f"communication hook, or another torch). {RECIPE}")  # fmt: skip
    old = _tag_accumulators(ddp)
    ddp.reducer._remove_autograd_hooks()
    parameters, sparse = ddp._build_params_for_reducer()
    names = ddp._build_debug_param_to_name_mapping(parameters)
    ddp.reducer = None
    ddp.logger = None
    with torch.cuda.stream(stream):
        ddp._ddp_init_helper(parameters, sparse, names, ddp.static_graph)
    if ddp.static_graph:  # (a new reducer's first iteration delays its all-reduces again, as DDP's own first)
        ddp.reducer._set_static_graph()
        ddp.logger._set_static_graph()
        ddp._static_graph_delay_allreduce_enqueued = False
    ddp._launchpad_stream = stream
    if old and any(TAG in _accumulator(p).metadata for p in old):
        raise RecordError("the DistributedDataParallel module's gradient accumulators are still held by an "
                          "autograd graph of an earlier step (a loss or output kept from an eager step): they keep "
                          f"the stream DDP was built on, which a capture cannot join. {RECIPE}")  # fmt: skip


#: The mark :func:`_rebuild_reducer` leaves on the gradient accumulators it drops (in their node's metadata),
#: to tell whether the rebuilt reducer got new ones.
TAG = "launchpad: the gradient accumulator of a replaced DDP reducer"


def _accumulator(p: torch.Tensor) -> Any:
    return torch.autograd.graph.get_gradient_edge(p).node


def _tag_accumulators(ddp: Any) -> list[torch.Tensor]:
    """Mark the gradient accumulators of ``ddp``'s parameters; the parameters (none where this torch
    cannot tell)."""
    params = [p for p in ddp.parameters() if p.requires_grad]
    try:
        for p in params:
            _accumulator(p).metadata[TAG] = True
    except (AttributeError, RuntimeError):
        return []
    return params


@contextlib.contextmanager
def prepared(fn: Callable[..., Any], values: dict[str, Any], device: int, warmup: bool | int) -> Iterator[Steps]:
    """The warm-up :func:`launchpad.record` runs (``warmup``: True, one run, or :data:`DDP_WARMUP`
    where ``fn`` reaches a DDP module; an int, that many; False, none), with the DDP modules
    ``fn`` reaches prepared (see the module documentation) until the recording ends. A capture
    that fails in a step holding a DDP module is refused with the recipe."""
    explicit = not isinstance(warmup, bool)
    runs = int(warmup) if explicit else int(bool(warmup))
    if runs < 0:
        raise ArgumentError(f"launchpad.record: warmup must be True, False or a count of runs, got {warmup!r}")
    steps = Steps(runs, device, explicit)
    found = ddp_modules(fn, values)
    try:
        if found:
            if not explicit and warmup:
                steps.runs = DDP_WARMUP
            steps.refuse(found)
            steps._prepare(found)
        try:
            yield steps
        except RecordError as exc:
            if "could not be captured" in str(exc) and RECIPE not in str(exc):
                if steps.ddps:
                    raise RecordError(f"{exc}. {RECIPE}") from exc
                if _ddp_alive():
                    raise RecordError(f"{exc}. If the function runs a DistributedDataParallel module that launchpad "
                                      f"did not find from it (through its closure, bound object, the globals it "
                                      f"names or its arguments): {RECIPE}") from exc  # fmt: skip
            raise
    finally:
        steps.close()


def _ddp_alive() -> bool:
    """Whether this process holds a DDP module (any: for a refusal's wording only)."""
    ddp = _ddp_class()
    if ddp is None:
        return False
    return any(isinstance(o, ddp) for o in gc.get_objects())


# Teardown: sequences whose graph holds NCCL work, closed before a process group is destroyed.

_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()
_HOOKED = threading.Lock()
_hooked = False


def holds_nccl(nodes: list[Any]) -> bool:
    """Whether a captured graph's nodes (a child graph's too) launch an NCCL kernel."""
    for node in nodes:
        if node.kind == "kernel" and "nccl" in (node.name or "").lower():
            return True
        if node.children and holds_nccl(node.children):
            return True
    return False


def track(sequence: Any, nodes: list[Any]) -> Any:
    """Keep ``sequence`` in the set closed before a process group is destroyed, where its graph's
    ``nodes`` hold NCCL work (and wrap ``destroy_process_group`` the first time). Returns it."""
    if holds_nccl(nodes):
        _LIVE.add(sequence)
        _hook()
    return sequence


def close_nccl_sequences() -> int:
    """Close every live sequence whose graph holds NCCL work; how many."""
    closed = 0
    for sequence in list(_LIVE):
        close = getattr(sequence, "close", None)
        if close is not None:
            close()
            closed += 1
        _LIVE.discard(sequence)
    return closed


def _hook() -> None:
    global _hooked
    with _HOOKED:
        if _hooked:
            return
        _hooked = True
        from torch.distributed import distributed_c10d

        original = distributed_c10d.destroy_process_group

        @functools.wraps(original)
        def destroy_process_group(*args: Any, **kwargs: Any) -> Any:
            close_nccl_sequences()  # (a CUDA graph holding NCCL work keeps the destruction waiting)
            gc.collect()  # (and so would one only garbage holds: a failed recording's, in a cycle)
            return original(*args, **kwargs)

        destroy_process_group.__launchpad_wrapped__ = original  # type: ignore[attr-defined]
        distributed_c10d.destroy_process_group = destroy_process_group
        if getattr(torch.distributed, "destroy_process_group", None) is original:
            torch.distributed.destroy_process_group = destroy_process_group
        atexit.register(close_nccl_sequences)
