"""The replay of a recorded sequence under the conditions that broke it, on the fake GPU
(``tests/fake_graphs.py``), with both replays (the fake GPU's executors) and the nodes updated from
the device (the updater's ring) or the host: another replay between the lock's release and the
result's build, returned views of another dtype, a positional argument past the inputs, a device
that resets its nodes, a full ring, a replay inside another capture, a failed device-side update,
a step that draws random numbers, and the lock's methods looked up once.
"""

from __future__ import annotations

import gc
import struct
import threading
import time
import types

import pytest
import torch
from fake_graphs import FakeGraphs

import launchpad as lp
from launchpad.core import driver as _driver
from launchpad.sequences import creplay as _creplay
from launchpad.sequences import pyreplay as _pyreplay
from launchpad.sequences import state as _state
from launchpad.sequences import updates as _updates

SOURCE = r"""
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
N = 64


@pytest.fixture(scope="module")
def module():
    return lp.compile_cuda_module(SOURCE, ["axpy"], arch="sm_90")


def f32(n: int = N, value: float = 1.0) -> torch.Tensor:
    return torch.full((n,), value)


def axpy_reads(graphs, seq, index: int) -> tuple:
    """``(a, x, y, n)`` node ``index`` (an axpy) reads now."""
    data = graphs.reads(seq, index)
    return (
        struct.unpack_from("<f", data, 0)[0],
        *struct.unpack_from("<QQ", data, 8),
        struct.unpack_from("<i", data, 24)[0],
    )


def rebuild(seq, executor: str) -> None:
    """The sequence's replays made again (after a test changed what they are made from)."""
    seq._state.index()
    seq._replay = _pyreplay.replay_for(seq._state)
    if executor == "compiled":
        seq._replay = _creplay.compiled_replay(seq._state, seq._replay, seq._get_stream)
    assert seq.replay_path == executor


