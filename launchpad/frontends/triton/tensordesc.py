"""Host tensor descriptors: the runtime converter for Triton ``tensordesc`` arguments.

A Triton kernel that takes a host ``TensorDescriptor`` (``base``, ``shape``, ``strides``,
``block_shape``, ``padding``) receives it as several parameters. When the compiler lowered the
descriptor to TMA (the kernel's metadata has a ``tensordesc_meta`` entry for it), the kernel takes
a 128-byte ``CUtensorMap`` by value followed by the shape (i32) and the strides (i64). Otherwise
it takes the pointer form: base pointer, shape and strides (i64), a NaN-padding flag (Triton 3.5
and later), then the shape (i32) and strides (i64) again.

This module turns a descriptor into those values exactly as Triton's launcher does
(``make_tensordesc_arg`` and ``fill_tma_descriptor`` in ``triton/backends/nvidia``). It never
imports Triton: any object with the five attributes is accepted, so kernels loaded from an
artifact launch in a process without Triton.

The converter is registered as ``CONVERTERS["tensordesc"]``; a front end describes each
descriptor argument with ``Arg(kind="expand", converter="tensordesc", options=...)`` where the
options (all JSON) are:

``rank``
    Number of dimensions.
``dtype``
    Element type word of the signature (``"fp16"``); the base tensor's dtype must match
    (``""``: not checked).
``block``
    The block shape the kernel was compiled for; the descriptor's must be equal.
``meta``
    The kernel's ``tensordesc_meta`` entry (``swizzle``, ``elem_size``, ``elem_type``,
    ``block_size``, ``fp4_padded``) for the TMA form, or None for the pointer form.
``flags``
    The 1-byte flags of the pointer form, in order: ``"padding"`` (NaN padding, Triton 3.5+),
    ``"round_f32_to_tf32"`` (Triton 3.7+). Artifacts of launchpad 0.1 say ``padding_flag``.
``fp4_shape_doubled``
    Whether an fp4-padded TMA descriptor passes its doubled last dimension as the i32 shape
    (Triton 3.5 and 3.6) or only encodes it doubled.
``tf32_maps``
    Whether a ``round_f32_to_tf32`` descriptor is encoded as a TF32 map (Triton 3.7+).

Which Triton version does what is decided in :mod:`launchpad.frontends.triton.versions`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from ...core import driver as _driver
from ...core.params import POINTER_DTYPES
from ...core.spec import Arg
from ...errors import ArgumentError, ArgumentTypeError
from ...launch.checks import CONVERTERS, Context, pointer_of
from ...launch.checks import describe as _describe

__all__ = ["TMA_DTYPE_DEVICE_TO_HOST", "converter", "tensordesc"]

#: The compiler's element-type enum differs from the driver's ``CUtensorMapDataType`` in three
#: places (Triton's ``TMA_DTYPE_DEVICE_TO_HOST``).
TMA_DTYPE_DEVICE_TO_HOST: dict[int, int] = {**{i: i for i in range(16)}, 8: 10, 9: 8, 10: 9}

_TF32 = 11  # CU_TENSOR_MAP_DATA_TYPE_TFLOAT32: Triton's TMA_TF32
_INTERLEAVE_NONE = 0
_L2_PROMOTION_128B = 2  # CU_TENSOR_MAP_L2_PROMOTION_L2_128B, what Triton asks for
_OOB_FILL_NONE = 0
_OOB_FILL_NAN = 1  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA

# Encoded maps by everything that determines their bytes. Encoding is a driver call of several
# microseconds; a map is a pure function of these inputs, so a launch loop over the same tensors
# reuses it. Bounded: cleared when full.
_MAP_CACHE: dict[tuple, bytes] = {}
_MAP_CACHE_SIZE = 1024
_MAP_CACHE_LOCK = threading.Lock()  # lookups need none; filling and emptying take it

_DTYPES: dict[str, torch.dtype | None] = {
    word: getattr(torch, name, None) if name else None for word, name in POINTER_DTYPES.items()
}


def _ints(ctx: Context, arg: Arg, value: Any, what: str, rank: int) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in value)
    except TypeError:
        raise ctx.error(
            arg, f"descriptor {what} must be a sequence of ints, got {_describe(value)}", ArgumentTypeError
        ) from None
    if len(out) != rank:
        raise ctx.error(arg, f"the kernel was compiled for a rank-{rank} descriptor, got {what} {list(out)}")
    return out


def _base_address(ctx: Context, arg: Arg, base: Any, device: int, stream: int, dtype: torch.dtype | None) -> int:
    """The base tensor's address, with the same checks as a pointer parameter."""
    if base.__class__ is torch.Tensor and base.get_device() == device and (dtype is None or base.dtype is dtype):
        return base.data_ptr()
    return pointer_of(ctx, arg, base, device, stream, dtype)  # the slow path raises the precise error


