"""Generated launch functions: one specialized Python function per kernel.

PyCUDA's ``prepare`` computes a struct format once per kernel; here the whole launch is
specialized once. For each kernel, :func:`build_launch` writes the source of a function that
does only what that kernel's arguments need (a tensor's device, dtype and pointer; an int's
width; an fp16 or bf16 conversion), packs everything with one precomputed ``struct`` call into a
buffer owned by the calling thread, and calls ``cuLaunchKernel``. Errors are diagnosed off the
hot path: the fast code checks cheaply and calls a ``_fail_*`` helper that works out the
message.

The same template yields three functions: the hot path for positional arguments, a general
one that also takes keyword options, and a *prepare* twin that validates and packs but returns
the launch instead of issuing it (``Kernel.bind`` and zero-sized grids use it).
"""

from __future__ import annotations

import ctypes
import operator
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from . import _driver
from ._layout import POINTER_DTYPES, Param, struct_format
from .errors import ArgumentError, ArgumentTypeError, CudaError, NoDeviceError

_MISSING = object()
_NO_CUDA = "this torch build has no CUDA support; launching needs a CUDA build of torch and a GPU"


def _no_cuda(*_: Any) -> Any:
    raise NoDeviceError(_NO_CUDA)


# torch's current device and raw stream: the cheapest calls torch offers (what Triton uses)
current_device: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", _no_cuda)
current_raw_stream: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", _no_cuda)
_MAX_GRID_X = 2**31 - 1
_MAX_GRID_YZ = 65535
_MAX_BLOCK = (1024, 1024, 64)


@dataclass(frozen=True)
class Arg:
    """How one user-visible argument (or a part of one) reaches the kernel's parameters.

    kind
        ``param``: the value fills parameter ``param``.
        ``const``: a value the kernel was specialized on (a Triton constexpr, an int equal to 1,
        a None); the argument must equal ``value`` and fills nothing.
        ``expand``: ``CONVERTERS[converter](value, device, **options)`` returns the values of
        the consecutive parameters ``params`` (a Numba array, a tensor descriptor).
        ``scratch``: a hidden parameter, a per-launch allocation of ``options["size"]`` bytes
        per launched block (0 gives NULL); it takes no user argument.
    path
        Where the value is: ``(argument position, *indices into nested tuples)``.
    align, multiple_of
        Specialization promises to check: pointer divisible by ``align``, int by ``multiple_of``.
    """

    name: str
    kind: str = "param"
    path: tuple[int, ...] = ()
    param: int = -1
    params: tuple[int, ...] = ()
    value: Any = None
    converter: str = ""
    options: dict = field(default_factory=dict)
    align: int = 0
    multiple_of: int = 0

    def to_json(self) -> dict:
        out = {"name": self.name, "kind": self.kind, "path": list(self.path)}
        for key in ("param", "params", "value", "converter", "options", "align", "multiple_of"):
            v = getattr(self, key)
            if v != Arg.__dataclass_fields__[key].default and v != {} and v != ():
                out[key] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_json(cls, d: dict) -> Arg:
        d = dict(d)
        d["path"] = tuple(d.get("path", ()))
        d["params"] = tuple(d.get("params", ()))
        return cls(**d)


def plain_args(params: list[Param] | tuple[Param, ...]) -> tuple[Arg, ...]:
    """One argument per parameter, in order: the mapping of a C++ kernel."""
    return tuple(Arg(p.name or "", "param", (p.index,), p.index) for p in params)


@dataclass(frozen=True)
class LaunchPlan:
    """What a front end fixes about every launch of a kernel."""

    block: tuple[int, int, int] | None = None  # fixed block (Triton: 32 * num_warps)
    shared_mem: int = 0  # default (or, with a fixed block, required) dynamic shared memory
    grid_multiplier: int = 1  # grid x is multiplied by this (Triton: num_ctas)
    cluster: tuple[int, int, int] | None = None
    cluster_spread: bool = False
    non_portable_cluster: bool = False
    cooperative: bool = False
    pdl: bool = False
    oversized_shared: bool = False  # Triton 3.8+: ask for the oversized shared-memory mode

    def to_json(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_json(cls, d: dict) -> LaunchPlan:
        return cls(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()})


