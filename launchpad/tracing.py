"""Kernels under ``torch.compile``: every launch traced as one operator of its kernel, no graph break.

Dynamo cannot trace into a C function, and a launch is one: met in a compiled function it would
break the graph (or fail under ``fullgraph=True``). So ``Kernel.launch`` is
:func:`launchpad.launch.traced.launch_first` bound to the pair ``(the executor's launch, the kernel's
Traced)``, and this module has Dynamo trace :func:`traced_launch` in its place
(``torch.compiler.substitute_in_graph``). That stand-in calls the kernel's operator,
``torch.ops.launchpad.k<N>_<name>``, which it registers on first use, once per kernel (and per
declared ``Kernel.writes``):

- the schema: the grid's three dimensions, the block's (where the kernel has none of its own), the
  dynamic shared memory, each a ``SymInt`` (lists cost the dispatcher more), then the kernel's
  arguments as :func:`launchpad.torch_op` types them (a pointer, Numba or cuTile array a ``Tensor?``,
  an int a ``SymInt``, so sizes from shapes stay symbolic, a float ``float``, a bool ``bool``); the
  values it was specialized on (Triton constexprs) left out, as its hidden scratch;
- what it writes: the arguments named by ``Kernel.writes`` where set; else those its front end
  derived (``metadata["written"]``: a Triton or Gluon kernel's from its TTIR or PTX, a Numba
  kernel's from its PTX where it was compiled to PTX; :mod:`launchpad.frontends.triton.writes`,
  :mod:`launchpad.core.ptx_writes`); else, for a C++ kernel, every tensor argument but its pointers
  to ``const``, and for any other every tensor argument. Declared written, a tensor the kernel only reads costs the compiler an optimization
  (and ``mode="reduce-overhead"`` its CUDA graph, where it is an input of the compiled function),
  never a result;
- the CUDA implementation launches on torch's current stream (so ``mode="reduce-overhead"``'s CUDA
  graphs capture it); the fake one launches nothing.

``kernel[grid, block]`` under Dynamo is a partial of ``Kernel.launch`` (``Kernel.__getitem__``
asks ``torch.compiler.is_dynamo_compiling()``), so it is traced the same way. Dynamo is imported
lazily by torch (most of a second): the stand-in is registered as soon as ``torch._dynamo`` is
imported, by a hook on that import, so ``import launchpad`` never pays for it.
"""

from __future__ import annotations

import re
import threading
from typing import Any, NamedTuple

import torch

from .core.after_import import after_import
from .errors import ArgumentError, LaunchpadError
from .launch.traced import TRACED, BoundLaunch, Traced, dynamo_compiling, launch_first
from .torch_ops import Source, _alias_set, _describe, _implementation, _Input

__all__ = ["traced_launch"]

_NAMESPACE = "launchpad"
_LOCK = threading.Lock()


class Operator(NamedTuple):
    """What the stand-in needs of a kernel's operator, as constants (Dynamo guards on every
    attribute a traced function reads; :func:`_operator`'s result costs one guard, on the key)."""

    name: str  # in torch.ops.launchpad
    inputs: tuple[tuple[int, str], ...]  # (position, label) of each kernel argument it takes
    consts: tuple[tuple[int, Any], ...]  # (position, value) of the values the kernel was specialized on
    block: tuple[int, int, int] | None  # the kernel's own block, or None: each launch gives one
    where: str  # how errors name it


# Traced key -> its Operator. The library defines every operator for the life of the process
# (torch drops an operator with its Library object).
_OPERATORS: dict[str, Operator] = {}
_LIBRARY: list[torch.library.Library] = []


def traced_launch(pair: tuple, /, *args: Any, **named: Any) -> None:
    """What Dynamo traces in place of ``launch_first(pair, ...)``: ``Kernel.launch`` (``pair[1]`` the
    kernel's Traced) or a bound launch (a :class:`BoundLaunch`), as a call of the kernel's operator."""
    what = pair[1]
    if isinstance(what, BoundLaunch):
        values = list(what.args)
        if len(args) > len(values):
            raise ArgumentError(f"kernel {what.traced.spec.display_name!r}: the bound launch takes at most "
                                f"{len(values)} arguments, got {len(args)}")  # fmt: skip
        values[: len(args)] = args
        return _launch(what.traced, what.grid, what.block, tuple(values), {**what.options, **named})
    if len(args) < 2:
        raise ArgumentError(f"kernel {what.spec.display_name!r}: launch(grid, block, *args) takes the grid and block")
    return _launch(what, args[0], args[1], args[2:], named)


