"""The two replays of a recorded sequence agree: over random new values (every scalar width, bad
types, tensors of another dtype, shape, layout or alignment), the compiled and the Python replay
leave every node of their graph reading the same bytes, or raise the same exception with the same
message; and a replay writes what a launch with the same values writes. Also the replay's failure
paths: a driver that refuses an update or a launch, more inputs than the C stack holds, tables
that point outside a node.
"""

from __future__ import annotations

import ctypes
import struct
import threading

import numpy as np
import pytest
import torch
from conftest import why_executor_unavailable
from fake_graphs import FakeGraphs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import launchpad as lp
from launchpad.launch import executor as _executor
from launchpad.launch import layouts as L

pytestmark = pytest.mark.skipif(
    bool(why_executor_unavailable("compiled")), reason=why_executor_unavailable("compiled") or ""
)

SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void scalars(unsigned long long* out, const float* x, signed char i8, unsigned char u8,
                                   short i16, unsigned short u16, int i32, unsigned u32, long long i64,
                                   unsigned long long u64, __half f16, __nv_bfloat16 bf16, float f32, double f64,
                                   bool b) {}
"""
NAMES = ["i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f16", "bf16", "f32", "f64", "b"]
RECORDED = [3, 200, -5, 60000, 7, 9, -11, 13, 1.5, 2.5, 3.5, 4.5, True]


@pytest.fixture(scope="module")
def kernels():
    typed = lp.compile_cuda(SOURCE, "scalars", arch="sm_90")
    return typed, lp.load_cubin(typed.image, typed.name)  # the same kernel untyped: sizes only


def step_of(k):
    def step(out, x, i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64, b):
        k[1, 1](out, x, i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64, b)

    return step


@pytest.fixture(params=["device", "host"])
def pair(request, kernels, monkeypatch):
    """One step recorded twice on one fake GPU: replayed by C, and by Python."""
    from conftest import FakeGPU

    gpu = FakeGPU(monkeypatch, "python")
    graphs = FakeGraphs(gpu, monkeypatch, device_updates=request.param == "device")
    out, x = torch.empty(1, dtype=torch.uint64), torch.randn(16)
    seqs = []
    for compiled in (True, False):
        k = gpu.install(lp.Kernel(kernels[0].spec))
        seqs.append(lp.record(step_of(k), out, x, *RECORDED, compiled=compiled))
    assert [s.replay_path for s in seqs] == ["compiled", "python"]
    return graphs, seqs


def outcome(graphs, seq, values: dict):
    try:
        seq(**values)
    except Exception as exc:
        return ("raised", type(exc), str(exc))
    return ("replayed", graphs.reads(seq, 0))


ints = st.one_of(st.integers(-(2**64), 2**65), st.sampled_from([0, 1, -1, 2**7, 2**15, 2**31, 2**32, 2**63, 2**64]))
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e39, -1e39, 65520.0, 1e-46]))
scalars = st.one_of(ints, floats, st.booleans(), st.none(), st.text(max_size=2), st.builds(np.int32, ints.filter(
    lambda v: -(2**31) <= v < 2**31)), st.builds(np.float32, st.floats(width=32)))  # fmt: skip
tensors = st.sampled_from(["same", "new", "float64", "short", "strided", "misaligned", "number"])


def tensor_of(kind: str) -> object:
    return {"same": None, "new": torch.randn(16), "float64": torch.randn(16, dtype=torch.float64),
            "short": torch.randn(8), "strided": torch.randn(32)[::2], "misaligned": torch.randn(17)[1:],
            "number": 1.0}[kind]  # fmt: skip


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chosen=st.dictionaries(st.sampled_from(NAMES), scalars, max_size=5), x=tensors)
def test_both_replays_write_the_same_bytes_or_raise_the_same_error(pair, chosen, x):
    graphs, (compiled, python) = pair
    values = dict(chosen)
    if tensor_of(x) is not None:
        values["x"] = tensor_of(x)
    got = outcome(graphs, compiled, values), outcome(graphs, python, values)
    assert got[0] == got[1]


@pytest.mark.parametrize("typed", [True, False], ids=["typed", "untyped"])
def test_a_replay_writes_what_a_launch_writes(kernels, fake_gpu, monkeypatch, typed):
    """Defect 5: the untyped parameters too (a negative int, a float where an int was recorded)."""
    graphs = FakeGraphs(fake_gpu, monkeypatch)
    k = fake_gpu.install(kernels[0] if typed else kernels[1])
    out, x = torch.empty(1, dtype=torch.uint64), torch.randn(16)
    recorded = [-3, 200, -5, 60000, -7, 9, -11, 13, 1.5, 2.5, 3.5, 4.5, True]
    seq = graphs.record(step_of(k), out, x, *recorded)
    for values in ([-1, 255, -2, 65535, -3, 2**32 - 1, -4, 2**64 - 1, -1.25, 3.0, 2.5, -0.5, False],
                   [1, 0, 7, 1, 2.5 if not typed else 8, 4, 2**63 - 1, 0, 65504.0, -0.0, 1e-3, 1e300, True]):  # fmt: skip
        seq(out, x, *values)
        k[1, 1](out, x, *values)
        assert graphs.reads(seq, 0) == b"".join(_placed(k, fake_gpu.last.params))


def _placed(k, params):
    """A launch's parameter bytes laid out at their offsets."""
    block = bytearray(max(p.offset + p.size for p in k.params))
    for p, data in zip(k.params, params):
        block[p.offset : p.offset + p.size] = data
    return [bytes(block)]


