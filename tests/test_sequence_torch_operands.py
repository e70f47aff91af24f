"""Words of torch's kernels that hold an operand's first byte (launchpad.sequences.torch_operands),
and what they decide for an output whose block touches another: an address at a block's end is
also the next block's start, and such a word means the block holding the byte. The MSE case is
the bench's MLP training step on an H100: the squared differences' block started where the loss's
ended, and the loss was copied for it."""

from __future__ import annotations

import base64
import json
import random
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_sequence_allocations import never
from test_sequence_torch_closures import MSE_BACKWARD, closure, closure_node, kernel
from test_sequence_torch_kernels import REDUCE, reduce_op

from launchpad.sequences.allocations import Blocks
from launchpad.sequences.analysis import Storage
from launchpad.sequences.capture import Capture, Node
from launchpad.sequences.outputs import SHARED_ADDRESS, _follow
from launchpad.sequences.torch_operands import first_byte_words

MSE = (
    "_ZN2at6native29vectorized_elementwise_kernelILi4EZZZNS0_15mse_kernel_cudaERNS_18TensorIteratorBaseEENKUlvE_clEvENK"
    "UlvE0_clEvEUlffE_St5arrayIPcLm3EEEEviT0_T1_"
)


def vectorized(count: int, pointers: list[int], name: str = MSE) -> Node:
    """``vectorized_elementwise_kernel(int N, {} f, std::array<char *, 3> data)`` as torch lays it out."""
    block = struct.pack("<i", count) + b"\x00" + bytes(3) + struct.pack(f"<{len(pointers)}Q", *pointers)
    return kernel(block, name, ((0, 4), (4, 1), (8, 8 * len(pointers))))


def test_a_vectorized_kernels_data_words():
    assert first_byte_words(vectorized(4096, [1, 2, 3])) == {8, 16, 24}
    assert first_byte_words(vectorized(0, [1, 2, 3])) == frozenset()  # no element: nothing read
    assert first_byte_words(vectorized(4096, [1, 2])) == frozenset()  # two words where the name says three
    other = MSE.replace("29vectorized_elementwise_kernel", "29vectorised_elementwise_kernel")
    assert first_byte_words(vectorized(4096, [1, 2, 3], other)) == frozenset()
    mine = vectorized(4096, [1, 2, 3])
    mine.module = SimpleNamespace(spec=None)  # launchpad's own kernel: its spec says what it holds
    assert first_byte_words(mine) == frozenset()


def test_the_mse_backward_closures_data_an_h100_launched():
    """OffsetCalculator<4> (704 bytes), then out, grad, input and target: the four words after it."""
    saved = json.loads((Path(__file__).parent / "data" / "torch_params_h100.json").read_text())["kernels"][0]
    node = kernel(base64.b64decode(saved["block"]), saved["name"], saved["layout"])
    assert saved["name"] == MSE_BACKWARD
    assert first_byte_words(node) == {712, 720, 728, 736}


@pytest.mark.parametrize("spoil", ["dims", "count", "short"])
def test_no_closure_word_where_the_bytes_do_not_prove_the_layout(spoil):
    rng = random.Random(4)
    body = bytearray(closure(rng, 2, 4, 24))
    if spoil == "dims":
        body[0:4] = struct.pack("<i", 0)
    node = closure_node(bytes(body[:720] if spoil == "short" else body), MSE_BACKWARD)
    if spoil == "count":
        node.block = struct.pack("<i", 0) + node.block[4:]
    assert first_byte_words(node) == frozenset()
    assert first_byte_words(closure_node(bytes(closure(rng, 2, 4, 24)), MSE_BACKWARD)) == {712, 720, 728, 736}


@pytest.mark.parametrize("final_output", [1, 0])
def test_a_reduce_ops_src_and_its_final_dst(final_output):
    """``src`` always; ``dst[0]`` where the launch writes the outputs (else it may write ``acc_buf`` alone)."""
    blob, _ = reduce_op(random.Random(8), 72, [4096, 3], [])
    pointers = len(blob) - 64
    flags = bytearray(blob)
    flags[pointers + 56 : pointers + 64] = bytes([0, final_output, 0, 0]) + struct.pack("<i", 1)
    node = Node(handle=1, kind="kernel", function=7, name=REDUCE, layout=((0, len(blob)),), block=bytes(flags))
    assert first_byte_words(node) == ({pointers, pointers + 8} if final_output else {pointers})
    flags[pointers + 57] = 7  # no bool: the layout is not proven
    assert first_byte_words(Node(handle=1, kind="kernel", function=7, name=REDUCE, layout=((0, len(blob)),),
                                 block=bytes(flags))) == frozenset()  # fmt: skip


def captured(blocks: list[tuple[int, int]], nodes: list[Node]) -> Capture:
    return Capture(graph=None, nodes=nodes, result=None, allocations=Blocks(blocks))


@pytest.mark.parametrize("seed", range(20))
def test_an_output_between_touching_blocks_is_followed_by_its_operand_words(seed):
    """The loss (allocation 1) between a block that ends at its start (0) and one that starts at its
    end (2), at random addresses in two pools: the reduction writing it (``dst[0]`` at its start)
    is its use; the MSE kernel writing the next block (``data[0]`` at the loss's end) is not. A word
    of a kernel whose name proves nothing, at either address, still makes it a copy."""
    rng = random.Random(seed)
    size = 512 * rng.randrange(1, 4)
    bases = [0x7F00_0000_0000 + (rng.randrange(1, 1 << 20) << 12) for _ in range(2)]
    reduce_blob, _ = reduce_op(rng, 72, [4096], [])
    pointers = len(reduce_blob) - 64

    def pool(base: int) -> Capture:
        loss, before, after = base + 4096, base + 4096 - 1024, base + 4096 + size
        blocks = [(before, 1024), (loss, size), (after, 8192)]
        reduce = bytearray(reduce_blob)
        reduce[pointers : pointers + 16] = struct.pack("<QQ", before, loss)  # src, dst[0]
        reduce[pointers + 56 : pointers + 64] = bytes([0, 1, 0, 0]) + struct.pack("<i", 1)
        nodes = [
            vectorized(2048, [after, base + 0x100000, base + 0x200000]),  # (a - b)**2 into the next block
            Node(handle=2, kind="kernel", function=7, name=REDUCE, layout=((0, len(reduce)),), block=bytes(reduce)),
        ]
        return captured(blocks, nodes)

    final, control = pool(bases[0]), pool(bases[1])
    storage = Storage(size)
    assert _follow(storage, 1, final.nodes, final, control, never) == ""
    assert [(u.node, u.offset, u.delta) for u in storage.uses] == [(1, pointers + 8, 0)]

    for address in (0, 1):  # an unknown kernel's word at the loss's end, then at its start
        plain = [captured(c.allocations.blocks, [*c.nodes, Node(handle=3, kind="kernel", function=7, name="k",
                 layout=((0, 8),), block=struct.pack("<Q", c.allocations.blocks[1][0] + size * (1 - address)))])
                 for c in (final, control)]  # fmt: skip
        assert SHARED_ADDRESS in _follow(Storage(size), 1, plain[0].nodes, *plain, never)
