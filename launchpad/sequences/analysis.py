"""Where a recorded sequence's inputs and outputs go, from captures compared word by word.

:func:`launchpad.record` captures the function with the real inputs (the base), once more with
the same inputs (the control), and once per input with that input alone probed
(:mod:`launchpad.sequences.capture`). Every parameter of every node is compared across them, a
parameter of 8 bytes or less whole, a larger one (a struct by value, such as torch's
``Array<char*, N>`` of pointers or a reduction's config) 8 bytes at a time:

- unchanged everywhere: a constant of the graph;
- changed in the control: the graph's own memory (an intermediate, an output), which moves with
  every capture. Where such a word is not a device pointer in both captures, some node holds the
  graph's addresses in a form launchpad cannot follow (a TMA descriptor, say);
- changed in one input's probe only: that input. A tensor's pointer counts only where it moved by
  exactly the tensor's own move, at an offset inside the tensor; a scalar only where its bytes are
  the value's encoding in both captures (a launchpad kernel's type, or for another kernel a width
  and format that fits both). Anything else that changed with the input cannot be followed: a
  tensor is then copied into a buffer of the sequence's own before each replay, a scalar refused;
- changed in several inputs' probes: a value computed from several inputs, refused.

Before a changed word costs a copy or a refusal, it is confirmed: the input's probe is captured
again, and a word that differs between the two captures of the same values is no function of the
inputs but bytes that vary alone (uninitialized padding in torch's functors that happened to
match between the base and the control): left as recorded, as a word that changed in the control.

Outputs (what the function returns) are found the same way, by :mod:`launchpad.sequences.outputs`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core.params import Param
from ..errors import RecordError
from ..launch.executor import SK_INT, SK_POINTER, SK_UINT, slot_kind
from .capture import MEMCPY_FIELDS, Capture, Node
from .scalars import FOREIGN_KINDS, scalar_bytes

__all__ = ["InputPlan", "Leaf", "Plan", "Storage", "Use", "analyze", "same_structure"]


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
    writes: bool = False  # the function writes it: copied back after a replay (copies only)


@dataclass
class Storage:
    """Memory the function allocated and returned: re-pointed to new memory each replay, or copied."""

    nbytes: int
    uses: list[Use] = field(default_factory=list)
    copy: str = ""


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
    encoded: list[tuple[int, int]] = field(default_factory=list)  # words that vary alone: no pointers


def analyze(base: Capture, control: Capture, probes: dict[str, Capture], values: dict[str, Any],
            probed: dict[str, Any], is_device_pointer: Callable[[int], bool],
            again: Callable[[str], Capture] | None = None) -> Plan:  # fmt: skip
    """The plan of a sequence (see the module documentation); raises :class:`RecordError` for what
    cannot be replayed. ``again(name)`` captures input ``name``'s probe once more (to confirm a
    word before it costs a copy or a refusal); without it every changed word is taken as it is."""

    def varies_alone(i: int, offset: int, size: int, names: list[str]) -> bool:
        if again is None:
            return False
        return any(_bytes(again(n).nodes[i], offset, size) != _bytes(probes[n].nodes[i], offset, size) for n in names)

    same_structure("", base.nodes, control.nodes)
    for name, capture in probes.items():
        same_structure(name, base.nodes, capture.nodes)
    _refuse_opaque(base.nodes, values)
    inputs = {name: InputPlan(name) for name in values}
    encoded: list[tuple[int, int]] = []  # (node, offset) of words that vary between captures but are no pointers
    for i, node in enumerate(base.nodes):
        if node.kind == "graph":
            _compare_child(i, node, control.nodes[i], probes)
            continue
        for offset, size, param in _regions(node):
            here = _bytes(node, offset, size)
            if here is None:
                continue
            if _bytes(control.nodes[i], offset, size) != here:  # the graph's own memory, or bytes that vary alone
                if size == 8 and not _pool_pointer(here, _bytes(control.nodes[i], offset, size), is_device_pointer):
                    encoded.append((i, offset))  # (uninitialized padding, or an address in another form)
                continue
            moved = [name for name, c in probes.items() if _bytes(c.nodes[i], offset, size) != here]
            if len(moved) > 1 and varies_alone(i, offset, size, moved):
                if size == 8:
                    encoded.append((i, offset))
                continue
            if len(moved) > 1:
                raise RecordError(
                    f"{node.describe(i)}, {_label(node, offset, size, param)} changes with inputs "
                    f"{' and '.join(map(repr, moved))}: a value computed from several inputs (such as max(m, n)) "
                    "cannot follow them; make it an input of its own"
                )
            if moved:
                name = moved[0]
                there = _bytes(probes[name].nodes[i], offset, size)
                if not _follow(inputs[name], i, node, offset, size, param, here, there, values[name], probed[name],
                               functools.partial(varies_alone, i, offset, size, [name])):  # fmt: skip
                    if size == 8:
                        encoded.append((i, offset))  # bytes that vary alone, as those changed in the control
        if node.kind == "kernel" and node.block is None:
            _unreadable(i, node, inputs, values)
    plan = Plan(base.nodes, inputs, encoded=encoded)
    for name, p in inputs.items():
        if not p.uses and not p.copy:
            raise RecordError(
                f"sequence input {name!r} reaches no launch launchpad can find in the recording: pass it to the "
                "kernels directly (not a value computed from it), or leave it out"
            )
    return plan


# --- regions: what is compared ----------------------------------------------------------------


def _regions(node: Node) -> list[tuple[int, int, Param | None]]:
    """``(offset, size, launchpad param)`` of each compared region of a node."""
    if node.kind in ("memcpy", "memset"):
        return [(offset, 8, None) for offset in MEMCPY_FIELDS[node.kind]]
    if node.kind != "kernel" or not node.layout:
        return []
    params = node.spec.params if node.spec is not None else [None] * len(node.layout)
    out: list[tuple[int, int, Param | None]] = []
    for (offset, size), param in zip(node.layout, params):
        if size <= 8:
            out.append((offset, size, param))
            continue
        start = offset
        while start < offset + size:  # 8-byte words at 8-aligned addresses, and the bytes around them
            end = min(offset + size, (start // 8 + 1) * 8)
            out.append((start, end - start, param))
            start = end
    return out


def _bytes(node: Node, offset: int, size: int) -> bytes | None:
    if node.kind in ("memcpy", "memset"):
        return node.addresses[MEMCPY_FIELDS[node.kind].index(offset)].to_bytes(8, "little")
    if node.block is None:
        return None
    return node.block[offset : offset + size]


def _label(node: Node, offset: int, size: int, param: Param | None) -> str:
    if node.kind == "memcpy":
        return "its source address" if offset == 48 else "its destination address"
    if node.kind == "memset":
        return "its destination address"
    if param is not None:
        return param.label if size == param.size else f"{param.label}, bytes {offset - param.offset}-" \
            f"{offset - param.offset + size - 1}"  # fmt: skip
    index = next(j for j, (o, s) in enumerate(node.layout or ()) if o <= offset < o + s)
    start = (node.layout or ())[index][0]
    whole = (node.layout or ())[index][1] == size
    return f"param {index}" if whole else f"param {index}, bytes {offset - start}-{offset - start + size - 1}"


def _pool_pointer(a: bytes, b: bytes | None, is_device_pointer: Callable[[int], bool]) -> bool:
    return b is not None and len(a) == 8 and all(is_device_pointer(int.from_bytes(x, "little")) for x in (a, b))


# --- inputs ----------------------------------------------------------------------------------


def _follow(p: InputPlan, i: int, node: Node, offset: int, size: int, param: Param | None, here: bytes,
            there: bytes | None, old: Any, new: Any, varies_alone: Callable[[], bool]) -> bool:  # fmt: skip
    """A region that changed with one input: a use of it, a reason to copy it, or a refusal; False
    (nothing done) where a second capture shows the region varies alone."""
    label = _label(node, offset, size, param)
    if isinstance(old, torch.Tensor):
        if size == 8 and there is not None:
            delta = int.from_bytes(here, "little") - old.data_ptr()
            if 0 <= delta < max(_span(old), 1) and int.from_bytes(there, "little") - new.data_ptr() == delta:
                _refuse_nccl(p.name, i, node)
                p.uses.append(Use(i, offset, 8, SK_POINTER, label, param, delta, _align(node, param, here)))
                return True
        if varies_alone():
            return False
        _refuse_nccl(p.name, i, node)
        p.copy = p.copy or f"{node.describe(i)} holds it in a form launchpad cannot re-point ({label})"
        return True
    use = _scalar_use(i, node, offset, size, param, label, here, there, old, new)
    if use is None and varies_alone():
        return False
    if use is None:
        raise RecordError(
            f"sequence input {p.name!r}: {node.describe(i)}, {label} changes with it but is not it (a value computed "
            "from an input, such as lr * 2, or a width launchpad cannot tell): make that value an input of its own, "
            "or pass the input as a 0-d CUDA tensor"
        )
    _refuse_nccl(p.name, i, node)
    p.uses.append(use)
    return True


def _scalar_use(i: int, node: Node, offset: int, size: int, param: Param | None, label: str, here: bytes,
                there: bytes | None, old: Any, new: Any) -> Use | None:  # fmt: skip
    if there is None:
        return None
    if param is not None:  # launchpad's kernel: its parameter's type, as a launch packs it
        if param.size != size or not _takes(param.kind, old):
            return None
        kinds = [slot_kind(param)]
    elif node.kind == "kernel" and _whole_param(node, offset, size):
        kinds = [k for k in FOREIGN_KINDS.get(size, ()) if _takes_kind(k, old)]
    else:
        return None
    for kind in kinds:
        try:
            if scalar_bytes(kind, size, old) == here and scalar_bytes(kind, size, new) == there:
                break
        except (TypeError, ValueError):
            continue
    else:
        return None
    if param is None:
        return Use(i, offset, size, kind, label)
    arg = next((a for a in node.spec.args if a.kind == "param" and a.param == param.index), None)
    return Use(i, offset, size, kind, label, param, multiple_of=arg.multiple_of if arg else 0,
               wrap=bool(arg and arg.options.get("wrap")))  # fmt: skip


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


def _span(tensor: torch.Tensor) -> int:
    """Bytes from a tensor's first element to the end of its last."""
    if tensor.numel() == 0:
        return 0
    return (1 + sum((n - 1) * s for n, s in zip(tensor.shape, tensor.stride()))) * tensor.element_size()


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


