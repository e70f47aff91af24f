"""Pinned host memory and ``__cuda_array_interface__`` producer streams on a real GPU: kernels write
into pinned tensors as Triton's launcher lets them, and a launch on torch's stream reads an array
only after the producer stream's work on it is done."""

from __future__ import annotations

import pytest
import torch
from test_pointer_sources import SOURCE

import launchpad as lp

pytestmark = pytest.mark.gpu


def test_cpp_kernel_reads_and_writes_pinned_memory():
    k = lp.compile_cuda(SOURCE, "copy")
    x = torch.rand(10_000).pin_memory()
    y = torch.full((10_000,), float("nan")).pin_memory()
    k.launch(40, 256, x, y, 10_000)
    torch.cuda.synchronize()
    assert torch.equal(x, y)
    with pytest.raises(lp.ArgumentError, match="a pinned CPU tensor"):
        k.launch(40, 256, x, torch.empty(10_000), 10_000)


def test_triton_kernel_on_pinned_memory():
    pytest.importorskip("triton")
    import triton_kernels

    n = 4096
    x, y = torch.rand(n).pin_memory(), torch.rand(n).pin_memory()
    out = torch.full((n,), float("nan")).pin_memory()
    lp.triton_launcher(triton_kernels.add_kernel)[(n // 1024,)](x, y, out, n, 1024)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x + y)


def test_numba_kernel_on_pinned_memory():
    pytest.importorskip("numba.cuda")
    from numba import cuda

    def scale(out, x):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = 2.0 * x[i]

    k = lp.from_numba(scale, "void(float32[::1], float32[::1])")
    x, out = torch.rand(1000).pin_memory(), torch.full((1000,), float("nan")).pin_memory()
    k[4, 256](out, x)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * x)


def test_launch_waits_for_the_producer_stream():
    """A Numba array filled by a slow kernel on a Numba stream, read at once on torch's stream: the
    copy sees the filled values only if the launch waited for the producer's stream."""
    pytest.importorskip("numba.cuda")
    import numpy as np
    from numba import cuda

    if not hasattr(np, "row_stack"):  # numba-cuda 0.30's dispatcher under NumPy 2.5 (see test_numba_shims)
        np.row_stack = np.vstack

    @cuda.jit
    def slow_fill(a, value):
        for _ in range(40):
            cuda.nanosleep(1_000_000)  # ~40 ms before writing
        i = cuda.grid(1)
        if i < a.size:
            a[i] = value

    k = lp.compile_cuda(SOURCE, "copy")
    n = 4096
    producer = cuda.stream()
    consumer = torch.cuda.Stream()  # torch's streams do not synchronize with others by themselves
    for value in (3.5, -1.25):
        a = cuda.device_array(n, dtype="float32", stream=producer)
        assert a.__cuda_array_interface__["stream"] == int(producer)
        out = torch.full((n,), float("nan"), device="cuda")
        torch.cuda.synchronize()
        slow_fill[n // 256, 256, producer](a, value)
        with torch.cuda.stream(consumer):
            k.launch(n // 256, 256, a, out, n)  # on the consumer stream, ordered after the fill by an event
        torch.cuda.synchronize()
        assert torch.all(out == value), out[:4]
