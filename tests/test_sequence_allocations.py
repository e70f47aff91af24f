"""Allocation facts (launchpad.sequences.allocations) and how the analysis compares a word across
captures (``same_word``): where torch's caching allocator puts neighbouring blocks differs from
pool to pool, so an address at a block's end may also be the next block's start in one capture
alone; a reading both captures share is what the word means, and only blocks that held the same
bytes make an output's addresses ambiguous."""

from __future__ import annotations

import itertools
import struct
import sys
import threading

import pytest
import torch

from launchpad.sequences.allocations import Blocks, lifetimes
from launchpad.sequences.analysis import same_word
from launchpad.sequences.capture import Capture, Node
from launchpad.sequences.outputs import SHARED_ADDRESS

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
    assert SHARED_ADDRESS in _follow(
        storage, 0, boundary.nodes, boundary, capture(control_blocks, 0x7F20_0000_1200), never
    )
    inside = capture(blocks, 0x7F00_0000_1040)
    storage = Storage(0x200)
    assert _follow(storage, 0, inside.nodes, inside, capture(control_blocks, 0x7F20_0000_1040), never) == ""
    assert [(u.node, u.offset) for u in storage.uses] == [(0, 0)]


# --- lifetimes: which nodes may use an allocation, from a node clock's ticks ----------------------

TOKEN = "launchpad-node-clock-test:"
MAIN, AUTOGRAD = 1, 2  # thread idents


def entry(action: str, address: int, tick: int | None, size: int = 512, token: str = TOKEN) -> dict:
    return {"action": action, "addr": address, "size": size, "user_metadata": "" if tick is None else f"{token}{tick}"}


def test_an_allocation_may_be_used_from_its_tick_to_its_threads_next_tick_after_the_free():
    """Forward in the main thread, backward in autograd's: a temporary freed by the main thread at
    tick 2 (10 nodes) may have been used until the main thread's next tick, 5 (40 nodes), not only
    until autograd's tick 3 (12 nodes) that comes between: the free could have happened after it."""
    ticks = [(4, MAIN), (6, MAIN), (10, MAIN), (12, AUTOGRAD), (30, AUTOGRAD), (40, MAIN)]
    entries = [entry("alloc", 0x1000, 0), entry("alloc", 0x2000, 3), entry("free_requested", 0x1000, 2),
               entry("free_completed", 0x1000, 5), entry("alloc", 0x1000, 5)]  # fmt: skip
    assert lifetimes(entries, TOKEN, ticks) == [(4, 40), (12, sys.maxsize), (40, sys.maxsize)]
    blocks = Blocks([(0x1000, 512), (0x2000, 512), (0x1000, 512)], lifetimes(entries, TOKEN, ticks))
    assert [k for k in range(3) if blocks.possible(k, 20)] == [0, 1]  # node 20: not the block's second tenant
    assert [k for k in range(3) if blocks.possible(k, 40)] == [1, 2]  # node 40: not the freed temporary
    assert not blocks.possible(0, 3) and not blocks.possible(1, 11)  # made before they were allocated


def test_a_tick_that_cannot_be_read_bounds_nothing():
    """Metadata of another clock (or the user's own), none, a number past the last tick: the
    allocation may have been made at any node, the free at any node after."""
    ticks = [(4, MAIN), (6, MAIN)]
    for label in (None, 7):
        assert lifetimes([entry("alloc", 0x1000, label), entry("free_requested", 0x1000, label)], TOKEN, ticks) == \
            [(0, sys.maxsize)]  # fmt: skip
    other = [entry("alloc", 0x1000, 0, token="launchpad-node-clock-other:"), entry("free_requested", 0x1000, 1)]
    assert lifetimes(other, TOKEN, ticks) == [(0, sys.maxsize)]  # (the free's thread ticks no more: unbounded)
    assert lifetimes([{**entry("alloc", 0x1000, 0), "user_metadata": f"{TOKEN}x"}], TOKEN, ticks) == [(0, sys.maxsize)]
    assert Blocks([(0x1000, 512)]).possible(0, 10**6)  # without lifetimes: any node


class ThreadMetadata:
    """torch's allocator metadata as torch 2.11 keeps it: one string per thread."""

    def __init__(self) -> None:
        self.local = threading.local()

    def set(self, text: str) -> None:
        self.local.text = text

    def get(self) -> str:
        return getattr(self.local, "text", "")


