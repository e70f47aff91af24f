"""Triton kernels of the launch benchmarks (imported only when Triton is installed).

``double_it`` is the same tiny kernel as the C++ ``double_it`` of :mod:`launchpad.bench.context`:
``y[i] = 2 * x[i]`` over ``n`` floats in one program (block).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def double_it(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, x * 2, mask=mask)
