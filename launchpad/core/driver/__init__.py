"""The one package that talks to the CUDA driver (``cuda.bindings.driver``).

Imports: ``cuda.bindings`` and launchpad's errors only; everything else in launchpad reaches the
driver through here (``from launchpad.core import driver``), so the rest stays free of the
bindings. Every driver call's result is checked: :func:`check` raises :class:`CudaError` with the
CUresult's name, the driver's message and the call that failed, and the few calls whose failure
is an answer (``cuPointerGetAttribute`` on an address that is no device memory, a node the driver
will not make device-updatable) say which results they take as that answer and raise on any
other. The launch hot path uses :data:`cuLaunchKernel` directly and hands a failed result to
:func:`launch_failed`.

One module per concern, following the driver API's own grouping: :mod:`.device` (initialization,
versions, devices, contexts), :mod:`.modules` (loading, functions and their attributes),
:mod:`.launch` (entry points, launches), :mod:`.memory` (pointers, copies, streams),
:mod:`.graphs` (captured graphs and their updates) and :mod:`.tensor_maps`.
"""

from __future__ import annotations

from .device import (
    DRIVER_NEEDED,
    NO_DRIVER,
    SUCCESS,
    CUresult,
    bindings_version,
    check,
    check_driver,
    compute_capability,
    current_context,
    device_attribute,
    device_context,
    device_count,
    device_name,
    driver_version,
    error_text,
    init,
    library_version,
    nvrtc_version,
    primary_context,
)
from .graphs import (
    KernelNode,
    child_graph,
    copy_node,
    graph_entry_points,
    graph_launch,
    graph_nodes,
    graph_upload,
    kernel_node,
    make_device_updatable,
    node_dependencies,
    node_kind,
    set_copy_node,
    set_kernel_node_params,
    stream_is_capturing,
)
from .launch import cuLaunchKernel, entry_points, launch_entry_points, launch_ex, launch_failed, launch_kernel
from .memory import (
    copy_device_to_device,
    copy_to_device,
    copy_to_host,
    memory_info,
    pointer_device,
    stream_wait,
    synchronize,
    synchronize_device,
)
from .modules import (
    FUNCTION_ATTRIBUTES,
    OVERSIZED_LAUNCH_BYTES,
    allow_non_portable_cluster,
    function_attribute,
    function_name,
    function_params,
    load_function,
    load_library,
    loaded_modules,
    max_active_blocks_per_sm,
    oversized_shared_limit,
    set_max_dynamic_shared,
    set_oversized_shared,
    unload_module,
)
from .tensor_maps import encode_tensor_map_tiled

__all__ = [
    "DRIVER_NEEDED",
    "FUNCTION_ATTRIBUTES",
    "NO_DRIVER",
    "OVERSIZED_LAUNCH_BYTES",
    "SUCCESS",
    "CUresult",
    "KernelNode",
    "allow_non_portable_cluster",
    "bindings_version",
    "check",
    "check_driver",
    "child_graph",
    "compute_capability",
    "copy_device_to_device",
    "copy_node",
    "copy_to_device",
    "copy_to_host",
    "cuLaunchKernel",
    "current_context",
    "device_attribute",
    "device_context",
    "device_count",
    "device_name",
    "driver_version",
    "encode_tensor_map_tiled",
    "entry_points",
    "error_text",
    "function_attribute",
    "function_name",
    "function_params",
    "graph_entry_points",
    "graph_launch",
    "graph_nodes",
    "graph_upload",
    "init",
    "kernel_node",
    "launch_entry_points",
    "launch_ex",
    "launch_failed",
    "launch_kernel",
    "library_version",
    "load_function",
    "load_library",
    "loaded_modules",
    "make_device_updatable",
    "max_active_blocks_per_sm",
    "memory_info",
    "node_dependencies",
    "node_kind",
    "nvrtc_version",
    "oversized_shared_limit",
    "pointer_device",
    "primary_context",
    "set_copy_node",
    "set_kernel_node_params",
    "set_max_dynamic_shared",
    "set_oversized_shared",
    "stream_is_capturing",
    "stream_wait",
    "synchronize",
    "synchronize_device",
    "unload_module",
]
