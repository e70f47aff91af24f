"""Modules and functions: loading images, unloading them, and what a function is and allows."""

from __future__ import annotations

import re
import warnings
from typing import Any

from cuda.bindings import driver as _cu

from ...errors import CudaError
from . import device as _device
from .device import SUCCESS, CUresult, check, error_text

__all__ = [
    "FUNCTION_ATTRIBUTES",
    "OVERSIZED_LAUNCH_BYTES",
    "allow_non_portable_cluster",
    "function_attribute",
    "function_name",
    "function_params",
    "load_function",
    "load_library",
    "loaded_modules",
    "max_active_blocks_per_sm",
    "oversized_shared_limit",
    "set_max_dynamic_shared",
    "set_oversized_shared",
    "unload_module",
]

_FA = _cu.CUfunction_attribute

#: Function attributes reported by ``Kernel.attributes()``, by their launchpad name.
FUNCTION_ATTRIBUTES = {
    "num_regs": _FA.CU_FUNC_ATTRIBUTE_NUM_REGS,
    "shared_size_bytes": _FA.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
    "max_dynamic_shared_size_bytes": _FA.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
    "const_size_bytes": _FA.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
    "local_size_bytes": _FA.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,
    "max_threads_per_block": _FA.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
    "ptx_version": _FA.CU_FUNC_ATTRIBUTE_PTX_VERSION,
    "binary_version": _FA.CU_FUNC_ATTRIBUTE_BINARY_VERSION,
}

_modules: dict[int, int] = {}  # module handle -> device, for every module loaded and not yet unloaded


def load_function(image: bytes, name: str, device: int) -> tuple[Any, Any]:
    """Load an image (cubin, fatbin or PTX) into ``device``'s primary context.

    Returns ``(module, function)`` handles.
    """
    with _device.device_context(device):
        module = check(_cu.cuModuleLoadData(image), "cuModuleLoadData")
        try:
            function = module_function(module, name)
        except CudaError:
            err = _cu.cuModuleUnload(module)[0]
            if err != SUCCESS:  # reported, not raised: the error being raised says what went wrong first
                warnings.warn(f"could not unload a module on cuda:{device}: {'; '.join(error_text(err))}",
                              ResourceWarning, stacklevel=2)  # fmt: skip
            raise
    _modules[int(module)] = device  # one dict operation, atomic under the GIL: no lock (see below)
    return module, function


def module_function(module: Any, name: str) -> Any:
    """Another function of a module :func:`load_function` loaded (its handle)."""
    return check(_cu.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name!r})")


def load_library(image: bytes, kind: str, name: str, device: int) -> tuple[Any, Any]:
    """Load an image as a cuda.core ``ObjectCode`` (a ``CUlibrary``: what numba-cuda's module
    callbacks take) and get ``name``'s function in ``device``'s context.

    Returns ``(object_code, function)``; the library is unloaded when the ObjectCode goes.
    """
    from cuda.core import ObjectCode

    library = getattr(ObjectCode, f"from_{kind}")(image)
    try:
        kernel = library.get_kernel(name)
    except Exception as exc:  # cuda.core's CUDAError names the CUresult in its message
        found = re.search(r"CUDA_ERROR_\w+", str(exc))
        if found is None or not hasattr(CUresult, found.group()):
            raise
        code = getattr(CUresult, found.group())
        raise CudaError(int(code), *error_text(code), f"cuLibraryLoadData/cuLibraryGetKernel({name!r})") from None
    with _device.device_context(device):
        function = check(_cu.cuKernelGetFunction(_cu.CUkernel(int(kernel.handle))), "cuKernelGetFunction")
    return library, function


def unload_module(module: Any, device: int) -> None:
    """Unload a module.

    This runs from finalizers, so it raises nothing and takes no lock (a finalizer can run in
    the middle of any code, including code holding that lock). Every call's failure is reported
    as a ``ResourceWarning``; a module that failed to unload stays counted by :func:`loaded_modules`.
    """
    ctx = _device._primary.get(device)
    if ctx is None:
        return
    call, err = "cuCtxPushCurrent", _cu.cuCtxPushCurrent(ctx)[0]
    if err == SUCCESS:
        call, err = "cuModuleUnload", _cu.cuModuleUnload(module)[0]
        popped = _cu.cuCtxPopCurrent()[0]
        if err == SUCCESS and popped != SUCCESS:
            call, err = "cuCtxPopCurrent", popped
    if err == SUCCESS or call == "cuCtxPopCurrent":
        _modules.pop(int(module), None)
    if err != SUCCESS:
        message = f"could not unload a module on cuda:{device}: {call}: {'; '.join(error_text(err))}"
        warnings.warn(message, ResourceWarning, stacklevel=2)


