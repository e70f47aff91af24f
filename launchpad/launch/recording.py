"""How a recorded sequence learns where its inputs go: captures compared.

:func:`launchpad.record` runs the user's function under CUDA stream capture once with the real
inputs (the graph it keeps) and once more per input with that input alone changed to a probe (a
tensor at another address, a scalar of another value). Comparing each probe's graph with the
first, node by node and parameter by parameter, says exactly which parameter bytes follow which
input, without launchpad seeing any argument: a pointer that moved by the tensor's own move
(plus the same offset: a view) follows that tensor; bytes that became the probe's encoding
follow that scalar. Anything else that changed is refused, never frozen: a different kernel,
grid or node (the input decides what runs), or a value derived from an input (``lr * 2``).
Pointers that moved on their own are allocations made inside the function, private to the graph.

The capture itself (:func:`capture`) needs a GPU; :func:`analyze` works on the node snapshots
alone, so tests give it snapshots of their own.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core import driver as _driver
from ..core import loader as _loader
from ..core.params import Param
from ..core.spec import KernelSpec
from ..errors import RecordError

__all__ = ["Node", "Plan", "Use", "analyze", "capture", "far_probe", "probe", "same_structure"]


@dataclass
class Node:
    """One node of a captured graph, as the analysis needs it."""

    handle: int
    kind: str  # "kernel", "memcpy", "memset", ...
    function: int = 0
    grid: tuple = ()
    block: tuple = ()
    shared_mem: int = 0
    context: int = 0
    params: list[bytes] | None = field(default_factory=list)  # kernel nodes: each parameter's bytes (None: unknown)
    module: Any = None  # launchpad's LoadedModule of the function (its spec), or None: a foreign kernel
    values: tuple = ()  # memcpy and memset nodes: their addresses and sizes

    @property
    def spec(self) -> KernelSpec | None:
        return self.module.spec if self.module is not None else None

    def describe(self, index: int) -> str:
        if self.spec is not None:
            return f"node {index} (kernel {self.spec.display_name!r})"
        return f"node {index} (a {self.kind} launchpad did not make)"


@dataclass(frozen=True)
class Use:
    """Where one input reaches one launchpad kernel node: parameter ``param`` of node ``node``;
    a tensor's data pointer plus ``delta``, or a scalar encoded as the parameter's type."""

    node: int
    param: Param
    delta: int = 0
    align: int = 0
    multiple_of: int = 0
    wrap: bool = False


@dataclass
class Plan:
    """What a sequence replays: the kept capture's nodes, and for each input where it goes."""

    nodes: list[Node]
    uses: dict[str, list[Use]]
    foreign: dict[str, list[str]]  # input -> the nodes launchpad did not make that read it


def capture(fn: Callable[..., Any], values: dict[str, Any]) -> tuple[Any, list[Node]]:
    """Capture ``fn(**values)`` on torch's machinery (its private memory pool holds what ``fn``
    allocates); return the torch graph and the snapshot of its nodes."""
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    with torch.cuda.graph(graph):
        fn(**values)
    return graph, [_snapshot(node) for node in _driver.graph_nodes(int(graph.raw_cuda_graph()))]


def _snapshot(handle: int) -> Node:
    kind = _driver.node_kind(handle)
    if kind in ("memcpy", "memset"):
        return Node(handle, kind, values=_driver.copy_node(handle))
    if kind != "kernel":
        return Node(handle, kind)
    function, grid, block, shared_mem, params, context = _driver.kernel_node(handle)
    module = _loader.loaded_function(function)
    if module is not None and module.spec is not None:
        sizes = [p.size for p in module.spec.params]
    else:
        module, layout = None, _driver.function_params(function)
        if layout is None:  # the driver cannot say: every input may reach it
            return Node(handle, kind, function, tuple(grid), tuple(block), shared_mem, context, None)
        sizes = [size for _, size in layout]
    pointers = list((ctypes.c_void_p * len(sizes)).from_address(params)) if sizes else []
    values = [ctypes.string_at(pointers[i] or 0, size) for i, size in enumerate(sizes)]
    return Node(handle, kind, function, tuple(grid), tuple(block), shared_mem, context, values, module)


