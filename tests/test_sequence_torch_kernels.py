"""What the analysis leaves out of torch's ``reduce_kernel`` and ``torch.cat`` parameters
(launchpad.sequences.torch_kernels), the reduction's:
exactly the bytes of its two ``OffsetCalculator``s past ``dims``, where the bytes prove the layout;
nothing otherwise. The blobs are laid out as torch 2.x's ``ReduceOp`` with 32-bit indexing, the
unread bytes random (what the host's stack held)."""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace

import pytest

from launchpad.sequences.capture import Node
from launchpad.sequences.regions import regions
from launchpad.sequences.torch_kernels import unread

REDUCE = "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIffffEEjfLi4ELi4EEEEEvT1_"
INPUT, OUTPUT = 4 + 300 + 100, 4 + 300 + 200  # OffsetCalculator<1>, <2>


def divider(d: int) -> bytes:
    shift = next(k for k in range(32) if (1 << k) >= d)
    return struct.pack("<III", d, ((1 << 32) * ((1 << shift) - d)) // d + 1, shift)


def calc(rng: random.Random, sizes: list[int], nargs: int) -> bytes:
    """An OffsetCalculator as torch's host code leaves it: dims, its dividers and strides, then garbage."""
    out = bytearray(rng.randbytes(4 + 300 + 100 * nargs))
    out[0:4] = struct.pack("<i", len(sizes))
    for i, d in enumerate(sizes):
        out[4 + 12 * i : 16 + 12 * i] = divider(d)
        for a in range(nargs):
            out[304 + 4 * (i * nargs + a) : 308 + 4 * (i * nargs + a)] = struct.pack("<I", rng.randrange(1, 1 << 20))
    return bytes(out)


def reduce_op(rng: random.Random, head: int, inputs: list[int], outputs: list[int]) -> tuple[bytes, int]:
    """(a ReduceOp's bytes, the offset of its input_calc): ops, ident and config (``head`` bytes),
    the calculators, then the 64 bytes of pointers and flags after the 8-aligned end."""
    config = bytearray(rng.randbytes(head))
    config[head - 8] = rng.choice([0, 1])  # ReduceConfig's vectorize_input (a bool), before 3 bytes of padding
    body = bytes(config) + calc(rng, inputs, 1) + calc(rng, outputs, 2)
    body += bytes(-len(body) % 8)
    return body + rng.randbytes(64), head


def node(block: bytes, name: str = REDUCE, at: int = 0) -> Node:
    return Node(handle=1, kind="kernel", function=7, name=name, layout=((at, len(block) - at),), block=block)


def expected_unread(at: int, dims_in: int, dims_out: int) -> set[int]:
    out = set(range(at - 7, at - 4)) if at >= 64 else set()  # ReduceConfig's padding
    for start, dims, nargs in ((at, dims_in, 1), (at + INPUT, dims_out, 2)):
        out |= set(range(start + 4 + 12 * dims, start + 304))
        out |= set(range(start + 304 + 4 * nargs * dims, start + 304 + 4 * nargs * 25))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_exactly_the_calculators_bytes_past_dims_are_left_out(seed):
    rng = random.Random(seed)
    inputs = [rng.randrange(1, 5000) for _ in range(rng.randrange(1, 6))]
    outputs = [rng.randrange(1, 5000) for _ in range(rng.randrange(0, 4))]
    head = rng.choice([40, 56, 72, 88])
    blob, at = reduce_op(rng, head, inputs, outputs)
    skipped = expected_unread(at, len(inputs), len(outputs))
    assert {b for a, e in unread(node(blob)) for b in range(a, e)} == skipped
    kept = regions(node(blob))
    covered = {b for offset, size, _ in kept for b in range(offset, offset + size)}
    # every byte the kernel may read is compared, and no other: a word partly unread (a 12-byte
    # divider across an 8-byte boundary) is compared in its read bytes alone
    assert covered | skipped == set(range(len(blob)))
    assert not covered & skipped


def test_a_parameter_block_that_starts_later_is_offset_alike():
    rng = random.Random(5)
    blob, _ = reduce_op(rng, 72, [4096, 3], [])
    padded = bytes(8) + blob
    assert unread(node(padded, at=8)) == tuple((a + 8, b + 8) for a, b in unread(node(blob)))


@pytest.mark.parametrize(
    "spoil",
    [
        "name",  # another kernel: its layout is not known
        "m1",  # one used divider off by one: no IntDivider there
        "size",  # 8 bytes more than the layout gives
        "dims",  # input_calc.dims 0 (a reduction's input has one at least)
        "too_many",  # output_calc.dims 26
        "launchpad",  # a kernel of launchpad's own (its layout is its spec's)
    ],
)
def test_nothing_is_left_out_where_the_bytes_do_not_prove_the_layout(spoil):
    rng = random.Random(11)
    blob, at = reduce_op(rng, 72, [4096, 3], [7])
    b, name = bytearray(blob), REDUCE
    if spoil == "name":
        name = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
    elif spoil == "m1":
        b[at + 4 + 12 + 4] ^= 1  # the second divider's m1
    elif spoil == "size":
        b += bytes(8)
    elif spoil == "dims":
        b[at : at + 4] = struct.pack("<i", 0)
    elif spoil == "too_many":
        b[at + INPUT : at + INPUT + 4] = struct.pack("<i", 26)
    n = node(bytes(b), name)
    if spoil == "launchpad":
        n.module = SimpleNamespace(spec=None)
    assert unread(n) == ()
    assert len(regions(n)) == len(regions(Node(handle=1, kind="kernel", name="other", layout=n.layout, block=n.block)))


def test_random_bytes_are_never_taken_for_a_reduce_op():
    rng = random.Random(3)
    for _ in range(300):
        blob = bytearray(rng.randbytes(1048))
        for k in range(0, 1048, 4):  # plenty of small ints where dims may be read
            if rng.random() < 0.3:
                blob[k : k + 4] = struct.pack("<i", rng.randrange(0, 26))
        assert unread(node(bytes(blob))) == ()


CAT = (
    "_ZN2at6native40_GLOBAL__N__0f1a8107_8_Shape_cu_49f7391c19CatArrayBatchedCopyINS1_10OpaqueTypeILj4EEEjLi4ELi64E"
    "Li{stride}EEEvPT_NS1_25CatArrInputTensorMetadataIS5_T0_XT2_EXT3_EEENS1_16TensorSizeStrideIS8_Lj4EEEiS8_"
)


@pytest.mark.parametrize("stride", [64, 1])
@pytest.mark.parametrize("inputs", [1, 3, 17, 64])
def test_exactly_the_cat_entries_past_grid_y_are_left_out(stride, inputs):
    """``torch.cat``'s metadata of 64 inputs (32-bit indices, 4 dims): each block reads the entries
    at ``blockIdx.y`` (``tensorStride[0]`` alone where ``stride_size`` is 1), so those past
    ``gridDim.y`` are the host's leftovers. Laid out as torch's ``Shape.cu`` declares it; its size
    (3392 bytes for 64 strides) is what an H100's torch 2.11 launched for an attention backward."""
    rng = random.Random(inputs)
    size = 1344 + 32 * stride  # input[64], offset/dimSize/nElements[64], isContiguous[64], strides
    meta = rng.randbytes((size + 7) // 8 * 8)
    block = struct.pack("<Q", 0x7F0000100000) + meta + rng.randbytes(40)
    layout = ((0, 8), (8, len(meta)), (8 + len(meta), 32), (8 + len(meta) + 32, 4), (8 + len(meta) + 36, 4))
    n = Node(handle=1, kind="kernel", function=7, name=CAT.format(stride=stride), layout=layout, block=block,
             grid=(12, inputs, 1))  # fmt: skip
    read = set()
    for at, width in ((0, 8), (512, 4), (768, 4), (1024, 4), (1280, 1)):
        read |= set(range(8 + at, 8 + at + width * inputs))
    read |= set(range(8 + 1344, 8 + 1344 + 32 * (inputs if stride > 1 else 1)))
    assert {b for a, e in unread(n) for b in range(a, e)} == set(range(8, 8 + len(meta))) - read
    n.grid = (12, 65, 1)  # more inputs than the struct holds: not this layout
    assert unread(n) == ()
    n.grid, n.layout = (12, inputs, 1), ((0, 8), (8, len(meta) + 8), *layout[2:])
    assert unread(n) == ()  # another size


def test_reduce_configs_padding_only_after_a_bool():
    """The three bytes after ``ReduceConfig.vectorize_input`` are left out only where that byte is a
    bool (0 or 1): anything else says the config is not where the layout puts it."""
    rng = random.Random(8)
    blob, at = reduce_op(rng, 72, [4096, 3], [7])
    padding = set(range(at - 7, at - 4))
    assert padding <= {b for a, e in unread(node(blob)) for b in range(a, e)}
    spoiled = bytearray(blob)
    spoiled[at - 8] = 2
    left_out = {b for a, e in unread(node(bytes(spoiled))) for b in range(a, e)}
    assert not padding & left_out and left_out  # (the calculators' bytes still are)
