"""Launches under torch.compile (launchpad.tracing), without a GPU: Dynamo traces ``k[grid, block]``
and ``k.launch`` as the kernel's own operator (meta tensors: the fake implementation runs), the
schema says what the kernel writes, errors name the kernel and the argument, and ``import
launchpad`` leaves Dynamo unimported. The launches themselves: tests/test_tracing_gpu.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types

import pytest
import torch

import launchpad as lp
from launchpad.frontends.cutile.frontend import CutileKernel
from launchpad.frontends.warp.kernel import WarpKernel
from launchpad.launch import traced as _traced

SOURCE = r"""
extern "C" __global__ void axpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
extern "C" __global__ void pair(float* out, float* scratch, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { scratch[i] = x[i]; out[i] = 2 * x[i]; }
}
"""


@pytest.fixture(scope="module")
def cpp():
    return lp.compile_cuda_module(SOURCE, ["axpy", "pair"], arch="sm_90")


def compiled_graphs(fn, *args, dynamic=True):
    """The FX graphs Dynamo makes of ``fn`` (fullgraph) and, after AOTAutograd, its forward."""
    from torch._dynamo.backends.common import aot_autograd

    dynamo, forward = [], []
    torch._dynamo.reset()
    torch.compile(fn, fullgraph=True, dynamic=dynamic, backend=lambda gm, ex: (dynamo.append(gm), gm.forward)[1])(*args)
    torch._dynamo.reset()
    fw = aot_autograd(fw_compiler=lambda gm, ex: (forward.append(gm), gm.forward)[1])
    torch.compile(fn, fullgraph=True, dynamic=dynamic, backend=fw)(*args)
    torch._dynamo.reset()
    return dynamo[0], forward[0]


def launchpad_calls(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and str(n.target).startswith("launchpad.")]


def test_every_launch_form_is_one_operator_call_with_symbolic_sizes(cpp):
    k = cpp["axpy"]

    def f(x, y):
        n = x.shape[0]
        k[(n + 255) // 256, 256](y, x + 1, 2.0, n)
        k.launch((n + 255) // 256, 256, y, x, 3.0, n)
        k.launch(1, 256, y=y, x=x, a=0.5, n=n)
        return y * 2

    x, y = torch.empty(1000, device="meta"), torch.empty(1000, device="meta")
    gm, forward = compiled_graphs(f, x, y)
    calls = launchpad_calls(gm)
    assert len(calls) == 3 and len({c.target for c in calls}) == 1
    grid, block, shared_mem, values = calls[0].args[:3], calls[0].args[3:6], calls[0].args[6], calls[0].args[7:]
    assert isinstance(grid[0], torch.fx.Node) and grid[1:] == (1, 1) and block == (256, 1, 1) and shared_mem == 0
    assert isinstance(values[3], torch.fx.Node)  # n stays a SymInt (dynamic), not 1000
    assert values[2] == 2.0
    schema = str(calls[0].target._schema)
    assert schema.endswith("(SymInt grid_x, SymInt grid_y, SymInt grid_z, SymInt block_x, SymInt block_y, SymInt "
                           "block_z, SymInt shared_mem, Tensor(a!)? y, Tensor? x, float a, SymInt n) -> ()")  # fmt: skip
    # after functionalization only y (not const) is written: x is read where it is
    from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2

    written = [n for n in forward.graph.nodes if n.target in (auto_functionalized, auto_functionalized_v2)]
    assert len(written) == 3
    assert all("x" in n.kwargs and "y" not in n.kwargs for n in written)  # y is among the mutated bases


def test_pointers_without_const_are_declared_written_and_writes_overrides(cpp):
    k = lp.compile_cuda(SOURCE, "pair", arch="sm_90")

    def f(x, out, scratch):
        k[1, 256](out, scratch, x, x.shape[0])
        return out

    args = [torch.empty(64, device="meta") for _ in range(3)]
    (call,) = launchpad_calls(compiled_graphs(f, *args)[0])
    assert "Tensor(a!)? out, Tensor(b!)? scratch, Tensor? x" in str(call.target._schema)
    assert k.writes is None
    k.writes = ("out",)
    assert k.writes == ("out",)
    (call,) = launchpad_calls(compiled_graphs(f, *args)[0])
    assert "Tensor(a!)? out, Tensor? scratch, Tensor? x" in str(call.target._schema)
    with pytest.raises(lp.ArgumentError, match=r"kernel 'pair': writes names 'outt', no argument of it; its "
                       r"arguments: out, scratch, x, n"):  # fmt: skip
        k.writes = ("outt",)
    with pytest.raises(lp.ArgumentError, match="writes takes a sequence of argument names, got 'out'"):
        k.writes = "out"


def test_a_triton_cubin_kernel_leaves_its_constexprs_out():
    triton = pytest.importorskip("triton")
    tl = pytest.importorskip("triton.language")

    @triton.jit
    def double(x, out, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + i, 2 * tl.load(x + i, mask=i < n), mask=i < n)

    from triton.backends.compiler import GPUTarget

    k = lp.from_triton(double, signature={"x": "*fp32", "out": "*fp32", "n": "i32"}, constexprs={"BLOCK": 128},
                       target=GPUTarget("cuda", 90, 32))  # fmt: skip

    def f(x, out):
        k[(x.shape[0] + 127) // 128](x, out, x.shape[0], 128)
        return out

    (call,) = launchpad_calls(compiled_graphs(f, torch.empty(300, device="meta"), torch.empty(300, device="meta"))[0])
    # Triton's block is the kernel's own (no block parameters); its TTIR stores through out only
    assert str(call.target._schema).endswith("(SymInt grid_x, SymInt grid_y, SymInt grid_z, SymInt shared_mem, "
                                             "Tensor? x, Tensor(a!)? out, SymInt n) -> ()")  # fmt: skip


def test_errors_under_compile_name_the_kernel_and_the_argument(cpp):
    k = cpp["axpy"]
    untyped = lp.load_cubin(k.image, "axpy")  # no signature: only the sizes are known
    x = torch.empty(8, device="meta")
    with pytest.raises(Exception, match=r"kernel 'axpy' under torch.compile, argument 0 \('arg0'\): the type of "
                       r"param 0 is unknown .* signature="):  # fmt: skip
        torch.compile(lambda x: untyped[1, 32](x, x, 1.0, 8), fullgraph=True, backend="eager")(x)
    with pytest.raises(Exception, match=r"kernel 'axpy' under torch.compile: argument 3 \('n'\) is missing"):
        torch.compile(lambda x: k[1, 32](x, x, 1.0), fullgraph=True, backend="eager")(x)
    with pytest.raises(Exception, match=r"kernel 'axpy' under torch.compile: stream=, cluster=, cooperative= and "
                       r"pdl= are not traced"):  # fmt: skip
        torch.compile(lambda x: k.launch(1, 32, x, x, 1.0, 8, pdl=True), fullgraph=True, backend="eager")(x)
    torch._dynamo.reset()


def test_eager_launch_is_one_c_call_bound_to_the_kernel(cpp):
    k = cpp["axpy"]
    assert isinstance(k.launch, types.MethodType)
    assert k.launch.__func__ is _traced.launch_first
    # no class defines launch: the instance's attribute is read on Python's fast path, not found on
    # the class and then shadowed (a slower read of every k.launch)
    for kind in (lp.Kernel, CutileKernel, WarpKernel):
        assert not any("launch" in vars(c) for c in kind.__mro__), kind
    assert _traced.dynamo_compiling() is False  # k[grid] asks it in eager
    # its repr names the kernel, not the whole spec with its binary
    assert "Traced('k" in repr(k.launch) and "kernel 'axpy'" in repr(k.launch) and len(repr(k.launch)) < 300
    assert "image=" not in repr(k.spec) and "name='axpy'" in repr(k.spec)
    if lp.launch_path()[0] == "compiled":
        assert isinstance(_traced.launch_first, types.BuiltinFunctionType)  # no Python frame in eager
        assert isinstance(_traced.dynamo_compiling, types.BuiltinFunctionType)


def test_import_leaves_dynamo_alone_and_compile_still_traces():
    code = textwrap.dedent(
        f"""
        import sys, torch, launchpad as lp
        assert "torch._dynamo" not in sys.modules, "import launchpad imported Dynamo"
        k = lp.compile_cuda({SOURCE!r}, "axpy", arch="sm_90")
        graphs = []
        def f(x, y):
            k[1, 256](y, x, 2.0, x.shape[0])
            return y
        x = torch.empty(16, device="meta")
        torch.compile(f, fullgraph=True, backend=lambda gm, ex: (graphs.append(gm), gm.forward)[1])(x, x)
        print([str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "launchpad.k" in out.stdout and "axpy" in out.stdout
