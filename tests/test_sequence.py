"""Recorded sequences (``launchpad.record``) on CPU: captures made of the fake GPU's launches.

The fake capture runs the function as it is, each of its launches (packed by the real executors)
becoming a kernel node with that launch's parameter bytes; a fake driver records what a replay
writes into each node (``cuGraphExecKernelNodeSetParams``) and its graph launches. So the
analysis, the checks and the bytes of every update are tested without a GPU.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import struct
import threading
import time
import types
import weakref

import numpy as np
import pytest
import torch

import launchpad as lp
from launchpad.core import driver as _driver
from launchpad.launch import checks as _checks
from launchpad.launch import sequence as _sequence
from launchpad.launch.recording import Node

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
"""


@pytest.fixture(scope="module")
def module():
    return lp.compile_cuda_module(SOURCE, ["axpy", "scale4", "count"], arch="sm_90")


class FakeGraphs:
    """Captures and graph updates on the fake GPU (see the module documentation)."""

    def __init__(self, fake_gpu, monkeypatch):
        self.fake = fake_gpu
        self.specs: dict[int, lp.KernelSpec] = {}  # node handle -> its kernel
        self.updates: list[tuple[int, list[bytes]]] = []  # (node, every parameter's bytes) per update
        self.launched: list[tuple[int, int]] = []  # (graph exec, stream)
        self.extra_nodes: list = []  # nodes a capture appends (nodes launchpad did not make)
        self.handles = itertools.count(0x100)
        self.delay = 0.0
        # the same driver for the compiled replay: C functions, at addresses it calls
        self._c_set_params = _SET_PARAMS(lambda exec_, node, params: self._record_c(node, params))
        self._c_launch = _GRAPH_LAUNCH(lambda exec_, stream: self.launched.append((exec_, stream)) or 0)
        self._c_device = _CTX_GET_DEVICE(lambda out: self._device(out))
        address = functools.partial(ctypes.cast, typ=ctypes.c_void_p)
        monkeypatch.setattr(_driver, "graph_entry_points",
                            lambda: (address(self._c_set_params).value, address(self._c_launch).value))  # fmt: skip
        monkeypatch.setattr(_driver, "launch_entry_points", lambda: (0, 0, address(self._c_device).value))
        monkeypatch.setattr(_sequence.Sequence, "_get_stream", staticmethod(lambda device: 0x5000))
        monkeypatch.setattr(_sequence, "capture", self.capture)
        monkeypatch.setattr(_driver, "set_kernel_node_params", self.set_params)
        monkeypatch.setattr(_driver, "graph_launch", lambda exec_, stream: self.launched.append((exec_, stream)))
        monkeypatch.setattr(_driver, "pointer_device", lambda address: -1 if address else None)
        monkeypatch.setattr(_checks, "current_raw_stream", lambda device: 0x5000)

    def record(self, fn, *args, **kwargs):
        """``launchpad.record`` with the replay of the fake GPU's executor (compiled or Python)."""
        seq = lp.record(fn, *args, compiled=self.fake.executor == "compiled", **kwargs)
        assert seq.replay_path == self.fake.executor
        return seq

    def capture(self, fn, values):
        start = len(self.fake.launches)
        fn(**values)
        nodes = []
        for launch in self.fake.launches[start:]:
            spec = self.fake._kernels[launch.function].spec
            handle = next(self.handles)
            self.specs[handle] = spec
            nodes.append(Node(handle, "kernel", launch.function, launch.grid, launch.block, launch.shared_mem, 0,
                              list(launch.params), types.SimpleNamespace(spec=spec)))  # fmt: skip
        nodes += [extra(values) for extra in self.extra_nodes]
        graph = types.SimpleNamespace(instantiate=lambda: None, raw_cuda_graph_exec=lambda: 0xE0E0)
        return graph, nodes

    def set_params(self, exec_, node, function, grid, block, shared_mem, params, context):
        if self.delay:
            time.sleep(self.delay)  # the GIL is released meanwhile: another thread may run
        spec = self.specs[node]
        pointers = (ctypes.c_void_p * len(spec.params)).from_address(params)
        self.updates.append((node, [ctypes.string_at(pointers[i], p.size) for i, p in enumerate(spec.params)]))

    def _record_c(self, node, params) -> int:
        p = params.contents
        self.set_params(0xE0E0, node, p.func, tuple(p.grid), tuple(p.block), p.shared_mem, p.kernel_params, p.ctx)
        return 0

    def _device(self, out) -> int:
        out[0] = self.fake_device
        return 0

    fake_device = -1  # the fake GPU's device (CPU tensors)


