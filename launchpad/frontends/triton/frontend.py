"""Triton front end, in process: Triton kernels as launchpad :class:`~launchpad.Kernel` objects.

:func:`from_triton` takes a ``CompiledKernel`` (what ``jit_fn.warmup`` or ``triton.compile``
return), or a ``@triton.jit`` function plus a signature, compiled here (for the current GPU, or
for any ``GPUTarget`` without one). Its arguments follow the calling convention of Triton's own
launcher (``CudaLauncher`` in ``triton/backends/nvidia/driver.py``) of the release that compiled
the kernel, 3.4 to 3.9. The other ways in: :func:`~launchpad.frontends.triton.cache_folder.load_triton` (a cache
folder, without Triton) and :func:`~launchpad.frontends.triton.launcher.triton_launcher` (a drop-in for
``jit_fn[grid](...)`` built on this module). All three make their spec in
:mod:`launchpad.frontends.triton.spec`.

Triton is imported lazily, inside the functions that need it: importing launchpad, loading a
cache folder and loading a saved artifact never import it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from ...core.spec import KernelSpec
from ...errors import ArgumentError, ArgumentTypeError, CompileError, LaunchpadError, NoDeviceError
from ...kernel import Kernel
from .cache_folder import ttir_leaves
from .spec import Leaf, build_spec, divisible16, jsonable, not_a_triton_type, with_writes
from .versions import check_installed, convention

__all__ = ["from_triton", "source_class", "with_source"]


# --- CompiledKernel ----------------------------------------------------------------------------


def _metadata_of(compiled: Any) -> dict:
    md = compiled.metadata
    md = md._asdict() if hasattr(md, "_asdict") else dict(md)
    target = md.get("target")
    if target is not None and not isinstance(target, dict):
        md["target"] = {"backend": target.backend, "arch": target.arch, "warp_size": target.warp_size}
    return md


def _source_leaves(src: Any) -> list[Leaf]:
    """The leaves of an ``ASTSource``: its function's arguments, signature, constants and attrs."""
    names = list(src.fn.arg_names)
    signature = dict(src.signature)
    constants = {(k if isinstance(k, tuple) else (names.index(k),)): v for k, v in (src.constants or {}).items()}
    attrs = {(k if isinstance(k, tuple) else (names.index(k),)): v for k, v in (src.attrs or {}).items()}
    leaves: list[Leaf] = []

    def walk(name: str, path: tuple[int, ...], ty: Any) -> None:
        if path in constants:
            leaves.append(Leaf(name, path, "constexpr", constants[path]))
        elif isinstance(ty, (tuple, list)):
            if not ty:  # an empty tuple: nothing reaches the kernel, but the argument is passed
                leaves.append(Leaf(name, path, "constexpr", ()))
            for j, t in enumerate(ty):
                walk(name, (*path, j), t)
        elif ty == "constexpr":
            leaves.append(Leaf(name, path, "constexpr", None))
        elif ty is None:
            raise ArgumentError(f"the signature has no type for argument {name!r}")
        else:
            leaves.append(Leaf(name, path, str(ty), divisible=divisible16(attrs.get(path))))

    for i, name in enumerate(names):
        walk(name, (i,), signature.get(name))
    return leaves


def _from_compiled(compiled: Any) -> KernelSpec:
    md = _metadata_of(compiled)
    image = compiled.asm["cubin"]
    src = getattr(compiled, "src", None)
    leaves: list[Leaf] | None
    if src is not None and hasattr(src, "fn") and hasattr(src.fn, "arg_names"):
        leaves = _source_leaves(src)
        display = src.fn.__name__
    else:  # compiled from an IR file: the TTIR names the runtime arguments
        ttir = compiled.asm.get("source") or compiled.asm.get("ttir")
        leaves = ttir_leaves(ttir, md["name"], convention(md)) if ttir else None
        display = md["name"]
    spec = with_writes(build_spec(image, md, leaves, display), compiled.asm.get("ttir") or compiled.asm.get("source"),
                       compiled.asm.get("ptx"))  # fmt: skip
    if src is not None and hasattr(src, "signature"):
        signature = jsonable({str(k): v for k, v in src.signature.items()})
        spec = spec.replace(metadata={**spec.metadata, "signature": signature})
    return spec


