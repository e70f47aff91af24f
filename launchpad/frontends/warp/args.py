"""Warp's calling convention at run time: launch bounds, arrays and vector values packed from torch.

A Warp kernel's entry is ``<name>_cuda_kernel_forward(wp::launch_bounds_t<N> dim, args...)``:

* ``launch_bounds_t<N>`` (``N`` the kernel's own dimension count, from its ``wp.tid()``) is
  ``{u32 shape[N]; u64 size; u64 coord_mult}``, 24 bytes for ``N`` of 1 or 2, 32 for 3 or 4. A
  launch of ``dim`` pads it with ones to ``N`` dimensions, and folds dimensions beyond ``N`` into
  ``coord_mult`` (the threads sharing each coordinate) and ``size``, as ``wp.launch`` does
  (:func:`launch_bounds`). The grid is ``min(ceil(size / block), max_blocks)`` blocks of the
  module's ``block_dim`` (:func:`grid_of`), each thread looping grid-stride over ``size``.
* an array is ``wp::array_t``, 56 bytes: ``{u64 data; u64 grad; i32 shape[4]; i32 strides[4] (in
  bytes); u16 ndim; u16 flags}``; launchpad passes no gradient (``grad`` 0) and no flags. An array
  of vectors or matrices is a tensor whose last one or two dimensions are the element type's,
  compact (what ``wp.from_torch(t, dtype=wp.vec3)`` takes).
* a vector, matrix, quaternion or transform value is its components by value, row-major.
* a ``wp.struct`` is its fields at the offsets Warp's ctypes structure gives them (the same C
  layout the generated code declares): a Warp struct instance's own bytes, or a dict of its
  fields' values packed by these rules (:func:`convert_struct`).

The compiled executor packs arrays itself (``OP_WARP_ARRAY`` in
``launchpad/launch/_claunch/tile.c``); anything it does not take comes to :func:`convert_array`,
which applies the same rules and words the refusal. This module must not import Warp: a saved
Warp kernel (:func:`launchpad.load`) launches without it. It registers ``CONVERTERS["warp_array"]``,
``CONVERTERS["warp_value"]``, ``CONVERTERS["warp_struct"]`` and ``CONVERTERS["warp_bounds"]``.
"""

from __future__ import annotations

import functools
import math
import operator
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ...core.params import SCALAR_TYPES
from ...core.spec import Arg
from ...errors import ArgumentError, ArgumentTypeError
from ...launch.checks import CONVERTERS, Context, pointer_of
from ...launch.checks import describe as _describe

__all__ = ["ARRAY_BYTES", "BOUNDS_BYTES", "MAX_BLOCKS", "MAX_DIMS", "MAX_EXTENT", "convert_array", "convert_bounds",
           "convert_struct", "convert_value", "grid_of", "launch_bounds", "pack_array", "pack_bounds",
           "pack_value"]  # fmt: skip

