"""Warp front end: ``@wp.kernel`` functions as launchpad Kernels that take torch tensors directly.

:func:`from_warp` compiles the kernel's module for one architecture through Warp's ahead-of-time
compiler (``wp.compile_aot_module(module, arch=...)``, NVRTC; no GPU needed; into Warp's own kernel
cache, which a later call reads back), or takes a cubin
compiled so earlier, and describes Warp's calling convention to the launch core: the launch bounds
first (``CONVERTERS["warp_bounds"]``, filled by ``kernel[dim]``), then per parameter of the Python
function an array (``CONVERTERS["warp_array"]``: one ``array_t`` struct packed from a tensor in the
compiled executor), a scalar (one parameter of its type; a Warp ``int`` is 32-bit) or a vector or
matrix value (``CONVERTERS["warp_value"]``), or a ``wp.struct`` (``CONVERTERS["warp_struct"]``: its
fields at Warp's offsets). A tile kernel launches as ``wp.launch_tiled`` launches it: the module's
``block_dim`` appended to every launch's dimensions, the dynamic shared memory of Warp's ``.meta``.
What launchpad does not pack yet (indexed and fabric arrays, clusters, lean ``grid_stride=False``
kernels, deterministic modules, generic kernels without an overload) is refused by name.

Warp is imported only here and only when compiling; a saved Warp kernel loads without it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...core import toolchain
from ...core.binary import cubin_arch, read_image
from ...core.params import POINTER_DTYPES
from ...core.spec import Arg, KernelSpec, LaunchPlan, spec_from_image
from ...errors import ArgumentTypeError, BinaryError, LaunchpadError
from .args import BOUNDS_BYTES, MAX_DIMS
from .compile import compile_module
from .kernel import WarpKernel
from .tiles import tiles_of_cubin, tiles_of_module
from .versions import check_version, check_warp

__all__ = ["SCALAR_WORDS", "from_warp", "warp_signature", "warp_spec"]

#: Warp scalar type name -> type word (a Warp ``int`` annotation is ``int32``, ``float`` ``float32``).
SCALAR_WORDS = {
    "bool": "i1", "int8": "i8", "uint8": "u8", "int16": "i16", "uint16": "u16", "int32": "i32", "uint32": "u32",
    "int64": "i64", "uint64": "u64", "float16": "fp16", "float32": "fp32", "float64": "fp64",
}  # fmt: skip
_TORCH = {word: POINTER_DTYPES[word] for word in set(SCALAR_WORDS.values())}
_SIZES = {"i1": 1, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "fp16": 2, "i32": 4, "u32": 4, "fp32": 4, "i64": 8,
          "u64": 8, "fp64": 8}  # fmt: skip


def from_warp(kernel: Any, *, arch: str | int | tuple[int, int] | None = None,
              cubin: bytes | str | Path | None = None) -> WarpKernel:  # fmt: skip
    """Compile a Warp kernel into a launchpad :class:`~launchpad.WarpKernel`.

    Parameters
    ----------
    kernel : warp.Kernel
        A ``@wp.kernel`` function (a generic one: an overload, ``wp.overload(kernel, {...})``).
    arch : optional
        ``"sm_90"``, ``90``, ``(9, 0)``, a GPU's name...; default: the current GPU's. Warp
        compiles the kernel's whole module for it (``wp.compile_aot_module``), with the module's
        ``block_dim`` (256 unless set).
    cubin : bytes or path, optional
        A cubin Warp compiled for this kernel's module earlier (``wp.compile_aot_module(...,
        use_ptx=False)``): nothing is compiled.

    Returns
    -------
    WarpKernel
        Launch with ``kernel[dim](*args)`` as ``wp.launch(kernel, dim, inputs=args)``: arrays as
        torch tensors (or objects with ``__cuda_array_interface__``; an array of ``vec3`` is a
        tensor of shape ``(..., 3)``), scalars as numbers, vectors and matrices as sequences or
        tensors of their components.

    Raises
    ------
    UnsupportedVersion
        Warp (PyPI ``warp-lang``) is missing or a release launchpad does not follow.
    LaunchpadError
        A parameter or kernel kind launchpad does not pack yet, named with the kernel.
    CompileError
        Warp could not compile the module.
    BinaryError
        ``cubin`` is not a cubin or lacks the kernel's entry.
    """
    wp = check_warp()
    if not isinstance(kernel, wp.Kernel):
        raise ArgumentTypeError(f"from_warp takes a @wp.kernel function, got {type(kernel).__name__}")
    name = str(getattr(kernel.func, "__name__", None) or kernel.key)
    _refuse_kinds(wp, kernel, name)
    block_dim = int(kernel.module.options.get("block_dim") or 256)
    if cubin is None:
        target = toolchain.resolve_arch(arch, kernel=name)
        image, meta, source = compile_module(wp, kernel, name, target)
        entry = f"{kernel.get_mangled_name()}_cuda_kernel_forward"
        tiled, shared = tiles_of_module(kernel, entry, meta, source)
    else:
        kernel.module.get_module_hash(block_dim)  # the hash Warp's names carry (unless strip_hash)
        entry = f"{kernel.get_mangled_name()}_cuda_kernel_forward"
        image, kind = read_image(cubin)
        if kind != "cubin":
            raise BinaryError(f"kernel {name!r}: expected a cubin compiled by Warp, got a {kind}")
        tiled, shared = tiles_of_cubin(kernel, name, entry, cubin, block_dim)
    if getattr(kernel, "grid_stride", True) is False:  # resolved when the module is hashed (above)
        raise LaunchpadError(f"kernel {name!r} is a lean kernel (grid_stride=False), launched on a 3-D grid; launchpad "
                             "launches grid-stride kernels; launch it with wp.launch")  # fmt: skip
    words, labels, args = warp_signature(kernel, name)
    spec = warp_spec(image, entry, name, words, labels, args, kernel_dim=int(kernel.adj.kernel_dim),
                     block_dim=block_dim, version=str(wp.__version__), tiled=tiled, shared_mem=shared)  # fmt: skip
    return WarpKernel(spec)


def _refuse_kinds(wp: Any, kernel: Any, name: str) -> None:
    """Refuse the kernels whose launch ``wp.launch`` does differently from the one launchpad makes."""
    why = ""
    if getattr(kernel, "is_generic", False):
        why = ("is generic: launch an overload (wp.overload(kernel, {...}) gives one; from_warp takes it), as "
               "launchpad compiles one signature")  # fmt: skip
    elif not getattr(kernel, "uses_warp_entry_point_abi", True):
        why = "uses another entry-point ABI (entry_point_abi), which wp.launch does not launch either"
    elif (kernel.options.get("cluster_dim") or 1) != 1:
        why = "launches in clusters (cluster_dim), which launchpad's Warp launch does not set up yet"
    elif _deterministic(wp, kernel):
        why = "is in a deterministic module, whose launches pass hidden buffers launchpad does not make"
    if why:
        raise LaunchpadError(f"kernel {name!r} {why}; launch it with wp.launch")


def _deterministic(wp: Any, kernel: Any) -> bool:
    """Whether the kernel's module asks for deterministic atomics (``DeterministicMode`` above 0)."""
    mode = kernel.module.options.get("deterministic")
    if mode is None:
        mode = getattr(wp.config, "deterministic", None)
    value = getattr(mode, "value", mode)
    return value not in (None, False, 0, "not_guaranteed")


