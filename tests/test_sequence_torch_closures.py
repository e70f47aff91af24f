"""What the analysis leaves out of torch's ``elementwise_kernel`` closures and ``multi_tensor_apply``
lists (launchpad.sequences.torch_kernels): exactly the bytes the kernel never reads, where the name
and the bytes prove the layout; nothing otherwise. Two blocks come from an H100 (torch 2.11, the
bench's MLP training step: its MSE backward and the ``+ 1`` on AdamW's steps); the rest are laid
out as torch's headers say, with the unread bytes random (what the host's stack held)."""

from __future__ import annotations

import base64
import json
import random
import struct
from pathlib import Path

import pytest

from launchpad.sequences.capture import Node
from launchpad.sequences.regions import regions
from launchpad.sequences.torch_kernels import unread

MSE_BACKWARD = (
    "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastIZZZNS0_24mse_backward_cuda_kernel"
    "ERNS_14TensorIteratorERKN3c106ScalarEENKUlvE_clEvENKUlvE0_clEvEUlfffE_EEvRNS_18TensorIteratorBaseERKT_EUliE_"
    "EEviT1_"
)
DIV = (
    "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastINS0_13BinaryFunctorIfffNS0_15binary_"
    "internal10DivFunctorIfEEEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_"
)
COPY = (
    "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastIZZZNS0_23direct_copy_kernel_cudaERNS_"
    "18TensorIteratorBaseEENKUlvE1_clEvENKUlvE5_clEvEUlfE_EEvS4_RKT_EUliE_EEviT1_"
)
# the same closure's shape for other functors: (name's functor part, NARGS) - a half lambda of two, a fill
HALF2 = COPY.replace("UlfE_", "UlN3c104HalfES7_E_")
FILL = DIV.replace("13BinaryFunctorIfffNS0_15binary_internal10DivFunctorIfEEEE", "11FillFunctorIfEE")
LIST = (
    "_ZN2at6native57_GLOBAL__N__e658eeb9_24_ForeachBinaryOpScalar_cu_86b9896c25multi_tensor_apply_kernelINS1_"
    "18TensorListMetadataILi{depth}EEENS1_21BinaryOpScalarFunctorIfLi1ELi1ELi0EEEJSt4plusIfEfEEEvT_T0_DpT1_"
)
FUSED = "_ZN2at6native25multi_tensor_apply_kernelINS0_32FusedOptimizerTensorListMetadataILi{depth}EEENS0_5AdamWEEvT_T0_"
SCALARS = "_ZN2at6native25multi_tensor_apply_kernelINS0_28TensorListScalarListMetadataIfLi{depth}EEENS0_3MulEEvT_T0_"


def covered(ranges) -> set[int]:
    return {b for a, e in ranges for b in range(a, e)}


