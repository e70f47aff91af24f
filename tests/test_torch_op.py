"""``launchpad.torch_op`` without a GPU: the schemas inferred for C++, Triton and Numba kernels,
the registration errors, the fake implementation (fake and meta tensors), tracing by
``torch.compile(fullgraph=True)``, and the real implementation run against ``fake_gpu`` (registered
for CPU tensors as well, so that the op dispatches to it here) down to the bytes of each launch."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import struct

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import launchpad as lp
from launchpad import torch_ops as _torch_op
from launchpad.launch import checks as _checks

ARCH = "sm_90"

SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
extern "C" __global__ void mixed(const __half* h, double* d, long long n64, unsigned char u8, bool flag,
                                 __nv_bfloat16 b, double f64, unsigned long long* p) {
    if (flag) { d[0] = (double)__half2float(h[0]) + f64 + (double)__bfloat162float(b) + n64 + u8; p[0] = 1; }
}
struct Pair { float a, b; };
extern "C" __global__ void by_value(float* y, Pair pair) { y[0] = pair.a + pair.b; }
"""

_ids = itertools.count()


def unique(base: str) -> str:
    """A fresh operator name: torch cannot drop a definition, so each test registers its own."""
    return f"lptest::{base}_{next(_ids)}"


def q(v: int) -> bytes:
    return struct.pack("<Q", v)


def i32(v: int) -> bytes:
    return struct.pack("<i", v)


def f32(v: float) -> bytes:
    return struct.pack("<f", v)


def _untyped(kernel):
    """The kernel as a bare cubin gives it: sizes and offsets, no types."""
    return lp.load_cubin(kernel.image, kernel.name)


@pytest.fixture(scope="module")
def cpp():
    return {
        "scale": lp.compile_cuda(SOURCE, "scale", arch=ARCH, signature="*fp32, *fp32, fp32, i32"),
        "mixed": lp.compile_cuda(SOURCE, "mixed", arch=ARCH, signature="*fp16, *fp64, i64, u8, i1, bf16, fp64, *u64"),
        "untyped": _untyped(lp.compile_cuda(SOURCE, "scale", arch=ARCH)),
        "by_value": lp.compile_cuda(SOURCE, "by_value", arch=ARCH, signature="*fp32, bytes8"),
    }