def with_source(spec: KernelSpec, fn: Any) -> KernelSpec:
    """A Triton spec finished with what the JIT function it came from gives its launches: the
    function's ``launch_metadata``, which launch hooks call as Triton's launcher does."""
    return spec.replace(launch_metadata=getattr(fn, "launch_metadata", None)) if fn is not None else spec


# --- compiling a jit function --------------------------------------------------------------------


def source_class(jit_fn: Any) -> Any:
    """The source class Triton compiles ``jit_fn`` through: ``ASTSource``, or ``GluonASTSource``
    for a ``@gluon.jit`` function (whose body is lowered as Gluon, straight to TTGIR), as
    ``JITFunction.run`` picks it."""
    from triton.compiler import ASTSource

    is_gluon = getattr(jit_fn, "is_gluon", None)
    if is_gluon is not None and is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource
    return ASTSource


def _target(target: Any) -> Any:
    from triton.backends.compiler import GPUTarget

    if target is None:
        from triton.runtime.driver import driver

        try:
            return driver.active.get_current_target()
        except RuntimeError as exc:  # Triton's "0 active drivers": no GPU (or no CUDA torch) here
            raise NoDeviceError(
                f"Triton finds no GPU to compile for ({exc}); pass target=GPUTarget('cuda', 90, 32) (or "
                "target=90) to compile for an H100 without one"
            ) from None
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


def _refuse_unknown(jit_fn: Any, where: str, keys: Iterable[Any]) -> None:
    """Refuse names in ``where`` (signature, constexprs, attrs) that are no argument of ``jit_fn``,
    each with the argument it is closest to: left unrefused, a misspelled constexpr would be
    reported as the real one having no value, and never named."""
    names = list(jit_fn.arg_names)
    unknown = [k for k in keys if isinstance(k, str) and k not in names]
    if not unknown:
        return
    close = {u: difflib.get_close_matches(u, names, n=1) for u in unknown}
    if len(unknown) == 1:
        (u,) = unknown
        which = f"{u!r}" + (f"; did you mean {close[u][0]!r}?" if close[u] else "")
    else:
        which = ", ".join(f"{u!r}" + (f" (did you mean {close[u][0]!r}?)" if close[u] else "") for u in unknown)
    raise ArgumentError(
        f"from_triton: {where} names unknown arguments {unknown}: no argument of kernel {jit_fn.__name__!r} is "
        f"named {which} (its arguments: {', '.join(names)})"
    )


def _check_types(jit_fn: Any, sig: dict) -> None:
    """Refuse a signature type that is a C, NumPy or torch name (``int``, ``float*``, ``torch.float32``),
    which Triton reports as a bare ``KeyError`` from deep inside its compiler, naming the Triton type."""
    for name, ty in sig.items():
        for leaf in ty if isinstance(ty, (tuple, list)) else (ty,):
            why = not_a_triton_type(leaf)
            if why is None and not isinstance(leaf, (str, tuple, list, type(None))):  # (None: _source_leaves says)
                why = f"{leaf!r:.60} is not a Triton type: write it as a string, e.g. '*fp32' or 'i32'"
            if why is not None:
                raise (ArgumentError if isinstance(leaf, str) else ArgumentTypeError)(
                    f"kernel {jit_fn.__name__!r}, argument {name!r}: signature type {why}"
                )


