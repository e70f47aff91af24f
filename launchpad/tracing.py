"""Kernels under ``torch.compile``: every launch traced as one operator of its kernel, no graph break.

Dynamo cannot trace into a C function, and a launch is one: met in a compiled function it would
break the graph (or fail under ``fullgraph=True``). So ``Kernel.launch`` is
:func:`launchpad.launch.traced.launch_first` bound to the pair ``(the executor's launch, the kernel's
Traced)``, and this module has Dynamo trace :func:`traced_launch` in its place
(``torch.compiler.substitute_in_graph``). That stand-in calls the kernel's operator,
``torch.ops.launchpad.k<N>_<name>``, which it registers on first use, once per kernel (and per
declared ``Kernel.writes``):

- the schema: the grid and block as ``SymInt[]``, the dynamic shared memory, then the kernel's
  arguments as :func:`launchpad.torch_op` types them (a pointer, Numba or cuTile array a ``Tensor?``,
  an int a ``SymInt``, so sizes from shapes stay symbolic, a float ``float``, a bool ``bool``); the
  values it was specialized on (Triton constexprs) left out, as its hidden scratch;
- what it writes: the arguments named by ``Kernel.writes`` where set; else every tensor argument but
  a C++ kernel's pointers to ``const``. Declared written, a tensor the kernel only reads costs the
  compiler an optimization, never a result;
- the CUDA implementation launches on torch's current stream (so ``mode="reduce-overhead"``'s CUDA
  graphs capture it); the fake one launches nothing.

``kernel[grid, block]`` under Dynamo is a partial of ``Kernel.launch`` (``Kernel.__getitem__``
asks ``torch.compiler.is_dynamo_compiling()``), so it is traced the same way. Dynamo is imported
lazily by torch (most of a second): the stand-in is registered as soon as ``torch._dynamo`` is
imported, by a hook on that import, so ``import launchpad`` never pays for it.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import re
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import torch

from .errors import ArgumentError, LaunchpadError, LaunchpadWarning
from .launch import checks as _checks
from .launch.traced import TRACED, Traced, launch_first
from .torch_ops import _alias_set, _describe, _Input

__all__ = ["traced_launch"]

_NAMESPACE = "launchpad"
_LOCK = threading.Lock()
# Traced key -> (operator name, ((position, label), ...) of the arguments it takes, ((position, value),
# ...) of the constants): what the stand-in needs, as constants. The library defines every operator
# for the life of the process (torch drops an operator with its Library object).
_OPERATORS: dict[str, tuple[str, tuple[tuple[int, str], ...], tuple[tuple[int, Any], ...]]] = {}
_LIBRARY: list[torch.library.Library] = []


def traced_launch(pair: tuple, grid: Any, block: Any, *args: Any, shared_mem: Any = 0, stream: Any = None,
                  cluster: Any = None, cooperative: bool = False, pdl: bool = False, **named: Any) -> None:  # fmt: skip
    """What Dynamo traces in place of ``Kernel.launch`` (``launch_first(pair, ...)``): a call of the
    kernel's operator with the launch's tensors and scalars."""
    traced: Traced = pair[1]
    name, inputs, consts = _operator(traced.key)
    where = f"kernel {traced.spec.display_name!r} under torch.compile"
    if stream is not None or cluster is not None or cooperative or pdl:
        raise ArgumentError(f"{where}: stream=, cluster=, cooperative= and pdl= are not traced; launch it on "
                            "torch's current stream without them, or outside the compiled function")  # fmt: skip
    for position, value in consts:
        if position < len(args) and args[position] is not value and args[position] != value:
            raise ArgumentError(f"{where}: argument {position} must be {value!r}, the value it was compiled for")
    values = []
    for position, label in inputs:
        if position < len(args):
            values.append(args[position])
        elif label in named:
            values.append(named[label])
        else:
            raise ArgumentError(f"{where}: argument {position} ({label!r}) is missing")
    op = getattr(getattr(torch.ops, _NAMESPACE), name).default
    op(_dims(grid), None if block is None else _dims(block), shared_mem, *values)


def _dims(value: Any) -> list:
    dims = list(value) if isinstance(value, (tuple, list)) else [value]
    return dims + [1] * (3 - len(dims))


def _operator(key: str) -> tuple[str, tuple[tuple[int, str], ...], tuple[tuple[int, Any], ...]]:
    """The operator of the kernel whose Traced has ``key``, registered on first use. Dynamo runs
    this for real while tracing and takes its result as a constant (``assume_constant_result``)."""
    with _LOCK:
        found = _OPERATORS.get(key)
        if found is None:
            found = _OPERATORS[key] = _register(TRACED[key])
        return found


def _register(traced: Traced) -> tuple[str, tuple[tuple[int, str], ...], tuple[tuple[int, Any], ...]]:
    spec = traced.spec
    where = f"kernel {spec.display_name!r} under torch.compile"
    inputs, consts = _describe("", spec, None, where=where)
    written = _written(spec, inputs, traced.writes)
    parts, k = ["SymInt[] grid", "SymInt[]? block", "SymInt shared_mem"], 0
    for i in inputs:
        if i.type != "Tensor":
            parts.append(f"{i.type} {i.name}")
        elif i.name in written:
            parts.append(f"Tensor({_alias_set(k)}!)? {i.name}")
            k += 1
        else:
            parts.append(f"Tensor? {i.name}")
    name = f"{traced.key}_" + re.sub(r"\W", "_", spec.name)[:48]
    if not _LIBRARY:
        _LIBRARY.append(torch.library.Library(_NAMESPACE, "FRAGMENT"))
    library = _LIBRARY[0]
    library.define(f"{name}({', '.join(parts)}) -> ()")
    library.impl(name, _implementation(traced, inputs, consts), "CUDA")
    torch.library.register_fake(f"{_NAMESPACE}::{name}", _fake, lib=library)
    return name, tuple((i.position, i.name) for i in inputs), tuple(sorted(consts.items()))


def _written(spec: Any, inputs: list[_Input], declared: tuple[str, ...] | None) -> set[str]:
    """The tensor inputs the operator declares written (see the module documentation)."""
    by_position = {a.path[0]: a for a in spec.args if a.path}
    tensors = [i for i in inputs if i.type == "Tensor"]
    if declared is not None:
        return {i.name for i in tensors if by_position[i.position].name in declared}
    types = spec.metadata.get("parameter_types") if spec.metadata.get("frontend") == "cpp" else None
    if not types:
        return {i.name for i in tensors}
    return {i.name for i in tensors if not _points_to_const(types[by_position[i.position].param])}


def _points_to_const(ctype: str) -> bool:
    """``const float*`` (the kernel cannot write through it), not ``float* const`` nor ``const float**``."""
    return ctype.endswith("*") and ctype.count("*") == 1 and ctype.startswith("const ")


def _implementation(traced: Traced, inputs: list[_Input], consts: dict[int, Any]) -> Callable[..., None]:
    """The CUDA implementation: the launch, on the first tensor's device (as every torch op)."""
    launch = traced.launch
    count = 1 + max([i.position for i in inputs] + list(consts), default=-1)
    template = [consts.get(p) for p in range(count)]
    positions = [i.position for i in inputs]
    first = next((k for k, i in enumerate(inputs) if i.type == "Tensor"), None)

    def body(grid: list, block: list | None, shared_mem: int, values: tuple) -> None:
        args = list(template)
        for position, value in zip(positions, values):
            args[position] = value
        g, b = tuple(grid), None if block is None else tuple(block)
        if shared_mem:
            launch(g, b, *args, shared_mem=shared_mem)
        else:
            launch(g, b, *args)

    def impl(grid: list, block: list | None, shared_mem: int, *values: Any) -> None:
        tensor = values[first] if first is not None else None
        if tensor is not None and tensor.get_device() != _checks.current_device():
            with torch.cuda.device(tensor.get_device()):
                return body(grid, block, shared_mem, values)
        return body(grid, block, shared_mem, values)

    return impl


