"""Numba kernels of the launch benchmarks (imported only when numba-cuda is installed)."""

from __future__ import annotations

from numba import cuda


def double_it(x, y, n):
    """``y[i] = 2 * x[i]``: the same tiny kernel as the C++ and Triton ``double_it``."""
    i = cuda.grid(1)
    if i < n:
        y[i] = x[i] + x[i]  # not `* 2`: an int literal would promote the product to float64
