"""Where a recorded sequence's inputs go, from allocation facts and captures compared byte by byte.

:func:`launchpad.record` captures the function with the real inputs (the base), once more with
the same inputs (the control: only the graph's own memory moves), and once per input with that
input alone probed (:mod:`launchpad.sequences.capture`). :func:`analyze` then goes in six steps.

1. Every parameter of every node is compared across the captures: a parameter of 8 bytes or less
   whole, a larger one (a struct by value, such as torch's ``Array<char*, N>`` of pointers or a
   reduction's config) 8 bytes at a time.
2. A word that points into the graph's own memory is known by the allocation it points into (the
   ``k``-th allocation of the capture, :mod:`launchpad.sequences.allocations`). Where the base and
   another capture point into the same allocation at the same offset, the word is that allocation's,
   whatever its address.
3. Any other byte that differs between the base and a control varies without the inputs: it is an
   uninitialized byte of torch's functors and configs, which holds what the host left there. A later
   control is captured after the probes, and one after each probe's host work. Such a byte is masked,
   in that region only.
4. A byte that differs between the base and one input's probe, masked bytes aside, belongs to that
   input and must be explained: by a tensor's pointer that moved by exactly the tensor's own move, at
   an offset inside it (its end included), or by a scalar's encoding at a place inside the region that
   holds every such byte (a launchpad kernel's type; for another kernel a width and format that fits
   both captures, such as the float after the padding of torch's ``x * lr`` functor).
5. Before a byte that is not explained costs a copy or a refusal, the probe is captured once more,
   through new host objects: a byte that differs between the two captures of the same values is
   masked too. For a tensor, one more capture puts it at a third address. A byte that holds there what
   it held in the base or in the probe is no injective function of the address; a kernel sees an
   address only through its pointer (step 4), an injective encoding of it (a TMA descriptor's), or its
   alignment, which every probe keeps (as every replay must: see ``Use.align``). So such a byte is
   what the host left along the probe's path (the unused tail of torch's ``TensorListMetadata`` holds a
   host stack address in the probe and zeros in the base, in some recordings), and it is masked.
6. What stays unexplained is never dropped: the tensors the bytes changed with are copied into a
   buffer of the sequence's own before each replay, and a scalar is refused.

A Triton kernel specializes on an int's divisibility by 16: an int input that is a multiple of 16
is captured once more with a value that is not (:func:`launchpad.sequences.capture.residue_probe`),
and where that launches other kernels, every replay's value must be a multiple of 16 too. Outputs
(what the function returns) are found in the capture that runs, by :mod:`launchpad.sequences.outputs`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.params import Param
from ..errors import RecordError
from ..launch.executor import SK_INT, SK_POINTER, SK_UINT, slot_kind
from .capture import Capture, Node, tensor_span
from .regions import region_bytes, region_label, regions
from .same_launches import compare_child, refuse_opaque, same_structure
from .scalars import FOREIGN_KINDS, scalar_bytes

__all__ = ["InputPlan", "Leaf", "Plan", "Storage", "Use", "analyze", "both_pooled", "referenced", "same_word"]


@dataclass(frozen=True)
class Use:
    """Where one input or output reaches one node: ``size`` bytes at ``offset`` of its parameter
    block (a copy's or memset's: of its address field), packed as slot kind ``slot``; a pointer is
    the tensor's address plus ``delta``."""

    node: int
    offset: int
    size: int
    slot: int
    label: str
    param: Param | None = None  # a launchpad kernel's parameter: the checks a launch makes
    delta: int = 0
    align: int = 0
    multiple_of: int = 0
    wrap: bool = False


@dataclass
class InputPlan:
    name: str
    uses: list[Use] = field(default_factory=list)
    copy: str = ""  # why a replay copies this input into the sequence's own buffer ("": re-pointed)
    writes: bool = False  # copied back after a replay too (every copied input is: see sequence.py)
    multiple_of: int = 0  # an int the recorded kernels were specialized for as a multiple of this