def probe(value: Any) -> Any:
    """Another value of the input's kind, for the comparison: a tensor of the same shape, strides
    and dtype at another address with the same alignment (so Triton specializes alike); an int
    with bit 4 flipped (same width, sign and divisibility by 16); a float at least twice as far
    from zero (another encoding in every float format); a bool's negation."""
    if isinstance(value, torch.Tensor):
        span = 1 + sum((n - 1) * s for n, s in zip(value.shape, value.stride())) if value.numel() else 1
        nbytes = span * value.element_size()
        raw = torch.empty(nbytes + 512, dtype=torch.uint8, device=value.device)
        shift = (value.data_ptr() - raw.data_ptr()) % 256 + 256
        flat = raw[shift : shift + nbytes].view(value.dtype)
        return flat.as_strided(value.shape, value.stride())
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value ^ 0x10
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        return 1.0
    return 2.0 * number + (1.0 if number >= 0 else -1.0)


def far_probe(value: Any) -> Any:
    """A scalar far from the input's value, for the structure alone (a grid computed from it, a
    branch on its size): an int 2**20 larger (divisibility by 16 kept), a float a million times
    larger; None for tensors (their shapes are fixed) and bools (one probe covers both values)."""
    if isinstance(value, torch.Tensor) or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value + (1 << 20)
    return float(value) * 1e6 + 1e6


def encode(param: Param, value: Any) -> bytes | None:
    """A scalar as a parameter of ``param``'s type holds it (None where it cannot: out of range)."""
    from .checks import bf16_bits  # the launch's own rounding

    try:
        if param.type == "bf16":
            return struct.pack("<H", bf16_bits(value))
        return struct.pack("<" + param.code, value)
    except (struct.error, TypeError, OverflowError):
        return None


#: What a slot of a kernel launchpad did not make may hold for a scalar: the encodings of its size.
_FOREIGN_CODES = {2: ("e",), 4: ("i", "I", "f"), 8: ("q", "Q", "d")}


def _foreign_scalar(data: bytes, value: Any) -> bool:
    for code in _FOREIGN_CODES.get(len(data), ()):
        try:
            if struct.pack("<" + code, value) == data:
                return True
        except (struct.error, TypeError, OverflowError):
            continue
    return False


def analyze(base: list[Node], probes: dict[str, list[Node]], values: dict[str, Any], probed: dict[str, Any],
            is_device_pointer: Callable[[int], bool]) -> Plan:  # fmt: skip
    """Where each input goes, from the base capture and one capture per input with that input
    probed (see the module documentation); raises :class:`RecordError` for what cannot be replayed."""
    uses: dict[str, list[Use]] = {name: [] for name in probes}
    foreign: dict[str, list[str]] = {name: [] for name in probes}
    for name, nodes in probes.items():
        same_structure(name, base, nodes)
        old, new = values[name], probed[name]
        for i, (a, b) in enumerate(zip(base, nodes)):
            if a.kind == "kernel" and a.params is None:  # a kernel whose parameters the driver cannot list
                foreign[name].append(a.describe(i))
            elif a.kind == "kernel":
                _compare_kernel(name, i, a, b, old, new, uses[name], foreign[name], is_device_pointer)
            elif a.values != b.values:  # a copy or a memset that reads or writes the input
                if isinstance(old, torch.Tensor) and _follows(a.values, b.values, old, new):
                    foreign[name].append(a.describe(i))
                elif not all(x == y or (is_device_pointer(x) and is_device_pointer(y))
                             for x, y in zip(a.values, b.values)):  # fmt: skip
                    raise RecordError(f"sequence input {name!r}: {a.describe(i)} changes with it in a way "
                                      "launchpad cannot follow")  # fmt: skip
        if not uses[name] and not foreign[name]:
            raise RecordError(
                f"sequence input {name!r} reaches no launch launchpad can find in the recording: pass it to the "
                "kernels directly (not a value computed from it), or leave it out"
            )
    return Plan(base, uses, foreign)


