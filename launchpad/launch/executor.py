"""Which executor launches a kernel, and the plan the compiled one executes.

Two executors run the same :class:`~launchpad.core.spec.KernelSpec`: the generated Python one
(:mod:`launchpad.launch.pylaunch`), always there and the reference for every check and message, and
the compiled one (the C module ``launchpad.launch._claunch``), built by ``pip install`` where a C
compiler is available. :func:`build` gives a kernel the compiled executor when it can, with the
Python one behind it for every call it hands back; ``LAUNCHPAD_PYTHON_LAUNCH=1`` forces the
Python executor everywhere. :func:`plan_ops` compiles a spec into the compiled executor's
operations once per kernel; front ends never see either executor.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..core import driver as _driver
from ..core.loader import E_FUNCTION
from ..core.params import INDEX_RANGE, POINTER_DTYPES, Param
from ..core.spec import KernelSpec
from ..errors import ArgumentError, LaunchpadError, LaunchpadWarning
from . import checks as _checks
from . import config as _config
from . import hooks as _hooks
from . import layouts as _layouts
from . import memory as _memory
from . import pylaunch as _pylaunch
from . import torch_fields as _torch_fields
from .refusals import Fail, place_named

__all__ = ["NOT_BUILT", "Devices", "Executor", "build", "dlpack_word", "launch_path", "plan_ops", "slot_kind"]

# Slot kinds and operation kinds, as claunch.h numbers them.
SK_POINTER, SK_INT, SK_UINT, SK_BOOL, SK_F16, SK_BF16, SK_F32, SK_F64, SK_BYTES, SK_UNTYPED = range(10)
OP_VALUE, OP_CONST, OP_SCRATCH, OP_NUMBA_ARRAY, OP_EXPAND, OP_TILE_ARRAY, OP_WARP_ARRAY = range(7)
_NEVER = 0xFFFFFFFF  # a dtype word no tensor has: the compiled executor always defers the check
_FLOAT_KINDS = {"fp16": SK_F16, "bf16": SK_BF16, "fp32": SK_F32, "fp64": SK_F64}

_claunch: Any
try:
    from . import _claunch

    if not hasattr(_claunch, "Launcher"):  # the folder of its C sources, imported as a namespace package
        raise ImportError("only its C sources are here: build it with `python setup.py build_ext --inplace`")
except ImportError as exc:  # not built: no C compiler at install time, or a source tree without it
    _claunch = None
    _import_error = f"the compiled module is not built ({exc})"
else:
    _import_error = ""


#: The warning of a process whose launches take the Python executor because the compiled module is
#: missing: nothing else tells a source tree that was never built why its launches are slow.
NOT_BUILT = (
    "launchpad's compiled launcher (launchpad.launch._claunch) is not built, so kernels launch through "
    "the Python executor: the same results, with more overhead on every launch. Build it with "
    "`python3 setup.py build_ext --inplace` in a source tree, or reinstall launchpad-kernels where a C "
    "compiler is installed (`python -m launchpad info` shows why it is missing; LAUNCHPAD_PYTHON_LAUNCH=1 "
    "chooses the Python executor without this warning)"
)
_not_built_warned = False
_not_built_lock = threading.Lock()


def _python_forced() -> bool:
    return os.environ.get("LAUNCHPAD_PYTHON_LAUNCH", "") not in ("", "0")


def launch_path() -> tuple[str, str]:
    """``("compiled", "")``, or ``("python", why)`` when kernels launch through the Python executor."""
    if _python_forced():
        return "python", "LAUNCHPAD_PYTHON_LAUNCH is set"
    if _claunch is None:
        return "python", _import_error
    if _exchange_api_types() == ():
        return (
            "python",
            f"torch {torch.__version__} has no DLPack C exchange API (torch.Tensor.__dlpack_c_exchange_api__)",
        )
    return "compiled", ""


def _learn_fields(device: int) -> None:
    """What a compiled launcher calls when it first reads a device's entry: torch's tensor fields for
    that device are learned then (:mod:`launchpad.launch.torch_fields`; once per process)."""
    _torch_fields.ensure(_claunch, device)


@functools.cache
def _exchange_api_types() -> tuple[type, ...]:
    """The tensor types the compiled executor reads through DLPack (empty: torch lacks the API)."""
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        return ()
    return (torch.Tensor, torch.nn.Parameter)


@functools.cache
def dlpack_word(dtype: torch.dtype | None) -> int:
    """``code | bits << 8 | lanes << 16`` of a torch dtype as torch's DLPack API reports it;
    0 for no check; a word no tensor has where torch cannot export the dtype."""
    if dtype is None:
        return 0
    try:
        # (address, device type, device id, dtype word) as torch's DLPack exchange API exports it
        return int(_claunch.dlpack_tensor(torch.empty(0, dtype=dtype), False)[3])
    except Exception:  # a dtype DLPack cannot describe: the Python executor checks it
        return _NEVER


def _torch_dtype(name: str) -> torch.dtype | None:
    return getattr(torch, name, None) if name else None


def slot_kind(param: Param) -> int:
    """How the compiled module packs a parameter (its ``enum SlotKind``), from its type word."""
    kind = param.kind
    if kind == "pointer":
        return SK_POINTER
    if kind == "bytes":
        return SK_BYTES
    if kind == "untyped":
        return SK_UNTYPED
    if kind == "bool":
        return SK_BOOL
    if kind == "float":
        return _FLOAT_KINDS[str(param.type)]
    return SK_UINT if str(param.type).startswith("u") else SK_INT


def _slot(param: Param) -> _layouts.Slot:
    """How the compiled module packs a parameter: its offset, size and slot kind."""
    return _layouts.Slot(offset=param.offset, size=param.size, kind=slot_kind(param))


def plan_ops(spec: KernelSpec, ctx: _checks.Context) -> tuple[_layouts.Op, ...]:
    """The compiled executor's operations for a spec, one :class:`~launchpad.launch.layouts.Op` per
    :class:`~launchpad.core.spec.Arg` (see ``claunch.h``)."""
    ops = []
    for arg in spec.args:
        position, sub = (arg.path[0], tuple(arg.path[1:])) if arg.path else (0, ())
        base = dict(dtype=0, align=0, multiple_of=0, size=0, ndim=0, layout="A", flags=0, obj=None, arg=None)
        if arg.kind == "const":
            flags = (1 if arg.options.get("unknown") else 0) | (2 if arg.options.get("one_or_none") else 0)
            op = dict(base, kind=OP_CONST, slots=(), obj=arg.value, flags=flags)
        elif arg.kind == "scratch":
            op = dict(base, kind=OP_SCRATCH, slots=(_slot(spec.params[arg.param]),), align=arg.options.get("align", 1),
                      size=arg.options["size"], flags=1 if arg.options.get("zero") else 0)  # fmt: skip
        elif arg.kind == "param":
            param = spec.params[arg.param]
            dtype = POINTER_DTYPES.get((param.type or "*")[1:], "") if param.kind == "pointer" else ""
            op = dict(base, kind=OP_VALUE, slots=(_slot(param),), dtype=dlpack_word(_torch_dtype(dtype)),
                      align=arg.align, multiple_of=arg.multiple_of)  # fmt: skip
        elif arg.converter == "numba_array":
            o = arg.options
            op = dict(base, kind=OP_NUMBA_ARRAY, slots=tuple(_slot(spec.params[i]) for i in arg.params),
                      dtype=dlpack_word(_torch_dtype(o["dtype"])) or _NEVER, size=o["itemsize"], ndim=o["ndim"],
                      layout=o["layout"])  # fmt: skip
        elif arg.converter in ("cutile_array", "cute_tensor"):  # a CuTe tensor: its struct's fields, as "slots"
            o = arg.options
            low, high = INDEX_RANGE[o.get("index", "i32")]
            slots = (tuple(_layouts.Slot(*slot) for slot in o["slots"]) if "slots" in o  # (offset, size, kind)
                     else tuple(_slot(spec.params[i]) for i in arg.params))  # fmt: skip
            op = dict(base, kind=OP_TILE_ARRAY, slots=slots,
                      dtype=dlpack_word(_torch_dtype(o["dtype"])) or _NEVER, align=o.get("align") or 0, size=low,
                      multiple_of=high, ndim=o["ndim"], flags=1 if o.get("disjoint") else 0, obj=_tile_dims(o))  # fmt: skip
        elif arg.converter == "warp_bounds":  # the bytes kernel[dim] computed, copied; anything else: Python's
            op = dict(base, kind=OP_VALUE, slots=(_slot(spec.params[arg.params[0]]),))
        elif arg.converter == "warp_array":  # options: CONVERTERS["warp_array"]'s (frontends/warp/args.py)
            o = arg.options
            op = dict(base, kind=OP_WARP_ARRAY, slots=(_slot(spec.params[arg.params[0]]),),
                      dtype=dlpack_word(_torch_dtype(o["dtype"])) or _NEVER, size=o["itemsize"], ndim=o["ndim"],
                      obj=tuple(o.get("element", ())))  # fmt: skip
        else:
            converter = _checks.CONVERTERS[arg.converter].specialize(**arg.options)
            op = dict(base, kind=OP_EXPAND, slots=tuple(_slot(spec.params[i]) for i in arg.params), obj=converter,
                      arg=arg)  # fmt: skip
        ops.append(_layouts.Op(position=position, sub=sub, **op))
    return tuple(ops)


_NONE = -(2**63)  # claunch.h's LP_NONE: no promise


def _tile_dims(options: dict) -> tuple[int, ...]:
    """A cuTile array's promises, 5 words per dimension for the compiled executor: extent divisor,
    extent, stride divisor, stride, lowest stride (``_NONE`` where there is no promise); the option
    names are ``CONVERTERS["cutile_array"]``'s (launchpad/frontends/cutile/args.py)."""
    ndim = options["ndim"]

    def per_dim(key: str, default: Any) -> list:
        value = options.get(key)
        return list(value) if value is not None else [default] * ndim

    rows = zip(per_dim("shape_div", 1), per_dim("shape_const", None), per_dim("stride_div", 1),
               per_dim("stride_const", None), per_dim("stride_min", None))  # fmt: skip
    return tuple(_NONE if v is None else int(v) for row in rows for v in row)


