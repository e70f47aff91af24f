"""Numba front end without a GPU: real Numba compiles and nvJitLink links for sm_90, then the
generated launch path runs against ``fake_gpu`` and the exact parameter bytes are checked.

Numba's kernel ABI (see /work/shared/reference/numba-kernels.md): an array of n dimensions is
``meminfo, parent, nitems, itemsize, data, shape..., strides...`` (5 + 2n params of 8 bytes,
strides in bytes), complex scalars are two floats, booleans one byte.
"""

from __future__ import annotations

import ctypes
import enum
import math
import struct

import numpy as np
import pytest
import torch

pytest.importorskip("numba.cuda")
from numba import cuda
from numba.cuda import types

import launchpad as lp
from launchpad.core import driver as _driver
from launchpad.core.binary import kernels_in_image
from launchpad.frontends.numba import compile as _numba_compile
from launchpad.frontends.numba import frontend as _numba
from launchpad.launch.config import RawStream

ARCH = "sm_90"
CC = (9, 0)


# --- kernels ------------------------------------------------------------------------------------


def axpy(out, x, y, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def scale2d(out, x, s):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = s * x[i, j]


def add_any(out, x, y):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i, j] + y[i, j]


def fortran_copy(out, x):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i, j]


def add3d(out, x, y):
    i, j, k = cuda.grid(3)
    if i < out.shape[0] and j < out.shape[1] and k < out.shape[2]:
        out[i, j, k] = x[i, j, k] + y[i, j, k]


def scalars(ints, uints, floats, cplx, i8, i16, i32, i64, u8, u16, u32, u64, f16, f32, f64, b, c64, c128):
    ints[0] = i8
    ints[1] = i16
    ints[2] = i32
    ints[3] = i64
    uints[0] = u8
    uints[1] = u16
    uints[2] = u32
    uints[3] = u64
    floats[0] = f16
    floats[1] = f32
    floats[2] = f64
    floats[3] = 1.0 if b else 0.0
    cplx[0] = c64
    cplx[1] = c128


def tuple_args(out, pair, mixed):
    out[0] = pair[0] + pair[1] + mixed[0][0, 0] + mixed[1]


def block_reverse(out, x):
    # dynamic shared memory: its size is the launch's shared_mem
    tile = cuda.shared.array(0, dtype=types.float32)
    i = cuda.grid(1)
    t = cuda.threadIdx.x
    if i < x.size:
        tile[t] = x[i]
    cuda.syncthreads()
    j = cuda.blockIdx.x * cuda.blockDim.x + cuda.blockDim.x - 1 - t
    if i < out.size and j < x.size:
        out[i] = tile[cuda.blockDim.x - 1 - t]


def grid_reverse(x, y, n):
    # every block reads what the others wrote before the grid barrier
    g = cuda.cg.this_grid()
    i = cuda.grid(1)
    if i < n:
        y[i] = 2 * x[i]
    g.sync()
    if i < n:
        x[i] = y[n - 1 - i]


lp_test_fma = cuda.declare_device("lp_test_fma", "float32(float32, float32, float32)", abi="c")