def test_a_node_clock_ticks_around_each_op_and_gives_the_metadata_back(monkeypatch):
    """On the CPU (torch ops are dispatched alike): two ticks per op with the node count then, the
    tick's number in the metadata while the op runs (what its allocations carry) and after it, and
    the user's metadata back at the end."""
    import torch

    from launchpad.core import driver as _driver
    from launchpad.sequences import allocations

    metadata, counts = ThreadMetadata(), itertools.count(10)
    monkeypatch.setattr(torch.cuda.memory, "_set_memory_metadata", metadata.set, raising=False)
    monkeypatch.setattr(torch.cuda.memory, "_get_memory_metadata", metadata.get, raising=False)
    monkeypatch.setattr(_driver, "capturing_graph", lambda stream: 0x6A)
    monkeypatch.setattr(_driver, "graph_node_count", lambda graph: next(counts) if graph == 0x6A else -1)
    allocations.clock_available.cache_clear()
    assert allocations.clock_available()
    metadata.set("the user's")
    seen = []
    with allocations.node_clock(0x5000) as clock:
        assert clock is not None
        x = torch.ones(4)
        seen.append(metadata.get())
        y = x * 2 + 1
    assert torch.equal(y, torch.full((4,), 3.0))
    assert metadata.get() == "the user's"
    assert [count for count, _ in clock.ticks] == list(range(10, 10 + len(clock.ticks)))
    assert len(clock.ticks) == 1 + 2 * 3  # the start, then ones, mul, add
    assert seen == [f"{clock.token}2"]  # after ones: its closing tick
    assert {thread for _, thread in clock.ticks} == {threading.get_ident()}
    allocations.clock_available.cache_clear()


def test_metadata_shared_by_all_threads_gives_no_clock(monkeypatch):
    """Where one thread's metadata is every thread's, a free's bound (its thread's next tick) would
    not hold: no clock, so outputs in reused blocks stay copied."""
    import torch

    from launchpad.core import driver as _driver
    from launchpad.sequences import allocations

    shared = {"text": ""}
    monkeypatch.setattr(torch.cuda.memory, "_set_memory_metadata", lambda text: shared.update(text=text), raising=False)
    monkeypatch.setattr(torch.cuda.memory, "_get_memory_metadata", lambda: shared["text"], raising=False)
    monkeypatch.setattr(_driver, "capturing_graph", lambda stream: 0x6A)
    allocations.clock_available.cache_clear()
    try:
        with allocations.node_clock(0x5000) as clock:
            assert clock is None
    finally:
        allocations.clock_available.cache_clear()


def test_an_address_two_blocks_share_means_what_every_capture_reads_there():
    """The output's end is the next block's start in the capture that runs (the transformer step's
    loss, whose 1 MiB block a gradient's follows on an H100): a word there means the next block
    where the control, whose blocks lie apart, reads it so; it means the output's end where the
    control reads that; where the control reads both, the output is copied."""
    from launchpad.sequences.analysis import Storage
    from launchpad.sequences.outputs import _follow

    def two_words(blocks: list[tuple[int, int]], boundary: int, inside: int) -> Capture:
        node = Node(handle=1, kind="kernel", function=7, name="k", layout=((0, 8), (8, 8)),
                    block=struct.pack("<QQ", boundary, inside))  # fmt: skip
        return Capture(graph=None, nodes=[node], result=None, allocations=Blocks(blocks))

    final = two_words([(0x7F00_0000_1000, 0x200), (0x7F00_0000_1200, 0x200)], 0x7F00_0000_1200, 0x7F00_0000_1010)
    apart = [(0x7F20_0000_1000, 0x200), (0x7F20_0000_9000, 0x200)]
    for control_word, uses in ((0x7F20_0000_9000, [(8, 0x10)]), (0x7F20_0000_1200, [(0, 0x200), (8, 0x10)])):
        storage = Storage(0x200)
        assert _follow(storage, 0, final.nodes, final, two_words(apart, control_word, 0x7F20_0000_1010), never) == ""
        assert [(u.offset, u.delta) for u in storage.uses] == uses
    touching = two_words([(0x7F20_0000_1000, 0x200), (0x7F20_0000_1200, 0x200)], 0x7F20_0000_1200, 0x7F20_0000_1010)
    assert SHARED_ADDRESS in _follow(Storage(0x200), 0, final.nodes, final, touching, never)
    elsewhere = two_words(apart, 0x7F20_0000_1100, 0x7F20_0000_1010)  # into the output, at another offset
    assert "points into it but does not follow it" in _follow(Storage(0x200), 0, final.nodes, final, elsewhere, never)