#: Converters for ``expand`` arguments, by name, registered by the modules that define them.
CONVERTERS: dict[str, Callable[..., tuple]] = {}


# --- slow-path helpers (called only to convert unusual values or to diagnose a failure) ---------


class Context:
    """What the generated code and its slow paths need to know about one kernel."""

    def __init__(self, kernel_name: str, params: tuple[Param, ...], args: tuple[Arg, ...]):
        self.kernel_name = kernel_name
        self.params = params
        self.args = args

    def where(self, arg: Arg) -> str:
        p = self.params[arg.param] if arg.kind == "param" else None
        loc = "".join(f"[{i}]" for i in arg.path[1:])
        what = f"argument {arg.path[0]}{loc}" if arg.path else "argument"
        if arg.name:
            what += f" ({arg.name!r})"
        return f"kernel {self.kernel_name!r}, {what}" + (f", {p.label}" if p is not None else "")

    def error(self, arg: Arg, message: str, cls: type[Exception] = ArgumentError) -> Exception:
        return cls(f"{self.where(arg)}: {message}")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor on {value.device}"
    return f"{type(value).__name__} {value!r}"[:120]


def pointer_of(ctx: Context, arg: Arg, value: Any, device: int, dtype: torch.dtype | None) -> int:
    """Device address of any pointer-like argument, with every check; the slow path."""
    if value is None:
        return 0
    if isinstance(value, bool) or isinstance(value, float):
        raise ctx.error(arg, f"expected a device pointer (tensor), got {_describe(value)}", ArgumentTypeError)
    if isinstance(value, int):
        return value  # a raw device address: the caller vouches for it
    if isinstance(value, torch.Tensor):
        owner = value.get_device()
        if owner != device:
            if owner < 0:
                raise ctx.error(arg, f"expected a CUDA tensor, got {_describe(value)}")
            raise ctx.error(arg, f"tensor is on cuda:{owner} but the launch is on cuda:{device}")
        if dtype is not None and value.dtype != dtype:
            raise ctx.error(arg, f"expected a {dtype} tensor, got {_describe(value)}", ArgumentTypeError)
        address = value.data_ptr()
    else:
        cai = getattr(value, "__cuda_array_interface__", None)
        if cai is not None:
            address = int(cai["data"][0])
        elif hasattr(value, "data_ptr"):
            address = int(value.data_ptr())
        else:
            raise ctx.error(arg, f"expected a tensor or device pointer, got {_describe(value)}", ArgumentTypeError)
        if address:
            owner = _driver.pointer_device(address)
            if owner is None:
                raise ctx.error(arg, f"address {address:#x} of a {type(value).__name__} is not device memory")
            if owner != device:
                raise ctx.error(arg, f"memory is on cuda:{owner} but the launch is on cuda:{device}")
    if arg.align and address % arg.align:
        raise ctx.error(
            arg,
            f"pointer {address:#x} is not {arg.align}-byte aligned, but the kernel was compiled assuming it is",
        )
    return address


def untyped_value(ctx: Context, arg: Arg, value: Any, device: int) -> int:
    """Bit pattern of a value for a parameter whose size alone is known."""
    size = ctx.params[arg.param].size
    bits = 8 * size
    itemsize = getattr(getattr(value, "dtype", None), "itemsize", None)
    if itemsize is not None and not isinstance(value, torch.Tensor) and hasattr(value, "tobytes"):
        if itemsize != size:  # a numpy scalar says its own width (np.float64 is also a float)
            raise ctx.error(arg, f"{_describe(value)} is {itemsize} bytes, the parameter {size}")
        return int.from_bytes(value.tobytes(), "little")
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        if not -(1 << (bits - 1)) <= value < (1 << bits):
            raise ctx.error(arg, f"int {value} does not fit in {size} bytes")
        return value & ((1 << bits) - 1)
    if isinstance(value, float):
        if size == 1:
            raise ctx.error(arg, f"cannot pack a float into a 1-byte parameter: {value!r}", ArgumentTypeError)
        code = {2: "<e", 4: "<f", 8: "<d"}[size]
        return int.from_bytes(struct.pack(code, value), "little")
    if size != 8:
        raise ctx.error(arg, f"cannot pack {_describe(value)} into {size} bytes", ArgumentTypeError)
    return pointer_of(ctx, arg, value, device, None)


