"""Numba kernels that need more than plain arrays, without a GPU: fp16 and libdevice shims that
numba-cuda links, the module callbacks of linked files, Numba's runtime (refused), and records
(by value, and arrays of them such as numba-cuda's ``xoroshiro128p`` random states)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import math
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("numba.cuda")
# numba-cuda 0.30's own modules (fp16, random) and its dispatcher use ``np.row_stack``, which NumPy
# 2.5 removed: launchpad lends it only while it compiles, so these tests, which import those
# modules and launch through Numba's dispatcher themselves, put it back for the process.
if not hasattr(np, "row_stack"):
    np.row_stack = np.vstack
from numba import cuda
from numba.cuda import fp16, types
from numba.cuda.random import xoroshiro128p_type, xoroshiro128p_uniform_float32
from test_numba import FakeCAI, q

import launchpad as lp
from launchpad.core import driver as _driver
from launchpad.core.loader import Loader
from launchpad.core.spec import ModuleCallbacks

ARCH = "sm_90"


# --- kernels, as numba-cuda's documentation writes them ---------------------------------------------


def half_math(r, x, y):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = fp16.hfma(x[i], y[i], x[i]) - y[i] * x[i] + np.float16(1.5)


def libdevice_math(r, x):
    i = cuda.grid(1)
    if i < r.size:
        r[i] = math.erf(x[i]) + math.lgamma(x[i] + 2.0) + math.exp(-x[i] * x[i])


def compute_pi(rng_states, iterations, out):  # numba-cuda's "Monte Carlo pi" example
    thread_id = cuda.grid(1)
    inside = 0
    for _ in range(iterations):
        x = xoroshiro128p_uniform_float32(rng_states, thread_id)
        y = xoroshiro128p_uniform_float32(rng_states, thread_id)
        if x**2 + y**2 <= 1.0:
            inside += 1
    out[thread_id] = 4.0 * inside / iterations


POINT = np.dtype([("x", np.float32), ("count", np.int64), ("flag", np.uint8)], align=True)
STATES = types.Array(xoroshiro128p_type, 1, "C")
SIGS = {
    "half_math": (half_math, "void(float16[::1], float16[::1], float16[::1])"),
    "libdevice_math": (libdevice_math, "void(float32[::1], float32[::1])"),
    "compute_pi": (compute_pi, (STATES, types.int32, types.float32[::1])),
}


def use_point(p, out):
    out[0] = p.x * 2.0 + p.count + p.flag


def point_kernel():
    from numba.np.numpy_support import from_dtype

    return lp.from_numba(use_point, (from_dtype(POINT), types.float64[::1]), arch=ARCH)


@pytest.fixture(scope="module")
def kernels():
    return {name: lp.from_numba(fn, sig, arch=ARCH) for name, (fn, sig) in SIGS.items()}


# --- fp16 and libdevice shims ---------------------------------------------------------------------


def test_fp16_and_libdevice_kernels_link(kernels, fake_gpu, tmp_path):
    k = kernels["half_math"]
    assert [p.type for p in k.params if p.name.endswith(".data")] == ["*fp16"] * 3
    # numba-cuda's fp16 shim carries only a callback that warns when nvJitLink is missing: dropped
    assert k._loader.callbacks is None
    lp.load(k.save(tmp_path / "half.json"))  # so the kernel can be saved
    fake_gpu.install(k)
    r, x, y = torch.empty(8, dtype=torch.float16), torch.randn(8).half(), torch.randn(8).half()
    k[1, 8](r, x, y)
    assert fake_gpu.last.params[4] == struct.pack("<Q", r.data_ptr()) and fake_gpu.last.params[3] == q(2)[0]
    with pytest.raises(lp.ArgumentTypeError, match=r"argument 1 \('x'\): expected float16 elements"):
        k[1, 8](r, x.float(), y)
    assert kernels["libdevice_math"].binary is not None


# --- module callbacks of linked files -------------------------------------------------------------

CALLBACK_SOURCE = """
__device__ int num = 0;
extern "C" __device__ int get_num(int &retval) { retval = num; return 0; }
"""


class FakeLibrary:
    """What :func:`launchpad.core.driver.load_library` returns in place of a cuda.core ObjectCode."""

    handle = 0xABC


@pytest.fixture
def fake_library(monkeypatch):
    monkeypatch.setattr(_driver, "load_library", lambda image, kind, name, device: (FakeLibrary(), 0x1234))
    monkeypatch.setattr(_driver, "device_context", lambda device: contextlib.nullcontext())


def test_linked_file_callbacks_run_with_the_loaded_module(fake_library):
    from numba.cuda.cudadrv.linkable_code import CUSource

    calls = []
    lib = CUSource(CALLBACK_SOURCE, setup_callback=lambda obj: calls.append(("setup", obj.handle)),
                   teardown_callback=lambda obj: calls.append(("teardown", obj.handle)))  # fmt: skip
    get_num = cuda.declare_device("get_num", "int32()", link=[lib])

    def read_num(arr):
        arr[0] = get_num()

    k = lp.from_numba(read_num, "void(int32[::1])", arch=ARCH)
    callbacks = k._loader.callbacks
    assert len(callbacks.setup) == 1 and len(callbacks.teardown) == 1
    with pytest.raises(lp.LaunchpadError, match=r"kernel 'read_num' cannot be saved: it runs module callbacks"):
        k.save("never.json")
    module = k._loader._load_library(0)
    assert calls == [("setup", 0xABC)] and module.function == 0x1234
    del module
    gc.collect()
    assert calls == [("setup", 0xABC), ("teardown", 0xABC)]  # before the library is unloaded


def test_a_failing_setup_callback_names_the_kernel(fake_library):
    def refuse(obj):
        raise RuntimeError("no such global")

    spec = lp.compile_cuda('extern "C" __global__ void k() {}', "k", arch=90).spec
    loader = Loader(spec.replace(callbacks=ModuleCallbacks(setup=(refuse,))))
    with pytest.raises(lp.LaunchpadError) as err:
        loader._load_library(0)
    assert str(err.value) == (
        "kernel 'k': the module setup callback test_a_failing_setup_callback_names_the_kernel.<locals>.refuse failed "
        "on cuda:0: RuntimeError('no such global')"
    )


def test_kernels_that_allocate_need_numba_runtime_and_are_refused():
    code = """