def divider(d: int) -> bytes:
    shift = next(k for k in range(32) if (1 << k) >= d)
    return struct.pack("<III", d, ((1 << 32) * ((1 << shift) - d)) // d + 1, shift)


def closure(rng: random.Random, dims: int, nargs: int, tail: int) -> bytes:
    """A legacy elementwise closure: OffsetCalculator<nargs> (garbage past dims), data, then ``tail``
    bytes of functor and nvcc's wrapper."""
    calc = bytearray(rng.randbytes(304 + 100 * nargs))
    calc[0:4] = struct.pack("<i", dims)
    for i in range(dims):
        calc[4 + 12 * i : 16 + 12 * i] = divider(rng.randrange(1, 5000))
    calc += rng.randbytes(-len(calc) % 8)
    return bytes(calc) + b"".join(struct.pack("<Q", 0x7F0000000000 + 256 * rng.randrange(1 << 20)) for _ in range(nargs)) \
        + rng.randbytes(tail)  # fmt: skip


def kernel(block: bytes, name: str, layout, grid=(1, 1, 1)) -> Node:
    return Node(
        handle=1, kind="kernel", function=7, name=name, layout=tuple(map(tuple, layout)), block=block, grid=grid
    )


def closure_node(body: bytes, name: str) -> Node:
    return kernel(struct.pack("<i", 12345) + bytes(4) + body, name, ((0, 4), (8, len(body))))


def test_the_mse_backward_closure_an_h100_launched():
    """dims 1 of OffsetCalculator<4>: its other 24 dividers and 96 strides unread, and the two host
    words nvcc's ``__host__ __device__`` lambdas end with (the functor's, the closure's); the four
    data pointers and ``norm`` (2/65536) compared."""
    saved = json.loads((Path(__file__).parent / "data" / "torch_params_h100.json").read_text())["kernels"][0]
    block = base64.b64decode(saved["block"])
    n = kernel(block, saved["name"], saved["layout"])
    assert n.name == MSE_BACKWARD
    assert unread(n) == ((8 + 16, 8 + 304), (8 + 304 + 16, 8 + 704), (8 + 744, 8 + 760))
    assert struct.unpack_from("<f", block, 8 + 736)[0] == 2 / 65536  # the functor's captured norm, compared
    kept = covered((o, o + s) for o, s, _ in regions(n))
    assert set(range(8 + 704, 8 + 744)) <= kept  # data[4], norm and its padding
    words = [int.from_bytes(block[8 + k : 16 + k], "little") for k in (744, 752)]
    assert all(w % 16 == 0 and w >> 40 == 0x7F for w in words)  # nvcc's words: what `new` returned on the host


@pytest.mark.parametrize(
    ("name", "nargs", "tail", "lambda_"),
    [
        (MSE_BACKWARD, 4, 24, True),  # norm and its padding, the lambda's word, the closure's word
        (DIV, 3, 16, False),  # the empty functor and its padding, the closure's word
        (COPY, 2, 16, True),  # a captureless lambda (empty), the closure's word
        (HALF2, 3, 16, True),
        (FILL, 1, 16, False),  # value, padding, the word: 432 bytes, a multiple of 16 (alignment 16 or 8)
        (MSE_BACKWARD, 4, 40, True),  # a lambda of more captures
    ],
)
@pytest.mark.parametrize("seed", range(8))
def test_exactly_a_closures_calculator_past_dims_and_nvccs_words_are_left_out(name, nargs, tail, lambda_, seed):
    rng = random.Random(seed)
    dims = rng.randrange(1, 26)
    n = closure_node(closure(rng, dims, nargs, tail), name)
    calc = 304 + 100 * nargs
    size = len(n.block) - 8
    expected = set(range(8 + 4 + 12 * dims, 8 + 304)) | set(range(8 + 304 + 4 * nargs * dims, 8 + calc))
    expected |= set(range(8 + calc, 8 + (calc + 7) // 8 * 8))  # the padding before data (odd NARGS)
    if size % 16 == 8:
        expected |= set(range(8 + size - 8, 8 + size))  # the closure's host word
        if lambda_ and tail >= 24:
            expected |= set(range(8 + size - 16, 8 + size - 8))  # its lambda's
    assert covered(unread(n)) == expected
    kept = regions(n)
    assert covered((o, o + s) for o, s, _ in kept) | expected == set(range(len(n.block))) - {4, 5, 6, 7}  # (padding)


@pytest.mark.parametrize(
    "spoil",
    [
        "vectorized",  # another kernel: a contiguous launch holds no calculator
        "cast",  # gpu_kernel_impl's closure (with dtypes): not this layout
        "functor",  # a functor whose arity the name does not give
        "lambda",  # a lambda parameter launchpad cannot parse (a function pointer)
        "second_lambda",  # lambda(int)#2: not the closure known here
        "dims",  # dims 0
        "divider",  # a used divider's m1 off by one
        "short",  # too few bytes for data and a functor after the calculator
    ],
)
def test_nothing_is_left_out_of_a_closure_the_name_and_bytes_do_not_prove(spoil):
    rng = random.Random(4)
    body, name = bytearray(closure(rng, 3, 4, 24)), MSE_BACKWARD
    if spoil == "vectorized":
        name = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
    elif spoil == "cast":
        name = name.replace("22gpu_kernel_impl_nocastI", "15gpu_kernel_implI")
    elif spoil == "functor":
        name = DIV.replace("13BinaryFunctorI", "10AbsFunctorI")
    elif spoil == "lambda":
        name = name.replace("UlfffE_", "UlfPFviEfE_")
    elif spoil == "second_lambda":
        name = name.replace("EUliE_EEviT1_", "EUliE0_EEviT1_")
    elif spoil == "dims":
        body[0:4] = struct.pack("<i", 0)
    elif spoil == "divider":
        body[4 + 12 + 4] ^= 1
    elif spoil == "short":
        body = body[: 704 + 32]
    assert unread(closure_node(bytes(body), name)) == ()


# -- multi_tensor_apply's lists ------------------------------------------------------------------

TABLES = {12: ((110, 64, 48, 36, 30), (96, 64, 48, 36, 30), 320, 1), 13: ((770, 448, 336, 252, 210),
          (672, 448, 336, 252, 210), 2240, 2)}  # fmt: skip


def tensor_list(rng: random.Random, kind: str, depth: int, cuda: int, grid: int):
    """(blob, {byte offsets read}) of a list as multi_tensor_apply leaves it: every field garbage
    but block_to_tensor/chunk for the grid's blocks, which name tensors in order as torch's host
    code fills them."""
    by_depth, by_scalars, blocks, index = TABLES[cuda]
    tensors = (by_scalars if kind == "scalars" else by_depth)[depth - 1]
    widths = [8] * (depth + 1) + ([8] if kind == "fused" else []) + ([4] if kind == "scalars" else [])
    arrays, at = [], 0
    for w in widths:
        arrays.append((at, w))
        at += w * tensors
    to_tensor, to_chunk = at, (at + index * blocks + 3) // 4 * 4
    end = to_chunk + 4 * blocks + (0 if kind == "scalars" else 4)
    blob = bytearray(rng.randbytes((end + 7) // 8 * 8))
    named, t = [], rng.randrange(0, 3)
    for b in range(grid):
        t = min(t + rng.choice([0, 0, 1, 2]), tensors - 1)
        named.append(t)
        blob[to_tensor + index * b : to_tensor + index * (b + 1)] = t.to_bytes(index, "little")
    read = set()
    for b in range(grid):
        read |= set(range(to_tensor + index * b, to_tensor + index * (b + 1)))
        read |= set(range(to_chunk + 4 * b, to_chunk + 4 * b + 4))
    for a, w in arrays:
        for t in set(named):
            read |= set(range(a + w * t, a + w * (t + 1)))
    if kind != "scalars":
        read |= set(range(to_chunk + 4 * blocks, end))  # start_tensor_this_launch
    return bytes(blob), read


@pytest.mark.parametrize("kind", ["plain", "fused", "scalars"])
@pytest.mark.parametrize("cuda", [12, 13])
@pytest.mark.parametrize("seed", range(6))
def test_exactly_the_entries_no_block_reads_are_left_out(kind, cuda, seed):
    rng = random.Random(seed)
    depth = rng.randrange(1, 6) if kind != "fused" else rng.randrange(4, 6)
    grid = rng.randrange(1, TABLES[cuda][2] + 1) if seed % 2 else rng.randrange(1, 12)
    blob, read = tensor_list(rng, kind, depth, cuda, grid)
    name = {"plain": LIST, "fused": FUSED, "scalars": SCALARS}[kind].format(depth=depth)
    n = kernel(blob + rng.randbytes(8), name, ((0, len(blob)), (len(blob), 1)), (grid, 1, 1))
    assert covered(unread(n)) == set(range(len(blob))) - read
    kept = covered((o, o + s) for o, s, _ in regions(n))
    assert read <= kept


def test_the_adamw_step_list_an_h100_launched():
    """``torch._foreach_add_(state_steps, 1)`` over the MLP's six parameters: six blocks, one per
    tensor; the other 104 tensors' addresses and sizes (the host's leftovers) unread."""
    saved = json.loads((Path(__file__).parent / "data" / "torch_params_h100.json").read_text())["kernels"][1]
    block = base64.b64decode(saved["block"])
    n = kernel(block, saved["name"], saved["layout"], (saved["grid"], 1, 1))
    to_tensor, to_chunk = 1760, 2080
    assert list(block[to_tensor : to_tensor + 6]) == [0, 1, 2, 3, 4, 5]
    expected = [
        (48, 880),
        (928, 1760),
        (to_tensor + 6, to_tensor + 320),
        (to_chunk + 24, to_chunk + 1280),
        (3364, 3368),
    ]
    assert unread(n) == tuple(expected)


@pytest.mark.parametrize("spoil", ["grid", "tensor", "size", "depth", "scalar"])
def test_nothing_is_left_out_of_a_list_the_name_and_bytes_do_not_prove(spoil):
    rng = random.Random(9)
    blob, _ = tensor_list(rng, "plain", 2, 12, 5)
    blob, name, grid = bytearray(blob), LIST.format(depth=2), 5
    if spoil == "grid":
        grid = 321  # more blocks than the table holds
    elif spoil == "tensor":
        blob[1536 + 4] = 64  # a block naming tensor 64 of 64
    elif spoil == "size":
        blob += bytes(8)
    elif spoil == "depth":
        name = LIST.format(depth=6)
    elif spoil == "scalar":
        name = SCALARS.replace("IfLi", "IN3c107complexIdEELi").format(depth=2)
    n = kernel(bytes(blob), name, ((0, len(blob)),), (grid, 1, 1))
    assert unread(n) == ()


def test_a_lambda_outside_at_native_keeps_its_last_word():
    """Whether a functor lambda is nvcc's ``__host__ __device__`` one (its last word host-only) is
    torch's convention (``GPU_LAMBDA``), known for at::native alone: elsewhere its last 8 bytes may
    be a capture of a ``__device__`` lambda, and are compared; the closure's own word is not."""
    rng = random.Random(2)
    body = closure(rng, 2, 4, 24)
    torch_ranges = unread(closure_node(body, MSE_BACKWARD))
    other = unread(closure_node(body, MSE_BACKWARD.replace("ZZZNS0_24mse_backward", "ZZZN3ext24mse_backward")))
    size = len(body)
    assert covered(torch_ranges) - covered(other) == set(range(8 + size - 16, 8 + size - 8))
    assert set(range(8 + size - 8, 8 + size)) <= covered(other)


VEC = "_ZN2at6native29vectorized_elementwise_kernelILi4E{f}St5arrayIPcLm{n}EEEEviT0_T1_"
THRESHOLD = ("NS0_13BinaryFunctorIfffZNS0_67_GLOBAL__N__06c19b41_28_ActivationThresholdKernel_cu_751192d7_1581121"
             "threshold_kernel_implIfEEvRNS_18TensorIteratorBaseET_S7_EUlffE_EE")  # fmt: skip


@pytest.mark.parametrize(
    ("functor", "size", "expected"),
    [
        ("NS0_13BinaryFunctorIfffNS0_15binary_internal10MulFunctorIfEEEE", 1, ((4, 5),)),  # no members
        ("NS0_13BinaryFunctorIfffNS0_15binary_internal10DivFunctorIfEEEE", 1, ((4, 5),)),
        ("ZZZNS0_15mse_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE_clEvENKUlvE0_clEvEUlffE_", 1, ((4, 5),)),  # {}
        (
            "ZZZNS0_9fake_cudaERNS_18TensorIteratorBaseEENKUlvE_clEvEUlfE_",
            24,
            ((24, 32),),
        ),  # captures, then nvcc's word
        ("ZZZNS0_9fake_cudaERNS_18TensorIteratorBaseEENKUlvE_clEvEUlfE_", 32, ()),  # alignment 16 or 8: unknown
        ("ZZZNS0_9fake_cudaERNS_18TensorIteratorBaseEENKUlvE_clEvEUlfE_", 16, ((16, 24),)),  # 8 of captures, the word
        (THRESHOLD, 16, ((16, 24),)),  # torch's ReLU backward (an MLP's training step): BinaryFunctor of a lambda
        (THRESHOLD.replace("ZNS0_67", "ZN3ext67"), 16, ()),  # BinaryFunctor of a lambda not torch's
        (THRESHOLD, 32, ()),  # alignment 16 or 8: unknown
        ("ZZZN3ext9fake_cudaERNS_18TensorIteratorBaseEENKUlvE_clEvEUlfE_", 1, ()),  # not torch's: convention unknown
        ("NS0_11FillFunctorIhEE", 1, ()),  # its byte is the fill value
        ("NS0_15CUDAFunctor_addIfEE", 4, ()),  # alpha
        ("NS0_13BinaryFunctorIfffNS0_15binary_internal10AddFunctorIfEEEE", 1, ()),  # not known here
    ],
)
def test_a_vectorized_kernels_functor(functor, size, expected):
    """Bytes of ``vectorized_elementwise_kernel``'s functor that no code reads: an empty functor's
    byte, nvcc's host word after a torch lambda's captures; nothing where that is not proven."""
    start = 8 if size > 4 else 4
    block = struct.pack("<i", 1000) + bytes(start - 4) + random.Random(1).randbytes(size)
    block += bytes(-len(block) % 8) + struct.pack("<QQQ", 0x7F0000001000, 0x7F0000002000, 0x7F0000003000)
    layout = ((0, 4), (start, size), (len(block) - 24, 24))
    n = kernel(block, VEC.format(f=functor, n=3), layout)
    assert unread(n) == expected  # (byte offsets in the block)
    left_out = {b for a, e in expected for b in range(a, e)}
    params = covered((o, o + s) for o, s in layout)
    assert covered((o, o + s) for o, s, _ in regions(n)) == params - left_out  # every other byte compared
