"""Argument values: the slow-path conversions and the diagnoses both launch executors share.

The executors (the compiled one in ``_claunch`` and the generated Python one in
:mod:`launchpad.launch.pylaunch`) take the common cases straight: a CUDA tensor on the launch device,
a plain int, a float. Everything else comes here: other pointer-like objects, raw addresses,
numpy scalars, values for parameters of unknown type, launch configurations given in unusual
forms. And every refusal is worded here, so a bad argument gets the same message whichever
executor met it: the compiled executor only detects a problem and hands the whole launch to the
Python one, whose checks call these functions to say what was wrong.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np
import torch

from ..core import driver as _driver
from ..core.params import Param
from ..core.spec import Arg
from ..errors import ArgumentError, ArgumentTypeError, NoDeviceError
from .describe import describe, host_array

__all__ = [
    "CONVERTERS",
    "MISSING",
    "Context",
    "bf16_bits",
    "bf16_value",
    "bool_value",
    "describe",
    "host_array",
    "no_device",
    "pointer_of",
    "same_value",
    "wrapped_int",
]

#: The default of every generated launch function's parameter: an argument that was not given.
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<missing>"})()

NO_CUDA = "this torch build has no CUDA support; launching needs a CUDA build of torch and a GPU"


def _no_cuda(*_: Any) -> Any:
    raise NoDeviceError(NO_CUDA)


def no_device(ctx: Context | None, exc: Exception) -> NoReturn:
    """Raise :class:`NoDeviceError` for torch's failure to give its current device (a CUDA build
    of torch on a machine without a GPU or driver: torch raises ``RuntimeError: Found no NVIDIA
    driver``); re-raise ``exc`` where torch does see a GPU (the error is something else)."""
    if isinstance(exc, NoDeviceError) or torch.cuda.is_available():  # said already, or something else
        raise exc
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    kernel = f"kernel {ctx.kernel_name!r}: " if ctx is not None else ""
    raise NoDeviceError(
        f"{kernel}torch finds no usable GPU ({first}); launching needs a GPU and its driver, compiling and "
        "inspecting kernels do not"
    ) from None


# torch's current device and raw stream: the cheapest calls torch offers (what Triton uses)
current_device: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", _no_cuda)
current_raw_stream: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", _no_cuda)

#: Converters for ``expand`` arguments, by name, registered by the modules that define them.
#: ``CONVERTERS[name].specialize(**options)`` gives ``convert(value, device, stream, ctx, arg)``,
#: which returns the values of the argument's parameters in order.
CONVERTERS: dict[str, Any] = {}


class Context:
    """What the checks need to know about one kernel to word their messages."""

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
        if p is not None and p.name and p.name == arg.name:  # a C++ parameter: its name said once
            return f"kernel {self.kernel_name!r}, {what}, param {p.index}" + (f" ({p.type})" if p.type else "")
        return f"kernel {self.kernel_name!r}, {what}" + (f", {p.label}" if p is not None else "")

    def error(self, arg: Arg, message: str, cls: type[Exception] = ArgumentError) -> Exception:
        return cls(f"{self.where(arg)}: {message}")


def pointer_of(ctx: Context, arg: Arg, value: Any, device: int, stream: int, dtype: torch.dtype | None) -> int:
    """Device address of any pointer-like argument, with every check; the slow path.

    Takes CUDA tensors on the launch device, pinned (page-locked) CPU tensors, which every
    device can read (as Triton passes them), objects with ``__cuda_array_interface__`` (whose
    ``stream``, when given, is made to finish its work before the launch, as CAI v3 asks) or
    ``data_ptr()``, raw int addresses (the caller vouches for them) and None (NULL).
    """
    if value is None:
        return 0
    if isinstance(value, (bool, float)):
        raise ctx.error(arg, f"expected a device pointer (tensor), got {describe(value)}", ArgumentTypeError)
    if isinstance(value, int):
        address = value
    elif isinstance(value, torch.Tensor):
        owner = value.get_device()
        if owner != device and not (owner < 0 and value.is_pinned()):
            if owner < 0:
                raise ctx.error(
                    arg, f"expected a CUDA tensor, got {describe(value)}; a pinned CPU tensor (.pin_memory()) "
                    "would be readable by the device"
                )  # fmt: skip
            raise ctx.error(arg, f"tensor is on cuda:{owner} but the launch is on cuda:{device}")
        if dtype is not None and value.dtype != dtype:
            raise ctx.error(arg, f"expected a {dtype} tensor, got {describe(value)}", ArgumentTypeError)
        address = value.data_ptr()
    elif isinstance(value, np.ndarray):
        raise ctx.error(arg, host_array(value, dtype), ArgumentTypeError)
    else:
        cai = getattr(value, "__cuda_array_interface__", None)
        if cai is not None:
            address = int(cai["data"][0])
            wait_for_producer(ctx, arg, cai, stream)
        elif hasattr(value, "data_ptr"):
            address = int(value.data_ptr())
        else:
            raise ctx.error(arg, f"expected a tensor or device pointer, got {describe(value)}", ArgumentTypeError)
        if address:
            memory = _driver.pointer_device(address)
            if memory is None:
                raise ctx.error(arg, f"address {address:#x} of a {type(value).__name__} is not device memory")
            if memory != device:
                raise ctx.error(arg, f"memory is on cuda:{memory} but the launch is on cuda:{device}")
    if not 0 <= address < 1 << 64:
        raise ctx.error(arg, f"address {address} is not a 64-bit pointer")
    if arg.align and address % arg.align:
        raise ctx.error(
            arg, f"pointer {address:#x} is not {arg.align}-byte aligned, but the kernel was compiled assuming it is"
        )
    return address


def wait_for_producer(ctx: Context, arg: Arg, cai: dict, stream: int) -> None:
    """Order the launch after the work of the stream a ``__cuda_array_interface__`` names (CAI v3).

    ``stream`` absent or None: nothing to wait for. 1 and 2 are the legacy and per-thread default
    streams. The protocol disallows 0, but Numba's own device arrays bound to its default stream
    report 0 (``int()`` of that stream object), meaning the legacy default stream: taken as such.
    A stream other than the launch's gets an event recorded that the launch stream waits for (no
    host synchronization).
    """
    producer = cai.get("stream")
    if producer is None:
        return
    if isinstance(producer, bool) or not isinstance(producer, int) or producer < 0:
        raise ctx.error(arg, f"__cuda_array_interface__ stream must be None or a stream handle, got {producer!r}")
    legacy = (0, 1)  # the handles that name the legacy default stream
    if producer != stream and not (producer in legacy and stream in legacy):
        _driver.stream_wait(stream, producer)


def untyped_value(ctx: Context, arg: Arg, value: Any, device: int, stream: int) -> int:
    """Bit pattern of a value for a parameter whose size alone is known."""
    size = ctx.params[arg.param].size
    bits = 8 * size
    itemsize = getattr(getattr(value, "dtype", None), "itemsize", None)
    # a numpy scalar (or 0-d array) is a value; an array of several, a pointer or nothing (below)
    scalar = not isinstance(value, torch.Tensor) and not (isinstance(value, np.ndarray) and value.ndim)
    if itemsize is not None and scalar and hasattr(value, "tobytes"):
        if itemsize != size:  # a numpy scalar says its own width (np.float64 is also a float)
            raise ctx.error(arg, f"{describe(value)} is {itemsize} bytes, the parameter {size}")
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
        try:
            return int.from_bytes(struct.pack(code, value), "little")
        except OverflowError:
            raise ctx.error(arg, f"{value!r} is out of range for a {size}-byte float") from None
    if isinstance(value, (bytes, bytearray, memoryview)):  # a small struct (or enum) by value
        if len(value) != size:
            raise ctx.error(arg, f"expected {size} bytes, got {len(value)}")
        return int.from_bytes(value, "little")
    if size != 8:
        raise ctx.error(arg, f"cannot pack {describe(value)} into {size} bytes", ArgumentTypeError)
    if isinstance(value, (tuple, list)):  # (a struct's fields: its layout is the compiler's, not known here)
        raise ctx.error(arg, f"got {describe(value)} for 8 bytes of a type launchpad cannot see (a struct by value?): "
                             "give its bytes (struct.pack, a ctypes Structure, a numpy record), an int or a pointer",
                        ArgumentTypeError)  # fmt: skip
    return pointer_of(ctx, arg, value, device, stream, None)


def wrapped_int(param: Param, number: int) -> tuple[int, bool]:
    """``number``'s low bits as int parameter ``param`` reads them, and whether ``number`` fits
    those bits as a value of either signedness (``[-2**(bits-1), 2**bits)``)."""
    bits = 8 * param.size
    low = number & ((1 << bits) - 1)
    if not str(param.type).startswith("u") and low >= 1 << (bits - 1):
        low -= 1 << bits
    return low, -(1 << (bits - 1)) <= number < 1 << bits


def int_bits(ctx: Context, arg: Arg, value: Any) -> Any:
    """An int for an int parameter that takes any value whose bits fit it, signed or unsigned (an
    ``Arg`` with ``options["wrap"]``: Numba passes ints through a C conversion, so ``0xFFFFFFFF``
    reaches an ``int32`` as -1): the value as the parameter's type reads those bits. A value whose
    bits do not fit is refused, saying what Numba would have passed; anything but an int is
    returned as it is, for the packing to refuse and word."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    try:
        number = operator.index(value)
    except TypeError:
        return value
    param = ctx.params[arg.param]
    low, fits = wrapped_int(param, number)
    if fits:
        return low
    bits = 8 * param.size
    raise ctx.error(
        arg, f"{number} does not fit in {bits} bits (this parameter takes [{-(1 << (bits - 1))}, {1 << bits}): a "
        f"{param.type} or the same bits as the other signedness); Numba's dispatcher would silently pass its low {bits} "
        f"bits, {low}: pass {low} if that is what you mean",
    )  # fmt: skip


