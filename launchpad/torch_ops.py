"""``torch_op``: a launchpad :class:`~launchpad.Kernel` as a ``torch.library`` custom operator.

A kernel launched from Python is opaque to ``torch.compile``: Dynamo cannot trace
``kernel.launch`` (it breaks the graph), and nothing tells the compiler which tensors the kernel
writes. Registered as an operator with a schema (which arguments are tensors, which of them it
mutates), a fake implementation (the output shapes, without launching) and a CUDA
implementation (the launch), it becomes one node of the graph: ``fullgraph=True`` holds, the
functionalization pass sees the mutations, and CUDA graphs capture the launch because it goes to
torch's current stream.

The schema comes from the kernel's own description (:class:`~launchpad.KernelSpec`: its
:class:`~launchpad.Arg` and :class:`~launchpad.Param` values): a pointer or a Numba array is a ``Tensor``, an integer type
word a ``SymInt`` (so dynamic shapes stay symbolic), a float word a ``float``, ``i1`` a
``bool``. Arguments the kernel was specialized on (Triton constexprs) are filled in and hidden
arguments (Triton's scratch) take nothing.

Registered with ``torch.library.Library.define``/``impl``, not ``custom_op``, whose Python layers
(autograd and aliasing checks) cost 15 us a call against 1.7 us for the dispatcher alone (CPU
build). No profiler hook: CUPTI names each kernel, the dispatcher records the operator's range.
Every kernel also gets an operator of its own when torch.compile meets it (:mod:`launchpad.tracing`).
"""

from __future__ import annotations

import keyword
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .core.params import POINTER_DTYPES
from .errors import ArgumentError, ArgumentTypeError
from .kernel import Kernel
from .launch import checks as _checks

__all__ = ["torch_op"]

_QUALNAME = re.compile(r"[A-Za-z_]\w*::[A-Za-z_]\w*")
_SCHEMA_TYPES = {"pointer": "Tensor", "int": "SymInt", "float": "float", "bool": "bool"}
# Words TorchScript's schema lexer refuses as argument names besides Python's keywords.
_RESERVED = frozenset({"None", "True", "False", "def", "graph"})


@dataclass(frozen=True)
class _Input:
    """One argument of the kernel that the operator passes: an operator input or an output."""

    name: str
    position: int  # the kernel argument's position
    type: str  # schema type: Tensor, SymInt, float, bool, complex
    dtype: torch.dtype | None = None  # what a tensor must be, where the kernel says
    ndim: int | None = None  # a Numba array's rank


@dataclass(frozen=True)
class _Registration:  # what one torch_op call registered; kept so that torch does not deregister it
    qualname: str
    kernel: Kernel
    schema: str
    library: torch.library.Library
    impl: Callable[..., Any]  # the CUDA implementation (the launch)
    fake: Callable[..., Any]  # the fake (meta) implementation


# torch deregisters an operator when its Library object is garbage collected: the registry holds
# them for the life of the process (and makes a second registration of a name a clear error).
_REGISTRY: dict[str, _Registration] = {}
_LOCK = threading.Lock()


