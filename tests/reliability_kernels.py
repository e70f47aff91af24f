"""One accumulate kernel, ``out[i] += x[i]``, from each front end, for the reliability tests.

The three kernels do the same thing, so a test can run them side by side and check every
result with one reference. :func:`build` compiles them (for the current GPU, or for ``arch``);
:func:`launcher` gives one uniform call for each, ``run(out, x, stream=None)``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl
from numba import cuda

import launchpad as lp

BLOCK = 256
FRONT_ENDS = ("cpp", "triton", "numba")

CPP_SOURCE = r"""
extern "C" __global__ void accumulate(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] += x[i];
}
"""


@triton.jit
def accumulate_kernel(out_ptr, x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask) + tl.load(x_ptr + offs, mask=mask), mask=mask)


def accumulate_numba(out, x):
    i = cuda.grid(1)
    if i < out.size:
        out[i] += x[i]


def build(arch: str | None = None) -> dict[str, lp.Kernel]:
    """The three kernels, for the current GPU (``arch=None``) or for ``arch`` (e.g. ``"sm_90"``)."""
    target = None if arch is None else int(arch.removeprefix("sm_"))
    return {
        "cpp": lp.compile_cuda(CPP_SOURCE, "accumulate", arch=arch, signature="*fp32, *fp32, i32"),
        "triton": lp.from_triton(
            accumulate_kernel, signature="*fp32, *fp32, i32", constexprs={"BLOCK": BLOCK}, target=target,
            attrs={"out_ptr": "D", "x_ptr": "D"},
        ),
        "numba": lp.from_numba(accumulate_numba, "void(float32[::1], float32[::1])", arch=arch),
    }  # fmt: skip


def small_ints(n: int, device: int | str = "cuda") -> torch.Tensor:
    """Random small integers as float32: sums of thousands of them stay exact."""
    device = f"cuda:{device}" if isinstance(device, int) else device
    return torch.randint(-8, 9, (n,), device=device).float()


def grid(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def launcher(front_end: str, kernel: lp.Kernel, n: int) -> Callable[..., None]:
    """``run(out, x, stream=None)``: one launch of ``kernel`` in its front end's own syntax."""
    g = grid(n)
    if front_end == "cpp":
        return lambda out, x, stream=None: kernel.launch(g, BLOCK, out, x, n, **_on(stream))
    if front_end == "triton":
        return lambda out, x, stream=None: kernel.launch(g, None, out, x, n, BLOCK, **_on(stream))
    return lambda out, x, stream=None: kernel.launch(g, BLOCK, out, x, **_on(stream))


def bind(front_end: str, kernel: lp.Kernel, out: torch.Tensor, x: torch.Tensor, stream: Any) -> Callable[[], None]:
    """One launch of ``kernel`` on ``out``/``x`` packed once, as ``Kernel.bind`` does."""
    n = out.numel()
    if front_end == "cpp":
        return kernel.bind(grid(n), BLOCK, out, x, n, stream=stream)
    if front_end == "triton":
        return kernel.bind(grid(n), None, out, x, n, BLOCK, stream=stream)
    return kernel.bind(grid(n), BLOCK, out, x, stream=stream)


def _on(stream: Any) -> dict:
    return {} if stream is None else {"stream": stream}


def run_threads(work: Callable[[int], Any], count: int, timeout: float) -> list[Any]:
    """Run ``work(0)`` ... ``work(count - 1)`` in threads that start together; return their
    results in order. A thread's exception is raised here; a thread still running after
    ``timeout`` seconds fails the test as a hang."""
    start = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            start.wait()
            results[t] = work(t)
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)
            start.abort()

    threads = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(count)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=timeout)
    assert not any(th.is_alive() for th in threads), f"a launching thread hung (over {timeout} s)"
    if errors:
        raise errors[0]
    return results