def on_cpu(op: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """Also register the op's real implementation for CPU tensors, which ``fake_gpu`` launches."""
    reg = _torch_op._REGISTRY[op._schema.name]
    reg.library.impl(op._schema.name.split("::")[1], reg.impl, "CPU")
    return op


def scale_op(kernel, **kw):
    kw.setdefault("grid", lambda x, y, a, n: (n + 255) // 256)
    return lp.torch_op(unique("scale"), kernel, names=("x", "y", "a", "n"), block=256, mutates=("y",), **kw)


# --- schemas ------------------------------------------------------------------------------------


def test_cpp_schemas(cpp):
    op = scale_op(cpp["scale"])
    assert op is getattr(torch.ops.lptest, op._schema.name.split("::")[1]).default
    assert str(op._schema) == f"{op._schema.name}(Tensor x, Tensor(a!) y, float a, SymInt n) -> ()"

    # names from the kernel's declaration; every type word; two mutated tensors, two alias sets
    name = unique("mixed")
    op = lp.torch_op(name, cpp["mixed"], grid=1, block=1, mutates=("p", "d"))
    assert str(op._schema) == (
        f"{name}(Tensor h, Tensor(a!) d, SymInt n64, SymInt u8, bool flag, float b, float f64, Tensor(b!) p) -> ()"
    )
    # a bare cubin has no source: default names
    name = unique("untyped_names")
    bare = lp.load_cubin(cpp["mixed"].image, "mixed", signature="*fp16, *fp64, i64, u8, i1, bf16, fp64, *u64")
    op = lp.torch_op(name, bare, grid=1, block=1, mutates=("arg7", "arg1"))
    assert str(op._schema) == (
        f"{name}(Tensor arg0, Tensor(a!) arg1, SymInt arg2, SymInt arg3, bool arg4, float arg5, float arg6, "
        "Tensor(b!) arg7) -> ()"
    )

    # functional: the output is no input and comes back; several outputs come back as a tuple
    name = unique("scale_new")
    op = lp.torch_op(name, cpp["scale"], names=("x", "y", "a", "n"), grid=1, block=256,
                     outputs={"y": lambda x, a, n: torch.empty_like(x)})  # fmt: skip
    assert str(op._schema) == f"{name}(Tensor x, float a, SymInt n) -> Tensor"
    name = unique("mixed_new")
    op = lp.torch_op(name, cpp["mixed"], grid=1, block=1, mutates=("d",),
                     outputs={"p": lambda *a: a[0].new_empty(1, dtype=torch.uint64),
                              "h": lambda *a: torch.empty_like(a[0])})  # fmt: skip
    assert str(op._schema) == (
        f"{name}(Tensor(a!) d, SymInt n64, SymInt u8, bool flag, float b, float f64) -> (Tensor, Tensor)"
    )


triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402

SM90 = GPUTarget("cuda", 90, 32)


@pytest.fixture(scope="module")
def tk(tmp_path_factory):
    """Triton kernels compiled for sm_90 into a private Triton cache."""
    import triton_kernels as K

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        yield {
            "add": lp.from_triton(K.add_kernel, signature="*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 256},
                                  target=SM90),
            # a constexpr between runtime arguments: the op takes the others, the launch gets sx=1
            "strided": lp.from_triton(
                K.strided_scale_kernel,
                signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "sx": "constexpr", "so": "i32",
                           "alpha": "fp32", "BLOCK": "constexpr"},
                constexprs={"sx": 1, "BLOCK": 128}, target=SM90,
            ),
            "tuple": lp.from_triton(
                K.tuple_kernel, signature={"out_ptr": "*fp32", "t": ("*fp32", "fp32", "i32"), "n": "i32"},
                constexprs={"BLOCK": 128}, target=SM90,
            ),
        }  # fmt: skip


def test_triton_schemas(tk):
    name = unique("add")
    op = lp.torch_op(name, tk["add"], grid=1, mutates=("out_ptr",))
    assert str(op._schema) == f"{name}(Tensor x_ptr, Tensor y_ptr, Tensor(a!) out_ptr, SymInt n) -> ()"
    name = unique("add_new")
    op = lp.torch_op(name, tk["add"], grid=1, outputs={"out_ptr": lambda x, y, n: torch.empty_like(x)})
    assert str(op._schema) == f"{name}(Tensor x_ptr, Tensor y_ptr, SymInt n) -> Tensor"
    name = unique("strided")
    op = lp.torch_op(name, tk["strided"], grid=1, mutates=("out_ptr",))
    assert str(op._schema) == f"{name}(Tensor x_ptr, Tensor(a!) out_ptr, SymInt n, SymInt so, float alpha) -> ()"


numba_cuda = pytest.importorskip("numba.cuda")


def nb_axpy(out, x, y, a):
    i = numba_cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def nb_rotate(out, x, c):
    i, j = numba_cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = x[i, j] * c


@pytest.fixture(scope="module")
def nk():
    return {
        "axpy": lp.from_numba(nb_axpy, "void(float32[::1], float32[::1], float32[::1], float32)", arch=ARCH),
        "rotate": lp.from_numba(nb_rotate, "void(complex64[:, ::1], complex64[:, :], complex64)", arch=ARCH),
    }


def test_numba_schemas(nk):
    name = unique("axpy")
    op = lp.torch_op(name, nk["axpy"], grid=1, block=256, mutates=("out",))
    assert str(op._schema) == f"{name}(Tensor(a!) out, Tensor x, Tensor y, float a) -> ()"
    name = unique("rotate")
    op = lp.torch_op(name, nk["rotate"], grid=1, block=(16, 16), outputs={"out": lambda x, c: torch.empty_like(x)})
    assert str(op._schema) == f"{name}(Tensor x, complex c) -> Tensor"


# --- registration errors --------------------------------------------------------------------------


def test_untyped_and_struct_parameters_are_refused(cpp):
    with pytest.raises(lp.LaunchpadError) as err:
        lp.torch_op("lptest::never_untyped", cpp["untyped"], grid=1, block=1)
    assert str(err.value) == (
        "torch_op('lptest::never_untyped'): kernel 'scale', argument 0 ('arg0'): the type of param 0 is unknown "
        "(the binary gives only its size, 8 bytes), so no schema can be inferred; compile or load the kernel with "
        'signature= (type words such as "*fp32, *fp32, fp32, i32")'
    )
    with pytest.raises(lp.LaunchpadError, match=r"argument 1 \('pair'\): param 1 \('pair', bytes8\) is a by-value struct "
                       r"of 8 bytes, which an operator schema cannot take"):  # fmt: skip
        lp.torch_op("lptest::never_struct", cpp["by_value"], grid=1, block=1)
    assert not hasattr(torch.ops.lptest, "never_untyped") and "lptest::never_struct" not in _torch_op._REGISTRY


def test_tuple_arguments_are_refused(tk):
    with pytest.raises(lp.LaunchpadError, match=r"kernel 'tuple_kernel', argument 1 \('t'\) is a tuple"):
        lp.torch_op("lptest::never_tuple", tk["tuple"], grid=1)


def test_bad_mutates_outputs_and_names(cpp):
    k = cpp["scale"]
    with pytest.raises(lp.ArgumentError) as err:
        lp.torch_op("lptest::never", k, grid=1, block=1, mutates=("z",))
    assert str(err.value) == (
        "torch_op('lptest::never'): mutates names 'z', no argument of kernel 'scale'; its tensor arguments: x, y"
    )
    with pytest.raises(lp.ArgumentError, match=r"mutates names 'a', a float argument of kernel 'scale'"):
        lp.torch_op("lptest::never", k, grid=1, block=1, mutates="a")
    with pytest.raises(lp.ArgumentError, match=r"outputs names 'out', no argument"):
        lp.torch_op("lptest::never", k, grid=1, block=1, outputs={"out": torch.empty_like})
    with pytest.raises(lp.ArgumentError, match=r"'y' is an output, so it cannot also be in mutates"):
        lp.torch_op("lptest::never", k, grid=1, block=1, mutates=("y",), outputs={"y": torch.empty_like})
    with pytest.raises(lp.ArgumentError, match=r"names= must give 4 names \(one per argument the operator passes: "
                       r"x, y, a, n\), got \('x', 'y'\)"):  # fmt: skip
        lp.torch_op("lptest::never", k, grid=1, block=1, names=("x", "y"))
    with pytest.raises(lp.ArgumentError, match=r"'def' is not a valid argument name"):
        lp.torch_op("lptest::never", k, grid=1, block=1, names=("x", "y", "def", "n"))
    with pytest.raises(lp.ArgumentError, match=r"two arguments are named 'x'"):
        lp.torch_op("lptest::never", k, grid=1, block=1, names=("x", "x", "a", "n"))
    with pytest.raises(lp.ArgumentError, match=r"kernel 'scale' has no fixed block; pass block="):
        lp.torch_op("lptest::never", k, grid=1)
    with pytest.raises(lp.ArgumentError, match=r"the operator name must be 'namespace::name'"):
        lp.torch_op("never", k, grid=1, block=1)
    with pytest.raises(lp.ArgumentTypeError, match=r"expected a launchpad.Kernel, got str"):
        lp.torch_op("lptest::never", "scale", grid=1, block=1)  # type: ignore[arg-type]
    assert not hasattr(torch.ops.lptest, "never")


def test_duplicate_registration(cpp):
    op = scale_op(cpp["scale"])
    name = op._schema.name
    with pytest.raises(lp.LaunchpadError) as err:
        lp.torch_op(name, cpp["mixed"], grid=1, block=1)
    assert str(err.value) == (
        f"torch_op: operator {name!r} is already registered (kernel 'scale', "
        f"{name}(Tensor x, Tensor(a!) y, float a, SymInt n) -> ()); operators cannot be redefined in a process, "
        "choose another name"
    )
    assert _torch_op._REGISTRY[name].kernel is cpp["scale"]  # the first registration stands
    # an operator defined outside launchpad
    lib = torch.library.Library("lptest", "FRAGMENT")
    lib.define("outside(Tensor x) -> ()")
    with pytest.raises(lp.LaunchpadError, match=r"operator 'lptest::outside' already exists in torch"):
        lp.torch_op("lptest::outside", cpp["scale"], grid=1, block=1)
    assert "lptest::outside" not in _torch_op._REGISTRY
    lib._destroy()


# --- the fake implementation ----------------------------------------------------------------------


def test_fake_implementation_allocates_and_launches_nothing(cpp, fake_gpu):
    k = fake_gpu.install(cpp["scale"])
    mutating = scale_op(k)
    functional = lp.torch_op(unique("scale_new"), k, names=("x", "y", "a", "n"), grid=1, block=256,
                             outputs={"y": lambda x, a, n: x.new_empty(2 * n)})  # fmt: skip
    with FakeTensorMode():
        x = torch.empty(8, 3, device="cuda")
        y = torch.empty(8, 3, device="cuda")
        assert mutating(x, y, 2.0, 24) is None
        out = functional(x, 2.0, 24)
        assert (type(out).__name__, out.shape, out.dtype, out.device) == ("FakeTensor", (48,), torch.float32, x.device)
        # the fake checks what the launch would: the pointer's dtype
        with pytest.raises(lp.ArgumentTypeError) as err:
            functional(x.half(), 2.0, 24)
    assert str(err.value) == (
        f"torch op {functional._schema.name!r} (kernel 'scale'), argument 'x': expected a torch.float32 tensor, "
        "got a torch.float16 tensor"
    )
    # meta tensors dispatch to the same fake
    out = functional(torch.empty(5, device="meta"), 1.0, 5)
    assert (out.shape, out.device.type) == ((10,), "meta")
    assert fake_gpu.launches == []


def test_fake_checks_numba_rank_and_outputs(nk):
    op = lp.torch_op(unique("rotate"), nk["rotate"], grid=1, block=(16, 16),
                     outputs={"out": lambda x, c: x.new_empty(x.shape, dtype=torch.complex128)})  # fmt: skip
    with FakeTensorMode():
        x2 = torch.empty(4, 4, dtype=torch.complex64, device="cuda")
        with pytest.raises(lp.ArgumentError, match=r"argument 'x': expected a 2-dimensional tensor, got 1 dimensions"):
            op(x2.flatten(), 1j)
        with pytest.raises(lp.ArgumentTypeError, match=r"argument 'out': expected a torch.complex64 tensor, got a "
                           r"torch.complex128 tensor"):  # fmt: skip
            op(x2, 1j)


# --- torch.compile ----------------------------------------------------------------------------------


def test_compile_fullgraph_traces_the_ops(cpp):
    mutating = scale_op(cpp["scale"])
    functional = lp.torch_op(unique("scale_new"), cpp["scale"], names=("x", "y", "a", "n"), grid=1, block=256,
                             outputs={"y": lambda x, a, n: torch.empty_like(x)})  # fmt: skip

    def model(x, y):
        mutating(x, y, 2.0, x.shape[0])
        return functional(y, 3.0, y.shape[0]) + 1

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    x, y = torch.empty(8, device="meta"), torch.empty(8, device="meta")
    out = torch.compile(model, fullgraph=True, dynamic=True, backend=backend)(x, y)
    assert (out.shape, out.device.type) == ((8,), "meta")
    (gm,) = graphs
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and n.target in (mutating, functional)]
    assert [n.target for n in calls] == [mutating, functional]
    # n is a SymInt in the schema, so the dynamic size stays a graph input, not a constant 8
    assert all(isinstance(n.args[3 if n.target is mutating else 2], torch.fx.Node) for n in calls)

    # after functionalization the declared mutation of y is what the graph carries
    from torch._dynamo.backends.common import aot_autograd
    from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2

    forward = []

    def fw(gm, example_inputs):
        forward.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, fullgraph=True, dynamic=True, backend=aot_autograd(fw_compiler=fw))(x, y)
    functionalized = [n for n in forward[0].graph.nodes if n.target in (auto_functionalized, auto_functionalized_v2)]
    assert [n.args[0] for n in functionalized] == [mutating]
    torch._dynamo.reset()


