"""Recorded sequences on a real GPU: replays with new inputs equal launching one by one, over many
replays with random inputs, with kernels of every front end, beside another stream's work, after
``Kernel.close``, through both replays."""

from __future__ import annotations

import functools

import pytest
import torch

import launchpad as lp

pytestmark = pytest.mark.gpu

try:
    import triton
    import triton.language as tl
except ImportError:  # the Triton tests skip
    triton = None
else:

    @triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=2), triton.Config({"BLOCK": 1024}, num_warps=4)],
                     key=["n"])  # fmt: skip
    @triton.jit
    def tuned_scale(x_ptr, out_ptr, s, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)


SOURCE = r"""
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void mul(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * y[i];
}
"""
N = 4096


@pytest.fixture(scope="module")
def cpp():
    return lp.compile_cuda_module(SOURCE, ["axpy", "mul"])


def step(x, y, a, *, axpy, mul, tmp, out):
    """out = (a * x + tmp0) * y, tmp starting from x each time."""
    tmp.copy_(x)  # a torch op that reads x (a node launchpad did not make)
    axpy[N // 256, 256](a, x, tmp, N)
    mul[N // 256, 256](tmp, y, out, N)


def reference(x, y, a):
    return (a * x + x) * y


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_a_thousand_replays_equal_launching_one_by_one(cpp, compiled):
    if compiled and lp.launch_path()[0] != "compiled":
        pytest.skip(lp.launch_path()[1])
    torch.manual_seed(0)
    out = torch.empty(N, device="cuda")

    def kernels(y, a, x_fixed, tmp):
        cpp["axpy"][N // 256, 256](a, x_fixed, tmp, N)
        cpp["mul"][N // 256, 256](tmp, y, out, N)

    x_fixed = torch.randn(N, device="cuda")
    tmp = torch.empty(N, device="cuda")
    seq = lp.record(functools.partial(kernels, x_fixed=x_fixed, tmp=tmp), torch.randn(N, device="cuda"), 0.5,
                    compiled=compiled)  # fmt: skip
    assert seq.replay_path == ("compiled" if compiled else "python")
    for i in range(1000):
        y, a = torch.randn(N, device="cuda"), float(torch.randn(()).item())
        tmp.zero_()
        seq(y, a)
        if i % 97 == 0 or i == 999:  # a sample of replays checked against one-by-one launches
            mine = out.clone()
            tmp.zero_()
            cpp["axpy"][N // 256, 256](a, x_fixed, tmp, N)
            cpp["mul"][N // 256, 256](tmp, y, out, N)
            torch.testing.assert_close(mine, out, rtol=0, atol=0)
            torch.testing.assert_close(mine, a * x_fixed * y, rtol=1e-5, atol=1e-5)


def test_kernels_of_every_front_end_and_a_torch_op(cpp):
    triton = pytest.importorskip("triton")
    numba = pytest.importorskip("numba.cuda")
    import numpy as np

    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    from test_numba import SIGS
    from triton_kernels import add_kernel

    add = lp.triton_launcher(add_kernel)
    scale = lp.from_numba(*SIGS["axpy"])  # out = a * x + y, Numba arrays
    out, tmp, tmp2 = (torch.empty(N, device="cuda") for _ in range(3))

    def everything(x, y, a):
        add[(triton.cdiv(N, 1024),)](x, y, tmp, N, BLOCK=1024)  # Triton: tmp = x + y
        scale[N // 256, 256](tmp2, tmp, y, a)  # Numba: tmp2 = a * tmp + y
        torch.mul(tmp2, 2.0, out=tmp)  # torch: tmp = 2 * tmp2 (reads no input)
        cpp["mul"][N // 256, 256](tmp, x, out, N)  # C++: out = tmp * x

    def expected(x, y, a):
        return 2 * (a * (x + y) + y) * x

    x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    seq = lp.record(everything, x, y, 1.5)
    for _ in range(20):
        x, y, a = torch.randn(N, device="cuda"), torch.randn(N, device="cuda"), float(torch.randn(()).item())
        seq(x, y, a)
        torch.testing.assert_close(out, expected(x, y, a), rtol=1e-5, atol=1e-5)
    del numba


def test_an_input_a_torch_op_reads_keeps_its_tensor(cpp):
    out, tmp = torch.empty(N, device="cuda"), torch.empty(N, device="cuda")
    x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    seq = lp.record(functools.partial(step, axpy=cpp["axpy"], mul=cpp["mul"], tmp=tmp, out=out), x, y, 2.0)
    x.copy_(torch.randn(N, device="cuda"))  # new data in the recorded tensor: the way to change it
    seq(y=torch.randn(N, device="cuda").add_(1), a=-1.0)
    seq(x)  # the recorded tensor itself: nothing to update
    with pytest.raises(lp.ArgumentError, match=r"sequence input 'x' is also read by node \d+ \(a .* launchpad did not "
                       r"make\), which launchpad cannot update"):  # fmt: skip
        seq(torch.randn(N, device="cuda"))


def test_a_replay_beside_another_streams_work_and_after_close(cpp):
    a_out, tmp = torch.empty(N, device="cuda"), torch.empty(N, device="cuda")

    def fn(x, y):
        cpp["mul"][N // 256, 256](x, y, a_out, N)

    seq = lp.record(fn, torch.randn(N, device="cuda"), torch.randn(N, device="cuda"))
    cpp["mul"].close()  # the sequence keeps its module loaded
    busy = torch.cuda.Stream()
    big = torch.randn(4096, 4096, device="cuda")
    with torch.cuda.stream(busy):
        for _ in range(20):
            big = big @ big.T / 4096  # other work in flight on another stream
    side = torch.cuda.Stream()
    for _ in range(50):
        x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            seq(x, y)  # replayed on torch's current stream: the side stream
        side.synchronize()
        torch.testing.assert_close(a_out, x * y, rtol=0, atol=0)
    busy.synchronize()
    del tmp


def test_an_autotuned_triton_kernel_once_tuned():
    """``@triton.autotune`` through ``triton_launcher``: the warm-up tunes (outside the capture);
    the recorded graph holds the chosen config, replayed with new inputs."""
    if triton is None:
        pytest.skip("Triton is not installed")
    launcher = lp.triton_launcher(tuned_scale)
    out = torch.empty(N, device="cuda")

    def fn(x, s):
        launcher[lambda meta: (triton.cdiv(N, meta["BLOCK"]),)](x, out, s, N)

    seq = lp.record(fn, torch.randn(N, device="cuda"), 2.0)
    assert launcher.best_config is not None and len(launcher.cache) == 1
    for _ in range(10):
        x, s = torch.randn(N, device="cuda"), float(torch.randn(()).item())
        seq(x, s)
        torch.testing.assert_close(out, x * s, rtol=1e-6, atol=1e-6)
