"""Run-time conversion of cuTile array arguments: a tensor as its pointer, shape and strides.

cuTile's calling convention (``docs/source/compilation.rst``, "Calling Conventions") passes an
array of ``n`` dimensions as ``1 + 2n`` parameters: the device pointer to its first element, its
``n`` extents, then its ``n`` strides in elements, the extents and strides as the constraint's
``index_dtype`` (``int32`` by default, ``uint32`` or ``int64``). The cubin was compiled assuming
what the kernel's ``ArrayConstraint`` says; a launch that breaks an assumption would compute wrong
results silently, so each one is checked here before the launch, and refused naming the kernel,
the argument and the assumption:

* the element type and the rank; the memory on the launch device (as for every pointer);
* ``base_addr_divisible_by``: the pointer's alignment in bytes;
* ``shape_divisible_by``, ``shape_constant``: each extent's divisor or exact value;
* ``stride_divisible_by``, ``stride_constant``, ``stride_lower_bound_incl``: each stride's
  divisor, exact value or lower bound (in elements);
* ``may_alias_internally=False``: no two indices reach one element (cuTile's own test: sorted by
  stride, each stride at least the previous stride times its extent, the smallest positive);
* every extent and stride fits the index type (cuTile's ``ct.IndexedWithInt64`` widens it).

Aliasing between different arrays (``alias_groups``) is a promise cuTile does not check either.

The compiled executor reads torch tensors itself and checks the same rules in C
(``OP_TILE_ARRAY`` in ``launchpad/launch/_claunch/tile.c``); anything it does not take goes to
the Python executor, which calls the converter here. For each constraint one converter is made
once; its torch path is one generated expression of integer comparisons (C-contiguous tensors);
anything else (strided views, other array types, a failed check) goes to :func:`_convert_slow`,
which takes objects with ``__cuda_array_interface__``, applies every rule and words the errors.
This module must not import cuTile: a saved cuTile kernel (:func:`launchpad.load`) launches
without it. It registers ``CONVERTERS["cutile_array"]``.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ...core.params import INDEX_RANGE
from ...core.spec import Arg
from ...errors import ArgumentTypeError
from ...launch.checks import CONVERTERS, Context, pointer_of
from ...launch.checks import describe as _describe

__all__ = ["array_converter", "convert_array", "elements_disjoint"]


def elements_disjoint(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """cuTile's test that no two indices of an array reach one element: with the dimensions
    sorted by stride, the smallest stride is positive and each stride is at least the previous
    one times its extent (a 0-d array is disjoint)."""
    pairs = sorted(zip(strides, shape))
    if pairs and pairs[0][0] <= 0:
        return False
    return all(cur[0] >= prev[0] * prev[1] for prev, cur in itertools.pairwise(pairs))


def _fast_test(ndim: int, o: dict) -> str:
    """The source of one expression over ``p`` (pointer), ``s`` (shape), ``t`` (strides) that
    holds when a C-contiguous tensor keeps every promise of the constraint ``o`` (anything else
    is decided by the slow path, which applies the full rules)."""
    terms = [f"not p % {o['align']}"] if o["align"] > 1 else []
    high = INDEX_RANGE[o["index"]][1]
    expected = "1"
    for d in reversed(range(ndim)):
        # C-contiguous with positive strides: disjoint, and the last stride is 1
        terms.append(f"t[{d}] == {expected}")
        terms.append(f"s[{d}] <= {high}")
        expected = f"t[{d}] * s[{d}]"
        if o["shape_div"][d] > 1:
            terms.append(f"not s[{d}] % {o['shape_div'][d]}")
        if o["shape_const"][d] is not None:
            terms.append(f"s[{d}] == {o['shape_const'][d]}")
        if o["stride_div"][d] > 1:
            terms.append(f"not t[{d}] % {o['stride_div'][d]}")
        if o["stride_const"][d] is not None:
            terms.append(f"t[{d}] == {o['stride_const'][d]}")
        if o["stride_min"][d] is not None:
            terms.append(f"t[{d}] >= {o['stride_min'][d]}")
    if ndim:
        terms.append(f"0 < t[0] <= {high}")  # the largest stride; positive, so every extent after it is
    return " and ".join(terms) or "True"


def _normalized(ndim: int, options: dict) -> dict:
    """The converter's options with every per-dimension list filled in."""

    def per_dim(key: str, default: Any) -> list:
        v = options.get(key)
        return list(v) if v is not None else [default] * ndim

    return {
        "align": int(options.get("align") or 1),
        "index": options.get("index", "i32"),
        "shape_div": per_dim("shape_div", 1),
        "shape_const": per_dim("shape_const", None),
        "stride_div": per_dim("stride_div", 1),
        "stride_const": per_dim("stride_const", None),
        "stride_min": per_dim("stride_min", None),
        "disjoint": bool(options.get("disjoint", False)),
    }


@functools.cache
def _cached_converter(ndim: int, dtype: str, frozen: tuple) -> Callable[..., tuple]:
    options = {k: (list(v) if isinstance(v, tuple) else v) for k, v in frozen}
    o = _normalized(ndim, options)
    torch_dtype = getattr(torch, dtype, None)  # None (no torch dtype): every tensor takes the slow path
    source = f"lambda p, s, t: {_fast_test(ndim, o)}"
    keeps = eval(compile(source, f"<cutile array {dtype} {ndim}d>", "eval"), {})  # integer comparisons only
    tensor = torch.Tensor

    def convert(value: Any, device: int, stream: int, ctx: Context, arg: Arg) -> tuple:
        if value.__class__ is tensor and value.dtype is torch_dtype and value.get_device() == device:
            shape = value.shape
            if len(shape) == ndim:
                strides = value.stride()
                address = value.data_ptr()
                if keeps(address, shape, strides):
                    return (address, *shape, *strides)
        return _convert_slow(value, device, stream, ctx, arg, ndim, dtype, o, options)

    return convert