def bytes_value(ctx: Context, arg: Arg, value: Any) -> bytes:
    """The bytes of an opaque by-value argument (bytes, numpy struct scalar, ctypes struct...)."""
    size = ctx.params[arg.param].size
    if hasattr(value, "tobytes"):
        data = value.tobytes()
    else:
        try:
            data = bytes(memoryview(value))
        except TypeError:
            raise ctx.error(arg, f"expected {size} bytes, got {_describe(value)}", ArgumentTypeError) from None
    if len(data) != size:
        raise ctx.error(arg, f"expected {size} bytes, got {len(data)}")
    return data


def shared_mem_value(ctx: Context, value: Any) -> int:
    """The dynamic shared memory of a launch that is not a plain non-negative int: checked."""
    try:
        nbytes = _index(value)
    except TypeError:
        raise ArgumentTypeError(
            f"kernel {ctx.kernel_name!r}: shared_mem must be an int number of bytes, got {_describe(value)}"
        ) from None
    if nbytes < 0:
        raise ArgumentError(f"kernel {ctx.kernel_name!r}: shared_mem must not be negative, got {nbytes}")
    return nbytes


def bf16_bits(value: Any) -> int:
    """bf16 as Triton packs it: the top 16 bits of the fp32 value (truncation)."""
    return int.from_bytes(struct.pack("<f", value), "little") >> 16


def same_value(a: Any, b: Any) -> bool:
    """Whether an argument equals the value a kernel was specialized on (bools match only bools).

    Specialized values are kept as JSON (artifacts): a tuple is stored as a list, and a value JSON
    cannot hold (a Triton dtype, a jit function) as its ``str()``; both still match.
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    try:
        if a == b:
            return True
    except Exception:
        return False
    if isinstance(b, list) and isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(b, str) and a is not None and not isinstance(a, (str, int, float)):
        return str(a) == b
    return False


def _index(value: Any) -> int:
    """An int from an int-like value (numpy ints too); TypeError for bools, floats, strings."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("a bool is not a size")
    return operator.index(value)


def dims(value: Any, what: str, ctx: Context) -> tuple[int, int, int]:
    """A grid or block given as an int or a 1-3 tuple, as three ints, range-checked.

    Only integers are taken (numpy integers too): a float, a bool or a string is refused rather
    than truncated or read as digits.
    """
    try:
        if hasattr(value, "__index__") or isinstance(value, (bool, np.bool_)):
            t = (_index(value), 1, 1)
        elif isinstance(value, (str, bytes)):
            raise TypeError(value)
        else:
            items = tuple(value)
            if not 1 <= len(items) <= 3:
                raise ArgumentError(f"kernel {ctx.kernel_name!r}: {what} must have 1-3 dimensions, got {value!r}")
            t = tuple(_index(v) for v in items) + (1, 1)
    except TypeError:
        raise ArgumentTypeError(
            f"kernel {ctx.kernel_name!r}: {what} must be an int or a tuple of 1-3 ints, got {_describe(value)}"
        ) from None
    x, y, z = t[:3]
    limits = (_MAX_GRID_X, _MAX_GRID_YZ, _MAX_GRID_YZ) if what == "grid" else _MAX_BLOCK
    low = 0 if what == "grid" else 1
    for axis, v, limit in zip("xyz", (x, y, z), limits):
        if not low <= v <= limit:
            raise ArgumentError(
                f"kernel {ctx.kernel_name!r}: {what} dimension {axis} = {v} is outside the device limit [{low}, {limit}]"
            )
    return x, y, z


