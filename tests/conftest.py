"""Shared fixtures.

``fake_gpu`` lets CPU tests run a kernel's real launch path, in either executor: it stands in
for the device, the stream and the driver's ``cuLaunchKernel``/``cuLaunchKernelEx``, and records
each launch with the exact bytes of every parameter as the driver would copy them (read through
the ``kernelParams`` pointers). The compiled executor calls a C-callable recorder (a ctypes
function whose address the kernel's device entry gives it, as it would give the driver's); the
Python executor calls the same recorder's Python side. The fixture runs each test twice, once
per executor, against the same expectations.

CPU tensors pass the device checks when the fake device is -1 (what ``Tensor.get_device()``
returns for CPU tensors).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import time
import warnings
import weakref
from dataclasses import dataclass

import pytest
import torch

# torch.compile's default backend (inductor) imports torch.utils.mkldnn, whose classes use
# torch.jit.script_method, which torch 2.13 deprecates: 14 warnings of torch's own about its own
# module, on the first torch.compile of a session. That module is imported here, once, with that
# warning ignored; any other use of script_method still warns.
with warnings.catch_warnings(), contextlib.suppress(ImportError):
    warnings.filterwarnings("ignore", message="`torch.jit.script_method` is", category=DeprecationWarning)
    import torch.utils.mkldnn

import launchpad
from launchpad.core import driver as _driver
from launchpad.core.loader import Entry
from launchpad.launch import checks as _checks
from launchpad.launch import executor as _executor
from launchpad.launch import memory as _memory

HAS_GPU = torch.cuda.is_available()
EXECUTORS = ["compiled", "python"]


def pytest_configure(config):
    # pyproject.toml registers it too; this also holds where the tests run without it (CI's wheel leg)
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


#: The user's own cache, where launchpad would compile into outside the tests: no test writes there.
USER_CACHE = launchpad.cache_dir()


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Every test compiles into a cache of its session (not the user's). Session-scoped, so it
    applies before any module-scoped fixture compiles (fixtures of a wider scope are set up
    first), and in the environment, so subprocesses the tests start inherit it."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAUNCHPAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
        # Triton 3.9 warns on every compile that leaves FP fusion to its default (3.10 changes it):
        # the tests take the default of the Triton releases launchpad supports (on) explicitly
        mp.setenv("TRITON_DEFAULT_FP_FUSION", os.environ.get("TRITON_DEFAULT_FP_FUSION", "1"))
        yield


@pytest.fixture(scope="module")
def private_triton_cache(tmp_path_factory):
    """A Triton cache of the module's own (``pytestmark = pytest.mark.usefixtures(...)``): its
    kernels compile here, not from another module's or the user's cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        yield


def why_executor_unavailable(name: str) -> str:
    """Why an executor cannot run here ("" when it can)."""
    if name == "compiled":
        path, why = _executor.launch_path()
        if path != "compiled":
            return f"the compiled executor is off: {why}"
    return ""


@dataclass
class Launch:
    function: object
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    stream: int
    params: list[bytes]  # each parameter's bytes, as the driver copies them
    ex: dict | None = None  # launch attributes, for cuLaunchKernelEx launches
    thread: int = 0  # the launching thread


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]  # fmt: skip


_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p)  # fmt: skip
_LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_LaunchConfig), ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_void_p)  # fmt: skip
_ATTR = {2: "cooperative", 4: "cluster", 5: "spread", 6: "pdl", 18: "shared_memory_mode"}


