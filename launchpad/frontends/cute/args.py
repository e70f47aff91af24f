"""Run-time packing of CuTe DSL tensor arguments: a torch tensor as the struct the kernel takes.

A ``cute.Tensor`` parameter is one by-value struct (:mod:`.layout`): the data pointer, then the
dynamic shape modes, then the dynamic stride modes, at the offsets and widths its layout gives.
The kernel was compiled assuming everything static in its type and every divisibility and
alignment it records; a launch that broke one would compute wrong results silently, so each is
checked here before the launch and refused naming the kernel, the argument and the assumption:

* the element type (``dtype``), the rank, the memory on the launch device (as for every pointer);
* ``align<N>``: the data pointer's alignment in bytes;
* a static shape or stride mode: its exact value; ``{div=N}``: a dynamic mode's divisor;
* every dynamic mode fits its field (``i32`` unless the type says ``i64``).

For each layout one converter is made once (cached): its torch path is one generated expression
of integer comparisons and one ``struct.pack``; anything else (another array type, a failed
check) goes to :func:`_convert_slow`, which applies every rule and words the errors. The compiled
executor calls the converter per tensor argument (an ``expand`` operation). This module must not
import CuTe DSL: a saved CuTe kernel (:func:`launchpad.load`) launches without it. It registers
``CONVERTERS["cute_tensor"]``.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any

import torch

from ...core.spec import Arg
from ...errors import ArgumentTypeError
from ...launch.checks import CONVERTERS, Context, pointer_of
from ...launch.checks import describe as _describe
from .layout import packed_widths

__all__ = ["convert_tensor", "struct_of", "tensor_converter"]

_RANGE = {4: (-(2**31), 2**31 - 1), 8: (-(2**63), 2**63 - 1)}
_CODES = {4: "i", 8: "q"}


def struct_of(fields: list | tuple, size: int) -> struct.Struct:
    """The packing of one tensor's struct: the pointer, each field at its offset (an ``i32`` before
    4 pad bytes as an ``i64``: :func:`.layout.packed_widths`), as the compiled executor writes it."""
    fmt, pos = ["<Q"], 8
    for (_, _, offset, _), width in zip(fields, packed_widths(fields, size)):
        if offset > pos:
            fmt.append(f"{offset - pos}x")
        fmt.append(_CODES[width])
        pos = offset + width
    if size > pos:
        fmt.append(f"{size - pos}x")
    return struct.Struct("".join(fmt))


def _fast_test(o: dict) -> str:
    """One expression over ``p`` (pointer), ``s`` (shape), ``t`` (strides) that holds when a
    tensor keeps every promise of the layout ``o`` (the slow path words any refusal)."""
    terms = [f"not p % {o['align']}"] if o["align"] > 1 else []
    for d, value in enumerate(o["shape_const"]):
        terms.append(f"s[{d}] == {value}" if value is not None else f"s[{d}] <= {_RANGE[4][1]}")
        if o["shape_div"][d] > 1:
            terms.append(f"not s[{d}] % {o['shape_div'][d]}")
    for d, value in enumerate(o["stride_const"]):
        if value is not None:
            terms.append(f"t[{d}] == {value}")
        else:
            low, high = _RANGE[_width(o, "stride", d)]
            terms.append(f"{low} <= t[{d}] <= {high}")
            if o["stride_div"][d] > 1:
                terms.append(f"not t[{d}] % {o['stride_div'][d]}")
    return " and ".join(terms) or "True"


def _width(o: dict, kind: str, mode: int) -> int:
    return next(f[3] for f in o["fields"] if f[0] == kind and f[1] == mode)


@functools.cache
def _cached_converter(frozen: tuple) -> Callable[..., tuple]:
    o: dict[str, Any] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in frozen}
    o["fields"] = [list(f) for f in o["fields"]]
    ndim = len(o["shape_const"])
    torch_dtype = getattr(torch, o["dtype"], None)
    keeps = eval(compile(f"lambda p, s, t: {_fast_test(o)}", f"<cute tensor {o['type']}>", "eval"), {})
    packer = struct_of(o["fields"], o["size"]).pack
    picks = ", ".join(f"{'s' if kind == 'shape' else 't'}[{mode}]" for kind, mode, _, _ in o["fields"])
    pack = eval(compile(f"lambda p, s, t: _pack(p, {picks})", "<cute pack>", "eval"), {"_pack": packer})
    tensor = torch.Tensor

    def convert(value: Any, device: int, stream: int, ctx: Context, arg: Arg) -> tuple:
        if value.__class__ is tensor and value.dtype is torch_dtype and value.get_device() == device:
            shape = value.shape
            if len(shape) == ndim:
                strides = value.stride()
                address = value.data_ptr()
                if keeps(address, shape, strides):
                    return (pack(address, shape, strides),)
        return _convert_slow(value, device, stream, ctx, arg, o, pack)

    return convert


def tensor_converter(**options: Any) -> Callable[..., tuple]:
    """The converter of one tensor layout (:meth:`.layout.TensorLayout.options`), made once.

    The returned ``convert(value, device, stream, ctx, arg)`` gives the one parameter value (the
    struct's bytes) of one tensor argument, or raises :class:`~launchpad.ArgumentError` naming it.
    """
    frozen = tuple(sorted((k, _freeze(v)) for k, v in options.items()))
    return _cached_converter(frozen)


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, list | tuple) else v


def convert_tensor(value: Any, device: int, stream: int, ctx: Context, arg: Arg, **options: Any) -> tuple:
    """``CONVERTERS["cute_tensor"]``: the parameter value of one CuTe tensor argument."""
    return tensor_converter(**options)(value, device, stream, ctx, arg)


# Launch executors call the converter made for the options directly (no keyword unpacking).
convert_tensor.specialize = tensor_converter  # type: ignore[attr-defined]


def _convert_slow(value: Any, device: int, stream: int, ctx: Context, arg: Arg, o: dict,
                  pack: Callable[..., bytes]) -> tuple:  # fmt: skip
    what = f"CuTe type {o['type']}"
    if not isinstance(value, torch.Tensor):
        raise ctx.error(arg, f"expected a torch tensor ({what}), got {_describe(value)}", ArgumentTypeError)
    if str(value.dtype).removeprefix("torch.") != o["dtype"]:
        raise ctx.error(arg, f"expected {o['dtype']} elements ({what}), got {_describe(value)}", ArgumentTypeError)
    address = pointer_of(ctx, arg, value, device, stream, None)
    shape, strides = tuple(value.shape), tuple(value.stride())
    ndim = len(o["shape_const"])
    if len(shape) != ndim:
        raise ctx.error(arg, f"expected a {ndim}-d tensor ({what}), got shape {shape}")
    compiled = "the kernel was compiled assuming"
    if o["align"] > 1 and address % o["align"]:
        raise ctx.error(arg, f"data pointer {address:#x} is not {o['align']}-byte aligned; {compiled} it is "
                        f"(align<{o['align']}> in {what})")  # fmt: skip
    for kind, values in (("shape", shape), ("stride", strides)):
        for d, v in enumerate(values):
            static, div = o[f"{kind}_const"][d], o[f"{kind}_div"][d]
            if static is not None and v != static:
                hint = "; .contiguous() makes one" if kind == "stride" else ""
                raise ctx.error(arg, f"{kind}[{d}] is {v} ({kind} {values}); {compiled} it is {static} "
                                f"(a static mode of {what}){hint}")  # fmt: skip
            if static is None:
                if v % div:
                    raise ctx.error(arg, f"{kind}[{d}] is {v}; {compiled} it is a multiple of {div} "
                                    f"({{div={div}}} in {what})")  # fmt: skip
                low, high = _RANGE[_width(o, kind, d)]
                if not low <= v <= high:
                    raise ctx.error(arg, f"{kind}[{d}] = {v} does not fit the kernel's "
                                    f"{8 * _width(o, kind, d)}-bit field for it ({what})")  # fmt: skip
    return (pack(address, shape, strides),)


CONVERTERS["cute_tensor"] = convert_tensor