@pytest.mark.parametrize("where", ["update", "launch"])
def test_a_refused_update_or_launch_leaves_the_graph_as_it_was(kernels, fake_gpu, monkeypatch, where):
    """Defect 7: the nodes, and the values the sequence holds, as before the failed replay."""
    graphs = FakeGraphs(fake_gpu, monkeypatch, device_updates=False)
    k = fake_gpu.install(kernels[0])
    out = torch.empty(1, dtype=torch.uint64)

    def step(x, y, i32):
        k[1, 1](out, x, 3, 200, -5, 60000, i32, 9, -11, 13, 1.5, 2.5, 3.5, 4.5, True)
        k[1, 1](out, y, 3, 200, -5, 60000, i32, 9, -11, 13, 1.5, 2.5, 3.5, 4.5, True)

    x, y = torch.randn(16), torch.randn(16)
    seq = graphs.record(step, x, y, 7)
    before = [graphs.reads(seq, i) for i in range(2)]
    if where == "update":
        graphs.fail_update = seq._state.plan.nodes[1].handle  # the second node refuses: the first must be undone
    else:
        graphs.fail_launch = True
    with pytest.raises(lp.CudaError):
        seq(torch.randn(16), torch.randn(16), 8)
    current = seq._state.current
    assert [graphs.reads(seq, i) for i in range(2)] == before and current[0] is x and current[2] == 7
    graphs.fail_update, graphs.fail_launch = None, False
    x2 = torch.randn(16)
    seq(x2, i32=9)
    assert graphs.words(seq, 0)[1] == x2.data_ptr() and graphs.reads(seq, 1)[24:28] == struct.pack("<i", 9)


def test_more_inputs_than_the_c_stack_holds(fake_gpu, monkeypatch):
    """Defect 8: 70 inputs, replayed by C all the same."""
    graphs = FakeGraphs(fake_gpu, monkeypatch)
    names = [f"v{i}" for i in range(70)]
    namespace: dict = {"graphs": graphs}
    exec(f"def step({', '.join(names)}):\n    graphs.foreign('k', *[(4, v.to_bytes(4, 'little')) for v in "
         f"[{', '.join(names)}]])", namespace)  # fmt: skip
    seq = graphs.record(namespace["step"], *[100 + 64 * i for i in range(70)])
    assert seq.replay_path == fake_gpu.executor
    seq(*range(1000, 1070))
    assert graphs.reads(seq, 0) == b"".join(struct.pack("<i", v) for v in range(1000, 1070))


