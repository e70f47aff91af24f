"""Which CUDA context a load or a failed launch runs in, against a scripted driver (no GPU).

launchpad must never change the device that is current on a thread (torch reads it from the
current context): work for another device pushes that device's primary context and pops it.
Only a thread with no context at all adopts device 0's, as the CUDA runtime would.
"""

from __future__ import annotations

import pytest

from launchpad import CudaError
from launchpad.core import driver as _driver

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
            monkeypatch.setattr(_driver._cu, name, getattr(self, name))
        monkeypatch.setattr(_driver, "_primary", dict(CTX))
        monkeypatch.setattr(_driver, "_modules", {})

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