def call_cpp(out, x, y, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = lp_test_fma(a, x[i], y[i])


FMA_SOURCE = 'extern "C" __device__ float lp_test_fma(float a, float x, float y) { return a * x + y; }'


def numba_hypot(a, b):
    return math.sqrt(a * a + b * b)


HYPOT_CPP = r"""
extern "C" __device__ float numba_hypot(float a, float b);
extern "C" __global__ void hypot_kernel(float* out, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = numba_hypot(a[i], b[i]);
}
"""

SIGS = {
    "axpy": (axpy, "void(float32[::1], float32[::1], float32[::1], float32)"),
    "scale2d": (scale2d, "void(float32[:, ::1], float32[:, ::1], float32)"),
    "add_any": (add_any, "void(float64[:, :], float64[:, :], float64[:, :])"),
    "fortran_copy": (fortran_copy, "void(float32[:, :], float32[::1, :])"),
    "add3d": (add3d, "void(int32[:, :, ::1], int32[:, :, :], int32[:, :, ::1])"),
    "scalars": (
        scalars,
        "void(int64[::1], uint64[::1], float64[::1], complex128[::1], int8, int16, int32, int64, uint8, uint16, "
        "uint32, uint64, float16, float32, float64, boolean, complex64, complex128)",
    ),
    "tuple_args": (
        tuple_args,
        (types.float64[::1], types.UniTuple(types.float32, 2), types.Tuple((types.float32[:, ::1], types.int16))),
    ),
    "block_reverse": (block_reverse, "void(float32[::1], float32[::1])"),
    "grid_reverse": (grid_reverse, "void(float32[::1], float32[::1], int32)"),
    "call_cpp": (call_cpp, "void(float32[::1], float32[::1], float32[::1], float32)"),
}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """Each kernel compiled once for the module (into the session's private cache)."""
    compiled: dict[str, lp.Kernel] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAUNCHPAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
        fma = lp.compile_cuda_object(FMA_SOURCE, arch=ARCH)

        def get(name: str) -> lp.Kernel:
            if name not in compiled:
                fn, sig = SIGS[name]
                link = [fma] if name == "call_cpp" else []
                compiled[name] = lp.from_numba(fn, sig, arch=ARCH, link=link)
            return compiled[name]

        yield get


def numba_ptx_params(name: str) -> list[tuple[int, int]]:
    """``(offset, size)`` of each parameter of Numba's own PTX ``.entry`` for a kernel."""
    fn, sig = SIGS[name]
    from numba.cuda.core.compiler_lock import global_compiler_lock

    with global_compiler_lock, _numba_compile.compiling_for(CC):
        ptx, _ = cuda.compile(fn, sig, device=False, abi="numba", output="ptx", cc=CC)
    (entry,) = kernels_in_image(ptx.encode(), "ptx").values()
    return [(p.offset, p.size) for p in entry.params]


def array_words(dtype_word: str, ndim: int) -> list[str]:
    return ["*void", "*void", "i64", "i64", f"*{dtype_word}"] + ["i64"] * (2 * ndim)


def q(*values: int) -> list[bytes]:
    return [struct.pack("<q", v) for v in values]


def scalar_outputs(device: str) -> tuple[torch.Tensor, ...]:
    """The four output arrays of the ``scalars`` kernel."""
    dtypes = (torch.int64, torch.uint64, torch.float64, torch.complex128)
    return tuple(torch.zeros(4 if d is not torch.complex128 else 2, dtype=d, device=device) for d in dtypes)


def array_bytes(t) -> list[bytes]:
    """What Numba's dispatcher passes for a tensor (the reference the launches are checked against)."""
    isz = t.element_size()
    return q(0, 0, t.numel(), isz, t.data_ptr(), *t.shape, *(s * isz for s in t.stride()))


# --- parameter lists: launchpad's description == Numba's PTX == the linked cubin ----------------


SCALAR_WORDS = "i8 i16 i32 i64 u8 u16 u32 u64 fp16 fp32 fp64 i1 fp32 fp32 fp64 fp64".split()  # complex: two floats
EXPECTED_WORDS = {
    "axpy": array_words("fp32", 1) * 3 + ["fp32"],
    "scale2d": array_words("fp32", 2) * 2 + ["fp32"],
    "add_any": array_words("fp64", 2) * 3,
    "fortran_copy": array_words("fp32", 2) * 2,
    "add3d": array_words("i32", 3) * 3,
    "scalars": array_words("i64", 1)
    + array_words("u64", 1)
    + array_words("fp64", 1)
    + array_words("void", 1)
    + SCALAR_WORDS,
    "tuple_args": array_words("fp64", 1) + ["fp32", "fp32"] + array_words("fp32", 2) + ["i16"],
    "block_reverse": array_words("fp32", 1) * 2,
    "grid_reverse": array_words("fp32", 1) * 2 + ["i32"],
    "call_cpp": array_words("fp32", 1) * 3 + ["fp32"],
}


@pytest.mark.parametrize("name", list(SIGS))
def test_params_match_numba_ptx_and_cubin(kernels, name):
    k = kernels(name)
    assert [p.type for p in k.params] == EXPECTED_WORDS[name]
    layout = [(p.offset, p.size) for p in k.params]
    assert layout == numba_ptx_params(name)
    # the linked cubin's own parameter records, read independently of the signature
    assert [(p.offset, p.size) for p in kernels_in_image(k.image, "cubin")[k.name].params] == layout
    assert k.image[:4] == b"\x7fELF" and k.name.startswith("_ZN") and k.display_name == name
    assert k.metadata["frontend"] == "numba" and k.metadata["arch"] == ARCH


def test_arguments_map_onto_numba_params(kernels):
    k = kernels("scale2d")
    out, x, s = k.args
    assert (out.name, out.kind, out.path, out.converter) == ("out", "expand", (0,), "numba_array")
    assert out.params == tuple(range(9))
    assert out.options == {"ndim": 2, "dtype": "float32", "layout": "C", "itemsize": 4, "type": "array(float32, 2d, C)"}
    assert x.params == tuple(range(9, 18)) and x.path == (1,)
    assert (s.name, s.kind, s.param) == ("s", "param", 18)
    assert [p.name for p in k.params[9:18]] == [
        "x.meminfo", "x.parent", "x.nitems", "x.itemsize", "x.data",
        "x.shape[0]", "x.shape[1]", "x.strides[0]", "x.strides[1]",
    ]  # fmt: skip
    assert k.plan == lp.LaunchPlan()


# --- packed bytes -------------------------------------------------------------------------------


def test_1d_bytes(kernels, fake_gpu):
    k = fake_gpu.install(kernels("axpy"))
    out, x, y = torch.empty(100), torch.randn(100), torch.randn(100)
    k[4, 32](out, x, y, 2.5)
    launch = fake_gpu.last
    assert (launch.grid, launch.block, launch.stream, launch.shared_mem) == ((4, 1, 1), (32, 1, 1), 0x5000, 0)
    assert launch.ex is None  # a plain cuLaunchKernel
    assert launch.params[:7] == q(0, 0, 100, 4, out.data_ptr(), 100, 4)
    assert launch.params[7:14] == q(0, 0, 100, 4, x.data_ptr(), 100, 4)
    assert launch.params[14:21] == array_bytes(y)
    assert launch.params[21] == struct.pack("<f", 2.5)


def test_2d_c_order_bytes(kernels, fake_gpu):
    k = fake_gpu.install(kernels("scale2d"))
    out, x = torch.empty(3, 5), torch.randn(3, 5)
    k.launch((1, 1), (8, 8), out, x, -1.5)
    p = fake_gpu.last.params
    assert p[:9] == q(0, 0, 15, 4, out.data_ptr(), 3, 5, 20, 4)
    assert p[9:18] == q(0, 0, 15, 4, x.data_ptr(), 3, 5, 20, 4)
    assert p[18] == struct.pack("<f", -1.5)
    # a row slice is still C-contiguous; its extent-1 dimension's stride does not matter
    row = torch.randn(4, 5)[2:3]
    k.launch(1, 32, row, row, 1.0)
    assert fake_gpu.last.params[:9] == q(0, 0, 5, 4, row.data_ptr(), 1, 5, 20, 4)


def test_2d_any_order_takes_views_with_their_strides(kernels, fake_gpu):
    k = fake_gpu.install(kernels("add_any"))
    base = torch.randn(6, 8, dtype=torch.float64)
    transposed = base.t()  # (8, 6), strides (1, 8)
    sliced = base[1:5, ::2]  # (4, 4), strides (8, 2), offset 8 elements
    out = torch.empty(8, 6, dtype=torch.float64)
    k.launch(1, 32, out, transposed, sliced)
    p = fake_gpu.last.params
    assert p[:9] == q(0, 0, 48, 8, out.data_ptr(), 8, 6, 48, 8)
    assert p[9:18] == q(0, 0, 48, 8, base.data_ptr(), 8, 6, 8, 64)
    assert p[18:27] == q(0, 0, 16, 8, base.data_ptr() + 8 * 8, 4, 4, 64, 16)


def test_fortran_layout(kernels, fake_gpu):
    k = fake_gpu.install(kernels("fortran_copy"))
    out = torch.empty(4, 3)
    f = torch.randn(3, 4).t()  # (4, 3) column-major: strides (1, 4)
    k.launch(1, 32, out, f)
    assert fake_gpu.last.params[9:18] == q(0, 0, 12, 4, f.data_ptr(), 4, 3, 4, 16)
    with pytest.raises(lp.ArgumentError) as e:
        k.launch(1, 32, out, torch.randn(4, 3))
    assert str(e.value) == (
        "kernel 'fortran_copy', argument 1 ('x'): the kernel was compiled for a Fortran-contiguous (column-major) "
        "array (array(float32, 2d, F)), got a torch.float32 tensor of shape (4, 3) with strides (3, 1) (in elements)"
    )


def test_3d_bytes(kernels, fake_gpu):
    k = fake_gpu.install(kernels("add3d"))
    out = torch.empty(2, 3, 4, dtype=torch.int32)
    x = torch.randint(-9, 9, (4, 3, 2), dtype=torch.int32).permute(2, 1, 0)  # any order
    y = torch.randint(-9, 9, (2, 3, 4), dtype=torch.int32)
    k.launch((1, 1, 1), (4, 4, 4), out, x, y)
    p = fake_gpu.last.params
    assert p[:11] == q(0, 0, 24, 4, out.data_ptr(), 2, 3, 4, 48, 16, 4)
    assert p[11:22] == q(0, 0, 24, 4, x.data_ptr(), 2, 3, 4, 4, 8, 24)
    assert p[22:33] == array_bytes(y)


def test_every_scalar_type_packs(kernels, fake_gpu):
    k = fake_gpu.install(kernels("scalars"))
    arrays = scalar_outputs("cpu")
    values = (-100, -30000, -2_000_000_000, -(2**62), 200, 60000, 4_000_000_000, 2**64 - 1,
              0.333, 1.5e-3, math.pi, True, 1.25 - 2.5j, -3.5 + 4.25j)  # fmt: skip
    k.launch(1, 1, *arrays, *values)
    p = fake_gpu.last.params
    assert p[21:28] == q(0, 0, 2, 16, arrays[3].data_ptr(), 2, 16)
    assert p[28:] == [
        struct.pack("<b", -100), struct.pack("<h", -30000), struct.pack("<i", -2_000_000_000),
        struct.pack("<q", -(2**62)), b"\xc8", struct.pack("<H", 60000), struct.pack("<I", 4_000_000_000),
        b"\xff" * 8, np.float16(0.333).tobytes(), struct.pack("<f", 1.5e-3), struct.pack("<d", math.pi), b"\x01",
        struct.pack("<f", 1.25), struct.pack("<f", -2.5), struct.pack("<d", -3.5), struct.pack("<d", 4.25),
    ]  # fmt: skip
    # numpy scalars and plain numbers for complex parameters
    k.launch(1, 1, *arrays, *values[:11], np.bool_(False), np.complex64(3 + 1j), 7)
    p = fake_gpu.last.params
    assert p[39:] == [b"\x00", *(struct.pack("<f", v) for v in (3.0, 1.0)), *(struct.pack("<d", v) for v in (7.0, 0.0))]


def test_scalar_refusals(kernels, fake_gpu):
    k = fake_gpu.install(kernels("scalars"))
    arrays = scalar_outputs("cpu")
    good = [1, 2, 3, 4, 5, 6, 7, 8, 0.5, 0.25, 0.125, True, 1j, 2j]
    # ints as Numba converts them: any value whose 8 bits fit, signed or unsigned (128 is -128)
    wrapped = list(good)
    wrapped[0], wrapped[4] = 255, -1  # i8 and u8
    k.launch(1, 1, *arrays, *wrapped)
    assert fake_gpu.last.params[28] == b"\xff" and fake_gpu.last.params[32] == b"\xff"
    wrapped[0], wrapped[4] = np.uint8(128), np.int64(-128)
    k.launch(1, 1, *arrays, *wrapped)
    assert fake_gpu.last.params[28] == b"\x80" and fake_gpu.last.params[32] == b"\x80"
    bad = list(good)
    bad[0] = 256  # no 8 bits hold it: Numba would pass 0, launchpad refuses
    with pytest.raises(lp.ArgumentError) as e:
        k.launch(1, 1, *arrays, *bad)
    assert str(e.value) == (
        "kernel 'scalars', argument 4 ('i8'), param 28 (i8): 256 does not fit in 8 bits (this parameter takes "
        "[-128, 256): a i8 or the same bits as the other signedness); Numba's dispatcher would silently pass its low 8 "
        "bits, 0: pass 0 if that is what you mean"
    )
    bad[0] = 1.5
    with pytest.raises(lp.ArgumentTypeError, match=r"argument 4 \('i8'\), param 28 \(i8\): cannot pack float 1.5"):
        k.launch(1, 1, *arrays, *bad)
    bad = list(good)
    bad[12] = "1j"
    with pytest.raises(lp.ArgumentTypeError) as e:
        k.launch(1, 1, *arrays, *bad)
    assert str(e.value) == "kernel 'scalars', argument 16 ('c64'): expected a complex number, got str '1j'"
    k.launch(1, 1, *arrays, *good)
    assert fake_gpu.last.params[28] == b"\x01"


def test_tuple_arguments(kernels, fake_gpu):
    k = fake_gpu.install(kernels("tuple_args"))
    assert [(a.name, a.path, a.kind) for a in k.args] == [
        ("out", (0,), "expand"), ("pair", (1, 0), "param"), ("pair", (1, 1), "param"),
        ("mixed", (2, 0), "expand"), ("mixed", (2, 1), "param"),
    ]  # fmt: skip
    out, m = torch.empty(1, dtype=torch.float64), torch.randn(2, 3)
    k.launch(1, 1, out, (1.5, -2.0), (m, 7))
    p = fake_gpu.last.params
    assert p[7:9] == [struct.pack("<f", 1.5), struct.pack("<f", -2.0)]
    assert p[9:18] == q(0, 0, 6, 4, m.data_ptr(), 2, 3, 12, 4)
    assert p[18] == struct.pack("<h", 7)
    with pytest.raises(lp.ArgumentError) as e:
        k.launch(1, 1, out, (1.5, -2.0), (m.t(), 7))
    assert str(e.value).startswith(
        "kernel 'tuple_args', argument 2[0] ('mixed'): the kernel was compiled for a C-contiguous"
    )


# --- refusals -------------------------------------------------------------------------------------


def test_array_refusals_name_the_argument(kernels, fake_gpu):
    k = fake_gpu.install(kernels("scale2d"))
    out, x = torch.empty(3, 5), torch.randn(3, 5)
    host = np.ones((3, 10), dtype=np.float32)
    cases = [
        ((out, x.double(), 1.0), lp.ArgumentTypeError,
         "kernel 'scale2d', argument 1 ('x'): expected float32 elements (array(float32, 2d, C)), got a torch.float64 tensor"),
        ((out, x[0], 1.0), lp.ArgumentError,
         "kernel 'scale2d', argument 1 ('x'): expected a 2-d array (array(float32, 2d, C)), got a torch.float32 tensor "
         "of shape (5,)"),
        ((out, x.reshape(3, 5, 1), 1.0), lp.ArgumentError,
         "kernel 'scale2d', argument 1 ('x'): expected a 2-d array (array(float32, 2d, C)), got a torch.float32 tensor "
         "of shape (3, 5, 1)"),
        ((out.t(), x, 1.0), lp.ArgumentError,
         "kernel 'scale2d', argument 0 ('out'): the kernel was compiled for a C-contiguous array (array(float32, 2d, C)), "
         "got a torch.float32 tensor of shape (5, 3) with strides (1, 5) (in elements); .contiguous() makes one"),
        ((out, torch.randn(3, 10)[:, ::2], 1.0), lp.ArgumentError,
         "kernel 'scale2d', argument 1 ('x'): the kernel was compiled for a C-contiguous array (array(float32, 2d, C)), "
         "got a torch.float32 tensor of shape (3, 5) with strides (10, 2) (in elements); .contiguous() makes one"),
        ((out, host[:, ::2], 1.0), lp.ArgumentError,  # host memory is copied whole, as Numba copies it
         "kernel 'scale2d', argument 1 ('x'): a host NumPy array is copied to the device whole, so it must be "
         "contiguous (Numba's dispatcher refuses it too); got shape (3, 5) with strides (10, 2) (in elements); "
         "np.ascontiguousarray() makes one, or pass a device array"),
        ((out, host.astype(np.float64)[:, :5], 1.0), lp.ArgumentTypeError,
         "kernel 'scale2d', argument 1 ('x'): expected float32 elements (array(float32, 2d, C)), got a host NumPy "
         "array of float64"),
        ((out, 3, 1.0), lp.ArgumentTypeError,
         "kernel 'scale2d', argument 1 ('x'): expected an array for array(float32, 2d, C) (a torch tensor, a Numba "
         "device array, an object with __cuda_array_interface__ or a host NumPy array), got int 3"),
    ]  # fmt: skip
    for args, cls, message in cases:
        with pytest.raises(cls) as e:
            k.launch(1, 32, *args)
        assert type(e.value) is cls
        assert str(e.value) == message
    assert fake_gpu.launches == []
    k.launch(1, 32, out, x, 1.0)  # a good launch still works afterwards
    assert fake_gpu.last.params[9:18] == array_bytes(x)


def _emulate_axpy(launch):
    """What axpy does on the device, run on the fake device's (CPU) memory: out = a * x + y."""
    out, x, y = (struct.unpack("<Q", launch.params[4 + 7 * i])[0] for i in range(3))
    n = struct.unpack("<q", launch.params[2])[0]
    (a,) = struct.unpack("<f", launch.params[21])
    view = [np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), (n,)) for ptr in (out, x, y)]
    view[0][:] = a * view[1] + view[2]