@dataclass
class Storage:
    """Memory the function allocated and returned: re-pointed to new memory each replay, or copied."""

    nbytes: int
    uses: list[Use] = field(default_factory=list)
    copy: str = ""
    estimate: int = 0  # words of the analysed capture that pointed into it (the uses it will likely have)


@dataclass
class Leaf:
    """One tensor the function returns: from a :class:`Storage`, an input, or memory it was given."""

    kind: str  # "storage", "input" or "static"
    shape: tuple = ()
    stride: tuple = ()
    offset: int = 0  # elements from the storage's start, or from the input's first element
    dtype: Any = None
    storage: int = -1
    input: str = ""
    tensor: Any = None  # "static": the tensor itself


@dataclass
class Plan:
    nodes: list[Node]
    inputs: dict[str, InputPlan]
    template: Any = None  # the function's result with each tensor replaced by its leaf's index
    leaves: list[Leaf] = field(default_factory=list)
    storages: list[Storage] = field(default_factory=list)


def analyze(base: Capture, control: Capture, probes: dict[str, Capture], values: dict[str, Any],
            probed: dict[str, Any], is_device_pointer: Callable[[int], bool],
            again: Callable[..., Capture] | None = None, fars: dict[str, tuple[Any, Capture]] | None = None,
            lates: list[Capture] | None = None) -> Plan:  # fmt: skip
    """The inputs' part of a sequence's plan (see the module documentation); raises
    :class:`RecordError` for what cannot be replayed. ``again(name)`` captures input ``name``'s
    probe once more, ``again(name, elsewhere=True)`` a tensor input at a third address (to mask
    bytes that do not follow the input before a byte costs a copy or a refusal); ``fars``
    holds each scalar's far probe (its value and capture), a third value its encoding must fit;
    ``lates`` are more controls, captured after the probes (one after the host work of each input's
    probe): uninitialized bytes follow what the host did before a capture, so captures of the same
    values at other times, and after the same work, tell them apart."""
    fars = fars or {}
    controls = [control, *(lates or ())]
    for c in controls:
        same_structure("", base.nodes, c.nodes)
    for name, c in probes.items():
        same_structure(name, base.nodes, c.nodes)
    refuse_opaque(base.nodes, values)
    inputs = {name: InputPlan(name) for name in values}
    for i, node in enumerate(base.nodes):
        if node.kind == "graph":
            compare_child(i, node, control.nodes[i], probes)
            continue
        for offset, size, param in regions(node):
            here = region_bytes(node, offset, size)
            if here is None:
                continue
            pooled = here != region_bytes(control.nodes[i], offset, size) and all(
                same_word(base, c, i, offset, size, is_device_pointer) for c in controls
            )
            noise = 0
            if not pooled:
                for c in controls:
                    noise |= _differ(here, region_bytes(c.nodes[i], offset, size))
            moved = {}
            for name, c in probes.items():
                if pooled:  # the graph's own memory: the probe's word must be the same allocation's
                    if not same_word(base, c, i, offset, size, is_device_pointer):
                        moved[name] = (1 << size) - 1
                elif changed := _differ(here, region_bytes(c.nodes[i], offset, size)) & ~noise:
                    moved[name] = changed
            if moved:
                _attribute(
                    inputs, moved, i, node, offset, size, param, here, noise, values, probed, probes, again, fars
                )
        if node.kind == "kernel" and node.block is None:
            _unreadable(i, node, inputs, values)
    for name, p in inputs.items():
        if not p.uses and not p.copy:
            raise RecordError(
                f"sequence input {name!r} reaches no launch launchpad can find in the recording: pass it to the "
                "kernels directly (not a value computed from it), or leave it out"
            )
    return Plan(base.nodes, inputs)