def warp_signature(kernel: Any, name: str) -> tuple[list[str], list[str], list[Arg]]:
    """The entry's type words and parameter names, and one :class:`~launchpad.Arg` per argument
    (the launch bounds first, hidden at position 0 of ``Kernel.launch``), from the kernel's
    Python signature (``kernel.adj.args``).

    Raises
    ------
    LaunchpadError
        A parameter of a kind launchpad does not pack (``wp.struct``, indexed or fabric arrays,
        tiles...), naming the kernel and the parameter.
    """
    import warp as wp
    import warp.types as wt

    if not hasattr(kernel.adj, "kernel_dim"):  # set by Warp's reference walk, which hashing the module runs
        kernel.adj.get_references()
    n = int(kernel.adj.kernel_dim)
    if not 1 <= n <= MAX_DIMS:
        raise LaunchpadError(f"kernel {name!r}: launch_bounds_t<{n}> is outside Warp's 1-{MAX_DIMS} dimensions")
    words, labels = [f"bytes{BOUNDS_BYTES[n]}"], ["dim"]
    args = [Arg("dim", "expand", (0,), params=(0,), converter="warp_bounds", options={"kernel_dim": n})]
    for i, var in enumerate(kernel.adj.args):
        label, t, index, position = str(var.label), var.type, len(words), i + 1

        def refuse(why: str, label: str = label, t: Any = t) -> LaunchpadError:
            return LaunchpadError(f"kernel {name!r}, parameter {label!r} ({wt.type_repr(t)}): {why}; launch it with "
                                  "wp.launch")  # fmt: skip

        if wt.type_is_struct(t):
            layout = _struct_layout(wp, wt, t, label, refuse)
            words.append(f"bytes{layout['size']}")
            args.append(Arg(label, "expand", (position,), params=(index,), converter="warp_struct",
                            options={**layout, "name": label}))  # fmt: skip
        elif _plain_array(wp, t):
            scalar, element = _element(wt, t.dtype)
            if scalar not in SCALAR_WORDS:
                raise refuse(f"arrays of {wt.type_repr(t.dtype)} are not packed by launchpad")
            word = SCALAR_WORDS[scalar]
            shape = "x".join(map(str, element))
            what = f"a {t.ndim}-d array of {wt.type_repr(t.dtype)}" + (f" (a tensor of {_TORCH[word]} with {shape} "
                                                                        "as its last dimensions)" if element else "")  # fmt: skip
            words.append("bytes56")
            args.append(Arg(label, "expand", (position,), params=(index,), converter="warp_array",
                            options={"ndim": int(t.ndim), "dtype": _TORCH[word], "itemsize": _SIZES[word],
                                     "element": list(element), "type": what}))  # fmt: skip
        elif wt.type_is_array(t) or "array" in type(t).__name__:
            raise refuse(f"{type(t).__name__} parameters are not packed by launchpad (plain wp.array ones are)")
        elif _is_composite(wt, t):
            scalar, element = _element(wt, t)
            if scalar not in SCALAR_WORDS or SCALAR_WORDS[scalar] == "i1":
                raise refuse("this element type is not packed by launchpad")
            word = SCALAR_WORDS[scalar]
            words.append(f"bytes{math.prod(element) * _SIZES[word]}")
            args.append(Arg(label, "expand", (position,), params=(index,), converter="warp_value",
                            options={"word": word, "shape": list(element), "type": wt.type_repr(t)}))  # fmt: skip
        elif getattr(t, "__name__", None) in SCALAR_WORDS and (wt.type_is_scalar(t) or t is wp.bool):
            words.append(SCALAR_WORDS[t.__name__])
            args.append(Arg(label, "param", (position,), index))
        else:
            raise refuse("launchpad packs arrays, scalars, vectors and matrices only")
        labels.append(label)
    return words, labels, args