def test_host_arrays_are_copied_in_and_back_as_numba_does(kernels, fake_gpu, fake_memory):
    """Host NumPy arrays: copied to the device, launched, synchronized, copied back, as Numba's
    dispatcher does (read-only arrays and ``cuda.In`` not copied back, ``cuda.Out`` not copied in)."""
    k = fake_gpu.install(kernels("axpy"))
    fake_gpu.emulate = _emulate_axpy
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal(256, dtype=np.float32), rng.standard_normal(256, dtype=np.float32)
    out = np.full(256, np.nan, dtype=np.float32)
    k[1, 256](out, x, y, 2.0)
    np.testing.assert_array_equal(out, np.float32(2.0) * x + y)
    # three arrays in, then after the launch: every array back (the dispatcher copies back all
    # it copied in), one synchronization
    assert [e[0] for e in fake_memory.events] == ["in", "in", "in", "back", "back", "back", "sync"]
    assert {e[2] for e in fake_memory.events} == {0x5000}  # the launch's stream

    fake_memory.events.clear()
    x_read_only = x.copy()
    x_read_only.flags.writeable = False
    out2 = np.zeros(256, dtype=np.float32)
    k[1, 256](cuda.Out(out2), x_read_only, cuda.In(y), -1.0)
    np.testing.assert_array_equal(out2, -x + y)
    assert [e[0] for e in fake_memory.events] == [
        "in",
        "in",
        "back",
        "sync",
    ]  # Out not copied in; In, read-only not back

    fake_memory.events.clear()  # device arrays (the fake device's: CPU tensors) and host ones mix
    fake_gpu.emulate = None
    k[1, 256](torch.empty(256), x, torch.empty(256), 1.0)
    assert [e[0] for e in fake_memory.events] == ["in", "back", "sync"]
    with pytest.raises(lp.ArgumentError, match=r"Kernel.bind takes no host arrays or records"):
        k.bind(1, 256, out, x, y, 1.0)