@dataclass(frozen=True)
class Devices:
    """Where launches go: torch's current device and stream, and (for the Python executor) the
    driver's launch call. Tests give both executors a fake device and a recording launch."""

    current_device: Callable[[], int] = field(default_factory=lambda: _checks.current_device)
    current_stream: Callable[[int], int] | None = None  # None: the DLPack exchange API's, or torch's
    cu_launch: Callable[..., tuple] = field(default_factory=lambda: _driver.cuLaunchKernel)


@dataclass
class Executor:
    """A kernel's launch path: ``launch`` is the compiled executor where built, else the Python one."""

    spec: KernelSpec
    loader: Any
    python: _pylaunch.PythonLaunch
    compiled: Any  # the _claunch.Launcher, or None
    hooks: Any = None  # the front end's launch hooks (launchpad.launch.hooks), or None

    @property
    def launch(self) -> Callable[..., None]:
        return self.compiled if self.compiled is not None else self.python.launch

    def forget(self) -> None:
        """Drop what the compiled executor keeps of the last launch (its device entry)."""
        if self.compiled is not None:
            self.compiled.forget()

    def configure(self, grid: Any, block: Any, options: dict) -> Callable[..., None]:
        """The ``kernel[grid, block]`` callable."""
        if self.spec.plan.max_grid:  # refused here, as ct.launch's grid limit always was, not at the call
            ctx = _checks.Context(self.spec.display_name, self.spec.params, self.spec.args)
            Fail.grid_limit(ctx, grid, self.spec.plan)
        if self.compiled is not None:
            return self.compiled.configure(grid, block, options.get("stream"), options.get("shared_mem"))
        return functools.partial(self.python.launch, grid, block, **options)

    def bind(self, kernel: Any, grid: Any, block: Any, args: tuple, options: dict) -> Callable[..., None]:
        """``Kernel.bind``: check and pack now; the returned function repeats that launch."""
        ctx, names = _checks.Context(self.spec.display_name, self.spec.params, self.spec.args), self.spec.arg_names
        (grid, block, *given), options = place_named(ctx, names, (grid, block, *args), options, "bind")
        args = tuple(given)
        device, entry, g, b, shared_mem, stream, packed, keep = self.python.prepare(grid, block, *args, **options)
        if any(v.__class__ is _memory.HostCopy for v in keep):
            raise ArgumentError(
                f"kernel {self.spec.display_name!r}: Kernel.bind takes no host arrays or records (a bound launch "
                "cannot copy them back after each launch); pass device arrays, or launch them unbound"
            )
        fixed = dict(options, shared_mem=shared_mem, stream=_config.RawStream(stream, device))
        launch = self.launch

        def relaunch(*new_args: Any, **named: Any) -> None:
            # the arguments and options given, by position or by name, replace the bound ones for this call
            (_, _, *values), extra = place_named(ctx, names, (grid, block, *new_args), named, "launch")
            merged = [args[i] if v is _pylaunch.MISSING and i < len(args) else v for i, v in enumerate(values)]
            launch(grid, block, *merged, **{**fixed, **extra})

        plan = self.spec.plan
        simple = not (
            any(a.kind == "scratch" and a.options.get("size") for a in self.spec.args)
            or any(options.get(k) for k in ("cluster", "cooperative", "pdl"))
            or _pylaunch.needs_launch_ex(self.spec)
            or not (g[0] and g[1] and g[2])
            or (plan.oversized_shared and shared_mem > _driver.OVERSIZED_LAUNCH_BYTES)
        )
        if not simple:  # a launch that must do work each time (scratch, attributes): checked each time
            bound = relaunch
        elif self.compiled is not None:
            offsets = tuple(p.offset for p in self.spec.params)
            bound = _claunch.Bound(entry, g, b, shared_mem, stream, packed, offsets, relaunch)
        else:
            bound = _python_bound(self.spec, entry, g, b, shared_mem, stream, packed, relaunch)
        try:
            bound.kernel = kernel  # type: ignore[attr-defined]
            bound._keep = keep  # type: ignore[attr-defined]
        except AttributeError:  # the compiled Bound holds what it launches itself
            pass
        return bound


