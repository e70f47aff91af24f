"""``launchpad.torch_op`` on a real GPU: C++, Triton and Numba kernels as torch operators, checked
against torch on random inputs in eager mode, by ``torch.library.opcheck``, under
``torch.compile(fullgraph=True)``, captured in CUDA graphs, and named in the profiler."""

from __future__ import annotations

import pytest
import torch

import launchpad as lp

pytestmark = pytest.mark.gpu

triton = pytest.importorskip("triton")
numba_cuda = pytest.importorskip("numba.cuda")
import triton_kernels as K  # noqa: E402

SOURCE = r"""
extern "C" __global__ void lp_op_scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""

N = 10_007  # not a multiple of any block
TRITON_BLOCK = 1024


def lp_op_axpy(out, x, y, a):
    i = numba_cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def rand(n: int = N) -> torch.Tensor:
    return torch.randn(n, device="cuda")


def nans(n: int = N) -> torch.Tensor:
    return torch.full((n,), float("nan"), device="cuda")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        yield {
            "cpp": lp.compile_cuda(SOURCE, "lp_op_scale", signature="*fp32, *fp32, fp32, i32"),
            "triton": lp.from_triton(K.add_kernel, signature="*fp32, *fp32, *fp32, i32",
                                     constexprs={"BLOCK": TRITON_BLOCK}),
            "numba": lp.from_numba(lp_op_axpy, "void(float32[::1], float32[::1], float32[::1], float32)"),
        }  # fmt: skip


@pytest.fixture(scope="module")
def ops(kernels):
    """Each kernel as a mutating op (``..._``) and a functional one; registered once per process."""
    cpp, tri, nb = kernels["cpp"], kernels["triton"], kernels["numba"]
    names = ("x", "y", "a", "n")
    return {
        "scale_": lp.torch_op("lptest_gpu::scale_", cpp, names=names, mutates=("y",), block=256,
                              grid=lambda x, y, a, n: (n + 255) // 256),
        "scale": lp.torch_op("lptest_gpu::scale", cpp, names=names, block=256,
                             grid=lambda x, a, n: (n + 255) // 256,
                             outputs={"y": lambda x, a, n: torch.empty_like(x)}),
        "add_": lp.torch_op("lptest_gpu::add_", tri, mutates=("out_ptr",),
                            grid=lambda x, y, out, n: (triton.cdiv(n, TRITON_BLOCK),)),
        "add": lp.torch_op("lptest_gpu::add", tri, grid=lambda x, y, n: (triton.cdiv(n, TRITON_BLOCK),),
                           outputs={"out_ptr": lambda x, y, n: torch.empty_like(x)}),
        "axpy_": lp.torch_op("lptest_gpu::axpy_", nb, mutates=("out",), block=256,
                             grid=lambda out, x, y, a: (out.numel() + 255) // 256),
        "axpy": lp.torch_op("lptest_gpu::axpy", nb, block=256, grid=lambda x, y, a: (x.numel() + 255) // 256,
                            outputs={"out": lambda x, y, a: torch.empty_like(x)}),
    }  # fmt: skip


def test_eager_results_match_torch(ops):
    x, y, a = rand(), rand(), float(torch.randn(()))
    out = nans()
    assert ops["scale_"](x, out, a, N) is None
    torch.testing.assert_close(out, a * x)
    torch.testing.assert_close(ops["scale"](x, a, N), a * x)
    # the same op through torch.ops
    out = nans()
    torch.ops.lptest_gpu.scale_(x, out, a, N)
    torch.testing.assert_close(out, a * x)

    out = nans()
    assert ops["add_"](x, y, out, N) is None
    torch.testing.assert_close(out, x + y)
    torch.testing.assert_close(ops["add"](x, y, N), x + y)

    out = nans()
    assert ops["axpy_"](out, x, y, a) is None
    torch.testing.assert_close(out, a * x + y)
    torch.testing.assert_close(ops["axpy"](x, y, a), a * x + y)


def test_opcheck(ops):
    x, y, a = rand(), rand(), 1.25
    torch.library.opcheck(ops["scale_"], (x, rand(), a, N))
    torch.library.opcheck(ops["scale"], (x, a, N))
    torch.library.opcheck(ops["add_"], (x, y, rand(), N))
    torch.library.opcheck(ops["add"], (x, y, N))
    torch.library.opcheck(ops["axpy_"], (rand(), x, y, a))
    torch.library.opcheck(ops["axpy"], (x, y, a))


def model(ops, x, y, z, a):
    """Every kernel in one graph: functional C++ and Triton ops, and a Numba op that mutates an input."""
    n = x.numel()
    s = ops["scale"](x, a, n)
    t = ops["add"](s, y, n)
    ops["axpy_"](z, t, x, 0.5)
    return torch.sin(z) + t


def test_compile_fullgraph_matches_eager(ops):
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, y, z, a: model(ops, x, y, z, a), fullgraph=True)
    for n in (N, 4096):  # a second size recompiles with n symbolic
        x, y, z, a = rand(n), rand(n), rand(n), float(torch.randn(()))
        z_eager, z_compiled = z.clone(), z.clone()
        expected = model(ops, x, y, z_eager, a)
        got = compiled(x, y, z_compiled, a)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(z_compiled, z_eager)  # the declared mutation reached the caller's tensor
    torch._dynamo.reset()


def test_cuda_graph_capture_and_replay(ops):
    x, y, z = rand(), nans(), nans()
    a = 1.5
    # warm up on a side stream, as torch requires before capture (this also loads the kernels)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            ops["scale_"](x, y, a, N)
            out = ops["add"](x, y, N)
            ops["axpy_"](z, out, x, 0.5)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops["scale_"](x, y, a, N)
        out = ops["add"](x, y, N)  # allocated from the graph's pool: the same tensor every replay
        ops["axpy_"](z, out, x, 0.5)
    for _ in range(2):
        x.copy_(rand())
        y.fill_(float("nan"))
        z.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, a * x)
        torch.testing.assert_close(out, x + a * x)
        torch.testing.assert_close(z, 0.5 * out + x)


def test_compile_reduce_overhead(ops):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    fn = torch.compile(lambda x, y: ops["add"](ops["scale"](x, 2.0, x.numel()), y, x.numel()) * 3,
                       mode="reduce-overhead", fullgraph=True)  # fmt: skip
    for _ in range(4):  # warm-up runs, the recording, then replays
        x, y = rand(), rand()
        got = fn(x, y).clone()
        torch.testing.assert_close(got, (2.0 * x + y) * 3)
    assert counters["inductor"]["cudagraph_skips"] == 0  # the ops did not keep it out of CUDA graphs
    torch._dynamo.reset()


def cuda_kernel_names(prof) -> list[str]:
    from torch.autograd import DeviceType

    return [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]


def test_profiler_names(kernels, ops):
    """CUPTI names each kernel by its symbol (Kineto may demangle it): the extern "C" name, the
    Triton function's name, or Numba's mangled name, which contains the Python function's name."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cpp, tri, nb = kernels["cpp"], kernels["triton"], kernels["numba"]
    assert (cpp.display_name, tri.display_name, nb.display_name) == ("lp_op_scale", "add_kernel", "lp_op_axpy")
    x, y, out = rand(), rand(), nans()
    blocks = (N + 255) // 256
    for _ in range(2):  # the first round loads the kernels outside the profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            cpp.launch(blocks, 256, x, out, 2.0, N)
            tri[(triton.cdiv(N, TRITON_BLOCK),)](x, y, out, N, TRITON_BLOCK)
            nb[blocks, 256](out, x, y, 2.0)
            torch.cuda.synchronize()
    names = cuda_kernel_names(prof)
    for k in (cpp, tri, nb):
        assert any(k.display_name in name for name in names), (k.display_name, names)

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        ops["scale_"](x, out, 2.0, N)
        ops["add"](x, y, N)
        ops["axpy_"](out, x, y, 2.0)
        torch.cuda.synchronize()
    cpu = [e.name for e in prof.events() if e.device_type == DeviceType.CPU]
    for op in ("lptest_gpu::scale_", "lptest_gpu::add", "lptest_gpu::axpy_"):
        assert op in cpu, (op, cpu)
    names = cuda_kernel_names(prof)
    for k in (cpp, tri, nb):
        assert any(k.display_name in name for name in names), (k.display_name, names)
