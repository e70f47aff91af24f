"""What a recorded function returns, and how each replay gives it new memory.

The function's result (tensors, alone or in tuples, lists and dicts, and None) is flattened into
leaves. A tensor in memory the function allocated (the graph's own: it moves between captures)
is a :class:`~launchpad.sequences.analysis.Storage`: every word of every node that points into it in
the base capture must point at the same offset into it in every other capture, and a replay then
re-points those words at new memory from torch's caching allocator. Where one does not follow it,
or some node holds the graph's addresses in a form launchpad cannot read, the output is copied
into the new memory by a copy node at the graph's end instead. A tensor that is an input (or a
view of one) is returned as the replay's input; memory the function was given (a bound buffer)
as itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..errors import RecordError
from ..launch.executor import SK_POINTER
from .analysis import Leaf, Plan, Storage, Use, _bytes, _label, _regions
from .capture import Capture, Node

__all__ = ["Index", "find_outputs", "flatten"]


def flatten(result: Any, path: str = "the result") -> tuple[Any, list[Any]]:
    """A result's template (each tensor replaced by its index) and its tensors, in order."""
    leaves: list[Any] = []

    def walk(value: Any, where: str) -> Any:
        if value is None:
            return None
        if isinstance(value, torch.Tensor):
            leaves.append(value)
            return Index(len(leaves) - 1)
        if isinstance(value, (tuple, list)):
            items = [walk(v, f"{where}[{k}]") for k, v in enumerate(value)]
            return tuple(items) if isinstance(value, tuple) else items
        if isinstance(value, dict):
            return {k: walk(v, f"{where}[{k!r}]") for k, v in value.items()}
        raise RecordError(
            f"the recorded function returns {where} = {type(value).__name__} {value!r:.60}: a sequence returns tensors "
            "(alone, or in tuples, lists and dicts) and None; a Python value would be the recording's, never new"
        )

    return walk(result, path), leaves


@dataclass(frozen=True)
class Index:
    """Where a tensor was in the result: its leaf's position."""

    index: int


def find_outputs(plan: Plan, base: Capture, control: Capture, probes: dict[str, Capture],
                 values: dict[str, Any]) -> None:  # fmt: skip
    """Fill ``plan``'s template, leaves and storages from the captures' results."""
    encoded = plan.encoded
    plan.template, tensors = flatten(base.result)
    others = [control, *probes.values()]
    other_leaves = [flatten(c.result)[1] for c in others]
    if any(len(leaves) != len(tensors) for leaves in other_leaves):
        raise RecordError("the recorded function returns a different number of tensors on each capture")
    inputs = {v.untyped_storage().data_ptr(): (n, v) for n, v in values.items() if isinstance(v, torch.Tensor)}
    storages: dict[int, int] = {}  # storage address in the base -> index in plan.storages
    for k, t in enumerate(tensors):
        start = t.untyped_storage().data_ptr()
        shape, stride, dtype = tuple(t.shape), tuple(t.stride()), t.dtype
        if start in inputs:
            name, x = inputs[start]
            offset = (t.data_ptr() - x.data_ptr()) // max(t.element_size(), 1)
            plan.leaves.append(Leaf("input", shape, stride, offset, dtype, input=name))
            continue
        if start == other_leaves[0][k].untyped_storage().data_ptr():  # the same memory in the control: not the graph's
            plan.leaves.append(Leaf("static", shape, stride, t.storage_offset(), dtype, tensor=t))
            continue
        if start not in storages:
            storages[start] = len(plan.storages)
            plan.storages.append(_storage(plan.nodes, t, [ls[k] for ls in other_leaves], others, encoded))
        plan.leaves.append(Leaf("storage", shape, stride, t.storage_offset(), dtype, storages[start]))


def _encodes(nodes: list[Node], i: int, offset: int, start: int, others: list[Capture], starts: list[int]) -> bool:
    """Whether a word that varies between captures (and is no pointer) moves as this allocation does:
    by its move, or its move shifted right by 4 (a 16-byte-aligned address stored in fewer bits)."""
    base = int.from_bytes(_bytes(nodes[i], offset, 8) or b"", "little")
    for c, s in zip(others, starts):
        word = _bytes(c.nodes[i], offset, 8)
        moved = (int.from_bytes(word or b"", "little") - base) % (1 << 64)
        shift = (s - start) % (1 << 64)
        if moved not in (shift, ((s >> 4) - (start >> 4)) % (1 << 64)) or moved == 0:
            return False
    return bool(others)


def _storage(nodes: list[Node], t: torch.Tensor, elsewhere: list[torch.Tensor], others: list[Capture],
             encoded: list[tuple[int, int]]) -> Storage:  # fmt: skip
    """How a replay gives a returned allocation new memory: the words that point into it."""
    start, nbytes = t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()
    storage = Storage(nbytes)
    starts = [e.untyped_storage().data_ptr() for e in elsewhere]
    for i, node in enumerate(nodes):
        for offset, size, param in _regions(node):
            here = _bytes(node, offset, size)
            if size != 8 or here is None:
                continue
            delta = int.from_bytes(here, "little") - start
            if not 0 <= delta < nbytes:
                continue
            label = _label(node, offset, size, param)
            if any(_bytes(c.nodes[i], offset, 8) != (s + delta).to_bytes(8, "little") for c, s in zip(others, starts)):
                storage.copy = f"{node.describe(i)}, {label} points into it but does not follow it"
                return storage
            if node.kind == "kernel" and "nccl" in node.name.lower():
                storage.copy = f"NCCL's kernel {node.name!r} (node {i}) writes it"
                return storage
            storage.uses.append(Use(i, offset, 8, SK_POINTER, label, param, delta))
    unreadable = [n.describe(i) for i, n in enumerate(nodes) if n.kind == "kernel" and n.block is None]
    encoding = next((f"{nodes[i].describe(i)}, {_label(nodes[i], o, 8, None)}" for i, o in encoded
                     if _encodes(nodes, i, o, start, others, starts)), None)  # fmt: skip
    if encoding or unreadable:
        storage.copy = f"{encoding} holds its address in another form" if encoding else \
            f"{unreadable[0]} may hold its address in a form launchpad cannot read"  # fmt: skip
    elif not storage.uses:
        storage.copy = "no node launchpad can see points into it"
    elif any(n.kind == "graph" for n in nodes):
        storage.copy = "a child graph may write it"
    return storage
