"""What the launchers under test share: the kernels' sources, the tensors, the kernels each built
once (:class:`Context`), and the C floor every launcher is compared with (:class:`CFloor`).

All launchers launch the same tiny kernel, ``y[i] = 2 * x[i]`` over 1024 floats in one block of
1024 threads (two pointers and an int), on torch's current stream, so the GPU is never the
bottleneck and what is timed is the host's cost per launch. The argument-count sweep uses
kernels with k pointer arguments (plus ``n``) whose C++ and Triton sources are generated here.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from .harness import Missing, WrongResult, describe

N = 1024  # elements of the launch-overhead kernel: one block of 1024 threads
SWEEP_N = 128  # elements of the sweep kernels: one block of 128 threads (Triton: 4 warps)
SWEEP_KS = (1, 3, 4, 8, 16, 32)

CPP_SOURCE = r"""
extern "C" __global__ void double_it(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2.0f;
}
"""
CPP_NAME = "double_it"
NUMBA_SIGNATURE = "void(float32[::1], float32[::1], int32)"
TRITON_BLOCK = 1024


def sweep_cpp_source(k: int) -> str:
    """A kernel with k pointer arguments and ``n``: ``p0[i] = 1 + p1[i] + ... + p{k-1}[i]``.

    Every pointer is read, so none is an unused parameter; with ``p1..`` all ones the result
    is ``k`` everywhere, which the setup checks.
    """
    params = ", ".join(["float* p0", *(f"const float* p{j}" for j in range(1, k)), "int n"])
    body = "".join(f"        acc += p{j}[i];\n" for j in range(1, k))
    return (
        f'extern "C" __global__ void ptrs{k}({params}) {{\n'
        "    int i = threadIdx.x;\n"
        "    if (i < n) {\n"
        "        float acc = 1.0f;\n"
        f"{body}"
        "        p0[i] = acc;\n"
        "    }\n"
        "}\n"
    )


def sweep_triton_source(k: int) -> str:
    """The Triton twin of :func:`sweep_cpp_source`, as a module defining ``ptrs{k}``."""
    params = ", ".join([*(f"p{j}" for j in range(k)), "n", "BLOCK: tl.constexpr"])
    loads = "".join(f"    acc += tl.load(p{j} + offs, mask=mask)\n" for j in range(1, k))
    return (
        "import triton\n"
        "import triton.language as tl\n\n\n"
        "@triton.jit\n"
        f"def ptrs{k}({params}):\n"
        "    offs = tl.arange(0, BLOCK)\n"
        "    mask = offs < n\n"
        "    acc = tl.full((BLOCK,), 1.0, tl.float32)\n"
        f"{loads}"
        "    tl.store(p0 + offs, acc, mask=mask)\n"
    )


# --- shared state --------------------------------------------------------------------------------


class Context:
    """Tensors and kernels shared by the launchers, each built once and on first use.

    A build that fails is remembered as failed, so the launchers depending on it are all
    reported missing with the same reason without retrying (a Triton compile takes seconds).
    """

    def __init__(self, workdir: Path, *, graph_kernels: int = 100):
        import torch

        self.torch = torch
        self.workdir = workdir
        self.graph_kernels = graph_kernels
        self.device = torch.cuda.current_device()
        self.n = N
        self.x = torch.arange(N, dtype=torch.float32, device="cuda") * 0.5
        self.y = torch.zeros_like(self.x)
        self.expected = (self.x * 2).cpu()
        self._memo: dict[str, tuple[bool, Any]] = {}

    @property
    def stream(self) -> int:
        """torch's current raw stream handle: every launcher launches there."""
        return self.torch.cuda.current_stream().cuda_stream

    def once(self, key: str, build: Callable[[], Any]) -> Any:
        if key not in self._memo:
            try:
                self._memo[key] = (True, build())
            except Exception as exc:
                self._memo[key] = (False, exc if isinstance(exc, Missing) else Missing(describe(exc)))
        ok, value = self._memo[key]
        if not ok:
            raise Missing(str(value))
        return value

    def verify(
        self,
        launch: Callable[[], Any],
        *,
        reset: Callable[[], Any] | None = None,
        read: Callable[[], Any] | None = None,
        expected: Any = None,
    ) -> None:
        """Clear the output, launch once, wait, and compare with the expected result."""
        torch = self.torch
        (reset or self.y.zero_)()
        torch.cuda.synchronize()
        launch()
        torch.cuda.synchronize()
        got = torch.as_tensor(np.asarray(read())) if read is not None else self.y.cpu()
        want = self.expected if expected is None else expected
        if got.shape != want.shape or not torch.equal(got.cpu(), want):
            bad = (got.cpu() != want).sum().item() if got.shape == want.shape else "shape"
            raise WrongResult(f"wrong result: {bad} of {want.numel()} elements differ from torch")

    # --- kernels shared by several launchers ---

    def cpp(self) -> Any:
        """The C++ kernel, compiled with launchpad.compile_cuda for the current GPU."""
        import launchpad

        return self.once("cpp", lambda: launchpad.compile_cuda(CPP_SOURCE, CPP_NAME))

    def triton(self) -> SimpleNamespace:
        """Triton's JIT function and the CompiledKernel its first launch returns."""

        def build() -> SimpleNamespace:
            mods = _import_triton()
            from . import _triton_kernels

            fn = _triton_kernels.double_it
            compiled = fn[(1,)](self.x, self.y, self.n, BLOCK=TRITON_BLOCK)  # compiles, launches, returns it
            self.torch.cuda.synchronize()
            return SimpleNamespace(**vars(mods), fn=fn, compiled=compiled)

        return self.once("triton", build)

    def cfloor(self) -> CFloor:
        return self.once("cfloor", lambda: CFloor(self.device))

    def cuda_core(self) -> SimpleNamespace:
        """cuda.core's launch API, with torch's current stream as a cuda.core Stream."""

        def build() -> SimpleNamespace:
            try:
                from cuda.core import Device, LaunchConfig, ObjectCode, launch
            except Exception as exc:
                raise Missing(f"cuda.core: {describe(exc)}") from None
            dev = Device(self.device)
            dev.set_current()
            handle = self.stream
            try:  # torch's current stream, borrowed through the stream protocol
                stream = dev.create_stream(_StreamHandle(handle))
            except Exception:
                if handle != 0:
                    raise
                from cuda.core import LEGACY_DEFAULT_STREAM  # torch's default stream is the legacy one

                stream = LEGACY_DEFAULT_STREAM
            return SimpleNamespace(launch=launch, LaunchConfig=LaunchConfig, ObjectCode=ObjectCode, stream=stream)

        return self.once("cuda_core", build)

    def numba(self) -> SimpleNamespace:
        def build() -> SimpleNamespace:
            try:
                from numba import cuda as ncuda

                from . import _numba_kernels
            except Exception as exc:
                raise Missing(f"numba-cuda: {describe(exc)}") from None
            return SimpleNamespace(cuda=ncuda, kernels=_numba_kernels)

        return self.once("numba", build)

    def numba_dispatcher(self) -> Any:
        """Numba's own dispatcher (``cuda.jit``) of the Numba kernel, compiled on first call."""
        nb = self.numba()
        # numba-cuda 0.30 registers an overload of np.row_stack, which numpy 2.5 removed: put it
        # back for Numba's dispatcher only (launchpad's Numba path must do without it).
        if not hasattr(np, "row_stack"):
            np.row_stack = np.vstack
        return self.once("numba_dispatcher", lambda: nb.cuda.jit(nb.kernels.double_it))

    def lp_numba(self) -> Any:
        """The Numba kernel through launchpad.from_numba."""
        import launchpad

        nb = self.numba()

        def build() -> Any:
            try:
                return launchpad.from_numba(nb.kernels.double_it, NUMBA_SIGNATURE)
            except TypeError:  # a front end that wants Numba's dispatcher rather than the function
                return launchpad.from_numba(nb.cuda.jit(nb.kernels.double_it), NUMBA_SIGNATURE)

        return self.once("lp_numba", build)

    def sweep(self, k: int) -> SimpleNamespace:
        """The tensors of the k-pointer sweep point: ``p0`` (output), then ``k - 1`` inputs of ones."""

        def build() -> SimpleNamespace:
            torch = self.torch
            ptrs = [torch.zeros(SWEEP_N, device="cuda")] + [torch.ones(SWEEP_N, device="cuda") for _ in range(k - 1)]
            expected = torch.full((SWEEP_N,), float(k))
            return SimpleNamespace(ptrs=ptrs, expected=expected, reset=ptrs[0].zero_, read=lambda: ptrs[0].cpu())

        return self.once(f"sweep{k}", build)

    def load_module(self, name: str, source: str) -> Any:
        """A Python module made from ``source``, written to the work folder first: Triton reads the
        source of the module a kernel comes from."""
        path = self.workdir / f"{name}.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def sweep_cpp(self, k: int) -> Any:
        """The C++ kernel of the k-pointer sweep point."""
        import launchpad

        return self.once(f"sweep_cpp{k}", lambda: launchpad.compile_cuda(sweep_cpp_source(k), f"ptrs{k}"))

    def sweep_triton(self, k: int) -> SimpleNamespace:
        def build() -> SimpleNamespace:
            mods = _import_triton()
            s = self.sweep(k)
            fn = getattr(self.load_module(f"lp_bench_sweep{k}", sweep_triton_source(k)), f"ptrs{k}")
            compiled = fn[(1,)](*s.ptrs, SWEEP_N, BLOCK=SWEEP_N)
            self.torch.cuda.synchronize()
            return SimpleNamespace(**vars(mods), fn=fn, compiled=compiled)

        return self.once(f"sweep_triton{k}", build)