def _fields(ctx: Context, arg: Arg, value: Any, rank: int) -> tuple:
    """``(base, shape, strides, block_shape, padding)`` of a descriptor, shape and strides as int tuples.

    ``padding`` is ``"zero"`` for descriptors that have none (Triton 3.4's).
    """
    try:
        base, shape, strides, block_shape = value.base, value.shape, value.strides, value.block_shape
        padding = getattr(value, "padding", "zero")
    except AttributeError:
        raise ctx.error(
            arg,
            f"expected a TensorDescriptor (base, shape, strides, block_shape, padding), got {_describe(value)}",
            ArgumentTypeError,
        ) from None
    if shape.__class__ is not torch.Size or len(shape) != rank:
        shape = _ints(ctx, arg, shape, "shape", rank)
    if strides.__class__ is not tuple or len(strides) != rank:
        strides = _ints(ctx, arg, strides, "strides", rank)
    if padding != "zero" and padding != "nan":
        raise ctx.error(arg, f"padding must be 'zero' or 'nan', got {padding!r}")
    return base, tuple(shape), strides, block_shape, padding


def converter(
    *,
    rank: int,
    dtype: str = "",
    block: list[int] | None = None,
    meta: dict | None = None,
    flags: list[str] | tuple[str, ...] = ("padding",),
    fp4_shape_doubled: bool = True,
    tf32_maps: bool = False,
    padding_flag: bool | None = None,
) -> Callable[[Any, int, int, Context, Arg], tuple]:
    """The converter of one descriptor argument, its options bound (see the module documentation).

    ``convert(value, device, stream, ctx, arg)`` returns the parameter values in order. TMA form:
    ``(map_bytes, *shape, *strides)``. Pointer form: ``(address, *shape, *strides, *flags,
    *shape, *strides)``. It raises
    :class:`~launchpad.ArgumentError` when the descriptor does not match what the kernel was
    compiled for (rank, element type, block shape) or breaks a TMA requirement, before any
    driver call.
    """
    torch_dtype = _DTYPES.get(dtype)
    block_t = tuple(block) if block is not None else None
    if padding_flag is not None:  # an artifact of launchpad 0.1
        flags = ("padding",) if padding_flag else ()
    flags = tuple(flags)
    unknown = set(flags) - {"padding", "round_f32_to_tf32"}
    if unknown:
        raise ValueError(f"unknown tensor descriptor flags {sorted(unknown)}")

    def check_block(ctx: Context, arg: Arg, block_shape: Any) -> None:
        if _ints(ctx, arg, block_shape, "block_shape", rank) != block_t:
            raise ctx.error(
                arg, f"the kernel was compiled for block shape {list(block_t or ())}, got {list(block_shape)}"
            )

    if meta is None:

        def convert_pointer_form(value: Any, device: int, stream: int, ctx: Context, arg: Arg) -> tuple:
            base, shape, strides, block_shape, padding = _fields(ctx, arg, value, rank)
            if block_t is not None and tuple(block_shape) != block_t:
                check_block(ctx, arg, block_shape)
            address = _base_address(ctx, arg, base, device, stream, torch_dtype)
            values = {
                "padding": padding == "nan",
                "round_f32_to_tf32": bool(getattr(value, "round_f32_to_tf32", False)),
            }
            return (address, *shape, *strides, *(values[f] for f in flags), *shape, *strides)

        return convert_pointer_form

    elem_size = meta["elem_size"]
    fp4_padded = bool(meta.get("fp4_padded"))
    meta_key = (meta["swizzle"], elem_size, meta["elem_type"], *meta["block_size"])

    def convert_tma(value: Any, device: int, stream: int, ctx: Context, arg: Arg) -> tuple:
        base, shape, strides, block_shape, padding = _fields(ctx, arg, value, rank)
        if block_t is not None and tuple(block_shape) != block_t:
            check_block(ctx, arg, block_shape)
        address = _base_address(ctx, arg, base, device, stream, torch_dtype)
        encoded = (*shape[:-1], shape[-1] * 2) if fp4_padded else shape
        if fp4_shape_doubled:
            shape = encoded
        tf32 = tf32_maps and bool(getattr(value, "round_f32_to_tf32", False))
        key = (address, encoded, strides, padding, tf32, meta_key)
        tmap = _MAP_CACHE.get(key)
        if tmap is None:
            # The checks Triton's TensorDescriptor makes at construction and the driver's
            # requirements, as argument errors rather than a failed encode; once per map.
            if address % 16:
                raise ctx.error(arg, f"descriptor base {address:#x} is not 16-byte aligned, which TMA requires")
            if strides[-1] != 1:
                raise ctx.error(arg, f"the last dimension must be contiguous (stride 1), got strides {list(strides)}")
            for s in strides[:-1]:
                if s * elem_size % 16:
                    raise ctx.error(
                        arg, f"strides {list(strides)} of {elem_size}-byte elements are not multiples of 16 bytes"
                    )
            if any(d <= 0 for d in encoded):
                raise ctx.error(arg, f"descriptor shape {list(encoded)} must be positive")
            tmap = _encode(ctx, arg, address, encoded, strides, padding == "nan", tf32, meta)
            with _MAP_CACHE_LOCK:
                if len(_MAP_CACHE) >= _MAP_CACHE_SIZE:
                    _MAP_CACHE.clear()
                _MAP_CACHE[key] = tmap
        return (tmap, *shape, *strides)

    return convert_tma


