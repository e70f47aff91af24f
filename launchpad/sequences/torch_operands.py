"""Words of torch's own kernels' parameters that hold an operand's first byte: an address the
kernel reads or writes at, proven from the kernel's name and bytes.

An address where one block of the caching allocator ends and the next starts reads two ways: the
first block's end (a pointer one past it, which a kernel may hold as a bound and never
dereference) or the next block's start. The analysis cannot tell which from the address alone,
so an output that a word at its start or end touches is copied, not re-pointed
(:mod:`launchpad.sequences.outputs`). A word the kernel dereferences at its own address means the
block holding that byte, never the one ending there. Known here (torch's sources, as
:mod:`launchpad.sequences.torch_kernels` reads them), each where the kernel's element count is
at least 1:

- ``vectorized_elementwise_kernel(int N, func_t f, std::array<char *, NARGS> data)``
  (``ATen/native/cuda/CUDALoops.cuh``): each of ``data`` is an operand's base (the output, then
  the inputs: a CPU scalar is folded into ``f``), and block 0 handles elements ``0 ..``: element 0
  of every operand is loaded or stored.
- ``elementwise_kernel``'s closure from ``gpu_kernel_impl_nocast``: ``data[NARGS]`` after the
  ``OffsetCalculator``; element 0 sits at offset 0 of each (its strides are unsigned), and the
  closure loads every input and stores the output for each index.
- ``reduce_kernel``'s ``ReduceOp`` (``ATen/native/cuda/Reduce.cuh``): ``src``, the input every
  reduction reads whole (``gpu_reduce_kernel`` asserts ``numel() > 0``), and ``dst[0]`` where
  ``final_output`` is set (the launch writes the outputs; otherwise it may write ``acc_buf`` alone).

Anything else holds no such word: its addresses keep both readings.
"""

from __future__ import annotations

import functools
import struct

from .capture import Node
from .torch_kernels import VECTORIZED, closure_data_at, closure_kind, reduce_layout, reduce_pointers_at

__all__ = ["first_byte_words"]


def first_byte_words(node: Node) -> frozenset[int]:
    """Offsets in ``node``'s parameter block of the 8-byte words whose address its kernel reads or
    writes at (none where the kernel's name and bytes do not prove it)."""
    if node.kind != "kernel" or node.module is not None or not node.block or not node.layout:
        return frozenset()
    return _words(node.name, bytes(node.block), tuple(node.layout))


@functools.lru_cache(maxsize=4096)
def _words(name: str, block: bytes, layout: tuple[tuple[int, int], ...]) -> frozenset[int]:
    if "29vectorized_elementwise_kernelI" in name and len(layout) == 3 and (m := VECTORIZED.search(name)):
        (count_at, count_size), _, (start, size) = layout
        if count_size == 4 and _int(block, count_at) >= 1 and size == 8 * int(m["n"]) and start % 8 == 0:
            return frozenset(range(start, start + size, 8))
    elif "18elementwise_kernelI" in name and len(layout) == 2 and (kind := closure_kind(name)) is not None:
        (count_at, count_size), (start, size) = layout
        nargs = kind[0]
        data_at = closure_data_at(block[start : start + size], nargs)
        if count_size == 4 and _int(block, count_at) >= 1 and data_at is not None and (start + data_at) % 8 == 0:
            return frozenset(range(start + data_at, start + data_at + 8 * nargs, 8))
    elif "13reduce_kernelI" in name and "8ReduceOpI" in name and len(layout) == 1:
        start, size = layout[0]
        op = block[start : start + size]
        found = reduce_layout(op)
        if found is not None and (start + (p := reduce_pointers_at(found[0]))) % 8 == 0:
            accumulate, final_output, noutputs = op[p + 56], op[p + 57], _int(op, p + 60)
            if accumulate in (0, 1) and final_output in (0, 1) and noutputs in (1, 2):
                return frozenset({start + p, start + p + 8} if final_output else {start + p})
    return frozenset()


def _int(blob: bytes, at: int) -> int:
    return int(struct.unpack_from("<i", blob, at)[0])
