"""Bytes of torch's own kernels' parameters that the kernel never reads, proven from the bytes.

torch's host code fills some by-value structs only as far as a launch needs and leaves the rest as
its stack held them. Those leftovers differ between captures and may hold anything, a stale address
of an input or of the graph's memory among them, which the analysis cannot tell from an address
encoded in another form: it copies the tensor they touch or refuses. Where a kernel's name and its
bytes prove the layout, those bytes are left out of what the analysis compares
(:func:`launchpad.sequences.regions.regions`). Known here:

- An ``OffsetCalculator<NARGS>`` (``ATen/cuda/detail/OffsetCalculator.cuh``, 32-bit indexing):
  ``int dims``, then ``IntDivider<uint32_t> sizes_[25]`` and ``uint32_t strides_[25][NARGS]``, of
  which ``get()`` reads the first ``dims`` entries alone. Its ``dims`` and dividers are checked: an
  ``IntDivider`` holds ``divisor``, ``m1`` and ``shift``, which ``divisor`` alone determines (a
  chance of about 2**-37 that garbage passes one).
- ``at::native::reduce_kernel``'s ``ReduceOp`` (``ATen/native/cuda/Reduce.cuh``): ``input_calc``
  (``OffsetCalculator<1>``) right after the config, ``output_calc`` (``<2>``) 404 bytes later, then
  64 bytes of pointers and flags after the 8-aligned end of ``output_calc``: found at one offset
  alone, with the struct's size what that layout gives. The 64-byte ``ReduceConfig`` right before
  ``input_calc`` ends with ``bool vectorize_input`` (0 or 1), three bytes of padding, then ``int
  output_vec_size``: the padding is unread too.
- ``elementwise_kernel``'s closure from ``gpu_kernel_impl_nocast`` (``ATen/native/cuda/
  CUDALoops.cuh``, torch's non-contiguous path): ``[=](int idx) {offset_calc.get(idx) ...}``
  captures ``offset_calc`` first, then ``data`` (``NARGS`` pointers), then the functor. ``NARGS`` is
  the functor's arity plus one, read from the kernel's name (a lambda's parameter list, or one of
  torch's functors whose arity is known); the calculator must sit at the closure's start. The
  closure is nvcc's ``__host__ __device__`` lambda (torch's ``GPU_LAMBDA``): nvcc ends its device
  struct with a ``void *`` its host wrapper fills (``new`` of the host lambda) and no code can
  name, so its last 8 bytes are unread where the closure's alignment is 8 (its size not a
  multiple of 16); so are the functor's own last 8 bytes where it is such a lambda with captures
  (a lambda of at::native, where torch's convention holds; 16 bytes or more before the word).
- ``vectorized_elementwise_kernel``'s functor parameter: all of it where it is empty (one byte:
  ``BinaryFunctor`` of ``MulFunctor`` or ``DivFunctor``, which torch defines with no members, or a
  captureless at::native lambda, which nvcc makes an empty struct), and the host word a torch
  lambda with captures ends with (as above).
- ``CatArrayBatchedCopy``'s ``CatArrInputTensorMetadata`` (``torch.cat``, ``Shape.cu``): every
  block reads the entries at ``blockIdx.y``; those past ``gridDim.y`` are unread. Its template
  arguments (index width, batch size, stride entries, dims) come from the name, and the struct's
  size must be what they give.
- ``multi_tensor_apply_kernel``'s ``TensorListMetadata<depth>`` (``MultiTensorApply.cuh``; the
  fused optimizers' and scalar-list variants too): every functor reads the block's
  ``block_to_tensor[blockIdx.x]`` and ``block_to_chunk[blockIdx.x]``, then that tensor's entries
  alone. Entries of blocks past the grid, and of tensors no block of the grid names, are unread;
  host code reuses the struct across launches, so they hold an earlier launch's addresses. The
  struct's size must be one of torch's two tables' (110 tensors at depth 1 and 320 blocks, for a
  4 KB parameter block; 770 and 2240 where a torch build uses 32 KB: its headers choose by CUDA
  version, and torch 2.11+cu130 still launched the first), and every named tensor within it.

Anything else (64-bit indexing, another torch whose layout differs, a name not parsed) is compared
whole, as before: a copy or a refusal, never a guess. What this rests on besides the bytes: torch's
own sources (the layouts above; its ``gpu_kernel`` lambdas are ``GPU_LAMBDA``, ``__host__
__device__``, which its ``function_traits`` needs) and nvcc's lowering of such lambdas (torch's CUDA
builds are nvcc's; a torch built with another CUDA compiler is not covered by the host-word rule).
"""