def _signature_of(jit_fn: Any, signature: Any, constexprs: dict) -> dict:
    """A full ASTSource signature: name -> type, with "constexpr" for every constant."""
    names = list(jit_fn.arg_names)
    const_names = {k for k in constexprs if isinstance(k, str)}
    if signature is None:
        signature = {}
    if isinstance(signature, dict):
        sig = dict(signature)
        _refuse_unknown(jit_fn, "signature", sig)
    elif not isinstance(signature, Iterable):
        raise ArgumentTypeError(
            f"kernel {jit_fn.__name__!r}: signature takes a dict of argument name -> Triton type "
            f"({{'x_ptr': '*fp32', 'n': 'i32'}}), or the types of the arguments that are not constexprs in order, "
            f"as a string ('*fp32, i32') or a list; got {type(signature).__name__} {signature!r:.60}"
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
    _check_types(jit_fn, sig)
    return {n: sig[n] for n in names}


def _attrs_of(jit_fn: Any, attrs: Any) -> dict:
    names = list(jit_fn.arg_names)
    out = {}
    _refuse_unknown(jit_fn, "attrs", attrs or {})
    for key, value in (attrs or {}).items():
        path = (names.index(key),) if isinstance(key, str) else (key,) if isinstance(key, int) else tuple(key)
        out[path] = [["tt.divisibility", 16]] if value in ("D", 16) else value
    return out


#: The compile options that take a count: a string or float there fails deep inside Triton's compiler.
_INT_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def _check_option_types(jit_fn: Any, options: dict) -> None:
    for name in _INT_OPTIONS:
        value = options.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            fix = f": write {name}={int(value)}" if isinstance(value, str) and value.strip().isdigit() else ""
            raise ArgumentTypeError(
                f"from_triton (kernel {jit_fn.__name__!r}): {name} takes an int, got {type(value).__name__} "
                f"{value!r:.40}{fix}"
            )


def _refuse_unknown_options(jit_fn: Any, options: dict, backend: Any) -> None:
    """Refuse an option Triton's options class does not have: Triton drops those silently, so a
    misspelled ``num_wraps=4`` would compile with the default number of warps."""
    known = sorted(backend.parse_options({}).__dict__)
    for name in options:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"its options are {', '.join(known)}"
            raise ArgumentError(
                f"from_triton (kernel {jit_fn.__name__!r}): {name!r} is not a Triton compile option "
                f"(Triton would ignore it); {hint}"
            )


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
    from triton.compiler import make_backend

    if not hasattr(jit_fn, "arg_names") or not hasattr(jit_fn, "params"):
        got = (f"the plain function {jit_fn.__name__!r}: decorate it with @triton.jit" if hasattr(jit_fn, "__code__")
               else f"{type(jit_fn).__name__} {jit_fn!r:.80}")  # fmt: skip
        raise ArgumentTypeError(f"from_triton takes a @triton.jit function or a CompiledKernel, got {got}")
    constexprs = dict(constexprs or {})
    _refuse_unknown(jit_fn, "constexprs", constexprs)
    _check_option_types(jit_fn, options)
    for p in jit_fn.params:  # constexpr arguments left out take their defaults, as at a launch
        if p.is_constexpr and p.name not in constexprs:
            if not p.has_default:
                raise ArgumentError(
                    f"kernel {jit_fn.__name__!r}: constexpr argument {p.name!r} needs a value in constexprs"
                )
            constexprs[p.name] = p.default
    target = _target(target)
    backend = make_backend(target)
    _refuse_unknown_options(jit_fn, options, backend)
    options = _run_options(jit_fn, {k: v for k, v in options.items() if v is not None}, backend)
    src = source_class(jit_fn)(
        jit_fn, _signature_of(jit_fn, signature, constexprs), constexprs, _attrs_of(jit_fn, attrs)
    )
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
        The signature, constexprs, attrs or target do not fit the jit function (a name that is no
        argument of it, with the closest one; a C or torch type name, with the Triton type), or an
        option is not one of Triton's (with the closest one: Triton would ignore it).
    ArgumentTypeError
        The signature is not a dict, string or list, or a count option (``num_warps``,
        ``num_stages``, ``num_ctas``, ``maxnreg``) is not an int.
    BinaryError
        The cubin does not hold the kernel the metadata names, or is damaged.
    """
    if not hasattr(compiled_or_jit, "asm") and hasattr(compiled_or_jit, "result"):
        compiled_or_jit = compiled_or_jit.result()  # a FutureKernel of Triton's async compile mode
    if hasattr(compiled_or_jit, "asm") and hasattr(compiled_or_jit, "metadata"):
        src = getattr(compiled_or_jit, "src", None)
        return Kernel(with_source(_from_compiled(compiled_or_jit), getattr(src, "fn", None)))
    options = {"num_warps": num_warps, "num_stages": num_stages, **options}
    compiled = _compile_jit(compiled_or_jit, signature, constexprs, attrs, target, options)
    return Kernel(with_source(_from_compiled(compiled), compiled_or_jit))