def test_wrong_argument_count(kernels, fake_gpu):
    k = fake_gpu.install(kernels("axpy"))
    x = torch.randn(8)
    with pytest.raises(lp.ArgumentTypeError) as e:
        k.launch(1, 8, x, x, x)
    assert str(e.value) == "kernel 'axpy' takes 4 arguments (out, x, y, a), got 3; missing: a"
    with pytest.raises(lp.ArgumentTypeError) as e:
        k[1, 8](x, x, x, 1.0, 2.0)
    assert str(e.value) == "kernel 'axpy' takes 4 arguments (out, x, y, a), got 5"


def test_device_checks(kernels, fake_gpu):
    k = fake_gpu.install(kernels("axpy"), device=0)  # CPU tensors are now on the wrong device
    x = torch.randn(8)
    with pytest.raises(lp.ArgumentError) as e:
        k.launch(1, 8, x, x, x, 1.0)
    assert (
        str(e.value)
        == "kernel 'axpy', argument 0 ('out'): expected a CUDA tensor, got a torch.float32 tensor on cpu; a pinned CPU tensor (.pin_memory()) would be readable by the device"
    )


class FakeCAI:
    """A device array known only by ``__cuda_array_interface__`` (a CuPy or Numba array)."""

    def __init__(self, tensor, strides=True, typestr=None):
        self.tensor = tensor
        isz = tensor.element_size()
        self.__cuda_array_interface__ = {
            "shape": tuple(tensor.shape),
            "strides": tuple(s * isz for s in tensor.stride()) if strides else None,
            "typestr": typestr or np.dtype(str(tensor.dtype).removeprefix("torch.")).str,
            "data": (tensor.data_ptr(), False),
            "version": 3,
        }


