"""Triton front end: Triton kernels as launchpad :class:`~launchpad.Kernel` objects.

Four ways in, one description out (image, entry name, parameters, argument mapping, launch
plan), following the calling convention of Triton's own launcher (``CudaLauncher`` in
``triton/backends/nvidia/driver.py``) of the release that compiled the kernel, 3.4 to 3.9; what
differs between releases is decided in :mod:`launchpad._triton_versions`:

- :func:`from_triton` of a ``CompiledKernel`` (what ``jit_fn.warmup`` or ``triton.compile``
  return), or of a ``@triton.jit`` function plus a signature, compiled here (for the current
  GPU, or for any ``GPUTarget`` without one).
- :func:`load_triton` of a Triton cache folder, without importing Triton.
- :func:`~launchpad._triton_launcher.triton_launcher` (its own module), a drop-in for
  ``jit_fn[grid](...)`` that builds on :func:`from_triton`.

The parameter list always comes from the cubin (``.nv.info``) and takes its types from Triton's
signature through :func:`~launchpad._layout.apply_signature`, which checks count and sizes.
Python arguments map onto parameters with :class:`~launchpad._launcher.Arg`: ``param`` (with
``align``/``multiple_of`` for the divisibility-16 specializations, so that a violating value
raises instead of faulting), ``const`` for constexprs and values specialized away (an int equal
to 1, None), ``expand`` for host tensor descriptors (``launchpad._tensordesc``), and ``scratch``
for the hidden trailing ``global_scratch``/``profile_scratch`` pointers.

Triton is imported lazily, inside the functions that need it: importing launchpad, loading a
cache folder and loading a saved artifact never import it.
"""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ._binary import kernels_in_image
from ._spec import Arg, KernelSpec, LaunchPlan
from ._triton_versions import Convention, check_installed, convention
from ._types import POINTER_DTYPES, Param, apply_signature
from .errors import ArgumentError, BinaryError, CompileError, LaunchpadError
from .kernel import Kernel

__all__ = ["from_triton", "load_triton"]


# --- the common description --------------------------------------------------------------------


@dataclass(frozen=True)
class _Leaf:
    """One leaf of the Python signature (tuples flattened): a runtime value or a constant."""

    name: str  # the Python argument's name
    path: tuple[int, ...]  # (argument position, *indices into tuples)
    type: str  # Triton type word: "*fp32", "i32", "tensordesc<fp16[64, 64]>" or "constexpr"
    value: Any = None  # the constant, for "constexpr"
    divisible: bool = False  # specialized divisible by 16 (pointer alignment / int multiple)
    options: tuple[tuple[str, Any], ...] = ()  # a constant's Arg options ("unknown", "one_or_none")

    @property
    def label(self) -> str:
        return self.name + "".join(f"[{i}]" for i in self.path[1:])


# "tensordesc<fp16[64, 64]>"; a "?" block dimension is one the TTIR of a pointer-form descriptor does not record
_TENSORDESC = re.compile(r"tensordesc<(\w+)\[([\d?,\s]*)\]")
_BOOL_WIDE = {"u1": "u32", "i1": "i32"}  # Triton 3.4 passed bools as 32-bit ints


def _word(ty: str) -> str:
    """A Triton signature type as a launchpad type word."""
    if ty.startswith("*k"):  # a pointer to const data ("const" annotation): same bits
        return "*" + ty[2:]
    if ty == "nvTmaDesc":  # Triton 3.4's pre-encoded CUtensorMap, passed by value
        return "bytes128"
    return ty


def _divisible(attrs: Any) -> bool:
    """Whether Triton attributes (``[["tt.divisibility", 16]]``) promise divisibility by 16."""
    for item in attrs or ():
        if isinstance(item, (list, tuple)) and len(item) == 2 and item[0] == "tt.divisibility":
            return int(item[1]) % 16 == 0
    return False


