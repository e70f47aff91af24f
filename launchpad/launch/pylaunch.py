"""The Python launch executor: launch functions generated for one kernel from its spec.

PyCUDA's ``prepare`` computes a struct format once per kernel; here the whole launch is
specialized once. :func:`build` writes the source of functions that do only what this kernel's
arguments need (a tensor's device, dtype and pointer; an int's width; an fp16 or bf16
conversion), pack everything with one precomputed ``struct`` call into a buffer owned by the
calling thread, and call ``cuLaunchKernel``. Common values take straight-line code; anything else
goes to :mod:`launchpad.launch.checks`, which converts it or words the refusal.

This executor is the reference: the compiled one (``_claunch``) does the same work in C and, on
anything it does not take or any refusal, hands the call here. The three functions one template
yields:

``launch(grid, block, *args)``
    The fast path for positional arguments; anything unusual goes to ``full``.
``full(grid, block, *args, **kw)``
    Binds keyword arguments by the kernel's argument names, takes the launch options
    (``shared_mem``, ``stream``, ``cluster``, ``cooperative``, ``pdl``) and checks everything.
``prepare(...)``
    Checks and packs like ``full`` but returns the launch instead of issuing it
    (``Kernel.bind`` and zero-sized grids use it).
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import keyword
import linecache
import struct
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..core import driver as _driver
from ..core.loader import E_FUNCTION, E_MAX_THREADS, E_SHARED_LIMIT
from ..core.params import POINTER_DTYPES, Param, parameter_block, struct_format
from ..core.spec import Arg, KernelSpec, constexpr_positions
from ..errors import CudaError
from . import checks as _checks
from . import config as _config
from . import memory as _memory
from . import offline as _offline
from .checks import CONVERTERS, Context
from .config import MAX_GRID
from .refusals import LAUNCH_OPTIONS, MISSING, Fail, place_named

__all__ = ["LAUNCH_OPTIONS", "MISSING", "PythonLaunch", "build"]

_serial = itertools.count()


@dataclass
class PythonLaunch:
    """The generated functions of one kernel (see the module documentation)."""

    launch: Callable[..., None]
    full: Callable[..., Any]
    prepare: Callable[..., tuple]
    source: str
    get_device: Callable[[], int]  # the current device as the generated code asks it


def _torch_dtype(param: Param) -> torch.dtype | None:
    name = POINTER_DTYPES.get((param.type or "*")[1:], "")
    return getattr(torch, name, None) if name else None


def argument_names(spec: KernelSpec) -> list[str]:
    """Python identifiers for the generated functions' positional parameters: the kernel's
    argument names where they are usable, ``a3`` otherwise (tracebacks then show real names)."""
    out: list[str] = []
    for i, name in enumerate(spec.arg_names):
        ok = name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")
        out.append(name if ok and name not in out and name not in ("grid", "block") else f"a{i}")
    return out


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {}

    def emit(self, line: str, depth: int = 1) -> None:
        self.lines.append("    " * depth + line)

    def bind(self, name: str, obj: Any) -> str:
        self.names[name] = obj
        return name


def build(spec: KernelSpec, runtime: Any, devices: Any, first_launch: Callable[[], None] | None = None) -> PythonLaunch:
    """Write and compile the launch functions of one kernel.

    ``runtime`` is the kernel's :class:`~launchpad.core.loader.Loader`: ``entries`` (device ->
    entry tuple, shared and kept current by it), ``entry(device)`` (loads on first use),
    ``raise_shared(device, n)`` and ``launch_ex(...)``. ``devices``
    (:class:`~launchpad.launch.executor.Devices`) says where launches go. ``first_launch``, if
    given, is called at each thread's first launch (where its argument buffer is made, so no
    later launch pays for it).
    """
    ctx = Context(spec.display_name, spec.params, spec.args)
    w = _Writer()
    fmt, size = struct_format(spec.params)
    tls = threading.local()
    param_count = len(spec.params)

    def new_state() -> tuple[Any, int]:
        # One per thread: threads never share a mutable argument buffer.
        if first_launch is not None:
            first_launch()
        buf, pointers = parameter_block(spec.params, size)
        tls.keep = pointers
        tls.state = (buf, ctypes.addressof(pointers) if param_count else 0)
        return tls.state

    def launch_failed(err: Any, device: int, call: Any, args: tuple) -> None:
        try:
            _driver.launch_failed(err, device, call, args)
        except CudaError as exc:  # name the kernel and the device
            raise exc.within(f"kernel {ctx.kernel_name!r} on cuda:{device}") from None

    no_cuda = devices.current_device is _checks._no_cuda

    def kernel_no_cuda() -> int:
        raise _checks.NoDeviceError(f"kernel {ctx.kernel_name!r}: {_checks.NO_CUDA}")

    w.names.update(
        _M=MISSING, _ctx=ctx, _plan=spec.plan, _Tensor=torch.Tensor, _C=_checks, _G=_config, _HostCopy=_memory.HostCopy, _memory=_memory,
        _get_device=kernel_no_cuda if no_cuda else devices.current_device,
        _raw_stream=devices.current_stream or _checks.current_raw_stream, _entries=runtime.entries,
        _entry=runtime.entry, _raise_shared=runtime.raise_shared, _launch_ex=runtime.launch_ex, _fail=Fail,
        _cuLaunchKernel=devices.cu_launch, _launch_failed=launch_failed, _SUCCESS=_driver.SUCCESS,
        _tls=tls, _new_state=new_state, _pack=struct.Struct(fmt).pack_into, _scratch=_memory.scratch,
        _offline=functools.partial(_offline.refuse, spec, ctx),
    )  # fmt: skip
    names = argument_names(spec)
    sources = {}
    for mode in ("launch", "_full", "_prepare"):
        start = len(w.lines)
        _emit_function(w, spec, ctx, names, mode, size)
        sources[mode] = "\n".join(w.lines[start:]) + "\n"
    order = ("launch", "_full", "_prepare")
    source = "".join(sources[m] + "\n" for m in order)
    first_line = {m: sum(sources[o].count("\n") + 1 for o in order[: order.index(m)]) for m in order}
    filename = f"<launchpad {spec.display_name} #{next(_serial)}>"
    # Each function gets globals of its own that hold the functions it calls but not itself: no
    # reference cycle, so a kernel's launch functions (and through them its loaded modules) are
    # freed as soon as the last reference goes, without waiting for the cyclic GC. Each is
    # compiled at its own lines of the one source that linecache shows in tracebacks.
    functions: dict[str, Callable[..., Any]] = {}
    for mode in reversed(order):
        namespace = {**w.names, **functions}
        exec(compile("\n" * first_line[mode] + sources[mode], filename, "exec"), namespace)
        functions[mode] = namespace.pop(mode)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    weakref.finalize(functions["launch"], linecache.cache.pop, filename, None)
    full = _binder(spec, ctx, functions["_full"])
    functions["launch"].__globals__["_full"] = full  # launch hands keywords to the binder
    return PythonLaunch(functions["launch"], full, functions["_prepare"], source, w.names["_get_device"])


def _binder(spec: KernelSpec, ctx: Context, full: Callable[..., Any]) -> Callable[..., Any]:
    """``full(grid, block, *args, **kw)``: keyword arguments by the kernel's argument names. The fast
    ``launch`` hands it every call with a keyword, its own defaults (``_M``) in the places not given."""
    names = spec.arg_names

    def launch(*given: Any, **kw: Any) -> Any:
        values, options = place_named(ctx, names, given, kw, "launch")
        grid, block, *args = values
        if grid is MISSING or block is MISSING:
            Fail.no_config(ctx, spec.plan, grid, block, "launch")
        return full(grid, block, *args, **options)

    return launch


def _emit_function(w: _Writer, spec: KernelSpec, ctx: Context, names: list[str], mode: str, size: int) -> None:
    """Emit one of the three functions (see the module documentation)."""
    plan, params, args = spec.plan, spec.params, spec.args
    fast, prepare = mode == "launch", mode == "_prepare"
    left_out = constexpr_positions(args)
    required = [n for i, n in enumerate(names) if i not in left_out]
    # (the fast function's grid and block default to _M: a call without them reaches the binder's message)
    signature = ", ".join(["grid=_M" if fast else "grid", "block=_M" if fast else "block",
                           *(n + "=_M" for n in names), "*_extra"])  # fmt: skip
    arglist = ", ".join(names)
    given = f"({arglist}{',' if len(names) == 1 else ''})"
    # no device (torch without CUDA, or without a GPU): what can be checked without one is, before
    # saying so (launchpad.launch.offline); only on that exception's path, nothing on a launch's
    offline = f"except RuntimeError as _exc: _offline(_exc, grid, block, {given}{'' if fast else ', shared_mem'})"
    # the plan's grid limit (cuTile's) first, as ct.launch checks it; a tuple grid calls the check
    limit = f"if grid.__class__ is not int or grid > {plan.max_grid}: _fail.grid_limit(_ctx, grid, _plan)"
    if fast:
        # (positional-only: a keyword goes to **_kw, and the binder says what a name given twice is)
        w.lines.append(f"def launch({signature.replace(', *_extra', ', /, *_extra')}, **_kw):")
        if plan.max_grid:
            w.emit(limit)
        # keywords, a wrong count and zero-sized grids all go the general way
        missing = "".join(f" or {n} is _M" for n in required[-1:]) or " or block is _M"
        w.emit(f"if _kw or _extra{missing}: return _full(grid, block, {arglist}{', ' if names else ''}*_extra, **_kw)")
        w.emit("try: _dev = _get_device()")
        w.emit(offline)
        w.emit("_hs = _raw_stream(_dev)")
    else:
        w.lines.append(
            f"def {mode}({signature}, shared_mem={plan.shared_mem}, stream=None, cluster=None, cooperative=False, pdl=False):"
        )
        if plan.max_grid:
            w.emit(limit)
        absent = " or ".join(f"{n} is _M" for n in required)
        w.emit(f"if _extra{' or ' + absent if absent else ''}: _fail.count(_ctx, {given}, _extra, block)")
        w.emit("if stream is None:")
        w.emit("try: _dev = _get_device()", 2)
        w.emit(offline, 2)
        w.emit("_hs = _raw_stream(_dev)", 2)
        w.emit("else:")
        w.emit("try: _hs, _dev = _G.stream_of(stream, _ctx, _get_device)", 2)
        w.emit(offline, 2)
    # the entry is held until the launch returns: it keeps the module loaded (Kernel.close)
    w.emit("_e = _entries.get(_dev) or _entry(_dev)")
    w.emit(f"_fn = _e[{E_FUNCTION}]")

    if plan.block is None:
        w.emit(f"if block.__class__ is int and 0 < block <= _e[{E_MAX_THREADS}]:")
        w.emit("_bx = block; _by = _bz = 1", 2)
        w.emit("else:")
        w.emit("_bx, _by, _bz = _G.dims(block, 'block', _ctx)", 2)
        w.emit(f"if _bx * _by * _bz > _e[{E_MAX_THREADS}]: _fail.block(_ctx, block, _e[{E_MAX_THREADS}])", 2)
    else:
        w.emit(
            f"if block is not None and _G.dims(block, 'block', _ctx) != {plan.block}: _fail.fixed_block(_ctx, block, {plan.block})"
        )
        w.emit("_bx, _by, _bz = {}, {}, {}".format(*plan.block))
    if fast:
        zero_grid = f"return _full(grid, block, {arglist})"
    elif prepare:
        zero_grid = "pass"
    else:
        options = "shared_mem=shared_mem, stream=stream, cluster=cluster, cooperative=cooperative, pdl=pdl"
        zero_grid = f"return _prepare(0, block, {arglist}{', ' if names else ''}{options}) and None"
    w.emit(f"if grid.__class__ is int and 0 < grid <= {MAX_GRID[0]}:")
    w.emit("_gx = grid; _gy = _gz = 1", 2)
    w.emit("else:")
    w.emit("_gx, _gy, _gz = _G.dims(grid, 'grid', _ctx)", 2)
    w.emit("if not (_gx and _gy and _gz):", 2)
    w.emit(zero_grid, 3)
    for axis, scale in zip("xyz", plan.grid_scale):
        if scale != 1:
            w.emit(f"_g{axis} *= {scale}")
    if not fast:  # the fast path's shared memory is the plan's, which loading already allowed
        w.emit("if shared_mem.__class__ is not int or shared_mem < 0:")
        w.emit("shared_mem = _G.shared_mem_value(_ctx, shared_mem)", 2)
        w.emit(f"if shared_mem > _e[{E_SHARED_LIMIT}]:")
        w.emit("_raise_shared(_dev, shared_mem)", 2)
        w.emit("_e = _entries.get(_dev) or _entry(_dev)", 2)

    w.emit("try:")
    w.emit("_buf, _kp = _tls.state", 2)
    w.emit("except AttributeError:")
    w.emit("_buf, _kp = _new_state()", 2)

    values: dict[int, str] = {}  # param index -> expression packed for it
    keep: list[str] = []
    host: list[str] = []  # expanded values that may be host copies (checks.HostCopy)
    for k, arg in enumerate(args):
        _emit_arg(w, k, arg, ctx, names, values, keep, host, prepare)
    ordered = [values[p.index] for p in sorted(params, key=lambda p: p.offset)]
    pack_args = ", ".join(ordered)
    w.emit("try:")
    w.emit(f"_pack(_buf, 0{', ' if pack_args else ''}{pack_args})", 2)
    w.emit("except Exception as _err:")
    w.emit(f"_fail.pack(_ctx, _err, ({pack_args}{',' if len(ordered) == 1 else ''}))", 2)

    if prepare:
        keep += host  # Kernel.bind refuses host copies: a bound launch would not copy them back
        kept = f"({', '.join(keep)}{',' if len(keep) == 1 else ''})"
        w.emit(f"return _dev, _e, (_gx, _gy, _gz), (_bx, _by, _bz), shared_mem, _hs, bytes(_buf[:{size}]), {kept}")
        return
    shared = str(plan.shared_mem) if fast else "shared_mem"
    call = f"_fn, _gx, _gy, _gz, _bx, _by, _bz, {shared}, _hs, _kp, 0"
    plain = [
        f"_err, = _cuLaunchKernel({call})",
        f"if _err is not _SUCCESS: _launch_failed(_err, _dev, _cuLaunchKernel, ({call}))",
    ]
    ex = f"_launch_ex(_e, _dev, (_gx, _gy, _gz), (_bx, _by, _bz), {shared}, _hs, _kp, {{}})"
    if needs_launch_ex(spec):
        w.emit(ex.format("None, False, False" if fast else "cluster, cooperative, pdl"))
    elif fast:
        for line in plain:
            w.emit(line)
    else:
        w.emit("if cluster is None and cooperative is False and pdl is False:")
        for line in plain:
            w.emit(line, 2)
        w.emit("else:")
        w.emit(ex.format("cluster, cooperative, pdl"), 2)
    if host:  # host arrays and records: after the launch, what the kernel may have written goes back
        w.emit(f"if {' or '.join(f'{h}.__class__ is _HostCopy' for h in host)}:")
        w.emit(f"_memory.copy_back(_hs, ({', '.join(host)},))", 2)


def needs_launch_ex(spec: KernelSpec) -> bool:
    """Whether every launch needs ``cuLaunchKernelEx`` (launch attributes fixed by the plan)."""
    plan = spec.plan
    return (
        plan.cluster is not None
        or plan.cooperative
        or plan.pdl
        or (plan.oversized_shared and plan.shared_mem > _driver.OVERSIZED_LAUNCH_BYTES)
    )


def _emit_arg(w: _Writer, k: int, arg: Arg, ctx: Context, names: list[str], values: dict[int, str], keep: list[str],
              host: list[str], prepare: bool) -> None:  # fmt: skip
    """Emit the lines that check and convert argument ``k``; record what each param packs."""
    if arg.kind == "scratch":
        size, align = arg.options["size"], arg.options.get("align", 1)
        if size == 0 or prepare:
            values[arg.param] = "0"
        else:
            zero = ", True" if arg.options.get("zero") else ""
            w.emit(f"_s{k}, _v{k} = _scratch(_gx * _gy * _gz * {size}, {align}, _dev, _hs{zero})")
            values[arg.param] = f"_v{k}"
        return
    top = names[arg.path[0]]
    src = top + "".join(f"[{i}]" for i in arg.path[1:])
    if top not in keep:
        keep.append(top)
    a = w.bind(f"_A{k}", arg)
    if arg.kind == "const":
        c = w.bind(f"_K{k}", arg.value)
        check = f"_fail.unknown(_ctx, {a}, {top})" if arg.options.get("unknown") else (f"_fail.const(_ctx, {a}, {src})")
        if arg.options.get("one_or_none"):
            w.emit(f"if {top} is not _M and {top} is not None and not _C.same_value({top}, 1): {check}")
        elif arg.options.get("unknown"):
            w.emit(f"if {top} is not _M: {check}")
        else:
            w.emit(f"if {top} is not _M and {src} is not {c} and not _C.same_value({src}, {c}): {check}")
        return
    if arg.kind == "expand":
        conv = w.bind(f"_X{k}", CONVERTERS[arg.converter].specialize(**arg.options))
        parts = [f"_e{k}_{j}" for j in range(len(arg.params))]
        w.emit(f"{', '.join(parts)}, = {conv}({src}, _dev, _hs, _ctx, {a})")
        values.update(zip(arg.params, parts))
        host += [parts[i] for i in getattr(CONVERTERS[arg.converter], "host_copies", ())]
        return
    param = ctx.params[arg.param]
    v = f"_v{k}"
    values[arg.param] = v
    kind = param.kind
    if kind == "pointer":
        dtype = _torch_dtype(param)
        d = w.bind(f"_D{k}", dtype)
        dtype_check = f" and {src}.dtype is {d}" if dtype is not None else ""
        w.emit(f"if {src}.__class__ is _Tensor and {src}.get_device() == _dev{dtype_check}:")
        w.emit(f"{v} = {src}.data_ptr()", 2)
        if arg.align:
            w.emit(f"if {v} & {arg.align - 1}: _C.pointer_of(_ctx, {a}, {src}, _dev, _hs, {d})", 2)
        w.emit("else:")
        w.emit(f"{v} = _C.pointer_of(_ctx, {a}, {src}, _dev, _hs, {d})", 2)
    elif kind == "untyped":
        bits = 8 * param.size
        if param.size == 8:
            w.emit(f"if {src}.__class__ is _Tensor and {src}.get_device() == _dev:")
            w.emit(f"{v} = {src}.data_ptr()", 2)
            w.emit(f"elif {src}.__class__ is int and {-(1 << (bits - 1))} <= {src} < {1 << bits}:")
        else:
            w.emit(f"if {src}.__class__ is int and {-(1 << (bits - 1))} <= {src} < {1 << bits}:")
        w.emit(f"{v} = {src} & {(1 << bits) - 1}", 2)
        w.emit("else:")
        w.emit(f"{v} = _C.untyped_value(_ctx, {a}, {src}, _dev, _hs)", 2)
    elif kind == "bytes":
        w.emit(
            f"{v} = {src} if {src}.__class__ is bytes and len({src}) == {param.size} else _C.bytes_value(_ctx, {a}, {src})"
        )
    elif param.type == "bf16":
        w.emit(f"try: {v} = _C.bf16_bits({src})")  # the refusal's wording only where it fails
        w.emit(f"except Exception: {v} = _C.bf16_value(_ctx, {a}, {src})")
    elif kind == "int" and arg.options.get("wrap"):  # an int's bits, signed or unsigned, as Numba passes them
        bits = 8 * param.size
        lo, hi = (0, 1 << bits) if str(param.type).startswith("u") else (-(1 << (bits - 1)), 1 << (bits - 1))
        w.emit(f"{v} = {src} if {src}.__class__ is int and {lo} <= {src} < {hi} else _C.int_bits(_ctx, {a}, {src})")
    elif kind == "bool":  # (struct's "?" takes anything by its truth: "false" would be true)
        w.emit(f"{v} = {src} if {src}.__class__ is bool else _C.bool_value(_ctx, {a}, {src})")
    else:  # ints and floats go straight to struct, which checks range and type, but takes a tensor's value
        values[arg.param] = src
        w.emit(f"if {src}.__class__ is _Tensor: _fail.scalar_tensor(_ctx, {a}, {src})")
        if arg.multiple_of:
            w.emit(f"if {src} % {arg.multiple_of}: _fail.multiple(_ctx, {a}, {src})")
