"""The argument-count sweep: the launchers of sweep point k, a kernel with k pointer arguments and
``n`` (``p0[i] = 1 + p1[i] + ... + p{k-1}[i]``), keyed like :data:`launchpad.bench.launchers.LAUNCHERS`."""

from __future__ import annotations

import ctypes

import numpy as np

from .context import SWEEP_N, Context
from .harness import Entry, Timed
from .launchers import pointer_value, python_executor, triton_bare_call

__all__ = ["SWEEP_KEYS", "sweep_entries"]


def sweep_entries(k: int) -> list[Entry]:
    """The launchers of sweep point k (k pointer arguments plus ``n``), keyed like :data:`LAUNCHERS`."""

    def floor(ctx: Context) -> Timed:
        s, cpp, fl = ctx.sweep(k), ctx.sweep_cpp(k), ctx.cfloor()
        function = fl.load(cpp)
        batch = fl.launcher(function, 1, SWEEP_N, [*map(pointer_value, s.ptrs), ctypes.c_int32(SWEEP_N)], ctx.stream)
        ctx.verify(lambda: batch(1), reset=s.reset, read=s.read, expected=s.expected)
        return Timed(batch=batch)

    def cpp(ctx: Context) -> Timed:
        s, kernel = ctx.sweep(k), ctx.sweep_cpp(k)
        args = (*s.ptrs, SWEEP_N)
        call = lambda: kernel.launch(1, SWEEP_N, *args)
        ctx.verify(call, reset=s.reset, read=s.read, expected=s.expected)
        return Timed(call)

    def lp_tri(ctx: Context) -> Timed:
        import launchpad

        s, t = ctx.sweep(k), ctx.sweep_triton(k)
        kernel = launchpad.from_triton(t.compiled)
        args = (*s.ptrs, SWEEP_N)
        call = lambda: kernel.launch(1, None, *args)
        ctx.verify(call, reset=s.reset, read=s.read, expected=s.expected)
        return Timed(call)

    def lp_tl(ctx: Context) -> Timed:
        import launchpad

        s, t = ctx.sweep(k), ctx.sweep_triton(k)
        launcher, grid, args = launchpad.triton_launcher(t.fn), (1,), (*s.ptrs, SWEEP_N)
        call = lambda: launcher[grid](*args, BLOCK=SWEEP_N)
        ctx.verify(call, reset=s.reset, read=s.read, expected=s.expected)
        return Timed(call)

    def jit(ctx: Context) -> Timed:
        s, t = ctx.sweep(k), ctx.sweep_triton(k)
        fn, grid, args = t.fn, (1,), (*s.ptrs, SWEEP_N)
        call = lambda: fn[grid](*args, BLOCK=SWEEP_N)
        ctx.verify(call, reset=s.reset, read=s.read, expected=s.expected)
        return Timed(call)

    def bare(ctx: Context) -> Timed:
        s, t = ctx.sweep(k), ctx.sweep_triton(k)
        call = triton_bare_call(t, (*s.ptrs, SWEEP_N, SWEEP_N))
        ctx.verify(call, reset=s.reset, read=s.read, expected=s.expected)
        return Timed(call)

    def core(ctx: Context) -> Timed:
        s, cpp, cc = ctx.sweep(k), ctx.sweep_cpp(k), ctx.cuda_core()
        kernel = cc.ObjectCode.from_cubin(cpp.image).get_kernel(cpp.name)
        config = cc.LaunchConfig(grid=1, block=SWEEP_N)
        launch, stream, ptrs, n32 = cc.launch, cc.stream, s.ptrs, np.int32(SWEEP_N)
        call = lambda: launch(stream, config, kernel, *[p.data_ptr() for p in ptrs], n32)
        ctx.verify(call, reset=s.reset, read=s.read, expected=s.expected)
        return Timed(call)

    def cpp_py(ctx: Context) -> Timed:
        s, kernel = ctx.sweep(k), python_executor(ctx.sweep_cpp(k))
        args = (*s.ptrs, SWEEP_N)
        call = lambda: kernel.launch(1, SWEEP_N, *args)
        ctx.verify(call, reset=s.reset, read=s.read, expected=s.expected)
        return Timed(call)

    return [
        Entry("c_floor", "C loop calling cuLaunchKernel (the floor)", "floor", floor),
        Entry("lp_cpp", "launchpad Kernel.launch, C++", "launchpad", cpp),
        Entry("lp_cpp_py", "launchpad Kernel.launch, C++, Python executor", "launchpad", cpp_py),
        Entry("lp_triton", "launchpad Kernel.launch, Triton cubin", "launchpad", lp_tri),
        Entry("lp_triton_launcher", "launchpad.triton_launcher(fn)[grid](...)", "launchpad", lp_tl),
        Entry("triton_jit", "Triton fn[grid](...)", "peer", jit),
        Entry("triton_bare", "Triton bare launcher compiled.run(...)", "peer", bare),
        Entry("cuda_core", "cuda.core launch(...)", "peer", core),
    ]


SWEEP_KEYS = [e.key for e in sweep_entries(1)]