#: ``wp::array_t``: data, grad, shape[4], strides[4] (bytes), ndim, flags, 4 bytes of padding.
_ARRAY = struct.Struct("<QQ4i4iHH4x")
ARRAY_BYTES = _ARRAY.size  # 56
#: The most dimensions of an array and of a launch (Warp's ``ARRAY_MAX_DIMS``, ``LAUNCH_MAX_DIMS``).
MAX_DIMS = 4
#: ``launch_bounds_t<N>``'s size by ``N``: ``u32 shape[N]`` padded to 8, then two ``u64``.
BOUNDS_BYTES = {n: (4 * n + 7) // 8 * 8 + 16 for n in range(1, MAX_DIMS + 1)}
_I32 = 2**31 - 1
#: wp.tid() gives signed 32-bit coordinates: no launch dimension may exceed this (wp.launch refuses it).
MAX_EXTENT = _I32
#: The most blocks of a grid-stride launch (gridDim.x's limit), where max_blocks does not lower it.
MAX_BLOCKS = _I32


def launch_bounds(dim: Sequence[int], kernel_dim: int) -> tuple[bytes, int]:
    """The bytes of ``launch_bounds_t<kernel_dim>`` for a launch of ``dim`` (Warp's
    ``_build_launch_bounds_from_tuple``), and the number of threads it covers (its ``size``)."""
    padded = tuple(dim) + (1,) * max(0, kernel_dim - len(dim))
    kept, extras = padded[:kernel_dim], padded[kernel_dim:]
    coord_mult = math.prod(extras)
    size = math.prod(kept) * coord_mult
    return pack_bounds([*kept, size, coord_mult], kernel_dim), size


def grid_of(size: int, block: int, max_blocks: int = 0) -> int:
    """The blocks ``wp.launch`` gives a grid-stride kernel: ``ceil(size / block)``, at most
    ``max_blocks`` (0 or less: gridDim.x's limit); 0 (nothing launched) for an empty launch."""
    if size <= 0:
        return 0
    cap = max_blocks if max_blocks > 0 else MAX_BLOCKS
    return min(-(-size // block), cap)


# --- arrays --------------------------------------------------------------------------------------


def pack_array(address: int, shape: Sequence[int], byte_strides: Sequence[int]) -> bytes:
    """``wp::array_t`` of an array without a gradient: 56 bytes, unused dimensions zero."""
    n = len(shape)
    pad = (0,) * (MAX_DIMS - n)
    return _ARRAY.pack(address, 0, *shape, *pad, *byte_strides, *pad, n, 0)


def _typename(arg: Arg) -> str:
    o = arg.options
    return o.get("type") or f"a {o['ndim']}-d {o['dtype']} array"


def convert_array(value: Any, device: int, stream: int, ctx: Context, arg: Arg, **options: Any) -> tuple:
    """``CONVERTERS["warp_array"]``: ``(array_t bytes,)`` of one array argument.

    ``options``: ``ndim`` (the Warp array's rank, 1-4), ``dtype`` (the torch dtype of its scalars),
    ``itemsize`` (their bytes), ``element`` (the element type's extents: ``[]`` for a scalar,
    ``[3]`` for a ``vec3``, ``[3, 3]`` for a ``mat33``) and ``type`` (how messages name it).
    Takes torch tensors and objects with ``__cuda_array_interface__`` on the launch device.
    """
    ndim, dtype, itemsize = options["ndim"], options["dtype"], options["itemsize"]
    element = tuple(options.get("element", ()))
    what = options.get("type") or f"a {ndim}-d {dtype} array"
    if isinstance(value, torch.Tensor):
        if str(value.dtype).removeprefix("torch.") != dtype:
            raise ctx.error(arg, f"expected {dtype} elements ({what}), got {_describe(value)}", ArgumentTypeError)
        address = pointer_of(ctx, arg, value, device, stream, None)
        shape, strides = tuple(value.shape), tuple(value.stride())
    else:
        cai = getattr(value, "__cuda_array_interface__", None)
        if not isinstance(cai, dict):
            raise ctx.error(arg, f"expected an array for {what} (a torch tensor or an object with "
                            f"__cuda_array_interface__), got {_describe(value)}", ArgumentTypeError)  # fmt: skip
        try:
            got = np.dtype(cai["typestr"])
        except TypeError:
            got = None
        if got is None or got.name != dtype:
            raise ctx.error(arg, f"expected {dtype} elements ({what}), got a {type(value).__name__} of "
                            f"{got if got is not None else cai['typestr']!r}", ArgumentTypeError)  # fmt: skip
        shape = tuple(int(n) for n in cai["shape"])
        raw = cai.get("strides")
        if raw is None:
            steps, step = [], 1
            for n in reversed(shape):
                steps.append(step)
                step *= n
            strides = tuple(reversed(steps))
        elif any(b % itemsize for b in raw):
            raise ctx.error(arg, f"byte strides {tuple(raw)} are not whole {dtype} elements")
        else:
            strides = tuple(b // itemsize for b in raw)
        address = pointer_of(ctx, arg, value, device, stream, None)
    if len(shape) != ndim + len(element):
        inner = f" (the {'x'.join(map(str, element))} elements as the last dimensions)" if element else ""
        raise ctx.error(arg, f"expected a tensor of {ndim + len(element)} dimensions for {what}{inner}, got shape "
                        f"{shape}")  # fmt: skip
    step = 1
    for k in reversed(range(len(element))):
        d = ndim + k
        if shape[d] != element[k]:
            raise ctx.error(arg, f"dimension {d} is {shape[d]}, the element type's extent is {element[k]} "
                            f"(shape {shape}, {what})")  # fmt: skip
        if shape[d] != 1 and strides[d] != step:
            raise ctx.error(arg, f"the element type's dimensions must be compact: stride[{d}] is {strides[d]}, "
                            f"expected {step} (strides {strides}, in elements); .contiguous() makes one")  # fmt: skip
        step *= element[k]
    outer, outer_strides = shape[:ndim], tuple(s * itemsize for s in strides[:ndim])
    for d, (n, s) in enumerate(zip(outer, outer_strides)):
        if n > _I32:
            raise ctx.error(arg, f"shape[{d}] = {n} does not fit Warp's 32-bit array extents")
        if not -_I32 - 1 <= s <= _I32:
            raise ctx.error(arg, f"stride[{d}] = {s} bytes does not fit Warp's 32-bit array strides")
    return (pack_array(address, outer, outer_strides),)


def _array_converter(**options: Any) -> Callable[..., tuple]:
    return functools.partial(convert_array, **options)


convert_array.specialize = _array_converter  # type: ignore[attr-defined]
convert_array.schema = lambda options: "Tensor"  # type: ignore[attr-defined]


# --- vectors and matrices by value ---------------------------------------------------------------


def _components(value: Any) -> list | None:
    """The components of a vector or matrix value, flattened row-major (None: not a sequence)."""
    if isinstance(value, torch.Tensor):
        return value.detach().reshape(-1).tolist()
    if isinstance(value, np.ndarray):
        return value.reshape(-1).tolist()
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        return None
    out: list = []
    for item in value:
        if hasattr(item, "__len__") and not isinstance(item, (str, bytes)):
            inner = _components(item)
            if inner is None:
                return None
            out.extend(inner)
        else:
            out.append(item)
    return out


def pack_value(components: Sequence[Any], word: str) -> bytes:
    """The bytes of a vector or matrix of ``word`` scalars (``fp32``...), row-major."""
    code = SCALAR_TYPES[word][1]
    if word == "bf16":
        raise ValueError("bf16 vectors are not packed")
    return struct.pack(f"<{len(components)}{code}", *components)


def _cast_of(word: str) -> Callable[[Any], Any]:
    """How a component of ``word`` is taken before packing: a float, an integer, or a bool (numpy's
    and Warp's ``wp.bool``, whose ``value`` it is, too)."""
    return _as_bool if word == "i1" else float if word.startswith(("fp", "bf")) else operator.index


def _as_bool(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    return bool(operator.index(getattr(value, "value", value)))


def convert_value(value: Any, device: int, stream: int, ctx: Context, arg: Arg, **options: Any) -> tuple:
    """``CONVERTERS["warp_value"]``: ``(bytes,)`` of a vector or matrix value.

    ``options``: ``word`` (its scalars' type word), ``shape`` (``[3]``, ``[3, 3]``) and ``type``
    (``vec3f``). Takes a sequence (nested for a matrix), a numpy array or a torch tensor of that
    many components, or a Warp vector.
    """
    shape, word = tuple(options["shape"]), options["word"]
    count = math.prod(shape)
    what = options.get("type") or f"a {'x'.join(map(str, shape))} {word} value"
    if isinstance(value, (bytes, bytearray)) and len(value) == count * SCALAR_TYPES[word][0]:
        return (bytes(value),)
    parts = _components(value)
    if parts is None or len(parts) != count:
        got = f"{len(parts)} components" if parts is not None else _describe(value)
        raise ctx.error(arg, f"expected {count} components for {what}, got {got}", ArgumentTypeError)
    cast = _cast_of(word)
    try:
        return (pack_value([cast(p) for p in parts], word),)
    except (TypeError, ValueError, struct.error, OverflowError) as exc:
        raise ctx.error(arg, f"cannot pack {_describe(value)} as {what}: {exc}", ArgumentTypeError) from None


convert_value.specialize = lambda **options: functools.partial(convert_value, **options)  # type: ignore[attr-defined]
convert_value.schema = lambda options: "int[]" if not options["word"].startswith(("fp", "bf")) else "float[]"  # type: ignore[attr-defined]


# --- wp.struct values ------------------------------------------------------------------------------


def convert_struct(value: Any, device: int, stream: int, ctx: Context, arg: Arg, **options: Any) -> tuple:
    """``CONVERTERS["warp_struct"]``: ``(bytes,)`` of a ``wp.struct`` value.

    ``options``: ``name`` (the parameter's), ``native_name`` (the struct's name in the generated
    code, with the hash of its fields), ``size`` and ``fields``: per field, its ``name``, ``offset``
    and ``kind`` (``array``, with :func:`convert_array`'s options; ``scalar`` or ``value``, with
    ``word``, ``shape`` and ``type``; ``struct``, with ``native_name``, ``size`` and ``fields``).
    Takes an instance of that very struct (its own bytes, as ``wp.launch`` passes them, once each
    array in it is found on the launch device), or a dict of every field's value: tensors for
    arrays, numbers, sequences for vectors and matrices, dicts (or instances) for nested structs,
    packed as Warp lays them out. ``specialize`` compiles the options into a :class:`_Struct` once.
    """
    return _Struct(options, options["name"])(value, device, stream, ctx, arg)


class _Struct:
    """A struct's options compiled for packing: per field its offset and packer, and the path that
    messages name it by (``p.inner.v``), all made once per kernel, not per launch."""

    def __init__(self, o: dict, path: str):
        self.size, self.native, self.path = int(o["size"]), str(o["native_name"]), path
        self.names = [f["name"] for f in o["fields"]]
        self.fields: list[tuple[str, int, str, Any, str, str]] = []  # (name, offset, kind, packer, path, type)
        for f in o["fields"]:
            where = f"{path}.{f['name']}"
            if f["kind"] == "struct":
                packer: Any = _Struct(f, where)
            elif f["kind"] == "array":
                packer = functools.partial(convert_array, ndim=f["ndim"], dtype=f["dtype"], itemsize=f["itemsize"],
                                           element=f["element"], type=f"{where}, {f['type']}")  # fmt: skip
            else:  # a scalar, vector or matrix: its count, the struct.Struct that packs it, how each is taken
                count, code = math.prod(f["shape"]), SCALAR_TYPES[f["word"]][1]
                packer = (count, struct.Struct(f"<{count}{code}"), _cast_of(f["word"]))
            self.fields.append((f["name"], int(f["offset"]), f["kind"], packer, where, f.get("type", "")))

    def __call__(self, value: Any, device: int, stream: int, ctx: Context, arg: Arg) -> tuple:
        out = bytearray(self.size)
        self.put(out, 0, value, device, stream, ctx, arg)
        return (bytes(out),)

    def put(self, out: bytearray, at: int, value: Any, device: int, stream: int, ctx: Context, arg: Arg) -> None:
        native = getattr(type(value), "native_name", None)
        if native is not None and hasattr(value, "_ctype"):  # a Warp struct instance (no Warp import: a saved kernel)
            if native != self.native:
                raise ctx.error(arg, f"expected a wp.struct {self.native} for {self.path}, got a wp.struct {native}",
                                ArgumentTypeError)  # fmt: skip
            self.check_arrays(value, device, ctx, arg)
            raw = bytes(memoryview(value._ctype).cast("B"))
            if len(raw) != self.size:
                raise ctx.error(arg, f"{self.path} is {len(raw)} bytes, the kernel's struct {self.size}")
            out[at : at + self.size] = raw
            return
        if not isinstance(value, dict):
            raise ctx.error(arg, f"expected a wp.struct {self.native} or a dict of its fields for {self.path}, got "
                            f"{_describe(value)}", ArgumentTypeError)  # fmt: skip
        if len(value) != len(self.names):
            raise self._fields_error(value, ctx, arg)
        for name, offset, kind, packer, where, typename in self.fields:
            item = value.get(name, _MISSING)
            if item is _MISSING:
                raise self._fields_error(value, ctx, arg)
            if kind == "struct":
                packer.put(out, at + offset, item, device, stream, ctx, arg)
                continue
            if kind == "array":
                raw = packer(item, device, stream, ctx, arg)[0]
            else:
                count, layout, cast = packer
                try:
                    parts = [item] if kind == "scalar" else _components(item)
                    if parts is None or len(parts) != count:
                        raise TypeError(f"expected {count} components")
                    raw = layout.pack(*[cast(p) for p in parts])
                except (TypeError, ValueError, struct.error, OverflowError) as exc:
                    raise ctx.error(arg, f"cannot pack {_describe(item)} as {where} ({typename}): {exc}",
                                    ArgumentTypeError) from None  # fmt: skip
            out[at + offset : at + offset + len(raw)] = raw

    def check_arrays(self, value: Any, device: int, ctx: Context, arg: Arg) -> None:
        """Refuse a struct instance holding an array that is not on the launch device (Warp's own
        launch does not look: the kernel would read a host or another GPU's address)."""
        for name, _, kind, packer, where, _ in self.fields:
            item = getattr(value, name, None)
            if kind == "struct" and item is not None:
                packer.check_arrays(item, device, ctx, arg)
            elif kind == "array" and item is not None:
                place = getattr(item, "device", None)
                if not (getattr(place, "is_cuda", False) and getattr(place, "ordinal", -1) == device):
                    raise ctx.error(arg, f"{where} is an array on {place}, not on the launch device cuda:{device}")

    def _fields_error(self, value: dict, ctx: Context, arg: Arg) -> Exception:
        missing, extra = [n for n in self.names if n not in value], sorted(set(map(str, value)) - set(self.names))
        parts = ([f"missing {missing}"] if missing else []) + ([f"no field {extra}"] if extra else [])
        return ctx.error(arg, f"{self.path} has the fields {self.names}: " + "; ".join(parts))


_MISSING = object()
convert_struct.specialize = lambda **options: _Struct(options, options["name"])  # type: ignore[attr-defined]


# --- launch bounds -------------------------------------------------------------------------------


def convert_bounds(value: Any, device: int, stream: int, ctx: Context, arg: Arg, **options: Any) -> tuple:
    """``CONVERTERS["warp_bounds"]``: ``(launch_bounds_t bytes,)`` from the bytes ``kernel[dim]``
    computed, or from the words ``(*shape, size, coord_mult)`` (how torch.compile's operator passes
    them)."""
    n = options["kernel_dim"]
    if isinstance(value, bytes) and len(value) == BOUNDS_BYTES[n]:
        return (value,)
    if isinstance(value, (tuple, list)) and len(value) == n + 2:
        return (pack_bounds([operator.index(v) for v in value], n),)
    raise ctx.error(arg, f"expected the launch bounds kernel[dim] computes, got {_describe(value)}; launch with "
                    "kernel[dim](...)", ArgumentError)  # fmt: skip


def pack_bounds(words: Sequence[int], kernel_dim: int) -> bytes:
    """``launch_bounds_t<kernel_dim>`` of its words ``[*shape, size, coord_mult]``."""
    head = struct.pack(f"<{kernel_dim}I", *words[:kernel_dim])
    return head + bytes(-len(head) % 8) + struct.pack("<QQ", *words[kernel_dim:])


convert_bounds.specialize = lambda **options: functools.partial(convert_bounds, **options)  # type: ignore[attr-defined]
convert_bounds.schema = lambda options: "int[]"  # type: ignore[attr-defined]

CONVERTERS["warp_array"] = convert_array
CONVERTERS["warp_value"] = convert_value
CONVERTERS["warp_bounds"] = convert_bounds
CONVERTERS["warp_struct"] = convert_struct