def _jsonable(value: Any) -> Any:
    """A constant as JSON: tuples as lists; Triton dtypes, functions and the like as their str()."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if type(value).__name__ == "constexpr" and hasattr(value, "value"):  # tl.constexpr wrapper
        return _jsonable(value.value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return str(value)


def _plan(md: dict, conv: Convention | None = None) -> LaunchPlan:
    """What every launch of a Triton kernel fixes, from its metadata."""
    conv = conv or convention(md)
    warp_size = (md.get("target") or {}).get("warp_size") or md.get("warp_size") or 32
    num_ctas = md.get("num_ctas", 1) or 1
    cluster: tuple[int, int, int] | None = None
    if num_ctas != 1:
        dims = md.get("cluster_dims")
        if dims:  # Triton 3.4/3.5: grid and cluster come from cluster_dims
            x, y, z = (int(d) for d in dims)
            cluster = (x, y, z)
            if cluster[1:] != (1, 1):
                raise LaunchpadError(f"cluster_dims {cluster} (a cluster along y or z) is not supported")
        else:
            cluster = (num_ctas, 1, 1)
    # Triton's grid counts programs, each a cluster of num_ctas blocks along x
    return LaunchPlan(
        block=(warp_size * md["num_warps"], 1, 1),
        shared_mem=int(md.get("shared", 0) or 0),
        cluster=cluster,
        grid_in_clusters=cluster is not None,
        cluster_spread=cluster is not None,
        cooperative=bool(md.get("launch_cooperative_grid", False)),
        pdl=bool(md.get("launch_pdl", False)),
        oversized_shared=conv.oversized_shared,
    )


def _build(image: bytes, md: dict, leaves: list[_Leaf] | None, display_name: str) -> KernelSpec:
    """The Kernel of a Triton cubin: params from the binary, typed by ``leaves``."""
    name = md["name"]
    try:
        binary = kernels_in_image(image, "cubin").get(name)
    except BinaryError as exc:
        raise BinaryError(f"kernel {display_name!r}: {exc}") from None
    if binary is None:
        symbol = f" (symbol {name})" if name != display_name else ""
        raise BinaryError(f"kernel {display_name!r}{symbol} is not in the cubin")
    cubin = list(binary.params)
    conv = convention(md)
    if leaves is None:
        return _build_untyped(image, md, binary, cubin, conv, display_name)

    descriptors = md.get("tensordesc_meta") or []
    words: list[str] = []
    labels: list[str] = []
    args: list[Arg] = []
    n_desc = 0
    for leaf in leaves:
        if leaf.type == "constexpr":
            args.append(Arg(leaf.name, "const", leaf.path, value=_jsonable(leaf.value), options=dict(leaf.options)))
            continue
        m = _TENSORDESC.match(leaf.type)
        if m:
            elem = m.group(1)
            dims_text = [d.strip() for d in m.group(2).split(",") if d.strip()]
            rank = len(dims_text)
            block = None if "?" in dims_text else [int(d) for d in dims_text]
            meta = descriptors[n_desc] if descriptors else None
            n_desc += 1
            start = len(words)
            dims = [f"{leaf.label}.shape[{d}]" for d in range(rank)]
            strides = [f"{leaf.label}.strides[{d}]" for d in range(rank)]
            if meta:
                words += ["bytes128"] + ["i32"] * rank + ["i64"] * rank
                labels += [leaf.label, *dims, *strides]
            else:
                flags = conv.descriptor_flags
                words += ["*" + elem] + ["i64"] * (2 * rank) + ["u1"] * len(flags) + ["i32"] * rank + ["i64"] * rank
                labels += [leaf.label, *dims, *strides] + [f"{leaf.label}.{f}" for f in flags] + [*dims, *strides]
            args.append(Arg(
                leaf.name, "expand", leaf.path, params=tuple(range(start, len(words))), converter="tensordesc",
                options=_descriptor_options(rank, elem if POINTER_DTYPES.get(elem) else "", block, meta, conv),
            ))  # fmt: skip
            continue
        word = _word(leaf.type)
        pointer = word.startswith("*")
        args.append(Arg(
            leaf.name, "param", leaf.path, param=len(words),
            align=16 if leaf.divisible and pointer else 0,
            multiple_of=16 if leaf.divisible and not pointer and word[0] in "iu" else 0,
        ))  # fmt: skip
        words.append(word)
        labels.append(leaf.label)
    for which in conv.scratch:
        args.append(_scratch_arg(md, which, len(words), conv))
        words.append("*i8")
        labels.append(f"{which}_scratch")
    # Triton 3.4 passed bools as 32-bit ints; the binary says which width this one has.
    words = [
        _BOOL_WIDE[w] if w in _BOOL_WIDE and i < len(cubin) and cubin[i].size == 4 else w for i, w in enumerate(words)
    ]
    params = apply_signature(cubin, words, display_name)
    params = [replace(p, name=label) for p, label in zip(params, labels)]
    return KernelSpec(image, "cubin", name, tuple(params), tuple(args), _plan(md, conv), display_name, _metadata(md))


def _descriptor_options(rank: int, dtype: str, block: list[int] | None, meta: Any, conv: Convention) -> dict:
    """The ``tensordesc`` converter's options for one descriptor argument (see :mod:`launchpad._tensordesc`)."""
    return {
        "rank": rank, "dtype": dtype, "block": block, "meta": _jsonable(meta) if meta else None,
        "flags": list(conv.descriptor_flags), "fp4_shape_doubled": conv.fp4_shape_doubled,
        "tf32_maps": conv.tf32_maps,
    }  # fmt: skip