def _struct_layout(wp: Any, wt: Any, t: Any, path: str, refuse: Callable[[str], Exception]) -> dict:
    """``CONVERTERS["warp_struct"]``'s options for struct type ``t``: its size and, per field, its
    offset in Warp's ctypes structure (the C layout of the generated code) and how to pack it."""
    import ctypes

    ctype, fields = t.ctype, []
    for name, var in t.vars.items():
        ft, offset, where = var.type, getattr(ctype, name).offset, f"{path}.{name}"
        if wt.type_is_struct(ft):
            field = {**_struct_layout(wp, wt, ft, where, refuse), "kind": "struct"}
        elif _plain_array(wp, ft):
            scalar, element = _element(wt, ft.dtype)
            if scalar not in SCALAR_WORDS:
                raise refuse(f"field {where!r} is an array of {wt.type_repr(ft.dtype)}, which launchpad does not pack")
            word = SCALAR_WORDS[scalar]
            field = {"kind": "array", "ndim": int(ft.ndim), "dtype": _TORCH[word], "itemsize": _SIZES[word],
                     "element": list(element), "type": f"a {ft.ndim}-d array of {wt.type_repr(ft.dtype)}"}  # fmt: skip
        elif _is_composite(wt, ft) or (getattr(ft, "__name__", None) in SCALAR_WORDS and
                                       (wt.type_is_scalar(ft) or ft is wp.bool)):  # fmt: skip
            scalar, element = _element(wt, ft)
            if scalar not in SCALAR_WORDS or (element and SCALAR_WORDS[scalar] == "i1"):
                raise refuse(f"field {where!r} ({wt.type_repr(ft)}) is of a type launchpad does not pack")
            field = {"kind": "value" if element else "scalar", "word": SCALAR_WORDS[scalar],
                     "shape": list(element) or [1], "type": wt.type_repr(ft) if element else scalar}  # fmt: skip
        else:
            raise refuse(f"field {where!r} ({wt.type_repr(ft)}) is of a kind launchpad does not pack in a wp.struct "
                         "(it packs arrays, scalars, vectors, matrices and structs)")  # fmt: skip
        fields.append({"name": name, "offset": offset, **field})
    return {"native_name": str(t.native_name), "size": ctypes.sizeof(ctype), "fields": fields}


