"""Recorded sequences (``launchpad.record``) on CPU: captures made of the fake GPU's launches.

Each test runs with both replays (the fake GPU's executors) and, where it matters, with the nodes
updated from the device (the updater's ring) and from the host; ``tests/fake_graphs.py`` keeps
what each node of the instantiated graph reads, so the tests check that, whichever way it got there.
"""

from __future__ import annotations

import functools
import gc
import struct
import weakref

import numpy as np
import pytest
import torch
from fake_graphs import run_threads

import launchpad as lp
from launchpad.sequences import pyreplay as _pyreplay
from launchpad.sequences.capture import far_probe, probe
from launchpad.sequences.state import LAUNCHES

SOURCE = r"""
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void scale4(float4* out, const float4* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = make_float4(s * x[i].x, s * x[i].y, s * x[i].z, s * x[i].w);
}
extern "C" __global__ void count(unsigned char* out, int n, long long m) { if (threadIdx.x == 0) out[0] = n + m; }
extern "C" __global__ void flagged(float* out, bool flag, int n) { if (flag) out[0] = n; }
"""


@pytest.fixture(scope="module")
def module():
    return lp.compile_cuda_module(SOURCE, ["axpy", "scale4", "count", "flagged"], arch="sm_90")


def f32(n: int, value: float = 1.0) -> torch.Tensor:
    return torch.full((n,), value)


def q(address: int) -> bytes:
    return struct.pack("<Q", address)


def axpy_reads(graphs, seq, index):
    """``(a, x, y, n)`` node ``index`` (an axpy) reads now."""
    data = graphs.reads(seq, index)
    return (
        struct.unpack_from("<f", data, 0)[0],
        *struct.unpack_from("<QQ", data, 8),
        struct.unpack_from("<i", data, 24)[0],
    )


def test_a_replay_points_each_node_at_its_new_inputs(module, graphs, monkeypatch):
    axpy = graphs.fake.install(module["axpy"])
    python_replays = []
    real = _pyreplay.replay
    monkeypatch.setattr(_pyreplay, "replay", lambda seq, a, k: python_replays.append(a) or real(seq, a, k))

    def step(x, y, a):
        axpy[4, 256](a, x, y, 1024)  # node 0: x, y, a
        axpy[4, 256](2.0, y, x, 1024)  # node 1: y, x

    x, y = f32(1024), f32(1024)
    seq = graphs.record(step, x, y, 0.5)
    assert seq.inputs == ("x", "y", "a") and seq.nodes == 2 and seq() is None
    assert axpy_reads(graphs, seq, 0) == (0.5, x.data_ptr(), y.data_ptr(), 1024)
    x2 = f32(1024, 3.0)
    seq(x2, a=-1.25)
    assert axpy_reads(graphs, seq, 0) == (-1.25, x2.data_ptr(), y.data_ptr(), 1024)
    assert axpy_reads(graphs, seq, 1) == (2.0, y.data_ptr(), x2.data_ptr(), 1024)
    y2 = f32(1024)
    seq(y=y2)  # x2 and a kept
    assert axpy_reads(graphs, seq, 0) == (-1.25, x2.data_ptr(), y2.data_ptr(), 1024)
    assert axpy_reads(graphs, seq, 1) == (2.0, y2.data_ptr(), x2.data_ptr(), 1024)
    assert len(graphs.launched) == 3
    if graphs.rings:  # from the device: the host updated no node, and the graph was uploaded first
        assert graphs.host_updates == [] and graphs.uploads == 1
    assert "written into 2 place(s)" in seq.explain()
    assert python_replays == ([] if graphs.fake.executor == "compiled" else [(), (x2,), ()])  # C took every one


def test_the_sequence_holds_what_its_graph_reads_and_nothing_else(module, graphs):
    axpy = graphs.fake.install(module["axpy"])
    x0 = f32(32)
    seq = graphs.record(lambda x, y: axpy[1, 32](1.0, x, y, 32), x0, f32(32))
    first = weakref.ref(x0)
    x2 = f32(32)
    gone = weakref.ref(x2)
    seq(x2)
    del x0, x2
    gc.collect()
    assert first() is None and gone() is not None  # the recorded tensor released once replaced; the new one held
    seq(f32(32))
    assert gone() is None