# --- the real implementation, against fake_gpu -------------------------------------------------------


def test_real_implementation_launches_with_the_exact_bytes(cpp, fake_gpu):
    k = fake_gpu.install(cpp["scale"])
    op = on_cpu(scale_op(k))
    x, y = torch.randn(1000), torch.randn(1000)
    assert op(x, y, 2.5, 1000) is None
    launch = fake_gpu.last
    assert (launch.grid, launch.block, launch.shared_mem, launch.stream) == ((4, 1, 1), (256, 1, 1), 0, 0x5000)
    assert launch.params == [q(x.data_ptr()), q(y.data_ptr()), f32(2.5), i32(1000)]
    # the same through torch.ops, and with a callable block and shared memory
    getattr(torch.ops.lptest, op._schema.name.split("::")[1])(x, y, 1.0, 3)
    assert fake_gpu.last.grid == (1, 1, 1) and fake_gpu.last.params[2:] == [f32(1.0), i32(3)]
    op2 = on_cpu(lp.torch_op(unique("scale_cfg"), k, grid=(2, 3), block=lambda x, y, a, n: (n, 2),
                             shared_mem=lambda x, y, a, n: 4 * n, mutates=("y",)))  # fmt: skip
    op2(x, y, 1.0, 64)
    assert (fake_gpu.last.grid, fake_gpu.last.block, fake_gpu.last.shared_mem) == ((2, 3, 1), (64, 2, 1), 256)
    assert len(fake_gpu.launches) == 3


