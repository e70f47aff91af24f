"""A Numba kernel on torch tensors through launchpad, without Numba's dispatcher.

    PYTHONPATH=. python3 examples/numba_kernel.py

Without a GPU it only compiles (for sm_90) and prints what launchpad built; with one it also
launches on torch tensors (a transposed view included), checks against torch, shows a refused
argument, calls a CUDA C++ device function from Numba, and times a launch against Numba's own
dispatcher.
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch
from numba import cuda

import launchpad as lp


@cuda.jit  # lazy: launchpad compiles py_func for the signature it is given
def scaled_add(out, x, y, alpha):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = alpha * x[i, j] + y[i, j]


# out and y C-contiguous, x any strides (a transposed or sliced view is fine)
SIGNATURE = "void(float32[:, ::1], float32[:, :], float32[:, ::1], float32)"

# A CUDA C++ device function called from Numba (C ABI).
clamp = cuda.declare_device("example_clamp", "float32(float32, float32, float32)", abi="c")
CLAMP_SOURCE = r"""
extern "C" __device__ float example_clamp(float v, float lo, float hi) { return fminf(fmaxf(v, lo), hi); }
"""


def clamp_kernel(out, x, lo, hi):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = clamp(x[i], lo, hi)


def per_launch_us(launch, repeat: int = 30, batch: int = 200) -> float:
    """Median host time of one launch: ``batch`` launches without a sync inside, then a sync."""
    launch()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(batch):
            launch()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / batch * 1e6)
    return statistics.median(times)


def main() -> None:
    if not torch.cuda.is_available():
        kernel = lp.from_numba(scaled_add, SIGNATURE, arch="sm_90")
        print(kernel, "cooperative" if kernel.plan.cooperative else "")
        for arg in kernel.args:
            print(f"  {arg.name}: {arg.kind} -> params {arg.params or arg.param} {arg.options or ''}")
        print("launch path:", kernel.launch_path)
        print("no GPU: compiled only")
        return

    kernel = lp.from_numba(scaled_add, SIGNATURE)
    rows, cols = 1000, 700
    x = torch.randn(cols, rows, device="cuda").t()  # (rows, cols) transposed view
    y = torch.randn(rows, cols, device="cuda")
    out = torch.empty(rows, cols, device="cuda")
    grid, block = ((rows + 15) // 16, (cols + 15) // 16), (16, 16)
    kernel[grid, block](out, x, y, 0.5)
    torch.testing.assert_close(out, 0.5 * x + y)
    print("scaled_add matches torch")

    try:
        kernel[grid, block](out.t(), x, y, 0.5)  # out must be C-contiguous
    except lp.ArgumentError as exc:
        print("refused:", exc)

    clamped = lp.from_numba(clamp_kernel, "void(float32[::1], float32[::1], float32, float32)",
                            link=[lp.compile_cuda_object(CLAMP_SOURCE)])  # fmt: skip
    v = torch.randn(10_000, device="cuda")
    res = torch.empty_like(v)
    clamped[(v.numel() + 255) // 256, 256](res, v, -0.5, 0.5)
    torch.testing.assert_close(res, v.clamp(-0.5, 0.5))
    print("Numba kernel calling a C++ device function matches torch")

    small = [torch.randn(32, 32, device="cuda") for _ in range(3)]
    a, b, c = small
    ours = per_launch_us(lambda: kernel[1, (32, 32)](a, b, c, 2.0))
    print(f"launchpad, torch tensors:      {ours:6.2f} us / launch")
    try:
        dispatcher = scaled_add[1, (32, 32)]
        da, db, dc = (cuda.as_cuda_array(t) for t in small)
        theirs_dev = per_launch_us(lambda: dispatcher(da, db, dc, np.float32(2.0)))
        theirs_torch = per_launch_us(lambda: dispatcher(a, b, c, np.float32(2.0)))
        print(f"Numba dispatcher, device arrays: {theirs_dev:6.2f} us / launch ({theirs_dev / ours:.1f}x)")
        print(f"Numba dispatcher, torch tensors: {theirs_torch:6.2f} us / launch ({theirs_torch / ours:.1f}x)")
    except Exception as exc:  # e.g. numpy 2.5 removed np.row_stack, which the dispatcher uses
        print(f"Numba's dispatcher could not launch here: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