def array_converter(ndim: int, dtype: str, **options: Any) -> Callable[..., tuple]:
    """The converter of one array constraint, made on first use and cached.

    The returned ``convert(value, device, stream, ctx, arg)`` gives the ``1 + 2 * ndim``
    parameter values of one array argument, or raises :class:`~launchpad.ArgumentError` naming it.
    """
    frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items()))
    return _cached_converter(ndim, dtype, frozen)


def convert_array(value: Any, device: int, stream: int, ctx: Context, arg: Arg, **options: Any) -> tuple:
    """``CONVERTERS["cutile_array"]``: the parameter values of one cuTile array argument.

    ``options``: ``ndim``, ``dtype`` (a torch dtype name), ``index`` (``"i32"``, ``"u32"`` or
    ``"i64"``), ``align`` (bytes), per dimension ``shape_div``, ``shape_const``, ``stride_div``,
    ``stride_const``, ``stride_min`` (None: no promise), ``disjoint`` and ``type`` (for messages).
    """
    return array_converter(**options)(value, device, stream, ctx, arg)


# Launch executors call the converter made for the options directly (no keyword unpacking).
convert_array.specialize = array_converter  # type: ignore[attr-defined]


# --- the slow path: every other array, and every refusal ----------------------------------------

#: numpy's name of each torch dtype an array argument may have (for ``__cuda_array_interface__``).
_NUMPY_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "float32", "float64")  # fmt: skip


def _typename(arg: Arg, ndim: int, dtype: str) -> str:
    return arg.options.get("type") or f"a {ndim}-d {dtype} array"


def _convert_slow(value: Any, device: int, stream: int, ctx: Context, arg: Arg, ndim: int, dtype: str,
                  o: dict, options: dict) -> tuple:  # fmt: skip
    what = _typename(arg, ndim, dtype)
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
        if dtype not in _NUMPY_NAMES or got != np.dtype(dtype):
            raise ctx.error(arg, f"expected {dtype} elements ({what}), got a {type(value).__name__} of "
                            f"{got if got is not None else cai['typestr']!r}", ArgumentTypeError)  # fmt: skip
        shape = tuple(int(n) for n in cai["shape"])
        raw = cai.get("strides")
        itemsize = got.itemsize
        if raw is None:  # none given means C-contiguous
            strides_l, step = [], 1
            for n in reversed(shape):
                strides_l.append(step)
                step *= n
            strides = tuple(reversed(strides_l))
        elif any(b % itemsize for b in raw):
            raise ctx.error(arg, f"byte strides {tuple(raw)} are not whole {dtype} elements")
        else:
            strides = tuple(b // itemsize for b in raw)
        address = pointer_of(ctx, arg, value, device, stream, None)
    if len(shape) != ndim:
        raise ctx.error(arg, f"expected a {ndim}-d array ({what}), got shape {shape}")
    _check_promises(ctx, arg, address, shape, strides, o)
    return (address, *shape, *strides)


def _check_promises(ctx: Context, arg: Arg, address: int, shape: tuple, strides: tuple, o: dict) -> None:
    """Refuse an array that breaks an assumption the kernel was compiled with (the module's list)."""
    compiled = "the kernel was compiled assuming"
    if o["align"] > 1 and address % o["align"]:
        raise ctx.error(arg, f"data pointer {address:#x} is not {o['align']}-byte aligned; {compiled} it is "
                        "(base_addr_divisible_by)")  # fmt: skip
    for d, (n, t) in enumerate(zip(shape, strides)):
        if o["shape_const"][d] is not None and n != o["shape_const"][d]:
            raise ctx.error(arg, f"shape[{d}] is {n}; {compiled} it is {o['shape_const'][d]} (shape_constant)")
        if n % o["shape_div"][d]:
            raise ctx.error(arg, f"shape[{d}] is {n}; {compiled} it is a multiple of {o['shape_div'][d]} "
                            "(shape_divisible_by)")  # fmt: skip
        if o["stride_const"][d] is not None and t != o["stride_const"][d]:
            hint = "; .contiguous() makes one" if o["stride_const"][d] == 1 else ""
            raise ctx.error(arg, f"stride[{d}] is {t} (strides {strides}, in elements); {compiled} it is "
                            f"{o['stride_const'][d]} (stride_constant){hint}")  # fmt: skip
        if t % o["stride_div"][d]:
            raise ctx.error(arg, f"stride[{d}] is {t} (in elements); {compiled} it is a multiple of "
                            f"{o['stride_div'][d]} (stride_divisible_by)")  # fmt: skip
        if o["stride_min"][d] is not None and t < o["stride_min"][d]:
            raise ctx.error(arg, f"stride[{d}] is {t}; {compiled} it is at least {o['stride_min'][d]} "
                            "(stride_lower_bound_incl)")  # fmt: skip
    low, high = INDEX_RANGE[o["index"]]
    for what, values in (("shape", shape), ("stride", strides)):
        for d, v in enumerate(values):
            if not low <= v <= high:
                hint = " (annotate the parameter ct.IndexedWithInt64 and compile again)" if o["index"] != "i64" else ""
                raise ctx.error(arg, f"{what}[{d}] = {v} does not fit the kernel's {o['index']} index type{hint}")
    if o["disjoint"] and not elements_disjoint(shape, strides):
        raise ctx.error(arg, f"shape {shape} with strides {strides} reaches one element from two indices (a "
                        f"broadcast or overlapping view); {compiled} it does not (may_alias_internally=False); "
                        ".contiguous() makes a copy that does not")  # fmt: skip


CONVERTERS["cutile_array"] = convert_array