def test_functional_op_returns_the_tensor_it_launched_on(cpp, fake_gpu):
    k = fake_gpu.install(cpp["scale"])
    op = on_cpu(lp.torch_op(unique("scale_new"), k, names=("x", "y", "a", "n"), block=128,
                            grid=lambda x, a, n: (n + 127) // 128,
                            outputs={"y": lambda x, a, n: torch.full_like(x, 7.0)}))  # fmt: skip
    x = torch.randn(300)
    y = op(x, -1.5, 300)
    assert torch.equal(y, torch.full_like(x, 7.0))
    assert fake_gpu.last.grid == (3, 1, 1)
    assert fake_gpu.last.params == [q(x.data_ptr()), q(y.data_ptr()), f32(-1.5), i32(300)]


def test_argument_errors_come_from_the_launch(cpp, fake_gpu):
    k = fake_gpu.install(cpp["scale"])
    op = on_cpu(scale_op(k))
    with pytest.raises(lp.ArgumentTypeError, match=r"kernel 'scale', argument 1 \('y'\), param 1 \(\*fp32\): expected a "
                       r"torch.float32 tensor, got a torch.float64 tensor on cpu"):  # fmt: skip
        op(torch.randn(4), torch.randn(4).double(), 1.0, 4)
    with pytest.raises(lp.ArgumentError, match=r"2147483648 is out of range for i32"):
        op(torch.randn(4), torch.randn(4), 1.0, 2**31)
    assert fake_gpu.launches == []


