"""New memory for a recorded sequence's outputs, each replay.

A replay returns every output in memory of its own, as the recorded function would: a tensor of
the output's own layout where it is its allocation's only view from its start, else bytes its views
are cut from (:func:`allocators`). Both replays (the Python one and ``_claunch.Replay``) ask the same
allocators.

The new memory holds every byte the graph may write (:func:`launchpad.sequences.outputs.held_bytes`):
all of the output's allocation where the graph is re-pointed at it, which can be more than the view
it returns (torch's 0-d loss of ``mse_loss`` starts a 256 KiB storage in a training step). The view
is then still allocated as itself, at the start of that many bytes: cutting it from new bytes in
Python (``set_``) cost an MLP training step's replay 6 µs of its 18 on an H100 host.

An output's memory comes from a :class:`Batch` where a slot of :data:`BATCH_PITCH` bytes holds it
(a training step's 0-d loss, a decode step's next token), or where its view is smaller than its
memory and at least two slots fit in :data:`BATCH_BYTES` (the MLP's loss: 32 slots of 256 KiB):
``torch.empty_strided`` costs a replay 2-4 µs of host time on an H100 host (torch's argument
parsing, device guard and caching allocator) and a padded view 8 µs, as much as the whole replay of
a small training step costs beside its graph launch. A batch is one allocation of up to
:data:`BATCH_COUNT` slots a whole number of :data:`BATCH_PITCH` bytes apart (the caching
allocator's smallest block: every slot as aligned as a tensor of its own), cut into that many
tensors of the output's layout by one ``unbind`` below autograd's view tracking (each as a detached
tensor is: no autograd view of the batch, so in-place ops with tensors that require grad work on it
as on a tensor of its own; 1 µs a slot on an H100 host, 2.5 with a ``detach`` per slot). What a
user can tell apart from a tensor of its own: its storage is the batch's (a returned output held
alive holds the batch's memory, ``torch.save`` writes it, and ``resize_`` grows it into the next
slots, which later replays write), and it is never an inference tensor. Any other output whose view
is smaller than its memory is a :class:`Padded` tensor.

A refill makes up to :data:`REFILL_SLOTS` slots, in allocations of one batch each, up to
:data:`REFILL_BYTES` in all: right after a graph launch, torch's allocator and view code cost their
first call 40-50 µs more than when warm (an H200 host: a refill of the MLP's 32 slots 200 µs inside
replays, 37 from an idle device), each further allocation and cut little. Several batches made in one
refill spread that over more replays (the transformer's loss: 4 batches of 8 slots of 1 MiB), while a
slot held still holds only its own batch (a loop that keeps one loss in a hundred keeps 8 MiB per loss,
not the whole refill's).

A batch belongs to the stream it was allocated on (the caching allocator reuses its block on that
stream once every slot is freed): a replay on another stream takes a tensor of its own
(``torch.empty_strided``), until the batch is used up and the next one is allocated on the stream
of the replay that needs it. Two streams replaying in turn never refill at every call.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable

import torch

from ..launch import checks as _checks
from .analysis import Plan
from .capture import layout_span
from .outputs import held_bytes

__all__ = ["BATCH_BYTES", "BATCH_COUNT", "BATCH_PITCH", "REFILL_BYTES", "REFILL_SLOTS", "Batch", "Padded", "allocators",
           "torch_device"]  # fmt: skip

#: Bytes between a batch's slots (torch's caching allocator rounds every block up to 512) and the
#: largest output a batch serves.
BATCH_PITCH = 512
#: Most slots of one batch.
BATCH_COUNT = 64
#: Most bytes of one batch of padded outputs (a batch holds at least two slots): a batch costs an
#: H100 host 16 us plus 1 us a slot, and a slot held holds its batch's bytes.
BATCH_BYTES = 8 << 20
#: Most slots, and most bytes, one refill makes (as batches of their own: see the module documentation).
REFILL_SLOTS = 64
REFILL_BYTES = 32 << 20


def torch_device(device: int) -> torch.device:
    """torch's device of a launch device (negative: the CPU tensors of launchpad's fake GPU in tests)."""
    return torch.device("cuda", device) if device >= 0 else torch.device("cpu")


class Padded:
    """One tensor of an output's layout at the start of ``nbytes`` new bytes (more than the layout
    reaches): ``torch.empty`` of the bytes as elements of the output's dtype (bytes viewed as it,
    for a dtype not :data:`_ALLOCATED_AS_IS`), viewed in its layout and detached (no autograd view
    of the bytes: in-place ops with tensors that require grad work on it as on a tensor of its own)."""

    def __init__(self, shape: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype, device: int,
                 nbytes: int):  # fmt: skip
        self.shape, self.stride, self.dtype, self.nbytes = shape, stride, dtype, nbytes
        self._elements = -(-nbytes // dtype.itemsize)
        self._as_bytes = dtype not in _ALLOCATED_AS_IS
        self._where = torch_device(device)

    def __call__(self) -> torch.Tensor:
        if self._as_bytes:
            memory = torch.empty(self._elements * self.dtype.itemsize, dtype=torch.uint8, device=self._where)
            memory = memory.view(self.dtype)
        else:
            memory = torch.empty(self._elements, dtype=self.dtype, device=self._where)
        return memory.as_strided(self.shape, self.stride).detach()

    def __repr__(self) -> str:
        return f"Padded({self.shape}, {self.stride}, {self.dtype}, nbytes={self.nbytes})"


class Batch:
    """New memory for one output, :data:`BATCH_COUNT` replays at a time at most (see the module
    documentation), each slot ``nbytes`` at least (where the graph may write more than the layout
    reaches). ``refill()`` allocates the next batch on torch's current stream; ``plain`` allocates
    one tensor of the layout (as large), for a replay on another stream. ``_claunch.Replay`` keeps
    the batch it took and the stream it took it on; calling the batch is the Python replay's way
    (under a lock of its own: the Python replay allocates outside the sequence's)."""

    def __init__(self, shape: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype, device: int,
                 nbytes: int = 0):  # fmt: skip
        span = layout_span(shape, stride, dtype.itemsize)
        self.pitch = slot_pitch(max(nbytes, span))
        self.count = batch_count(self.pitch)
        self.groups = refill_groups(self.count, self.pitch)  # batches a refill makes
        self.shape, self.stride, self.dtype, self.device = shape, stride, dtype, device
        where = torch_device(device)
        self.plain: Callable[[], torch.Tensor] = (
            Padded(shape, stride, dtype, device, nbytes)
            if nbytes > span
            else functools.partial(torch.empty_strided, shape, stride, dtype=dtype, device=where)
        )
        self._where = where
        self._layout = ((self.count, *shape), (self.pitch // dtype.itemsize, *stride))
        self._as_bytes = dtype not in _ALLOCATED_AS_IS
        self._lock = threading.Lock()
        self._stream: int | None = None
        self._taken: list[torch.Tensor] = []

    def refill(self) -> tuple[torch.Tensor, ...]:
        """``groups`` batches of ``count`` new tensors of the output's layout, each batch one allocation
        on torch's current stream (never inference tensors: a replay outside inference mode may return them)."""
        if torch.is_inference_mode_enabled():
            with torch.inference_mode(False):
                return self._slots()
        return self._slots()  # (entering inference_mode(False) cost a refill 5 us of its 14 on an H200 host)

    def _slots(self) -> tuple[torch.Tensor, ...]:
        batches = [self._batch() for _ in range(self.groups)]
        return batches[0] if len(batches) == 1 else tuple(itertools.chain.from_iterable(batches))

    def _batch(self) -> tuple[torch.Tensor, ...]:
        if self._as_bytes:
            memory = torch.empty(self.count * self.pitch, dtype=torch.uint8, device=self._where).view(self.dtype)
        else:  # (a pitch is a whole number of elements: BATCH_PITCH is 512)
            memory = torch.empty(self.count * self.pitch // self.dtype.itemsize, dtype=self.dtype, device=self._where)
        slots = memory.as_strided(*self._layout)
        if _BELOW_VIEW_TRACKING is None:
            return tuple(t.detach() for t in slots.unbind(0))
        with _BELOW_VIEW_TRACKING():  # (tensors of the storage as detach makes them, 2.5x as fast)
            return slots.unbind(0)

    def __call__(self) -> torch.Tensor:
        stream = _checks.current_raw_stream(self.device)
        with self._lock:
            if self._taken and stream != self._stream:
                return self.plain()
            if not self._taken:
                self._taken = list(reversed(self.refill()))
                self._stream = stream
            return self._taken.pop()

    def drop(self) -> None:
        """Let go of the slots not taken (the sequence is closed)."""
        with self._lock:
            self._taken = []

    def __repr__(self) -> str:
        return f"Batch({self.shape}, {self.stride}, {self.dtype}, device={self.device})"


def allocators(plan: Plan, device: int) -> list[Callable[[], torch.Tensor]]:
    """How a replay gives each returned allocation new memory (its held bytes, at least): a
    :class:`Batch`'s slot, a :class:`Padded` tensor or one tensor of its leaf's own layout where
    the leaf is the allocation's only view from its start, else bytes its views are cut from."""
    where = torch_device(device)
    out: list[Callable[[], torch.Tensor]] = []
    for k in range(len(plan.storages)):
        views = [leaf for leaf in plan.leaves if leaf.kind == "storage" and leaf.storage == k]
        leaf, held = views[0], held_bytes(plan, k)
        span = layout_span(leaf.shape, leaf.stride, leaf.dtype.itemsize)
        if len(views) == 1 and leaf.offset == 0 and span <= held and all(leaf.shape):
            if held <= BATCH_PITCH or (span < held and batch_count(slot_pitch(held)) >= 2):
                out.append(Batch(leaf.shape, leaf.stride, leaf.dtype, device, held))
            elif span < held:
                out.append(Padded(leaf.shape, leaf.stride, leaf.dtype, device, held))
            else:
                out.append(functools.partial(torch.empty_strided, leaf.shape, leaf.stride, dtype=leaf.dtype,
                                             device=where))  # fmt: skip
        else:
            out.append(functools.partial(torch.empty, max(held, 1), dtype=torch.uint8, device=where))
    return out


def slot_pitch(nbytes: int) -> int:
    """Bytes between the slots of a batch whose slot holds ``nbytes``."""
    return max(1, -(-nbytes // BATCH_PITCH)) * BATCH_PITCH


def batch_count(pitch: int) -> int:
    """Slots of a batch ``pitch`` bytes apart."""
    return max(1, min(BATCH_COUNT, BATCH_BYTES // pitch))


def refill_groups(count: int, pitch: int) -> int:
    """Batches of ``count`` slots ``pitch`` bytes apart that one refill makes."""
    return max(1, min(REFILL_SLOTS // count, REFILL_BYTES // (count * pitch)))


# Views made below torch's ADInplaceOrView key carry no autograd view of their base (as ``detach``'s
# do): torch's own functorch uses this guard; without it, each slot is detached.
_BELOW_VIEW_TRACKING = getattr(torch._C, "_AutoDispatchBelowADInplaceOrView", None)

#: Dtypes new output memory is allocated as (a view of bytes cost a batch refill 0.5 us on an H200
#: host); any other (sub-byte, quantized, ``complex32``) is bytes viewed as it: ``torch.empty``
#: refuses some, or cannot fill them under ``torch.use_deterministic_algorithms``.
_ALLOCATED_AS_IS = frozenset(
    {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
     torch.float32, torch.float64, torch.complex64, torch.complex128}
)  # fmt: skip