class RawStream:
    """A raw stream handle that remembers its device (what ``Kernel.bind`` keeps)."""

    __slots__ = ("device", "handle")

    def __init__(self, handle: int, device: int):
        self.handle = handle
        self.device = device

    def __repr__(self) -> str:
        return f"RawStream({self.handle:#x}, device={self.device})"


def stream_of(stream: Any, ctx: Context | None = None) -> tuple[int, int]:
    """``(raw handle, device)`` of an explicit stream argument (``ctx`` names the kernel in errors)."""
    if isinstance(stream, RawStream):
        return stream.handle, stream.device
    if isinstance(stream, torch.cuda.Stream):
        return stream.cuda_stream, stream.device_index
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream, _current_device(ctx)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        handle = int((proto() if callable(proto) else proto)[1])
        device = getattr(getattr(stream, "device", None), "device_id", None)
        return handle, _current_device(ctx) if device is None else int(device)
    kernel = f"kernel {ctx.kernel_name!r}: " if ctx is not None else ""
    raise ArgumentTypeError(
        f"{kernel}stream must be a torch.cuda.Stream, a cuda.core Stream, an int handle or have __cuda_stream__; "
        f"got {_describe(stream)}"
    )


def _current_device(ctx: Context | None) -> int:
    try:
        return current_device()
    except NoDeviceError as exc:
        if ctx is None:
            raise
        raise NoDeviceError(f"kernel {ctx.kernel_name!r}: {exc}") from None


def _kernel_no_cuda(ctx: Context) -> Callable[[], int]:
    """What a kernel's launch calls for the current device when torch has no CUDA: an error naming it."""

    def no_cuda() -> int:
        raise NoDeviceError(f"kernel {ctx.kernel_name!r}: {_NO_CUDA}")

    return no_cuda


def _kernel_launch_failed(ctx: Context) -> Callable[..., None]:
    """``_driver.launch_failed`` for one kernel: the error it raises names the kernel and device."""

    def launch_failed(err: Any, device: int, launch: Any, args: tuple) -> None:
        try:
            _driver.launch_failed(err, device, launch, args)
        except CudaError as exc:
            raise exc.within(f"kernel {ctx.kernel_name!r} on cuda:{device}") from None

    return launch_failed


def scratch(nbytes: int, align: int, device: int, stream: int, zero: bool = False) -> tuple[Any, int]:
    """Per-launch scratch from torch's caching allocator, ordered on the launch stream.

    ``zero`` fills it with zeros on that stream first (Triton 3.8+'s profile scratch).
    """
    if nbytes == 0:
        return None, 0
    pad = max(align - 256, 0)  # the caching allocator already aligns to 256 bytes or more
    buf = torch.empty(nbytes + pad, dtype=torch.uint8, device=f"cuda:{device}")
    if zero:
        with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=f"cuda:{device}")):
            buf.zero_()
    if stream != current_raw_stream(device):
        buf.record_stream(torch.cuda.ExternalStream(stream, device=f"cuda:{device}"))
    address = buf.data_ptr()
    return buf, address + (-address % align if align else 0)


# --- code generation ----------------------------------------------------------------------------


def _value_source(arg: Arg) -> str:
    return f"a{arg.path[0]}" + "".join(f"[{i}]" for i in arg.path[1:])


def _torch_dtype(param: Param) -> torch.dtype | None:
    name = POINTER_DTYPES.get((param.type or "*")[1:], "")
    return getattr(torch, name, None) if name else None


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {}

    def emit(self, line: str, depth: int = 1) -> None:
        self.lines.append("    " * depth + line)

    def bind(self, name: str, obj: Any) -> str:
        self.names[name] = obj
        return name