def test_cuda_array_interface_objects(kernels, fake_gpu, monkeypatch):
    k = fake_gpu.install(kernels("add_any"))
    owners = {}
    monkeypatch.setattr(_driver, "pointer_device", lambda address: owners.get(address, -1))
    base = torch.randn(6, 8, dtype=torch.float64)
    out, view = torch.empty(6, 8, dtype=torch.float64), base[::2, 1:]
    k.launch(1, 32, FakeCAI(out, strides=False), FakeCAI(view), base)
    p = fake_gpu.last.params
    assert p[:9] == q(0, 0, 48, 8, out.data_ptr(), 6, 8, 64, 8)  # no strides: C-contiguous
    assert p[9:18] == q(0, 0, 21, 8, base.data_ptr() + 8, 3, 7, 128, 8)
    with pytest.raises(lp.ArgumentTypeError) as e:
        k.launch(1, 32, out, FakeCAI(base.float()), base)
    assert str(e.value) == (
        "kernel 'add_any', argument 1 ('x'): expected float64 elements (array(float64, 2d, A)), got a FakeCAI of float32"
    )
    with pytest.raises(lp.ArgumentError) as e:
        k.launch(1, 32, out, FakeCAI(base[0]), base)
    assert str(e.value) == (
        "kernel 'add_any', argument 1 ('x'): expected a 2-d array (array(float64, 2d, A)), got a FakeCAI of float64 "
        "of shape (8,)"
    )
    owners[base.data_ptr()] = 1
    with pytest.raises(lp.ArgumentError) as e:
        k.launch(1, 32, out, FakeCAI(base), base)
    assert str(e.value) == "kernel 'add_any', argument 1 ('x'): memory is on cuda:1 but the launch is on cuda:-1"
    owners[base.data_ptr()] = None
    with pytest.raises(lp.ArgumentError) as e:
        k.launch(1, 32, out, FakeCAI(base), base)
    assert str(e.value) == (
        f"kernel 'add_any', argument 1 ('x'): address {base.data_ptr():#x} of a FakeCAI is not device memory"
    )
    k2 = fake_gpu.install(kernels("scale2d"))
    with pytest.raises(lp.ArgumentError) as e:
        k2.launch(1, 32, FakeCAI(torch.empty(5, 3).t()), torch.empty(3, 5), 1.0)
    assert str(e.value) == (
        "kernel 'scale2d', argument 0 ('out'): the kernel was compiled for a C-contiguous array "
        "(array(float32, 2d, C)), got a FakeCAI of float32 of shape (3, 5) with strides (1, 3) (in elements); "
        ".contiguous() makes one"
    )


