"""When a kernel's modules are unloaded: as soon as nothing can launch it any more (no GPU).

The generated launch functions hold the kernel's loader, so a launch function kept on its own
keeps the modules loaded; nothing forms a reference cycle, so the last reference going unloads
them at once, not at some later garbage collection.
"""

from __future__ import annotations

import gc
import weakref

import pytest
from conftest import FakeGPU

import launchpad as lp
from launchpad.core import driver as _driver
from launchpad.core.loader import LoadedModule

SOURCE = 'extern "C" __global__ void scale(float* y, const float* x, float a, int n) {}'


@pytest.fixture(scope="module")
def cubin() -> bytes:
    return lp.compile_cuda(SOURCE, "scale", arch="sm_90").image


@pytest.fixture
def unloaded(monkeypatch) -> list[tuple[str, int]]:
    """Modules unloaded so far, as (handle, device); the garbage collector is off meanwhile."""
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(_driver, "unload_module", lambda module, device: calls.append((module, device)))
    gc.disable()
    yield calls
    gc.enable()


def loaded_kernel(cubin: bytes) -> lp.Kernel:
    k = lp.load_cubin(cubin, "scale", signature="*fp32, *fp32, fp32, i32")
    k._loader.modules.update({d: LoadedModule(f"module-{d}", f"function-{d}", d) for d in (0, 1)})  # as if launched
    return k


def test_dropping_the_kernel_unloads_every_device_at_once(cubin, unloaded):
    k = loaded_kernel(cubin)
    del k
    assert sorted(unloaded) == [("module-0", 0), ("module-1", 1)]


@pytest.mark.parametrize("keep", ["launch", "config", "bound"])
def test_a_launch_function_kept_alone_keeps_the_modules(cubin, unloaded, keep):
    k = loaded_kernel(cubin)
    if keep == "launch":
        kept = k.launch
    elif keep == "config":
        kept = k[4, 256]
    else:
        with pytest.MonkeyPatch.context() as mp:  # a launch to bind needs a device; undone before the drop
            FakeGPU(mp).install(k)
            kept = k.bind(4, 256, 0, 0, 2.0, 1024)
    loader = weakref.ref(k._loader)
    del k
    assert unloaded == [] and loader() is not None
    del kept
    assert loader() is None
    assert sorted(unloaded) == [("module-0", 0), ("module-1", 1)]


def test_close_unloads_now_and_a_later_launch_loads_again(cubin, unloaded):
    k = loaded_kernel(cubin)
    k.close()
    assert sorted(unloaded) == [("module-0", 0), ("module-1", 1)]
    assert k._loader.modules == {} and k._loader.entries == {}
    k._loader.modules[0] = LoadedModule("module-0b", "function-0b", 0)  # loaded again by a launch
    del k
    assert unloaded[-1] == ("module-0b", 0)


def test_close_unloads_what_the_last_launch_kept(cubin, unloaded, executor, monkeypatch):
    """The compiled executor keeps the entry of its last launch (to skip re-reading it): close()
    makes it let go too, so the module goes at once."""
    k = lp.load_cubin(cubin, "scale", signature="*fp32, *fp32, fp32, i32")
    gpu = FakeGPU(monkeypatch, executor)
    gpu.install(k)
    module = LoadedModule("module-0", "function-0", -1)
    k._loader.entries[-1] = k._loader.entries[-1]._replace(module=module)  # the entry holds its module
    k._loader.modules[-1] = module
    del module
    k.launch(1, 32, 0, 0, 1.0, 4)
    assert len(gpu.launches) == 1 and unloaded == []
    k.close()
    assert unloaded == [("module-0", -1)]