class _NodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_mem", ctypes.c_uint), ("kernel_params", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]  # fmt: skip


_SET_PARAMS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_NodeParams))
_GRAPH_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_CTX_GET_DEVICE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))


@pytest.fixture
def graphs(fake_gpu, monkeypatch) -> FakeGraphs:
    return FakeGraphs(fake_gpu, monkeypatch)


def f32(n: int, value: float = 1.0) -> torch.Tensor:
    return torch.full((n,), value)


def q(address: int) -> bytes:
    return struct.pack("<Q", address)


def test_a_replay_writes_each_new_input_into_the_nodes_that_read_it(module, graphs, monkeypatch):
    axpy = graphs.fake.install(module["axpy"])

    def step(x, y, a):
        axpy[4, 256](a, x, y, 1024)  # node 0: x, y, a
        axpy[4, 256](2.0, y, x, 1024)  # node 1: y, x

    x, y = f32(1024), f32(1024)
    seq = graphs.record(step, x, y, 0.5)
    assert seq.inputs == ("x", "y", "a") and seq.nodes == 2 and not graphs.updates
    python_replays = []
    replay = _sequence.Sequence._python_replay
    monkeypatch.setattr(_sequence.Sequence, "_python_replay", lambda s, *a, **k: python_replays.append(a) or
                        replay(s, *a, **k))  # fmt: skip
    seq()  # nothing new: the graph as recorded
    assert graphs.launched == [(0xE0E0, 0x5000)] and not graphs.updates
    x2 = f32(1024, 3.0)
    seq(x2, a=-1.25)
    first, second = sorted(graphs.updates)  # each node updated once, with every new value
    assert first[1] == [struct.pack("<f", -1.25), q(x2.data_ptr()), q(y.data_ptr()), struct.pack("<i", 1024)]
    assert second[1] == [struct.pack("<f", 2.0), q(y.data_ptr()), q(x2.data_ptr()), struct.pack("<i", 1024)]
    graphs.updates.clear()
    seq(y=f32(1024))  # node 1 reads y too: both nodes again, x2 and a kept
    assert len(graphs.updates) == 2 and all(q(x2.data_ptr()) in params for _, params in graphs.updates)
    assert len(graphs.launched) == 3
    assert python_replays == []  # the compiled replay took every one of them itself


def test_the_sequence_holds_the_tensors_it_points_at(module, graphs):
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: axpy[1, 32](1.0, x, y, 32), f32(32), f32(32))
    x2 = f32(32)
    gone = weakref.ref(x2)
    seq(x2)
    del x2
    assert gone() is not None  # the graph points at it
    seq(f32(32))
    assert gone() is None


def test_views_of_an_input_follow_it(module, graphs):
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: axpy[1, 32](1.0, x[8:], y, 24), f32(32), f32(24))
    x2 = f32(32)
    seq(x2)
    assert graphs.updates[-1][1][1] == q(x2.data_ptr() + 32)  # 8 floats in


def test_every_check_a_launch_makes(module, graphs):
    axpy = graphs.fake.install(module["axpy"])
    scale4 = graphs.fake.install(module["scale4"])
    count = graphs.fake.install(module["count"])

    def step(x, out, s, n):
        scale4[1, 32](out, x, s, 32)
        count[1, 32](torch.empty(1, dtype=torch.uint8), n, 7)

    x, out = f32(128), f32(128)
    seq = graphs.record(step, x, out, 2.0, 5)
    cases = [
        (dict(x=x.double()), lp.ArgumentError, r"^sequence input 'x' is torch\.float64; it was recorded with a "
         r"torch\.float32 tensor of shape \(128,\), strides \(1,\) \(shapes and layouts decide grids and kernels"),
        (dict(x=f32(256)), lp.ArgumentError, r"'x' has shape \(256,\)"),
        (dict(x=f32(256)[::2]), lp.ArgumentError, r"'x' has strides \(2,\)"),
        (dict(x=f32(129)[1:]), lp.ArgumentError, r"^sequence input 'x', read by kernel 'scale4' \(node 0\), param 1 "
         r"\('x', \*fp32\): pointer 0x[0-9a-f]+ is not 16-byte aligned, but the kernel was compiled assuming it is$"),
        (dict(x=1.0), lp.ArgumentTypeError, r"^sequence input 'x' is a tensor, got float 1\.0$"),
        (dict(n=2**31), lp.ArgumentError, r"^sequence input 'n', read by kernel 'count' \(node 1\), param 1 \('n', "
         r"i32\): 2147483648 is out of range for i32$"),
        (dict(n=1.5), lp.ArgumentTypeError, r"param 1 \('n', i32\): expected an int, got float 1\.5$"),
        (dict(s=torch.ones(1)), lp.ArgumentTypeError, r"^sequence input 's' is a number, got a torch\.float32 tensor"),
        (dict(z=1), lp.ArgumentTypeError, r"^this sequence has no input 'z' \(its inputs: x, out, s, n\)$"),
    ]  # fmt: skip
    for given, cls, message in cases:
        with pytest.raises(cls, match=message):
            seq(**given)
    with pytest.raises(lp.ArgumentTypeError, match=r"takes at most 4 arguments \(x, out, s, n\), got 5"):
        seq(x, out, 1.0, 1, 2)
    assert not graphs.updates and not graphs.launched  # nothing half-done by a refused replay
    seq(n=-3, s=0.5)
    params = {node: p for node, p in graphs.updates}
    assert sorted(len(p) for p in params.values()) == [3, 4]
    del axpy