import numpy as np
from numba import cuda
import launchpad as lp

@cuda.jit
def allocates(r):
    a = np.zeros(4, dtype=np.float32)
    a[1] = 2.0
    r[0] = a[1]

@cuda.jit
def plain(r):
    r[0] = 1.0

lp.from_numba(plain, "void(float32[::1])", arch="sm_90")  # NRT on, nothing allocated: fine
try:
    lp.from_numba(allocates, "void(float32[::1])", arch="sm_90")
except lp.LaunchpadError as exc:
    print(exc)
"""
    env = dict(os.environ, NUMBA_CUDA_ENABLE_NRT="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("kernel 'allocates' uses Numba's runtime (NRT: arrays allocated in the kernel")


# --- records --------------------------------------------------------------------------------------


def test_arrays_of_records_describe_as_opaque_elements(kernels):
    k = kernels["compute_pi"]
    states = k.args[0]
    assert states.converter == "numba_array" and states.options["dtype"] == "V16"
    assert states.options["itemsize"] == 16 and k.params[4].type == "*void"


def test_random_states_array_packs_like_numba(kernels, fake_gpu, monkeypatch):
    k = fake_gpu.install(kernels["compute_pi"])
    monkeypatch.setattr(_driver, "pointer_device", lambda address: -1)  # the fake device's memory
    states = torch.randint(0, 255, (64, 16), dtype=torch.uint8)  # 64 records of 16 bytes
    out = torch.empty(64)
    k[1, 64](states, 100, out)
    p = fake_gpu.last.params
    assert p[:7] == q(0, 0, 64, 16, states.data_ptr(), 64, 16)
    cai = FakeCAI(states, typestr="|V16")  # a Numba device array of records: its interface
    cai.__cuda_array_interface__["shape"], cai.__cuda_array_interface__["strides"] = (64,), None
    k[1, 64](cai, 100, out)
    assert fake_gpu.last.params[:7] == p[:7]
    with pytest.raises(lp.ArgumentTypeError) as err:
        k[1, 64](torch.empty(64, 4), 100, out)
    assert str(err.value) == (
        "kernel 'compute_pi', argument 0 ('rng_states'): expected records of 16 bytes (array(Record(s0[type=uint64;"
        "offset=0],s1[type=uint64;offset=8];16;True), 1d, C)): a Numba device array of the record dtype, or a "
        "torch.uint8 tensor whose last dimension is each record's bytes; got a torch.float32 tensor of shape (64, 4)"
    )
    with pytest.raises(lp.ArgumentTypeError, match="expected records of 16 bytes"):
        k[1, 64](FakeCAI(torch.empty(64, dtype=torch.float64)), 100, out)


def test_record_by_value_is_a_pointer_to_a_device_copy_written_back(fake_gpu, fake_memory, monkeypatch):
    """A numpy record is copied to the device, passed by pointer, and what the kernel wrote there
    comes back after the launch, as Numba's dispatcher does it."""
    k = fake_gpu.install(point_kernel())
    assert k.params[0].type == "*void" and k.args[0].converter == "numba_record"
    records = np.array([(1.5, -7, 3), (2.5, 9, 1)], dtype=POINT)
    rec = records[1]  # an element of an array: written back into the array
    out = torch.empty(1, dtype=torch.float64)

    def kernel_writes(launch):  # what use_point would do to its record on the device
        address = struct.unpack("<Q", launch.params[0])[0]
        ctypes.memmove(address, np.array([(4.0, 5, 6)], dtype=POINT).tobytes(), POINT.itemsize)

    fake_gpu.emulate = kernel_writes
    k[1, 1](rec, out)
    assert records[1].tolist() == (4.0, 5, 6) and records[0].tolist() == (1.5, -7, 3)
    assert fake_memory.events[-3:] == [("in", 24, 0x5000), ("back", 24, 0x5000), ("sync", 0, 0x5000)]
    standalone = np.zeros(1, dtype=POINT)[0].copy()
    k[1, 1](standalone, out)
    assert standalone.tolist() == (4.0, 5, 6)
    fake_gpu.emulate = None
    raw = torch.tensor(list(rec.tobytes()), dtype=torch.uint8)  # a device record: passed by address
    events = len(fake_memory.events)
    k[1, 1](raw, out)
    assert fake_gpu.last.params[0] == struct.pack("<Q", raw.data_ptr()) and len(fake_memory.events) == events
    monkeypatch.setattr(_driver, "pointer_device", lambda address: -1)  # the fake device's memory
    k[1, 1](_one_record(raw), out)
    assert fake_gpu.last.params[0] == struct.pack("<Q", raw.data_ptr())
    other = np.array([(1.5, 2)], dtype=[("x", np.float32), ("count", np.int64)])[0]
    with pytest.raises(lp.ArgumentTypeError, match=r"argument 0 \('p'\): expected a record of Record\(x\[type=float32"):
        k[1, 1](other, out)
    with pytest.raises(lp.ArgumentTypeError, match=r"a tensor must be torch.uint8 holding its 24 bytes"):
        k[1, 1](torch.empty(6), out)
    with pytest.raises(lp.ArgumentTypeError, match=r"\(a numpy record, a Numba device record or a torch.uint8"):
        k[1, 1](1.5, out)
    with pytest.raises(lp.ArgumentError, match=r"Kernel.bind takes no host arrays or records"):
        k.bind(1, 1, rec, out)


def _one_record(raw: torch.Tensor) -> FakeCAI:
    """A Numba ``DeviceRecord``'s interface: shape (), the record's void typestr."""
    cai = FakeCAI(raw)
    cai.__cuda_array_interface__.update(shape=(), strides=None, typestr=f"|V{raw.numel()}")
    return cai


def test_record_kernels_save_and_load(tmp_path, fake_gpu):
    k = lp.load(point_kernel().save(tmp_path / "point.json"))
    assert k.args[0].options["fields"] == [["x", 0, "float32"], ["count", 8, "int64"], ["flag", 16, "uint8"]]
    fake_gpu.install(k)
    raw = torch.tensor(list(np.zeros(1, dtype=POINT)[0].tobytes()), dtype=torch.uint8)
    k[1, 1](raw, torch.empty(1, dtype=torch.float64))
    assert fake_gpu.last.params[0] == struct.pack("<Q", raw.data_ptr())