def test_the_compiled_replay_refuses_tables_that_reach_outside_a_node_or_a_ring_slot():
    """Defect 10: a use's offset is checked against its target's block when the replay is built; and
    each device target's use has one ring entry of its own, within a slot."""
    claunch = _executor._claunch
    state, staged, ring = (ctypes.c_uint64 * 2)(), (ctypes.c_uint64 * 1)(), (ctypes.c_uint64 * 32)()
    kernel = L.KernelTarget(kind=1, handle=0x100, function=0x200, grid=(1, 1, 1), block=(1, 1, 1), shared_mem=0,
                            context=0, blob=bytearray(16), pointers=0x300)  # fmt: skip
    device = L.DeviceTarget(kind=0, handle=0xD00, size=16)

    def use(target, offset, size, entry):
        return L.ReplayUse(
            target=target, offset=offset, size=size, kind=0, delta=0, align=0, multiple_of=0, entry=entry
        )

    def tables(uses, targets, staged_words, ring_table):
        x = L.ReplayInput(name="x", is_tensor=True, dtype=0, shape=(), strides=(), uses=uses, python_only=False)
        return L.ReplayTables(
            inputs=(x,), targets=targets, outputs=(), exec=0, device=0, entry_points=L.GraphEntryPoints(1, 1, 1, 1, 1),
            ctx_get_device=0, counters=ctypes.addressof(state), ring=ring_table,
            staged=L.Staged(address=ctypes.addressof(staged), words=staged_words), current=[None], fallback=print,
            build=None, lock=threading.Lock(), keep=(), tensor_types=(), get_stream=None, positional=1,
            snapshot=False, launch=None,
        )  # fmt: skip

    ring_table = L.Ring(address=ctypes.addressof(ring), slots=2, capacity=2)
    for target, u, ok in [
        (kernel, use(0, 8, 8, -1), ""),
        (kernel, use(0, 12, 8, -1), "bad use"),
        (kernel, use(1, 0, 8, -1), "bad use"),
        (kernel, use(0, 0, 9, -1), "bad use"),
        (kernel, use(0, 0, 8, 0), "bad use"),  # a host target's use in the ring
        (device, use(0, 0, 8, -1), "bad use"),  # a device target's use out of it
        (device, use(0, 0, 8, 1), "ring entry 1 is not one of 0 to 0"),
        (device, use(0, 8, 8, 0), ""),
    ]:  # fmt: skip
        if not ok:
            claunch.Replay(tables((u,), (target,), 1, ring_table))
        else:
            with pytest.raises(ValueError, match=rf"^{ok}"):
                claunch.Replay(tables((u,), (target,), 1, ring_table))
    with pytest.raises(ValueError, match=r"^1 staged words for 0 uses"):
        claunch.Replay(tables((), (), 1, None))
    with pytest.raises(TypeError, match=r"^a ReplayTables needs the field inputs"):  # read by name, never by position
        claunch.Replay(tuple(tables((), (), 0, None)))


@pytest.mark.parametrize("value, cls, message", [
    (1e39, lp.ArgumentError, r"^kernel 'scalars', argument 11 \('bf16'\), param 11 \(bf16\): 1e\+39 is out of range "
     r"for bf16$"),
    ("x", lp.ArgumentTypeError, r"^kernel 'scalars', argument 11 \('bf16'\), param 11 \(bf16\): expected a float for "
     r"a bf16 parameter, got str 'x'$"),
])  # fmt: skip
def test_a_bf16_argument_out_of_range_names_the_kernel(kernels, fake_gpu, value, cls, message):
    """Defect 10: no bare OverflowError or struct.error from either executor."""
    k = fake_gpu.install(lp.compile_cuda(SOURCE, "scalars", arch="sm_90",
                                         signature="*u64, *fp32, i8, u8, i16, u16, i32, u32, i64, u64, fp16, bf16, fp32, "
                                         "fp64, i1"))  # fmt: skip
    args = [torch.empty(1, dtype=torch.uint64), torch.randn(16), *RECORDED]
    args[11] = value
    with pytest.raises(cls, match=message):
        k[1, 1](*args)