def test_triton_constexpr_filled_and_scratch_null(tk, fake_gpu):
    from triton_abi import NULL_SCRATCH

    k = fake_gpu.install(tk["strided"])
    op = on_cpu(lp.torch_op(unique("strided"), k, grid=lambda x, out, n, so, alpha: (n + 127) // 128,
                            mutates=("out_ptr",)))  # fmt: skip
    x, out = torch.randn(200), torch.randn(400)
    op(x, out, 200, 2, 0.5)
    launch = fake_gpu.last
    assert (launch.grid, launch.block) == ((2, 1, 1), k.plan.block)
    assert launch.params == [q(x.data_ptr()), q(out.data_ptr()), i32(200), i32(2), f32(0.5), *NULL_SCRATCH]


def test_numba_arrays_expand(nk, fake_gpu):
    k = fake_gpu.install(nk["axpy"])
    op = on_cpu(lp.torch_op(unique("axpy"), k, grid=lambda out, x, y, a: (out.numel() + 31) // 32, block=32,
                            mutates=("out",)))  # fmt: skip
    out, x, y = torch.empty(100), torch.randn(100), torch.randn(100)
    op(out, x, y, 3.0)
    launch = fake_gpu.last
    assert launch.grid == (4, 1, 1)

    def array(t):
        return [q(0), q(0), q(t.numel()), q(4), q(t.data_ptr()), q(t.numel()), q(4)]

    assert launch.params == array(out) + array(x) + array(y) + [f32(3.0)]