def _follows(a: tuple, b: tuple, old: torch.Tensor, new: torch.Tensor) -> bool:
    """Whether some address among ``a`` moved to ``b`` as the tensor moved."""
    move = new.data_ptr() - old.data_ptr()
    return any(x != y and y - x == move for x, y in zip(a, b))


def same_structure(name: str, base: list[Node], nodes: list[Node]) -> None:
    """Raise :class:`RecordError` unless a capture with another value of input ``name`` launched
    the same kernels, grids and nodes."""

    def fail(detail: str) -> None:
        raise RecordError(
            f"sequence input {name!r} decides what the function launches ({detail}); a sequence input may only "
            "change values its launches read. Leave it out of the inputs (it then stays at its recorded value), or "
            "record one sequence per value"
        )

    if len(base) != len(nodes):
        fail(f"{len(base)} graph nodes with the recorded value, {len(nodes)} with another")
    for i, (a, b) in enumerate(zip(base, nodes)):
        if a.kind != b.kind:
            fail(f"node {i} is a {a.kind} with the recorded value, a {b.kind} with another")
        if a.kind == "kernel" and (a.function, a.grid, a.block, a.shared_mem) != (b.function, b.grid, b.block,
                                                                                 b.shared_mem):  # fmt: skip
            what = "another kernel" if a.function != b.function else f"grid {b.grid}, block {b.block}"
            fail(f"{a.describe(i)} has grid {a.grid}, block {a.block}; with another value, {what}")


def _compare_kernel(name: str, i: int, a: Node, b: Node, old: Any, new: Any, uses: list[Use], foreign: list[str],
                    is_device_pointer: Callable[[int], bool]) -> None:  # fmt: skip
    spec = a.spec
    args = {arg.param: arg for arg in spec.args if arg.kind == "param"} if spec is not None else {}
    tensor = isinstance(old, torch.Tensor)
    for j, (x, y) in enumerate(zip(a.params or (), b.params or ())):
        param = spec.params[j] if spec is not None else Param(j, 0, len(x), 1)
        if x == y:
            if not tensor and spec is not None and encode(param, old) == x and encode(param, new) == x:
                raise RecordError(
                    f"sequence input {name!r}: {a.describe(i)}, {param.label} holds {old!r} as the input does, "
                    f"but launchpad cannot tell it apart from its probe {new!r} there; record with another value"
                )
            continue
        if tensor and len(x) == 8:
            vx, vy = int.from_bytes(x, "little"), int.from_bytes(y, "little")
            delta = vx - old.data_ptr()
            if vy - new.data_ptr() == delta:
                if spec is None:
                    foreign.append(a.describe(i))
                else:
                    arg = args.get(j)
                    uses.append(Use(i, param, delta, align=arg.align if arg else 0))
                continue
            if is_device_pointer(vx) and is_device_pointer(vy):
                continue  # memory the function allocated: each capture its own
        elif not tensor:
            if spec is None and _foreign_scalar(x, old) and _foreign_scalar(y, new):
                foreign.append(a.describe(i))
                continue
            if spec is not None and encode(param, old) == x and encode(param, new) == y:
                arg = args.get(j)
                options = arg.options if arg else {}
                uses.append(Use(i, param, multiple_of=arg.multiple_of if arg else 0, wrap=bool(options.get("wrap"))))
                continue
            if len(x) == 8 and is_device_pointer(int.from_bytes(x, "little")) and is_device_pointer(
                    int.from_bytes(y, "little")):  # fmt: skip
                continue
        raise RecordError(
            f"sequence input {name!r}: {a.describe(i)}, {param.label} changes with it but is not it (a value "
            "computed from an input, such as lr * 2 or a view's size): make that value an input of its own"
        )