def loaded_modules(device: int | None = None) -> int:
    """How many modules launchpad has loaded and not yet unloaded (on ``device``, or on all)."""
    return sum(1 for d in list(_modules.values()) if device is None or d == device)


def function_attribute(function: Any, name: str) -> int:
    return check(_cu.cuFuncGetAttribute(FUNCTION_ATTRIBUTES[name], function), "cuFuncGetAttribute")


def function_name(function: int) -> str:
    """The (mangled) name of any function, as the driver knows it (``cuFuncGetName``)."""
    name = check(_cu.cuFuncGetName(_cu.CUfunction(function)), "cuFuncGetName")
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def function_params(function: int) -> list[tuple[int, int]] | None:
    """``(offset, size)`` of each parameter of any function (``cuFuncGetParamInfo``, CUDA 12.4+);
    None where the driver cannot tell (too old, or a function it does not describe)."""
    out: list[tuple[int, int]] = []
    f = _cu.CUfunction(function)
    while True:
        result = _cu.cuFuncGetParamInfo(f, len(out))
        if result[0] == SUCCESS:
            out.append((int(result[1]), int(result[2])))
        elif result[0] == CUresult.CUDA_ERROR_INVALID_VALUE:  # past the last parameter
            return out
        elif result[0] in (CUresult.CUDA_ERROR_NOT_SUPPORTED, CUresult.CUDA_ERROR_NOT_FOUND):
            return None
        else:
            check(result, "cuFuncGetParamInfo")


def set_max_dynamic_shared(function: Any, nbytes: int) -> None:
    attr = _FA.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    check(_cu.cuFuncSetAttribute(function, attr, nbytes), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")


#: Triton 3.8's "oversized" shared-memory mode (newer bindings only; absent means unsupported).
_OVERSIZED_MODE = getattr(
    getattr(_cu, "CUsharedMemoryMode", None), "CU_SHARED_MEMORY_MODE_ALLOW_OVERSIZED_SHARED_MEMORY", None
)
_SHARED_MODE_ATTR = getattr(_FA, "CU_FUNC_ATTRIBUTE_SHARED_MEMORY_MODE", None)
#: Launches above this many bytes of shared memory need the oversized mode as a launch attribute.
OVERSIZED_LAUNCH_BYTES = 228 * 1024


def oversized_shared_limit(device: int) -> int:
    """The per-block shared memory the oversized mode allows on ``device``; 0 where the bindings or
    the driver do not know the mode (then the opt-in limit is all there is)."""
    if _OVERSIZED_MODE is None or _SHARED_MODE_ATTR is None:
        return 0
    try:
        return _device.device_attribute(device, "max_oversized_shared_memory_per_block")
    except (AttributeError, CudaError):  # an older enum, or a driver that does not know the attribute
        return 0


def set_oversized_shared(function: Any) -> bool:
    """Put a function in the oversized shared-memory mode (Triton 3.8+); False where the bindings or
    the driver do not know the mode; any other failure raises :class:`CudaError`."""
    if _OVERSIZED_MODE is None or _SHARED_MODE_ATTR is None:
        return False
    result = _cu.cuFuncSetAttribute(function, _SHARED_MODE_ATTR, int(_OVERSIZED_MODE))
    if result[0] in (CUresult.CUDA_ERROR_INVALID_VALUE, CUresult.CUDA_ERROR_NOT_SUPPORTED):
        return False
    check(result, "cuFuncSetAttribute(SHARED_MEMORY_MODE)")
    return True


def allow_non_portable_cluster(function: Any) -> None:
    attr = _FA.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    check(_cu.cuFuncSetAttribute(function, attr, 1), "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)")


def max_active_blocks_per_sm(function: Any, block_threads: int, shared_mem: int) -> int:
    return check(
        _cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, block_threads, shared_mem),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    )