def _scratch_arg(md: dict, which: str, param: int, conv: Convention) -> Arg:
    """The hidden ``global_scratch`` or ``profile_scratch`` pointer: per-launch memory, NULL when unused."""
    options = {"size": int(md.get(f"{which}_scratch_size") or 0), "align": int(md.get(f"{which}_scratch_align") or 1)}
    if which == "profile" and conv.zeroed_profile_scratch:
        options["zero"] = True
    return Arg(f"{which}_scratch", "scratch", (), param=param, options=options)


def _build_untyped(image, md, binary, cubin: list[Param], conv: Convention, display_name: str) -> KernelSpec:
    """A cubin and its metadata only (no TTIR): sizes from the binary, one argument per param.

    Tensor descriptors in TMA form are still recognized (a 128-byte parameter with a
    ``tensordesc_meta`` entry) and take a descriptor; everything else takes its raw value.
    """
    scratch = conv.scratch
    n = len(cubin) - len(scratch)
    if n < 0:
        raise LaunchpadError(f"kernel {md['name']!r}: the cubin has fewer parameters than Triton's hidden ones")
    descriptors = [m for m in md.get("tensordesc_meta") or [] if m]
    params: list[Param] = []
    args: list[Arg] = []
    i = n_desc = 0
    typed = lambda p, w, label: replace(apply_signature([p], [w], display_name)[0], name=label)
    while i < n:
        p = cubin[i]
        position = len({a.path[0] for a in args})
        if p.size == 128 and n_desc < len(descriptors):
            meta = descriptors[n_desc]
            rank = len(meta["block_size"])
            label = f"arg{position}"
            words = ["bytes128"] + ["i32"] * rank + ["i64"] * rank
            for j, w in enumerate(words):
                params.append(
                    typed(cubin[i + j], w, label if j == 0 else f"{label}.{'shape' if j <= rank else 'strides'}")
                )
            args.append(
                Arg(
                    label,
                    "expand",
                    (position,),
                    params=tuple(range(i, i + len(words))),
                    converter="tensordesc",
                    options=_descriptor_options(rank, "", None, meta, conv),
                )
            )
            i += len(words)
            n_desc += 1
            continue
        params.append(replace(p, name=f"arg{position}"))
        args.append(Arg(f"arg{position}", "param", (position,), param=i))
        i += 1
    for which, p in zip(scratch, cubin[n:]):
        params.append(typed(p, "*i8", f"{which}_scratch"))
        args.append(_scratch_arg(md, which, p.index, conv))
    return KernelSpec(
        image, "cubin", md["name"], tuple(params), tuple(args), _plan(md, conv), display_name, _metadata(md)
    )


def _metadata(md: dict) -> dict:
    """Triton's metadata as JSON (the same keys as the cache's ``NAME.json``)."""
    return json.loads(json.dumps(_jsonable(dict(md))))


# --- CompiledKernel ----------------------------------------------------------------------------


def _metadata_of(compiled: Any) -> dict:
    md = compiled.metadata
    md = md._asdict() if hasattr(md, "_asdict") else dict(md)
    target = md.get("target")
    if target is not None and not isinstance(target, dict):
        md["target"] = {"backend": target.backend, "arch": target.arch, "warp_size": target.warp_size}
    return md


def _source_leaves(src: Any) -> list[_Leaf]:
    """The leaves of an ``ASTSource``: its function's arguments, signature, constants and attrs."""
    names = list(src.fn.arg_names)
    signature = dict(src.signature)
    constants = {(k if isinstance(k, tuple) else (names.index(k),)): v for k, v in (src.constants or {}).items()}
    attrs = {(k if isinstance(k, tuple) else (names.index(k),)): v for k, v in (src.attrs or {}).items()}
    leaves: list[_Leaf] = []

    def walk(name: str, path: tuple[int, ...], ty: Any) -> None:
        if path in constants:
            leaves.append(_Leaf(name, path, "constexpr", constants[path]))
        elif isinstance(ty, (tuple, list)):
            if not ty:  # an empty tuple: nothing reaches the kernel, but the argument is passed
                leaves.append(_Leaf(name, path, "constexpr", ()))
            for j, t in enumerate(ty):
                walk(name, (*path, j), t)
        elif ty == "constexpr":
            leaves.append(_Leaf(name, path, "constexpr", None))
        elif ty is None:
            raise LaunchpadError(f"the signature has no type for argument {name!r}")
        else:
            leaves.append(_Leaf(name, path, str(ty), divisible=_divisible(attrs.get(path))))

    for i, name in enumerate(names):
        walk(name, (i,), signature.get(name))
    return leaves


def _from_compiled(compiled: Any) -> KernelSpec:
    md = _metadata_of(compiled)
    image = compiled.asm["cubin"]
    src = getattr(compiled, "src", None)
    leaves: list[_Leaf] | None
    if src is not None and hasattr(src, "fn") and hasattr(src.fn, "arg_names"):
        leaves = _source_leaves(src)
        display = src.fn.__name__
    else:  # compiled from an IR file: the TTIR names the runtime arguments
        ttir = compiled.asm.get("source") or compiled.asm.get("ttir")
        leaves = _ttir_leaves(ttir, md["name"], convention(md)) if ttir else None
        display = md["name"]
    spec = _build(image, md, leaves, display)
    if src is not None and hasattr(src, "signature"):
        spec.metadata["signature"] = _jsonable({str(k): v for k, v in src.signature.items()})
    return spec