def same_word(a: Capture, b: Capture, i: int, offset: int, size: int, is_device_pointer: Callable[[int], bool],
              first_byte: bool = False) -> bool:  # fmt: skip
    """Whether node ``i``'s word at ``offset`` points, in captures ``a`` and ``b``, into the same
    allocation of each (the ``k``-th) at the same offset: the same value of the graph's own memory,
    as an address or shifted right by 4 bits with flags above it (cuBLAS's kernels hold some so).
    Where an address lies in several allocations, a shared reading is that value (a reading one
    capture lacks, such as blocks that touch in one pool alone, cannot be what the word means).
    ``first_byte``: the kernel dereferences the word's own address (see :func:`referenced`).
    Without allocation facts, whether both are device pointers (the weaker test that is all there is)."""
    x, y = region_bytes(a.nodes[i], offset, size), region_bytes(b.nodes[i], offset, size)
    if size != 8 or x is None or y is None:
        return False
    p, q = int.from_bytes(x, "little"), int.from_bytes(y, "little")
    if a.allocations is None or b.allocations is None:
        return is_device_pointer(p) and is_device_pointer(q)
    (shift, found, flags), (other_shift, other, other_flags) = (
        referenced(a, p, first_byte),
        referenced(b, q, first_byte),
    )
    return (shift, flags) == (other_shift, other_flags) and bool(set(found) & set(other))


def both_pooled(a: Capture, b: Capture, i: int, offset: int, size: int) -> bool:
    """Whether node ``i``'s word at ``offset`` is, in captures ``a`` and ``b`` alike, an address (or an
    address shifted right by 4 bits with the same flags above it) into the graph's own memory: an
    address launchpad reads as one, though not necessarily into the same allocation of each (where
    blocks were reused differently in the two pools, the allocations holding it differ). Without
    allocation facts, False."""
    x, y = region_bytes(a.nodes[i], offset, size), region_bytes(b.nodes[i], offset, size)
    if size != 8 or x is None or y is None or a.allocations is None or b.allocations is None:
        return False
    (shift, found, flags), (other_shift, other, other_flags) = (referenced(a, int.from_bytes(x, "little")),
                                                                referenced(b, int.from_bytes(y, "little")))  # fmt: skip
    return bool(found) and bool(other) and (shift, flags) == (other_shift, other_flags)


def referenced(c: Capture, word: int, first_byte: bool = False) -> tuple[int, tuple[tuple[int, int], ...], int]:
    """What allocations of capture ``c`` an 8-byte word refers to: ``(shift, ((k, offset), ...),
    flags)`` for the address it holds (shift 0) or holds shifted right by 4 with 4 bits of flags
    above it; no allocations where it holds neither. ``first_byte``: the word's kernel reads or
    writes at that address (:mod:`.torch_operands`), so an allocation that ends there is not what
    it means, only one that holds the byte."""
    assert c.allocations is not None
    for shift in (0, 4):
        address = (word << shift) & ((1 << 64) - 1)
        found = c.allocations.containing(address)
        if first_byte:
            found = tuple((k, at) for k, at in found if at < c.allocations.blocks[k][1])
        if found:
            return shift, found, word >> (64 - shift) if shift else 0
    return 0, (), 0


def _fits(candidate: tuple[int, int, int], seen: list[tuple[Any, bytes, int]], noise: int) -> bool:
    """Whether a scalar of this kind at this place (``(sub, width, kind)``) gave the bytes of every
    capture seen (``(value, bytes, bytes it changed)``), holds every byte they changed, and no byte
    that varies alone."""
    sub, width, kind = candidate
    span = ((1 << width) - 1) << sub
    if noise & span or any(changed & ~span for _, _, changed in seen):
        return False
    try:
        return all(scalar_bytes(kind, width, value) == data[sub : sub + width] for value, data, _ in seen)
    except (TypeError, ValueError):
        return False


def _differ(a: bytes, b: bytes | None) -> int:
    """The bytes that differ, as a mask (bit ``j``: byte ``j``)."""
    if b is None:
        return (1 << len(a)) - 1
    return sum(1 << j for j in range(len(a)) if a[j] != b[j])