class FakeGPU:
    """A fake device both executors launch into (see the module documentation)."""

    def __init__(self, monkeypatch, executor: str = "python"):
        self.monkeypatch = monkeypatch
        self.executor = executor
        self.launches: list[Launch] = []
        self.result = 0  # what the fake driver returns (a CUresult)
        self.delay = 0.0  # seconds each launch waits before the driver reads its arguments
        self.emulate = None  # emulate(launch): run the kernel's effect on CPU memory, after recording
        self._kernels: dict[int, launchpad.Kernel] = {}
        # the C callbacks reach this object through a weak reference: no cycle keeps kernels alive
        me = weakref.ref(self)
        self._c_launch = _LAUNCH(lambda *a: me()._record_c(*a))
        self._c_launch_ex = _LAUNCH_EX(lambda *a: me()._record_c_ex(*a))

    def install(self, kernel: launchpad.Kernel, *, device: int = -1, stream: int = 0x5000,
                max_threads: int = 1024, shared_limit: int = 48 * 1024, optin: int = 227 * 1024,
                real_checks: bool = False) -> launchpad.Kernel:  # fmt: skip
        """Make ``kernel`` launch into this fake device; undone after the test.

        ``real_checks`` keeps the loader's own shared-memory and attribute checks (which then ask
        the patched driver queries) instead of this fake's stand-ins.
        """
        function = 0x10000 + 0x100 * len(self._kernels)
        self._kernels[function] = kernel
        patch = self.monkeypatch
        loader = kernel._loader
        if not real_checks:

            def raise_shared(dev, nbytes):
                if nbytes > optin:
                    raise launchpad.OutOfResources(f"{nbytes} > {optin}")
                entry = loader.entries[dev]
                loader.entries[dev] = entry._replace(shared_limit=optin)
                return optin

            # set in the instance's dict, so undoing deletes them: a setattr would be undone (by
            # some pytest versions) by storing the class's bound methods there, a reference cycle
            # that keeps the loader alive until a garbage collection
            patch.setitem(vars(loader), "raise_shared", raise_shared)
            patch.setitem(vars(loader), "launch_ex", self.launch_ex)
            patch.setitem(vars(loader), "coresident_blocks", lambda dev, threads, smem: 1 << 20)
        # no cuCtxGetDevice (0): the compiled executor asks the fake device function
        entry = Entry(function=function, max_threads=max_threads, shared_limit=shared_limit, address=function,
                      launch=ctypes.cast(self._c_launch, ctypes.c_void_p).value,
                      launch_ex=ctypes.cast(self._c_launch_ex, ctypes.c_void_p).value, ctx_get_device=0,
                      visible_devices=0, module=None)  # fmt: skip
        patch.setitem(loader.entries, device, entry)
        devices = _executor.Devices(lambda: device, lambda dev: stream, self.cu_launch)
        # "default": the executor the kernel would pick itself (launchpad.launch_path())
        compiled = {"compiled": True, "python": False}.get(self.executor)
        executor = _executor.build(kernel.spec, loader, devices, compiled=compiled)
        patch.setattr(kernel, "_executor", executor)
        patch.setattr(kernel, "launch", executor.launch)
        patch.setattr(kernel, "_configs", {})
        patch.setattr(_driver, "cuLaunchKernel", self.cu_launch)
        patch.setattr(_checks, "current_device", lambda: device)  # what torch ops compare their inputs with
        return kernel

    def read_params(self, function: int, kp: int) -> list[bytes]:
        if self.delay:
            time.sleep(self.delay)  # as a real driver call releases the GIL: other threads run meanwhile
        params = self._kernels[function].params
        if not params:
            assert not kp
            return []
        pointers = (ctypes.c_void_p * len(params)).from_address(kp)
        return [ctypes.string_at(pointers[i], p.size) for i, p in enumerate(params)]

    # --- the Python executor's driver call
    def cu_launch(self, f, gx, gy, gz, bx, by, bz, smem, stream, kp, extra):
        assert extra == 0
        self.record(Launch(f, (gx, gy, gz), (bx, by, bz), smem, stream, self.read_params(f, kp),
                           thread=threading.get_ident()))  # fmt: skip
        return (_driver.CUresult(self.result),)

    def record(self, launch: Launch) -> None:
        self.launches.append(launch)
        if self.emulate is not None:
            self.emulate(launch)

    def launch_ex(self, entry, dev, grid, block, smem, stream, kp, cluster, cooperative, pdl):
        kernel = self._kernels[entry.function]
        attrs = {
            "cluster": cluster if cluster is not None else kernel.plan.cluster,
            "cooperative": cooperative or kernel.plan.cooperative,
            "pdl": pdl or kernel.plan.pdl,
        }
        self.record(Launch(entry[0], grid, block, smem, stream, self.read_params(entry[0], kp), attrs))

    # --- the compiled executor's, through C function pointers
    def _record_c(self, f, gx, gy, gz, bx, by, bz, smem, stream, kp, extra):
        assert not extra
        self.record(Launch(f, (gx, gy, gz), (bx, by, bz), smem, stream or 0, self.read_params(f, kp or 0),
                           thread=threading.get_ident()))  # fmt: skip
        return self.result

    def _record_c_ex(self, config, f, kp, extra):
        c = config.contents
        raw = ctypes.string_at(c.attrs, 72 * c.num_attrs) if c.num_attrs else b""
        found = {}
        for i in range(c.num_attrs):
            ident = int.from_bytes(raw[72 * i : 72 * i + 4], "little")
            value = raw[72 * i + 8 : 72 * i + 20]
            found[_ATTR.get(ident, ident)] = tuple(int.from_bytes(value[k : k + 4], "little") for k in (0, 4, 8))
        attrs = {"cluster": found.get("cluster"), "cooperative": "cooperative" in found, "pdl": "pdl" in found}
        self.record(Launch(f, tuple(c.grid), tuple(c.block), c.shared, c.stream or 0, self.read_params(f, kp or 0),
                           attrs))  # fmt: skip
        return self.result

    @property
    def last(self) -> Launch:
        return self.launches[-1]


