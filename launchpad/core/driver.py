"""The one module that talks to the CUDA driver (``cuda.bindings.driver``) and asks NVRTC its version.

Every call's result is checked by :func:`check`, which raises :class:`CudaError` with the
CUresult's name, the driver's message and the call that failed. The launch hot path uses
:data:`cuLaunchKernel` directly (it is re-exported here so that nothing else imports
``cuda.bindings``) and hands a failed result to :func:`launch_failed`.

Contexts: launchpad uses each device's primary context, the one PyTorch uses. It is retained
once per device. launchpad never changes which device is current on a thread (PyTorch reads it
from the current context): work for another device (a module load, a launch on another device's
stream) runs with that device's context pushed and popped again. The one exception is a thread
that has no context at all (a fresh ``threading.Thread``): it adopts device 0's, as the CUDA
runtime would on its first call.

Longer than 400 lines on purpose: keeping every ``cuda.bindings`` call in this one module (the
loads, attributes, memory queries, launches with attributes, tensor maps) is what lets the rest
of launchpad stay free of the bindings; its sections follow the driver API's own grouping.
"""

from __future__ import annotations

import contextlib
import re
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from cuda.bindings import driver as _cu

from ..errors import CudaError, NoDeviceError, UnsupportedVersion

CUresult = _cu.CUresult
SUCCESS = CUresult.CUDA_SUCCESS
#: The raw launch entry point: ``err, = cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream, params, 0)``.
cuLaunchKernel = _cu.cuLaunchKernel

_FA = _cu.CUfunction_attribute
_DA = _cu.CUdevice_attribute
_LA = _cu.CUlaunchAttributeID

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

