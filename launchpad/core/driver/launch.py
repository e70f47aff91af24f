"""Launching: the entry points the compiled executor calls, a failed launch's retry in the right
context, and launches with attributes (``cuLaunchKernelEx``)."""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver as _cu

from ...errors import CudaError
from . import device as _device
from .device import SUCCESS, CUresult, check, error_text
from .modules import _OVERSIZED_MODE, OVERSIZED_LAUNCH_BYTES

__all__ = ["cuLaunchKernel", "entry_points", "launch_entry_points", "launch_ex", "launch_failed", "launch_kernel"]

#: The raw launch entry point: ``err, = cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, 0)``.
cuLaunchKernel = _cu.cuLaunchKernel
_LA = _cu.CUlaunchAttributeID


def entry_points(*names: str) -> tuple[int, ...]:
    """The addresses of driver functions (``cuGetProcAddress``, the CUDA 12 versions), which the
    compiled module calls directly: it needs no CUDA headers or libraries to be built."""
    _device.init()
    flags = _cu.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
    found = []
    for name in names:
        address = check(_cu.cuGetProcAddress(name.encode(), 12000, flags), f"cuGetProcAddress({name!r})")
        address = address[0] if isinstance(address, tuple) else address  # (pfn, symbolStatus)
        if not address:
            raise CudaError(int(CUresult.CUDA_ERROR_NOT_FOUND), *error_text(CUresult.CUDA_ERROR_NOT_FOUND),
                            f"cuGetProcAddress({name!r})")  # fmt: skip
        found.append(int(address))
    return tuple(found)


_entry_points: tuple[int, int, int] | None = None


def launch_entry_points() -> tuple[int, int, int]:
    """The addresses of ``cuLaunchKernel``, ``cuLaunchKernelEx`` and ``cuCtxGetDevice``."""
    global _entry_points
    if _entry_points is None:
        launch, launch_ex_, get_device = entry_points("cuLaunchKernel", "cuLaunchKernelEx", "cuCtxGetDevice")
        _entry_points = (launch, launch_ex_, get_device)
    return _entry_points


def launch_kernel(function: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int,
                  stream: int, params: int) -> None:  # fmt: skip
    """``cuLaunchKernel`` of a function launchpad itself launches (not a user's kernel: those go
    through their :class:`~launchpad.kernel.Kernel`), from a ``void*`` array at ``params``."""
    check(cuLaunchKernel(function, *grid, *block, shared_mem, _cu.CUstream(stream), params, 0), "cuLaunchKernel")


def launch_failed(err: Any, device: int, launch: Any, args: tuple) -> None:
    """Handle a failed launch, ``launch(*args)``, for ``device``.

    The launch fails with INVALID_CONTEXT or INVALID_HANDLE when the thread's current context is
    not the device's: a fresh thread has none, and a launch on another device's stream finds the
    current device's. The first adopts device 0's context when that is the launch device (what
    the runtime, and so torch, would make current there); otherwise the launch is retried once
    with the device's context pushed. This keeps the context check off the hot path. Any other
    error is raised as :class:`CudaError`.
    """
    if err in (CUresult.CUDA_ERROR_INVALID_CONTEXT, CUresult.CUDA_ERROR_INVALID_HANDLE):
        ctx = _device.primary_context(device)
        current = _device.current_context()
        if current != int(ctx):
            if current == 0 and device == 0:
                check(_cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
                err = launch(*args)[0]
            else:
                with _device.device_context(device):
                    err = launch(*args)[0]
            if err == SUCCESS:
                return
    raise CudaError(int(err), *error_text(err), launch.__name__)


#: The launch attributes of each combination, built once. Threads may race to build one: each
#: list is complete before the one dict store that publishes it, and never changed after, so a
#: reader sees a whole list (the GIL makes the store atomic) and two builders only waste a build.
_config_attrs: dict[tuple, list] = {}


def _launch_attributes(
    cluster: tuple[int, int, int] | None, cooperative: bool, pdl: bool, spread: bool, oversized: bool = False
) -> list:
    key = (cluster, cooperative, pdl, spread, oversized)
    attrs = _config_attrs.get(key)
    if attrs is None:
        attrs = []
        if oversized:
            a = _cu.CUlaunchAttribute()
            a.id = _LA.CU_LAUNCH_ATTRIBUTE_SHARED_MEMORY_MODE
            a.value.sharedMemoryMode = _OVERSIZED_MODE
            attrs.append(a)
        if cluster is not None:
            a = _cu.CUlaunchAttribute()
            a.id = _LA.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z = cluster
            attrs.append(a)
            if spread:
                a = _cu.CUlaunchAttribute()
                a.id = _LA.CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
                a.value.clusterSchedulingPolicyPreference = (
                    _cu.CUclusterSchedulingPolicy.CU_CLUSTER_SCHEDULING_POLICY_SPREAD
                )
                attrs.append(a)
        if cooperative:
            a = _cu.CUlaunchAttribute()
            a.id = _LA.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            a.value.cooperative = 1
            attrs.append(a)
        if pdl:
            a = _cu.CUlaunchAttribute()
            a.id = _LA.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            a.value.programmaticStreamSerializationAllowed = 1
            attrs.append(a)
        _config_attrs[key] = attrs
    return attrs


def launch_ex(
    function: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    shared_mem: int,
    stream: int,
    params: int,
    device: int,
    *,
    cluster: tuple[int, int, int] | None = None,
    cooperative: bool = False,
    pdl: bool = False,
    spread: bool = False,
    oversized: bool = False,
) -> None:
    """``cuLaunchKernelEx`` with cluster, cooperative, programmatic-serialization and (above
    :data:`OVERSIZED_LAUNCH_BYTES` of shared memory) oversized shared-memory attributes."""
    config = _cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared_mem
    config.hStream = _cu.CUstream(stream)
    attrs = _launch_attributes(cluster, cooperative, pdl, spread, oversized and shared_mem > OVERSIZED_LAUNCH_BYTES)
    config.attrs = attrs
    config.numAttrs = len(attrs)
    result = _cu.cuLaunchKernelEx(config, function, params, 0)
    if result[0] != SUCCESS:
        launch_failed(result[0], device, _cu.cuLaunchKernelEx, (config, function, params, 0))
