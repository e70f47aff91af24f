"""Where a pointer argument's memory may come from, on CPU with ``fake_gpu``: pinned host tensors
(device-accessible, as Triton's launcher passes them) and ``__cuda_array_interface__`` objects
whose producer stream the launch must wait for (CAI v3), for C++, Triton and Numba kernels."""

from __future__ import annotations

import struct

import pytest
import torch

import launchpad as lp
from launchpad.core import driver as _driver

SOURCE = r"""
extern "C" __global__ void copy(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
"""


@pytest.fixture(scope="module")
def copy_kernel():
    return lp.compile_cuda(SOURCE, "copy", arch=90)


class CAI:
    """A device array known by its ``__cuda_array_interface__`` (v3), naming a producer stream."""

    def __init__(self, tensor: torch.Tensor, stream=None):
        self.__cuda_array_interface__ = {
            "shape": tuple(tensor.shape), "strides": None, "typestr": "<f4", "data": (tensor.data_ptr(), False),
            "version": 3, "stream": stream,
        }  # fmt: skip


def numba_scale():
    """A Numba kernel's Python function, ``out[i] = 2 * x[i]`` (skips without numba-cuda)."""
    pytest.importorskip("numba.cuda")
    from numba import cuda

    def scale(out, x):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = 2.0 * x[i]

    return scale


@pytest.fixture
def pinned(monkeypatch):
    """CPU tensors made with ``.pin_memory()`` (no CUDA here: ``is_pinned`` is what says so)."""
    made: set[int] = set()
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: self.data_ptr() in made)

    def pin(t: torch.Tensor) -> torch.Tensor:
        made.add(t.data_ptr())
        return t

    return pin


def test_pinned_host_tensors_are_passed(copy_kernel, fake_gpu, pinned):
    k = fake_gpu.install(copy_kernel, device=0)  # CPU tensors are not on the fake device: only pinned ones pass
    x, y = pinned(torch.rand(8)), pinned(torch.empty(8))
    k.launch(1, 8, x, y, 8)
    assert fake_gpu.last.params[:2] == [struct.pack("<Q", x.data_ptr()), struct.pack("<Q", y.data_ptr())]
    with pytest.raises(lp.ArgumentError) as err:
        k.launch(1, 8, x, torch.empty(8), 8)
    assert str(err.value) == (
        "kernel 'copy', argument 1 ('y'), param 1 (*fp32): expected a CUDA tensor, got a torch.float32 tensor on cpu; "
        "a pinned CPU tensor (.pin_memory()) would be readable by the device"
    )
    with pytest.raises(lp.ArgumentTypeError, match=r"expected a torch.float32 tensor, got a torch.float64"):
        k.launch(1, 8, pinned(torch.rand(8, dtype=torch.float64)), y, 8)


def test_pinned_host_tensors_into_numba_and_triton_kernels(fake_gpu, pinned):
    scale = numba_scale()
    k = fake_gpu.install(lp.from_numba(scale, "void(float32[::1], float32[::1])", arch=90), device=0)
    out, x = pinned(torch.empty(16)), pinned(torch.rand(16))
    k[1, 16](out, x)
    assert fake_gpu.last.params[4] == struct.pack("<Q", out.data_ptr())
    with pytest.raises(lp.ArgumentError, match=r"argument 1 \('x'\): expected a CUDA tensor.*pinned CPU tensor"):
        k[1, 16](out, torch.rand(16))
    pytest.importorskip("triton")
    import triton_kernels
    from test_triton_launcher import SM90, aligned

    x, y, out = (pinned(aligned(1024)) for _ in range(3))
    add = lp.triton_launcher(triton_kernels.add_kernel, target=SM90).warmup(x, y, out, 1024, 1024)
    fake_gpu.install(add, device=0)
    add[(1,)](x, y, out, 1024)  # as Triton's own test_pointer_arguments[cpu_pinned]
    assert fake_gpu.last.params[:3] == [struct.pack("<Q", t.data_ptr()) for t in (x, y, out)]


def test_producer_streams_are_waited_for(copy_kernel, fake_gpu, monkeypatch):
    waits = []
    monkeypatch.setattr(_driver, "stream_wait", lambda stream, producer: waits.append((stream, producer)))
    monkeypatch.setattr(_driver, "pointer_device", lambda address: -1)
    k = fake_gpu.install(copy_kernel)
    x, y = torch.rand(8), torch.empty(8)
    k.launch(1, 8, CAI(x, stream=0x777), y, 8)
    assert set(waits) == {(0x5000, 0x777)}  # an event on the producer's stream, waited for by the launch's
    assert fake_gpu.last.params[0] == struct.pack("<Q", x.data_ptr())
    waits.clear()
    k.launch(1, 8, CAI(x, stream=None), y, 8)  # no stream: nothing to wait for
    k.launch(1, 8, CAI(x, stream=0x5000), y, 8)  # the launch's own stream: already in order
    k.launch(1, 8, CAI(x), y, 8, stream=0)  # stream 1 (legacy default) in a launch on stream 0: the same stream
    assert waits == []
    k.launch(1, 8, CAI(x, stream=2), y, 8)  # the per-thread default stream is another stream
    assert set(waits) == {(0x5000, 2)}
    waits.clear()  # 0, which Numba's arrays report for its default stream: the legacy default stream
    k.launch(1, 8, CAI(x, stream=0), y, 8)
    k.launch(1, 8, CAI(x, stream=0), y, 8, stream=1)
    assert waits == [(0x5000, 0)]
    with pytest.raises(lp.ArgumentError) as err:
        k.launch(1, 8, CAI(x, stream=-3), y, 8)
    assert str(err.value) == (
        "kernel 'copy', argument 0 ('x'), param 0 (*fp32): __cuda_array_interface__ stream must be None or a stream "
        "handle, got -3"
    )


def test_producer_streams_of_numba_arrays(fake_gpu, monkeypatch):
    scale = numba_scale()
    waits = []
    monkeypatch.setattr(_driver, "stream_wait", lambda stream, producer: waits.append((stream, producer)))
    monkeypatch.setattr(_driver, "pointer_device", lambda address: -1)
    k = fake_gpu.install(lp.from_numba(scale, "void(float32[::1], float32[::1])", arch=90), stream=0x42)
    x, out = torch.rand(16), torch.empty(16)
    k[1, 16](out, CAI(x, stream=0x99))
    assert set(waits) == {(0x42, 0x99)} and fake_gpu.last.params[7 + 4] == struct.pack("<Q", x.data_ptr())
