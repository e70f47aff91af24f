"""CUDA graphs: reading a captured graph's nodes, making kernel nodes device-updatable, updating an
instantiated graph's nodes from the host, uploading and launching it.

Recorded sequences (:mod:`launchpad.sequences.sequence`) read what torch's capture made, node by node,
with the driver's own calls: the runtime's ``cudaGraphKernelNodeGetParams`` fails on some
library kernels (cuBLAS), the driver's does not; a kernel captured with ``extra`` (one packed
buffer) is read from that buffer.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from cuda.bindings import driver as _cu

from .device import CUresult, check
from .launch import entry_points

__all__ = [
    "KernelNode",
    "capturing_graph",
    "child_graph",
    "copy_node",
    "graph_entry_points",
    "graph_launch",
    "graph_node_count",
    "graph_nodes",
    "graph_upload",
    "kernel_node",
    "make_device_updatable",
    "node_kind",
    "set_copy_node",
    "set_kernel_node_params",
    "stream_is_capturing",
]

_NT = _cu.CUgraphNodeType
#: ``extra`` keys (cuda.h): the packed buffer's address and size, and the end of the list.
_BUFFER_POINTER, _BUFFER_SIZE, _END = 1, 2, 0


def graph_nodes(graph: int) -> list[int]:
    """The nodes of a graph (creation order), as handles."""
    g = _cu.CUgraph(graph)
    count = check(_cu.cuGraphGetNodes(g, 0), "cuGraphGetNodes")[1]
    nodes = check(_cu.cuGraphGetNodes(g, count), "cuGraphGetNodes")[0]
    return [int(n) for n in nodes[:count]]


def graph_node_count(graph: int) -> int:
    """How many nodes a graph holds (one being captured into too: its nodes so far)."""
    return int(check(_cu.cuGraphGetNodes(_cu.CUgraph(graph), 0), "cuGraphGetNodes")[1])


def capturing_graph(stream: int) -> int:
    """The graph a stream is capturing into (``cuStreamGetCaptureInfo``); 0 where it captures none."""
    found = check(_cu.cuStreamGetCaptureInfo(_cu.CUstream(stream)), "cuStreamGetCaptureInfo")
    if found[0] != _cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
        return 0
    return int(found[2])


def node_kind(node: int) -> str:
    """``"kernel"``, ``"memcpy"``, ``"memset"``, ``"graph"`` (a child graph), ``"host"``,
    ``"conditional"``, or the lowercase name of another node type."""
    kind = check(_cu.cuGraphNodeGetType(_cu.CUgraphNode(node)), "cuGraphNodeGetType")
    return str(_NT(kind).name).removeprefix("CU_GRAPH_NODE_TYPE_").lower()


def child_graph(node: int) -> int:
    """The graph a child-graph node runs."""
    return int(check(_cu.cuGraphChildGraphNodeGetGraph(_cu.CUgraphNode(node)), "cuGraphChildGraphNodeGetGraph"))


@dataclass(frozen=True)
class KernelNode:
    """A kernel node's launch, as the driver holds it: ``block`` is its parameter block (the bytes
    of every parameter at its offset) where ``layout`` (``(offset, size)`` per parameter) is known."""

    function: int
    grid: tuple[int, int, int]
    block_dim: tuple[int, int, int]
    shared_mem: int
    context: int
    block: bytes | None


def kernel_node(node: int, layout: list[tuple[int, int]] | None) -> KernelNode:
    """Read a kernel node; its parameter block through ``kernelParams`` (one pointer a parameter,
    laid out by ``layout``) or through ``extra`` (one packed buffer); ``block`` is None where the
    layout is unknown or the node holds neither."""
    p = check(_cu.cuGraphKernelNodeGetParams(_cu.CUgraphNode(node)), "cuGraphKernelNodeGetParams")
    block = None
    kernel_params, extra = int(p.kernelParams or 0), int(p.extra or 0)
    if layout is not None:
        size = max((offset + n for offset, n in layout), default=0)
        if not layout:
            block = b""
        elif kernel_params:
            data = bytearray(size)
            pointers = (ctypes.c_void_p * len(layout)).from_address(kernel_params)
            for (offset, n), pointer in zip(layout, pointers):
                if not pointer:
                    break
                data[offset : offset + n] = ctypes.string_at(pointer, n)
            else:
                block = bytes(data)
        elif extra:
            block = _extra_buffer(extra, size)
    return KernelNode(int(p.func), (p.gridDimX, p.gridDimY, p.gridDimZ), (p.blockDimX, p.blockDimY, p.blockDimZ),
                      int(p.sharedMemBytes), int(p.ctx or 0), block)  # fmt: skip


def _extra_buffer(extra: int, size: int) -> bytes | None:
    """The parameter block an ``extra`` list points at, if it holds ``size`` bytes."""
    found: dict[int, int] = {}
    for i in range(8):  # (key, value) pairs up to the end key; cuda.h defines three keys
        key = ctypes.c_void_p.from_address(extra + 16 * i).value or 0
        if key == _END:
            break
        found[key] = ctypes.c_void_p.from_address(extra + 16 * i + 8).value or 0
    pointer, size_at = found.get(_BUFFER_POINTER, 0), found.get(_BUFFER_SIZE, 0)
    if not pointer or not size_at or ctypes.c_size_t.from_address(size_at).value < size:
        return None
    return ctypes.string_at(pointer, size)


def copy_node(node: int) -> tuple[str, Any]:
    """A memcpy or memset node's parameters: ``("memcpy", CUDA_MEMCPY3D)`` or
    ``("memset", CUDA_MEMSET_NODE_PARAMS)`` (their addresses are ``srcDevice``/``dstDevice`` and
    ``dst``)."""
    n = _cu.CUgraphNode(node)
    if node_kind(node) == "memset":
        return "memset", check(_cu.cuGraphMemsetNodeGetParams(n), "cuGraphMemsetNodeGetParams")
    return "memcpy", check(_cu.cuGraphMemcpyNodeGetParams(n), "cuGraphMemcpyNodeGetParams")


def set_copy_node(exec_: int, node: int, kind: str, params: Any, context: int) -> None:
    """``cuGraphExecMemcpyNodeSetParams`` / ``cuGraphExecMemsetNodeSetParams``."""
    e, n, ctx = _cu.CUgraphExec(exec_), _cu.CUgraphNode(node), _cu.CUcontext(context)
    if kind == "memset":
        check(_cu.cuGraphExecMemsetNodeSetParams(e, n, params, ctx), "cuGraphExecMemsetNodeSetParams")
    else:
        check(_cu.cuGraphExecMemcpyNodeSetParams(e, n, params, ctx), "cuGraphExecMemcpyNodeSetParams")


def make_device_updatable(node: int) -> int | None:
    """Make a kernel node of a graph not yet instantiated updatable from the device
    (``CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE``); return its device handle, or None where
    the driver refuses it for this node (too old, or a node it cannot update from the device)."""
    attr = _cu.CUkernelNodeAttrID.CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE
    value = _cu.CUkernelNodeAttrValue()
    value.deviceUpdatableKernelNode.deviceUpdatable = 1
    n = _cu.CUgraphNode(node)
    result = _cu.cuGraphKernelNodeSetAttribute(n, attr, value)
    refused = (CUresult.CUDA_ERROR_INVALID_VALUE, CUresult.CUDA_ERROR_NOT_SUPPORTED, CUresult.CUDA_ERROR_NOT_PERMITTED)
    if result[0] in refused:
        return None
    check(result, "cuGraphKernelNodeSetAttribute(DEVICE_UPDATABLE_KERNEL_NODE)")
    got = check(
        _cu.cuGraphKernelNodeGetAttribute(n, attr), "cuGraphKernelNodeGetAttribute(DEVICE_UPDATABLE_KERNEL_NODE)"
    )
    handle = int(got.deviceUpdatableKernelNode.devNode)
    return handle or None


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


def graph_upload(exec_: int, stream: int) -> None:
    """``cuGraphUpload``: make an instantiated graph ready to launch (device-side updates need it
    before the first launch)."""
    check(_cu.cuGraphUpload(_cu.CUgraphExec(exec_), _cu.CUstream(stream)), "cuGraphUpload")


def graph_launch(exec_: int, stream: int) -> None:
    check(_cu.cuGraphLaunch(_cu.CUgraphExec(exec_), _cu.CUstream(stream)), "cuGraphLaunch")


def stream_is_capturing(stream: int) -> bool:
    """``cuStreamIsCapturing``: whether a stream is capturing a graph (an invalidated capture too:
    it is still under way until it ends)."""
    status = check(_cu.cuStreamIsCapturing(_cu.CUstream(stream)), "cuStreamIsCapturing")
    return status != _cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def graph_entry_points() -> tuple[int, int, int, int, int]:
    """The addresses of ``cuGraphExecKernelNodeSetParams`` (the v2 parameter struct of CUDA 12+),
    ``cuGraphLaunch``, ``cuGraphExecMemcpyNodeSetParams``, ``cuGraphExecMemsetNodeSetParams`` and
    ``cuStreamIsCapturing``, which the compiled replay calls directly."""
    found = entry_points("cuGraphExecKernelNodeSetParams", "cuGraphLaunch", "cuGraphExecMemcpyNodeSetParams",
                         "cuGraphExecMemsetNodeSetParams", "cuStreamIsCapturing")  # fmt: skip
    return found[0], found[1], found[2], found[3], found[4]