def _refuse_opaque(nodes: list[Node], values: dict[str, Any]) -> None:
    """Host and conditional nodes: launchpad cannot see what they read."""
    for i, node in enumerate(nodes):
        if node.kind in ("host", "conditional") and values:
            raise RecordError(
                f"the function's graph has {node.describe(i)}, which launchpad cannot look into: an input read "
                f"there would replay stale. Keep {node.kind} work outside the recorded function"
            )


def _compare_child(i: int, node: Node, control: Node, probes: dict[str, Capture]) -> None:
    """A child graph: no input may reach into it (its nodes are not updated)."""
    for name, capture in probes.items():
        if _flat(capture.nodes[i]) != _flat(node) and _flat(control) == _flat(node):
            raise RecordError(
                f"sequence input {name!r} is read inside a child graph ({node.describe(i)}), whose nodes launchpad "
                "does not update: launch that work directly in the recorded function"
            )


def _flat(node: Node) -> list:
    return [(c.kind, c.function, c.block, c.addresses, _flat(c)) for c in node.children]


# --- structure -------------------------------------------------------------------------------


def same_structure(name: str, base: list[Node], nodes: list[Node]) -> None:
    """Raise :class:`RecordError` unless a capture with another value of input ``name`` (with the
    same values: ``name`` is "") launched the same kernels, grids and nodes."""

    def fail(detail: str) -> None:
        if not name:
            raise RecordError(
                f"the function launched different work on two captures with the same inputs ({detail}): it depends on "
                "something besides its inputs (a random choice, a counter), which a recording cannot follow"
            )
        raise RecordError(
            f"sequence input {name!r} decides what the function launches ({detail}); a sequence input may only "
            "change values its launches read. Leave it out of the inputs (it then stays at its recorded value), or "
            "record one sequence per value"
        )

    if len(base) != len(nodes):
        fail(f"{len(base)} graph nodes with the recorded value, {len(nodes)} with another")
    for i, (a, b) in enumerate(zip(base, nodes)):
        if a.kind != b.kind:
            fail(f"node {i} is a {a.kind} with the recorded value, a {b.kind} with another")
        if a.kind == "kernel" and (a.function, a.grid, a.block_dim, a.shared_mem) != (b.function, b.grid, b.block_dim,
                                                                                     b.shared_mem):  # fmt: skip
            what = "another kernel" if a.function != b.function else f"grid {b.grid}, block {b.block_dim}"
            fail(f"{a.describe(i)} has grid {a.grid}, block {a.block_dim}; with another value, {what}")
        if a.kind == "graph":
            same_structure(name, a.children, b.children)