def test_a_third_capture_whose_blocks_lie_apart_tells_what_a_word_at_a_shared_address_means():
    """The transformer step's loss on an H100 and an H200: its block ends where a gradient's starts in
    the capture that runs and in the control alike (one 2 MiB segment of torch's small pool each), and
    cuBLAS's GEMM holds that address. The third capture, whose pool holds holes, puts the two
    apart: a word that reads the gradient's start there means the gradient (no use of the loss); one
    that reads the loss's end there means that end (a use); one that moves within the loss from capture
    to capture, or a third capture that could not be compared (None), leaves the loss a copy."""
    from launchpad.sequences.analysis import Storage
    from launchpad.sequences.outputs import _follow

    def two_words(blocks: list[tuple[int, int]], boundary: int, inside: int) -> Capture:
        node = Node(handle=1, kind="kernel", function=7, name="k", layout=((0, 8), (8, 8)),
                    block=struct.pack("<QQ", boundary, inside))  # fmt: skip
        return Capture(graph=None, nodes=[node], result=None, allocations=Blocks(blocks))

    final = two_words([(0x7F00_0000_1000, 0x200), (0x7F00_0000_1200, 0x200)], 0x7F00_0000_1200, 0x7F00_0000_1010)
    control = two_words([(0x7F20_0000_1000, 0x200), (0x7F20_0000_1200, 0x200)], 0x7F20_0000_1200, 0x7F20_0000_1010)
    apart = [(0x7F40_0000_1200, 0x200), (0x7F40_0020_0000, 0x200)]  # (the spacers moved both, the loss alone)
    gradient = two_words(apart, 0x7F40_0020_0000, 0x7F40_0000_1210)
    end = two_words(apart, 0x7F40_0000_1400, 0x7F40_0000_1210)
    moved = two_words(apart, 0x7F40_0000_1300, 0x7F40_0000_1210)  # into the loss, at another offset
    for third, uses in ((gradient, [(8, 0x10)]), (end, [(0, 0x200), (8, 0x10)])):
        storage = Storage(0x200)
        assert _follow(storage, 0, final.nodes, final, control, never, third=third) == ""
        assert [(u.offset, u.delta) for u in storage.uses] == uses
    assert "points into it but does not follow it" in _follow(Storage(0x200), 0, final.nodes, final, control, never,
                                                              third=moved)  # fmt: skip
    assert SHARED_ADDRESS in _follow(Storage(0x200), 0, final.nodes, final, control, never, third=None)


def test_the_holes_and_spacers_of_a_capture_are_left_out_of_its_allocations(monkeypatch):
    """What a capture allocates before the function runs (``capture(holes=...)``: holes between
    spacers) is launchpad's, not the function's: torch's history lists it, the allocation facts do
    not, so the function's ``k``-th allocation is the ``k``-th of every capture, holes or none, even
    where the function takes a hole's address again."""
    from launchpad.sequences.allocations import History

    trace: list[dict] = []
    memory = torch.cuda.memory
    monkeypatch.setattr(torch._C, "_cuda_isHistoryEnabled", lambda: False, raising=False)
    monkeypatch.setattr(memory, "_record_memory_history", lambda *a, **k: None)
    monkeypatch.setattr(memory, "_snapshot", lambda: {"device_traces": [trace], "segments": []})
    trace.append({"action": "alloc", "addr": 0x100, "size": 512})  # before the capture: not read
    with History(0) as history:
        trace.append({"action": "alloc", "addr": 0x8000, "size": 64})  # the capture's own, before the holes
        start = history.mark()
        trace.extend([{"action": "alloc", "addr": 0x9000, "size": 512},  # a spacer, a hole, a spacer
                      {"action": "alloc", "addr": 0x9200, "size": MB}, {"action": "alloc", "addr": 0x109200, "size": 512},
                      {"action": "free_requested", "addr": 0x9200, "size": MB}])  # fmt: skip
        history.skip = (start, history.mark())
        trace.extend([{"action": "alloc", "addr": 0x9200, "size": MB}, {"action": "alloc", "addr": 0xB000, "size": 64},
                      {"action": "free_requested", "addr": 0xB000, "size": 64}])  # fmt: skip
    assert history.blocks == [(0x8000, 64), (0x9200, MB), (0xB000, 64)]


def test_holes_are_carved_between_spacers_and_every_segment_filled(monkeypatch):
    """``capture(holes=...)``'s layout, segment by segment of torch's small pool (2 MiB, carved in
    order from its only free block): a spacer, then each hole followed by a spacer, and the rest of
    a segment filled before the next begins (so that the allocator's best fit finds no leftover to
    put a spacer in instead, which would let two holes touch). Only the holes are freed."""
    from launchpad.sequences import capture as _capture

    requests: list[int] = []
    empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda n, **kw: requests.append(n) or empty(n, dtype=kw["dtype"]))
    sizes = (MB, MB, 1536, 512, 3 * 512)
    held = _capture._holes_between_spacers(sizes, "cpu")
    segments, segment, kinds = [], [], []
    todo = list(sizes)
    for n in requests:  # (which request is which, by the order the helper makes them)
        kind = "hole" if todo and segment and kinds[-1] == "spacer" and n == todo[0] else "spacer"
        if kind == "hole":
            todo.pop(0)
        segment.append(n)
        kinds.append(kind)
        if sum(segment) == 2 * MB:
            segments.append(segment)
            segment = []
    assert not todo and not segment and len(segments) == 2  # every hole made, every segment filled exactly
    holes = [i for i, k in enumerate(kinds) if k == "hole"]
    assert all(kinds[i - 1] == "spacer" and kinds[i + 1] == "spacer" and requests[i - 1] == requests[i + 1] == 512
               for i in holes)  # fmt: skip
    assert len(held) == len(requests) - len(sizes)  # the holes freed, the rest held


