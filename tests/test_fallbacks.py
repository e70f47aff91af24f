"""A fallback can be seen: the compiled executor and the compiled replay count every call they hand
to Python (``Kernel.fallbacks``, ``Sequence.fallbacks``, their repr), and ``LAUNCHPAD_NO_FALLBACK=1``
makes one that Python then completes an error, while a refusal still raises its own error.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import FakeGPU, why_executor_unavailable
from fake_graphs import FakeGraphs

import launchpad as lp

pytestmark = pytest.mark.skipif(
    bool(why_executor_unavailable("compiled")), reason=why_executor_unavailable("compiled") or ""
)

SOURCE = r"""
extern "C" __global__ void pointers(float* x, double* y, void* z, int n) {}
extern "C" __global__ void scalars(unsigned long long* out, int i32, float f32) {}
"""
SILENT = "a silent slow path"


@pytest.fixture(scope="module")
def kernels():
    return lp.compile_cuda_module(SOURCE, ["pointers", "scalars"], arch="sm_90")


def test_each_kernel_counts_its_fallbacks_and_its_repr_shows_them(kernels, monkeypatch):
    gpu = FakeGPU(monkeypatch, "compiled")
    k = gpu.install(lp.Kernel(kernels["pointers"].spec, compiled=True))
    x, y, z = torch.randn(8), torch.randn(8, dtype=torch.float64), torch.randn(8)
    k.launch(1, 32, x, y, z, 5)
    k[1, 32](x, y, z, 5)
    assert k.fallbacks == 0 and "fallbacks" not in repr(k)
    k.launch(1, 32, x, y, z, n=5)  # by design: arguments by name are the Python executor's
    k[1, 32](x, y, z, n=5)
    k.launch(1, 32, x, y, z, np.int32(5))
    with pytest.raises(lp.ArgumentTypeError):  # a refusal is worded by the Python executor: counted too
        k.launch(1, 32, x, x, z, 5)
    assert k.fallbacks == 4 and "4 fallbacks to the Python executor" in repr(k)


def test_no_fallback_makes_a_completed_fallback_raise_and_leaves_refusals_as_they_are(kernels, monkeypatch):
    gpu = FakeGPU(monkeypatch, "compiled")
    k = gpu.install(lp.Kernel(kernels["pointers"].spec, compiled=True))
    x, y, z = torch.randn(8), torch.randn(8, dtype=torch.float64), torch.randn(8)
    monkeypatch.setenv("LAUNCHPAD_NO_FALLBACK", "1")
    k.launch(1, 32, x, y, z, 5)  # the compiled path: nothing to say
    k[2, 32](x, y, z, 5)
    for call in (lambda: k.launch(1, 32, x, y, z, n=5), lambda: k.launch(1, 32, x, y, z, np.int32(5)),
                 lambda: k[1, 32](x, y, z, n=5),
                 lambda: k[1, 32](x, y, z, np.int32(5))):  # fmt: skip
        before = len(gpu.launches)
        with pytest.raises(lp.LaunchpadError, match=rf"^kernel 'pointers': .*{SILENT}"):
            call()
        assert len(gpu.launches) == before + 1  # the launch happened, through Python, then it raised
    with pytest.raises(lp.ArgumentTypeError, match=r"expected a torch\.float64 tensor"):
        k.launch(1, 32, x, x, z, 5)
    monkeypatch.setenv("LAUNCHPAD_NO_FALLBACK", "0")
    k.launch(1, 32, x, y, z, n=5)
    assert k.fallbacks == 6


def test_a_sequence_counts_its_fallbacks_and_no_fallback_raises_for_one_python_completes(kernels, monkeypatch):
    gpu = FakeGPU(monkeypatch, "python")
    graphs = FakeGraphs(gpu, monkeypatch, device_updates=False)
    k = gpu.install(lp.Kernel(kernels["scalars"].spec))

    def step(out, i32, f32):
        k[1, 1](out, i32, f32)

    out = torch.empty(1, dtype=torch.uint64)
    seq = lp.record(step, out, 3, 1.5, compiled=True)
    assert seq.replay_path == "compiled"
    seq(out, 4, 2.5)
    assert seq.fallbacks == 0 and "fallbacks" not in repr(seq)
    seq(out, np.int32(5), 2.5)  # a value the compiled replay leaves to Python
    assert seq.fallbacks == 1 and "1 fallbacks to the Python replay" in repr(seq)
    monkeypatch.setenv("LAUNCHPAD_NO_FALLBACK", "1")
    seq(out, 6, 3.5)
    with pytest.raises(lp.LaunchpadError, match=rf"^a recorded sequence: .*{SILENT}"):
        seq(out, np.int32(7), 2.5)
    with pytest.raises(Exception) as refused:  # refused by the Python replay: its own error
        seq(out, "seven", 2.5)
    assert SILENT not in str(refused.value)
    assert seq.fallbacks == 3
    del graphs