def kernel_of(spec: KernelSpec, fn: Any = None) -> Kernel:
    """The Kernel of a Triton spec; ``fn``, the JIT function it came from, gives its launch hooks
    the function's ``launch_metadata``, as Triton's launcher passes them."""
    kernel = Kernel(spec)
    hooks = kernel._executor.hooks
    if hooks is not None and fn is not None:
        hooks.launch_metadata = getattr(fn, "launch_metadata", None)
    return kernel


# --- compiling a jit function --------------------------------------------------------------------


def _target(target: Any) -> Any:
    from triton.backends.compiler import GPUTarget

    if target is None:
        from triton.runtime.driver import driver

        return driver.active.get_current_target()
    if isinstance(target, GPUTarget):
        return target
    if isinstance(target, int):
        return GPUTarget("cuda", target, 32)
    if isinstance(target, (tuple, list)) and len(target) == 3:
        return GPUTarget(*target)
    raise ArgumentError(f"target must be a triton GPUTarget, an int arch (90) or None, got {target!r}")


def _run_options(jit_fn: Any, kwargs: dict, backend: Any) -> dict:
    """The compile options ``jit_fn[grid](..., **kwargs)`` would use (see ``JITFunction.run``):
    the debug flag, and the compilation knobs Triton adds to every launch's options where this
    Triton has them (``instrumentation_mode`` from 3.6, ``fpsan_homomorphic_casts`` from 3.9)."""
    from triton import knobs

    kwargs = dict(kwargs)
    kwargs["debug"] = kwargs.get("debug", getattr(jit_fn, "debug", None)) or knobs.runtime.debug
    known = backend.parse_options({}).__dict__
    compilation = getattr(knobs, "compilation", None)
    for knob in ("instrumentation_mode", "fpsan_homomorphic_casts"):
        if knob in known and hasattr(compilation, knob):
            kwargs[knob] = getattr(compilation, knob)
    return kwargs


def _signature_of(jit_fn: Any, signature: Any, constexprs: dict) -> dict:
    """A full ASTSource signature: name -> type, with "constexpr" for every constant."""
    names = list(jit_fn.arg_names)
    const_names = {k for k in constexprs if isinstance(k, str)}
    if signature is None:
        signature = {}
    if isinstance(signature, dict):
        sig = dict(signature)
        unknown = [k for k in sig if k not in names]
        if unknown:
            raise ArgumentError(
                f"kernel {jit_fn.__name__!r}: signature names unknown arguments {unknown} (arguments: {names})"
            )
    else:
        words = [w.strip() for w in signature.split(",")] if isinstance(signature, str) else list(signature)
        runtime = [n for n, p in zip(names, jit_fn.params) if n not in const_names and not p.is_constexpr]
        if len(words) != len(runtime):
            raise ArgumentError(
                f"kernel {jit_fn.__name__!r}: {len(words)} signature types for {len(runtime)} runtime arguments {runtime}"
            )
        sig = dict(zip(runtime, words))
    for name in names:
        if name in const_names:
            sig.setdefault(name, "constexpr")
    missing = [n for n in names if n not in sig]
    if missing:
        raise ArgumentError(f"kernel {jit_fn.__name__!r}: no type or constexpr value for arguments {missing}")
    return {n: sig[n] for n in names}


def _attrs_of(jit_fn: Any, attrs: Any) -> dict:
    names = list(jit_fn.arg_names)
    out = {}
    for key, value in (attrs or {}).items():
        path = (names.index(key),) if isinstance(key, str) else (key,) if isinstance(key, int) else tuple(key)
        out[path] = [["tt.divisibility", 16]] if value in ("D", 16) else value
    return out


def _compile_jit(
    jit_fn: Any,
    signature: Any,
    constexprs: dict | None,
    attrs: Any,
    target: Any,
    options: dict,
) -> Any:
    check_installed()
    import triton
    from triton.compiler import ASTSource, make_backend

    if not hasattr(jit_fn, "arg_names") or not hasattr(jit_fn, "params"):
        raise ArgumentError(f"expected a @triton.jit function or a CompiledKernel, got {type(jit_fn).__name__}")
    constexprs = dict(constexprs or {})
    for p in jit_fn.params:  # constexpr arguments left out take their defaults, as at a launch
        if p.is_constexpr and p.name not in constexprs:
            if not p.has_default:
                raise ArgumentError(
                    f"kernel {jit_fn.__name__!r}: constexpr argument {p.name!r} needs a value in constexprs"
                )
            constexprs[p.name] = p.default
    target = _target(target)
    backend = make_backend(target)
    options = _run_options(jit_fn, {k: v for k, v in options.items() if v is not None}, backend)
    src = ASTSource(jit_fn, _signature_of(jit_fn, signature, constexprs), constexprs, _attrs_of(jit_fn, attrs))
    try:
        return triton.compile(src, target=target, options=options)
    except LaunchpadError:
        raise
    except Exception as exc:  # Triton's CompilationError, MLIR pass and ptxas failures: the user's code
        raise CompileError(
            f"Triton could not compile kernel {jit_fn.__name__!r} for {target.backend} {target.arch}: "
            f"{type(exc).__name__}",
            str(exc).strip(),
        ) from exc