def test_views_of_an_input_follow_it(module, graphs):
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: axpy[1, 32](1.0, x[8:], y, 24), f32(32), f32(24))
    x2 = f32(32)
    seq(x2)
    assert axpy_reads(graphs, seq, 0)[1] == x2.data_ptr() + 32  # 8 floats in


def test_every_check_a_launch_makes(module, graphs):
    scale4 = graphs.fake.install(module["scale4"])
    count = graphs.fake.install(module["count"])
    scratch = torch.empty(1, dtype=torch.uint8)

    def step(x, out, s, n):
        scale4[1, 32](out, x, s, 32)
        count[1, 32](scratch, n, 7)

    x, out = f32(128), f32(128)
    seq = graphs.record(step, x, out, 2.0, 5)
    where_n = r"sequence input 'n', read by node 1 \(kernel 'count'\), param 1 \('n', i32\)"
    cases = [
        (dict(x=x.double()), lp.ArgumentError, r"^sequence input 'x' is torch\.float64; it was recorded with a "
         r"torch\.float32 tensor of shape \(128,\), strides \(1,\) \(shapes and layouts decide grids and kernels"),
        (dict(x=f32(256)), lp.ArgumentError, r"'x' has shape \(256,\)"),
        (dict(x=f32(256)[::2]), lp.ArgumentError, r"'x' has strides \(2,\)"),
        (dict(x=f32(129)[1:]), lp.ArgumentError, r"^sequence input 'x', read by node 0 \(kernel 'scale4'\), param 1 "
         r"\('x', \*fp32\): pointer 0x[0-9a-f]+ is not 16-byte aligned, but the kernel was compiled assuming it is$"),
        (dict(x=1.0), lp.ArgumentTypeError, r"^sequence input 'x' is a tensor, got float 1\.0$"),
        (dict(n=2**31), lp.ArgumentError, rf"^{where_n}: 2147483648 is out of range for i32$"),
        (dict(n=1.5), lp.ArgumentTypeError, rf"^{where_n}: expected an int, got float 1\.5$"),
        (dict(n="5"), lp.ArgumentTypeError, r"^sequence input 'n' is a number, got str '5'$"),
        (dict(s=torch.ones(1)), lp.ArgumentTypeError, r"^sequence input 's' is a number, got a torch\.float32 tensor"),
        (dict(z=1), lp.ArgumentTypeError, r"^this sequence has no input 'z' \(its inputs: x, out, s, n\)$"),
    ]  # fmt: skip
    before = [graphs.reads(seq, i) for i in range(2)]
    for given, cls, message in cases:
        with pytest.raises(cls, match=message):
            seq(**given)
    with pytest.raises(lp.ArgumentTypeError, match=r"takes at most 4 arguments \(x, out, s, n\), got 5"):
        seq(x, out, 1.0, 1, 2)
    with pytest.raises(lp.ArgumentTypeError, match=r"got input 'x' twice"):
        seq(x, x=x)
    assert [graphs.reads(seq, i) for i in range(2)] == before and not graphs.launched  # nothing half-done
    seq(n=-3, s=0.5)
    assert graphs.reads(seq, 1)[8:12] == struct.pack("<i", -3) and graphs.reads(seq, 0)[16:20] == struct.pack("<f", 0.5)