class HookLock:
    """A lock that runs ``after_release`` once, right after its next release (another thread's
    replay, in effect, between this replay's unlock and whatever it does next)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.after_release = None

    def acquire(self, *args):
        return self._lock.acquire(*args)

    def release(self):
        self._lock.release()
        hook, self.after_release = self.after_release, None
        if hook is not None:
            hook()

    def __enter__(self):
        return self._lock.acquire()

    def __exit__(self, *exc):
        self.release()


def test_a_returned_input_is_the_one_this_replay_was_given(module, graphs):
    """Defect 1: the values a result is built from are taken under the lock, not read after it."""
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: (axpy[1, N](1.0, x, y, N), x[8:])[1], f32(), f32())
    seq._state.lock = lock = HookLock()
    rebuild(seq, graphs.fake.executor)
    x2, x3 = f32(), f32()
    lock.after_release = lambda: seq(x3)
    got = seq(x2)
    assert got.data_ptr() == x2.data_ptr() + 32 and got.untyped_storage().data_ptr() == x2.untyped_storage().data_ptr()
    assert seq._state.current[0] is x3 and axpy_reads(graphs, seq, 0)[1] == x3.data_ptr()  # the other replay did run


def test_returned_views_of_another_dtype_keep_it_and_their_byte_position(module, graphs):
    """Defect 2: a view of an input as another dtype or element size comes back as recorded."""
    axpy = graphs.fake.install(module["axpy"])

    def step(x, y):
        axpy[1, N](1.0, x, y, N)
        return x.view(torch.int32), x.view(torch.uint8)[4:]

    seq = graphs.record(step, f32(), f32())
    x2 = f32()
    words, raw = seq(x2)
    assert (words.dtype, words.shape, words.stride(), words.data_ptr()) == (torch.int32, (N,), (1,), x2.data_ptr())
    assert (raw.dtype, raw.shape, raw.stride(), raw.data_ptr()) == (torch.uint8, (4 * N - 4,), (1,), x2.data_ptr() + 4)
    assert torch.equal(words, x2.view(torch.int32)) and torch.equal(raw, x2.view(torch.uint8)[4:])


def test_a_wider_view_a_new_input_cannot_place_is_refused_before_anything_changes(module, graphs):
    """Defect 2: a float64 view 4 bytes into a float32 input starts on a whole float64 only where the
    input sits at an odd float32 of its storage, as it was recorded."""
    axpy = graphs.fake.install(module["axpy"])

    def step(x, y):
        axpy[1, N](1.0, x, y, N)
        return x[1 : N - 1].view(torch.float64)

    seq = graphs.record(step, torch.zeros(N + 1)[1:], f32())
    before = graphs.reads(seq, 0)
    with pytest.raises(lp.ArgumentError, match=r"^sequence input 'x': the recorded function returns a torch\.float64 "
                       r"view of it 4 bytes in, which this tensor would place 4 bytes into its storage, not a whole "
                       r"number of 8-byte elements: pass a tensor at an offset that allows the view$"):  # fmt: skip
        seq(f32())
    assert graphs.reads(seq, 0) == before and not graphs.launched
    x3 = torch.arange(N + 1, dtype=torch.float32)[1:]
    got = seq(x3)
    assert (got.dtype, got.shape, got.data_ptr()) == (torch.float64, ((N - 2) // 2,), x3.data_ptr() + 4)
    assert torch.equal(got, x3[1 : N - 1].view(torch.float64)) and axpy_reads(graphs, seq, 0)[1] == x3.data_ptr()


def test_positional_arguments_are_the_functions_parameters(module, graphs):
    """Defect 3: ``seq(x, 3)`` for ``fn(x, n=1, lr=0.5)`` recorded with x and lr is n, not lr."""
    axpy = graphs.fake.install(module["axpy"])
    y = f32()

    def step(x, n=1, lr=0.5):
        axpy[1, N](lr, x, y, N * n)

    seq = graphs.record(step, f32(), lr=0.125)
    assert seq.inputs == ("x", "lr")
    before = graphs.reads(seq, 0)
    with pytest.raises(lp.ArgumentTypeError, match=r"^parameter 'n' is not an input of this sequence \(it kept its "
                       r"default when recorded; pass inputs by name\)$"):  # fmt: skip
        seq(f32(), 3)
    assert graphs.reads(seq, 0) == before and not graphs.launched
    x2 = f32()
    seq(x2, lr=0.25)
    assert axpy_reads(graphs, seq, 0) == (0.25, x2.data_ptr(), y.data_ptr(), N)


def test_every_replay_writes_the_whole_state_of_the_device_nodes(module, fake_gpu, monkeypatch):
    """Defect 4: where the driver drops the device-side changes (a host-side update, say), the next
    replay's slot still holds every input's last value, never the recorded one."""
    graphs = FakeGraphs(fake_gpu, monkeypatch, device_updates=True)
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y, a: axpy[1, N](a, x, y, N), f32(), f32(), 0.5)
    x2, y2, y3 = f32(), f32(), f32()
    seq(x2, y2, 0.75)
    graphs.reset_device_nodes()
    seq(y=y3)
    assert axpy_reads(graphs, seq, 0) == (0.75, x2.data_ptr(), y3.data_ptr(), N)
    assert graphs.host_updates == []  # (all from the device)


def test_a_full_ring_waits_for_the_device_without_synchronizing(module, fake_gpu, monkeypatch):
    """Defect 5: the replay after SLOTS launches the device has not started waits for the first to
    start (a context or device synchronization would invalidate another thread's capture)."""
    graphs = FakeGraphs(fake_gpu, monkeypatch, device_updates=True)
    gc.collect()  # (the sequences of earlier tests wait for their device as they go: not during this test)
    synced = []
    monkeypatch.setattr(_driver, "synchronize_device", synced.append)
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: axpy[1, N](1.0, x, y, N), f32(), f32())
    graphs.defer = True  # the device runs nothing until run_pending
    xs = [f32() for _ in range(_updates.SLOTS + 1)]
    for x in xs[:-1]:
        seq(x)
    last = threading.Thread(target=seq, args=(xs[-1],))
    last.start()
    time.sleep(0.05)
    assert last.is_alive() and len(graphs.launched) == _updates.SLOTS  # waiting: its slot is launch 0's
    graphs.run_pending(1)
    assert axpy_reads(graphs, seq, 0)[1] == xs[0].data_ptr()  # launch 0 applied its own slot, not overwritten
    last.join(5)
    assert not last.is_alive() and len(graphs.launched) == _updates.SLOTS + 1
    graphs.run_pending()
    assert axpy_reads(graphs, seq, 0)[1] == xs[-1].data_ptr() and synced == []


def test_a_replay_inside_another_capture_is_refused_before_anything_changes(module, graphs):
    """Defect 6: ``with torch.cuda.graph(g): seq(x)`` would join torch's capture with a launch whose
    updates the captured graph never makes."""
    axpy = graphs.fake.install(module["axpy"])
    x = f32()
    seq = graphs.record(lambda x, y: axpy[1, N](1.0, x, y, N), x, f32())
    before = graphs.reads(seq, 0)
    graphs.stream_capturing = True
    with pytest.raises(lp.LaunchpadError, match=r"^a sequence cannot be replayed inside another capture \(torch's "
                       r"current stream is capturing a CUDA graph\): record the whole step with launchpad\.record, or "
                       r"replay the sequence outside the capture$"):  # fmt: skip
        seq(f32())
    assert graphs.reads(seq, 0) == before and not graphs.launched and seq._state.current[0] is x
    graphs.stream_capturing = False
    x2 = f32()
    seq(x2)
    assert axpy_reads(graphs, seq, 0)[1] == x2.data_ptr()