def from_triton(
    compiled_or_jit: Any,
    *,
    signature: dict[str, Any] | str | Iterable[str] | None = None,
    constexprs: dict[Any, Any] | None = None,
    attrs: dict[Any, Any] | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    target: Any = None,
    **options: Any,
) -> Kernel:
    """A :class:`~launchpad.Kernel` for a Triton kernel.

    Parameters
    ----------
    compiled_or_jit
        A ``triton.compiler.CompiledKernel`` (from ``jit_fn.warmup(...)``, ``jit_fn[grid](...)``
        or ``triton.compile``), or a ``@triton.jit`` function to compile here.
    signature
        For a jit function: the types of its runtime arguments, as Triton's ``ASTSource`` takes
        them (``{"x_ptr": "*fp32", "n": "i32", "t": ("*fp16", "i32")}``), or a string/list of
        types in argument order for the arguments that are not constexprs.
    constexprs
        Values of constexpr arguments and of arguments to specialize away (an int equal to 1,
        None), by name or, inside tuples, by path ``(arg_index, item_index)``. Constexpr
        arguments left out take their defaults.
    attrs
        Triton attributes by argument name or path: ``"D"`` (or ``[["tt.divisibility", 16]]``)
        compiles assuming the pointer is 16-byte aligned or the int a multiple of 16; the launch
        then checks it.
    num_warps, num_stages, **options
        Triton compile options (``num_ctas``, ``maxnreg``, ``launch_pdl``, ...).
    target
        A ``triton.backends.compiler.GPUTarget`` (``GPUTarget("cuda", 90, 32)``, compiles without
        a GPU), an int compute capability (90), or None for the current device.

    Returns
    -------
    Kernel
        Launch with ``kernel[grid](*args)`` or ``kernel.launch(grid, None, *args)``, passing every
        Python argument in order as with ``CompiledKernel[grid](...)``: constexprs and
        specialized values too, which must equal what the kernel was compiled for.

    Raises
    ------
    CompileError
        Triton could not compile the jit function (the message names it; Triton's own error,
        with its source location, is the log and the ``__cause__``).
    ArgumentError
        The signature, constexprs or target do not fit the jit function.
    BinaryError
        The cubin does not hold the kernel the metadata names, or is damaged.
    """
    if not hasattr(compiled_or_jit, "asm") and hasattr(compiled_or_jit, "result"):
        compiled_or_jit = compiled_or_jit.result()  # a FutureKernel of Triton's async compile mode
    if hasattr(compiled_or_jit, "asm") and hasattr(compiled_or_jit, "metadata"):
        src = getattr(compiled_or_jit, "src", None)
        return kernel_of(_from_compiled(compiled_or_jit), getattr(src, "fn", None))
    options = {"num_warps": num_warps, "num_stages": num_stages, **options}
    compiled = _compile_jit(compiled_or_jit, signature, constexprs, attrs, target, options)
    return kernel_of(_from_compiled(compiled), compiled_or_jit)


# --- Triton's cache folder (no Triton import) ----------------------------------------------------

_ELEMENT_TYPES = {
    "f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64", "f8E4M3FN": "fp8e4nv", "f8E5M2": "fp8e5",
    "f8E4M3FNUZ": "fp8e4b8", "f8E5M2FNUZ": "fp8e5b16", "f8E4M3B11FNUZ": "fp8e4b15", "i1": "u1",
}  # fmt: skip
_INT_TYPE = re.compile(r"i(8|16|32|64)")