def build_launch(
    ctx: Context,
    plan: LaunchPlan,
    entry: Callable[[int], tuple[Any, int, int]],
    raise_shared: Callable[[int, int], int],
    launch_ex: Callable[..., None],
    *,
    entries: dict,
) -> tuple[Callable[..., None], Callable[..., Any]]:
    """Write and compile the launch functions of one kernel; return ``(launch, prepare)``.

    Three functions come from one template: ``launch``, the hot path, for positional arguments
    only; ``_full``, which also takes the keyword options (stream, shared memory, launch
    attributes) and to which ``launch`` hands anything unusual; and ``prepare``, which checks
    and packs like ``_full`` but returns the launch instead of issuing it.

    ``entry(device)`` returns ``(function handle, max threads per block, dynamic shared memory
    limit)`` for a device, loading the kernel there on first use; ``entries`` caches those
    tuples by device (shared with the caller, who clears it on unload);
    ``raise_shared(device, n)`` raises the limit to at least ``n`` or raises
    ``OutOfResources``; ``launch_ex`` issues launches with attributes.
    """
    w = _Writer()
    fmt, size = struct_format(ctx.params)
    tls = threading.local()

    def new_state() -> tuple[Any, int]:
        # A bytearray, not a ctypes array: struct.pack_into gets a bytearray's buffer far more
        # cheaply. The ctypes view pins it (no resize, so its address is stable).
        buf = bytearray(max(size, 1))
        view = (ctypes.c_char * len(buf)).from_buffer(buf)
        base = ctypes.addressof(view)
        pointers = (ctypes.c_void_p * max(len(ctx.params), 1))(*[base + p.offset for p in ctx.params])
        tls.keep = (view, pointers)
        tls.state = (buf, ctypes.addressof(pointers) if ctx.params else 0)
        return tls.state

    w.names.update(
        _M=_MISSING, _ctx=ctx, _Tensor=torch.Tensor,
        _get_device=current_device if current_device is not _no_cuda else _kernel_no_cuda(ctx),
        _raw_stream=current_raw_stream, _stream_of=stream_of, _entries=entries,
        _entry=entry, _raise_shared=raise_shared, _dims=dims, _fail=_fail, _pointer_of=pointer_of,
        _untyped=untyped_value, _bytes=bytes_value, _shared_mem=shared_mem_value, _bf16=bf16_bits, _same=same_value,
        _scratch=scratch, _CONVERTERS=CONVERTERS, _cuLaunchKernel=_driver.cuLaunchKernel,
        _launch_failed=_kernel_launch_failed(ctx), _launch_ex=launch_ex, _SUCCESS=_driver.SUCCESS,
        _tls=tls, _new_state=new_state, _pack=struct.Struct(fmt).pack_into,
    )  # fmt: skip
    sources: dict[str, str] = {}
    for mode in ("launch", "_full", "_prepare"):
        start = len(w.lines)
        _emit_function(w, ctx, plan, mode, size)
        sources[mode] = "\n".join(w.lines[start:]) + "\n"
    # Each function gets globals of its own that hold the functions it calls but not itself: no
    # reference cycle, so a kernel's launch functions, and the loader that keeps its modules
    # loaded, are freed as soon as the last reference goes, without waiting for the cyclic GC.
    functions: dict[str, Callable[..., Any]] = {}
    for mode in ("_prepare", "_full", "launch"):
        namespace = {**w.names, **functions}
        exec(compile(sources[mode], f"<launchpad {mode} {ctx.kernel_name}>", "exec"), namespace)
        functions[mode] = namespace.pop(mode)
    launch, prepare = functions["launch"], functions["_prepare"]
    launch.__source__ = prepare.__source__ = "\n".join(sources.values())  # (``_full``: launch's global)
    return launch, prepare


