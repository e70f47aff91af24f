"""The driver itself: checked results, initialization and versions, devices and their contexts.

Contexts: launchpad uses each device's primary context, the one PyTorch uses. It is retained
once per device. launchpad never changes which device is current on a thread (PyTorch reads it
from the current context): work for another device (a module load, a launch on another device's
stream) runs with that device's context pushed and popped again. The one exception is a thread
that has no context at all (a fresh ``threading.Thread``): it adopts device 0's, as the CUDA
runtime would on its first call.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import Any

from cuda.bindings import driver as _cu

from ...errors import CudaError, NoDeviceError, UnsupportedVersion

__all__ = [
    "DRIVER_NEEDED",
    "SUCCESS",
    "CUresult",
    "bindings_version",
    "check",
    "check_driver",
    "compute_capability",
    "current_context",
    "device_attribute",
    "device_context",
    "device_count",
    "device_name",
    "driver_version",
    "error_text",
    "init",
    "library_version",
    "nvrtc_version",
    "primary_context",
]

CUresult = _cu.CUresult
SUCCESS = CUresult.CUDA_SUCCESS
_DA = _cu.CUdevice_attribute

_lock = threading.Lock()
_initialized = False
_primary: dict[int, Any] = {}  # device ordinal -> retained primary CUcontext


def error_text(code: Any) -> tuple[str, str]:
    """Return ``(name, message)`` of a CUresult."""
    try:
        name = CUresult(int(code)).name
    except ValueError:
        name = f"CUresult {int(code)}"
    try:
        err, msg = _cu.cuGetErrorString(code)
        text = msg.decode() if err == SUCCESS and msg else "unknown error"
    except Exception:  # no driver to ask
        text = "no message (driver unavailable)"
    return name, text


def check(result: tuple, call: str) -> Any:
    """Check a ``cuda.bindings`` result tuple; return its value(s) or raise :class:`CudaError`."""
    err = result[0]
    if err != SUCCESS:
        raise CudaError(int(err), *error_text(err), call)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


#: How the :class:`NoDeviceError` of a machine without the driver library begins: by it
#: ``gpu_status`` tells that machine (install the driver) from one whose driver sees no GPU.
NO_DRIVER = "no CUDA driver found"


def init() -> None:
    """Initialize the driver once; raise :class:`NoDeviceError` when there is none, and
    :class:`UnsupportedVersion` when it is older than the installed cuda-bindings needs."""
    global _initialized
    if _initialized:
        return
    with _lock:
        if _initialized:
            return
        try:
            result = _cu.cuInit(0)
        except Exception as exc:  # the bindings raise when libcuda.so cannot be found
            raise NoDeviceError(
                f"{NO_DRIVER} ({exc}); launching needs one, compiling does not: give the target "
                "architecture (arch='sm_90' for an H100) to compile without a GPU"
            ) from None
        try:
            version = _cu.cuDriverGetVersion()  # needs no cuInit: works on any driver the bindings find
        except Exception:
            version = (None,)
        if version[0] == SUCCESS:
            check_driver(int(version[1]))
        if result[0] == CUresult.CUDA_ERROR_NO_DEVICE:
            raise NoDeviceError("the CUDA driver reports no GPU; launching needs one")
        check(result, "cuInit")
        _initialized = True


#: The oldest driver each major version of cuda-bindings runs on: the CUDA version
#: ``cuDriverGetVersion`` reports for it, and its release.
DRIVER_NEEDED = {12: (12000, "525.60"), 13: (13000, "580.65")}


def bindings_version() -> str:
    from cuda import bindings

    return str(getattr(bindings, "__version__", "0"))


def _driver_release() -> str:
    """The kernel module's release (``580.159.04``) where Linux says it, else ``""``."""
    try:
        text = open("/proc/driver/nvidia/version").read()
    except OSError:
        return ""
    found = re.search(r"Kernel Module(?: for \w+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    return found.group(1) if found else ""


def check_driver(cuda_version: int) -> None:
    """Raise :class:`UnsupportedVersion` when the driver (supporting ``cuda_version``, as
    ``cuDriverGetVersion`` gives it) is older than the installed cuda-bindings needs, naming the
    driver, the bindings and the extra of launchpad that fits that driver."""
    bindings = bindings_version()
    major = int(bindings.split(".")[0] or 0)
    needed, release = DRIVER_NEEDED.get(major, (major * 1000, "a newer one"))
    if cuda_version >= needed:
        return
    supports = f"CUDA {cuda_version // 1000}.{cuda_version % 1000 // 10}"
    driver = f"NVIDIA driver {_driver_release()}".rstrip() + f" (supports {supports})"
    fitting = [m for m, (v, _) in sorted(DRIVER_NEEDED.items()) if v <= cuda_version]
    what = (f"install launchpad-kernels[cu{fitting[-1]}] (cuda-bindings {fitting[-1]}.x) for this driver, or upgrade the "
            f"driver to {release} or newer") if fitting else f"upgrade the driver to {release} or newer"  # fmt: skip
    raise UnsupportedVersion(
        f"the {driver} is older than the installed cuda-bindings {bindings} needs (CUDA {needed // 1000}.0, driver "
        f"{release} or newer): {what}"
    )


def device_count() -> int:
    """Number of CUDA devices, 0 when there is no driver or GPU."""
    try:
        init()
    except NoDeviceError:
        return 0
    return check(_cu.cuDeviceGetCount(), "cuDeviceGetCount")


def driver_version() -> int:
    init()
    return check(_cu.cuDriverGetVersion(), "cuDriverGetVersion")


def device_attribute(device: int, attribute: str) -> int:
    """Read ``CU_DEVICE_ATTRIBUTE_<ATTRIBUTE>`` of a device."""
    init()
    attr = getattr(_DA, "CU_DEVICE_ATTRIBUTE_" + attribute.upper())
    return check(_cu.cuDeviceGetAttribute(attr, device), "cuDeviceGetAttribute")


def device_name(device: int) -> str:
    init()
    raw = check(_cu.cuDeviceGetName(256, device), "cuDeviceGetName")
    return raw.split(b"\0", 1)[0].decode()


def compute_capability(device: int) -> tuple[int, int]:
    return (
        device_attribute(device, "compute_capability_major"),
        device_attribute(device, "compute_capability_minor"),
    )


def primary_context(device: int) -> Any:
    """The device's primary context, retained once for the life of the process."""
    ctx = _primary.get(device)
    if ctx is None:
        init()
        with _lock:
            ctx = _primary.get(device)
            if ctx is None:
                dev = check(_cu.cuDeviceGet(device), "cuDeviceGet")
                ctx = check(_cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
                _primary[device] = ctx
    return ctx


def current_context() -> int:
    """The calling thread's current context as an int (0: none)."""
    current = check(_cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    return 0 if current is None else int(current)


@contextlib.contextmanager
def device_context(device: int) -> Iterator[None]:
    """Run a block with ``device``'s primary context current, leaving the thread's as it was."""
    ctx = primary_context(device)
    if current_context() == int(ctx):
        yield
        return
    check(_cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    try:
        yield
    finally:
        check(_cu.cuCtxPopCurrent(), "cuCtxPopCurrent")


def nvrtc_version() -> str:
    """``"nvrtc 13.0"``: the version of the NVRTC library cuda.bindings loads, or ``"unknown"``."""
    version = library_version("NVRTC")
    return "unknown" if version in (None, "unknown") else f"nvrtc {version}"


def library_version(library: str) -> str | None:
    """``"13.5"``: the version of ``"NVRTC"`` or ``"nvJitLink"`` as the library cuda.bindings loads
    (through cuda.pathfinder: NVIDIA's wheels, a conda environment, the system's CUDA) reports it;
    None where there is none, ``"unknown"`` where it does not say (a library without the version
    function, a failed call)."""
    try:
        if library == "NVRTC":
            from cuda.bindings import nvrtc

            status, major, minor = nvrtc.nvrtcVersion()
            if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
                return "unknown"
        else:
            from cuda.bindings import nvjitlink

            major, minor = nvjitlink.version()  # raises nvJitLinkError where the call fails
    except ImportError:  # a cuda-bindings without the module
        return "unknown"
    except Exception as exc:  # the library is missing, lacks the function, or refused the call
        return None if _library_missing(exc) else "unknown"
    return f"{major}.{minor}"


def _library_missing(exc: Exception) -> bool:
    """Whether cuda.bindings failed because cuda.pathfinder found the library nowhere (its
    DynamicLibNotFoundError; anything else means the library is there)."""
    try:
        from cuda.pathfinder import DynamicLibNotFoundError
    except ImportError:  # a cuda-pathfinder without the name: by the class's name
        return any(c.__name__ == "DynamicLibNotFoundError" for c in type(exc).__mro__)
    return isinstance(exc, DynamicLibNotFoundError)