def _attribute(inputs: dict[str, InputPlan], moved: dict[str, int], i: int, node: Node, offset: int, size: int,
               param: Param | None, here: bytes, noise: int, values: dict[str, Any], probed: dict[str, Any],
               probes: dict[str, Capture], again: Callable[..., Capture] | None,
               fars: dict[str, tuple[Any, Capture]]) -> None:  # fmt: skip
    """Explain every byte of a region that changed with inputs (``moved``: name -> mask), or copy
    the tensors and refuse the scalars it changed with."""
    label = region_label(node, offset, size, param)
    claimed = 0
    unexplained = []
    for name, mask in moved.items():
        there = region_bytes(probes[name].nodes[i], offset, size)
        use = _explain(
            i, node, offset, size, param, label, here, there, noise, mask, values[name], probed[name], fars.get(name)
        )
        if use is None and again is not None:  # bytes that vary alone between two captures of the same values
            mask &= ~_differ(there or b"", region_bytes(again(name).nodes[i], offset, size))
            if not mask:
                continue
        if use is None and again is not None and isinstance(values[name], torch.Tensor) and there is not None:
            # A third address that gives the bytes back (the base's or the probe's) shows they are no
            # injective function of the address: the host's leftovers along the probe's path. Whole
            # bytes, all but those that vary alone: an encoding can agree with the base on the bytes
            # the probe changed and differ on others.
            third = region_bytes(again(name, elsewhere=True).nodes[i], offset, size)
            kept = ((1 << size) - 1) & ~noise
            if third is not None and not (_differ(third, here) & kept and _differ(third, there) & kept):
                continue
            use = _explain(i, node, offset, size, param, label, here, there, noise, mask, values[name], probed[name],
                           fars.get(name))  # fmt: skip
        if use is None:
            unexplained.append(name)
            continue
        span = ((1 << use.size) - 1) << (use.offset - offset)
        if claimed & span:
            unexplained.append(name)
            continue
        claimed |= span
        _refuse_nccl(name, i, node)
        inputs[name].uses.append(use)
    for name in unexplained:
        if isinstance(values[name], torch.Tensor):
            _refuse_nccl(name, i, node)
            inputs[name].copy = (
                inputs[name].copy or f"{node.describe(i)} holds it in a form launchpad cannot re-point ({label})"
            )
            continue
        if len(moved) > 1:
            raise RecordError(
                f"{node.describe(i)}, {label} changes with inputs {' and '.join(map(repr, moved))}: a value computed "
                "from several inputs (such as max(m, n)) cannot follow them; make it an input of its own"
            )
        raise RecordError(
            f"sequence input {name!r}: {node.describe(i)}, {label} changes with it but is not it (a value computed "
            "from an input, such as lr * 2 or 1 - beta, or a width launchpad cannot tell): make that value an input "
            "of its own, or pass the input as a 0-d CUDA tensor"
        )