def test_inputs_on_another_device_switch_to_it(cpp, fake_gpu, monkeypatch):
    k = fake_gpu.install(cpp["scale"])
    op = on_cpu(scale_op(k))
    entered = []

    @contextlib.contextmanager
    def device(d):
        entered.append(d)
        yield

    monkeypatch.setattr(_torch_op, "_switch_device", device)
    x, y = torch.randn(4), torch.randn(4)
    op(x, y, 1.0, 4)  # x.get_device() == -1 == the fake current device: no switch
    assert entered == [] and len(fake_gpu.launches) == 1
    monkeypatch.setattr(_checks, "current_device", lambda: 0)  # the op's own check sees another device
    op(x, y, 1.0, 4)
    assert entered == [-1] and len(fake_gpu.launches) == 2


def emulate_scale(fake_gpu, monkeypatch):
    """Make ``fake_gpu`` run the ``scale`` kernel on the CPU memory its pointers address."""

    def run(launch):
        px, py, a, n = (struct.unpack(f, p)[0] for f, p in zip(("<Q", "<Q", "<f", "<i"), launch.params))
        x = np.ctypeslib.as_array((ctypes.c_float * n).from_address(px))
        np.ctypeslib.as_array((ctypes.c_float * n).from_address(py))[:] = np.float32(a) * x

    fake_gpu.emulate = run


def test_inductor_runs_the_ops_with_their_mutations(cpp, fake_gpu, monkeypatch):
    """The default torch.compile backend on CPU tensors (the ops registered for CPU, the kernel
    emulated): the compiled graph launches each op and the declared mutation reaches the caller."""
    emulate_scale(fake_gpu, monkeypatch)
    k = fake_gpu.install(cpp["scale"])
    mutating = on_cpu(scale_op(k))
    functional = on_cpu(lp.torch_op(unique("scale_new"), k, names=("x", "y", "a", "n"), grid=1, block=256,
                                    outputs={"y": lambda x, a, n: torch.empty_like(x)}))  # fmt: skip

    def model(x, y):
        mutating(x, y, 2.0, x.numel())
        return functional(y, 3.0, y.numel()) + 1

    x = torch.randn(64)
    y_eager, y_compiled = torch.randn(64), torch.randn(64)
    expected = model(x, y_eager)
    torch.testing.assert_close(y_eager, 2.0 * x)  # the emulation computes
    torch._dynamo.reset()
    got = torch.compile(model, fullgraph=True)(x, y_compiled)
    torch._dynamo.reset()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(y_compiled, 2.0 * x)
    assert len(fake_gpu.launches) == 4


def test_opcheck_on_fake_gpu(cpp, fake_gpu, monkeypatch):
    """torch's own checks of the schema (declared mutations, no aliasing), the fake implementation
    and tracing, with the kernel emulated on CPU tensors."""
    emulate_scale(fake_gpu, monkeypatch)
    k = fake_gpu.install(cpp["scale"])
    op = on_cpu(lp.torch_op(unique("scale_new"), k, names=("x", "y", "a", "n"), grid=1, block=256,
                            outputs={"y": lambda x, a, n: torch.empty_like(x)}))  # fmt: skip
    torch.library.opcheck(op, (torch.randn(16), 2.0, 16))
    mutating = on_cpu(scale_op(k))
    torch.library.opcheck(mutating, (torch.randn(16), torch.randn(16), 2.0, 16))
    assert len(fake_gpu.launches) > 2
    # a kernel that writes an argument the schema says it only reads fails the schema check
    undeclared = on_cpu(lp.torch_op(unique("scale_undeclared"), k, grid=1, block=256))
    with pytest.raises(
        Exception, match=r"test_schema failed with Argument y is not defined as mutable but was mutated"
    ):
        torch.library.opcheck(undeclared, (torch.randn(16), torch.randn(16), 2.0, 16), test_utils="test_schema")