def torch_op(
    name: str,
    kernel: Kernel,
    *,
    grid: int | tuple[int, ...] | Callable[..., int | tuple[int, ...]],
    block: int | tuple[int, ...] | Callable[..., int | tuple[int, ...]] | None = None,
    shared_mem: int | Callable[..., int] | None = None,
    mutates: Iterable[str] = (),
    outputs: Mapping[str, Callable[..., torch.Tensor]] | None = None,
    names: Sequence[str] | None = None,
) -> torch._ops.OpOverload:
    """Register a kernel launch as the ``torch.library`` operator ``name``.

    The operator runs under ``torch.compile(fullgraph=True)`` as one graph node and inside CUDA
    graphs, and shows in the profiler as ``name`` around the kernel's own launch.

    Parameters
    ----------
    name : str
        ``"namespace::opname"``; the operator becomes ``torch.ops.namespace.opname``. A name can
        be registered once per process.
    kernel : Kernel
        Any launchpad kernel with typed parameters (C++ compiled with ``signature=``, Triton,
        Numba). Its arguments, in order, are the operator's, less those it was specialized on
        (Triton constexprs, filled in here) and those named in ``outputs``.
    grid, block : int, tuple of ints, or callable
        The launch configuration, or a function of the operator's arguments (as it was called)
        that returns it. ``block`` stays None for kernels whose block is fixed (Triton).
    shared_mem : int or callable, optional
        Bytes of dynamic shared memory (or a function of the arguments); default: the
        kernel's own (0, or Triton's).
    mutates : iterable of str
        Names of the tensor arguments the kernel writes. Declare every one: the compiler
        assumes the others are only read.
    outputs : mapping of str to callable, optional
        Tensor arguments the operator allocates and returns instead of taking them: each
        function receives the operator's arguments and returns the new tensor (build it from
        the inputs, e.g. ``torch.empty_like(x)``, so that the same function gives the fake
        tensors during tracing). One output returns a tensor, several a tuple, in this order.
    names : sequence of str, optional
        Names of the kernel's arguments that the operator passes (the outputs included), in
        order; default: the kernel's (``arg0``, ``arg1``... for C++, which records none).

    Returns
    -------
    torch._ops.OpOverload
        ``torch.ops.namespace.opname.default``: call it like the kernel, without grid and block.
        It launches on torch's current stream on its first tensor's device and returns None,
        or the outputs.

    Raises
    ------
    ArgumentError
        The name is taken; (ArgumentTypeError) a kernel argument has no schema type (a parameter
        whose type is unknown, a by-value struct, a tuple, a tensor descriptor).
    ArgumentError
        ``mutates``, ``outputs`` or ``names`` name no tensor argument of the kernel, or the
        configuration is incomplete.

    Notes
    -----
    Autograd is not derived (give a functional operator its gradient with
    ``torch.library.register_autograd``). A kernel launched as it is, ``kernel[grid, block](...)``,
    is traced by torch.compile without one (:mod:`launchpad.tracing`).

    Examples
    --------
    >>> scale = launchpad.compile_cuda(src, "scale", signature="*fp32, *fp32, fp32, i32")
    >>> op = launchpad.torch_op("mylib::scale", scale, names=("x", "y", "a", "n"), mutates=("y",),
    ...                         grid=lambda x, y, a, n: (n + 255) // 256, block=256)
    >>> op(x, y, 2.0, x.numel())  # torch.ops.mylib.scale(x, y, 2.0, n): y = 2 * x
    """
    if not isinstance(name, str) or not _QUALNAME.fullmatch(name):
        raise ArgumentError(f"torch_op: the operator name must be 'namespace::name' (identifiers), got {name!r}")
    if not isinstance(kernel, Kernel):
        raise ArgumentTypeError(f"torch_op({name!r}): expected a launchpad.Kernel, got {type(kernel).__name__}")
    if block is None and kernel.plan.block is None:
        raise ArgumentError(f"torch_op({name!r}): kernel {kernel.display_name!r} has no fixed block; pass block=")
    mutated = (mutates,) if isinstance(mutates, str) else tuple(mutates)
    outputs = dict(outputs or {})
    inputs, consts = _describe(name, kernel, names)
    by_name = {i.name: i for i in inputs}
    for what, chosen in (("mutates", mutated), ("outputs", tuple(outputs))):
        for arg in chosen:
            found = by_name.get(arg)
            if found is None or found.type != "Tensor":
                tensors = ", ".join(i.name for i in inputs if i.type == "Tensor") or "none"
                what_it_is = "no argument" if found is None else f"a {found.type} argument"
                raise ArgumentError(
                    f"torch_op({name!r}): {what} names {arg!r}, {what_it_is} of kernel {kernel.display_name!r}; "
                    f"its tensor arguments: {tensors}"
                )
    both = sorted(set(mutated) & set(outputs))
    if both:
        raise ArgumentError(f"torch_op({name!r}): {both[0]!r} is an output, so it cannot also be in mutates")
    if len(set(mutated)) != len(mutated):
        raise ArgumentError(f"torch_op({name!r}): mutates names an argument twice: {mutated}")
    for fn in outputs.values():
        if not callable(fn):
            raise ArgumentTypeError(f"torch_op({name!r}): each output needs a function of the arguments, got {fn!r}")

    op_inputs = [i for i in inputs if i.name not in outputs]
    op_outputs = [by_name[o] for o in outputs]
    schema = _schema(op_inputs, set(mutated), len(op_outputs))
    impl = _implementation(
        kernel.launch, kernel.display_name, op_inputs, op_outputs, outputs, consts, grid, block, shared_mem
    )
    fake = _fake(name, kernel, op_inputs, op_outputs, outputs)

    namespace, opname = name.split("::")
    with _LOCK:
        previous = _REGISTRY.get(name)
        if previous is not None:
            raise ArgumentError(
                f"torch_op: operator {name!r} is already registered (kernel {previous.kernel.display_name!r}, "
                f"{name}{previous.schema}); operators cannot be redefined in a process, choose another name"
            )
        library = torch.library.Library(namespace, "FRAGMENT")
        try:
            library.define(opname + schema)
        except RuntimeError as exc:
            library._destroy()
            if "multiple times" in str(exc):
                raise ArgumentError(
                    f"torch_op: operator {name!r} already exists in torch (defined outside launchpad); "
                    "choose another name"
                ) from None
            raise ArgumentError(f"torch_op: torch refused the schema {name}{schema}: {exc}") from None
        try:
            library.impl(opname, impl, "CUDA")
            torch.library.register_fake(name, fake, lib=library)
        except Exception:
            library._destroy()
            raise
        _REGISTRY[name] = _Registration(name, kernel, schema, library, impl, fake)
    return getattr(getattr(torch.ops, namespace), opname).default


