"""C++ kernels with the CCCL headers, typed by the compiler, on a real GPU: a cooperative-groups
grid sync, CUB block reductions and ``cuda::std``, checked against torch on random inputs."""

from __future__ import annotations

import pytest
import torch
from test_cpp_types import CCCL_SOURCE, SOURCE

import launchpad as lp

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cccl():
    return lp.compile_cuda_module(CCCL_SOURCE, ["grid_sum", "block_max<float>", "block_max<int>"])


def test_cooperative_grid_sync_sums_the_whole_input(cccl):
    k = cccl["grid_sum"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.rand(1_000_003, device="cuda")
    partial = torch.empty(sms, device="cuda")
    out = torch.full((1,), float("nan"), device="cuda")
    k.launch(sms, 256, x, partial, out, x.numel(), cooperative=True)
    torch.cuda.synchronize()
    torch.testing.assert_close(out[0], x.double().sum().float(), rtol=1e-4, atol=0)
    # More blocks than can be resident at once: refused before the driver sees the launch.
    with pytest.raises(lp.ArgumentError, match=r"kernel 'grid_sum': a cooperative launch of \d+ blocks exceeds"):
        k.launch(sms * 64, 256, x, torch.empty(sms * 64, device="cuda"), out, x.numel(), cooperative=True)


@pytest.mark.parametrize(("name", "dtype"), [("block_max<float>", torch.float32), ("block_max<int>", torch.int32)])
def test_cub_block_reduce_matches_torch(cccl, name, dtype):
    n = 128 * 37 + 5
    x = torch.randn(n, device="cuda") * 1000
    x = x.to(dtype)
    blocks = (n + 127) // 128
    out = torch.empty(blocks, dtype=dtype, device="cuda")
    cccl[name].launch(blocks, 128, x, out, n)
    padded = torch.full((blocks * 128,), torch.finfo(dtype).min if dtype.is_floating_point else torch.iinfo(dtype).min,
                        dtype=dtype, device="cuda")  # fmt: skip
    padded[:n] = x
    torch.testing.assert_close(out, padded.view(blocks, 128).amax(dim=1))
    with pytest.raises(lp.ArgumentTypeError, match=rf"kernel {name!r}, argument 0"):
        cccl[name].launch(blocks, 128, x.double(), out, n)


def test_templated_kernel_without_signature_runs_typed():
    k = lp.compile_cuda(SOURCE, "axpy<double>")
    x = torch.randn(1000, device="cuda", dtype=torch.float64)
    y = torch.randn(1000, device="cuda", dtype=torch.float64)
    expected = 0.5 * x + y
    k.launch(4, 256, 0.5, x, y, 1000)
    torch.testing.assert_close(y, expected)
    with pytest.raises(lp.ArgumentTypeError, match=r"float32"):
        k.launch(4, 256, 0.5, x.float(), y, 1000)