def _emit_function(w: _Writer, ctx: Context, plan: LaunchPlan, mode: str, size: int) -> None:
    """Emit one of the three functions (see :func:`build_launch`)."""
    params, args = ctx.params, ctx.args
    fast, prepare = mode == "launch", mode == "_prepare"
    nargs = 1 + max((a.path[0] for a in args if a.path), default=-1)
    names = [f"a{i}" for i in range(nargs)]
    call_args = ", ".join(["grid", "block", *names])
    if fast:
        w.lines.append(f"def launch({', '.join(['grid', 'block', *(n + '=_M' for n in names), '*_extra', '**kw'])}):")
        # keywords, a wrong count and zero-sized grids all go the general way
        missing = f" or {names[-1]} is _M" if nargs else ""
        w.emit(f"if kw or _extra{missing}: return _full({call_args}, *_extra, **kw)")
        w.emit("dev = _get_device()")
        w.emit("hs = _raw_stream(dev)")
    else:
        header = ", ".join(["grid", "block", *(n + "=_M" for n in names), "*_extra"])
        w.lines.append(
            f"def {mode}({header}, shared_mem={plan.shared_mem}, stream=None, cluster=None, cooperative=False, pdl=False):"
        )
        # positional slots default to a sentinel, so only the last needs checking
        last = f"{names[-1]} is _M or " if nargs else ""
        w.emit(f"if {last}_extra: _fail.count(_ctx, {nargs}, _extra, ({', '.join(names)}{',' if nargs == 1 else ''}))")
        w.emit("if stream is None:")
        w.emit("dev = _get_device()", 2)
        w.emit("hs = _raw_stream(dev)", 2)
        w.emit("else:")
        w.emit("hs, dev = _stream_of(stream, _ctx)", 2)
    w.emit("try:")
    w.emit("fn, maxthr, smemlim = _entries[dev]", 2)
    w.emit("except KeyError:")
    w.emit("fn, maxthr, smemlim = _entries[dev] = _entry(dev)", 2)

    # grid and block
    if plan.block is None:
        w.emit("if block.__class__ is int and 0 < block <= maxthr:")
        w.emit("bx = block; by = bz = 1", 2)
        w.emit("else:")
        w.emit("bx, by, bz = _dims(block, 'block', _ctx)", 2)
        w.emit("if bx * by * bz > maxthr: _fail.block(_ctx, block, maxthr)", 2)
    else:
        w.emit(f"if block is not None and _dims(block, 'block', _ctx) != {plan.block}: _fail.fixed_block(_ctx, block, {plan.block})")
        w.emit("bx, by, bz = {}, {}, {}".format(*plan.block))
    if fast:
        zero_grid = f"return _full({call_args})"
    elif prepare:
        zero_grid = "pass"
    else:
        options = "shared_mem=shared_mem, stream=stream, cluster=cluster, cooperative=cooperative, pdl=pdl"
        zero_grid = f"return _prepare(0, {', '.join(['block', *names])}, {options}) and None"
    w.emit(f"if grid.__class__ is int and 0 < grid <= {_MAX_GRID_X}:")
    w.emit("gx = grid; gy = gz = 1", 2)
    w.emit("else:")
    w.emit("gx, gy, gz = _dims(grid, 'grid', _ctx)", 2)
    w.emit("if not (gx and gy and gz):", 2)
    w.emit(zero_grid, 3)
    if plan.grid_multiplier != 1:
        w.emit(f"gx *= {plan.grid_multiplier}")
    if not fast:  # the fast path's shared memory is the plan's, which loading already allowed
        w.emit("if shared_mem.__class__ is not int or shared_mem < 0:")
        w.emit("shared_mem = _shared_mem(_ctx, shared_mem)", 2)
        w.emit("if shared_mem > smemlim:")
        w.emit("smemlim = _raise_shared(dev, shared_mem)", 2)

    w.emit("try:")
    w.emit("buf, kp = _tls.state", 2)
    w.emit("except AttributeError:")
    w.emit("buf, kp = _new_state()", 2)

    values: dict[int, str] = {}  # param index -> expression packed for it
    keep: list[str] = []
    for k, arg in enumerate(args):
        _emit_arg(w, k, arg, ctx, values, keep, prepare)
    ordered = [values[p.index] for p in sorted(params, key=lambda p: p.offset)]
    pack_args = ", ".join(ordered)
    w.emit("try:")
    w.emit(f"_pack(buf, 0{', ' if pack_args else ''}{pack_args})", 2)
    w.emit("except Exception as e:")
    w.emit(f"_fail.pack(_ctx, e, ({pack_args}{',' if len(ordered) == 1 else ''}))", 2)

    if prepare:
        kept = f"({', '.join(keep)}{',' if len(keep) == 1 else ''})"
        w.emit(f"return dev, fn, (gx, gy, gz), (bx, by, bz), shared_mem, hs, bytes(buf[:{size}]), {kept}")
        return
    shared = str(plan.shared_mem) if fast else "shared_mem"
    launch_args = f"fn, gx, gy, gz, bx, by, bz, {shared}, hs, kp, 0"
    plain = [
        "err, = _cuLaunchKernel(" + launch_args + ")",
        f"if err is not _SUCCESS: _launch_failed(err, dev, _cuLaunchKernel, ({launch_args}))",
    ]
    fixed_attrs = plan.cluster is not None or plan.cooperative or plan.pdl or (
        plan.oversized_shared and plan.shared_mem > _driver.OVERSIZED_LAUNCH_BYTES
    )
    if fixed_attrs:
        attrs = "None, False, False" if fast else "cluster, cooperative, pdl"
        w.emit(f"_launch_ex(fn, dev, (gx, gy, gz), (bx, by, bz), {shared}, hs, kp, {attrs})")
    elif fast:
        for line in plain:
            w.emit(line)
    else:
        w.emit("if cluster is None and cooperative is False and pdl is False:")
        for line in plain:
            w.emit(line, 2)
        w.emit("else:")
        w.emit("_launch_ex(fn, dev, (gx, gy, gz), (bx, by, bz), shared_mem, hs, kp, cluster, cooperative, pdl)", 2)


