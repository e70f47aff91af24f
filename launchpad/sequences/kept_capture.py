"""The capture a sequence keeps and replays, and the analysis of that capture itself.

:func:`keep` goes in four steps.

1. It captures the recorded function once more, as it will run: launchpad's updater node first
   where nodes are updated from the device, copy nodes in (and back) for the inputs no node can be
   re-pointed for, the function's own nodes, and copy nodes out for the outputs no re-pointing can
   follow. Where nodes are updated from the device, a copy is launchpad's copy kernel
   (``launchpad_copy_bytes``), whose addresses the updater changes too; else a memcpy node, which
   only the host can change (a driver call per replay and copy).
2. Four captures are made of that: a twin, a control and a third, each in a memory pool of its own,
   and last the kept one, into the twin's pool (so that bytes which differ between the twin and the
   kept one vary alone). The kept capture is made last, so that what the function leaves behind (a
   parameter's ``.grad``) is the kept graph's memory, which replays write. The third capture's pool
   holds a hole of each size the control allocated, between spacers (:func:`_holes`): its blocks
   then lie apart, where in every plain capture two may touch (a training step's loss and a
   gradient, in one segment of torch's pool), which tells what a word at such an address means.
3. The outputs are followed in the kept capture (:func:`launchpad.sequences.outputs.storages`), not
   carried over from another capture by node index. Where an output is found to need a copy, the
   captures are made again with its copy node and the outputs followed again, until nothing changes.
4. Every input's use is checked in the kept capture: each word the analysis found holds the input's
   address there, and no other word points into an input. An input some other word points into
   (the host's leftovers, or a read no replay could follow) is copied instead, and the captures
   are made again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from ..core import driver as _driver
from ..errors import CudaError, RecordError
from ..launch import checks as _checks
from ..launch.executor import SK_POINTER
from . import capture as _capture
from . import updates as _updates
from .analysis import Plan, Use
from .capture import tensor_span
from .output_memory import torch_device
from .outputs import flatten, held_bytes, storages
from .regions import region_bytes, region_label, regions
from .same_launches import same_structure

__all__ = ["Kept", "keep"]

#: How many times the kept capture is made again for outputs that turned out to need a copy.
ATTEMPTS = 3

#: At most this many bytes of holes in the third capture's pool (see :func:`_holes`).
HOLE_BYTES = 256 << 20


@dataclass
class Kept:
    """The kept capture and what its copy nodes read and write (the sequence owns them all)."""

    final: _capture.Capture
    statics: dict[str, tuple[torch.Tensor, int]]  # copied inputs: the sequence's buffer and its span
    holders: dict[int, torch.Tensor]  # copied outputs: where the copy node writes (a replay moves it)
    ring: _updates.Ring | None


class _StaleWords(RecordError):
    """Words of the kept capture that point into re-pointed inputs without moving with them: the
    inputs to copy (name -> why)."""

    def __init__(self, message: str, inputs: dict[str, str]):
        super().__init__(message)
        self.inputs = inputs


def keep(fn: Callable[..., Any], plan: Plan, values: dict[str, Any], firsts: list[int], device: int, function: int,
         generators: tuple = ()) -> Kept:  # fmt: skip
    """Capture ``fn`` as it will run and finish ``plan`` in that capture (see the module
    documentation); ``function`` is the updater's (0: none).

    Where a word of the kept capture points into a re-pointed input without moving with it (the
    host's leftovers in bytes a kernel does not read, or a read no replay could follow), the input
    is copied into the sequence's own buffer instead and the capture made again: a word pointing
    into that buffer reads the replay's values whatever it is.

    The kept capture and its twin are timed (:func:`launchpad.sequences.outputs.storages`). The
    clock's dispatch mode holds each op's tensors a little longer, which may change what a step
    launches or the host's leftovers in a node's bytes: where the timed captures fail, they are
    all made again without it."""
    restore = _restorer(plan)
    try:
        return _keep_copying_stale(fn, plan, values, firsts, device, function, generators, restore, timed=True)
    except RecordError:
        restore()  # (the retry runs after the handler: its traceback holds the timed attempt's captures)
    return _keep_copying_stale(fn, plan, values, firsts, device, function, generators, restore, timed=False)


def _keep_copying_stale(fn: Callable[..., Any], plan: Plan, values: dict[str, Any], firsts: list[int], device: int,
                        function: int, generators: tuple, restore: Callable[[], None], timed: bool) -> Kept:  # fmt: skip
    try:
        return _keep(fn, plan, values, firsts, device, function, generators, timed)
    except _StaleWords as stale:
        copy = stale.inputs  # (the retry runs after the handler: its traceback holds the first attempt's captures)
    restore()
    for name, why in copy.items():
        plan.inputs[name].copy = why
    return _keep(fn, plan, values, firsts, device, function, generators, timed)


def _restorer(plan: Plan) -> Callable[[], None]:
    """What puts ``plan`` back as it is now (its inputs' uses and copies, its nodes and storages)."""
    inputs = {name: (list(p.uses), p.copy, p.writes) for name, p in plan.inputs.items()}
    nodes, storages_ = plan.nodes, [replace(s, uses=list(s.uses)) for s in plan.storages]

    def restore() -> None:
        for name, p in plan.inputs.items():
            uses, copy, writes = inputs[name]
            p.uses, p.copy, p.writes = list(uses), copy, writes
        plan.nodes, plan.storages = nodes, [replace(s, uses=list(s.uses)) for s in storages_]

    return restore


def _keep(fn: Callable[..., Any], plan: Plan, values: dict[str, Any], firsts: list[int], device: int, function: int,
          generators: tuple, timed: bool) -> Kept:  # fmt: skip
    copies = [p for p in plan.inputs.values() if p.copy]
    _check_copies(copies, values)
    for p in copies:  # (what the function does with it cannot be seen: the copy back always runs)
        p.writes = True
    statics = {p.name: _static_like(values[p.name]) for p in copies}
    wants_device = function and any(plan.nodes[u.node].kind == "kernel" for p in plan.inputs.values() for u in p.uses)
    ring = _updates.Ring(device, _capacity(plan, estimate=True)) if wants_device else None
    skip = frozenset({function}) if ring is not None else frozenset()
    copier = _updates.copier(device) if ring is not None else 0  # (else memcpy nodes: updated from the host)
    run = {**values, **{name: static for name, (static, _) in statics.items()}}
    is_pointer = lambda a: _driver.pointer_device(a) is not None
    copied: set[int] = set()
    for _ in range(ATTEMPTS + 1):
        holders = {k: torch.empty(max(held_bytes(plan, k), 1), dtype=torch.uint8, device=torch_device(device))
                   for k in copied}  # fmt: skip
        recorded = _wrapper(fn, plan, values, firsts, statics, holders, ring, function, copier, device)
        take = functools.partial(_capture.capture, recorded, run, skip=skip, generators=generators)
        twin = take(timed=timed)  # (timed as the kept capture is: the clock moves some blocks)
        twin.result = None  # its memory free again for the kept capture, made into the same pool
        control = take()
        # (a pool of its own while the control's is held: the graph's memory moves again, its blocks apart)
        third = _third(take, control, device)
        # last: what fn left behind (a parameter's .grad) is the kept graph's; timed: which nodes may use each of
        # its allocations (outputs.storages), read in the capture itself
        final = take(pool=twin.graph.pool(), timed=timed)
        compared = third if _alike(third, control, final) else None  # (else its words say nothing of final's)
        before = len(copies)
        same_structure("", plan.nodes, final.nodes[before : before + len(plan.nodes)])
        if len(final.nodes) != 2 * before + len(plan.nodes) + len(copied):  # (copies in, back, out)
            raise RecordError(f"the recorded function launched {len(final.nodes)} nodes where its captures and "
                              f"launchpad's copies make {2 * before + len(plan.nodes) + len(copied)}")  # fmt: skip
        storages(plan, firsts, final, control, twin, copied, is_pointer, compared)
        # (the control and the third capture are kept until the inputs are verified: they tell the host's leftovers)
        others: tuple[_capture.Capture, ...] = (control, compared) if compared is not None else (control,)
        del twin, control, third, compared
        need = {k for k, s in enumerate(plan.storages) if s.copy} - copied
        if ring is not None and _capacity(plan) > ring.capacity:  # (the updater's arguments hold the ring: again)
            ring = _updates.Ring(device, _capacity(plan))
        elif not need:
            break
        copied |= need
        others = ()  # (freed before the next attempt's captures)
    else:
        raise RecordError("the outputs of the recorded function could not be followed in a capture of their own")
    after = before + len(plan.nodes)
    backs = len(copies)
    kinds = [(n.kind, n.function if copier else 0) for n in final.nodes[:before] + final.nodes[after:]]
    if kinds != [("kernel", copier) if copier else ("memcpy", 0)] * (before + backs + len(copied)):
        raise RecordError("launchpad's copies were not captured as copy nodes")  # (a driver that merges them)
    source, destination = (8, 0) if copier else (48, 136)  # (launchpad_copy_bytes's parameters, CUDA_MEMCPY3D's)
    for p in plan.inputs.values():
        p.uses = [replace(u, node=u.node + before) for u in p.uses]
    for k, p in enumerate(copies):
        p.uses = [Use(k, source, 8, SK_POINTER, "the source address of its copy"),
                  Use(after + k, destination, 8, SK_POINTER, "the destination address of its copy back")]  # fmt: skip
    for j, k in enumerate(sorted(copied)):
        plan.storages[k].uses = [Use(after + backs + j, destination, 8, SK_POINTER, "the destination of its copy")]
    plan.nodes = final.nodes
    _verify_inputs(plan, final, run, values, others)
    return Kept(final, statics, holders, ring)


def _wrapper(fn: Callable[..., Any], plan: Plan, values: dict[str, Any], firsts: list[int],
             statics: dict[str, tuple[torch.Tensor, int]], holders: dict[int, torch.Tensor], ring: Any, function: int,
             copier: int, device: int) -> Callable[..., Any]:  # fmt: skip
    """The function as the kept graph runs it (see the module documentation); its copies are
    launchpad's copy kernel where ``copier`` is one (its nodes updated from the device), else memcpy
    nodes."""
    copy = functools.partial(_updates.copy_bytes, copier) if copier else _driver.copy_device_to_device

    def recorded(**kw: Any) -> Any:
        stream = _checks.current_raw_stream(device)
        if ring is not None:
            ring.prologue(function)
        for name, (static, span) in statics.items():  # into the sequence's buffer: a copy whose source a replay moves
            copy(static.data_ptr(), values[name].data_ptr(), span, stream)
        result = fn(**kw)
        for name, (static, span) in statics.items():  # and back
            copy(values[name].data_ptr(), static.data_ptr(), span, stream)
        leaves = flatten(result)[1]
        for k in sorted(holders):  # an output into new memory: a copy whose destination a replay moves
            start = leaves[firsts[k]].untyped_storage().data_ptr()
            copy(holders[k].data_ptr(), start, held_bytes(plan, k), stream)
        return result

    return recorded


def _check_copies(copies: list, values: dict[str, Any]) -> None:
    """An input is copied in and back as one span of bytes: it must be dense (no gaps another view
    owns) and share no memory with another input (whose writes the copy back would undo)."""
    for p in copies:
        x = values[p.name]
        if not _dense(x):
            raise RecordError(
                f"sequence input {p.name!r} must be copied into a buffer of the sequence's own ({p.copy}), but it is a "
                f"strided view (strides {x.stride()}) whose gaps belong to other tensors: pass a contiguous tensor"
            )
        for name, y in values.items():
            if name != p.name and isinstance(y, torch.Tensor) and _overlap(x, y):
                raise RecordError(
                    f"sequence input {p.name!r} must be copied into a buffer of the sequence's own ({p.copy}), but it "
                    f"shares memory with input {name!r}: pass tensors that do not overlap"
                )


def _third(take: Callable[..., _capture.Capture], control: _capture.Capture, device: int) -> _capture.Capture:
    """The third capture, its pool's holes within a quarter of the device's free memory (they take up
    to twice their bytes: a 1 MiB hole and its spacers fill a 2 MiB segment). Where it runs out of
    memory all the same, it is made again without holes: its other use, telling the host's leftovers
    from addresses, needs no holes, and the blocks that touch in the plain captures then touch in it
    too (what no capture tells apart is copied)."""
    budget = HOLE_BYTES
    if device >= 0:  # (the fake GPU's device is the CPU: the cap alone)
        try:
            budget = min(budget, torch.cuda.mem_get_info(device)[0] // 4)
        except Exception:  # (no figure: the cap alone, and the out-of-memory path below)
            pass
    try:
        third = take(holes=_holes(control, budget))
    except Exception as exc:
        if not _out_of_memory(exc):
            raise
        third = take()
    third.result = None
    return third


def _out_of_memory(exc: BaseException | None) -> bool:
    """Whether ``exc`` or an error in its chain is an out-of-memory error: torch's, or the driver's
    (``CUDA_ERROR_OUT_OF_MEMORY``, a :class:`CudaError` of code 2)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, torch.cuda.OutOfMemoryError) or (isinstance(exc, CudaError) and exc.code == 2):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _holes(control: _capture.Capture, budget: int = HOLE_BYTES) -> tuple[int, ...]:
    """The sizes of the control's allocations in torch's small pool (up to 1 MiB, in 2 MiB segments,
    where blocks touch most), in order, up to ``budget`` bytes: the third capture makes a hole of
    each between spacers before the function runs, and the allocator's best fit puts each of the
    function's blocks into a hole of its size, a spacer on either side."""
    sizes, total = [], 0
    for _, size in control.allocations.blocks if control.allocations is not None else ():
        if size <= _capture.SMALL_BLOCK and total + size <= budget:
            sizes.append(size)
            total += size
    return tuple(sizes)


def _alike(third: _capture.Capture, control: _capture.Capture, final: _capture.Capture) -> bool:
    """Whether the third capture can be compared with the others: the same work as the kept one
    (:func:`same_structure`) and the same allocations as the control (sizes, in order), so that its
    ``k``-th allocation is theirs."""
    if third.allocations is None or control.allocations is None:
        return False
    if [size for _, size in third.allocations.blocks] != [size for _, size in control.allocations.blocks]:
        return False
    try:
        same_structure("", final.nodes, third.nodes)
    except RecordError:
        return False
    return True


def _verify_inputs(plan: Plan, final: _capture.Capture, run: dict[str, Any], values: dict[str, Any],
                   others: tuple[_capture.Capture, ...] = ()) -> None:  # fmt: skip
    """In the kept capture, each tensor use holds its input's address, and no other word points
    into an input the caller passed (a node that reads an input through a word no replay moves would
    read it stale). Raises :class:`_StaleWords` naming the re-pointed inputs to copy instead, and
    :class:`RecordError` for a copied one (``run`` holds the sequence's buffer for it: a word into
    the caller's tensor is none the function was given).

    ``others`` are captures of the same run (the same inputs at the same addresses): a word that
    points into an input in the kept capture but not in one of them is no pointer the node reads
    (an input that stays put would be read there too) but what the host left in bytes the kernel
    does not read, as in the unused dimensions of torch's ``OffsetCalculator``."""
    uses = {(u.node, u.offset) for p in plan.inputs.values() for u in p.uses}
    tensors = {name: run[name] for name, p in plan.inputs.items() if isinstance(run[name], torch.Tensor)}
    for name, x in tensors.items():
        for u in plan.inputs[name].uses:
            word = region_bytes(final.nodes[u.node], u.offset, 8)
            if not plan.inputs[name].copy and word != (x.data_ptr() + u.delta).to_bytes(8, "little"):
                raise RecordError(f"sequence input {name!r}: the kept capture differs from the analysed ones at "
                                  f"{final.nodes[u.node].describe(u.node)}, {u.label}")  # fmt: skip
    ranges = {name: (values[name].untyped_storage().data_ptr(), values[name].untyped_storage().nbytes())
              for name in tensors}  # fmt: skip
    stale: dict[str, str] = {}
    for i, node in enumerate(final.nodes):
        for offset, size, param in regions(node):
            here = region_bytes(node, offset, size)
            if size != 8 or here is None or (i, offset) in uses:
                continue
            address = int.from_bytes(here, "little")
            if final.allocations is not None and final.allocations.containing(address):
                continue  # the graph's own memory (which may begin where an input's ends)
            for name, (start, nbytes) in ranges.items():
                if not start <= address < start + nbytes or _leftover(final, others, i, offset, start, nbytes):
                    continue  # (a leftover: see above)
                where = f"{node.describe(i)}, {region_label(node, offset, size, param)} points into it"
                if plan.inputs[name].copy:
                    raise RecordError(f"sequence input {name!r}: {where}, though the function was given the "
                                      "sequence's copy of it: a replay would leave that node reading the recorded "
                                      "tensor")  # fmt: skip
                x = values[name]
                if not x.data_ptr() <= address < x.data_ptr() + tensor_span(x):  # (a copy holds the view's bytes alone)
                    raise RecordError(f"sequence input {name!r}: {where} but did not move with it, outside the "
                                      "tensor's own bytes: a replay would leave that node reading the recorded "
                                      "memory")  # fmt: skip
                stale.setdefault(name, f"{where} without moving with it")
    if stale:
        raise _StaleWords(f"sequence inputs {sorted(stale)} are pointed at by words that do not move with them", stale)


def _leftover(final: _capture.Capture, others: tuple[_capture.Capture, ...], i: int, offset: int, start: int,
              nbytes: int) -> bool:  # fmt: skip
    """Whether another capture of the same kernel holds a word there that points elsewhere."""
    node = final.nodes[i]
    for other in others:
        twin = other.nodes[i] if len(other.nodes) == len(final.nodes) else None
        if twin is not None and (twin.kind, twin.function) == (node.kind, node.function):
            word = region_bytes(twin, offset, 8)
            if word is not None and not start <= int.from_bytes(word, "little") < start + nbytes:
                return True
    return False


def _static_like(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """A buffer of the sequence's own with ``x``'s layout, holding ``x``'s data; its byte span."""
    span = tensor_span(x)
    flat = torch.empty(max(span // x.element_size(), 1), dtype=x.dtype, device=x.device)
    static = flat.as_strided(x.shape, x.stride())
    static.copy_(x)
    return static, span


def _dense(x: torch.Tensor) -> bool:
    return x.numel() * x.element_size() == tensor_span(x)


def _overlap(x: torch.Tensor, y: torch.Tensor) -> bool:
    a, b = x.data_ptr(), y.data_ptr()
    return a < b + tensor_span(y) and b < a + tensor_span(x)


def _capacity(plan: Plan, estimate: bool = False) -> int:
    """Entries a ring slot needs: every use of every input and output (before the kept capture is
    followed, the words of the analysed capture that pointed into each output), and one more per
    output (its copy's destination, where it turns out to need one)."""
    outputs = sum(s.estimate if estimate else len(s.uses) for s in plan.storages)
    inputs = sum(2 if p.copy else len(p.uses) for p in plan.inputs.values())  # (a copied one: its copy in and back)
    return inputs + outputs + len(plan.storages)