def _launch(traced: Traced, grid: Any, block: Any, args: tuple, named: dict) -> None:
    """The operator's call for one launch (see :func:`traced_launch`)."""
    op = _operator(traced.key)
    shared_mem = named.pop("shared_mem", 0)
    if any(named.pop(k, None) for k in ("stream", "cluster", "cooperative", "pdl")):
        raise ArgumentError(f"{op.where}: stream=, cluster=, cooperative= and pdl= are not traced; launch it on "
                            "torch's current stream without them, or outside the compiled function")  # fmt: skip
    for position, value in op.consts:
        if position < len(args) and args[position] is not value and args[position] != value:
            raise ArgumentError(f"{op.where}: argument {position} must be {value!r}, the value it was compiled for")
    values = []
    for position, label in op.inputs:
        if position < len(args):
            values.append(args[position])
        elif label in named:
            values.append(named[label])
        else:
            raise ArgumentError(f"{op.where}: argument {position} ({label!r}) is missing")
    config = _dims(grid, "grid", op.where)
    if op.block is None:
        if block is None:
            raise ArgumentError(f"{op.where}: a block is needed (kernel[grid, block] or launch(grid, block, ...))")
        config += _dims(block, "block", op.where)
    elif block is not None and tuple(_dims(block, "block", op.where)) != op.block:
        raise ArgumentError(f"{op.where}: block {block} is not the kernel's own {op.block}; pass None")
    getattr(getattr(torch.ops, _NAMESPACE), op.name).default(*config, shared_mem, *values)


def _dims(value: Any, what: str, where: str) -> list:
    dims = list(value) if isinstance(value, (tuple, list)) else [value]
    if not 1 <= len(dims) <= 3:
        raise ArgumentError(f"{where}: {what} {value!r} must have 1 to 3 dimensions")
    return dims + [1] * (3 - len(dims))


def _operator(key: str) -> Operator:
    """The operator of the kernel whose Traced has ``key``, registered on first use. Dynamo runs
    this for real while tracing and takes its result as a constant (``assume_constant_result``)."""
    with _LOCK:
        found = _OPERATORS.get(key)
        if found is None:
            found = _OPERATORS[key] = _register(TRACED[key])
        return found


def _register(traced: Traced) -> Operator:
    spec = traced.spec
    where = f"kernel {spec.display_name!r} under torch.compile"
    inputs, consts = _describe("", spec, None, where=where)
    written = _written(spec, inputs, traced.writes)
    leading = ("grid_x", "grid_y", "grid_z") + (("block_x", "block_y", "block_z") if spec.plan.block is None else ())
    parts, k = [f"SymInt {p}" for p in (*leading, "shared_mem")], 0
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
    block = Source("(block_x, block_y, block_z)") if spec.plan.block is None else None
    implementation = _implementation(traced.launch, spec.display_name, inputs, [], {}, consts,
                                     Source("(grid_x, grid_y, grid_z)"), block, Source("shared_mem"),
                                     (*leading, "shared_mem"))  # fmt: skip
    library.impl(name, implementation, "CUDA")
    torch.library.register_fake(f"{_NAMESPACE}::{name}", _fake, lib=library)
    return Operator(name, tuple((i.position, i.name) for i in inputs), tuple(sorted(consts.items())),
                    spec.plan.block, where)  # fmt: skip


def _written(spec: Any, inputs: list[_Input], declared: tuple[str, ...] | None) -> set[str]:
    """The tensor inputs the operator declares written (see the module documentation)."""
    by_position = {a.path[0]: a for a in spec.args if a.path}
    tensors = [i for i in inputs if i.type == "Tensor"]
    if declared is not None:
        return {i.name for i in tensors if by_position[i.position].name in declared}
    written = spec.metadata.get("written")  # derived by the front end (Triton: TTIR or PTX; Numba: PTX)
    if written is not None:
        paths = {spec.args[k].path[:1] for k in written}
        return {i.name for i in tensors if (i.position,) in paths}
    types = spec.metadata.get("parameter_types") if spec.metadata.get("frontend") == "cpp" else None
    if not types:
        return {i.name for i in tensors}
    return {i.name for i in tensors if not _points_to_const(types[by_position[i.position].param])}


def _points_to_const(ctype: str) -> bool:
    """``const float*`` (the kernel cannot write through it), not ``float* const`` nor ``const float**``."""
    return ctype.endswith("*") and ctype.count("*") == 1 and ctype.startswith("const ")


def _fake(*args: Any) -> None:
    """Launches nothing: what the operator writes is declared in its schema."""
    return None


# --- registration with Dynamo, once torch imports it ---------------------------------------------------


def _compiling() -> bool:
    """What Dynamo traces in place of the compiled module's ``dynamo_compiling`` (False in eager)."""
    return True


def _register_with_dynamo() -> None:
    """Have Dynamo trace :func:`traced_launch` for ``launch_first`` and :func:`_compiling` for
    ``dynamo_compiling`` (unless that is torch's own, which Dynamo knows), and run :func:`_operator`
    for real."""
    import torch._dynamo

    torch._dynamo.assume_constant_result(_operator)
    torch.compiler.substitute_in_graph(launch_first, skip_signature_check=True)(traced_launch)
    if dynamo_compiling is not torch.compiler.is_dynamo_compiling:
        torch.compiler.substitute_in_graph(dynamo_compiling)(_compiling)


def register() -> None:
    """Register the stand-in with Dynamo, once; right away where ``torch._dynamo`` is imported, else as soon
    as it is (``import launchpad`` calls this once Dynamo is imported, :mod:`launchpad.core.after_import`)."""
    global _REGISTERED
    with _LOCK:
        if _REGISTERED:
            return
        if after_import("torch._dynamo", register):
            return
        try:
            _register_with_dynamo()
        except Exception as exc:
            raise LaunchpadError(f"launchpad: could not register its launches with torch.compile: {exc}") from exc
        _REGISTERED = True


_REGISTERED = False
register()
