"""Run-time conversion of Numba kernel arguments that expand into several parameters.

Numba passes one array argument of ``n`` dimensions as ``5 + 2n`` parameters of 8 bytes:
``meminfo, parent, nitems, itemsize, data, shape[0..n-1], strides[0..n-1]`` (strides in
bytes; meminfo and parent are NULL outside Numba's runtime). A complex scalar is two floats.
The converters here build those values from torch tensors, Numba device arrays or anything
with ``__cuda_array_interface__``, and refuse what the compiled code cannot handle.

Host NumPy arrays and records are taken as Numba's dispatcher takes them, synchronously: copied
to the device for the launch, and after it (the stream synchronized) copied back, unless the
kernel cannot write them (a read-only array; ``numba.cuda.In``). ``numba.cuda.In``, ``Out`` and
``InOut`` wrappers choose the directions as in Numba. That costs two copies and a synchronization
per launch: device arrays (torch tensors, Numba device arrays) are the fast path. A record (a
numpy structured scalar) is passed by a pointer to its device copy. Arrays of records
(numba-cuda's ``xoroshiro128p`` states) are arrays whose elements are opaque bytes of the
record's size.

This module must not import Numba: a saved Numba kernel (:func:`launchpad.load`) launches
without it. It registers ``CONVERTERS["numba_array"]``, ``["numba_complex"]``,
``["numba_record"]`` and ``["numba_enum"]``.

For each array type (``ndim``, dtype, layout) one converter is made once; its torch path is
straight-line: a class, dtype and device check, ``shape``/``stride()``, the layout promise checked
with integer comparisons, one tuple built. (The compiled executor reads torch tensors itself and
calls these only for other arrays.) Anything else goes to :func:`_convert_slow`, which also words
the errors.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ...core.spec import Arg
from ...errors import ArgumentTypeError
from ...launch.checks import CONVERTERS, Context, pointer_of
from ...launch.checks import describe as _describe
from ...launch.memory import copy_in

__all__ = ["array_converter", "convert_array", "convert_complex", "convert_enum", "convert_record"]

_LAYOUT_WORDS = {"C": "C-contiguous", "F": "Fortran-contiguous (column-major)", "A": "strided"}

# (ndim, dtype, layout, itemsize) -> converter
_SPECIALIZED: dict[tuple[int, str, str, int], Callable[..., tuple]] = {}


def _keeps_layout(shape: tuple[int, ...], strides: tuple[int, ...], unit: int, layout: str) -> bool:
    """Whether ``strides`` (in ``unit``s: 1 for elements, the itemsize for bytes) keep a C or F
    layout promise. Same rule as torch's ``is_contiguous``: a dimension of extent 1 may have any
    stride (Numba's C and F code indexes from the shape alone), and an empty array is contiguous.
    """
    order = range(len(shape) - 1, -1, -1) if layout == "C" else range(len(shape))
    expected = unit
    for d in order:
        if shape[d] != 1 and strides[d] != expected:
            return False
        expected *= shape[d]
    return True


def array_converter(ndim: int, dtype: str, layout: str, itemsize: int, **_: Any) -> Callable[..., tuple]:
    """The converter of one array type, made on first use and cached.

    The returned ``convert(value, device, stream, ctx, arg)`` gives the ``5 + 2 * ndim``
    parameter values of one array argument, or raises :class:`ArgumentError` naming it.
    """
    key = (ndim, dtype, layout, itemsize)
    fn = _SPECIALIZED.get(key)
    if fn is not None:
        return fn
    torch_dtype = getattr(torch, dtype, None)  # None (no torch dtype): every tensor takes the slow path
    tensor = torch.Tensor

    def convert(value: Any, device: int, stream: int, ctx: Context, arg: Arg) -> tuple:
        if value.__class__ is tensor and value.dtype is torch_dtype and value.get_device() == device:
            shape = tuple(value.shape)
            if len(shape) == ndim:
                strides = value.stride()
                n = 1
                for s in shape:
                    n *= s
                if layout == "A" or n == 0 or _keeps_layout(shape, strides, 1, layout):
                    return (0, 0, n, itemsize, value.data_ptr(), *shape, *(s * itemsize for s in strides))
        return _convert_slow(value, device, stream, ctx, arg, ndim=ndim, dtype=dtype, layout=layout, itemsize=itemsize)

    _SPECIALIZED[key] = convert
    return convert


def convert_array(value: Any, device: int, stream: int, ctx: Context, arg: Arg, **options: Any) -> tuple:
    """``CONVERTERS["numba_array"]``: the parameter values of one Numba array argument.

    ``options``: ``ndim``, ``dtype`` (a numpy dtype name), ``layout`` (``"C"``, ``"F"`` or
    ``"A"``), ``itemsize`` and ``type`` (Numba's name of the type, for messages).
    """
    return array_converter(**options)(value, device, stream, ctx, arg)


# Launch executors call the converter made for the options directly (no keyword unpacking).
convert_array.specialize = array_converter  # type: ignore[attr-defined]
# Which of the values may be a host copy (checks.HostCopy), which the launch copies back: the data pointer.
convert_array.host_copies = (4,)  # type: ignore[attr-defined]


def _strides_text(strides: tuple[int, ...], itemsize: int) -> str:
    if all(s % itemsize == 0 for s in strides):
        return f"strides {tuple(s // itemsize for s in strides)} (in elements)"
    return f"strides {tuple(strides)} (in bytes)"


def _convert_slow(
    value: Any, device: int, stream: int, ctx: Context, arg: Arg, *, ndim: int, dtype: str, layout: str, itemsize: int
) -> tuple:
    """Every array argument the generated fast path did not take; raises for bad ones.

    Objects with ``__cuda_array_interface__`` (Numba device arrays, CuPy) are converted here on
    every launch, so the messages are only built when one is raised.
    """
    host = _host_array(value)
    if host is not None:
        return _host_values(*host, device, stream, ctx, arg, ndim=ndim, dtype=dtype, layout=layout, itemsize=itemsize)
    is_tensor = isinstance(value, torch.Tensor)
    if is_tensor:
        address = pointer_of(ctx, arg, value, device, stream, None)  # the device checks every pointer gets
        if dtype.startswith("V"):  # records: a uint8 tensor whose last dimension holds each record's bytes
            if (
                value.dtype is not torch.uint8
                or value.dim() == 0
                or value.shape[-1] != itemsize
                or value.stride(-1) != 1
            ):
                raise _wrong_dtype(ctx, arg, value)
            shape, strides = tuple(value.shape[:-1]), tuple(value.stride()[:-1])
        else:
            if not _same_elements(dtype, _NUMPY_OF.get(value.dtype)):
                raise _wrong_dtype(ctx, arg, value)
            shape = tuple(value.shape)
            strides = tuple(s * itemsize for s in value.stride())
    else:
        cai = getattr(value, "__cuda_array_interface__", None)
        if not isinstance(cai, dict):
            raise ctx.error(
                arg,
                f"expected an array for {_typename(arg)} (a torch tensor, a Numba device array, an object with "
                f"__cuda_array_interface__ or a host NumPy array), got {_describe(value)}",
                ArgumentTypeError,
            )
        if cai.get("mask") is not None:
            raise ctx.error(arg, f"masked arrays are not supported ({type(value).__name__} has a mask)")
        typestr = cai["typestr"]
        if typestr != _TYPESTRS.get(dtype) and not _same_elements(dtype, _numpy_dtype(typestr)):
            raise _wrong_dtype(ctx, arg, value)
        shape = tuple(cai["shape"])
        raw = cai.get("strides")
        # no strides in the interface means C-contiguous
        strides = tuple(raw) if raw is not None else _c_strides(shape, itemsize)
        own = _numba_strides(value)
        if own is not None:
            strides = own
    if len(shape) != ndim:
        raise ctx.error(arg, f"expected a {ndim}-d array ({_typename(arg)}), got {_what(value)} of shape {shape}")
    if not is_tensor:
        address = pointer_of(
            ctx, arg, value, device, stream, None
        )  # device memory, and on the launch device (and its stream)
    nitems = 1
    for s in shape:
        nitems *= s
    if layout != "A" and nitems and not _keeps_layout(shape, strides, itemsize, layout):
        hint = "; .contiguous() makes one" if layout == "C" else ""
        raise ctx.error(
            arg,
            f"the kernel was compiled for a {_LAYOUT_WORDS[layout]} array ({_typename(arg)}), got {_what(value)} of "
            f"shape {shape} with {_strides_text(strides, itemsize)}{hint}",
        )
    return (0, 0, nitems, itemsize, address, *shape, *strides)


def _numba_strides(value: Any) -> tuple[int, ...] | None:
    """A Numba device array's strides as it knows them, or None for other arrays. Its
    ``__cuda_array_interface__`` leaves out the strides of a broadcast array (a stride of 0: what
    Numba's ufuncs make of a scalar), which then reads as C-contiguous; Numba's dispatcher passes
    the array's own strides, and so does launchpad."""
    if not type(value).__module__.startswith(("numba.", "numba_cuda.")):
        return None
    strides = getattr(value, "strides", None)
    return tuple(strides) if isinstance(strides, tuple) else None


#: ``numba.cuda.In``/``Out``/``InOut`` (``numba.cuda.args``): whether the array is copied in, and back.
_DIRECTIONS = {"In": (True, False), "Out": (False, True), "InOut": (True, True)}


def _host_array(value: Any) -> tuple[np.ndarray, bool, bool] | None:
    """``(array, copy in, copy back)`` for a host NumPy array (in Numba's wrappers or not), else None."""
    direction = _DIRECTIONS.get(type(value).__name__) if type(value).__module__.startswith("numba") else None
    if direction is not None and isinstance(getattr(value, "value", None), np.ndarray):
        return value.value, *direction
    if isinstance(value, np.ndarray):
        return value, True, True
    return None


def _host_values(array: np.ndarray, copy: bool, back: bool, device: int, stream: int, ctx: Context, arg: Arg, *,
                 ndim: int, dtype: str, layout: str, itemsize: int) -> tuple:  # fmt: skip
    """A host NumPy array's parameters: its device copy (see the module documentation)."""
    if dtype.startswith("V"):
        if array.dtype.itemsize != itemsize or array.dtype.kind != "V":
            raise _wrong_dtype(ctx, arg, array)
    elif not _same_elements(dtype, array.dtype):
        raise _wrong_dtype(ctx, arg, array)
    if array.ndim != ndim:
        raise ctx.error(arg, f"expected a {ndim}-d array ({_typename(arg)}), got {_what(array)} of shape {array.shape}")
    strides = tuple(array.strides)
    if not (array.flags.c_contiguous or array.flags.f_contiguous):
        raise ctx.error(arg, f"a host NumPy array is copied to the device whole, so it must be contiguous (Numba's "
                        f"dispatcher refuses it too); got shape {array.shape} with {_strides_text(strides, itemsize)}; "
                        "np.ascontiguousarray() makes one, or pass a device array")  # fmt: skip
    if layout != "A" and array.size and not _keeps_layout(array.shape, strides, itemsize, layout):
        raise ctx.error(
            arg, f"the kernel was compiled for a {_LAYOUT_WORDS[layout]} array ({_typename(arg)}), got {_what(array)} of "
            f"shape {array.shape} with {_strides_text(strides, itemsize)}",
        )  # fmt: skip
    back = back and array.flags.writeable and "readonly" not in str(arg.options.get("type", ""))
    address = copy_in(array, array.ctypes.data, array.nbytes, device, stream, copy=copy, back=back)
    return (0, 0, array.size, itemsize, address, *array.shape, *strides)


#: numpy's name of each torch dtype an array argument may have.
_NUMPY_OF = {getattr(torch, name): np.dtype(name) for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
) if hasattr(torch, name)}  # fmt: skip


def _same_elements(dtype: str, got: np.dtype | None) -> bool:
    """Whether an array of ``got`` elements passes for ``dtype`` ones: the same type, or an integer
    of the same width and the other signedness, whose bits the kernel reads as its own type (what
    Numba's dispatcher does for a kernel compiled for explicit types: it converts an ``int32``
    array to a ``uint32[:]`` parameter)."""
    if got is None:
        return False
    expected = np.dtype(dtype)
    return got == expected or (got.kind in "iu" and expected.kind in "iu" and got.itemsize == expected.itemsize)


#: The usual ``typestr`` of each element type (others are compared as numpy dtypes).
_TYPESTRS = {name: np.dtype(name).str for name in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)}  # fmt: skip


def _numpy_dtype(typestr: Any) -> np.dtype | None:
    try:
        return np.dtype(typestr)
    except TypeError:
        return None


def _typename(arg: Arg) -> str:
    o = arg.options
    return o.get("type") or f"array({o.get('dtype')}, {o.get('ndim')}d, {o.get('layout')})"


def _what(value: Any) -> str:
    """An array argument as messages name it: ``a torch.float32 tensor``, ``a DeviceNDArray of float32``."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor"
    if isinstance(value, np.ndarray):
        return f"a host NumPy array of {value.dtype}"
    typestr = value.__cuda_array_interface__["typestr"]
    got = _numpy_dtype(typestr)
    return f"a {type(value).__name__} of {got if got is not None else repr(typestr)}"


def _wrong_dtype(ctx: Context, arg: Arg, value: Any) -> Exception:
    dtype = str(arg.options.get("dtype"))
    if dtype.startswith("V"):
        what = _what(value) + (f" of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else "")
        return ctx.error(
            arg,
            f"expected records of {arg.options['itemsize']} bytes ({_typename(arg)}): a Numba device array of the "
            f"record dtype, or a torch.uint8 tensor whose last dimension is each record's bytes; got {what}",
            ArgumentTypeError,
        )
    return ctx.error(arg, f"expected {dtype} elements ({_typename(arg)}), got {_what(value)}", ArgumentTypeError)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    out, step = [], itemsize
    for s in reversed(shape):
        out.append(step)
        step *= s
    return tuple(reversed(out))


def convert_complex(value: Any, device: int, stream: int, ctx: Context, arg: Arg, **_: Any) -> tuple:
    """``CONVERTERS["numba_complex"]``: a complex scalar as its two parameters, real and imaginary."""
    try:
        return (value.real, value.imag)  # Python and numpy complex, float and int all have both
    except AttributeError:
        raise ctx.error(arg, f"expected a complex number, got {_describe(value)}", ArgumentTypeError) from None


convert_complex.specialize = lambda **options: convert_complex  # type: ignore[attr-defined]
convert_complex.schema = lambda options: "complex"  # type: ignore[attr-defined]  # its torch_op schema type


def convert_record(value: Any, device: int, stream: int, ctx: Context, arg: Arg, **options: Any) -> tuple:
    """``CONVERTERS["numba_record"]``: a record argument, by pointer as Numba passes it.

    A numpy record (``np.void``/``np.record`` of the kernel's record dtype) is copied to the device
    for the launch and back after it, as Numba's dispatcher does (see the module documentation).
    A device record (a Numba ``DeviceRecord``, any ``__cuda_array_interface__`` object of one
    record, or a ``torch.uint8`` tensor of the record's bytes) is passed by its address.
    """
    itemsize = options["itemsize"]
    if isinstance(value, np.void):
        layout: Any = value.dtype.fields or {}
        fields = [[n, layout[n][1]] for n in value.dtype.names or ()]
        if value.dtype.itemsize != itemsize or fields != [f[:2] for f in options.get("fields", fields)]:
            raise ctx.error(arg, f"expected a record of {options['type']}, got one of dtype {value.dtype}",
                            ArgumentTypeError)  # fmt: skip
        host = value.__array_interface__["data"][0]  # the record's bytes (an array's element: in the array)
        return (copy_in(value, host, itemsize, device, stream, copy=True, back=True),)
    if isinstance(value, torch.Tensor):
        if value.dtype is not torch.uint8 or value.numel() != itemsize or not value.is_contiguous():
            raise ctx.error(arg, f"expected a record of {options['type']}; a tensor must be torch.uint8 holding "
                            f"its {itemsize} bytes, got {_describe(value)}", ArgumentTypeError)  # fmt: skip
        return (pointer_of(ctx, arg, value, device, stream, None),)
    cai = getattr(value, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        typestr, count = cai.get("typestr"), int(np.prod(cai.get("shape") or ()))
        got = _numpy_dtype(typestr)
        if got is None or got.itemsize * count != itemsize or count != 1:
            raise ctx.error(arg, f"expected one record of {itemsize} bytes ({options['type']}), got "
                            f"{type(value).__name__} of {count} x {typestr}", ArgumentTypeError)  # fmt: skip
        return (pointer_of(ctx, arg, value, device, stream, None),)
    raise ctx.error(
        arg, f"expected a record of {options['type']} (a numpy record, a Numba device record or a torch.uint8 "
        f"tensor of its {itemsize} bytes), got {_describe(value)}", ArgumentTypeError,
    )  # fmt: skip


def convert_enum(value: Any, device: int, stream: int, ctx: Context, arg: Arg, **options: Any) -> tuple:
    """``CONVERTERS["numba_enum"]``: an ``Enum`` member as the parameters of its value (a scalar, or
    a tuple of them flattened), as Numba's dispatcher passes it. ``options``: ``enum``, the enum
    class's qualified name, which the member's class must have (Numba types each class apart)."""
    if not isinstance(value, enum.Enum) or type(value).__qualname__ != options["enum"]:
        raise ctx.error(arg, f"expected a member of enum {options['enum']}, got {_describe(value)}", ArgumentTypeError)
    flat: list[Any] = []

    def walk(v: Any) -> None:
        if isinstance(v, tuple):
            for item in v:
                walk(item)
        else:
            flat.append(v)

    walk(value.value)
    if len(flat) != len(arg.params):
        raise ctx.error(arg, f"{value!r} has {len(flat)} values, the kernel was compiled for {len(arg.params)} "
                        f"({options.get('type')})", ArgumentTypeError)  # fmt: skip
    return tuple(flat)


convert_record.specialize = lambda **options: functools.partial(convert_record, **options)  # type: ignore[attr-defined]
convert_enum.specialize = lambda **options: functools.partial(convert_enum, **options)  # type: ignore[attr-defined]
convert_record.host_copies = (0,)  # type: ignore[attr-defined]


def _array_offline(value: Any) -> bool:
    """Whether the array converter checks ``value`` without a device (launchpad.launch.offline): a
    tensor, or what it refuses anyway; not a host array (copied to the device) nor an object whose
    memory only the driver can place."""
    return isinstance(value, torch.Tensor) or (
        _host_array(value) is None and not hasattr(value, "__cuda_array_interface__")
    )


def _record_offline(value: Any) -> bool:
    """The same for records: not a numpy record (copied to the device) nor a device record."""
    return not isinstance(value, np.void) and not hasattr(value, "__cuda_array_interface__")


convert_array.offline = _array_offline  # type: ignore[attr-defined]
convert_complex.offline = convert_enum.offline = lambda value: True  # type: ignore[attr-defined]
convert_record.offline = _record_offline  # type: ignore[attr-defined]
CONVERTERS["numba_array"] = convert_array
CONVERTERS["numba_complex"] = convert_complex
CONVERTERS["numba_record"] = convert_record
CONVERTERS["numba_enum"] = convert_enum
