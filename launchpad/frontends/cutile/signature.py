"""cuTile's calling convention, from a kernel signature to launchpad parameters and arguments.

A cuTile ``KernelSignature`` holds one constraint per parameter of the kernel's Python function.
cuTile documents how each reaches the cubin (``docs/source/compilation.rst``, "Calling
Conventions"; ``cutile_python_v1`` and ``v2`` agree on all but what v2 adds):

=====================  ================================================================
constraint             parameters of the cubin
=====================  ================================================================
``ArrayConstraint``    ``1 + 2n``: the data pointer, ``n`` extents, ``n`` strides (in
                       elements), extents and strides as ``index_dtype``
``ScalarConstraint``   one, of its dtype (``int32`` is ``int32_t``, ``float32`` ``float``)
``TupleConstraint``    its items' parameters in order, as if each were a parameter (v2)
``ConstantConstraint`` none: the value is compiled in
=====================  ================================================================

:func:`describe` turns a signature into the cubin's type words and one :class:`~launchpad.Arg`
per leaf: arrays expand through ``CONVERTERS["cutile_array"]`` (:mod:`.args`), which checks every
assumption of the ``ArrayConstraint``; constants are ``const`` arguments (leave them out, or pass
the compiled value, as ``ct.launch`` takes them); list, pointer, tensor-map and dataclass
parameters are refused by name.

:func:`signature_from_args` gives the signature ``ct.launch`` would compile for example
arguments: cuTile's own ``KernelSignature.from_kernel_args`` where the CUDA driver can be loaded,
and on a machine without one (a CPU build machine) the same rules applied here (cuTile's
``compute_array_specialization_bits``): a 16-byte aligned pointer, a stride of 1, extents and
strides that are multiples of 16 bytes, extents of 1 become promises; ints are ``int32``
(``ct.ScalarInt64``: ``int64``), floats ``float32``; ``ct.Constant`` parameters are constants.
The calling convention is the one ``ct.launch`` picks: v1, or v2 where the signature needs it.
"""

from __future__ import annotations

import inspect
from typing import Any

from ...core.spec import Arg
from ...errors import ArgumentError, LaunchpadError

__all__ = ["POINTER_WORDS", "SCALAR_WORDS", "describe", "jit_convention", "signature_from_args"]

#: cuTile dtype name -> (pointer type word, torch dtype name) of an array's elements.
POINTER_WORDS = {
    "bool_": ("*i1", "bool"), "int8": ("*i8", "int8"), "int16": ("*i16", "int16"), "int32": ("*i32", "int32"),
    "int64": ("*i64", "int64"), "uint8": ("*u8", "uint8"), "uint16": ("*u16", "uint16"),
    "uint32": ("*u32", "uint32"), "uint64": ("*u64", "uint64"), "float16": ("*fp16", "float16"),
    "bfloat16": ("*bf16", "bfloat16"), "float32": ("*fp32", "float32"), "float64": ("*fp64", "float64"),
    "float8_e4m3fn": ("*fp8e4nv", "float8_e4m3fn"), "float8_e5m2": ("*fp8e5", "float8_e5m2"),
    "float8_e8m0fnu": ("*void", "float8_e8m0fnu"),
}  # fmt: skip
#: cuTile dtype name -> scalar type word.
SCALAR_WORDS = {
    "bool_": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
    "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "fp16", "bfloat16": "bf16",
    "float32": "fp32", "float64": "fp64",
}  # fmt: skip
_INDEX_WORDS = {"int32": "i32", "uint32": "u32", "int64": "i64"}


def _dtype_name(dtype: Any) -> str:
    return str(getattr(dtype, "name", dtype))