def _python_bound(spec: KernelSpec, entry: tuple, g: tuple, b: tuple, shared_mem: int, stream: int, packed: bytes,
                  relaunch: Callable[..., None]) -> Callable[..., None]:  # fmt: skip
    """``Kernel.bind`` without the compiled module: the packed launch through ``cuda.bindings``."""
    buf = ctypes.create_string_buffer(packed, max(len(packed), 1))
    base = ctypes.addressof(buf)
    pointers = (ctypes.c_void_p * max(len(spec.params), 1))(*[base + p.offset for p in spec.params])
    call = (entry[E_FUNCTION], *g, *b, shared_mem, stream, ctypes.addressof(pointers) if spec.params else 0, 0)
    cu_launch, success = _driver.cuLaunchKernel, _driver.SUCCESS

    def bound(*new_args: Any, **named: Any) -> None:
        if new_args or named:
            return relaunch(*new_args, **named)
        (err,) = cu_launch(*call)
        if err != success:
            relaunch()  # the checked launch retries in the right context or raises the CudaError

    bound._hold = (buf, pointers, entry)  # type: ignore[attr-defined]
    return bound


def _warn_not_built() -> None:
    """Issue :data:`NOT_BUILT` once per process, pointed at the caller's launch."""
    global _not_built_warned
    with _not_built_lock:
        if _not_built_warned:
            return
        _not_built_warned = True
    warnings.warn(NOT_BUILT, LaunchpadWarning, stacklevel=_stacklevel())