from __future__ import annotations

import functools
import re
import struct

from .capture import Node

__all__ = ["VECTORIZED", "closure_data_at", "closure_kind", "reduce_layout", "reduce_pointers_at", "unread"]

Ranges = tuple[tuple[int, int], ...]

MAX_DIMS = 25  # CUDA's (ROCm's is 16: its layouts fail the size checks)
_SIZES_END = 4 + 12 * MAX_DIMS  # dims, then the dividers


def _align(value: int, to: int) -> int:
    return (value + to - 1) // to * to


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


def _merged(ranges: list[tuple[int, int]]) -> Ranges:
    out: list[tuple[int, int]] = []
    for a, b in sorted(r for r in ranges if r[0] < r[1]):
        if out and out[-1][1] >= a:
            a = out.pop()[0]
        out.append((a, b))
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def reduce_layout(blob: bytes) -> tuple[int, int, int] | None:
    """``(offset of input_calc, its dims, output_calc's dims)`` of a ``ReduceOp``'s bytes, where
    one offset alone fits the layout (its 64 bytes of pointers and flags start at the 8-aligned
    end of ``output_calc``); None otherwise."""
    input_size, output_size = _calc_size(1), _calc_size(2)
    found = []
    for at in range(0, len(blob) - input_size - output_size + 1, 4):
        first = _dims(blob, at, 1)
        if first is None:
            continue
        second = _dims(blob, at + input_size, 0)
        end = at + input_size + output_size
        if second is not None and _align(end, 8) + 64 == len(blob):
            found.append((at, first, second))
    return found[0] if len(found) == 1 else None


def reduce_pointers_at(at: int) -> int:
    """Where a ``ReduceOp`` whose ``input_calc`` is at ``at`` holds ``src``, then ``dst[2]``,
    ``acc_buf``, ``cta_buf``, ``semaphores``, ``base_idx``, ``accumulate``, ``final_output`` and
    ``noutputs``."""
    return _align(at + _calc_size(1) + _calc_size(2), 8)


@functools.lru_cache(maxsize=4096)
def _reduce_op(blob: bytes) -> Ranges:
    layout = reduce_layout(blob)
    if layout is None:
        return ()
    at, first, second = layout
    out = _calc_unread(at, first, 1) + _calc_unread(at + _calc_size(1), second, 2)
    if at >= 64 and blob[at - 8] in (0, 1):  # ReduceConfig's last fields: bool vectorize_input, int output_vec_size
        out.append((at - 7, at - 4))  # (the padding between them)
    return _merged(out)


# -- elementwise_kernel's closure ---------------------------------------------------------------

_NOCAST = re.compile(r"18elementwise_kernelILi\d+ELi\d+EZNS0_22gpu_kernel_impl_nocastI(?P<f>.+)"
                     r"EEv(?:RNS_18TensorIteratorBaseE|S[0-9A-Z]*_)RKT_EUliE_EEviT1_$")  # fmt: skip
_FUNCTOR_ARITY = {"13BinaryFunctorI": 2, "15CUDAFunctor_addI": 2, "22CUDAFunctorOnSelf_addI": 1,
                  "23CUDAFunctorOnOther_addI": 1, "11FillFunctorI": 0}  # fmt: skip
_BUILTIN = set("bcahstijlmxynofdeg")  # (not "z", an ellipsis: no parameter)
_SUBSTITUTION = re.compile(r"S[0-9A-Z]*_")
_SOURCE_NAME = re.compile(r"(\d+)")


