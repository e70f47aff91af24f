"""Memory and streams: what a pointer is, copies in stream order, waits and synchronizations."""

from __future__ import annotations

from cuda.bindings import driver as _cu

from ...errors import CudaError
from . import device as _device
from .device import SUCCESS, CUresult, check, error_text

__all__ = [
    "copy_device_to_device",
    "copy_to_device",
    "copy_to_host",
    "memory_info",
    "pointer_device",
    "stream_wait",
    "synchronize",
    "synchronize_device",
]


def memory_info(device: int) -> tuple[int, int]:
    """``(free, total)`` bytes of the device's memory, as the driver reports them."""
    with _device.device_context(device):
        free, total = check(_cu.cuMemGetInfo(), "cuMemGetInfo")
    return int(free), int(total)


def pointer_device(address: int) -> int | None:
    """The device ordinal of a device pointer; None for an address the driver does not know as
    device memory (``CUDA_ERROR_INVALID_VALUE``); any other failure raises :class:`CudaError`."""
    attr = _cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    result = _cu.cuPointerGetAttribute(attr, address)
    if result[0] == CUresult.CUDA_ERROR_INVALID_VALUE:
        return None
    return int(check(result, "cuPointerGetAttribute(DEVICE_ORDINAL)"))


def stream_wait(stream: int, producer: int) -> None:
    """Make ``stream`` wait for the work queued so far on ``producer`` (an event, no host sync)."""
    flags = _cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
    event = check(_cu.cuEventCreate(flags), "cuEventCreate")
    try:
        check(_cu.cuEventRecord(event, _cu.CUstream(producer)), "cuEventRecord")
        check(_cu.cuStreamWaitEvent(_cu.CUstream(stream), event, 0), "cuStreamWaitEvent")
    finally:
        err = _cu.cuEventDestroy(event)[0]  # released by the driver once the wait is resolved
    if err != SUCCESS:
        raise CudaError(int(err), *error_text(err), "cuEventDestroy")


def copy_to_device(address: int, host: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` from host memory at ``host`` to device memory in stream order (the driver
    stages pageable memory before it returns, so the host memory may change at once)."""
    check(_cu.cuMemcpyHtoDAsync(address, host, nbytes, _cu.CUstream(stream)), "cuMemcpyHtoDAsync")


def copy_to_host(host: int, address: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` of device memory to host memory at ``host``, in stream order (complete only
    once the stream is synchronized)."""
    check(_cu.cuMemcpyDtoHAsync(host, address, nbytes, _cu.CUstream(stream)), "cuMemcpyDtoHAsync")


def copy_device_to_device(destination: int, source: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` of device memory in stream order."""
    check(_cu.cuMemcpyDtoDAsync(destination, source, nbytes, _cu.CUstream(stream)), "cuMemcpyDtoDAsync")


def synchronize(stream: int) -> None:
    """Wait for everything queued on ``stream``."""
    check(_cu.cuStreamSynchronize(_cu.CUstream(stream)), "cuStreamSynchronize")


def synchronize_device(device: int) -> None:
    """Wait for everything queued on ``device`` (``cuCtxSynchronize`` in its context)."""
    with _device.device_context(device):
        check(_cu.cuCtxSynchronize(), "cuCtxSynchronize")