def _explain(i: int, node: Node, offset: int, size: int, param: Param | None, label: str, here: bytes,
             there: bytes | None, noise: int, mask: int, old: Any, new: Any,
             far: tuple[Any, Capture] | None = None) -> Use | None:  # fmt: skip
    """The use of one input that accounts for every byte in ``mask``, or None. A scalar's encoding
    must hold in the base, the probe and the far probe's capture (``far``: its value and capture)
    alike; where it fits several widths the narrowest is taken, unsigned (the values all agree on)."""
    if there is None:
        return None
    if isinstance(old, torch.Tensor):
        if size != 8:
            return None
        delta = int.from_bytes(here, "little") - old.data_ptr()
        if 0 <= delta <= tensor_span(old) and int.from_bytes(there, "little") - new.data_ptr() == delta:
            return Use(i, offset, 8, SK_POINTER, label, param, delta, _align(node, param, here))
        return None
    if param is not None:  # launchpad's kernel: its parameter's type, as a launch packs it
        if param.size != size or not _takes(param.kind, old):
            return None
        tries = [[(0, size, slot_kind(param))]]
    elif node.kind == "kernel":  # a parameter of its own, else a field of a struct by value (torch's functors)
        whole = [(0, size, kind) for kind in FOREIGN_KINDS.get(size, ()) if _takes_kind(kind, old)]
        fields = [(sub, width, kind) for width in (8, 4, 2, 1) for sub in range(0, size - width + 1, width)
                  for kind in FOREIGN_KINDS.get(width, ()) if _takes_kind(kind, old)]  # fmt: skip
        tries = [whole, fields] if _whole_param(node, offset, size) else [fields]
    else:
        return None
    seen = [(old, here, 0), (new, there, mask)]  # each value, the bytes it gave, the bytes it changed
    if far is not None and (data := region_bytes(far[1].nodes[i], offset, size)) is not None:
        seen.append((far[0], data, _differ(here, data) & ~noise))
    found: list[tuple[int, int, int]] = []
    for candidates in tries:
        found = [c for c in candidates if _fits(c, seen, noise)]
        if found:
            break
    if not found:
        return None
    sub, width, kind = min(found, key=lambda f: f[1])
    if len({f[:2] for f in found}) > 1:
        if isinstance(old, float):  # float formats of several widths fit every value seen: which is it?
            return None
        # An int of several widths fits (a wider one's upper bytes are zero): the values all of them
        # agree on, 0 <= value < 2**(8 * width), are all a replay may write.
        kind = SK_UINT
    where = label if (sub, width) == (0, size) else f"{label} (bytes {sub}-{sub + width - 1} of it)"
    if param is None:
        return Use(i, offset + sub, width, kind, where)
    arg = next((a for a in node.spec.args if a.kind == "param" and a.param == param.index), None)
    return Use(i, offset, size, kind, label, param, multiple_of=arg.multiple_of if arg else 0,
               wrap=bool(arg and arg.options.get("wrap")))  # fmt: skip


# --- inputs ----------------------------------------------------------------------------------


def _takes(param_kind: str, value: Any) -> bool:
    """Whether a launch takes a Python scalar of this type for a parameter of this kind."""
    if isinstance(value, bool):
        return param_kind in ("bool", "int", "untyped")
    if isinstance(value, int):
        return param_kind in ("int", "float", "untyped")
    return param_kind in ("float", "untyped")


def _takes_kind(kind: int, value: Any) -> bool:
    """Whether a foreign kernel's slot of this kind may hold a Python scalar of this type (torch
    passes an int scalar of a float operation as a float, never a float as an int)."""
    return not isinstance(value, float) or kind not in (SK_INT, SK_UINT)


def _whole_param(node: Node, offset: int, size: int) -> bool:
    return (offset, size) in (node.layout or ())


def _align(node: Node, param: Param | None, value: bytes) -> int:
    """The alignment a new pointer must keep: what launchpad's kernel was compiled for; for another
    kernel, the recorded address's own up to 16 bytes (the widest vector access and TMA's need:
    torch's kernels choose their vector width, cuBLAS its algorithm, from it)."""
    if param is not None:
        arg = next((a for a in node.spec.args if a.kind == "param" and a.param == param.index), None)
        return arg.align if arg is not None else 0
    address = int.from_bytes(value, "little")
    return min(16, address & -address) if address else 16


def _refuse_nccl(name: str, i: int, node: Node) -> None:
    if node.kind == "kernel" and "nccl" in node.name.lower():
        raise RecordError(
            f"sequence input {name!r} is read by the NCCL kernel {node.name!r} (node {i}): NCCL's kernels must not be "
            "re-pointed (NVIDIA/nccl#961); keep the communication outside the recorded function, or bind the input"
        )


def _unreadable(i: int, node: Node, inputs: dict[str, InputPlan], values: dict[str, Any]) -> None:
    """A kernel whose parameters the driver cannot list: any input may reach it unseen."""
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            inputs[name].copy = inputs[name].copy or f"{node.describe(i)} has parameters the driver cannot list"
        else:
            raise RecordError(
                f"sequence input {name!r} may reach {node.describe(i)}, whose parameters the driver cannot list "
                "(a driver older than CUDA 12.4?): bind it, or pass it as a 0-d CUDA tensor"
            )
