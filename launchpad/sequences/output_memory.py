"""New memory for a recorded sequence's outputs, each replay.

A replay returns every output in memory of its own, as the recorded function would: a tensor of
the output's own layout where it is its allocation's only view from its start, else bytes its views
are cut from (:func:`allocators`). Both replays (the Python one and ``_claunch.Replay``) ask the same
allocators.

An output of at most :data:`BATCH_PITCH` bytes (a training step's 0-d loss, a decode step's next
token) takes its memory from a :class:`Batch`: ``torch.empty_strided`` costs a replay 2 µs of host
time on an H100 host (torch's argument parsing, device guard and caching allocator), as much as a
third of what the whole replay of a small training step costs beside its graph launch. A batch is one
allocation of :data:`BATCH_COUNT` slots :data:`BATCH_PITCH` bytes apart (the caching allocator's
smallest block: every slot as aligned as a tensor of its own), cut into that many tensors of the
output's layout by one ``unbind`` (each detached: no autograd view of the batch, so in-place ops
with tensors that require grad work on it as on a tensor of its own). What a user can tell apart
from a tensor of its own: its storage is the batch's (a returned output held alive holds the
batch's 32 KiB, ``torch.save`` writes them, and ``resize_`` grows it into the next slots, which
later replays write), and it is never an inference tensor.

A batch belongs to the stream it was allocated on (the caching allocator reuses its block on that
stream once every slot is freed): a replay on another stream takes a tensor of its own
(``torch.empty_strided``), until the batch is used up and the next one is allocated on the stream
of the replay that needs it. Two streams replaying in turn never refill at every call.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import torch

from ..launch import checks as _checks
from .analysis import Plan
from .outputs import held_bytes

__all__ = ["BATCH_COUNT", "BATCH_PITCH", "Batch", "allocators", "torch_device"]

#: Bytes between a batch's slots (torch's caching allocator rounds every block up to 512) and the
#: largest output a batch serves.
BATCH_PITCH = 512
#: Slots of one batch.
BATCH_COUNT = 64


def torch_device(device: int) -> torch.device:
    """torch's device of a launch device (negative: the CPU tensors of launchpad's fake GPU in tests)."""
    return torch.device("cuda", device) if device >= 0 else torch.device("cpu")


class Batch:
    """New memory for one small output, :data:`BATCH_COUNT` replays at a time (see the module
    documentation). ``refill()`` allocates the next batch on torch's current stream; ``plain``
    allocates one tensor of the layout, for a replay on another stream. ``_claunch.Replay`` keeps
    the batch it took and the stream it took it on; calling the batch is the Python replay's way
    (under a lock of its own: the Python replay allocates outside the sequence's)."""

    def __init__(self, shape: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype, device: int):
        self.shape, self.stride, self.dtype, self.device = shape, stride, dtype, device
        where = torch_device(device)
        self.plain = functools.partial(torch.empty_strided, shape, stride, dtype=dtype, device=where)
        self._where = where
        self._layout = ((BATCH_COUNT, *shape), (BATCH_PITCH // dtype.itemsize, *stride))
        self._lock = threading.Lock()
        self._stream: int | None = None
        self._taken: list[torch.Tensor] = []

    def refill(self) -> tuple[torch.Tensor, ...]:
        """:data:`BATCH_COUNT` new tensors of the output's layout, in one allocation on torch's
        current stream (never inference tensors: a replay outside inference mode may return them)."""
        with torch.inference_mode(False):
            memory = torch.empty(BATCH_COUNT * BATCH_PITCH, dtype=torch.uint8, device=self._where)
            return tuple(t.detach() for t in memory.view(self.dtype).as_strided(*self._layout).unbind(0))

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
    """How a replay gives each returned allocation new memory: a :class:`Batch`'s slot or one tensor
    of its leaf's own layout where it is the allocation's only view from its start, else bytes its
    views are cut from."""
    where = torch_device(device)
    out: list[Callable[[], torch.Tensor]] = []
    for k in range(len(plan.storages)):
        views = [leaf for leaf in plan.leaves if leaf.kind == "storage" and leaf.storage == k]
        leaf, held = views[0], held_bytes(plan, k)
        span = (1 + sum((n - 1) * s for n, s in zip(leaf.shape, leaf.stride))) * leaf.dtype.itemsize
        if len(views) == 1 and leaf.offset == 0 and span == held and all(leaf.shape):
            if held <= BATCH_PITCH:  # (held is the leaf's span: its element fits too)
                out.append(Batch(leaf.shape, leaf.stride, leaf.dtype, device))
            else:
                out.append(functools.partial(torch.empty_strided, leaf.shape, leaf.stride, dtype=leaf.dtype,
                                             device=where))  # fmt: skip
        else:
            out.append(functools.partial(torch.empty, max(held, 1), dtype=torch.uint8, device=where))
    return out
