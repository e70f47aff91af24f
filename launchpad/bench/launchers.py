"""The launchers under test: one small factory per launcher.

Each factory takes the :class:`~launchpad.bench.context.Context`, sets its launcher up, launches
once and checks the kernel's result against torch (so a launcher that does nothing cannot look
fast), and returns a :class:`~launchpad.bench.harness.Timed` whose ``call`` issues ONE launch. A
launcher that cannot run here (a peer that is not installed) raises, and the harness reports it
as missing with the reason; a launchpad launcher that raises is a failure. Nothing is ever
substituted for either. Each is called the way its users call it; where a launcher has several
ways, the note says which one is timed.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from .context import CPP_NAME, CPP_SOURCE, NUMBA_SIGNATURE, TRITON_BLOCK, Context, N  # fmt: skip
from .cute import CUTE_LAUNCHERS
from .cute import GROUP as CUTE_GROUP
from .cutile import CUTILE_LAUNCHERS
from .cutile import GROUP as CUTILE_GROUP
from .harness import Entry, Missing, Timed, describe
from .warp import GROUP as WARP_GROUP
from .warp import WARP_LAUNCHERS


def pointer_value(t: Any) -> ctypes.c_uint64:
    return ctypes.c_uint64(t.data_ptr())


# --- launch-overhead launchers -------------------------------------------------------------------


def c_floor(ctx: Context) -> Timed:
    floor, k = ctx.cfloor(), ctx.cpp()
    function = floor.load(k)
    batch = floor.launcher(
        function, 1, N, [pointer_value(ctx.x), pointer_value(ctx.y), ctypes.c_int32(ctx.n)], ctx.stream
    )
    ctx.verify(lambda: batch(1))
    return Timed(batch=batch, note=f"cuLaunchKernel in a C loop ({floor.compiler}), same cubin, prepacked params")


def lp_triton(ctx: Context) -> Timed:
    import launchpad

    t = ctx.triton()
    k = launchpad.from_triton(t.compiled)
    x, y, n = ctx.x, ctx.y, ctx.n
    call = lambda: k.launch(1, None, x, y, n)
    ctx.verify(call)
    return Timed(call, note="k = launchpad.from_triton(compiled); k.launch(1, None, x, y, n): BLOCK built in")


def lp_triton_getitem(ctx: Context) -> Timed:
    import launchpad

    k = launchpad.from_triton(ctx.triton().compiled)
    x, y, n = ctx.x, ctx.y, ctx.n
    call = lambda: k[1](x, y, n)
    ctx.verify(call)
    return Timed(call, note="k[1](x, y, n): Triton's spelling, the launch for that grid made once")


def lp_cpp(ctx: Context) -> Timed:
    k, x, y, n = ctx.cpp(), ctx.x, ctx.y, ctx.n
    call = lambda: k.launch(1, 1024, x, y, n)
    ctx.verify(call)
    return Timed(call, note="k = launchpad.compile_cuda(src, 'double_it'); k.launch(1, 1024, x, y, n)")


def lp_cpp_lambda(ctx: Context) -> Timed:
    note = (
        "the same k.launch(1, 1024, x, y, n), called through its lambda: the other rows run a lambda's "
        "body in their loop (launchpad.bench.caller_loop); this row's difference is a Python frame per call"
    )
    return Timed(lp_cpp(ctx).call, note=note, through_lambda=True)


def lp_numba(ctx: Context) -> Timed:
    k, x, y, n = ctx.lp_numba(), ctx.x, ctx.y, ctx.n
    call = lambda: k.launch(1, 1024, x, y, n)
    ctx.verify(call)
    return Timed(
        call, note=f"k = launchpad.from_numba(fn, {NUMBA_SIGNATURE!r}); k.launch(1, 1024, x, y, n), torch tensors"
    )


def lp_numba_getitem(ctx: Context) -> Timed:
    k, x, y, n = ctx.lp_numba(), ctx.x, ctx.y, ctx.n
    call = lambda: k[1, 1024](x, y, n)
    ctx.verify(call)
    return Timed(call, note="the same kernel launched with Numba's syntax: k[1, 1024](x, y, n)")


def lp_bound(ctx: Context) -> Timed:
    bound = ctx.cpp().bind(1, 1024, ctx.x, ctx.y, ctx.n)
    ctx.verify(bound)
    return Timed(bound, note="bound = k.bind(1, 1024, x, y, n); bound()  (C++ kernel)")


def python_executor(kernel: Any) -> Any:
    """The same kernel launched by the Python executor (the compiled one's fallback)."""
    import launchpad

    return launchpad.Kernel(kernel.spec, compiled=False)


def lp_triton_py(ctx: Context) -> Timed:
    import launchpad

    k = python_executor(launchpad.from_triton(ctx.triton().compiled))
    args = (ctx.x, ctx.y, ctx.n)
    call = lambda: k.launch(1, None, *args)
    ctx.verify(call)
    return Timed(call, note="the same Kernel.launch through the Python executor (Kernel(spec, compiled=False))")


def lp_cpp_py(ctx: Context) -> Timed:
    k, x, y, n = python_executor(ctx.cpp()), ctx.x, ctx.y, ctx.n
    call = lambda: k.launch(1, 1024, x, y, n)
    ctx.verify(call)
    return Timed(call, note="k.launch(1, 1024, x, y, n) through the Python executor")


def lp_bound_py(ctx: Context) -> Timed:
    bound = python_executor(ctx.cpp()).bind(1, 1024, ctx.x, ctx.y, ctx.n)
    ctx.verify(bound)
    return Timed(bound, note="bound() through the Python executor (cuda.bindings cuLaunchKernel)")


def lp_numba_getitem_py(ctx: Context) -> Timed:
    k, x, y, n = python_executor(ctx.lp_numba()), ctx.x, ctx.y, ctx.n
    call = lambda: k[1, 1024](x, y, n)
    ctx.verify(call)
    return Timed(call, note="k[1, 1024](x, y, n) through the Python executor")


def lp_triton_launcher_py(ctx: Context) -> Timed:
    import launchpad

    t = ctx.triton()
    os.environ["LAUNCHPAD_PYTHON_LAUNCH"] = "1"  # the launcher and the kernels it builds: Python
    try:
        launcher = launchpad.triton_launcher(t.fn, target=t.compiled.metadata.target.arch)
        x, y, n = ctx.x, ctx.y, ctx.n
        call = lambda: launcher[(1,)](x, y, n, BLOCK=TRITON_BLOCK)
        ctx.verify(call)
    finally:
        del os.environ["LAUNCHPAD_PYTHON_LAUNCH"]
    return Timed(call, note="triton_launcher(fn)[(1,)](x, y, n, BLOCK=1024) with the Python dispatcher and executor")


def torch_static(ctx: Context) -> Timed:
    t = ctx.triton()
    try:
        from torch._inductor.runtime.static_triton_launcher import StaticallyLaunchedCudaKernel
    except Exception as exc:
        raise Missing(f"torch's static Triton launcher: {describe(exc)}") from None
    compiled = t.compiled
    if getattr(compiled, "_cubin_path", None) is None:  # inductor sets it on the kernels it compiles
        path = ctx.workdir / f"{compiled.metadata.name}.cubin"
        path.write_bytes(compiled.asm["cubin"])
        compiled._cubin_path = str(path)
    k = StaticallyLaunchedCudaKernel(compiled)
    k.load_kernel(ctx.device)
    stream, x, y, n = ctx.stream, ctx.x, ctx.y, ctx.n
    call = lambda: k.run(1, 1, 1, stream, x, y, n)
    ctx.verify(call)
    return Timed(
        call, note="torch._inductor StaticallyLaunchedCudaKernel(compiled).run(1, 1, 1, stream, x, y, n): no checks"
    )


TVM_FFI_SOURCE = r"""
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/extra/cuda/cubin_launcher.h>
#include <tvm/ffi/function.h>

TVM_FFI_EMBED_CUBIN(kernels);

void launch(tvm::ffi::TensorView x, tvm::ffi::TensorView y, int64_t n) {
  static auto kernel = TVM_FFI_EMBED_CUBIN_GET_KERNEL(kernels, "double_it");
  void* px = x.data_ptr();
  void* py = y.data_ptr();
  int n32 = static_cast<int>(n);
  void* args[] = {&px, &py, &n32};
  DLDevice device = x.device();
  auto stream = static_cast<cudaStream_t>(TVMFFIEnvGetStream(device.device_type, device.device_id));
  auto result = kernel.Launch(args, tvm::ffi::dim3(1), tvm::ffi::dim3(1024), stream);
  TVM_FFI_CHECK_CUBIN_LAUNCHER_CUDA_ERROR(result);
}
"""


def tvm_ffi(ctx: Context) -> Timed:
    try:
        import tvm_ffi.cpp
    except Exception as exc:
        raise Missing(f"tvm-ffi: {describe(exc)}") from None
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    module = tvm_ffi.cpp.load_inline(
        "lp_bench_tvm_ffi", cpp_sources=TVM_FFI_SOURCE, functions=["launch"], embed_cubin={"kernels": ctx.cpp().image},
        extra_include_paths=[f"{cuda}/include"], extra_ldflags=[f"-L{cuda}/lib64", "-lcudart"],
        build_directory=str(ctx.workdir / "tvm_ffi"),
    )  # fmt: skip
    launch, x, y, n = module.launch, ctx.x, ctx.y, ctx.n
    call = lambda: launch(x, y, n)
    ctx.verify(call)
    return Timed(
        call, note="tvm_ffi.cpp.load_inline: CubinKernel.Launch of the embedded cubin, torch tensors in, no checks"
    )


_TORCH_OPS: dict[str, Any] = {}  # an operator name can be registered once per process


def lp_torch_op(ctx: Context) -> Timed:
    import launchpad

    if "double_it" not in _TORCH_OPS:
        typed = launchpad.compile_cuda(CPP_SOURCE, CPP_NAME, signature="*fp32, *fp32, i32")
        _TORCH_OPS["double_it"] = launchpad.torch_op(
            "launchpad_bench::double_it", typed, names=("x", "y", "n"), mutates=("y",), grid=1, block=1024
        )
    op, x, y, n = _TORCH_OPS["double_it"], ctx.x, ctx.y, ctx.n
    call = lambda: op(x, y, n)
    ctx.verify(call)
    return Timed(call, note="op = launchpad.torch_op('launchpad_bench::double_it', k, ...); op(x, y, n)")


def torch_library_op(ctx: Context) -> Timed:
    """The floor of an operator: ``torch.library``'s define/impl with an implementation that only
    launches; ``lp_torch_op`` minus this is launchpad's own part of an operator's call."""
    import torch

    import launchpad

    if "by_hand" not in _TORCH_OPS:
        launch = launchpad.compile_cuda(CPP_SOURCE, CPP_NAME, signature="*fp32, *fp32, i32").launch
        library = torch.library.Library("launchpad_bench", "FRAGMENT")
        library.define("double_it_by_hand(Tensor x, Tensor(a!) y, SymInt n) -> ()")
        library.impl("double_it_by_hand", lambda x, y, n: launch(1, 1024, x, y, n), "CUDA")
        _TORCH_OPS["by_hand"] = (library, torch.ops.launchpad_bench.double_it_by_hand.default)
    op, x, y, n = _TORCH_OPS["by_hand"][1], ctx.x, ctx.y, ctx.n
    call = lambda: op(x, y, n)
    ctx.verify(call)
    return Timed(call, note="Library.define/impl by hand, impl = lambda x, y, n: k.launch(1, 1024, x, y, n)")


def lp_triton_launcher(ctx: Context) -> Timed:
    import launchpad

    t = ctx.triton()
    launcher, grid, x, y, n = launchpad.triton_launcher(t.fn), (1,), ctx.x, ctx.y, ctx.n
    call = lambda: launcher[grid](x, y, n, BLOCK=TRITON_BLOCK)
    ctx.verify(call)
    return Timed(call, note="launchpad.triton_launcher(fn)[(1,)](x, y, n, BLOCK=1024)")


def triton_jit(ctx: Context) -> Timed:
    fn, grid, x, y, n = ctx.triton().fn, (1,), ctx.x, ctx.y, ctx.n
    call = lambda: fn[grid](x, y, n, BLOCK=TRITON_BLOCK)
    ctx.verify(call)
    return Timed(call, note="fn[(1,)](x, y, n, BLOCK=1024)")


def triton_compiled(ctx: Context) -> Timed:
    compiled, grid, x, y, n = ctx.triton().compiled, (1, 1, 1), ctx.x, ctx.y, ctx.n
    call = lambda: compiled[grid](x, y, n, TRITON_BLOCK)
    ctx.verify(call)
    return Timed(call, note="compiled[(1, 1, 1)](x, y, n, 1024)  (CompiledKernel.__getitem__ per call)")


def triton_bare_call(t: SimpleNamespace, args: tuple[Any, ...]) -> Callable[[], None]:
    """Triton's launcher called exactly as ``JITFunction.run`` and ``CompiledKernel[grid]`` call it
    (triton/compiler/compiler.py, 3.6), with what they look up per call looked up once."""
    compiled = t.compiled
    device = t.driver.active.get_current_device()
    stream = t.driver.active.get_current_stream(device)
    grid = (1, 1, 1)
    run = compiled.run  # the CudaLauncher; the property loads the module on first use
    function, packed = compiled.function, compiled.packed_metadata
    metadata = compiled.launch_metadata(grid, stream, *args)  # None unless a launch hook is set
    enter, exit_ = t.knobs.runtime.launch_enter_hook, t.knobs.runtime.launch_exit_hook
    return lambda: run(1, 1, 1, stream, function, packed, metadata, enter, exit_, *args)


def triton_bare(ctx: Context) -> Timed:
    call = triton_bare_call(ctx.triton(), (ctx.x, ctx.y, ctx.n, TRITON_BLOCK))
    ctx.verify(call)
    return Timed(call, note="compiled.run(1, 1, 1, stream, function, packed_metadata, None, None, None, x, y, n, 1024)")


def cuda_core(ctx: Context) -> Timed:
    cc, k = ctx.cuda_core(), ctx.cpp()
    kernel = cc.ObjectCode.from_cubin(k.image).get_kernel(k.name)
    config = cc.LaunchConfig(grid=1, block=1024)
    launch, stream, x, y, n32 = cc.launch, cc.stream, ctx.x, ctx.y, np.int32(ctx.n)
    call = lambda: launch(stream, config, kernel, x.data_ptr(), y.data_ptr(), n32)
    ctx.verify(call)
    return Timed(
        call, note="launch(stream, LaunchConfig(grid=1, block=1024), kernel, x.data_ptr(), y.data_ptr(), np.int32(n))"
    )


def cupy_raw(ctx: Context) -> Timed:
    try:
        import cupy as cp
    except Exception as exc:
        raise Missing(f"cupy: {describe(exc)}") from None
    k = ctx.cpp()
    path = ctx.workdir / "double_it.cubin"
    path.write_bytes(k.image)
    cp.cuda.Device(ctx.device).use()
    kernel = cp.RawModule(path=str(path)).get_function(k.name)
    xc = cp.asarray(ctx.x.cpu().numpy())
    yc = cp.zeros_like(xc)
    n32 = np.int32(ctx.n)
    call = lambda: kernel((1,), (1024,), (xc, yc, n32))
    ctx.verify(call, reset=lambda: yc.fill(0), read=lambda: cp.asnumpy(yc))
    return Timed(call, note="RawModule(path=cubin).get_function(...)((1,), (1024,), (x, y, np.int32(n))), cupy arrays")


def numba_devarray(ctx: Context) -> Timed:
    nb, dispatcher = ctx.numba(), ctx.numba_dispatcher()
    dx = nb.cuda.to_device(ctx.x.cpu().numpy())
    dy = nb.cuda.device_array_like(dx)
    zeros, n = np.zeros(N, np.float32), ctx.n
    call = lambda: dispatcher[1, 1024](dx, dy, n)
    ctx.verify(call, reset=lambda: dy.copy_to_device(zeros), read=dy.copy_to_host)
    return Timed(call, note="cuda.jit(fn)[1, 1024](dx, dy, n), Numba device arrays")


def numba_torch(ctx: Context) -> Timed:
    dispatcher, x, y, n = ctx.numba_dispatcher(), ctx.x, ctx.y, ctx.n
    call = lambda: dispatcher[1, 1024](x, y, n)
    ctx.verify(call)
    return Timed(call, note="cuda.jit(fn)[1, 1024](x, y, n), torch tensors")


def torch_mul(ctx: Context) -> Timed:
    torch, x, y = ctx.torch, ctx.x, ctx.y
    call = lambda: torch.mul(x, 2, out=y)
    ctx.verify(call)
    return Timed(call, note="torch.mul(x, 2, out=y)")


def cuda_graph(ctx: Context) -> Timed:
    torch, k, x, y, n = ctx.torch, ctx.cpp(), ctx.x, ctx.y, ctx.n
    count = ctx.graph_kernels
    k.launch(1, 1024, x, y, n)  # loaded before capture: capturing must not load modules
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):  # launchpad launches on torch's current stream: the capture stream
        for _ in range(count):
            k.launch(1, 1024, x, y, n)
    ctx.verify(graph.replay)
    return Timed(graph.replay, per_call=count, sync_in_timing=True,
                 note=f"torch.cuda.CUDAGraph of {count} launches of the C++ kernel; replay time / {count}")  # fmt: skip