def describe(signature: Any, names: list[str], kernel: str) -> tuple[list[str], list[str], list[Arg]]:
    """The cubin's parameter type words and names for a ``KernelSignature``, and one
    :class:`~launchpad.Arg` per leaf of it (see the module documentation).

    Raises
    ------
    LaunchpadError
        A parameter kind launchpad cannot pass (lists, pointers, tensor maps, dataclasses) or an
        element type without a torch equivalent, naming the kernel and the parameter.
    """
    from cuda.tile.compilation import ArrayConstraint, ConstantConstraint, ScalarConstraint, TupleConstraint

    words: list[str] = []
    param_names: list[str] = []
    args: list[Arg] = []

    def refuse(label: str, why: str) -> LaunchpadError:
        return LaunchpadError(f"kernel {kernel!r}, parameter {label!r}: {why}")

    def add(c: Any, path: tuple[int, ...], label: str, name: str) -> None:
        first = len(words)
        if isinstance(c, ArrayConstraint):
            dtype = _dtype_name(c.dtype)
            if dtype not in POINTER_WORDS:
                raise refuse(label, f"arrays of {dtype} have no torch dtype launchpad can check")
            word, torch_dtype = POINTER_WORDS[dtype]
            index = _INDEX_WORDS[_dtype_name(c.index_dtype)]
            n = c.ndim
            words.extend([word, *[index] * (2 * n)])
            param_names.extend([label, *(f"{label}.shape[{d}]" for d in range(n)),
                                *(f"{label}.strides[{d}]" for d in range(n))])  # fmt: skip
            options = {
                "ndim": n, "dtype": torch_dtype, "index": index, "align": c.base_addr_divisible_by,
                "shape_div": list(c.shape_divisible_by), "shape_const": list(c.shape_constant),
                "stride_div": list(c.stride_divisible_by), "stride_const": list(c.stride_constant),
                "stride_min": list(c.stride_lower_bound_incl), "disjoint": not c.may_alias_internally,
                "type": f"a {n}-d {torch_dtype} array, {index} index",
            }  # fmt: skip
            args.append(Arg(name, "expand", path, params=tuple(range(first, len(words))), converter="cutile_array",
                            options=options))  # fmt: skip
        elif isinstance(c, ScalarConstraint):
            dtype = _dtype_name(c.dtype)
            if dtype not in SCALAR_WORDS:
                raise refuse(label, f"scalars of {dtype} are not passed by launchpad")
            words.append(SCALAR_WORDS[dtype])
            param_names.append(label)
            args.append(Arg(name, "param", path, first))
        elif isinstance(c, ConstantConstraint):
            args.append(Arg(name, "const", path, value=c.value))
        elif isinstance(c, TupleConstraint):
            if not c.items:
                args.append(Arg(name, "const", path, value=()))
            for j, item in enumerate(c.items):
                add(item, (*path, j), f"{label}[{j}]", name)
        else:
            raise refuse(label, f"launchpad does not pass {type(c).__name__} parameters (it passes arrays, "
                         "scalars, constants and tuples of these); launch this kernel with ct.launch")  # fmt: skip

    if len(signature.parameters) != len(names):
        raise ArgumentError(f"kernel {kernel!r}: the signature has {len(signature.parameters)} parameters, the "
                            f"function {len(names)} ({', '.join(names)})")  # fmt: skip
    for i, (c, name) in enumerate(zip(signature.parameters, names)):
        add(c, (i,), name, name)
    return words, param_names, args


def pyfunc_of(kernel: Any) -> Any:
    """The Python function of a ``ct.kernel``."""
    return kernel._annotated_function.pyfunc


def parameter_names(pyfunc: Any) -> list[str]:
    """The names of a kernel function's parameters, in order."""
    return list(inspect.signature(pyfunc).parameters)


def jit_convention(parameters: Any) -> Any:
    """The calling convention ``ct.launch`` compiles ``parameters`` with: v1, unless a tuple or an
    extent promise (``shape_constant``) needs v2."""
    from cuda.tile.compilation import ArrayConstraint, CallingConvention, TupleConstraint

    def needs_v2(c: Any) -> bool:
        if isinstance(c, TupleConstraint):
            return True
        return isinstance(c, ArrayConstraint) and any(v is not None for v in c.shape_constant)

    v2 = any(needs_v2(c) for c in parameters)
    return CallingConvention.cutile_python_v2() if v2 else CallingConvention.cutile_python_v1()


def signature_from_args(kernel: Any, args: tuple, calling_convention: Any = None) -> Any:
    """The ``KernelSignature`` ``ct.launch`` compiles ``kernel`` with for ``args`` (the module
    documentation says how), with its mangled symbol.

    ``calling_convention`` None picks the one ``ct.launch`` would (v1 where it suffices); a
    given one is used as ``KernelSignature.from_kernel_args`` uses it.
    """
    from cuda.tile.compilation import CallingConvention, KernelSignature

    name = pyfunc_of(kernel).__name__
    requested = calling_convention or CallingConvention.cutile_python_v2()
    try:
        parameters = KernelSignature.from_kernel_args(kernel, tuple(args), requested).parameters
    except OSError:  # no CUDA driver to load (cuTile reads arguments through it): the same rules here
        parameters = _derive(kernel, tuple(args), requested.version >= 2)
    convention = calling_convention or jit_convention(parameters)
    return KernelSignature(parameters, convention).with_mangled_symbol(name)


# --- the same rules without a driver ------------------------------------------------------------

_DIVISOR_BYTES = 16
_TMA_MAX_NDIM = 5


