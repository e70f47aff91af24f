"""Allocation facts (launchpad.sequences.allocations) and how the analysis compares a word across
captures (``same_word``): where torch's caching allocator puts neighbouring blocks differs from
pool to pool, so an address at a block's end may also be the next block's start in one capture
alone; a reading both captures share is what the word means, and only blocks that held the same
bytes make an output's addresses ambiguous."""

from __future__ import annotations

import struct

from launchpad.sequences.allocations import Blocks
from launchpad.sequences.analysis import same_word
from launchpad.sequences.capture import Capture, Node

MB = 1 << 20


def capture(blocks: list[tuple[int, int]], word: int) -> Capture:
    node = Node(handle=1, kind="kernel", function=7, name="k", layout=((0, 8),), block=struct.pack("<Q", word))
    return Capture(graph=None, nodes=[node], result=None, allocations=Blocks(blocks))


def never(_: int) -> bool:
    raise AssertionError("allocation facts decide; the device pointer test is for captures without them")


def test_a_block_that_touches_another_in_one_pool_alone_means_the_same():
    """An H100's training step: the layer norm's output (allocations 0 and 93, one block reused)
    sat right after a 32 MB block in the probe's pool alone, so its address was also that block's
    end there; the word still means allocations 0 and 93, as in the base."""
    base = capture([(0x7F00_0000_0000, MB), (0x7F00_1000_0000, 32 * MB), (0x7F00_0000_0000, MB)], 0x7F00_0000_0000)
    probe_start = 0x7F10_0200_0000
    probe = capture([(probe_start, MB), (probe_start - 32 * MB, 32 * MB), (probe_start, MB)], probe_start)
    assert base.allocations.containing(0x7F00_0000_0000) == ((0, 0), (2, 0))
    assert probe.allocations.containing(probe_start) == ((0, 0), (1, 32 * MB), (2, 0))
    assert same_word(base, probe, 0, 0, 8, never)


def test_words_into_other_allocations_or_offsets_differ():
    base = capture([(0x7F00_0000_0000, MB), (0x7F00_1000_0000, MB)], 0x7F00_0000_0100)
    moved = capture([(0x7F20_0000_0000, MB), (0x7F20_1000_0000, MB)], 0x7F20_1000_0100)  # allocation 1, not 0
    shifted = capture([(0x7F20_0000_0000, MB), (0x7F20_1000_0000, MB)], 0x7F20_0000_0108)  # another offset
    assert not same_word(base, moved, 0, 0, 8, never)
    assert not same_word(base, shifted, 0, 0, 8, never)
    outside = capture([(0x7F20_0000_0000, MB)], 0x7F30_0000_0000)
    assert not same_word(outside, outside, 0, 0, 8, never)  # no allocation holds it: not the graph's memory


def test_a_word_shifted_right_by_4_is_compared_as_such():
    base = capture([(0x7F00_0000_0000, MB)], (0x7F00_0000_0040 >> 4) | (3 << 60))
    same = capture([(0x7F20_0000_0000, MB)], (0x7F20_0000_0040 >> 4) | (3 << 60))
    other_flags = capture([(0x7F20_0000_0000, MB)], (0x7F20_0000_0040 >> 4) | (5 << 60))
    assert same_word(base, same, 0, 0, 8, never)
    assert not same_word(base, other_flags, 0, 0, 8, never)


def test_only_blocks_that_held_the_same_bytes_share():
    touching = Blocks([(0x1000, 0x200), (0x1200, 0x200), (0xE00, 0x200)])  # a neighbour on each side
    reused = Blocks([(0x1000, 0x400), (0x1200, 0x200)])  # a temporary's bytes, then another's
    assert not touching.shares(0)
    assert reused.shares(1) and reused.shares(0)
    assert touching.containing(0x1200) == ((0, 0x200), (1, 0))  # the one address they share: both readings


def test_a_word_at_the_address_two_touching_blocks_share_makes_the_output_a_copy():
    """Touching blocks no longer make an output a copy by themselves: the one address they share is
    judged where a word holds it. The next block's start is also the output's end (an end pointer a
    kernel may hold), so that word cannot be placed and the output is copied; a word inside the
    output alone is a use of it."""
    from launchpad.sequences.analysis import Storage
    from launchpad.sequences.outputs import _follow

    blocks = [(0x7F00_0000_1000, 0x200), (0x7F00_0000_1200, 0x200)]  # the output (0), a neighbour (1)
    control_blocks = [(0x7F20_0000_1000, 0x200), (0x7F20_0000_1200, 0x200)]
    assert not Blocks(blocks).shares(0)
    boundary = capture(blocks, 0x7F00_0000_1200)
    storage = Storage(0x200)
    assert "points into it but does not follow it" in _follow(
        storage, 0, boundary.nodes, boundary, capture(control_blocks, 0x7F20_0000_1200), never
    )
    inside = capture(blocks, 0x7F00_0000_1040)
    storage = Storage(0x200)
    assert _follow(storage, 0, inside.nodes, inside, capture(control_blocks, 0x7F20_0000_1040), never) == ""
    assert [(u.node, u.offset) for u in storage.uses] == [(0, 0)]