LAUNCHERS: list[Entry] = [
    Entry("c_floor", "C loop calling cuLaunchKernel (the floor)", "floor", c_floor),
    Entry("lp_triton", "launchpad Kernel.launch, Triton cubin", "launchpad", lp_triton),
    Entry("lp_triton_getitem", "launchpad k[grid](...), Triton cubin", "launchpad", lp_triton_getitem),
    Entry("lp_cpp", "launchpad Kernel.launch, C++ (compile_cuda)", "launchpad", lp_cpp),
    Entry("lp_cpp_lambda", "launchpad Kernel.launch, C++, called through a lambda", "launchpad", lp_cpp_lambda),
    Entry("lp_numba", "launchpad Kernel.launch, Numba (from_numba)", "launchpad", lp_numba),
    Entry("lp_numba_getitem", "launchpad k[grid, block](...), Numba", "launchpad", lp_numba_getitem),
    Entry("lp_bound", "launchpad bound launch (Kernel.bind, C++)", "launchpad", lp_bound),
    Entry("lp_triton_py", "launchpad Kernel.launch, Triton cubin, Python executor", "launchpad", lp_triton_py),
    Entry("lp_cpp_py", "launchpad Kernel.launch, C++, Python executor", "launchpad", lp_cpp_py),
    Entry(
        "lp_numba_getitem_py", "launchpad k[grid, block](...), Numba, Python executor", "launchpad", lp_numba_getitem_py
    ),
    Entry("lp_bound_py", "launchpad bound launch, Python executor", "launchpad", lp_bound_py),
    Entry(
        "lp_triton_launcher_py",
        "launchpad.triton_launcher(fn)[grid], Python executor",
        "launchpad",
        lp_triton_launcher_py,
    ),
    Entry("lp_triton_launcher", "launchpad.triton_launcher(fn)[grid](...)", "launchpad", lp_triton_launcher),
    Entry("lp_torch_op", "launchpad.torch_op operator, C++ (torch dispatcher)", "launchpad", lp_torch_op),
    Entry(
        "torch_library_op",
        "torch.library op by hand, impl = k.launch (the dispatcher's floor)",
        "peer",
        torch_library_op,
    ),
    Entry("triton_jit", "Triton fn[grid](...)", "peer", triton_jit),
    Entry("triton_compiled", "Triton CompiledKernel[grid](...)", "peer", triton_compiled),
    Entry("triton_bare", "Triton bare launcher compiled.run(...)", "peer", triton_bare),
    Entry("cuda_core", "cuda.core launch(stream, config, kernel, ...)", "peer", cuda_core),
    Entry("torch_static", "torch inductor static Triton launcher", "peer", torch_static),
    Entry("tvm_ffi", "tvm-ffi cubin launcher (load_inline)", "peer", tvm_ffi),
    Entry("cupy", "CuPy RawKernel", "peer", cupy_raw),
    Entry("numba_devarray", "Numba dispatcher, device arrays", "peer", numba_devarray),
    Entry("numba_torch", "Numba dispatcher, torch tensors", "peer", numba_torch),
    Entry("torch_mul", "torch.mul(x, 2, out=y)", "peer", torch_mul),
    *CUTILE_LAUNCHERS,
    *CUTE_LAUNCHERS,
    *WARP_LAUNCHERS,
    Entry("cuda_graph", "CUDA graph replay, per kernel", "graph", cuda_graph),
]


LAUNCH_KEYS = [e.key for e in LAUNCHERS]
#: ``--only`` names that stand for several sections and launchers.
GROUPS: dict[str, list[str]] = {"cutile": CUTILE_GROUP, "cute": CUTE_GROUP, "warp": WARP_GROUP}