def bool_value(ctx: Context, arg: Arg, value: Any) -> bool:
    """A bool parameter's value that is not a bool: an int (or numpy's bool or int) by its truth, as
    the compiled executor takes it; anything else is refused (a str's truth is not what it says)."""
    if isinstance(value, (int, np.bool_, np.integer)):
        return bool(value)
    raise ctx.error(arg, f"expected a bool (or an int), got {describe(value)}", ArgumentTypeError)


def bytes_value(ctx: Context, arg: Arg, value: Any) -> bytes:
    """The bytes of an opaque by-value argument (bytes, numpy struct scalar, ctypes struct...)."""
    size = ctx.params[arg.param].size
    if hasattr(value, "tobytes"):
        data = value.tobytes()
    else:
        try:
            data = bytes(memoryview(value))
        except TypeError:
            raise ctx.error(arg, f"expected {size} bytes, got {describe(value)}", ArgumentTypeError) from None
    if len(data) != size:
        raise ctx.error(arg, f"expected {size} bytes, got {len(data)}")
    return data


def bf16_bits(value: Any) -> int:
    """The bfloat16 nearest to ``value``, ties to even (as torch and CUDA's ``__float2bfloat16``
    round), from its float32: the value is first rounded to float32, as torch does.

    Triton's own launcher truncates instead (keeps the top 16 bits); launchpad rounds, which is
    never further from the value given. NaN becomes the quiet NaN ``0x7FC0``. A value beyond
    float32's range raises ``ValueError`` (as fp16 and fp32 parameters refuse theirs).
    """
    try:
        (bits,) = struct.unpack("<I", struct.pack("<f", value))
    except OverflowError:
        raise ValueError(f"{value!r} is out of range for bf16") from None
    if bits & 0x7FFFFFFF > 0x7F800000:
        return 0x7FC0
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def bf16_value(ctx: Context, arg: Arg, value: Any) -> int:
    """:func:`bf16_bits` of an argument, a refusal naming the kernel and the argument."""
    try:
        return bf16_bits(value)
    except ValueError as exc:
        raise ctx.error(arg, str(exc)) from None
    except (TypeError, struct.error):
        raise ctx.error(
            arg, f"expected a float for a bf16 parameter, got {describe(value)}", ArgumentTypeError
        ) from None


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