def _derive(kernel: Any, args: tuple, shape_one: bool) -> list:
    """cuTile's constraints for example arguments, for machines where cuTile cannot read them."""
    from cuda.tile._annotated_function import HeterogeneousTupleNode, HomogeneousTupleNode

    name = pyfunc_of(kernel).__name__
    annotations = kernel._annotated_function.parameter_annotations
    if len(args) != len(annotations):
        raise ArgumentError(f"kernel {name!r} takes {len(annotations)} arguments, {len(args)} given")
    labels = parameter_names(pyfunc_of(kernel))

    def leaf(node: Any, value: Any, label: str) -> Any:
        if isinstance(node, (HomogeneousTupleNode, HeterogeneousTupleNode)) or isinstance(value, tuple):
            if not isinstance(value, tuple):
                raise ArgumentError(f"kernel {name!r}, argument {label!r}: expected a tuple, got {value!r}")
            items = [node.each] * len(value) if isinstance(node, HomogeneousTupleNode) else (
                list(node.items) if isinstance(node, HeterogeneousTupleNode) else [node] * len(value))  # fmt: skip
            from cuda.tile.compilation import TupleConstraint

            return TupleConstraint(tuple(leaf(n, v, f"{label}[{j}]") for j, (n, v) in enumerate(zip(items, value))))
        if node.constant or value is None or (not _is_array(value) and not isinstance(value, (bool, int, float))):
            return _constant(value, name, label)
        if node.list is not None:
            raise ArgumentError(f"kernel {name!r}, argument {label!r}: list parameters need a KernelSignature here")
        if _is_array(value):
            return _array(value, node, shape_one, name, label)
        return _scalar(value, node)

    return [leaf(n, v, label) for n, v, label in zip(annotations, args, labels)]


def _is_array(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) or hasattr(value, "__cuda_array_interface__")


def _constant(value: Any, kernel: str, label: str) -> Any:
    from cuda.tile.compilation import ConstantConstraint

    try:
        return ConstantConstraint(value)
    except TypeError:
        raise ArgumentError(f"kernel {kernel!r}, argument {label!r}: cannot derive a constant from {value!r} here; "
                            "pass a KernelSignature") from None  # fmt: skip


def _scalar(value: Any, node: Any) -> Any:
    import cuda.tile as ct
    from cuda.tile.compilation import ScalarConstraint

    if isinstance(value, bool):
        return ScalarConstraint(ct.bool_)
    if isinstance(value, int):
        return ScalarConstraint(node.scalar.dtype if node.scalar is not None else ct.int32)
    return ScalarConstraint(ct.float32)


def _whole_bytes_of_16(stride: int, bits: int) -> bool:
    """Whether a stride of ``stride`` elements of ``bits`` bits is a whole multiple of 16 bytes."""
    return (stride * bits) % 8 == 0 and (stride * bits // 8) % _DIVISOR_BYTES == 0


def _array(value: Any, node: Any, shape_one: bool, kernel: str, label: str) -> Any:
    import cuda.tile as ct
    import numpy as np
    import torch
    from cuda.tile.compilation import ArrayConstraint

    array = node.array
    if array is not None and (getattr(array, "static_shape_dims", None) or getattr(array, "static_stride_dims", None)):
        raise ArgumentError(f"kernel {kernel!r}, argument {label!r}: static shape or stride annotations need a "
                            "KernelSignature here (or a GPU, where cuTile derives it)")  # fmt: skip
    if isinstance(value, torch.Tensor):
        dtype_name = str(value.dtype).removeprefix("torch.")
        shape, strides, address, bits = (
            tuple(value.shape),
            tuple(value.stride()),
            value.data_ptr(),
            value.element_size() * 8,
        )
    else:
        cai = value.__cuda_array_interface__
        np_dtype = np.dtype(cai["typestr"])
        dtype_name, bits = np_dtype.name, np_dtype.itemsize * 8
        shape = tuple(cai["shape"])
        raw = cai.get("strides")
        if raw is None:
            out, step = [], 1
            for n in reversed(shape):
                out.append(step)
                step *= n
            strides = tuple(reversed(out))
        else:
            strides = tuple(b // np_dtype.itemsize for b in raw)
        address = int(cai["data"][0])
    cutile_name = {"bool": "bool_"}.get(dtype_name, dtype_name)
    dtype = getattr(ct, cutile_name, None)
    if dtype is None:
        raise ArgumentError(f"kernel {kernel!r}, argument {label!r}: no cuTile dtype for {dtype_name}")
    index = array.index_dtype if array is not None and getattr(array, "index_dtype", None) is not None else ct.int32
    ndim = len(shape)
    special = ndim <= _TMA_MAX_NDIM  # cuTile specializes strides and extents of arrays up to 5-d only
    stride_divisor = _DIVISOR_BYTES * 8 // bits if (_DIVISOR_BYTES * 8) % bits == 0 else 1
    from .args import elements_disjoint

    return ArrayConstraint(
        dtype,
        ndim,
        index_dtype=index,
        stride_lower_bound_incl=0,
        alias_groups=(),
        may_alias_internally=not elements_disjoint(shape, strides),
        stride_constant=[1 if special and t == 1 else None for t in strides],
        shape_constant=[1 if special and shape_one and n == 1 else None for n in shape],
        stride_divisible_by=[stride_divisor if special and _whole_bytes_of_16(t, bits) else 1 for t in strides],
        shape_divisible_by=[_DIVISOR_BYTES if special and n % _DIVISOR_BYTES == 0 else 1 for n in shape],
        base_addr_divisible_by=_DIVISOR_BYTES if address % _DIVISOR_BYTES == 0 else 1,
    )