def test_what_cannot_be_replayed_is_refused_at_record(module, graphs):
    axpy = graphs.fake.install(module["axpy"])
    with pytest.raises(lp.RecordError, match=r"^sequence input 'n' decides what the function launches \(node 0 "
                       r"\(kernel 'axpy'\) has grid \(1, 1, 1\), block \(256, 1, 1\); with another value, grid "
                       r"\(4097, 1, 1\), block \(256, 1, 1\)\); a sequence input may only change values its launches read"):  # fmt: skip
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


def test_inputs_bound_with_partial_stay_fixed(module, graphs):
    axpy = graphs.fake.install(module["axpy"])

    def step(x, y, n):
        axpy[(n + 255) // 256, 256](1.0, x, y, n)

    seq = graphs.record(functools.partial(step, n=240), f32(256), f32(256))
    assert seq.inputs == ("x", "y")


def test_an_input_a_foreign_node_reads_can_only_keep_its_value(module, graphs):
    axpy = graphs.fake.install(module["axpy"])
    # a copy the capture holds beside the kernel (a torch op): it reads x
    graphs.extra_nodes.append(lambda values: Node(0x999, "memcpy", values=(values["x"].data_ptr(), 0x7000, 0, 0, 128)))
    x = f32(32)
    seq = graphs.record(lambda x, y: axpy[1, 32](1.0, x, y, 32), x, f32(32))
    seq(x, f32(32))  # x itself: nothing to update there
    with pytest.raises(lp.ArgumentError, match=r"^sequence input 'x' is also read by node 1 \(a memcpy launchpad did "
                       r"not make\), which launchpad cannot update: replay with the recorded tensor"):  # fmt: skip
        seq(f32(32))


def test_numba_and_triton_kernels(graphs):
    numba = pytest.importorskip("numba.cuda")
    from test_numba import SIGS, array_bytes

    fake = graphs.fake
    k = fake.install(lp.from_numba(SIGS["axpy"][0], SIGS["axpy"][1], arch="sm_90"))
    seq = graphs.record(lambda out, x, y, a: k[1, 32](out, x, y, a), f32(32), f32(32), f32(32), 2.0)
    out2 = f32(32)
    seq(out2, a=np.float32(4.0))
    assert graphs.updates[-1][1][:7] == array_bytes(out2)[:7] and graphs.updates[-1][1][-1] == struct.pack("<f", 4.0)
    del numba


def test_replays_from_several_threads_are_serialized(module, graphs):
    axpy = graphs.fake.install(module["axpy"])
    seq = graphs.record(lambda x, y: (axpy[1, 32](1.0, x, y, 32), axpy[1, 32](2.0, x, y, 32)), f32(32), f32(32))
    graphs.delay = 0.001
    inputs = [f32(32) for _ in range(8)]

    def replay(x):
        seq(x)

    threads = [threading.Thread(target=replay, args=(x,)) for x in inputs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # each replay's two updates, then its launch: no replay's update between another's and its launch
    assert len(graphs.updates) == 16 and len(graphs.launched) == 8
    pointers = [params[1] for _, params in graphs.updates]
    assert all(pointers[i] == pointers[i + 1] for i in range(0, 16, 2))