# --- launch forms, cooperative kernels, linking -------------------------------------------------


def test_launch_syntax_stream_and_shared_memory(kernels, fake_gpu):
    k = fake_gpu.install(kernels("axpy"))
    x = torch.randn(64)
    k[2, 32, RawStream(0x1234, -1), 256](x, x, x, 1.0)
    launch = fake_gpu.last
    assert (launch.grid, launch.block, launch.stream, launch.shared_mem) == ((2, 1, 1), (32, 1, 1), 0x1234, 256)
    bound = k.bind(2, 32, x, x, x, 3.0)
    y = torch.randn(64)
    bound(y)  # replaces the first argument for this call
    assert fake_gpu.last.params[:7] == array_bytes(y) and fake_gpu.last.params[21] == struct.pack("<f", 3.0)


def test_grid_sync_kernel_is_cooperative(kernels, fake_gpu):
    k = kernels("grid_reverse")
    assert k.plan.cooperative is True and k.metadata["cooperative"] is True
    assert b"cudaCGSynchronize" in k.image  # libcudadevrt was linked in
    assert kernels("axpy").plan.cooperative is False
    fake_gpu.install(k)
    x, y = torch.randn(300), torch.empty(300)
    k[3, 128](x, y, 300)
    launch = fake_gpu.last
    assert launch.ex == {"cluster": None, "cooperative": True, "pdl": False}
    assert launch.params[:7] == array_bytes(x) and launch.params[14] == struct.pack("<i", 300)


def test_numba_kernel_calls_cpp_device_function(kernels, fake_gpu):
    k = fake_gpu.install(kernels("call_cpp"))
    out, x, y = torch.empty(16), torch.randn(16), torch.randn(16)
    k[1, 16](out, x, y, 0.5)
    assert fake_gpu.last.params[7:14] == array_bytes(x) and fake_gpu.last.params[21] == struct.pack("<f", 0.5)
    with pytest.raises(lp.CompileError) as e:  # without the C++ object the symbol is missing
        lp.from_numba(call_cpp, SIGS["call_cpp"][1], arch=ARCH)
    assert "lp_test_fma" in str(e.value)


def test_declare_device_link_files_are_linked(tmp_path, fake_gpu):
    source = tmp_path / "twice.cu"
    source.write_text('extern "C" __device__ float lp_test_twice(float x) { return 2.0f * x; }')
    twice = cuda.declare_device("lp_test_twice", "float32(float32)", abi="c", link=[str(source)])

    def doubled(out, x):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = twice(x[i])

    k = fake_gpu.install(lp.from_numba(doubled, "void(float32[::1], float32[::1])", arch=ARCH))
    out, x = torch.empty(4), torch.randn(4)
    k[1, 4](out, x)
    assert fake_gpu.last.params == array_bytes(out) + array_bytes(x)


def test_cpp_kernel_calls_numba_device_function(fake_gpu):
    ltoir, _ = cuda.compile(
        numba_hypot, "float32(float32, float32)", device=True, abi="c", abi_info={"abi_name": "numba_hypot"},
        output="ltoir", cc=CC,
    )  # fmt: skip
    cpp = lp.compile_cuda_object(HYPOT_CPP, arch=ARCH)
    k = lp.link([cpp, ltoir], "hypot_kernel", arch=ARCH, signature="*fp32, *fp32, *fp32, i32")
    layout = [(p.offset, p.size, p.type) for p in k.params]
    assert layout == [(0, 8, "*fp32"), (8, 8, "*fp32"), (16, 8, "*fp32"), (24, 4, "i32")]
    assert "hypot_kernel" in kernels_in_image(k.image, "cubin")
    fake_gpu.install(k)
    out, a, b = torch.empty(8), torch.randn(8), torch.randn(8)
    k[1, 8](out, a, b, 8)
    assert fake_gpu.last.params == [struct.pack("<Q", t.data_ptr()) for t in (out, a, b)] + [struct.pack("<i", 8)]


# --- front end details ----------------------------------------------------------------------------


def test_dispatcher_input_and_ptx_path(fake_gpu):
    dispatcher = cuda.jit(fastmath=True)(axpy)  # lazy: nothing compiles here, no GPU needed
    k = lp.from_numba(dispatcher, SIGS["axpy"][1], arch=ARCH, lto=False)
    assert k.display_name == "axpy" and [a.name for a in k.args] == ["out", "x", "y", "a"]
    assert [p.type for p in k.params] == EXPECTED_WORDS["axpy"]
    fake_gpu.install(k)
    x = torch.randn(8)
    k[1, 8](x, x, x, 2.0)
    assert fake_gpu.last.params[:7] == array_bytes(x)


def test_public_compile_fallback(monkeypatch, fake_gpu):
    """Where numba-cuda lacks the internal entry point, ``numba.cuda.compile``'s PTX is used."""
    monkeypatch.setattr(_numba_compile, "internal_compiler", lambda: None)
    k = lp.from_numba(grid_reverse, SIGS["grid_reverse"][1], arch=ARCH)
    assert k.plan.cooperative is True and k.name.startswith("_ZN")
    assert [p.type for p in k.params] == EXPECTED_WORDS["grid_reverse"]
    fake_gpu.install(k)
    x = torch.randn(4)
    k[1, 4](x, x, 4)
    assert fake_gpu.last.ex["cooperative"] is True


