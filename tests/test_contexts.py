"""Which CUDA context a load or a failed launch runs in, against a scripted driver (no GPU).

launchpad must never change the device that is current on a thread (torch reads it from the
current context): work for another device pushes that device's primary context and pops it.
Only a thread with no context at all adopts device 0's, as the CUDA runtime would.
"""

from __future__ import annotations

import pytest

from launchpad import CudaError, UnsupportedVersion
from launchpad.core import driver as _driver
from launchpad.core.driver import device as _device
from launchpad.core.driver import modules as _modules

CTX = {0: 0xC0, 1: 0xC1}
SUCCESS = _driver.SUCCESS
INVALID_HANDLE = _driver.CUresult.CUDA_ERROR_INVALID_HANDLE


class ScriptedDriver:
    """The few driver entry points the context logic uses, with a context stack per thread."""

    def __init__(self, monkeypatch, current: int):
        self.stack = [current] if current else []
        self.calls: list[str] = []
        for name in ("cuCtxGetCurrent", "cuCtxSetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent",
                     "cuModuleLoadData", "cuModuleGetFunction", "cuModuleUnload"):  # fmt: skip
            monkeypatch.setattr(_device._cu, name, getattr(self, name))
        monkeypatch.setattr(_device, "_primary", dict(CTX))
        monkeypatch.setattr(_modules, "_modules", {})

    @property
    def current(self) -> int:
        return self.stack[-1] if self.stack else 0

    def cuCtxGetCurrent(self):
        return SUCCESS, self.current or None

    def cuCtxSetCurrent(self, ctx):
        self.calls.append(f"set {ctx:#x}")
        self.stack[-1:] = [ctx]
        return (SUCCESS,)

    def cuCtxPushCurrent(self, ctx):
        self.calls.append(f"push {ctx:#x}")
        self.stack.append(ctx)
        return (SUCCESS,)

    def cuCtxPopCurrent(self):
        self.calls.append("pop")
        return SUCCESS, self.stack.pop()

    def cuModuleLoadData(self, image):
        self.calls.append(f"load in {self.current:#x}")
        return SUCCESS, 0xA000 + self.current

    def cuModuleGetFunction(self, module, name):
        return SUCCESS, 0xF000

    def cuModuleUnload(self, module):
        self.calls.append(f"unload in {self.current:#x}")
        return (SUCCESS,)

    def launch_in(self, ctx: int):
        """A launch that only succeeds with ``ctx`` current, like a function of that context."""

        def cuLaunchKernel(*args):
            self.calls.append(f"launch in {self.current:#x}")
            return (SUCCESS,) if self.current == ctx else (INVALID_HANDLE,)

        return cuLaunchKernel


def test_load_for_another_device_pushes_its_context(monkeypatch):
    drv = ScriptedDriver(monkeypatch, current=CTX[0])
    module, _ = _driver.load_function(b"image", "k", 1)
    assert drv.calls == ["push 0xc1", "load in 0xc1", "pop"]
    assert drv.current == CTX[0]
    assert (_driver.loaded_modules(0), _driver.loaded_modules(1)) == (0, 1)
    _driver.unload_module(module, 1)
    assert drv.calls[-3:] == ["push 0xc1", "unload in 0xc1", "pop"]
    assert drv.current == CTX[0]
    assert _driver.loaded_modules() == 0


def test_load_for_the_current_device_pushes_nothing(monkeypatch):
    drv = ScriptedDriver(monkeypatch, current=CTX[1])
    _driver.load_function(b"image", "k", 1)
    assert drv.calls == ["load in 0xc1"]


def test_launch_on_another_devices_stream_retries_with_its_context_pushed(monkeypatch):
    drv = ScriptedDriver(monkeypatch, current=CTX[0])
    launch = drv.launch_in(CTX[1])
    err = launch()[0]
    _driver.launch_failed(err, 1, launch, ())
    assert drv.calls == ["launch in 0xc0", "push 0xc1", "launch in 0xc1", "pop"]
    assert drv.current == CTX[0]  # the thread's device is still 0


def test_fresh_thread_adopts_device_0s_context(monkeypatch):
    drv = ScriptedDriver(monkeypatch, current=0)
    launch = drv.launch_in(CTX[0])
    _driver.launch_failed(launch()[0], 0, launch, ())
    assert drv.calls == ["launch in 0x0", "set 0xc0", "launch in 0xc0"]
    assert drv.current == CTX[0]  # later launches on this thread take the fast path


def test_fresh_thread_launching_on_device_1_does_not_make_it_current(monkeypatch):
    drv = ScriptedDriver(monkeypatch, current=0)
    launch = drv.launch_in(CTX[1])
    _driver.launch_failed(launch()[0], 1, launch, ())
    assert drv.calls == ["launch in 0x0", "push 0xc1", "launch in 0xc1", "pop"]
    assert drv.current == 0


def test_a_launch_failing_in_the_right_context_raises_with_the_cuda_error(monkeypatch):
    drv = ScriptedDriver(monkeypatch, current=CTX[0])
    launch = drv.launch_in(CTX[1])  # fails even in the device's own context: a real error
    with pytest.raises(CudaError, match=r"cuLaunchKernel failed: CUDA_ERROR_INVALID_HANDLE \(400\)"):
        _driver.launch_failed(INVALID_HANDLE, 0, launch, ())
    assert drv.calls == []  # the device's context was already current: nothing to retry


# --- the driver the installed cuda-bindings needs -------------------------------------------------


@pytest.mark.parametrize(
    ("bindings", "driver", "message"),
    [
        ("13.3.1", 12080, "the NVIDIA driver 570.86.15 (supports CUDA 12.8) is older than the installed cuda-bindings "
         "13.3.1 needs (CUDA 13.0, driver 580.65 or newer): install launchpad-kernels[cu12] (cuda-bindings 12.x) for this "
         "driver, or upgrade the driver to 580.65 or newer"),
        ("12.9.4", 11080, "the NVIDIA driver 570.86.15 (supports CUDA 11.8) is older than the installed cuda-bindings "
         "12.9.4 needs (CUDA 12.0, driver 525.60 or newer): upgrade the driver to 525.60 or newer"),
        ("13.3.1", 13000, None),
        ("12.9.4", 13010, None),
    ],
)  # fmt: skip
def test_a_driver_older_than_the_bindings_need_is_named_at_first_use(monkeypatch, bindings, driver, message):
    """The first driver call (cuInit) checks the driver against the installed cuda-bindings."""
    monkeypatch.setattr(_device, "bindings_version", lambda: bindings)
    monkeypatch.setattr(_device, "_driver_release", lambda: "570.86.15")
    monkeypatch.setattr(_device, "_initialized", False)
    monkeypatch.setattr(_device._cu, "cuInit", lambda flags: (SUCCESS,))
    monkeypatch.setattr(_device._cu, "cuDriverGetVersion", lambda: (SUCCESS, driver))
    if message is None:
        _driver.init()
        assert _device._initialized
        return
    with pytest.raises(UnsupportedVersion) as e:
        _driver.init()
    assert str(e.value) == message and not _device._initialized


def test_the_driver_release_is_read_from_the_kernel_module(monkeypatch, tmp_path):
    import builtins

    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: real_open(version if p == "/proc/driver/nvidia/version"
                                                                       else p, *a, **k))  # fmt: skip
    assert _device._driver_release() == "580.159.04"