# --- the schema -----------------------------------------------------------------------------------


def _describe(op: str, kernel: Kernel | Any, names: Sequence[str] | None, *,
              where: str = "") -> tuple[list[_Input], dict[int, Any]]:  # fmt: skip
    """The kernel arguments the operator passes, and the constants it fills in by position (``kernel``:
    a Kernel or its spec; ``where``: how messages name the operator)."""
    where = where or f"torch_op({op!r}): kernel {kernel.display_name!r}"
    inputs: list[_Input] = []
    consts: dict[int, Any] = {}
    for arg in kernel.args:
        if arg.kind == "scratch":
            continue  # hidden: the launch allocates it
        if len(arg.path) != 1:
            raise ArgumentTypeError(
                f"{where}, argument {arg.path[0]} ({arg.name!r}) is a tuple, which an operator schema cannot take; "
                "write a kernel with the tuple's elements as arguments"
            )
        position = arg.path[0]
        if arg.kind == "const":
            consts[position] = arg.value
            continue
        label = arg.name if _valid_name(arg.name) else f"arg{position}"
        inputs.append(_input(where, kernel, arg, position, label))
    covered = {i.position for i in inputs} | set(consts)
    missing = [p for p in range(1 + max(covered, default=-1)) if p not in covered]
    if missing:  # e.g. an empty tuple: the launch takes a value the operator could not pass
        raise ArgumentError(f"{where}, argument {missing[0]} maps onto no parameter, which a schema cannot express")
    if names is not None:
        if isinstance(names, str) or len(names) != len(inputs):
            raise ArgumentError(
                f"{where}: names= must give {len(inputs)} names (one per argument the operator passes: "
                f"{', '.join(i.name for i in inputs)}), got {names!r}"
            )
        for n in names:
            if not _valid_name(n):
                raise ArgumentError(f"{where}: {n!r} is not a valid argument name for an operator schema")
        inputs = [_Input(n, i.position, i.type, i.dtype, i.ndim) for n, i in zip(names, inputs)]
    seen: set[str] = set()
    for i in inputs:
        if i.name in seen:
            raise ArgumentError(f"{where}: two arguments are named {i.name!r}; pass distinct names=")
        seen.add(i.name)
    return inputs, consts


