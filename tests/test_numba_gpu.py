"""Numba kernels through launchpad on a real GPU, checked against torch on random inputs.

The kernels are those of ``test_numba.py``, compiled here for the current device.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("numba.cuda")
from numba import cuda
from test_numba import FMA_SOURCE, HYPOT_CPP, SIGS, numba_hypot

import launchpad as lp

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def kernels():
    fma = lp.compile_cuda_object(FMA_SOURCE)
    compiled: dict[str, lp.Kernel] = {}

    def get(name: str) -> lp.Kernel:
        if name not in compiled:
            fn, sig = SIGS[name]
            compiled[name] = lp.from_numba(fn, sig, link=[fma] if name == "call_cpp" else [])
        return compiled[name]

    return get


def rand(*shape, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(*shape, device="cuda", dtype=dtype)
    return torch.randint(-1000, 1000, shape, device="cuda", dtype=dtype)


def nans(*shape, dtype=torch.float32):
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def blocks(n: int, per_block: int) -> int:
    return (n + per_block - 1) // per_block


def test_1d(kernels):
    k = kernels("axpy")
    n = 10_007
    out, x, y, a = nans(n), rand(n), rand(n), float(np.random.default_rng().normal())
    k[blocks(n, 256), 256](out, x, y, a)
    torch.testing.assert_close(out, a * x + y)
    # the same through launch(), on a side stream
    out2 = nans(n)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    k.launch(blocks(n, 128), 128, out2, x, y, a, stream=side)
    side.synchronize()
    torch.testing.assert_close(out2, out)


def test_2d_c_order(kernels):
    k = kernels("scale2d")
    x, out, s = rand(37, 53), nans(37, 53), 1.7
    k[(blocks(37, 16), blocks(53, 16)), (16, 16)](out, x, s)
    torch.testing.assert_close(out, s * x)
    rows = rand(9, 53)[3:7]  # a row slice stays C-contiguous
    out = nans(4, 53)
    k[(1, blocks(53, 16)), (16, 16)](out, rows, -2.0)
    torch.testing.assert_close(out, -2.0 * rows)


def test_2d_any_order_with_transposed_and_sliced_views(kernels):
    k = kernels("add_any")
    base_x, base_y = rand(40, 30, dtype=torch.float64), rand(64, 90, dtype=torch.float64)
    x = base_x.t()  # (30, 40), strides (1, 30)
    y = base_y[5:35, 7:87:2]  # (30, 40), strides (90, 2), offset
    out_base = nans(40, 30, dtype=torch.float64)
    out = out_base.t()  # writing through a transposed view
    k[(blocks(30, 8), blocks(40, 8)), (8, 8)](out, x, y)
    torch.testing.assert_close(out, x + y)
    torch.testing.assert_close(out_base, (x + y).t())


def test_fortran_layout(kernels):
    k = kernels("fortran_copy")
    f = rand(23, 17).t()  # (17, 23), column-major
    out = nans(17, 23)
    k[(blocks(17, 8), blocks(23, 8)), (8, 8)](out, f)
    torch.testing.assert_close(out, f)


def test_3d(kernels):
    k = kernels("add3d")
    out = torch.zeros(6, 7, 5, device="cuda", dtype=torch.int32)
    x = rand(5, 7, 6, dtype=torch.int32).permute(2, 1, 0)
    y = rand(6, 7, 5, dtype=torch.int32)
    k[(1, 1, 1), (8, 8, 8)](out, x, y)
    assert torch.equal(out, x + y)


def test_every_scalar_type(kernels):
    k = kernels("scalars")
    rng = np.random.default_rng()
    ints = [int(rng.integers(-(2 ** (b - 1)), 2 ** (b - 1))) for b in (8, 16, 32, 64)]
    uints = [int(rng.integers(0, 2**b, dtype=np.uint64)) for b in (8, 16, 32, 64)]
    f16, f32, f64 = (float(v) for v in rng.normal(size=3))
    flag = bool(rng.integers(0, 2))
    c64, c128 = complex(*rng.normal(size=2)), complex(*rng.normal(size=2))
    outs = [torch.full((4,), 7, device="cuda", dtype=torch.int64), torch.full((4,), 7, device="cuda", dtype=torch.uint64),
            nans(4, dtype=torch.float64), nans(2, dtype=torch.complex128)]  # fmt: skip
    k[1, 1](*outs, *ints, *uints, f16, f32, f64, flag, c64, c128)
    assert outs[0].tolist() == ints
    assert [v & (2**64 - 1) for v in outs[1].view(torch.int64).tolist()] == uints
    assert outs[2].tolist() == [float(np.float16(f16)), float(np.float32(f32)), f64, 1.0 if flag else 0.0]
    assert outs[3].tolist() == [complex(np.complex64(c64)), c128]


def test_tuple_arguments(kernels):
    k = kernels("tuple_args")
    out, m = nans(1, dtype=torch.float64), rand(3, 4)
    k[1, 1](out, (0.5, -1.25), (m, 11))
    assert out.item() == pytest.approx(0.5 - 1.25 + m[0, 0].item() + 11)


def test_dynamic_shared_memory(kernels):
    k = kernels("block_reverse")
    x, out = rand(8 * 128), nans(8 * 128)
    k[8, 128, 0, 128 * 4](out, x)
    torch.testing.assert_close(out, x.view(8, 128).flip(1).reshape(-1))


def test_refusals_then_a_good_launch(kernels):
    k = kernels("scale2d")
    out, x = nans(12, 20), rand(12, 20)
    cases = [
        ((out, x.double(), 1.0), lp.ArgumentTypeError, "expected float32 elements"),
        ((out, x[0], 1.0), lp.ArgumentError, "expected a 2-d array"),
        ((out, rand(20, 12).t(), 1.0), lp.ArgumentError, "the kernel was compiled for a C-contiguous array"),
        ((out, x.cpu(), 1.0), lp.ArgumentError, "expected a CUDA tensor, got a torch.float32 tensor on cpu"),
    ]
    for args, cls, message in cases:
        with pytest.raises(cls) as e:
            k[(1, 2), (16, 16)](*args)
        assert str(e.value).startswith("kernel 'scale2d', argument 1 ('x'): " + message), str(e.value)
    torch.cuda.synchronize()
    assert torch.isnan(out).all()  # nothing was launched
    k[(1, 2), (16, 16)](out, x, 3.0)
    torch.testing.assert_close(out, 3.0 * x)


def test_grid_sync_kernel_runs_cooperatively(kernels):
    k = kernels("grid_reverse")
    assert k.plan.cooperative
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n = sms * 2 * 256
    x = rand(n)
    expected = 2 * x.flip(0)
    y = nans(n)
    k[sms * 2, 256](x, y, n)
    torch.testing.assert_close(x, expected)
    with pytest.raises(lp.ArgumentError) as e:
        k[sms * 1000, 1024](x, y, n)
    assert "exceeds the" in str(e.value) and "blocks that can be resident at once" in str(e.value)


def test_numba_device_arrays(kernels):
    k = kernels("axpy")
    n = 4099
    x = rand(n)
    x_numba = cuda.as_cuda_array(x)  # a Numba DeviceNDArray over torch's memory
    out = cuda.device_array(n, dtype=np.float32)  # memory Numba allocated
    y = rand(n)
    k[blocks(n, 256), 256](out, x_numba, y, -0.5)
    torch.cuda.synchronize()
    torch.testing.assert_close(torch.from_numpy(out.copy_to_host()), (-0.5 * x + y).cpu())


def test_numba_kernel_calls_cpp_device_function(kernels):
    k = kernels("call_cpp")
    n = 1000
    out, x, y = nans(n), rand(n), rand(n)
    k[blocks(n, 128), 128](out, x, y, 1.5)
    torch.testing.assert_close(out, 1.5 * x + y)


def test_cpp_kernel_calls_numba_device_function():
    major, minor = torch.cuda.get_device_capability()
    ltoir, _ = cuda.compile(
        numba_hypot, "float32(float32, float32)", device=True, abi="c", abi_info={"abi_name": "numba_hypot"},
        output="ltoir", cc=(major, minor),
    )  # fmt: skip
    k = lp.link([lp.compile_cuda_object(HYPOT_CPP), ltoir], "hypot_kernel", signature="*fp32, *fp32, *fp32, i32")
    n = 777
    out, a, b = nans(n), rand(n), rand(n)
    k[blocks(n, 128), 128](out, a, b, n)
    torch.testing.assert_close(out, torch.hypot(a, b))
    assert math.isfinite(out.sum().item())


def test_saved_kernel_runs_without_recompiling(kernels, tmp_path):
    loaded = lp.load(kernels("add_any").save(tmp_path / "k.json"))
    x = rand(16, 24, dtype=torch.float64)
    out = nans(24, 16, dtype=torch.float64)
    loaded[(3, 2), (8, 8)](out, x.t(), x.t().contiguous())
    torch.testing.assert_close(out, 2 * x.t())


def test_host_arrays_and_records_come_back_as_numbas_dispatcher_returns_them(kernels):
    """Host NumPy arrays in, the kernel's writes back in them, on the default and on a side stream;
    the same arrays through Numba's dispatcher give the same bits."""
    k = kernels("axpy")
    rng = np.random.default_rng(11)
    n = 5_003
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)

    def reference(a: float) -> np.ndarray:  # a * x + y rounded once, as the GPU's fused multiply-add
        return (a * x.astype(np.float64) + y).astype(np.float32)

    out = np.full(n, np.nan, dtype=np.float32)
    k[blocks(n, 256), 256](out, x, y, 1.5)
    np.testing.assert_array_equal(out, reference(1.5))
    side = torch.cuda.Stream()
    out_side = np.full(n, np.nan, dtype=np.float32)
    k[blocks(n, 256), 256, side.cuda_stream](cuda.Out(out_side), cuda.In(x), y, -2.0)
    np.testing.assert_array_equal(out_side, reference(-2.0))
    expected = np.full(n, np.nan, dtype=np.float32)
    cuda.jit(SIGS["axpy"][1])(SIGS["axpy"][0])[blocks(n, 256), 256](expected, x, y, 1.5)
    np.testing.assert_array_equal(out, expected)


def write_record(rec, values):
    rec.x = values[0] * 2.0
    rec.count = rec.count + 1


def test_a_host_record_is_written_back():
    from numba.np.numpy_support import from_dtype

    dtype = np.dtype([("x", np.float32), ("count", np.int64)], align=True)
    records = np.array([(1.0, 5), (2.0, 7)], dtype=dtype)
    values = np.array([3.25], dtype=np.float32)
    k = lp.from_numba(write_record, (from_dtype(dtype), cuda.types.float32[::1]))
    k[1, 1](records[1], values)
    assert records.tolist() == [(1.0, 5), (6.5, 8)]