def test_a_third_capture_is_compared_only_where_its_allocations_and_nodes_are_the_others():
    """The third capture is compared with the others only where its ``k``-th allocation is theirs
    (the control's sizes, in order) and its nodes are the kept capture's: else it is left out
    (None), and a word at an address two blocks share leaves the output a copy, as before."""
    from launchpad.sequences.kept_capture import _alike

    control = capture([(0x1000, 512), (0x1200, MB)], 0x1000)
    same = capture([(0x9000, 512), (0xA000, MB)], 0x9000)
    assert _alike(same, control, control)
    assert not _alike(capture([(0xA000, MB), (0x9000, 512)], 0x9000), control, control)  # another order
    assert not _alike(capture([(0x9000, 512)], 0x9000), control, control)  # one allocation fewer
    other_kernel = capture([(0x9000, 512), (0xA000, MB)], 0x9000)
    other_kernel.nodes[0].function = 8
    assert not _alike(other_kernel, control, control)
    other_grid = capture([(0x9000, 512), (0xA000, MB)], 0x9000)
    other_grid.nodes[0].grid = (2, 1, 1)
    assert not _alike(other_grid, control, control)


def test_the_third_capture_holes_fit_a_quarter_of_the_free_memory_and_running_out_makes_it_without(monkeypatch):
    """The third capture's holes: the control's small-pool sizes in order, up to a quarter of the
    device's free memory (they take up to twice their bytes), never a block above 1 MiB. Where it
    runs out of memory all the same (torch's error, raw or inside a RecordError, or the driver's
    CUDA_ERROR_OUT_OF_MEMORY), it is made again without holes: it still tells the host's leftovers
    apart. Any other failure is the recording's."""
    from launchpad.errors import CudaError, RecordError
    from launchpad.sequences import kept_capture

    control = capture([(0x1000, 512), (0x2000, MB), (0x200000, 4 * MB), (0x3000, MB), (0x4000, 512)], 0x1000)
    assert kept_capture._holes(control) == (512, MB, MB, 512)
    assert kept_capture._holes(control, MB + 512) == (512, MB)  # (in order, a size that no longer fits left out)
    assert kept_capture._holes(control, 1024) == (512, 512)

    asked: list[tuple[int, ...]] = []

    def taker(failure=None):
        def take(**kw):
            asked.append(kw.get("holes", ()))
            if failure is not None and kw.get("holes"):
                raise failure
            return capture([], 0)

        return take

    def free_on(device):
        assert device == 1  # (the recording's device, not the current one)
        return 4 * MB + 2048, 80 << 30

    monkeypatch.setattr(torch.cuda, "mem_get_info", free_on)
    third = kept_capture._third(taker(), control, 1)
    assert asked == [(512, MB)] and third.result is None
    kept_capture._third(taker(), control, -1)  # (the fake GPU: the cap alone)
    assert asked[-1] == (512, MB, MB, 512)

    def broken(device):
        raise RuntimeError("no figure")

    monkeypatch.setattr(torch.cuda, "mem_get_info", broken)
    kept_capture._third(taker(), control, 0)
    assert asked[-1] == (512, MB, MB, 512)

    def chained(error: BaseException, outer: type[BaseException] = RecordError) -> BaseException:
        try:
            raise error
        except BaseException as exc:
            try:
                raise outer("the function could not be captured") from exc
            except BaseException as wrapped:
                return wrapped

    driver_oom = CudaError(2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "cuMemAlloc")
    looped = RecordError("a cycle")
    looped.__cause__ = RecordError("its cause")
    looped.__cause__.__cause__ = looped
    for failure in (torch.cuda.OutOfMemoryError("CUDA out of memory"), chained(torch.cuda.OutOfMemoryError("oom")),
                    driver_oom, chained(driver_oom)):  # fmt: skip
        del asked[:]
        assert kept_capture._third(taker(failure), control, -1) is not None
        assert asked == [(512, MB, MB, 512), ()], failure  # (again without holes)
    for failure in (chained(ValueError("the function raised")), looped,
                    CudaError(700, "CUDA_ERROR_ILLEGAL_ADDRESS", "illegal address", "cuGraphLaunch")):  # fmt: skip
        del asked[:]
        with pytest.raises(type(failure)):
            kept_capture._third(taker(failure), control, -1)
        assert asked == [(512, MB, MB, 512)]
