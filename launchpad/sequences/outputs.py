"""What a recorded function returns, and how each replay gives it new memory.

The function's result (tensors, alone or in tuples, lists and dicts, and None) is flattened into
leaves (:func:`classify`). A tensor that an input's probe moved exactly as it moved the input is
that input's (a view of it, of any dtype: returned as the replay's input); one at the same
address in the control is memory the function was given (a bound buffer: returned as itself);
any other lives in memory the function allocated, the graph's own, a
:class:`~launchpad.sequences.analysis.Storage`.

Each storage is followed in the capture that runs (:func:`storages`), by allocation facts: the
allocation that starts at the storage's address in that capture, and the allocation at the same
position in the control. Its words are re-pointed at new memory each replay only where every one
of these holds; otherwise a copy node at the graph's end copies the output into the new memory:

- no other allocation of the capture ever held any of its addresses (a freed temporary that sat
  there would make an address inside it mean either), unless the nodes tell them apart by when
  they were made: the capture that runs is timed (:class:`~launchpad.sequences.allocations.NodeClock`),
  which gives each allocation the nodes that may use it, and a word then means only an
  allocation its node may use;
- every word of every node that points into it points, in the control, into the same allocation
  at the same offset, and into it alone: an address at its end is also the next block's start,
  unless the word's kernel reads or writes at that address (an operand's first byte of torch's
  elementwise and reduce kernels, :mod:`.torch_operands`: then it means the block holding it), or
  the control and the third capture (whose pool holds holes between spacers, so that its blocks lie apart)
  read it as the same one allocation at the same offset: a reading of it that some capture lacks
  is not what the word means;
- no node holds the graph's addresses in a form launchpad cannot read: bytes that differ between
  the capture and the control are either a word of the graph's own memory (an address, or one
  shifted by 4 bits, into an allocation of each capture: not necessarily the same allocation,
  where the two pools reused blocks differently, since only a word that points into the output
  matters, and the rule above judges that one), or bytes that also differ between the capture and
  its twin (a capture of the same values into the same pool, whose every allocation is verified
  to sit at the same address: bytes that differ there vary alone), or bytes that a third capture,
  in a pool of its own, gives back as the capture or the control held them, all of them at once
  (where the graph's memory moved a third time, an encoding of its addresses moves with it; what
  the host left in a struct's unused tail, such as torch's ``TensorListMetadata`` and
  ``ReduceOp``, repeats what it held before);
- every kernel's parameters could be read, and no child graph may write it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import RecordError
from ..launch.executor import SK_POINTER
from .analysis import Leaf, Plan, Storage, Use, _differ, both_pooled, referenced, same_word
from .capture import Capture, layout_span, tensor_span
from .regions import region_bytes, region_label, regions
from .torch_operands import first_byte_words

__all__ = ["SHARED_ADDRESS", "Index", "classify", "flatten", "held_bytes", "storages"]

#: Why an output is copied where a word holds the address at which it ends and another allocation
#: starts, in every capture compared: its end, or the other's start, which only a capture whose
#: blocks lie apart can tell (:mod:`launchpad.sequences.kept_capture`'s third capture).
SHARED_ADDRESS = "holds the address where it ends and another allocation starts, in every capture compared"


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


def classify(plan: Plan, base: Capture, control: Capture, probes: dict[str, Capture], values: dict[str, Any],
             probed: dict[str, Any], third: Callable[[str], tuple[Capture, int]] | None = None) -> list[int]:  # fmt: skip
    """Fill ``plan``'s template, leaves and storages (each storage's size) from the analysed
    captures' results; return, for each storage, the index of its first leaf. ``third(name)`` is a
    capture with input ``name`` at a third address, and that address: a tensor that moved with an
    input's probe must move with it there too (the graph's memory may have moved by the same amount
    by chance)."""
    plan.template, tensors = flatten(base.result)
    elsewhere = {name: flatten(c.result)[1] for name, c in probes.items()}
    in_control = flatten(control.result)[1]
    if any(len(leaves) != len(tensors) for leaves in [in_control, *elsewhere.values()]):
        raise RecordError("the recorded function returns a different number of tensors on each capture")
    storages: dict[int, int] = {}  # storage address in the base -> index in plan.storages
    firsts: list[int] = []
    for k, t in enumerate(tensors):
        shape, stride, dtype = tuple(t.shape), tuple(t.stride()), t.dtype
        owners = [
            name
            for name, leaves in elsewhere.items()
            if isinstance(values[name], torch.Tensor)
            and leaves[k].data_ptr() != t.data_ptr()
            and leaves[k].data_ptr() - probed[name].data_ptr() == t.data_ptr() - values[name].data_ptr()
        ]
        if owners and third is not None:
            again, address = third(owners[0])
            if flatten(again.result)[1][k].data_ptr() - address != t.data_ptr() - values[owners[0]].data_ptr():
                owners = []
        if owners:  # (a probe moves its input alone: one owner at most)
            name, x = owners[0], values[owners[0]]
            offset = t.data_ptr() - x.data_ptr()
            if offset < 0 or offset + tensor_span(t) > tensor_span(x):
                raise RecordError(
                    f"the recorded function returns {_where(k)}, memory of input {name!r} outside the tensor itself "
                    "(its base or a neighbour): a replay cannot know that memory of a new input; return a view inside it"
                )
            plan.leaves.append(Leaf("input", shape, stride, offset, dtype, input=name))
            continue
        start = t.untyped_storage().data_ptr()
        if start == in_control[k].untyped_storage().data_ptr():  # the same memory in the control: not the graph's
            plan.leaves.append(Leaf("static", shape, stride, t.storage_offset(), dtype, tensor=t))
            continue
        if start not in storages:
            storages[start] = len(plan.storages)
            plan.storages.append(Storage(t.untyped_storage().nbytes()))
            firsts.append(k)
        plan.leaves.append(Leaf("storage", shape, stride, t.storage_offset(), dtype, storages[start]))
    for start, k in storages.items():
        end = start + plan.storages[k].nbytes
        plan.storages[k].estimate = sum(
            1
            for node in base.nodes
            for offset, size, _ in regions(node)
            if size == 8 and start <= int.from_bytes(region_bytes(node, offset, 8) or bytes(8), "little") <= end
        )
    return firsts


def storages(plan: Plan, firsts: list[int], final: Capture, control: Capture, twin: Capture | None,
             copied: set[int], is_device_pointer: Any, third: Capture | None = None) -> None:  # fmt: skip
    """Follow each storage of ``plan`` not in ``copied`` in ``final``, the capture that runs (see the
    module documentation): its uses there, or why it is copied. ``control`` is a capture of the
    same function and values in another pool, ``twin`` one in the same pool as ``final``, ``third``
    one more in a pool of its own."""
    nodes = final.nodes
    leaves, in_control = flatten(final.result)[1], flatten(control.result)[1]
    if len(leaves) != len(plan.leaves) or len(in_control) != len(plan.leaves):
        raise RecordError("the recorded function returns a different number of tensors on each capture")
    hidden = _hidden(final, control, twin, is_device_pointer, third)
    timing = final.allocations if final.allocations is not None and final.allocations.lifetimes is not None else None
    for k, storage in enumerate(plan.storages):
        if k in copied:
            continue
        storage.uses, storage.copy = [], ""
        if hidden:
            storage.copy = hidden
            continue
        start = leaves[firsts[k]].untyped_storage().data_ptr()
        blocks, others = final.allocations, control.allocations
        assert blocks is not None and others is not None  # (else hidden says why)
        a = blocks.find(start)
        if a is None or a != others.find(in_control[firsts[k]].untyped_storage().data_ptr()):
            storage.copy = "launchpad cannot name the allocation it lives in"
        elif blocks.shares(a) and timing is None:
            storage.copy = ("its memory held another allocation earlier in the step (a temporary freed before it was "
                            "allocated), so an address inside it may mean either")  # fmt: skip
        else:
            storage.copy = _follow(storage, a, nodes, final, control, is_device_pointer, timing, third)


def _follow(storage: Storage, a: int, nodes: list, final: Capture, control: Capture, is_device_pointer: Any,
            timing: Any = None, third: Capture | None = None) -> str:  # fmt: skip
    """Every word that points into allocation ``a`` as a use of the storage; why not, where one fails.
    ``timing``: the capture's allocations with their lifetimes, by which a word means only what its
    node may use. An address two allocations share (one's end, the next one's start) means what
    it means in every capture: a reading the control (or the third capture, another pool, where
    the blocks may lie apart) lacks is not what the word means."""
    assert final.allocations is not None
    for i, node in enumerate(nodes):
        first_bytes = first_byte_words(node)
        place = final.positions[i] if final.positions is not None else i
        for offset, size, param in regions(node):
            here = region_bytes(node, offset, size)
            if size != 8 or here is None:
                continue
            first_byte = offset in first_bytes  # (an address at this block's end then means the next block)
            shift, found, _ = referenced(final, int.from_bytes(here, "little"), first_byte)
            if timing is not None:  # (a block another allocation held before or after: only the one alive then)
                found = tuple((k, at) for k, at in found if timing.possible(k, place))
            if not any(k == a for k, _ in found):
                continue
            label = region_label(node, offset, size, param)
            if shift:
                return f"{node.describe(i)}, {label} holds its address in another form (shifted)"
            others = [_readings(c, i, offset, first_byte) for c in (control, third) if c is not None]
            known = [other for other in others if other is not None]
            if len(found) > 1 and len(known) == len(others):  # (an address two allocations share: see above)
                common = tuple(r for r in found if all(r in other for other in known))
                if not any(k == a for k, _ in common):  # (no use of it: one would read the same in every capture)
                    if common or not any(k == a for other in known for k, _ in other):
                        continue  # (another allocation in every capture, or into it nowhere else)
                    return f"{node.describe(i)}, {label} points into it but does not follow it"  # (moves within it)
                found = common
            if len(found) > 1:  # one's end and the next one's start, or the same bytes held by two alive together
                at_end = any(at == final.allocations.blocks[k][1] for k, at in found)
                why = SHARED_ADDRESS if at_end else "points into it but does not follow it"
                return f"{node.describe(i)}, {label} {why}"
            if not same_word(final, control, i, offset, size, is_device_pointer, first_byte):
                return f"{node.describe(i)}, {label} points into it but does not follow it"
            if node.kind == "kernel" and "nccl" in node.name.lower():
                return f"NCCL's kernel {node.name!r} (node {i}) writes it"
            storage.uses.append(Use(i, offset, 8, SK_POINTER, label, param, found[0][1]))
    return "" if storage.uses else "no node launchpad can see points into it"


def _readings(c: Capture, i: int, offset: int, first_byte: bool) -> tuple[tuple[int, int], ...] | None:
    """What node ``i``'s word at ``offset`` may mean in capture ``c``: ``(k, offset)`` per allocation
    (none where it is no address of ``c``'s); None where that cannot be read (no allocation facts,
    no such node or bytes, an address held shifted)."""
    here = region_bytes(c.nodes[i], offset, 8) if i < len(c.nodes) and c.allocations is not None else None
    if here is None:
        return None
    shift, found, _ = referenced(c, int.from_bytes(here, "little"), first_byte)
    return None if shift else found


def _hidden(final: Capture, control: Capture, twin: Capture | None, is_device_pointer: Any,
            third: Capture | None = None) -> str:  # fmt: skip
    """Why no output of ``final`` can be re-pointed at all ("": none): a node may hold the graph's
    addresses where launchpad cannot see them."""
    if final.allocations is None or control.allocations is None:
        return "torch's allocation history could not be read (is torch.cuda.memory._record_memory_history on?)"
    same_pool = twin is not None and twin.allocations is not None and \
        twin.allocations.blocks == final.allocations.blocks  # fmt: skip
    for i, node in enumerate(final.nodes):
        if node.kind == "kernel" and node.block is None:
            return f"{node.describe(i)} may hold its address in a form launchpad cannot read"
        if node.kind == "graph":
            return "a child graph may write it"
        for offset, size, param in regions(node):
            here = region_bytes(node, offset, size)
            changed = _differ(here, region_bytes(control.nodes[i], offset, size)) if here is not None else 0
            if not changed or same_word(final, control, i, offset, size, is_device_pointer):
                continue
            if both_pooled(final, control, i, offset, size):  # an address it reads as one: _follow judges it
                continue
            alone = _differ(here, region_bytes(twin.nodes[i], offset, size)) if same_pool else 0  # type: ignore[union-attr, arg-type]
            changed &= ~alone  # what differs from the twin too varies alone; the rest follows the graph's addresses
            if changed and third is not None:  # the graph's memory moved a third time: an address's encoding moves
                again = region_bytes(third.nodes[i], offset, size)  # (a host leftover repeats one it held before,
                kept = ((1 << size) - 1) & ~alone  # whole: an encoding may agree on the bytes that changed alone)
                if again is not None and not (_differ(again, here) & kept and
                                              _differ(again, region_bytes(control.nodes[i], offset, size)) & kept):  # fmt: skip
                    changed = 0
            if changed:
                return (f"{node.describe(i)}, {region_label(node, offset, size, param)} changes with the graph's memory but "
                        "is no address launchpad can follow: it may hold one in another form")  # fmt: skip
    return ""


def held_bytes(plan: Plan, k: int) -> int:
    """Bytes a replay's new memory for storage ``k`` holds: all of the allocation where the graph
    is re-pointed at it (its kernels may write anywhere in it), the bytes its returned views reach
    where a copy node fills it (torch's 0-d loss of ``mse_loss`` starts a storage of 256 bytes on the
    CPU, 1 MiB in a training step on an H100: copying 4 bytes into a tensor of the loss's own layout
    spares a replay the view it would cut from that many new bytes)."""
    storage = plan.storages[k]
    if not storage.copy:
        return storage.nbytes
    reach = [
        leaf.offset * leaf.dtype.itemsize + layout_span(leaf.shape, leaf.stride, leaf.dtype.itemsize)
        for leaf in plan.leaves
        if leaf.kind == "storage" and leaf.storage == k and all(leaf.shape)
    ]
    return min(max(reach), storage.nbytes) if reach else storage.nbytes


def _where(k: int) -> str:
    return f"tensor {k} of its result"