def tensordesc(value: Any, device: int, stream: int, ctx: Context, arg: Arg, **options: Any) -> tuple:
    """The parameter values of one host tensor descriptor argument, in parameter order.

    ``CONVERTERS["tensordesc"]``: ``options`` are the argument's converter options; see
    :func:`converter`, which generated launch functions use directly (``tensordesc.specialize``).

    Parameters
    ----------
    value
        A ``triton.tools.tensor_descriptor.TensorDescriptor`` or any object with ``base``,
        ``shape``, ``strides``, ``block_shape`` and ``padding``.
    device, stream
        The launch's device and stream.
    ctx, arg
        The kernel's context and the argument, for error messages.
    """
    return converter(**options)(value, device, stream, ctx, arg)


def _encode(
    ctx: Context, arg: Arg, address: int, shape: tuple, strides: tuple, nan: bool, tf32: bool, meta: dict
) -> bytes:
    """``cuTensorMapEncodeTiled`` as Triton's ``fill_tma_descriptor`` calls it."""
    rank = len(shape)
    elem_size = meta["elem_size"]
    box = list(meta["block_size"])
    if len(box) != rank:
        raise ArgumentError(f"{ctx.where(arg)}: tensordesc metadata has block {box} for a rank-{rank} descriptor")
    # The driver wants the fastest-varying dimension first and byte strides of all but it.
    return _driver.encode_tensor_map_tiled(
        _TF32 if tf32 else TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]],
        rank,
        address,
        list(shape[::-1]),
        [s * elem_size for s in strides[-2::-1]],
        box[::-1],
        [1] * rank,
        _INTERLEAVE_NONE,
        meta["swizzle"],
        _L2_PROMOTION_128B,
        _OOB_FILL_NAN if nan else _OOB_FILL_NONE,
    )


# Generated launch functions call the specialized converter directly (no keyword unpacking).
tensordesc.specialize = converter  # type: ignore[attr-defined]
CONVERTERS["tensordesc"] = tensordesc
