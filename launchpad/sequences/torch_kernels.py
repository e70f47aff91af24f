"""Bytes of torch's own kernels' parameters that the kernel never reads, proven from the bytes.

A torch kernel's parameters often hold an ``OffsetCalculator`` (``ATen/cuda/detail/
OffsetCalculator.cuh``): ``int dims``, then ``IntDivider<uint32_t> sizes_[25]`` and ``uint32_t
strides_[25][NARGS]``, of which the kernel reads the first ``dims`` entries alone (``get()`` stops
at ``dims``); torch's host code leaves the rest as its stack held them. Those leftovers differ
between captures and may hold anything, a stale address of an input among them, which the analysis
cannot tell from an address encoded in another form: it copies the tensor they touch or refuses.
Where the bytes prove the layout, they are left out of what the analysis compares
(:func:`launchpad.sequences.regions.regions`).

Only ``at::native::reduce_kernel``'s single parameter, a ``ReduceOp`` (``ATen/native/cuda/
Reduce.cuh``) with 32-bit indexing, is known here: ``input_calc`` (an ``OffsetCalculator<1>``) right
after the config, then ``output_calc`` (``OffsetCalculator<2>``), then ``src``, ``dst[2]``,
``acc_buf``, ``cta_buf``, ``semaphores``, ``base_idx``, two bools and ``noutputs``: 64 bytes after
the 8-aligned end of ``output_calc``, so the struct ends exactly there. It is recognised by its
kernel's name and by the bytes: one offset alone where ``input_calc.dims`` is 1 to 25 with each of
its ``dims`` dividers valid (an ``IntDivider`` holds ``divisor``, ``m1`` and ``shift`` that only
``divisor`` determines: a chance of about 2**-37 that garbage passes one), ``output_calc.dims`` 0 to
25 with valid dividers 404 bytes later, and the struct's size what that layout gives. Anything else
(64-bit indexing, another torch whose layout differs, a second candidate offset) is compared whole,
as before: a copy or a refusal, never a guess.
"""

from __future__ import annotations

import functools
import struct

from .capture import Node

__all__ = ["unread"]

MAX_DIMS = 25  # CUDA's (ROCm's is 16: its layouts fail the size check)
_SIZES_END = 4 + 12 * MAX_DIMS  # dims, then the dividers


def _calc_size(nargs: int) -> int:
    return _SIZES_END + 4 * MAX_DIMS * nargs


def _divider(divisor: int, m1: int, shift: int) -> bool:
    """Whether the three words are ``IntDivider<unsigned int>(divisor)``'s."""
    if not 1 <= divisor <= 0x7FFFFFFF:
        return False
    expected = next(k for k in range(32) if (1 << k) >= divisor)
    return shift == expected and m1 == ((1 << 32) * ((1 << expected) - divisor)) // divisor + 1


def _dims(blob: bytes, at: int, low: int) -> int | None:
    """The ``dims`` of an ``OffsetCalculator`` at ``at``, or None where the bytes are none."""
    (dims,) = struct.unpack_from("<i", blob, at)
    if not low <= dims <= MAX_DIMS:
        return None
    for i in range(dims):
        if not _divider(*struct.unpack_from("<III", blob, at + 4 + 12 * i)):
            return None
    return dims


def _calc_unread(at: int, dims: int, nargs: int) -> list[tuple[int, int]]:
    """The byte ranges of an ``OffsetCalculator`` at ``at`` that ``get()`` never reads."""
    strides = at + _SIZES_END
    return [(at + 4 + 12 * dims, strides), (strides + 4 * nargs * dims, strides + 4 * nargs * MAX_DIMS)]


@functools.lru_cache(maxsize=4096)
def _reduce_op(blob: bytes) -> tuple[tuple[int, int], ...]:
    input_size, output_size = _calc_size(1), _calc_size(2)
    found = []
    for at in range(0, len(blob) - input_size - output_size + 1, 4):
        first = _dims(blob, at, 1)
        if first is None:
            continue
        second = _dims(blob, at + input_size, 0)
        end = at + input_size + output_size
        if second is not None and (end + 7) // 8 * 8 + 64 == len(blob):
            found.append((at, first, second))
    if len(found) != 1:
        return ()
    at, first, second = found[0]
    merged: list[tuple[int, int]] = []
    for a, b in _calc_unread(at, first, 1) + _calc_unread(at + input_size, second, 2):
        if a >= b:
            continue
        if merged and merged[-1][1] == a:  # (dims 0: the strides' range follows the dividers')
            a = merged.pop()[0]
        merged.append((a, b))
    return tuple(merged)


def unread(node: Node) -> tuple[tuple[int, int], ...]:
    """``(start, end)`` byte ranges of ``node``'s parameter block that its kernel never reads (none
    where it is not a kernel whose layout the bytes prove)."""
    if node.kind != "kernel" or node.module is not None or not node.block or not node.layout:
        return ()
    if "13reduce_kernelI" not in node.name or "8ReduceOpI" not in node.name or len(node.layout) != 1:
        return ()
    start, size = node.layout[0]
    return tuple((start + a, start + b) for a, b in _reduce_op(bytes(node.block[start : start + size])))
