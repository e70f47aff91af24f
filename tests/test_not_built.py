"""Launches without the compiled module: one warning per process, at the first launch, that says
the compiled launcher is not built and how to build it; none where the Python executor is chosen."""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import FakeGPU, why_executor_unavailable

import launchpad as lp
from launchpad.launch import executor as _executor
from launchpad.launch import pylaunch as _pylaunch

SOURCE = r"""
extern "C" __global__ void fill(float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a;
}
"""


@pytest.fixture(scope="module")
def spec() -> lp.KernelSpec:
    return lp.compile_cuda(SOURCE, "fill", arch=90).spec


@pytest.fixture
def not_built(monkeypatch):
    """This process as a source tree that was never built sees it; nothing warned yet."""
    monkeypatch.setattr(_executor, "_claunch", None)
    monkeypatch.setattr(_executor, "_import_error", "the compiled module is not built (a test)")
    monkeypatch.setattr(_executor, "_not_built_warned", False)
    monkeypatch.delenv("LAUNCHPAD_PYTHON_LAUNCH", raising=False)


def launchpad_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, lp.LaunchpadWarning)]


def test_the_first_launch_without_the_compiled_module_warns_once(spec, not_built, monkeypatch):
    gpu = FakeGPU(monkeypatch, "default")  # the executor the kernel picks itself
    y = torch.zeros(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = gpu.install(lp.Kernel(spec))
        other = gpu.install(lp.Kernel(spec))
        assert kernel.launch_path == "python" and other.launch_path == "python"
        assert launchpad_warnings(caught) == []  # making kernels (and importing) says nothing
        kernel.launch(1, 32, y, 2.0, 4)
        kernel.launch(1, 32, y, 3.0, 4)
        other[1, 32](y, 4.0, 4)  # another kernel's first launch: the process was told already
    assert len(gpu.launches) == 3
    assert launchpad_warnings(caught) == [_executor.NOT_BUILT]
    text = _executor.NOT_BUILT
    assert "launchpad's compiled launcher (launchpad.launch._claunch) is not built" in text
    assert "kernels launch through the Python executor" in text and "more overhead on every launch" in text
    assert "Build it with `python3 setup.py build_ext --inplace` in a source tree" in text
    assert "reinstall launchpad-kernels where a C compiler is installed" in text
    (warned,) = [w for w in caught if issubclass(w.category, lp.LaunchpadWarning)]
    assert warned.filename == __file__  # the caller's launch, not launchpad's generated code


def test_a_chosen_python_executor_does_not_warn(spec, not_built, monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_PYTHON_LAUNCH", "1")
    forced = FakeGPU(monkeypatch, "default")
    chosen = FakeGPU(monkeypatch, "python")  # Kernel(spec, compiled=False)
    y = torch.zeros(4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = forced.install(lp.Kernel(spec))
        kernel.launch(1, 32, y, 2.0, 4)
        kernel.launch(1, 32, y, 3.0, 4)
        monkeypatch.delenv("LAUNCHPAD_PYTHON_LAUNCH")
        explicit = chosen.install(lp.Kernel(spec, compiled=False))
        explicit.launch(1, 32, y, 2.0, 4)
    assert len(forced.launches) == 2 and len(chosen.launches) == 1
    assert launchpad_warnings(caught) == []


@pytest.mark.skipif(bool(why_executor_unavailable("compiled")), reason=why_executor_unavailable("compiled") or "")
def test_the_compiled_path_carries_no_check(spec, monkeypatch):
    """Where the module is built, the Python executor behind it is made without the hook."""
    made: list[dict] = []
    build = _pylaunch.build

    def recording(*args, **kw):
        made.append(kw)
        return build(*args, **kw)

    monkeypatch.setattr(_pylaunch, "build", recording)
    assert lp.Kernel(spec).launch_path == "compiled"
    assert made == [{}]
