"""Captures of a recorded function, as the analysis reads them.

:func:`launchpad.record` runs the user's function under CUDA stream capture several times: once
with the real inputs (the graph it keeps), once more with the same inputs (the control: only the
graph's own memory moves), and once per input with that input alone changed to a probe (a tensor
at another address, a scalar of another value). :func:`capture` makes one such capture and
:func:`snapshot` reads its nodes with the driver: each kernel node's function, launch shape and
whole parameter block (laid out by launchpad's spec for its own kernels, by
``cuFuncGetParamInfo`` for any other), each copy's and memset's addresses, child graphs node by
node. :mod:`launchpad.sequences.analysis` compares the snapshots; it needs no GPU, so tests give it
snapshots of their own.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core import driver as _driver
from ..core import loader as _loader
from ..errors import LaunchpadError, RecordError
from .allocations import Blocks, History, clock_available, node_clock

__all__ = [
    "MEMCPY_FIELDS",
    "SMALL_BLOCK",
    "SMALL_SEGMENT",
    "SPACER",
    "Capture",
    "Node",
    "capture",
    "failure",
    "far_probe",
    "layout_span",
    "probe",
    "recover",
    "residue_probe",
    "rewrapped",
    "snapshot",
    "tensor_span",
]

#: Torch's small pool: its largest block, its segments, and its smallest block, the spacer between
#: two holes (:func:`capture`'s ``holes``).
SMALL_BLOCK, SMALL_SEGMENT, SPACER = 1 << 20, 2 << 20, 512

#: Where a memcpy node's device addresses sit in its ``CUDA_MEMCPY3D`` (``srcDevice``,
#: ``dstDevice``), and a memset's in its ``CUDA_MEMSET_NODE_PARAMS`` (``dst``): the offsets a
#: replay writes a new address at.
MEMCPY_FIELDS = {"memcpy": (48, 136), "memset": (0,)}


@dataclass
class Node:
    """One node of a captured graph, as the analysis needs it.

    ``block`` is a kernel node's parameter block (every parameter's bytes at its offset, per
    ``layout``) or None where it cannot be read; ``addresses`` a copy's or memset's device
    addresses (at the offsets of :data:`MEMCPY_FIELDS`); ``children`` the nodes of a child graph.
    """

    handle: int
    kind: str  # "kernel", "memcpy", "memset", "graph", "host", "conditional", ...
    function: int = 0
    grid: tuple = ()
    block_dim: tuple = ()
    shared_mem: int = 0
    context: int = 0
    layout: tuple[tuple[int, int], ...] | None = ()
    block: bytes | None = b""
    module: Any = None  # launchpad's LoadedModule of the function (its spec), or None: a foreign kernel
    name: str = ""
    addresses: tuple[int, ...] = ()
    params: Any = None  # a copy's or memset's driver parameters, for host updates
    children: list[Node] = field(default_factory=list)

    @property
    def spec(self) -> Any:
        return self.module.spec if self.module is not None else None

    def describe(self, index: int) -> str:
        if self.spec is not None:
            return f"node {index} (kernel {self.spec.display_name!r})"
        if self.kind == "kernel":
            return f"node {index} (kernel {self.name!r}, not launchpad's)" if self.name else \
                f"node {index} (a kernel launchpad did not make)"  # fmt: skip
        return f"node {index} (a {self.kind} node)"


@dataclass
class Capture:
    """One capture: torch's graph (its private memory pool holds what the function allocated), its
    nodes, what the function returned, and every allocation made meanwhile (None: not known)."""

    graph: Any
    nodes: list[Node]
    result: Any
    allocations: Blocks | None = None
    positions: list[int] | None = None  # each node's place among all the graph's (None: the same as in nodes)

    def release(self) -> None:
        """Drop the graph once the capture has been read (its nodes and allocation facts stay, which
        the analysis compares): its memory pool goes back to torch once no tensor of it is held."""
        self.graph = None


def capture(fn: Callable[..., Any], values: dict[str, Any], skip: frozenset[int] = frozenset(), pool: Any = None,
            relaxed: bool = False, generators: Iterable[Any] = (), timed: bool = False,
            holes: tuple[int, ...] = ()) -> Capture:  # fmt: skip
    """Capture ``fn(**values)`` on torch's machinery (into the memory pool ``pool``, torch's pool
    handle, where given; in CUDA's relaxed capture mode where ``relaxed``, so that a kernel may
    compile and load meanwhile; with ``generators`` registered besides torch's default one);
    snapshot the graph's nodes (those whose function is in ``skip``, launchpad's own, left out).
    ``timed``: under a :class:`~launchpad.sequences.allocations.NodeClock`, whose allocation
    lifetimes (where torch gives them) come with the allocations. ``holes``: sizes of free blocks the
    graph's pool holds when ``fn`` starts, each between two spacers (:data:`SPACER` bytes, held until
    the capture ends), left out of the allocation facts: torch's best fit puts each of ``fn``'s
    blocks of those sizes into a hole, so that none touches another, where they may in every plain
    capture."""
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    for generator in generators:
        graph.register_generator_state(generator)
    # cuBLAS's workspace is made on its first use on a stream and kept in torch's table of them: cleared
    # here, each capture makes its own inside its graph's pool (as torch.compile's graph trees do), so
    # every capture allocates alike, and a later clear (torch.compile clears them) frees the kept
    # graph's workspace into that graph's own pool, where nothing else allocates, not into torch's.
    clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear_workspaces is not None:
        clear_workspaces()
    history = History(torch.cuda.current_device())
    timed = timed and clock_available()  # (asked before the capture: it starts a thread)
    spacers: list[torch.Tensor] = []
    try:
        with history:
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="relaxed" if relaxed else "global"):
                if holes:
                    start = history.mark()
                    spacers = _holes_between_spacers(holes, history.device)
                    history.skip = (start, history.mark())
                if timed:
                    with node_clock(torch.cuda.current_stream().cuda_stream) as history.clock:
                        result = fn(**values)
                else:
                    result = fn(**values)
            history.pool = graph.pool()
        spacers.clear()  # (freed into the graph's pool once the history is read)
    except LaunchpadError:
        recover()
        raise
    except Exception as exc:
        recover()
        raise RecordError(f"the function could not be captured: {failure(exc)}") from exc
    nodes = [snapshot(handle) for handle in _driver.graph_nodes(int(graph.raw_cuda_graph()))]
    blocks = Blocks(history.blocks, history.lifetimes) if history.blocks is not None else None
    kept = [i for i, n in enumerate(nodes) if n.function not in skip]
    return Capture(graph, [nodes[i] for i in kept], result, blocks, kept)


def _holes_between_spacers(sizes: tuple[int, ...], device: int) -> list[torch.Tensor]:
    """In the capturing graph's pool (its small blocks: none yet), segment by segment, a spacer, then
    for each size a hole and a spacer, and a segment's rest filled (so that no free block is left
    where the allocator's best fit could put a spacer instead): the holes are freed (no node:
    allocations alone), the spacers and fillers returned, to be held. Torch's allocator carves a
    segment's blocks in order from its only free block; where it did not (another torch), some
    holes touch, which the analysis then sees as in a plain capture."""
    held: list[torch.Tensor] = []
    holes: list[torch.Tensor] = []
    left = 0  # bytes left in the segment being carved

    def take(nbytes: int, into: list[torch.Tensor]) -> None:
        nonlocal left
        into.append(torch.empty(nbytes, dtype=torch.uint8, device=device))
        left -= nbytes

    def fill() -> None:  # (the segment's rest, in blocks the small pool takes)
        while left:
            take(min(left, SMALL_BLOCK), held)

    for size in sizes:
        if size + 2 * SPACER > left:
            fill()
            left = SMALL_SEGMENT
            take(SPACER, held)  # (a new segment: a spacer first)
        take(size, holes)
        take(SPACER, held)
    fill()
    del holes
    return held


def recover() -> None:
    """After a failed capture: an empty capture takes torch's generators out of the capture state
    the failure left them in (else every later random draw raises "Offset increment outside graph
    capture"), and the device is synchronized (a capture that failed may have left work queued)."""
    try:
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            pass
        torch.cuda.synchronize()
    except Exception:  # nothing more to mend: the original error says what went wrong
        pass


def failure(exc: BaseException) -> str:
    """An exception raised inside a capture, as a refusal words it: the first line of each error in
    its chain (a failed capture's own error comes first, what the function did that broke it after)
    and the user's line that raised it (the innermost frame outside torch and launchpad)."""
    errors: list[str] = []
    where = ""
    seen: BaseException | None = exc
    while seen is not None and len(errors) < 3:
        text = str(seen).strip()
        errors.append(f"{type(seen).__name__}: {text.splitlines()[0] if text else ''}")
        frames = [f for f in traceback.extract_tb(seen.__traceback__) if "/torch/" not in f.filename and
                  "/launchpad/" not in f.filename]  # fmt: skip
        if frames:
            where = f" at {frames[-1].filename}:{frames[-1].lineno} ({(frames[-1].line or '').strip()})"
        seen = seen.__cause__ or seen.__context__
    return f"{'; after '.join(errors)}{where}"


def snapshot(handle: int) -> Node:
    """Read one node (see :class:`Node`)."""
    kind = _driver.node_kind(handle)
    if kind in ("memcpy", "memset"):
        what, params = _driver.copy_node(handle)
        addresses = (int(params.srcDevice), int(params.dstDevice)) if what == "memcpy" else (int(params.dst),)
        return Node(handle, kind, addresses=addresses, params=params)
    if kind == "graph":
        children = [snapshot(h) for h in _driver.graph_nodes(_driver.child_graph(handle))]
        return Node(handle, kind, children=children)
    if kind != "kernel":
        return Node(handle, kind)
    function = _driver.kernel_node(handle, None).function
    module = _loader.loaded_function(function)
    if module is not None and module.spec is not None:
        layout: tuple[tuple[int, int], ...] | None = tuple((p.offset, p.size) for p in module.spec.params)
        name = module.spec.display_name
    else:
        module = None
        found = _driver.function_params(function)
        layout = tuple(found) if found is not None else None
        name = _driver.function_name(function)
    k = _driver.kernel_node(handle, list(layout) if layout is not None else None)
    return Node(handle, kind, k.function, k.grid, k.block_dim, k.shared_mem, k.context, layout, k.block, module,
                name)  # fmt: skip


def probe(value: Any) -> Any:
    """Another value of the input's kind, for the comparison: a tensor of the same shape, strides
    and dtype at another address with the same alignment (so kernels specialize alike); an int
    with the same sign, width and residue modulo 16 that Triton does not specialize (never 1); a
    float at least twice as far from zero (another encoding in every float format); a bool's
    negation."""
    if isinstance(value, torch.Tensor):
        nbytes = max(tensor_span(value), value.element_size())  # (one element at least, of an empty tensor too)
        raw = torch.empty(nbytes + 512, dtype=torch.uint8, device=value.device)
        shift = (value.data_ptr() - raw.data_ptr()) % 256 + 256
        flat = raw[shift : shift + nbytes].view(value.dtype)
        return flat.as_strided(value.shape, value.stride())
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        for step in (0x10, 0x20, 0x40, 0x80):
            candidate = value ^ step
            if candidate != 1 and (candidate < 0) == (value < 0) and _int_width(candidate) == _int_width(value):
                return candidate
        return value + 16 if value + 16 < 2**63 else value - 16
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        return 1.0
    return 2.0 * number + (1.0 if number >= 0 else -1.0)


def layout_span(shape: tuple[int, ...], stride: tuple[int, ...], itemsize: int) -> int:
    """Bytes from a layout's first element to the end of its last (from its lowest byte to one past
    its highest, where a stride is negative: torch makes none); 0 where its shape holds a 0."""
    if 0 in shape:
        return 0
    return (1 + sum((n - 1) * abs(s) for n, s in zip(shape, stride))) * itemsize


def tensor_span(t: torch.Tensor) -> int:
    """:func:`layout_span` of a tensor's own layout (an empty tensor's strides are never asked)."""
    return layout_span(t.shape, t.stride(), t.element_size()) if t.numel() else 0


def _int_width(value: int) -> int:
    """The int width a launch (Triton's too) gives a value: 32 bits where it fits, else 64."""
    return 32 if -(2**31) <= value < 2**31 else 64


def far_probe(value: Any) -> Any:
    """A scalar far from the input's value, for the structure alone (a grid computed from it, a
    branch on its size): an int 2**20 away with the same width and residue modulo 16, a float a
    million times larger; None for tensors (their shapes are fixed) and bools (one probe covers
    both values)."""
    if isinstance(value, torch.Tensor) or isinstance(value, bool):
        return None
    if isinstance(value, int):
        far = value + (1 << 20)
        return far if _int_width(far) == _int_width(value) else value - (1 << 20)
    return float(value) * 1e6 + 1e6


def residue_probe(value: Any) -> Any:
    """For an int that is a multiple of 16, a value near it that is not (never 1, the same width):
    Triton specializes a kernel on an int's divisibility by 16, so a capture with it launches other
    kernels where the recording's were compiled assuming a multiple of 16. None for any other value."""
    if isinstance(value, bool) or not isinstance(value, int) or value % 16:
        return None
    for candidate in (value + 1, value - 1, value + 3):
        if candidate != 1 and (candidate < 0) == (value < 0) and _int_width(candidate) == _int_width(value):
            return candidate
    return None


def rewrapped(value: Any) -> Any:
    """The same value through new host objects: for a tensor, one over the same memory with a new
    ``TensorImpl`` and ``StorageImpl`` (through DLPack); anything else as it is. torch's kernels take
    structs by value whose unused bytes hold what the host's stack held, host addresses of the
    tensors' objects among them: a capture of the same memory through other objects tells such
    bytes apart from the ones that follow the memory."""
    if type(value) is not torch.Tensor or value.requires_grad or value.is_conj() or value.is_neg():
        return value  # (autograd's graph, or the conjugate or negative view's kernels, would differ: kept)
    try:  # the whole storage as bytes, through DLPack: a new StorageImpl of the same memory and size
        whole = torch.empty(0, dtype=torch.uint8, device=value.device).set_(value.untyped_storage())
        storage = torch.from_dlpack(whole).untyped_storage()
    except (BufferError, RuntimeError, TypeError):  # (nothing DLPack cannot take is expected: kept)
        return value
    # (the same offset, sizes and strides: a view the function takes behaves as it did)
    return torch.empty(0, dtype=value.dtype, device=value.device).set_(storage, value.storage_offset(), value.shape,
                                                                      value.stride())  # fmt: skip