def _fake(*args: Any) -> None:
    """Launches nothing: what the operator writes is declared in its schema."""
    return None


# --- registration with Dynamo, once torch imports it ---------------------------------------------------


def _register_with_dynamo() -> None:
    """Have Dynamo trace :func:`traced_launch` for ``launch_first``, and run :func:`_operator` for real."""
    import torch._dynamo

    torch._dynamo.assume_constant_result(_operator)
    torch.compiler.substitute_in_graph(launch_first, skip_signature_check=True)(traced_launch)


class _LoaderThen(importlib.abc.Loader):
    """A module's loader, then ``then()``."""

    def __init__(self, loader: Any, then: Callable[[], None]):
        self.loader, self.then = loader, then

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        try:
            self.then()
        except Exception as exc:  # never torch's import: launches then break the graph, as they did
            warnings.warn(f"launchpad: kernels will not be traced by torch.compile here ({exc})", LaunchpadWarning,
                          stacklevel=2)  # fmt: skip


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then()`` once module ``name`` has been imported."""

    def __init__(self, name: str, then: Callable[[], None]):
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderThen(spec.loader, self.then)
        return spec


def _install() -> None:
    if "torch._dynamo" in sys.modules:
        try:
            _register_with_dynamo()
        except Exception as exc:
            raise LaunchpadError(f"launchpad: could not register its launches with torch.compile: {exc}") from exc
    else:
        sys.meta_path.insert(0, _AfterImport("torch._dynamo", _register_with_dynamo))


_install()