def _emit_arg(w: _Writer, k: int, arg: Arg, ctx: Context, values: dict[int, str], keep: list[str], prepare: bool) -> None:
    """Emit the lines that check and convert argument ``k``; record what each param packs."""
    if arg.kind == "scratch":
        size, align = arg.options["size"], arg.options.get("align", 1)
        if size == 0 or prepare:
            values[arg.param] = "0"
        else:
            zero = ", True" if arg.options.get("zero") else ""
            w.emit(f"s{k}, v{k} = _scratch(gx * gy * gz * {size}, {align}, dev, hs{zero})")
            values[arg.param] = f"v{k}"
        return
    src = _value_source(arg)
    keep.append(src if len(arg.path) == 1 else f"a{arg.path[0]}")
    a = w.bind(f"_A{k}", arg)
    if arg.kind == "const":
        c = w.bind(f"_C{k}", arg.value)
        w.emit(f"if {src} is not {c} and not _same({src}, {c}): _fail.const(_ctx, {a}, {src})")
        return
    if arg.kind == "expand":
        converter = CONVERTERS[arg.converter]
        specialize = getattr(converter, "specialize", None)
        if specialize is not None:
            # A converter made once for these options (a Numba array's ndim, dtype, layout):
            # no keyword unpacking per launch, and its values unpacked straight into locals.
            conv = w.bind(f"_X{k}", specialize(**arg.options))
            names = [f"e{k}_{j}" for j in range(len(arg.params))]
            w.emit(f"{', '.join(names)}, = {conv}({src}, dev, _ctx, {a})")
            values.update(zip(arg.params, names))
            return
        conv = w.bind(f"_X{k}", converter)
        opts = w.bind(f"_O{k}", arg.options)
        w.emit(f"e{k} = {conv}({src}, dev, _ctx, {a}, **{opts})")
        for j, p in enumerate(arg.params):
            values[p] = f"e{k}[{j}]"
        return
    param = ctx.params[arg.param]
    v = f"v{k}"
    values[arg.param] = v
    kind = param.kind
    if kind == "pointer":
        dtype = _torch_dtype(param)
        d = w.bind(f"_D{k}", dtype)
        dtype_check = f" or {src}.dtype is not {d}" if dtype is not None else ""
        w.emit(f"if {src}.__class__ is _Tensor:")
        w.emit(f"if {src}.get_device() != dev{dtype_check}: _pointer_of(_ctx, {a}, {src}, dev, {d})", 2)
        w.emit(f"{v} = {src}.data_ptr()", 2)
        if arg.align:
            w.emit(f"if {v} & {arg.align - 1}: _pointer_of(_ctx, {a}, {src}, dev, {d})", 2)
        w.emit("else:")
        w.emit(f"{v} = _pointer_of(_ctx, {a}, {src}, dev, {d})", 2)
    elif kind == "untyped":
        bits = 8 * param.size
        w.emit(f"if {src}.__class__ is _Tensor and {src}.get_device() == dev:")
        w.emit(f"{v} = {src}.data_ptr()", 2)
        w.emit(f"elif {src}.__class__ is int and {-(1 << (bits - 1))} <= {src} < {1 << bits}:")
        w.emit(f"{v} = {src} & {(1 << bits) - 1}", 2)
        w.emit("else:")
        w.emit(f"{v} = _untyped(_ctx, {a}, {src}, dev)", 2)
    elif kind == "bytes":
        w.emit(f"{v} = {src} if {src}.__class__ is bytes and len({src}) == {param.size} else _bytes(_ctx, {a}, {src})")
    elif param.type == "bf16":
        w.emit(f"{v} = _bf16({src})")
    else:  # ints, floats and bools go straight to struct, which checks range and type
        values[arg.param] = src
        if arg.multiple_of:
            w.emit(f"if {src} % {arg.multiple_of}: _fail.multiple(_ctx, {a}, {src})")