class _StreamHandle:
    """A raw stream handle as an object with ``__cuda_stream__`` (what cuda.core wraps)."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.handle


def _import_triton() -> SimpleNamespace:
    try:
        import triton
        from triton import knobs
        from triton.runtime import driver
    except Exception as exc:
        raise Missing(f"triton: {describe(exc)}") from None
    return SimpleNamespace(triton=triton, knobs=knobs, driver=driver)


def user_args(kernel: Any, args: Sequence[Any], constexprs: int) -> tuple[Any, ...]:
    """The arguments a launchpad Kernel from Triton takes: all of Triton's (constexprs included,
    as ``jit_fn[grid]`` takes them) or those without the trailing constexprs, whichever its
    argument list says."""
    count = 1 + max((a.path[0] for a in kernel.args if a.path), default=-1)
    if count == len(args):
        return tuple(args)
    if count == len(args) - constexprs:
        return tuple(args[: len(args) - constexprs])
    raise Missing(f"the kernel takes {count} arguments; expected {len(args)} or {len(args) - constexprs}")


# --- the C floor ---------------------------------------------------------------------------------


class CFloor:
    """The floor: ``cuLaunchKernel`` called from a C loop (``launchpad.launch._claunch.launch_loop``), on
    a function launchpad loaded from the same cubin, with the parameters packed once."""

    def __init__(self, device: int):
        from launchpad.core import driver as _driver
        from launchpad.launch import executor as _executor

        if _executor._claunch is None:
            raise Missing(f"the C floor runs in launchpad's compiled module, which is unavailable: "
                          f"{_executor.launch_path()[1]}")  # fmt: skip
        self.loop = _executor._claunch.launch_loop
        self.launch = _driver.launch_entry_points()[0]
        self.device = device
        self.compiler = "launchpad.launch._claunch"

    def load(self, kernel: Any) -> int:
        """The function address of a launchpad kernel on this device (loaded once)."""
        return int(kernel._loader.entry(self.device)[3])

    def launcher(
        self, function: int, grid: int, block: int, values: Sequence[Any], stream: int
    ) -> Callable[[int], None]:
        """A function issuing ``count`` launches of one prepacked launch from C."""
        params = (ctypes.c_void_p * max(len(values), 1))(*[ctypes.addressof(v) for v in values])
        loop, launch, address = self.loop, self.launch, ctypes.addressof(params)

        def batch(count: int, _keep: Any = (values, params)) -> None:
            err = loop(launch, function, count, (grid, 1, 1), (block, 1, 1), 0, stream or 0, address)
            if err:
                from launchpad.core import driver as _driver

                name, message = _driver.error_text(err)
                raise RuntimeError(f"cuLaunchKernel failed in the C loop: {name}: {message}")

        return batch
