"""Launches under torch.compile on a GPU (launchpad.tracing; issue 29): a C++ kernel by ``k[grid, block]``
and ``k.launch``, a Numba kernel, a Triton kernel through ``triton_launcher`` (traced as Triton's own),
in the default mode, ``reduce-overhead`` (CUDA graph trees, new inputs each call), ``max-autotune``
and ``dynamic=True``, inference and a training step; ``launchpad.record`` of a step that calls a
compiled module. Every result is compared with eager on random inputs."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import launchpad as lp

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void axpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
extern "C" __global__ void clip(float* x, float bound, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = fminf(fmaxf(x[i], -bound), bound);
}
"""


@pytest.fixture(scope="module")
def cpp():
    return lp.compile_cuda_module(SOURCE, ["axpy", "clip"])


def block_fn(cpp):
    axpy = cpp["axpy"]

    def f(x, w):
        n = x.numel()
        y = torch.tanh(x @ w).reshape(-1).contiguous()
        axpy[(n + 255) // 256, 256](y, x.reshape(-1), 0.5, n)
        cpp["clip"].launch((n + 255) // 256, 256, y, 0.75, n)
        return y.reshape(x.shape) * 2

    return f


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune-no-cudagraphs", "dynamic"])
def test_cpp_kernels_in_a_compiled_function_equal_eager(cpp, mode):
    f = block_fn(cpp)
    torch._dynamo.reset()
    options = {"dynamic": True} if mode == "dynamic" else {} if mode == "default" else {"mode": mode}
    compiled = torch.compile(f, fullgraph=True, **options)
    w = torch.randn(64, 64, device="cuda") / 8
    for step in range(8):
        rows = 32 + 16 * (step % 3) if mode == "dynamic" else 32
        x = torch.randn(rows, 64, device="cuda")
        if mode == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()
        got = compiled(x, w).clone()
        assert torch.allclose(got, f(x, w), rtol=1e-5, atol=1e-5), (mode, step)


def test_numba_kernel_compiled(cpp):
    cuda = pytest.importorskip("numba.cuda")

    @cuda.jit
    def scale(x, out, a):
        i = cuda.grid(1)
        if i < x.shape[0]:
            out[i] = a * x[i]

    k = lp.from_numba(scale, "float32[:], float32[:], float32")

    def f(x):
        out = torch.empty_like(x)
        k[(x.numel() + 127) // 128, 128](x, out, 3.0)
        return out + 1

    torch._dynamo.reset()
    x = torch.randn(1000, device="cuda")
    assert torch.equal(torch.compile(f, fullgraph=True)(x), f(x))


def test_triton_launcher_is_traced_as_tritons_own_launch():
    triton = pytest.importorskip("triton")
    tl = pytest.importorskip("triton.language")

    @triton.jit
    def add(x, y, out, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + i, tl.load(x + i, mask=i < n) + tl.load(y + i, mask=i < n), mask=i < n)

    launcher = lp.triton_launcher(add)

    def f(x, y):
        out = torch.empty_like(x)
        launcher[(triton.cdiv(x.numel(), 128),)](x, y, out, x.numel(), BLOCK=128)
        return out * 2

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)
    for n in (1000, 4096):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        assert torch.equal(compiled(x, y), (x + y) * 2)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_a_bound_launch_is_traced_with_its_bound_arguments(cpp, mode):
    """``k.bind(...)`` made outside, called inside: traced as the kernel's operator with the bound
    tensors, the leading ones replaced where the call passes them; on torch's current stream."""
    n = 4096
    y0, x0 = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    bound = cpp["axpy"].bind((n + 255) // 256, 256, y0, x0, 0.5, n)

    def f(y):
        bound()  # y0 += 0.5 * x0
        bound(y)  # y += 0.5 * x0
        return y * 2

    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True, mode=None if mode == "default" else mode)
    for _ in range(3):
        torch.compiler.cudagraph_mark_step_begin()
        y, before = torch.randn(n, device="cuda"), y0.clone()
        expected_y = y + 0.5 * x0
        got = compiled(y)
        torch.cuda.synchronize()
        assert torch.equal(got, expected_y * 2) and torch.equal(y, expected_y)
        assert torch.equal(y0, before + 0.5 * x0)


def test_a_triton_cubin_kernel_reads_what_its_ttir_reads_so_reduce_overhead_keeps_its_graph():
    """A Triton ``Kernel`` (not ``triton_launcher``) traced as its own operator: its TTIR says it writes
    ``out`` only, so the inputs ``x`` and ``bias`` are not declared written and ``reduce-overhead``
    captures the function in a CUDA graph (torch skips the graph of a function whose inputs are written)."""
    pytest.importorskip("triton")
    from torch._dynamo.utils import counters
    from triton_kernels import axpy_bias_kernel

    x, y, bias = (torch.randn(4096, device="cuda") for _ in range(3))
    k = lp.triton_launcher(axpy_bias_kernel).warmup(x, y, bias, torch.empty_like(x), 4096, 0.5, BLOCK=256)
    assert [k.spec.args[i].name for i in k.spec.metadata["written"]] == ["out_ptr"]

    def f(x, y, bias):
        out = torch.empty_like(x)
        k[(x.numel() + 255) // 256](x, y, bias, out, x.numel(), 0.5, 256)
        return out * 2

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(f, fullgraph=True, mode="reduce-overhead")
    for _ in range(4):
        torch.compiler.cudagraph_mark_step_begin()
        x, y, bias = (torch.randn(4096, device="cuda") for _ in range(3))
        assert torch.equal(compiled(x, y, bias), f(x, y, bias))
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


def test_a_gluon_kernel_compiled():
    pytest.importorskip("triton.experimental.gluon")
    import gluon_kernels as G

    n = 10_000
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    k = lp.from_triton(G.blocked_add[(-(-n // 1024),)](x, y, torch.empty_like(x), n, 1024, 8, num_warps=4))

    def f(x, y):
        out = torch.empty_like(x)
        k[(x.numel() + 1023) // 1024](x, y, out, x.numel(), 1024, 8)
        return out - 1

    torch._dynamo.reset()
    for mode in ("default", "reduce-overhead"):
        compiled = torch.compile(f, fullgraph=True, mode=None if mode == "default" else mode)
        for _ in range(3):
            torch.compiler.cudagraph_mark_step_begin()
            x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
            assert torch.equal(compiled(x, y), x + y - 1), mode


def test_a_training_step_with_a_kernel_where_no_gradient_flows(cpp):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).cuda()
    twin = copy.deepcopy(model)
    clip = cpp["clip"]

    def step(model, opt, x, y):
        opt.zero_grad(set_to_none=True)
        target = y.clone()
        clip[(target.numel() + 255) // 256, 256](target, 1.0, target.numel())  # targets clipped in place
        loss = F.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        return loss.detach()

    opt, twin_opt = (torch.optim.SGD(m.parameters(), lr=0.05) for m in (model, twin))
    torch._dynamo.reset()
    compiled = torch.compile(step)
    for _ in range(5):
        x, y = torch.randn(16, 32, device="cuda"), 2 * torch.randn(16, 8, device="cuda")
        assert torch.allclose(compiled(model, opt, x, y), step(twin, twin_opt, x, y), rtol=1e-4, atol=1e-6)
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_record_of_a_step_calling_a_compiled_module_and_kernels_replays_as_eager(cpp):
    torch.manual_seed(1)
    mlp = nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 64)).cuda()
    compiled = torch.compile(mlp)
    axpy = cpp["axpy"]

    def step(x):
        with torch.no_grad():
            y = compiled(x).reshape(-1).contiguous()
            axpy[(y.numel() + 255) // 256, 256](y, x.reshape(-1), 0.25, y.numel())
            return y * 3

    x0 = torch.randn(16, 64, device="cuda")
    step(x0)  # compiled before recording
    seq = lp.record(step, x0)
    for _ in range(10):
        x = torch.randn(16, 64, device="cuda")
        assert torch.equal(seq(x), step(x)), seq.explain()


def test_record_of_a_training_step_with_a_compiled_forward_and_a_kernel(cpp):
    """A recorded training step whose forward is a compiled module (Inductor's kernels, its backward
    AOTAutograd's) and whose target a launchpad kernel clips: 10 replays with new batches equal the
    same step run eagerly on a copy, loss and weights bit for bit."""
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 8)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    clip, compiled = cpp["clip"], torch.compile(model)

    def step(x, y, forward=compiled, opt=opt):
        opt.zero_grad(set_to_none=True)
        target = y.clone()
        clip[(target.numel() + 255) // 256, 256](target, 0.75, target.numel())
        loss = F.mse_loss(forward(x), target)
        loss.backward()
        opt.step()
        return loss.detach()

    seq = lp.record(step, torch.randn(16, 32, device="cuda"), torch.randn(16, 8, device="cuda"))
    twin, twin_opt = copy.deepcopy((model, opt))  # (after the recording's warm-up: the same start)
    twin_forward = torch.compile(twin)
    for _ in range(10):
        x, y = torch.randn(16, 32, device="cuda"), torch.randn(16, 8, device="cuda")
        loss = seq(x, y)
        assert torch.equal(loss, step(x, y, twin_forward, twin_opt)), seq.explain()
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a, b)


def test_a_recorded_step_beside_reduce_overhead_graph_trees(cpp):
    """torch.compile(mode="reduce-overhead") clears cuBLAS's workspaces when it records its graphs: a
    recorded sequence (which made its own inside its pool) replays exactly after and between them."""
    torch.manual_seed(2)
    w = torch.randn(128, 128, device="cuda") / 12

    def step(x):
        return torch.relu(x @ w) @ w

    seq = lp.record(step, torch.randn(64, 128, device="cuda"))
    torch._dynamo.reset()
    other = torch.compile(lambda a: torch.tanh(a @ w.t()) @ w, mode="reduce-overhead")
    for _ in range(6):
        torch.compiler.cudagraph_mark_step_begin()
        a = torch.randn(64, 128, device="cuda")
        other(a)
        x = torch.randn(64, 128, device="cuda")
        assert torch.equal(seq(x), step(x)), seq.explain()