@pytest.fixture(params=EXECUTORS)
def fake_gpu(request, monkeypatch) -> FakeGPU:
    why = why_executor_unavailable(request.param)
    if why:
        pytest.skip(why)
    return FakeGPU(monkeypatch, request.param)


@pytest.fixture(params=EXECUTORS)
def executor(request) -> str:
    """Each executor by name (for tests that build kernels themselves)."""
    why = why_executor_unavailable(request.param)
    if why:
        pytest.skip(why)
    return request.param


def python_launch_forced() -> bool:
    return os.environ.get("LAUNCHPAD_PYTHON_LAUNCH", "") not in ("", "0")


class FakeMemory:
    """Device memory for host copies (Numba's host arrays and records) on CPU: ``scratch`` gives
    CPU buffers, the driver's copies are ``memmove``\\ s, and every copy and synchronization is
    recorded in ``events`` as ``(what, nbytes, stream)``."""

    def __init__(self, monkeypatch):
        self.events: list[tuple[str, int, int]] = []
        self.buffers: list[torch.Tensor] = []

        def scratch(nbytes, align, device, stream, zero=False):
            buf = torch.zeros(nbytes + align, dtype=torch.uint8)
            self.buffers.append(buf)
            address = buf.data_ptr()
            return buf, address + (-address % align)

        def copy_to_device(address, host, nbytes, stream):
            ctypes.memmove(address, host, nbytes)
            self.events.append(("in", nbytes, stream))

        def copy_to_host(host, address, nbytes, stream):
            ctypes.memmove(host, address, nbytes)
            self.events.append(("back", nbytes, stream))

        monkeypatch.setattr(_memory, "scratch", scratch)
        monkeypatch.setattr(_driver, "copy_to_device", copy_to_device)
        monkeypatch.setattr(_driver, "copy_to_host", copy_to_host)
        monkeypatch.setattr(_driver, "synchronize", lambda stream: self.events.append(("sync", 0, stream)))


@pytest.fixture
def fake_memory(monkeypatch) -> FakeMemory:
    return FakeMemory(monkeypatch)


@pytest.fixture(params=["device", "host"])
def graphs(request, fake_gpu, monkeypatch):
    """Captures and graph updates on the fake GPU (``tests/fake_graphs.py``), with the nodes of a
    recorded sequence updated from the device (the updater's ring) or from the host."""
    from fake_graphs import FakeGraphs

    return FakeGraphs(fake_gpu, monkeypatch, device_updates=request.param == "device")