def test_a_failed_device_side_update_is_never_returned_as_good(module, fake_gpu, monkeypatch):
    """Defect 7: the updater records the failure and applies nothing more (no trap); the replay that
    knows it (here the fake device ran its updater before the replay returned) raises instead of
    returning its result, and every later replay raises."""
    graphs = FakeGraphs(fake_gpu, monkeypatch, device_updates=True)
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: (axpy[1, N](1.0, x, y, N), axpy[1, N](2.0, y, x, N))[0], f32(), f32())
    seq(f32())
    graphs.fail_device = seq._state.plan.nodes[1].handle  # (a transient failure of the device runtime)
    message = (r"^a device-side update of this sequence failed in replay 2 \(sequence input 'x', read by node 1 "
               r"\(kernel 'axpy'\), param 2 \('y', \*fp32\): cudaError_t 801\); that replay and every one after it ran "
               r"with stale node values \(their results are wrong\), and the updater applies none since: record it "
               r"again$")  # fmt: skip
    with pytest.raises(lp.LaunchpadError, match=message):
        seq(f32())  # (the update fails on the device, and the fake device ran before the replay returned)
    stale = [graphs.reads(seq, i) for i in range(2)]
    graphs.fail_device = None
    for _ in range(2):
        with pytest.raises(lp.LaunchpadError, match=message):
            seq(f32())
    with pytest.raises(lp.LaunchpadError, match=message):
        seq.check()
    assert seq._state.counters[_state.BROKEN] == 1
    assert [graphs.reads(seq, i) for i in range(2)] == stale and len(graphs.launched) == 2


def test_a_failure_found_later_is_raised_by_check_and_warned_of_when_unreported(module, fake_gpu, monkeypatch):
    """A failure the replay could not know yet (the device behind the host) is raised by ``check()``;
    a sequence released with a failure nobody was told of warns."""
    graphs = FakeGraphs(fake_gpu, monkeypatch, device_updates=True)
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: axpy[1, N](1.0, x, y, N), f32(), f32())
    seq.check()  # (nothing launched, nothing failed)
    graphs.defer = True
    seq(f32())  # returns: the device has not run its updater yet
    graphs.fail_device = seq._state.plan.nodes[0].handle
    graphs.run_pending()
    with pytest.raises(lp.LaunchpadError, match=r"failed in replay 1 \(sequence input 'x'"):
        seq.check()
    seq2 = graphs.record(lambda x, y: axpy[1, N](1.0, x, y, N), f32(), f32())
    graphs.fail_device = None
    seq2(f32())
    graphs.fail_device = seq2._state.plan.nodes[0].handle
    graphs.run_pending()
    with pytest.warns(lp.LaunchpadWarning, match=r"released whose replay 1 failed a device-side update \(cudaError_t "
                      r"801\): that replay's results and every later one's were wrong"):  # fmt: skip
        seq2.close()
    with pytest.raises(lp.LaunchpadError, match=r"^this sequence is closed"):
        seq2(f32())


def test_a_node_the_driver_will_not_update_from_the_device_is_updated_from_the_host(module, fake_gpu, monkeypatch):
    """The cuTile case: before the first replay every device-side update is tried once (outside the
    graph, on a ring of its own); a node the driver refuses is updated from the host, so the first
    replay is right, and the sequence's own ring and counter are untouched by the check."""
    graphs = FakeGraphs(fake_gpu, monkeypatch, device_updates=True)
    axpy = graphs.fake.install(module["axpy"])
    refused = []
    original = graphs._make_updatable

    def updatable(handle):  # the second axpy's node: the driver makes it device-updatable, then refuses updates
        devnode = original(handle)
        if len(graphs.devnodes) % 2 == 0:
            refused.append(handle)
        return devnode

    monkeypatch.setattr(_driver, "make_device_updatable", updatable)
    graphs.refuse_device_updates = refused
    seq = graphs.record(lambda x, y: (axpy[1, N](1.0, x, y, N), axpy[1, N](2.0, y, x, N))[0], f32(), f32())
    assert [i for i, _ in seq.refused_device_updates] == [1] and seq.refused_device_updates[0][1] == 801
    assert seq._state.ring.consumed == 0 and int(seq._state.ring.counter[0]) == 0
    assert "node 1 (kernel 'axpy'): updated from the host (the driver refused a device-side update of it when the " \
        "sequence was made: cudaError_t 801)" in seq.explain()  # fmt: skip
    for _ in range(3):
        x2, y2 = f32(), f32()
        seq(x2, y2)
        assert axpy_reads(graphs, seq, 0)[1:3] == (x2.data_ptr(), y2.data_ptr())
        assert axpy_reads(graphs, seq, 1)[1:3] == (y2.data_ptr(), x2.data_ptr())
    seq.check()
    assert set(graphs.host_updates) == {seq._state.plan.nodes[1].handle}