def test_what_cannot_be_replayed_is_refused_at_record(module, graphs):
    axpy = graphs.fake.install(module["axpy"])
    with pytest.raises(lp.RecordError, match=r"^sequence input 'n' decides what the function launches \(node 0 "
                       r"\(kernel 'axpy'\) has grid \(1, 1, 1\), block \(256, 1, 1\); with another value, grid "
                       r"\(4097, 1, 1\), block \(256, 1, 1\)\)"):  # fmt: skip
        graphs.record(lambda x, y, n: axpy[(n + 255) // 256, 256](1.0, x, y, n), f32(256), f32(256), 240)
    with pytest.raises(lp.RecordError, match=r"^sequence input 'a': node 0 \(kernel 'axpy'\), param 0 \('a', fp32\) "
                       r"changes with it but is not it \(a value computed from an input, such as lr \* 2"):  # fmt: skip
        graphs.record(lambda x, y, a: axpy[1, 32](a * 2, x, y, 32), f32(32), f32(32), 0.5)
    with pytest.raises(lp.RecordError, match=r"^sequence input 'unused' reaches no launch launchpad can find"):
        graphs.record(lambda x, y, unused: axpy[1, 32](1.0, x, y, 32), f32(32), f32(32), 3)
    with pytest.raises(lp.ArgumentTypeError, match=r"^sequence input 'name' must be a CUDA tensor, an int, a float"):
        graphs.record(lambda x, y, name: axpy[1, 32](1.0, x, y, 32), f32(32), f32(32), "a")
    with pytest.raises(lp.ArgumentTypeError, match=r"must name each input \(no \*args or \*\*kwargs\)"):
        graphs.record(lambda *t: axpy[1, 32](1.0, *t, 32), f32(32), f32(32))
    with pytest.raises(lp.RecordError, match=r"returns the result = float 2\.0: a sequence returns tensors"):
        graphs.record(lambda x, y: axpy[1, 32](1.0, x, y, 32) or 2.0, f32(32), f32(32))


def test_a_partial_keeps_what_it_binds_alive_with_the_sequence(module, graphs):
    """Defect 1: the docs bind values with functools.partial; the graph holds their addresses."""
    axpy = graphs.fake.install(module["axpy"])

    def step(x, y):
        axpy[1, 32](1.0, x, y, 32)

    y = f32(32)
    bound = weakref.ref(y)
    seq = graphs.record(functools.partial(step, y=y), f32(32))
    assert seq.inputs == ("x",)
    del y
    gc.collect()
    assert bound() is not None  # the sequence keeps fn, and fn keeps y
    seq(f32(32))
    assert axpy_reads(graphs, seq, 0)[2] == bound().data_ptr()
    del seq
    gc.collect()
    assert bound() is None


def test_a_value_computed_from_two_inputs_is_refused(module, graphs):
    """Defect 2: max(m, n) recorded with m == n follows both probes; neither input owns it."""
    count = graphs.fake.install(module["count"])
    out = torch.empty(1, dtype=torch.uint8)
    with pytest.raises(lp.RecordError, match=r"^node 0 \(kernel 'count'\), param 1 \('n', i32\) changes with inputs "
                       r"'m' and 'n': a value computed from several inputs \(such as max\(m, n\)\)"):  # fmt: skip
        graphs.record(lambda m, n: count[1, 32](out, max(m, n), 7), 5, 5)


def test_nodes_launchpad_cannot_look_into_are_refused_by_name(module, graphs):
    """Defect 3: a child graph reading an input, a host function, a conditional node."""
    axpy = graphs.fake.install(module["axpy"])
    from launchpad.sequences.capture import Node

    def child(x, y):
        axpy[1, 32](1.0, x, y, 32)
        inner = Node(0x77, "kernel", 0xF1, (1, 1, 1), (32, 1, 1), 0, 0, ((0, 8),), q(x.data_ptr()), None, "inner")
        graphs.node("graph", children=[inner])

    with pytest.raises(lp.RecordError, match=r"^sequence input 'x' is read inside a child graph \(node 1 \(a graph "
                       r"node\)\), whose nodes launchpad does not update"):  # fmt: skip
        graphs.record(child, f32(32), f32(32))
    for kind in ("host", "conditional"):
        with pytest.raises(lp.RecordError, match=rf"has node 1 \(a {kind} node\), which launchpad cannot look into"):
            graphs.record(lambda x, y, kind=kind: (axpy[1, 32](1.0, x, y, 32), graphs.node(kind))[0], f32(32), f32(32))


def test_a_true_bool_parameter_leaves_scalar_inputs_free(module, graphs):
    """Defect 4: struct's ``?`` packs any truthy value as 1; that must not block an int input."""
    flagged = graphs.fake.install(module["flagged"])
    seq = graphs.record(lambda out, n: flagged[1, 1](out, True, n), f32(4), 5)
    seq(n=9)
    assert graphs.reads(seq, 0)[8:9] == b"\x01" and graphs.reads(seq, 0)[12:16] == struct.pack("<i", 9)


def test_probes_keep_what_kernels_specialize_on():
    """Defect 9: 17 ^ 0x10 is 1, which Triton specializes on; probes keep width, sign and residue."""
    for value in [17, 1, 0, 16, -17, 2**31 - 1, -(2**31), 2**40 + 17, 5]:
        p = probe(value)
        assert p != value and p != 1 and (p < 0) == (value < 0) and p % 16 == value % 16
        assert (-(2**31) <= p < 2**31) == (-(2**31) <= value < 2**31)
        far = far_probe(value)
        assert (-(2**31) <= far < 2**31) == (-(2**31) <= value < 2**31) and far % 16 == value % 16
    assert probe(True) is False and probe(2.0) == 5.0 and probe(float("nan")) == 1.0


def test_numba_and_triton_kernels(graphs):
    pytest.importorskip("numba.cuda")
    from test_numba import SIGS, array_bytes

    k = graphs.fake.install(lp.from_numba(SIGS["axpy"][0], SIGS["axpy"][1], arch="sm_90"))
    seq = graphs.record(lambda out, x, y, a: k[1, 32](out, x, y, a), f32(32), f32(32), f32(32), 2.0)
    out2 = f32(32)
    seq(out2, a=np.float32(4.0))
    data = graphs.reads(seq, 0)
    assert data[: len(b"".join(array_bytes(out2)[:7]))] == b"".join(array_bytes(out2)[:7])
    assert data[-4:] == struct.pack("<f", 4.0)


def test_replays_from_several_threads_are_serialized(module, graphs):
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: (axpy[1, 32](1.0, x, y, 32), axpy[1, 32](2.0, x, y, 32))[0], f32(32), f32(32))
    graphs.delay = 0.001
    inputs = [f32(32) for _ in range(8)]
    seen = []
    real = graphs._launch

    def launch(exec_, stream):  # what both nodes read as each launch starts
        real(exec_, stream)
        seen.append((axpy_reads(graphs, seq, 0)[1], axpy_reads(graphs, seq, 1)[1]))

    graphs._launch = launch
    run_threads(seq, [(x,) for x in inputs])
    assert len(seen) == 8 and all(a == b for a, b in seen)  # each launch saw one replay's input in both nodes
    assert sorted(a for a, _ in seen) == sorted(x.data_ptr() for x in inputs)


def test_a_dropped_sequence_waits_for_its_device_not_a_stream_that_may_be_gone(module, graphs, monkeypatch):
    """Its last replay may have run on a thread's own stream, destroyed since: the finalizer waits on
    the device (the updater of a launch in flight still reads the ring; its kernels use the graph's
    memory pool, which goes back to the allocator with the graph), with or without a ring."""
    from launchpad.core import driver as _driver

    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: axpy[1, 32](1.0, x, y, 32), f32(32), f32(32))
    seq(f32(32))
    gc.collect()  # (an earlier test's sequence, held by a cycle, is not this one)
    waits = []
    monkeypatch.setattr(_driver, "synchronize", lambda stream: pytest.fail(f"synchronized stream {stream:#x}"))
    monkeypatch.setattr(_driver, "synchronize_device", waits.append)
    del seq
    gc.collect()
    assert waits == [-1]