def _one_type(sig: str, i: int) -> int | None:
    """The end of the mangled type at ``sig[i]``: a builtin, a substitution, or a nested name whose
    template arguments are such types (None for anything else)."""
    while i < len(sig) and sig[i] in "KVRPO":  # qualifiers, references, pointers
        i += 1
    if i >= len(sig):
        return None
    if sig[i] in _BUILTIN:
        return i + 1
    if m := _SUBSTITUTION.match(sig, i):
        return m.end()
    if sig[i] != "N":
        return None
    i, parts = i + 1, 0
    while i < len(sig) and sig[i] != "E":
        if m := _SUBSTITUTION.match(sig, i):
            i = m.end()
        elif m := _SOURCE_NAME.match(sig, i):
            i = m.end() + int(m.group(1))
        elif sig[i] == "I" and parts:
            i += 1
            while i < len(sig) and sig[i] != "E":
                end = _one_type(sig, i)
                if end is None:
                    return None
                i = end
            i += 1
        else:
            return None
        parts += 1
    return i + 1 if parts and i < len(sig) else None


def _lambda_arity(f: str) -> int | None:
    """The number of parameters of the lambda ``f`` names (``...Ul<types>E<n>_``), None if unparsed."""
    m = re.search(r"Ul(?P<sig>[^U]*?)E\d*_$", f)
    if m is None:
        return None
    sig = m.group("sig")
    if sig == "v":
        return 0
    count, i = 0, 0
    while i < len(sig):
        end = _one_type(sig, i)
        if end is None:
            return None
        count, i = count + 1, end
    return count


def _torch_lambda(f: str) -> bool:
    """Whether the functor type ``f`` is a lambda of an at::native function whose parameters parse:
    torch writes those as ``GPU_LAMBDA`` (``__host__ __device__``), which nvcc lowers as the rules
    here assume."""
    return _lambda_arity(f) is not None and re.match(r"Z+NS0_\d", f) is not None


@functools.lru_cache(maxsize=1024)
def closure_kind(name: str) -> tuple[int, bool] | None:
    """``(NARGS, whether the functor is a lambda of at::native)`` of the closure of the
    ``elementwise_kernel`` named ``name``, where its name says it is ``gpu_kernel_impl_nocast``'s
    and its functor's arity is known."""
    m = _NOCAST.search(name)
    if m is None:
        return None
    f = m.group("f")
    arity = next((n for key, n in _FUNCTOR_ARITY.items() if re.match(r"N(?:S[0-9A-Z]*_)?" + key, f)), None)
    if arity is not None:
        return arity + 1, False
    arity = _lambda_arity(f)
    return None if arity is None else (arity + 1, _torch_lambda(f))


def closure_data_at(blob: bytes, nargs: int) -> int | None:
    """Where ``data`` (``nargs`` pointers) sits in an ``elementwise_kernel`` closure's bytes: right
    after the ``OffsetCalculator<nargs>`` at its start, whose ``dims`` and dividers must check out;
    None where they do not, or the closure is too short to hold data and a functor after it."""
    found = _closure_calc(blob, nargs)
    return None if found is None else found[0]


def _closure_calc(blob: bytes, nargs: int) -> tuple[int, int] | None:
    """:func:`closure_data_at`, and the ``dims`` of the ``OffsetCalculator`` before it."""
    data_at = _align(_calc_size(nargs), 8)
    dims = _dims(blob, 0, 1) if len(blob) >= data_at + 8 * nargs + 8 else None
    return None if dims is None else (data_at, dims)


@functools.lru_cache(maxsize=4096)
def _closure(blob: bytes, nargs: int, torch_lambda: bool) -> Ranges:
    found = _closure_calc(blob, nargs)
    if found is None:
        return ()
    calc_end, dims = found
    data_end = calc_end + 8 * nargs
    out = _calc_unread(0, dims, nargs) + [(_calc_size(nargs), calc_end)]
    # nvcc's __host__ __device__ closure ends with a host-only ``void *`` (what its host wrapper
    # allocated): the last 8 bytes where the closure's alignment is 8 (its size not a multiple of
    # 16), and the functor's own before them where that is such a lambda with captures (16 bytes
    # or more: a captureless one is empty)
    if len(blob) % 16 == 8:
        out.append((len(blob) - 8, len(blob)))
        if torch_lambda and len(blob) - 8 - data_end >= 16:
            out.append((len(blob) - 16, len(blob) - 8))
    return _merged(out)