_lock = threading.Lock()
_initialized = False
_primary: dict[int, Any] = {}  # device ordinal -> retained primary CUcontext
_modules: dict[int, int] = {}  # module handle -> device, for every module loaded and not yet unloaded


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
                f"no CUDA driver found ({exc}); compiling works without a GPU, launching needs one"
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
    what = (f"install launchpad[cu{fitting[-1]}] (cuda-bindings {fitting[-1]}.x) for this driver, or upgrade the "
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


def _current_context() -> int:
    """The calling thread's current context as an int (0: none)."""
    current = check(_cu.cuCtxGetCurrent(), "cuCtxGetCurrent")
    return 0 if current is None else int(current)


@contextlib.contextmanager
def device_context(device: int) -> Iterator[None]:
    """Run a block with ``device``'s primary context current, leaving the thread's as it was."""
    ctx = primary_context(device)
    if _current_context() == int(ctx):
        yield
        return
    check(_cu.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    try:
        yield
    finally:
        check(_cu.cuCtxPopCurrent(), "cuCtxPopCurrent")


def nvrtc_version() -> str:
    """``"nvrtc 13.0"``: the version of the NVRTC library cuda.bindings loads, or ``"unknown"``."""
    try:
        from cuda.bindings import nvrtc

        return "nvrtc " + ".".join(map(str, nvrtc.nvrtcVersion()[1:]))
    except Exception:
        return "unknown"


# --- modules and functions ----------------------------------------------------------------------


def load_function(image: bytes, name: str, device: int) -> tuple[Any, Any]:
    """Load an image (cubin, fatbin or PTX) into ``device``'s primary context.

    Returns ``(module, function)`` handles.
    """
    with device_context(device):
        module = check(_cu.cuModuleLoadData(image), "cuModuleLoadData")
        try:
            function = check(_cu.cuModuleGetFunction(module, name.encode()), f"cuModuleGetFunction({name!r})")
        except CudaError:
            _cu.cuModuleUnload(module)
            raise
    _modules[int(module)] = device  # one dict operation, atomic under the GIL: no lock (see below)
    return module, function


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
    with device_context(device):
        function = check(_cu.cuKernelGetFunction(_cu.CUkernel(int(kernel.handle))), "cuKernelGetFunction")
    return library, function


def unload_module(module: Any, device: int) -> None:
    """Unload a module.

    This runs from finalizers, so it raises nothing and takes no lock (a finalizer can run in
    the middle of any code, including code holding that lock). A failure is reported as a
    ``ResourceWarning``, and the module stays counted by :func:`loaded_modules`.
    """
    ctx = _primary.get(device)
    if ctx is None:
        return
    err = _cu.cuCtxPushCurrent(ctx)[0]
    if err == SUCCESS:
        err = _cu.cuModuleUnload(module)[0]
        _cu.cuCtxPopCurrent()
    if err == SUCCESS:
        _modules.pop(int(module), None)
    else:
        message = f"could not unload a module on cuda:{device}: {'; '.join(error_text(err))}"
        warnings.warn(message, ResourceWarning, stacklevel=2)


def loaded_modules(device: int | None = None) -> int:
    """How many modules launchpad has loaded and not yet unloaded (on ``device``, or on all)."""
    return sum(1 for d in list(_modules.values()) if device is None or d == device)


def memory_info(device: int) -> tuple[int, int]:
    """``(free, total)`` bytes of the device's memory, as the driver reports them."""
    with device_context(device):
        free, total = check(_cu.cuMemGetInfo(), "cuMemGetInfo")
    return int(free), int(total)


def function_attribute(function: Any, name: str) -> int:
    return check(_cu.cuFuncGetAttribute(FUNCTION_ATTRIBUTES[name], function), "cuFuncGetAttribute")


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
        return device_attribute(device, "max_oversized_shared_memory_per_block")
    except (AttributeError, CudaError):  # an older enum, or a driver that does not know the attribute
        return 0


def set_oversized_shared(function: Any) -> bool:
    """Put a function in the oversized shared-memory mode (Triton 3.8+); False if the driver refuses."""
    if _OVERSIZED_MODE is None or _SHARED_MODE_ATTR is None:
        return False
    return _cu.cuFuncSetAttribute(function, _SHARED_MODE_ATTR, int(_OVERSIZED_MODE))[0] == SUCCESS


def allow_non_portable_cluster(function: Any) -> None:
    attr = _FA.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    check(_cu.cuFuncSetAttribute(function, attr, 1), "cuFuncSetAttribute(NON_PORTABLE_CLUSTER_SIZE_ALLOWED)")


def max_active_blocks_per_sm(function: Any, block_threads: int, shared_mem: int) -> int:
    return check(
        _cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, block_threads, shared_mem),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor",
    )


def pointer_device(address: int) -> int | None:
    """The device ordinal of a device pointer, or None when the driver does not know it."""
    attr = _cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    result = _cu.cuPointerGetAttribute(attr, address)
    return int(result[1]) if result[0] == SUCCESS else None


# --- launching ----------------------------------------------------------------------------------

_entry_points: tuple[int, int, int] | None = None


def launch_entry_points() -> tuple[int, int, int]:
    """The addresses of ``cuLaunchKernel``, ``cuLaunchKernelEx`` and ``cuCtxGetDevice``
    (``cuGetProcAddress``), which the compiled executor calls directly: it needs no CUDA headers or
    libraries to be built."""
    global _entry_points
    if _entry_points is None:
        init()
        flags = _cu.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
        found = []
        for name in ("cuLaunchKernel", "cuLaunchKernelEx", "cuCtxGetDevice"):
            address = check(_cu.cuGetProcAddress(name.encode(), 12000, flags), f"cuGetProcAddress({name!r})")
            address = address[0] if isinstance(address, tuple) else address  # (pfn, symbolStatus)
            if not address:
                raise CudaError(int(CUresult.CUDA_ERROR_NOT_FOUND), *error_text(CUresult.CUDA_ERROR_NOT_FOUND),
                                f"cuGetProcAddress({name!r})")  # fmt: skip
            found.append(int(address))
        _entry_points = (found[0], found[1], found[2])
    return _entry_points


def stream_wait(stream: int, producer: int) -> None:
    """Make ``stream`` wait for the work queued so far on ``producer`` (an event, no host sync)."""
    flags = _cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
    event = check(_cu.cuEventCreate(flags), "cuEventCreate")
    try:
        check(_cu.cuEventRecord(event, _cu.CUstream(producer)), "cuEventRecord")
        check(_cu.cuStreamWaitEvent(_cu.CUstream(stream), event, 0), "cuStreamWaitEvent")
    finally:
        _cu.cuEventDestroy(event)  # released by the driver once the wait is resolved


def copy_to_device(address: int, host: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` from host memory at ``host`` to device memory in stream order (the driver
    stages pageable memory before it returns, so the host memory may change at once)."""
    check(_cu.cuMemcpyHtoDAsync(address, host, nbytes, _cu.CUstream(stream)), "cuMemcpyHtoDAsync")


def copy_to_host(host: int, address: int, nbytes: int, stream: int) -> None:
    """Copy ``nbytes`` of device memory to host memory at ``host``, in stream order (complete only
    once the stream is synchronized)."""
    check(_cu.cuMemcpyDtoHAsync(host, address, nbytes, _cu.CUstream(stream)), "cuMemcpyDtoHAsync")


def synchronize(stream: int) -> None:
    """Wait for everything queued on ``stream``."""
    check(_cu.cuStreamSynchronize(_cu.CUstream(stream)), "cuStreamSynchronize")


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
        ctx = primary_context(device)
        current = _current_context()
        if current != int(ctx):
            if current == 0 and device == 0:
                check(_cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
                err = launch(*args)[0]
            else:
                with device_context(device):
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


# --- graphs --------------------------------------------------------------------------------------

_NT = _cu.CUgraphNodeType


def graph_nodes(graph: int) -> list[int]:
    """The nodes of a graph (creation order), as handles."""
    g = _cu.CUgraph(graph)
    count = check(_cu.cuGraphGetNodes(g, 0), "cuGraphGetNodes")[1]
    nodes = check(_cu.cuGraphGetNodes(g, count), "cuGraphGetNodes")[0]
    return [int(n) for n in nodes[:count]]


def node_kind(node: int) -> str:
    """``"kernel"``, ``"memcpy"``, ``"memset"``, or the lowercase name of another node type."""
    kind = check(_cu.cuGraphNodeGetType(_cu.CUgraphNode(node)), "cuGraphNodeGetType")
    return str(_NT(kind).name).removeprefix("CU_GRAPH_NODE_TYPE_").lower()


def kernel_node(node: int) -> tuple[int, tuple[int, int, int], tuple[int, int, int], int, int, int]:
    """``(function, grid, block, shared_mem, params, context)`` of a kernel node; ``params`` is the
    address of its ``void*`` array of argument pointers (the driver's copy)."""
    p = check(_cu.cuGraphKernelNodeGetParams(_cu.CUgraphNode(node)), "cuGraphKernelNodeGetParams")
    return (int(p.func), (p.gridDimX, p.gridDimY, p.gridDimZ), (p.blockDimX, p.blockDimY, p.blockDimZ),
            int(p.sharedMemBytes), int(p.kernelParams), int(p.ctx))  # fmt: skip


def function_params(function: int) -> list[tuple[int, int]] | None:
    """``(offset, size)`` of each parameter of any function (``cuFuncGetParamInfo``, CUDA 12.4+);
    None where the driver cannot tell."""
    out: list[tuple[int, int]] = []
    f = _cu.CUfunction(function)
    while True:
        result = _cu.cuFuncGetParamInfo(f, len(out))
        if result[0] != SUCCESS:
            return out if result[0] == CUresult.CUDA_ERROR_INVALID_VALUE else None
        out.append((int(result[1]), int(result[2])))


def copy_node(node: int) -> tuple[int, ...]:
    """What a memcpy or memset node reads and writes: addresses and sizes, as ints."""
    n = _cu.CUgraphNode(node)
    if node_kind(node) == "memset":
        p = check(_cu.cuGraphMemsetNodeGetParams(n), "cuGraphMemsetNodeGetParams")
        return (int(p.dst), p.pitch, p.value, p.elementSize, p.width, p.height)
    p = check(_cu.cuGraphMemcpyNodeGetParams(n), "cuGraphMemcpyNodeGetParams")
    return (int(p.srcDevice), int(p.dstDevice), int(p.srcHost or 0), int(p.dstHost or 0), p.WidthInBytes, p.Height,
            p.Depth, p.srcPitch, p.dstPitch)  # fmt: skip


def set_kernel_node_params(exec_: int, node: int, function: int, grid: tuple, block: tuple, shared_mem: int,
                           params: int, context: int) -> None:  # fmt: skip
    """``cuGraphExecKernelNodeSetParams``: the node's arguments in an instantiated graph, from the
    ``void*`` array at ``params`` (copied by the driver before it returns)."""
    p = _cu.CUDA_KERNEL_NODE_PARAMS()
    p.func = _cu.CUfunction(function)
    p.gridDimX, p.gridDimY, p.gridDimZ = grid
    p.blockDimX, p.blockDimY, p.blockDimZ = block
    p.sharedMemBytes = shared_mem
    p.kernelParams = params
    p.ctx = _cu.CUcontext(context)
    check(_cu.cuGraphExecKernelNodeSetParams(_cu.CUgraphExec(exec_), _cu.CUgraphNode(node), p),
          "cuGraphExecKernelNodeSetParams")  # fmt: skip


def graph_launch(exec_: int, stream: int) -> None:
    check(_cu.cuGraphLaunch(_cu.CUgraphExec(exec_), _cu.CUstream(stream)), "cuGraphLaunch")


def graph_entry_points() -> tuple[int, int]:
    """The addresses of ``cuGraphExecKernelNodeSetParams`` (the v2 parameter struct of CUDA 12+)
    and ``cuGraphLaunch``, which the compiled replay calls directly."""
    init()
    flags = _cu.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
    found = []
    for name in ("cuGraphExecKernelNodeSetParams", "cuGraphLaunch"):
        address = check(_cu.cuGetProcAddress(name.encode(), 12000, flags), f"cuGetProcAddress({name!r})")
        found.append(int(address[0] if isinstance(address, tuple) else address))
    return found[0], found[1]


# --- tensor maps --------------------------------------------------------------------------------


def encode_tensor_map_tiled(
    dtype: int,
    rank: int,
    address: int,
    shape: list[int],
    strides_bytes: list[int],
    box: list[int],
    element_strides: list[int],
    interleave: int,
    swizzle: int,
    l2_promotion: int,
    oob_fill: int,
) -> bytes:
    """Encode a ``CUtensorMap`` with ``cuTensorMapEncodeTiled``; returns its 128 bytes.

    ``shape``/``box``/``element_strides`` are given fastest-varying dimension first, as the
    driver wants them; ``strides_bytes`` has ``rank - 1`` entries (the innermost stride is the
    element size).
    """
    init()
    tmap = check(
        _cu.cuTensorMapEncodeTiled(
            _cu.CUtensorMapDataType(dtype),
            rank,
            address,
            # older bindings (13.3) take only their own integer wrappers in these lists
            [_cu.cuuint64_t(v) for v in shape],
            [_cu.cuuint64_t(v) for v in strides_bytes],
            [_cu.cuuint32_t(v) for v in box],
            [_cu.cuuint32_t(v) for v in element_strides],
            _cu.CUtensorMapInterleave(interleave),
            _cu.CUtensorMapSwizzle(swizzle),
            _cu.CUtensorMapL2promotion(l2_promotion),
            _cu.CUtensorMapFloatOOBfill(oob_fill),
        ),
        "cuTensorMapEncodeTiled",
    )
    import ctypes

    return ctypes.string_at(tmap.getPtr(), 128)