def _valid_name(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name) and name not in _RESERVED


def _input(where: str, kernel: Kernel | Any, arg: Any, position: int, label: str) -> _Input:
    """The schema type (and tensor checks) of one kernel argument."""
    what = f"{where}, argument {position} ({label!r})"
    if arg.kind == "expand":
        if arg.converter in ("cutile_array", "cute_tensor"):  # a cuTile array, a CuTe DSL tensor
            return _Input(label, position, "Tensor")
        if arg.converter == "numba_array":
            dtype = getattr(torch, str(arg.options.get("dtype")), None)
            return _Input(label, position, "Tensor", dtype if isinstance(dtype, torch.dtype) else None,
                          arg.options.get("ndim"))  # fmt: skip
        if (schema := getattr(_checks.CONVERTERS.get(arg.converter), "schema", None)) is not None:  # its own word
            return _Input(label, position, schema(arg.options))
        raise ArgumentTypeError(f"{what} expands into {len(arg.params)} parameters ({arg.converter}), "
                             "which an operator schema cannot take")  # fmt: skip
    param = kernel.params[arg.param]
    kind = param.kind
    if kind == "untyped":
        raise ArgumentTypeError(
            f"{what}: the type of {param.label} is unknown (the binary gives only its size, {param.size} bytes), "
            "so no schema can be inferred; compile or load the kernel with signature= "
            '(type words such as "*fp32, *fp32, fp32, i32")'
        )
    if kind == "bytes":
        raise ArgumentTypeError(
            f"{what}: {param.label} is a by-value struct of {param.size} bytes, which an operator schema cannot take"
        )
    dtype_name = POINTER_DTYPES.get((param.type or "*")[1:], "") if kind == "pointer" else ""
    return _Input(label, position, _SCHEMA_TYPES[kind], getattr(torch, dtype_name, None) if dtype_name else None)