VECTORIZED = re.compile(r"29vectorized_elementwise_kernelILi\d+E(?P<f>.+)St5arrayIPcLm(?P<n>\d+)EEEEviT0_T1_$")
_EMPTY = re.compile(r"NS0_13BinaryFunctorI[a-z]{3}NS0_15binary_internal10(?:Mul|Div)FunctorI[a-z]EEEE$")
_BINARY_OF = re.compile(r"NS0_13BinaryFunctorI[^Z]+?(?P<f>Z+NS0_\d.*)EE")  # BinaryFunctor<a, b, out, a lambda>


@functools.lru_cache(maxsize=1024)
def _functor_kind(name: str) -> str | None:
    """What the functor of the ``vectorized_elementwise_kernel`` named ``name`` is: "empty" (a
    functor torch defines with no members: ``BinaryFunctor`` of ``MulFunctor`` or ``DivFunctor``),
    "lambda" (a lambda of at::native, nvcc's ``__host__ __device__`` one, alone or as a ``BinaryFunctor``'s
    one member), or None."""
    m = VECTORIZED.search(name)
    if m is None:
        return None
    f = m.group("f")
    if _EMPTY.match(f):
        return "empty"
    wrapped = _BINARY_OF.fullmatch(f)  # (BinaryFunctor's one member is its func_t: the lambda's own layout)
    return "lambda" if _torch_lambda(wrapped.group("f") if wrapped else f) else None


def _functor(kind: str, size: int) -> Ranges:
    """The unread bytes of a functor parameter of ``size`` bytes: all of an empty one (a captureless
    lambda is nvcc's empty struct), the host-only word a lambda with captures ends with: where its
    alignment is 8, so that the word is its last 8 bytes: a size of 8 modulo 16, or 16 (a capture
    aligned to 16 is 16 bytes at least, which with the word make 32)."""
    if size == 1:  # (both kinds: a lambda of one byte has no captures)
        return ((0, 1),)
    if kind == "lambda" and (size == 16 or (size > 16 and size % 16 == 8)):
        return ((size - 8, size),)
    return ()


# -- CatArrayBatchedCopy's CatArrInputTensorMetadata -------------------------------------------

_CAT = re.compile(r"CatArrayBatchedCopy\w*I.*?(?P<index>[jm])Li\d+ELi(?P<n>\d+)ELi(?P<stride>\d+)E(?:Li\d+E)?E?"
                  r"EvPT_NS\d*_25CatArrInputTensorMetadataI.*?16TensorSizeStrideI\w+?Lj(?P<dims>\d+)EE")  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _cat_inputs(name: str, blob: bytes, inputs: int) -> Ranges:
    """The entries of ``CatArrInputTensorMetadata<T, IndexType, n, stride_size>`` (``input[n]``,
    ``offset[n]``, ``dimSize[n]``, ``nElements[n]``, ``isContiguous[n]``, ``tensorStride[stride_size]``
    of ``TensorSizeStride<IndexType, dims>``) past the launch's ``inputs`` (its ``gridDim.y``: every
    block reads the entries at ``blockIdx.y``, and ``tensorStride[0]`` alone where ``stride_size``
    is 1)."""
    m = _CAT.search(name)
    if m is None:
        return ()
    width, n, stride, dims = 4 if m["index"] == "j" else 8, int(m["n"]), int(m["stride"]), int(m["dims"])
    arrays = [
        (0, 8),
        (8 * n, width),
        (8 * n + width * n, width),
        (8 * n + 2 * width * n, width),
        (8 * n + 3 * width * n, 1),
    ]
    strides = _align(8 * n + 3 * width * n + n, width)
    entry = 2 * dims * width
    end = strides + stride * entry
    if _align(end, 8) != len(blob) or not 1 <= inputs <= n:
        return ()
    out = [(at + w * inputs, at + w * n) for at, w in arrays]
    out += [(strides + entry * (inputs if stride > 1 else 1), end), (end, len(blob)), (arrays[-1][0] + n, strides)]
    return _merged(out)


# -- multi_tensor_apply_kernel's TensorListMetadata ----------------------------------------------

# (tensors by depth, tensors by depth for scalar lists, blocks, bytes of a block index): 4 KB, 32 KB
_TABLES = (((110, 64, 48, 36, 30), (96, 64, 48, 36, 30), 320, 1),
           ((770, 448, 336, 252, 210), (672, 448, 336, 252, 210), 2240, 2))  # fmt: skip
