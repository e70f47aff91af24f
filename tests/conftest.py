"""Shared fixtures.

``fake_gpu`` lets CPU tests run a kernel's real generated launch path: it stands in for the
device, the stream and ``cuLaunchKernel``, and records each launch with the exact bytes of
every parameter as the driver would copy them (read through the ``kernelParams`` pointers).
CPU tensors pass the fast path's device check when the fake device is -1 (what
``Tensor.get_device()`` returns for CPU tensors).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import pytest
import torch

import launchpad
from launchpad import _driver, _launcher

HAS_GPU = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """Every test compiles into a cache of its session (not the user's)."""
    monkeypatch.setenv("LAUNCHPAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def generated_functions(kernel: launchpad.Kernel) -> tuple:
    """A kernel's generated ``launch``, ``_full`` and ``_prepare``: each has globals of its own."""
    return kernel.launch, kernel.launch.__globals__["_full"], kernel._prepare


@dataclass
class Launch:
    function: object
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    stream: int
    params: list[bytes]  # each parameter's bytes, as the driver copies them
    ex: dict | None = None  # launch attributes, for cuLaunchKernelEx launches


class FakeGPU:
    def __init__(self, monkeypatch):
        self.monkeypatch = monkeypatch
        self.launches: list[Launch] = []
        self._kernels: dict[object, launchpad.Kernel] = {}

    def install(self, kernel: launchpad.Kernel, *, device: int = -1, stream: int = 0x5000,
                max_threads: int = 1024, shared_limit: int = 48 * 1024, optin: int = 227 * 1024):
        function = f"function:{kernel.name}"
        self._kernels[function] = kernel
        patch = self.monkeypatch  # everything is undone after the test
        patch.setitem(kernel._loader.entries, device, (function, max_threads, shared_limit))

        def raise_shared(dev, nbytes):
            if nbytes > optin:
                raise launchpad.OutOfResources(f"{nbytes} > {optin}")
            return optin

        for fn in generated_functions(kernel):
            g = fn.__globals__
            patch.setitem(g, "_get_device", lambda: device)
            patch.setitem(g, "_raw_stream", lambda dev: stream)
            patch.setitem(g, "_cuLaunchKernel", self.cu_launch)
            patch.setitem(g, "_raise_shared", raise_shared)
            patch.setitem(g, "_launch_ex", self.launch_ex)
        patch.setattr(_driver, "cuLaunchKernel", self.cu_launch)
        patch.setattr(_launcher, "current_device", lambda: device)
        return kernel

    def read_params(self, function, kp: int) -> list[bytes]:
        params = self._kernels[function].params
        if not params:
            assert kp == 0
            return []
        pointers = (ctypes.c_void_p * len(params)).from_address(kp)
        return [ctypes.string_at(pointers[i], p.size) for i, p in enumerate(params)]

    def cu_launch(self, f, gx, gy, gz, bx, by, bz, smem, stream, kp, extra):
        assert extra == 0
        self.launches.append(Launch(f, (gx, gy, gz), (bx, by, bz), smem, stream, self.read_params(f, kp)))
        return (_driver.SUCCESS,)

    def launch_ex(self, f, dev, grid, block, smem, stream, kp, cluster, cooperative, pdl):
        kernel = self._kernels[f]
        attrs = {"cluster": cluster if cluster is not None else kernel.plan.cluster,
                 "cooperative": cooperative or kernel.plan.cooperative, "pdl": pdl or kernel.plan.pdl}
        self.launches.append(Launch(f, grid, block, smem, stream, self.read_params(f, kp), attrs))

    @property
    def last(self) -> Launch:
        return self.launches[-1]


@pytest.fixture
def fake_gpu(monkeypatch) -> FakeGPU:
    return FakeGPU(monkeypatch)