def test_save_and_load_keep_the_numba_mapping(kernels, fake_gpu, tmp_path):
    k = kernels("add_any")
    loaded = lp.load(k.save(tmp_path / "add_any.json"))
    assert loaded.args == k.args and loaded.params == k.params and loaded.plan == k.plan
    fake_gpu.install(loaded)
    base = torch.randn(4, 6, dtype=torch.float64)
    loaded.launch(1, 32, base, base.t(), base[:2, :3])
    assert fake_gpu.last.params[9:18] == array_bytes(base.t())
    assert fake_gpu.last.params[18:27] == q(0, 0, 6, 8, base.data_ptr(), 2, 3, 48, 8)


def test_unsupported_signatures():
    def k(a):
        pass

    with pytest.raises(lp.LaunchpadError) as e:
        lp.from_numba(k, (types.NPDatetime("s"),), arch=ARCH)
    assert str(e.value).startswith("kernel 'k', argument 'a': launchpad cannot pass Numba type datetime64[s]")
    with pytest.raises(lp.LaunchpadError) as e:
        lp.from_numba(k, "int32(int32)", arch=ARCH)
    assert str(e.value) == "kernel 'k': a kernel returns nothing, the signature returns int32"
    with pytest.raises(lp.LaunchpadError) as e:
        lp.from_numba(cuda.jit(device=True)(k), "void(int32)", arch=ARCH)
    assert str(e.value) == "'k' is a device function (device=True), not a kernel"


def test_numba_typing_errors_are_compile_errors():
    def bad(a):
        a[0] = "text"

    with pytest.raises(lp.CompileError) as e:
        lp.from_numba(bad, "void(float32[::1])", arch=ARCH)
    assert str(e.value).startswith("Numba could not compile kernel 'bad'")


def test_layout_checks_agree_with_torch_contiguity():
    """The C and F layout checks accept exactly what torch calls contiguous (F: reversed dims)."""
    from launchpad.core.spec import Arg
    from launchpad.frontends.numba.args import array_converter
    from launchpad.launch.checks import Context

    base = torch.randn(4, 5, 6)
    views = [
        base, base.permute(2, 1, 0), base.permute(1, 0, 2), base[:, 1:3], base[1:2], base[:, :, 2:3],
        base[::2], base[:1, :1], base[:, :1, :1], base[:0], torch.randn(1, 5, 1), torch.randn(4, 1, 1).expand(4, 5, 6),
        base.permute(2, 1, 0)[:, :, 1:2], base.permute(2, 1, 0)[1:3],
    ]  # fmt: skip
    for layout in "CFA":
        convert = array_converter(3, "float32", layout, 4)
        arg = Arg("x", "expand", (0,), options={"ndim": 3, "dtype": "float32", "layout": layout, "itemsize": 4})
        ctx = Context("k", (), (arg,))
        for v in views:
            expected = {"C": v.is_contiguous(), "F": v.permute(2, 1, 0).is_contiguous(), "A": True}[layout]
            try:
                values = convert(v, -1, 0, ctx, arg)
            except lp.ArgumentError:
                accepted = False
            else:
                accepted = True
                assert values == (0, 0, v.numel(), 4, v.data_ptr(), *v.shape, *(4 * s for s in v.stride()))
            assert accepted == expected, (layout, tuple(v.shape), v.stride())


def zero_d(out, x):
    out[()] = x[()] * 2


def test_zero_dimensional_arrays(fake_gpu):
    sig = (types.Array(types.float32, 0, "C"), types.Array(types.float32, 0, "A"))
    k = fake_gpu.install(lp.from_numba(zero_d, sig, arch=ARCH))
    assert [p.type for p in k.params] == array_words("fp32", 0) * 2
    out, x = torch.zeros(()), torch.randn(())
    k[1, 1](out, x)
    assert fake_gpu.last.params == q(0, 0, 1, 4, out.data_ptr()) + q(0, 0, 1, 4, x.data_ptr())
    with pytest.raises(lp.ArgumentError) as e:
        k[1, 1](out, torch.randn(1))
    assert str(e.value) == (
        "kernel 'zero_d', argument 1 ('x'): expected a 0-d array (array(float32, 0d, A)), got a torch.float32 tensor "
        "of shape (1,)"
    )


def test_pointer_and_enum_arguments_describe_as_scalars():
    import enum

    class Mode(enum.IntEnum):
        A = 1

    words, names, args = _numba.describe_arguments(
        (types.CPointer(types.float32), types.voidptr, types.IntEnumMember(Mode, types.int16)), ["p", "v", "mode"]
    )
    assert words == ["*fp32", "*void", "i16"] and names == ["p", "v", "mode"]
    assert [(a.kind, a.param, a.path) for a in args] == [("param", 0, (0,)), ("param", 1, (1,)), ("param", 2, (2,))]