def test_the_updater_compiles_and_links_with_the_device_runtime(monkeypatch):
    """NVRTC, then nvJitLink with CUDA's libcudadevrt.a: what device-side updates need, built here."""
    from launchpad.core import driver as _driver
    from launchpad.core import toolchain
    from launchpad.sequences import updates

    if toolchain.device_runtime() is None:
        pytest.skip("no libcudadevrt.a here (launchpad's cu12/cu13 extra brings it)")
    loaded = []
    monkeypatch.setattr(_driver, "driver_version", lambda: 13000)
    monkeypatch.setattr(_driver, "compute_capability", lambda device: (9, 0))
    monkeypatch.setattr(_driver, "load_function", lambda cubin, name, device: loaded.append((cubin, name)) or ("m", 7))
    monkeypatch.setattr(_driver, "module_function", lambda module, name: loaded.append((module, name)) or 8)
    updates._functions.cache_clear()
    try:
        assert updates.updater(0) == (7, "") and updates.copier(0) == 8
        (cubin, name), (module, copy) = loaded[:2]
        assert cubin[:4] == b"\x7fELF" and name == "launchpad_apply_updates" and b"launchpad_apply_updates" in cubin
        assert module == "m" and copy == "launchpad_copy_bytes" and b"launchpad_copy_bytes" in cubin
        monkeypatch.setattr(_driver, "driver_version", lambda: 12030)
        updates._functions.cache_clear()
        assert updates.updater(0) == (0, "the driver is older than CUDA 12.4 (no device-side graph updates)")
        monkeypatch.setattr(_driver, "driver_version", lambda: 13000)
        monkeypatch.setattr(toolchain, "device_runtime", lambda: None)
        updates._functions.cache_clear()
        assert updates.copier(0) == 0 and updates.updater(0)[1].startswith(
            "CUDA's device runtime (libcudadevrt.a) is not installed"
        )
    finally:
        updates._functions.cache_clear()


def test_the_copy_kernel_copies_every_size_and_alignment(tmp_path):
    """launchpad's copy kernel (``updates.COPY_SOURCE``, the text NVRTC compiles), built as host C++
    with gcc and run thread by thread: every size to 150 bytes, every offset of either end within
    16 bytes, several grids; the bytes copied equal the source's and no byte outside is touched."""
    import shutil
    import subprocess

    from launchpad.sequences import updates

    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler here")
    harness = (
        r"""
#include <cstdio>
#include <cstring>
struct uint4 { unsigned int x, y, z, w; };
struct dim3_ { unsigned int x; };
static dim3_ blockIdx, blockDim, threadIdx, gridDim;
#define __global__
#define __device__
"""
        + updates.COPY_SOURCE
        + r"""
int main() {
    alignas(16) static unsigned char src[256], dst[256], want[256];
    const unsigned int grids[][2] = {{1, 1}, {2, 3}, {3, 32}, {5, 64}};
    for (unsigned n = 0; n <= 150; n++)
        for (unsigned from = 0; from < 16; from++)
            for (unsigned to = 0; to < 16; to++)
                for (const auto& g : grids) {
                    for (unsigned k = 0; k < 256; k++) src[k] = (unsigned char)(k * 7 + 1), dst[k] = want[k] = 0xEE;
                    memcpy(want + to, src + from, n);
                    gridDim.x = g[0], blockDim.x = g[1];
                    for (blockIdx.x = 0; blockIdx.x < g[0]; blockIdx.x++)
                        for (threadIdx.x = 0; threadIdx.x < g[1]; threadIdx.x++)
                            launchpad_copy_bytes(dst + to, src + from, n);
                    if (memcmp(dst, want, 256)) { printf("wrong: n %u from %u to %u grid %u x %u\n", n, from, to, g[0], g[1]); return 1; }
                }
    printf("ok\n");
    return 0;
}
"""
    )
    (tmp_path / "copy.cpp").write_text(harness)
    subprocess.run([compiler, "-O1", "-std=c++17", "-fno-strict-aliasing", "-o", str(tmp_path / "copy"),
                    str(tmp_path / "copy.cpp")], check=True)  # fmt: skip
    run = subprocess.run([str(tmp_path / "copy")], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout == "ok\n", run.stdout