_LIST = re.compile(r"25multi_tensor_apply_kernelINS\d*_(?:(?P<kind>18TensorListMetadata|32FusedOptimizerTensorListMetadata)"
                   r"ILi(?P<depth>\d)EE|28TensorListScalarListMetadataI(?P<scalar>[fd])Li(?P<sdepth>\d)EE)")  # fmt: skip


def _list_layout(name: str, size: int) -> tuple[int, int, int, list[tuple[int, int]], int, int, int] | None:
    """``(tensors, blocks, index bytes, [(offset, bytes) of each per-tensor array], block_to_tensor's
    offset, block_to_chunk's offset, the end of the last field)`` of the struct ``name`` takes, where
    one of torch's tables alone gives it ``size`` bytes."""
    m = _LIST.search(name)
    if m is None:
        return None
    depth = int(m.group("depth") or m.group("sdepth"))
    if not 1 <= depth <= 5:
        return None
    found = []
    for by_depth, by_depth_scalars, blocks, index in _TABLES:
        tensors = (by_depth_scalars if m.group("scalar") else by_depth)[depth - 1]
        arrays, at = [], 0
        widths = [8] * depth + [8]  # addresses[depth][tensors], numel_for_tensor
        if m.group("kind") and m.group("kind").startswith("32"):
            widths.append(8)  # state_steps_addresses
        if m.group("scalar"):
            widths.append(4 if m.group("scalar") == "f" else 8)  # scalar_vals
        for width in widths:
            at = _align(at, width)
            arrays.append((at, width))
            at += width * tensors
        to_tensor = at
        to_chunk = _align(to_tensor + index * blocks, 4)
        end = to_chunk + 4 * blocks + (0 if m.group("scalar") else 4)  # start_tensor_this_launch
        if _align(end, 8) == size:
            found.append((tensors, blocks, index, arrays, to_tensor, to_chunk, end))
    return found[0] if len(found) == 1 else None


@functools.lru_cache(maxsize=4096)
def _tensor_list(name: str, blob: bytes, grid: int) -> Ranges:
    layout = _list_layout(name, len(blob))
    if layout is None:
        return ()
    tensors, blocks, index, arrays, to_tensor, to_chunk, end = layout
    if not 1 <= grid <= blocks:
        return ()
    named = {int.from_bytes(blob[to_tensor + index * b : to_tensor + index * (b + 1)], "little") for b in range(grid)}
    if max(named) >= tensors:
        return ()
    out = [(to_tensor + index * grid, to_tensor + index * blocks), (to_chunk + 4 * grid, to_chunk + 4 * blocks),
           (end, len(blob))]  # fmt: skip
    for at, width in arrays:
        for t in range(tensors):
            if t not in named:
                out.append((at + width * t, at + width * (t + 1)))
    return _merged(out)


def unread(node: Node) -> Ranges:
    """``(start, end)`` byte ranges of ``node``'s parameter block that its kernel never reads (none
    where it is not a kernel whose layout its name and bytes prove)."""
    if node.kind != "kernel" or node.module is not None or not node.block or not node.layout:
        return ()
    name = node.name
    if "13reduce_kernelI" in name and "8ReduceOpI" in name and len(node.layout) == 1:
        start, size = node.layout[0]
        found = _reduce_op(bytes(node.block[start : start + size]))
    elif "18elementwise_kernelI" in name and len(node.layout) == 2 and (kind := closure_kind(name)) is not None:
        start, size = node.layout[1]
        found = _closure(bytes(node.block[start : start + size]), *kind)
    elif "29vectorized_elementwise_kernelI" in name and len(node.layout) == 3 and (fkind := _functor_kind(name)):
        start, size = node.layout[1]
        found = _functor(fkind, size)
    elif "CatArrayBatchedCopy" in name and len(node.layout) >= 2 and len(node.grid) >= 2:
        start, size = node.layout[1]
        found = _cat_inputs(name, bytes(node.block[start : start + size]), int(node.grid[1]))
    elif "25multi_tensor_apply_kernelI" in name and node.layout[0][0] == 0 and node.grid:
        start, size = node.layout[0]
        found = _tensor_list(name, bytes(node.block[start : start + size]), int(node.grid[0]))
    else:
        return ()
    return tuple((start + a, start + b) for a, b in found)