def test_compiles_on_numpy_without_row_stack():
    """NumPy 2.5 removed np.row_stack, which numba-cuda 0.30 overloads on first import of its
    array module; from_numba lends the alias while compiling and takes it back."""
    import subprocess
    import sys
    from pathlib import Path

    code = """
import numpy as np
if hasattr(np, "row_stack"):
    del np.row_stack  # what NumPy 2.5 looks like
import launchpad as lp
def k(x, n):
    pass
kernel = lp.from_numba(k, "void(float32[::1], int32)", arch=90)
print(len(kernel.params), hasattr(np, "row_stack"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).parents[1], env={**__import__("os").environ, "PYTHONPATH": str(Path(__file__).parents[1])})  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["8", "False"]  # 5 + 2 params for the array, 1 for n


def reshape_first(out, x):
    i = cuda.grid(1)
    if i == 0:
        out[0] = x.reshape(2, 4)[1, 2]


def test_a_kernel_that_reshapes_links_numbas_helpers():
    """``reshape`` calls numba-cuda's reshape_funcs.cu, which its dispatcher (not its compiler)
    links: launchpad links it too, or nvJitLink would find the function unresolved."""
    k = lp.from_numba(reshape_first, "void(float32[::1], float32[::1])", arch="sm_90")
    assert k.name and len(k.params) == 14


def test_what_only_numbas_dispatcher_does_is_refused():
    debug = cuda.jit(debug=True, opt=False)(axpy)
    with pytest.raises(lp.LaunchpadError, match=r"kernel 'axpy' is compiled with debug=True .*reports the exceptions"):
        lp.from_numba(debug, SIGS["axpy"][1], arch="sm_90")

    class Extension:
        def prepare_args(self, ty, val, stream, retr):
            return ty, val

    extended = cuda.jit(extensions=[Extension()])(axpy)
    with pytest.raises(lp.LaunchpadError, match=r"kernel 'axpy' has dispatcher extensions \(Extension\)"):
        lp.from_numba(extended, SIGS["axpy"][1], arch="sm_90")


def fill_one(r, nothing):
    r[0] = 1


def test_empty_tuples_are_arguments_that_pass_nothing(fake_gpu, tmp_path):
    """An empty tuple argument (Numba's ``Tuple(())``) takes no parameter but is still an argument."""
    sig = (types.int32[::1], types.Tuple((types.Tuple(()), types.Tuple(()))))
    k = lp.from_numba(fill_one, sig, arch="sm_90")
    assert len(k.params) == 7 and k.spec.arg_count == 2
    for kernel in (k, lp.load(k.save(tmp_path / "fill_one.json"))):
        fake_gpu.install(kernel)
        r = torch.zeros(1, dtype=torch.int32)
        kernel[1, 1](r, ((), ()))
        assert fake_gpu.last.params == array_bytes(r)
        with pytest.raises(lp.ArgumentError, match=r"argument 1\[0\] \('nothing'\): the kernel was specialized for"):
            kernel[1, 1](r, ((1,), ()))


def test_integer_arrays_of_the_other_signedness_pass_as_numba_passes_them(kernels, fake_gpu):
    """A kernel compiled for ``int32`` arrays takes ``uint32`` ones (and the reverse): Numba's
    dispatcher converts between them for a kernel of explicit types; the bits are the kernel's.
    A float array for an int one is refused, as Numba refuses it."""
    k = fake_gpu.install(kernels("add3d"))  # int32[:, :, ::1] arrays
    out, x, y = (torch.zeros(2, 3, 4, dtype=torch.int32) for _ in range(3))
    k[1, 1](out, x.view(torch.uint32), y)
    assert fake_gpu.last.params[11 + 4] == struct.pack("<Q", x.data_ptr())  # after out's 5 + 2 * 3
    with pytest.raises(lp.ArgumentTypeError, match=r"expected int32 elements .*got a torch.float32 tensor"):
        k[1, 1](out, x.float(), y)
    with pytest.raises(lp.ArgumentTypeError, match=r"expected int32 elements .*got a torch.int64 tensor"):
        k[1, 1](out, x.long(), y)


class Color(enum.Enum):
    RED = 1
    GREEN = 2


class Planet(enum.Enum):
    MERCURY = (3.303e23, 2.4397e6)
    VENUS = (4.869e24, 6.0518e6)


def same(a, b, out):
    out[0] = a == b


def test_enum_members_pass_their_values(fake_gpu):
    """An ``Enum`` member is passed as its value (a tuple value flattened), as Numba passes it."""
    from numba.cuda.typing.typeof import typeof

    out = torch.zeros(1, dtype=torch.bool)
    for a, b, pack in ((Color.RED, Color.GREEN, "<q"), (Planet.MERCURY, Planet.VENUS, "<d")):
        k = fake_gpu.install(lp.from_numba(same, (typeof(a), typeof(b), types.bool_[::1]), arch="sm_90"))
        k[1, 1](a, b, out)
        values = [
            v for member in (a, b) for v in (member.value if isinstance(member.value, tuple) else (member.value,))
        ]
        assert fake_gpu.last.params[: len(values)] == [struct.pack(pack, v) for v in values]
    with pytest.raises(lp.ArgumentTypeError, match=r"argument 0 \('a'\): expected a member of enum Planet, got Color"):
        k[1, 1](Color.RED, Planet.VENUS, out)


def test_a_numba_device_arrays_own_strides_are_passed(kernels, fake_gpu, monkeypatch):
    """numba-cuda's ``__cuda_array_interface__`` leaves out a broadcast array's strides (it reads as
    contiguous); its dispatcher passes the array's own, with their 0: so does launchpad."""
    base = torch.rand(1, dtype=torch.float64)

    class DeviceNDArray:  # what numba-cuda makes of a scalar a ufunc broadcasts
        __module__ = "numba.cuda.cudadrv.devicearray"
        shape, strides = (3, 4), (0, 0)

        @property
        def __cuda_array_interface__(self) -> dict:
            return {"shape": (3, 4), "strides": None, "typestr": "<f8", "version": 3, "data": (base.data_ptr(), False)}

    monkeypatch.setattr(_driver, "pointer_device", lambda address: -1)
    k = fake_gpu.install(kernels("add_any"))  # float64[:, :] arrays
    out = torch.empty(3, 4, dtype=torch.float64)
    k[1, (3, 4)](out, DeviceNDArray(), out)
    assert fake_gpu.last.params[9:18] == q(0, 0, 12, 8, base.data_ptr(), 3, 4, 0, 0)  # after out's 5 + 2 * 2