def _plain_array(wp: Any, t: Any) -> bool:
    """Whether an annotation is a plain ``wp.array`` (``wp.array(dtype=...)`` or ``wp.array[...]``)."""
    try:
        from warp._src.codegen import matches_array_class
    except ImportError:  # (a Warp without it: the call form alone)
        return type(t) is wp.array
    return bool(matches_array_class(t, wp.array))


def _is_composite(wt: Any, t: Any) -> bool:
    return any(f(t) for f in (wt.type_is_vector, wt.type_is_matrix, wt.type_is_quaternion, wt.type_is_transformation))


def _element(wt: Any, t: Any) -> tuple[str, tuple[int, ...]]:
    """The scalar type name of a dtype and its own extents (``()`` for a scalar)."""
    if _is_composite(wt, t):
        return t._wp_scalar_type_.__name__, tuple(int(d) for d in t._shape_)
    return getattr(t, "__name__", repr(t)), ()


def warp_spec(image: bytes, entry: str, name: str, words: list[str], labels: list[str], args: list[Arg], *,
              kernel_dim: int, block_dim: int, version: str, tiled: bool = False,
              shared_mem: int = 0) -> KernelSpec:  # fmt: skip
    """The finished spec of a Warp kernel's forward entry in a cubin (see :func:`from_warp`): a tile
    kernel's (``tiled``) dynamic shared memory in its plan, every launch of it ``wp.launch_tiled``'s."""
    check_version(version)
    spec = spec_from_image(image, "cubin", entry, signature=words, display_name=name)
    params = tuple(p.__class__(**{**p.to_json(), "name": labels[p.index]}) for p in spec.params)
    return spec.replace(
        params=params,
        args=tuple(args),
        plan=LaunchPlan(block=(block_dim, 1, 1), shared_mem=shared_mem),
        metadata={
            "frontend": "warp",
            "warp_version": version,
            "kernel_dim": kernel_dim,
            "block_dim": block_dim,
            **({"tiled": True} if tiled else {}),
            "arch": cubin_arch(image) or "",
        },
    )
