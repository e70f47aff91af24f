"""Numba kernels that link numba-cuda's shims, run module callbacks or take records, on a real GPU:
checked against torch on random inputs, and against Numba's own dispatcher where torch has no
equivalent (its random number generator)."""

from __future__ import annotations

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
from numba.cuda.random import create_xoroshiro128p_states
from test_numba_shims import CALLBACK_SOURCE, POINT, SIGS, compute_pi, point_kernel

import launchpad as lp

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def kernels():
    return {name: lp.from_numba(fn, sig) for name, (fn, sig) in SIGS.items()}


def test_fp16_arithmetic_matches_torch(kernels):
    n = 10_000
    x, y = torch.randn(n, device="cuda").half(), torch.randn(n, device="cuda").half()
    r = torch.full((n,), float("nan"), device="cuda", dtype=torch.float16)
    kernels["half_math"][(n + 255) // 256, 256](r, x, y)
    expected = (torch.addcmul(x.float(), x.float(), y.float()).half() - y * x + 1.5).float()
    torch.testing.assert_close(r.float(), expected, rtol=2e-3, atol=2e-2)


def test_libdevice_math_matches_torch(kernels):
    n = 4099
    x = torch.rand(n, device="cuda") * 3 - 1  # lgamma(x + 2) away from its poles
    r = torch.full((n,), float("nan"), device="cuda")
    kernels["libdevice_math"][(n + 127) // 128, 128](r, x)
    expected = torch.erf(x) + torch.lgamma(x + 2.0) + torch.exp(-x * x)
    torch.testing.assert_close(r, expected, rtol=1e-5, atol=1e-5)


def test_random_states_give_what_numba_gives(kernels):
    threads, iterations = 4096, 500
    ours = create_xoroshiro128p_states(threads, seed=1234)  # a Numba device array of records
    theirs = create_xoroshiro128p_states(threads, seed=1234)
    out = torch.full((threads,), float("nan"), device="cuda")
    kernels["compute_pi"][threads // 256, 256](ours, iterations, out)
    expected = cuda.device_array(threads, dtype=np.float32)
    cuda.jit(compute_pi)[threads // 256, 256](theirs, iterations, expected)
    torch.cuda.synchronize()
    assert torch.equal(out.cpu(), torch.from_numpy(expected.copy_to_host()))
    assert abs(out.mean().item() - np.pi) < 0.02
    # the states moved on exactly as Numba's did
    assert np.array_equal(ours.copy_to_host().view(np.uint64), theirs.copy_to_host().view(np.uint64))


def test_records_by_value_host_and_device():
    k = point_kernel()
    rng = np.random.default_rng(7)
    for _ in range(3):
        rec = np.array([(rng.standard_normal(), rng.integers(-1000, 1000), rng.integers(0, 255))], dtype=POINT)[0]
        out = torch.full((1,), float("nan"), device="cuda", dtype=torch.float64)
        k[1, 1](rec, out)  # copied to the device for the launch
        expected = float(np.float32(rec["x"]) * np.float32(2.0)) + int(rec["count"]) + int(rec["flag"])
        assert out.item() == pytest.approx(expected, rel=1e-6)
        device_rec = cuda.to_device(rec)  # a Numba DeviceRecord: passed by its address
        out2 = torch.full((1,), float("nan"), device="cuda", dtype=torch.float64)
        k[1, 1](device_rec, out2)
        as_bytes = torch.frombuffer(bytearray(rec.tobytes()), dtype=torch.uint8).cuda()
        out3 = torch.full((1,), float("nan"), device="cuda", dtype=torch.float64)
        k[1, 1](as_bytes, out3)
        assert out2.item() == out.item() == out3.item()


def test_module_setup_callback_initializes_a_global():
    """numba-cuda's own callback test: the setup callback writes 42 into a ``__device__`` global."""
    from cuda.bindings.driver import cuLibraryGetGlobal, cuMemcpyHtoD
    from numba.cuda.cudadrv.linkable_code import CUSource

    seen = []

    def set_forty_two(object_code):
        err, dptr, size = cuLibraryGetGlobal(object_code.handle, b"num")
        assert int(err) == 0
        arr = np.array([42], np.int32)
        cuMemcpyHtoD(dptr, arr.ctypes.data, size)
        seen.append("setup")

    lib = CUSource(CALLBACK_SOURCE, setup_callback=set_forty_two, teardown_callback=lambda obj: seen.append("down"))
    get_num = cuda.declare_device("get_num", "int32()", link=[lib])

    def read_num(arr):
        arr[0] = get_num()

    k = lp.from_numba(read_num, "void(int32[::1])")
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    k[1, 1](out)
    k[1, 1](out)
    assert out.item() == 42 and seen == ["setup"]  # once per loaded module
    k.close()
    import gc

    gc.collect()
    assert seen == ["setup", "down"]