class _fail:
    """Diagnoses, off the hot path; each raises an ``ArgumentError`` naming what was wrong."""

    @staticmethod
    def count(ctx: Context, expected: int, extra: tuple, given: tuple) -> None:
        n = sum(1 for v in given if v is not _MISSING) + len(extra)
        names = ", ".join(dict.fromkeys(a.name for a in ctx.args if a.path and a.name))
        raise ArgumentTypeError(
            f"kernel {ctx.kernel_name!r} takes {expected} arguments{f' ({names})' if names else ''}, got {n}"
        )

    @staticmethod
    def block(ctx: Context, block: Any, max_threads: int) -> None:
        x, y, z = dims(block, "block", ctx)
        raise ArgumentError(
            f"kernel {ctx.kernel_name!r}: block {block!r} has {x * y * z} threads, "
            f"the kernel allows at most {max_threads} per block"
        )

    @staticmethod
    def fixed_block(ctx: Context, block: Any, fixed: tuple) -> None:
        raise ArgumentError(f"kernel {ctx.kernel_name!r} was compiled for block {fixed}, got block {block!r}")

    @staticmethod
    def const(ctx: Context, arg: Arg, value: Any) -> None:
        raise ctx.error(arg, f"the kernel was specialized for {arg.value!r}, got {_describe(value)}")

    @staticmethod
    def multiple(ctx: Context, arg: Arg, value: Any) -> None:
        raise ctx.error(
            arg, f"{value!r} is not a multiple of {arg.multiple_of}, but the kernel was compiled assuming it is"
        )

    @staticmethod
    def pack(ctx: Context, error: Exception, values: tuple) -> None:
        """Find which value struct refused and say why."""
        by_param = {a.param: a for a in ctx.args if a.kind == "param"}
        for p, value in zip(sorted(ctx.params, key=lambda p: p.offset), values):
            try:
                struct.pack("<" + p.code, value)
            except Exception as exc:
                arg = by_param.get(p.index, Arg(f"param {p.index}", "param", (), p.index))
                if p.kind in ("int", "untyped") and isinstance(value, int):
                    raise ctx.error(arg, f"{value} is out of range for {p.type or f'{p.size} bytes'}") from None
                raise ctx.error(arg, f"cannot pack {_describe(value)} as {p.type or p.kind}: {exc}", ArgumentTypeError) from None
        raise ArgumentError(f"kernel {ctx.kernel_name!r}: packing the arguments failed: {error}") from error
