"""What a launch can still check where there is no device to launch on.

On a machine without a GPU (or with a CPU build of torch) the Python executor learns that there
is no device when it asks for the current one, the first thing a launch does; the compiled
executor hands such a launch to it. Before saying so, it calls :func:`refuse`, which checks
everything that needs no device: the grid and block against CUDA's limits, the shared memory,
and every argument against its parameter (a tensor's dtype, an int's range, a float's type, a
Triton constexpr, a Numba array's dtype, rank and layout), with the messages a GPU would give.
So a user on a laptop learns their mistakes; a launch that reaches a GPU never runs any of this.

What only a device can tell is left to it: whether a tensor is on the launch device (here every
tensor is on the CPU), the kernel's own limit on threads per block, objects whose memory only the
driver can place (``__cuda_array_interface__``, ``data_ptr()``), host arrays a launch would copy.
"""

from __future__ import annotations

import struct
from typing import Any, NoReturn

import torch

from ..core.params import POINTER_DTYPES, Param
from ..core.spec import Arg, KernelSpec
from ..errors import ArgumentError, ArgumentTypeError, NoDeviceError
from . import checks as _checks
from . import config as _config
from .checks import CONVERTERS, Context
from .refusals import MISSING, Fail

__all__ = ["refuse"]

#: Threads per block no CUDA device exceeds (a kernel's own limit may be lower: known once loaded).
MAX_THREADS = 1024


def refuse(spec: KernelSpec, ctx: Context, exc: Exception, grid: Any, block: Any, values: tuple,
           shared_mem: Any = None) -> NoReturn:  # fmt: skip
    """Raise the launch's error where asking for the current device raised ``exc``: the
    :class:`~launchpad.ArgumentError` of the first thing wrong with the launch, else the
    :class:`~launchpad.NoDeviceError` (saying what was checked); ``exc`` itself where torch does
    see a GPU (the failure is something else)."""
    try:
        _checks.no_device(ctx, exc)
    except NoDeviceError as no_device:
        error = no_device
    try:
        notes = check(spec, ctx, grid, block, values, shared_mem)
    except ArgumentError as wrong:
        raise wrong from None  # the launch's own error, not "during handling of" the missing device
    detail = "; ".join(["its grid, block and arguments were checked and fit the kernel", *notes])
    raise NoDeviceError(f"{error} ({detail})") from None


def check(spec: KernelSpec, ctx: Context, grid: Any, block: Any, values: tuple, shared_mem: Any = None) -> list[str]:
    """Check a launch as far as no device is needed, in the order a launch on a GPU does; raise
    what it would raise. Returns notes on what a GPU would take but may not be meant (a None
    pointer, a grid that launches nothing)."""
    notes: list[str] = []
    plan = spec.plan
    if plan.max_grid:  # a launch's first check (cuTile's grid limit), before anything a device would say
        Fail.grid_limit(ctx, grid, plan)
    if plan.block is None:
        if not (block.__class__ is int and 0 < block <= MAX_THREADS):
            x, y, z = _config.dims(block, "block", ctx)
            if x * y * z > MAX_THREADS:
                raise ArgumentError(
                    f"kernel {ctx.kernel_name!r}: block {block!r} has {x * y * z} threads, more than the "
                    f"{MAX_THREADS} a block has on any CUDA device"
                )
    elif block is not None and _config.dims(block, "block", ctx) != plan.block:
        Fail.fixed_block(ctx, block, plan.block)
    x, y, z = _config.dims(grid, "grid", ctx)
    if not (x and y and z):
        notes.append(f"grid {grid!r} launches nothing")
    if shared_mem is not None and (shared_mem.__class__ is not int or shared_mem < 0):
        _config.shared_mem_value(ctx, shared_mem)
    for arg in spec.args:
        if arg.kind == "scratch" or not arg.path:
            continue
        value = _value(ctx, arg, values)
        if arg.kind == "const":
            _const(ctx, arg, value)
        elif value is MISSING:
            continue
        elif arg.kind == "expand":
            _expand(ctx, arg, value)
        else:
            note = _param(ctx, arg, ctx.params[arg.param], value)
            if note:
                notes.append(note)
    return notes


def _value(ctx: Context, arg: Arg, values: tuple) -> Any:
    """The value at ``arg.path`` (an index into nested tuples), worded where it is not there."""
    value = values[arg.path[0]]
    for i in arg.path[1:]:
        if value is MISSING:
            return value
        try:
            value = value[i]
        except (TypeError, IndexError, KeyError):
            raise ctx.error(
                arg, f"expected a tuple with an element {i}, got {_checks.describe(value)}", ArgumentTypeError
            ) from None
    return value


def _const(ctx: Context, arg: Arg, value: Any) -> None:
    """A value the kernel was specialized on: as the generated launch checks it."""
    if value is MISSING:
        return
    if arg.options.get("one_or_none"):
        wrong = value is not None and not _checks.same_value(value, 1)
    else:
        wrong = arg.options.get("unknown") or (value is not arg.value and not _checks.same_value(value, arg.value))
    if wrong:
        (Fail.unknown if arg.options.get("unknown") else Fail.const)(ctx, arg, value)


def _expand(ctx: Context, arg: Arg, value: Any) -> None:
    """An argument a converter expands: checked by the converter where it says it needs no device
    for this value (its ``offline(value)``), with a tensor's own device as the launch's."""
    converter = CONVERTERS[arg.converter]
    offline = getattr(converter, "offline", None)
    if offline is not None and offline(value):
        device = value.get_device() if isinstance(value, torch.Tensor) else -1
        converter.specialize(**arg.options)(value, device, 0, ctx, arg)


def _driver_places(value: Any) -> bool:
    """Whether only the driver can tell where ``value``'s memory is (not a tensor, but an object
    with ``__cuda_array_interface__`` or ``data_ptr()``)."""
    return not isinstance(value, torch.Tensor) and (
        hasattr(value, "__cuda_array_interface__") or hasattr(value, "data_ptr")
    )


def _param(ctx: Context, arg: Arg, param: Param, value: Any) -> str:
    """One argument for one parameter; returns a note, or ""."""
    kind = param.kind
    if kind == "pointer":
        if value is None:
            return f"argument {arg.path[0]} ({arg.name!r}) is None, a NULL pointer"
        if not _driver_places(value):
            dtype_name = POINTER_DTYPES.get((param.type or "*")[1:], "")
            dtype = getattr(torch, dtype_name, None) if dtype_name else None
            device = value.get_device() if isinstance(value, torch.Tensor) else -1
            _checks.pointer_of(ctx, arg, value, device, 0, dtype)  # on the tensor's own device: no driver asked
        return ""
    if kind == "untyped":
        if not _driver_places(value) and not (isinstance(value, torch.Tensor) and param.size == 8):
            _checks.untyped_value(ctx, arg, value, -1, 0)
        return ""
    if kind == "bytes":
        if not (value.__class__ is bytes and len(value) == param.size):
            _checks.bytes_value(ctx, arg, value)
        return ""
    if param.type == "bf16":
        _checks.bf16_value(ctx, arg, value)  # as a launch words it
        return ""
    if kind == "int" and arg.options.get("wrap"):
        value = _checks.int_bits(ctx, arg, value)
    try:
        struct.pack("<" + param.code, value)
    except Exception as exc:
        Fail.value(ctx, arg, param, value, exc)
    if arg.multiple_of and value % arg.multiple_of:
        Fail.multiple(ctx, arg, value)
    return ""