def _alias_set(k: int) -> str:  # distinct alias-set names: a, b, ..., z, a1, b1, ...
    return chr(ord("a") + k % 26) + (str(k // 26) if k >= 26 else "")


def _schema(inputs: list[_Input], mutated: set[str], n_outputs: int) -> str:
    """``(Tensor x, Tensor(a!) y, float a, SymInt n) -> ()``: each mutated tensor its own alias set."""
    parts, k = [], 0
    for i in inputs:
        if i.name in mutated:
            parts.append(f"Tensor({_alias_set(k)}!) {i.name}")
            k += 1
        else:
            parts.append(f"{i.type} {i.name}")
    returns = "()" if n_outputs == 0 else "Tensor" if n_outputs == 1 else f"({', '.join(['Tensor'] * n_outputs)})"
    return f"({', '.join(parts)}) -> {returns}"


# --- the implementations --------------------------------------------------------------------------


def _switch_device(device: int) -> Any:
    """``torch.cuda.device(device)``: what an operator whose inputs are on another device runs in."""
    return torch.cuda.device(device)


class Source(str):
    """Python source for one part of a launch's configuration, evaluated in the generated
    implementation over its parameters (the traced operators' grid, block and shared memory are
    parameters of their own)."""


def _implementation(
    launch: Callable[..., Any],
    display_name: str,
    inputs: list[_Input],
    outputs: list[_Input],
    output_fns: dict[str, Callable[..., torch.Tensor]],
    consts: dict[int, Any],
    grid: Any,
    block: Any,
    shared_mem: Any,
    leading: tuple[str, ...] = (),
) -> Callable[..., Any]:
    """The CUDA implementation: a function generated for this operator (its arguments by name, the
    constants and outputs in place, the configuration inlined where fixed), which launches. Each of
    ``grid``, ``block`` and ``shared_mem`` is a value, a function of the kernel's inputs, or
    :class:`Source` over the operator's ``leading`` parameters (which come before the kernel's).
    Like every torch op it runs on its first tensor's device: when that is not the current one it
    switches for the call (a comparison per call; the switch only then).
    """
    params = [f"a{k}" for k in range(len(inputs))]
    call = ", ".join(params)
    signature = ", ".join([*leading, *params])
    env: dict[str, Any] = {"launch": launch, "checks": _checks, "ops": sys.modules[__name__]}
    by_position = {i.position: f"a{k}" for k, i in enumerate(inputs)}
    lines = []
    for k, o in enumerate(outputs):
        env[f"make{k}"] = output_fns[o.name]
        lines.append(f"o{k} = make{k}({call})")
        by_position[o.position] = f"o{k}"
    for position, value in consts.items():
        env[f"c{position}"] = value
        by_position[position] = f"c{position}"
    count = 1 + max(by_position, default=-1)  # every position is an input, an output or a constant
    args = ", ".join(by_position[p] for p in range(count))

    def expression(name: str, value: Any) -> str:
        if isinstance(value, Source):
            return str(value)
        env[name] = value
        return f"{name}({call})" if callable(value) else name

    config = f"{expression('grid', grid)}, {expression('block', block)}{', ' + args if args else ''}"
    if isinstance(shared_mem, Source):  # a keyword takes launch's general path: only where not 0
        lines.append(f"if {shared_mem}:\n        launch({config}, shared_mem={shared_mem})\n"
                     f"    else:\n        launch({config})")  # fmt: skip
    elif shared_mem is not None:
        lines.append(f"launch({config}, shared_mem={expression('shared_mem', shared_mem)})")
    else:
        lines.append(f"launch({config})")
    results = [f"o{k}" for k in range(len(outputs))]
    lines.append("return " + (results[0] if len(results) == 1 else f"({', '.join(results)})" if results else "None"))
    body = "\n    ".join(lines)
    first = next((f"a{k}" for k, i in enumerate(inputs) if i.type == "Tensor"), None)
    guard = ""
    if first is not None:
        guard = (f"device = {first}.get_device()\n    if device != checks.current_device():\n"
                 f"        with ops._switch_device(device):\n            return body({signature})\n    ")  # fmt: skip
    source = f"def body({signature}):\n    {body}\ndef impl({signature}):\n    {guard}return body({signature})\n"
    exec(compile(source, f"<launchpad operator {display_name}>", "exec"), env)
    return env["impl"]


def _fake(
    op: str,
    kernel: Kernel,
    inputs: list[_Input],
    outputs: list[_Input],
    output_fns: dict[str, Callable[..., torch.Tensor]],
) -> Callable[..., Any]:
    """The fake implementation: checks what the launch would check cheaply, launches nothing,
    and returns the outputs' functions' tensors (fake tensors while tracing)."""
    fns = [output_fns[o.name] for o in outputs]
    checked = [
        (k, i) for k, i in enumerate(inputs) if i.type == "Tensor" and (i.dtype is not None or i.ndim is not None)
    ]

    def check(i: _Input, t: Any) -> None:
        where = f"torch op {op!r} (kernel {kernel.display_name!r}), argument {i.name!r}"
        if not isinstance(t, torch.Tensor):
            raise ArgumentTypeError(f"{where}: expected a tensor, got {type(t).__name__}")
        if i.dtype is not None and t.dtype != i.dtype:
            raise ArgumentTypeError(f"{where}: expected a {i.dtype} tensor, got a {t.dtype} tensor")
        if i.ndim is not None and t.dim() != i.ndim:
            raise ArgumentError(f"{where}: expected a {i.ndim}-dimensional tensor, got {t.dim()} dimensions")

    def fake(*args: Any) -> Any:
        for k, i in checked:
            check(i, args[k])
        if not fns:
            return None
        results = tuple(fn(*args) for fn in fns)
        for i, t in zip(outputs, results):
            check(i, t)
        return results[0] if len(results) == 1 else results

    return fake