def test_a_slot_written_for_another_launch_is_a_failure_not_its_values(module, fake_gpu, monkeypatch):
    """The host's count of launches drifting from the device's (a launch it did not count): the updater
    reads a slot stamped for another launch and applies nothing, and the replay says so."""
    graphs = FakeGraphs(fake_gpu, monkeypatch, device_updates=True)
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: axpy[1, N](1.0, x, y, N), f32(), f32())
    x2 = f32()
    seq(x2)
    # a launch the host did not count (as torch's replay falling back could)
    graphs._launch(seq._state.graph_exec, 0x5000)
    before = graphs.reads(seq, 0)
    with pytest.raises(lp.LaunchpadError, match=r"failed in replay 2 \(the ring slot it read was written for another "
                       r"launch \(the host's count of launches drifted\)\)"):  # fmt: skip
        seq(f32())
    assert graphs.reads(seq, 0) == before and axpy_reads(graphs, seq, 0)[1] == x2.data_ptr()


def test_a_left_out_input_whose_tensor_moved_is_followed(module, graphs):
    """A left-out input keeps its tensor, not its address: ``x.set_()``, a reallocating ``resize_`` or
    ``x.data = ...`` moves what the graph must read (its old memory may be freed): the next replay
    follows it, checked as a given tensor would be."""
    axpy = graphs.fake.install(module["axpy"])
    x = f32()
    seq = graphs.record(lambda x, y: axpy[1, N](1.0, x, y, N), x, f32())
    for move in (lambda: x.set_(f32()), lambda: setattr(x, "data", f32())):
        move()
        seq(y=f32())
        assert axpy_reads(graphs, seq, 0)[1] == x.data_ptr()
    x.resize_(2 * N)  # reallocated, and no longer the recorded shape: refused, nothing changed
    before = graphs.reads(seq, 0)
    with pytest.raises(lp.ArgumentError, match=r"sequence input 'x' has shape \(128,\)"):
        seq(y=f32())
    assert graphs.reads(seq, 0) == before


def test_a_step_that_draws_random_numbers_replays_through_torchs_graph(module, graphs):
    """Defect 8: torch's ``CUDAGraph.replay`` moves the generators' offsets, then launches the graph."""
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y, a: axpy[1, N](a, x, y, N), f32(), f32(), 0.5)
    calls, fail = [], []

    def replay():
        calls.append(len(graphs.launched))
        if fail:
            raise RuntimeError("CUDA error: the generator's state")
        graphs._launch(seq._state.graph_exec, 0x5000)

    seq._state.graph, seq._state.rng = types.SimpleNamespace(replay=replay), True
    rebuild(seq, graphs.fake.executor)
    x2 = f32()
    seq(x2, a=0.25)
    assert calls == [0] and axpy_reads(graphs, seq, 0)[:2] == (0.25, x2.data_ptr())
    before, current = graphs.reads(seq, 0), list(seq._state.current)
    fail.append(True)
    with pytest.raises(RuntimeError, match=r"^CUDA error: the generator's state$"):
        seq(f32(), a=4.0)
    assert graphs.reads(seq, 0) == before and seq._state.current == current and len(graphs.launched) == 1
    fail.clear()
    seq(a=-1.0)
    assert axpy_reads(graphs, seq, 0)[:2] == (-1.0, x2.data_ptr())


class CountingLock:
    """A lock that counts how often its ``acquire`` and ``release`` are looked up."""

    def __init__(self):
        self._lock = threading.Lock()
        self.lookups = 0

    def __getattribute__(self, name):
        if name in ("acquire", "release"):
            object.__getattribute__(self, "__dict__")["lookups"] += 1
            return getattr(object.__getattribute__(self, "_lock"), name)
        return object.__getattribute__(self, name)

    def __enter__(self):
        return object.__getattribute__(self, "_lock").acquire()

    def __exit__(self, *exc):
        object.__getattribute__(self, "_lock").release()


def test_the_compiled_replay_looks_its_lock_up_once(module, graphs):
    """Defect 9: the lock's methods are found when the replay is built, not by name each call; the
    lock stays the one the Python replay takes."""
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: axpy[1, N](1.0, x, y, N), f32(), f32())
    seq._state.lock = lock = CountingLock()
    rebuild(seq, graphs.fake.executor)
    for _ in range(5):
        seq(f32())
    assert lock.lookups == (2 if graphs.fake.executor == "compiled" else 0) and not lock._lock.locked()