def test_close_releases_what_the_sequence_owns_through_its_one_state(module, graphs, monkeypatch):
    """Both replays are given the sequence's one ``SequenceState`` (the compiled one the very objects
    the Python one uses); leaving a ``with`` block closes the sequence, which releases through it, once."""
    from launchpad.core import driver as _driver

    axpy = graphs.fake.install(module["axpy"])
    gc.collect()  # (an earlier test's sequence, held by a cycle, is not this one)
    waits = []
    monkeypatch.setattr(_driver, "synchronize_device", waits.append)
    x = f32(32)
    with graphs.record(lambda x, y: axpy[1, 32](1.0, x, y, 32), x, f32(32)) as seq:
        st = seq._state
        assert st.names == seq.inputs and st.current[0] is x and st.counters[LAUNCHES] == 0
        x2 = f32(32)
        seq(x2)
        assert st.current[0] is x2 and st.counters[LAUNCHES] == 1  # written by the replay, of either kind
        held = weakref.ref(x2)
        del x2
        assert not waits
    assert waits == [-1] and st.closed and seq._state is st
    assert st.graph is None and st.ring is None and st.targets == {} and st.current == [] and held() is None
    seq.close()  # (idempotent)
    assert waits == [-1]
    for call in (lambda: seq(f32(32)), seq.check):
        with pytest.raises(lp.LaunchpadError, match=r"^this sequence is closed"):
            call()