def _stacklevel() -> int:
    """The ``stacklevel`` that points a warning issued by the caller at the first frame outside
    launchpad (its generated launch functions, ``<launchpad ...>``, included)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # launchpad/, above launch/
    frame: Any = sys._getframe(2)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith((package, "<launchpad ")):
        frame, level = frame.f_back, level + 1
    return level


def build(spec: KernelSpec, loader: Any, devices: Devices | None = None, *, compiled: bool | None = None) -> Executor:
    """The executor of one kernel: the Python one, and the compiled one in front of it unless
    ``compiled`` is False or :func:`launch_path` says it is unavailable.

    Where the Python one launches only because the compiled module is missing (``compiled`` not
    given, ``LAUNCHPAD_PYTHON_LAUNCH`` not set), its first launch in each thread issues
    :data:`NOT_BUILT` (once per process): at a launch, not at import, since compiling and
    inspecting without launching lose nothing; and only there, so the compiled path pays nothing.
    """
    devices = devices or Devices()
    if compiled is None and _claunch is None and not _not_built_warned and not _python_forced():
        python = _pylaunch.build(spec, loader, devices, first_launch=_warn_not_built)
    else:
        python = _pylaunch.build(spec, loader, devices)
    hooks = _hooks.for_spec(spec, loader)
    if hooks is not None:
        python.launch = hooks.wrap(python.launch, devices)
    path, why = launch_path()
    use = path == "compiled" if compiled is None else compiled
    if use and _claunch is None:
        raise LaunchpadError(f"kernel {spec.display_name!r}: the compiled executor is unavailable: {why}")
    launcher = None
    if use:
        ctx = _checks.Context(spec.display_name, spec.params, spec.args)
        plan = spec.plan
        count = spec.arg_count
        optional = {a.path[0] for a in spec.args if a.path and a.kind == "const"} - {
            a.path[0] for a in spec.args if a.path and a.kind != "const"
        }
        required = [i for i in range(count) if i not in optional]
        stream = devices.current_stream
        if stream is None and not _exchange_api_types():
            stream = _checks.current_raw_stream
        _torch_fields.ensure(_claunch, -1)
        if torch.cuda.is_initialized():  # new_entry skips a first launch inside a capture: learn here then
            _torch_fields.ensure(_claunch, torch.cuda.current_device())
        launcher = _claunch.Launcher(_layouts.LauncherTable(
            ops=plan_ops(spec, ctx),
            offsets=tuple(p.offset for p in spec.params),
            buffer_size=max((p.offset + p.size for p in spec.params), default=0),
            nargs_min=(required[-1] + 1) if required else 0,
            nargs_max=count,
            plan=plan,
            entries=loader.entries, entry_fn=loader.entry, new_entry=_learn_fields, python_launch=python.launch,
            get_device=python.get_device,
            get_stream=stream, scratch=_memory.scratch, same_value=_checks.same_value,
            coresident=loader.coresident_blocks, ctx=ctx,
            hooks=_layouts.HookCheck(*hooks.check) if hooks else None,  # (dict, names, calls): hooks.py
            tensor_types=_exchange_api_types(),
        ))  # fmt: skip
    return Executor(spec, loader, python, launcher, hooks)