def _ttir_type(ty: str, where: str) -> str:
    """A TTIR argument type as a Triton type word.

    MLIR integers are signless: an unsigned argument (``u32``, ``u64``) reads as ``i32``/``i64``
    here, and a pointer to ints as ``*void`` (its dtype is not checked, which Triton does not
    either). Descriptors read ``!tt.tensordesc<tensor<64x64xf16>>`` up to Triton 3.7 and
    ``!tt.tensordesc<64x64xf16>`` from 3.8.
    """
    ty = ty.strip()
    m = re.fullmatch(r"!tt\.ptr<([^,>]+)(?:,\s*\d+)?>", ty)
    if m:
        elem = m.group(1).strip()
        if elem in _ELEMENT_TYPES:
            return "*" + _ELEMENT_TYPES[elem]
        if _INT_TYPE.fullmatch(elem):
            return "*void"
        raise LaunchpadError(f"{where}: unsupported pointer type {ty!r}")
    m = re.fullmatch(r"!tt\.tensordesc<(?:tensor<)?([\dx]+)x(\w+)(?:,[^>]*)?>?>", ty)
    if m:
        block = [int(d) for d in m.group(1).split("x")]
        elem = _ELEMENT_TYPES.get(m.group(2)) or ("void" if _INT_TYPE.fullmatch(m.group(2)) else m.group(2))
        return f"tensordesc<{elem}[{', '.join(map(str, block))}]>"
    if ty in _ELEMENT_TYPES:
        return _ELEMENT_TYPES[ty]
    if _INT_TYPE.fullmatch(ty):
        return ty
    raise LaunchpadError(f"{where}: unsupported argument type {ty!r}")


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside (), <>, {}, [] and quotes."""
    out, depth, start, quoted = [], 0, 0, False
    for i, c in enumerate(text):
        if c == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif c in "(<{[":
            depth += 1
        elif c in ")>}]":
            depth -= 1
        elif c == sep and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [s.strip() for s in out if s.strip()]


def _ttir_arguments(ttir: str, name: str) -> list[tuple[str, str, bool]]:
    """``(loc name, type, divisible)`` of each argument of the public function ``name``."""
    aliases = dict(re.findall(r'^(#loc\d*)\s*=\s*loc\("([^"]*)"\(', ttir, re.M))
    m = re.search(rf"tt\.func\s+public\s+@{re.escape(name)}\s*\(", ttir) or re.search(
        r"tt\.func\s+public\s+@[\w$.]+\s*\(", ttir
    )
    if m is None:
        raise LaunchpadError(f"no public tt.func in the TTIR of {name!r}")
    depth, end = 1, m.end()
    while depth and end < len(ttir):
        depth += {"(": 1, ")": -1}.get(ttir[end], 0)
        end += 1
    out = []
    for i, piece in enumerate(_split_top(ttir[m.end() : end - 1])):
        am = re.match(r"%[\w$.-]+\s*:\s*", piece)
        rest = piece[am.end() :] if am else piece
        cut = min((k for k in (rest.find(" {"), rest.find(" loc(")) if k >= 0), default=len(rest))
        ty, tail = rest[:cut], rest[cut:]
        # a named argument is loc("x_ptr"(#loc)); Triton 3.4 gives only the file position, loc("f.py":16:0)
        lm = re.search(r'loc\("([^"]*)"\(', tail) or re.search(r"loc\((#loc\d*)\)", tail)
        loc = str(lm.group(1)) if lm else ""
        loc = aliases.get(loc, loc) if loc.startswith("#") else loc
        dm = re.search(r"tt\.divisibility\s*=\s*(\d+)", tail)
        out.append((loc, _ttir_type(ty, f"kernel {name!r}, argument {i}"), bool(dm and int(dm.group(1)) % 16 == 0)))
    return out


def _ttir_leaves(ttir: str, name: str, conv: Convention) -> list[_Leaf]:
    """The runtime arguments a TTIR function takes, as leaves.

    Constexprs and specialized values are compiled away and absent from the TTIR. The parts of
    one Python argument (the items of a tuple, a tensor descriptor's shape and strides) are
    consecutive and carry the argument's name: all of them the bare name in Triton 3.5 to 3.7,
    and ``t.0``, ``d.shape.0``, ``d.padding`` ... from 3.8 (see :mod:`launchpad._triton_versions`).
    Triton 3.4 names none: names then come from the kernel's ``def`` where the source is readable
    and the count fits, and tuple items read as separate arguments.
    """
    arguments = _ttir_arguments(ttir, name)
    if not any(loc for loc, _, _ in arguments):
        names = _source_parameter_names(ttir, _fold_descriptors(arguments, conv), len(arguments))
        arguments = [(n, ty, divisible) for n, (_, ty, divisible) in zip(names, arguments)]
    root_of = (lambda loc: loc.split(".")[0]) if conv.dotted_ttir_names else (lambda loc: loc)
    groups: list[tuple[str, list[tuple[str, str, bool]]]] = []  # (argument name, its values)
    for i, (loc, ty, divisible) in _fold_descriptors(arguments, conv):
        if loc and groups and groups[-1][0] == root_of(loc):
            groups[-1][1].append((loc, ty, divisible))
        else:
            groups.append((root_of(loc) if loc else f"arg{i}", [(loc or f"arg{i}", ty, divisible)]))
    leaves: list[_Leaf] = []
    for position, (root, items) in enumerate(groups):
        single = len(items) == 1 and items[0][0] == root
        for j, (loc, ty, divisible) in enumerate(items):
            if single:
                path: tuple[int, ...] = (position,)
            elif conv.dotted_ttir_names:
                path = (position, *(int(k) for k in loc.split(".")[1:]))
            else:
                path = (position, j)
            leaves.append(_Leaf(root, path, ty, divisible=divisible))
    return leaves


def _fold_descriptors(
    arguments: list[tuple[str, str, bool]], conv: Convention
) -> list[tuple[int, tuple[str, str, bool]]]:
    """``(index, argument)`` of each TTIR argument that is a Python value: a descriptor's shape,
    strides and flags are folded into it (a pointer-form descriptor's type becomes
    ``tensordesc<fp16[?, ?]>``)."""
    out, i = [], 0
    while i < len(arguments):
        loc, ty, divisible = arguments[i]
        m = _TENSORDESC.match(ty)
        if m:  # TMA form: the descriptor, then its shape (i32) and strides (i64)
            rank = len([d for d in m.group(2).split(",") if d.strip()])
            if [t for _, t, _ in arguments[i + 1 : i + 1 + 2 * rank]] == ["i32"] * rank + ["i64"] * rank:
                out.append((i, (loc, ty, divisible)))
                i += 1 + 2 * rank
                continue
        elif ty.startswith("*") and (rank := _pointer_descriptor_rank(arguments, i, conv)):
            out.append((i, (loc, f"tensordesc<{ty[1:]}[{', '.join(['?'] * rank)}]>", False)))
            i += 1 + 4 * rank + len(conv.descriptor_flags)
            continue
        out.append((i, (loc, ty, divisible)))
        i += 1
    return out


def _pointer_descriptor_rank(arguments: list[tuple[str, str, bool]], i: int, conv: Convention) -> int:
    """The rank of the pointer-form descriptor starting at ``arguments[i]``, or 0 when it is none.

    Its parts: base pointer, rank i64 shape and strides, the flags (u1), rank i32 shape and i64
    strides. From Triton 3.8 they are named ``d.shape.0``...; in 3.5 to 3.7 they all carry the
    descriptor's name, and the pattern of types is what tells it from a tuple argument; Triton
    3.4's unnamed arguments cannot be told apart from separate ones, so none is taken there.
    """
    loc = arguments[i][0]
    if not loc:
        return 0
    parts = arguments[i + 1 :]
    for rank in range(1, 6):
        expected = ["i64"] * (2 * rank) + ["u1"] * len(conv.descriptor_flags) + ["i32"] * rank + ["i64"] * rank
        if [t for _, t, _ in parts[: len(expected)]] != expected:
            continue
        names = [n for n, _, _ in parts[: len(expected)]]
        if conv.dotted_ttir_names:
            if names[0] == f"{loc}.shape.0" and all(n.startswith(f"{loc}.") for n in names):
                return rank
        elif all(n == loc for n in names) and (len(parts) == len(expected) or parts[len(expected)][0] != loc):
            return rank  # the whole argument: a tuple of exactly these types would read the same
    return 0


def _source_parameter_names(ttir: str, values: list[tuple[int, Any]], count: int) -> list[str]:
    """Names for ``count`` unnamed TTIR arguments (Triton 3.4), from the kernel's ``def``.

    ``values`` are the Python values among them (:func:`_fold_descriptors`). The TTIR's own
    location (``#loc = loc("file.py":16:0)``) leads to the ``def``; when it is readable and has
    as many runtime parameters (not annotated ``tl.constexpr``) as there are values, each value's
    parts take its parameter's name. Otherwise every name is ``""`` (unnamed).
    """
    names = [""] * count
    parameters = _source_parameters(ttir)
    if parameters is None:
        return names
    runtime = [name for name, constexpr in parameters if not constexpr]
    if len(runtime) == len(values):
        starts = [i for i, _ in values] + [count]
        for k, param in enumerate(runtime):
            names[starts[k] : starts[k + 1]] = [param] * (starts[k + 1] - starts[k])
    return names


def _source_parameters(ttir: str) -> list[tuple[str, bool]] | None:
    """The kernel's ``def`` parameters, ``(name, annotated tl.constexpr)``, found through the TTIR's
    own location (``#loc = loc("file.py":16:0)``); None where that source cannot be read."""
    import ast

    m = re.search(r'^#loc\s*=\s*loc\("([^"]+)":(\d+):\d+\)', ttir, re.M)
    if m is None:
        return None
    try:
        tree = ast.parse(Path(m.group(1)).read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    line = int(m.group(2))
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.lineno == line), None)
    if node is None:
        return None
    return [(a.arg, "constexpr" in ast.unparse(a.annotation or ast.Constant(""))) for a in node.args.args]


def _full_call(leaves: list[_Leaf], parameters: list[tuple[str, bool]], constexprs: dict) -> list[_Leaf]:
    """The runtime leaves placed at their ``def`` positions, with a constant leaf for every
    parameter the TTIR lacks: a constexpr (its value from ``constexprs``, or unknown) or an
    argument Triton specialized away (an int equal to 1, or None). Unchanged where the TTIR's
    names are not the ``def``'s (an unnamed Triton 3.4 TTIR whose source did not fit)."""
    names = [name for name, _ in parameters]
    if not {leaf.name for leaf in leaves} <= set(names):
        return leaves
    out: list[_Leaf] = []
    for i, (name, constexpr) in enumerate(parameters):
        mine = [leaf for leaf in leaves if leaf.name == name]
        if mine:
            out += [replace(leaf, path=(i, *leaf.path[1:])) for leaf in mine]
        elif name in constexprs:
            out.append(_Leaf(name, (i,), "constexpr", constexprs[name]))
        else:
            options = (("unknown", True),) if constexpr else (("unknown", True), ("one_or_none", True))
            out.append(_Leaf(name, (i,), "constexpr", options=options))
    return out


def _cache_files(path: Path) -> tuple[Path, dict]:
    """The metadata JSON of a cache entry (folder, ``NAME.json``, ``__grp__NAME.json`` or cubin)."""
    if path.is_dir():
        found = [p for p in sorted(path.glob("*.json")) if not p.name.startswith("__grp__")]
        if len(found) != 1:
            raise LaunchpadError(
                f"{str(path)!r} should hold one Triton kernel's NAME.json, found {[p.name for p in found] or 'none'}"
            )
        path = found[0]
    elif path.suffix == ".cubin":
        path = path.with_suffix(".json")
    elif path.name.startswith("__grp__"):
        group = json.loads(path.read_text()).get("child_paths", {})
        sibling = path.with_name(path.name[len("__grp__") :])
        path = sibling if sibling.exists() else Path(next(p for c, p in group.items() if c.endswith(".json")))
    try:
        return path, json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LaunchpadError(f"cannot read Triton metadata {str(path)!r}: {exc}") from None


def load_triton(path: str | Path, *, constexprs: dict[str, Any] | None = None) -> Kernel:
    """A :class:`~launchpad.Kernel` from a Triton cache entry, without importing Triton.

    Parameters
    ----------
    path
        A kernel's folder in Triton's cache (``~/.triton/cache/<hash>``), or its ``NAME.json``,
        ``__grp__NAME.json`` or ``NAME.cubin``.
    constexprs : dict, optional
        The constexpr values the kernel was compiled with (``{"BLOCK_SIZE": 1024}``), which the
        cache does not record: given ones are then checked against them at each launch.

    Returns
    -------
    Kernel
        It takes the JIT function's own call (see "Calling a Triton kernel" in the README) where
        the kernel's source file is readable (the TTIR records where its ``def`` is): arguments
        by position or by the ``def``'s names, constexprs optional. A constexpr whose value was
        not given in ``constexprs`` must be left out (it cannot be checked); an argument Triton
        specialized away may be 1 or None. The TTIR's ``tt.divisibility = 16`` hints become
        alignment and multiple-of-16 checks. Without the source the kernel takes its runtime
        arguments only, in order; without a TTIR, one raw value per cubin parameter. A
        :func:`from_triton` kernel saved with :meth:`Kernel.save` keeps every constexpr value.
    """
    md_path, md = _cache_files(Path(path))
    stem = md_path.stem
    folder = md_path.parent
    cubin = folder / f"{stem}.cubin"
    if not cubin.exists():
        raise LaunchpadError(f"no {cubin.name} next to {str(md_path)!r}")
    image = cubin.read_bytes()
    ttir_file = next((p for p in (folder / f"{stem}.source", folder / f"{stem}.ttir") if p.exists()), None)
    ttir = ttir_file.read_text() if ttir_file is not None else None
    leaves = _ttir_leaves(ttir, md["name"], convention(md)) if ttir is not None else None
    parameters = _source_parameters(ttir) if ttir is not None else None
    constexprs = dict(constexprs or {})
    if leaves is not None and parameters is not None:
        runtime = {leaf.name for leaf in leaves}
        wrong = [n for n in constexprs if n in runtime or n not in {p for p, _ in parameters}]
        if wrong:
            raise ArgumentError(f"kernel {md['name']!r}: constexprs names {wrong}, which are not its constexpr "
                                f"parameters ({[p for p, c in parameters if c]})")  # fmt: skip
        leaves = _full_call(leaves, parameters, constexprs)
    elif constexprs:
        raise ArgumentError(f"kernel {md['name']!r}: constexprs= needs the kernel's source, which its TTIR does not "
                            "lead to (the file moved, or no TTIR is cached)")  # fmt: skip
    return Kernel(_build(image, md, leaves, md["name"]))
