"""Numba front end: Numba kernels as launchpad Kernels, launched without Numba's dispatcher.

:func:`from_numba` compiles a Python function with Numba's compiler for one signature (never
through the dispatcher, which needs a GPU and costs tens of microseconds per launch), links the
result with nvJitLink (:mod:`launchpad.core.toolchain`) and describes Numba's kernel ABI to the launch
core: each array argument expands into ``5 + 2 * ndim`` parameters, filled per launch by
``CONVERTERS["numba_array"]`` (:mod:`launchpad.frontends.numba.args`); complex scalars into two.

Numba is imported only here and only when compiling; a saved Numba kernel loads without it.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from ...core import toolchain
from ...core.ptx_writes import written_args
from ...core.spec import Arg, KernelSpec, LaunchPlan, ModuleCallbacks, spec_from_image
from ...errors import ArgumentError, ArgumentTypeError, CompileError, LaunchpadError
from ...kernel import Kernel
from . import args as _numba_args  # noqa: F401  (_numba_args registers the converters the kernels use)
from .compile import compile_kernel, cudadevrt, linked_object, refuse_nrt

__all__ = ["describe_arguments", "from_numba", "numba_spec"]

#: numpy element types an array argument may have, with the pointer type word of its data.
_ELEMENT_WORDS = {
    "bool": "i1", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
    "float16": "fp16", "float32": "fp32", "float64": "fp64",
    "complex64": "void", "complex128": "void",  # no type word for complex: the dtype lives in the options
}  # fmt: skip

#: Options of a ``numba.cuda.jit`` dispatcher that change the compiled code and are honoured.
_JIT_OPTIONS = ("fastmath", "lineinfo", "opt", "launch_bounds")


def from_numba(
    fn: Any,
    signature: Any,
    *,
    arch: str | int | tuple[int, int] | None = None,
    lto: bool = True,
    link: Iterable[Any] = (),
) -> Kernel:
    """Compile a Numba kernel for one signature into a launchpad :class:`~launchpad.Kernel`.

    Parameters
    ----------
    fn : function or numba.cuda dispatcher
        The kernel's Python function, or a ``numba.cuda.jit`` kernel (its ``py_func`` is compiled
        and its ``fastmath``, ``lineinfo``, ``opt`` and ``launch_bounds`` options are kept).
    signature : str or tuple
        A Numba signature: ``"void(float32[::1], float32[:, :], int32)"`` or a tuple of Numba
        types. The layouts it names are promises every launch is checked against:
        ``[::1]`` / ``[:, ::1]`` C-contiguous, ``[::1, :]`` Fortran-contiguous, ``[:]`` /
        ``[:, :]`` any strides.
    arch : optional
        ``"sm_90"``, ``90``, ``(9, 0)``, a GPU's name (``"h100"``)...; default: the current GPU's.
        Without a GPU, give it: a missing one raises :class:`~launchpad.NoDeviceError` naming the
        kernel.
    lto : bool
        Compile to LTO-IR and link with link-time optimization (default), or go through PTX
        (always PTX where numba-cuda lacks the compile entry point launchpad prefers).
    link : iterable
        More objects to link: LTO-IR, PTX, cubins, fatbins, archives (bytes, paths, cuda.core
        ``ObjectCode``, e.g. from :func:`launchpad.compile_cuda_object`), such as the CUDA C++
        device functions a kernel calls through ``numba.cuda.declare_device``. Files given to
        ``declare_device(link=...)`` are linked too.

    Returns
    -------
    Kernel
        Launch with ``kernel[grid, block](*args)``, ``kernel[grid, block, stream, shared_mem]
        (*args)`` or ``kernel.launch(grid, block, *args)``; one argument per Python argument.
        Arrays take torch tensors, Numba device arrays or any object with
        ``__cuda_array_interface__``. Kernels that synchronize the grid are launched
        cooperatively.

    Raises
    ------
    CompileError
        Numba or nvJitLink refused the code (the message has their log).
    ArgumentError
        ``arch`` is neither an architecture nor a GPU's name (the message lists both).
    NoDeviceError
        No ``arch`` was given and there is no GPU to compile for.
    ArgumentError
        A signature Numba cannot parse (the message says which bracket is missing) or with a type
        count other than the function's arguments; a kernel that needs Numba's runtime (NRT), is
        compiled with ``debug=True`` or has dispatcher extensions.
    ArgumentTypeError
        A signature type launchpad cannot pass (datetimes, ...), or a device function.
    """
    with _numpy_row_stack_alias():
        return Kernel(numba_spec(fn, signature, arch, lto, link))


_alias_lock = threading.Lock()
_alias_users = 0  # compiles (in any thread) that need the alias lent now


@contextlib.contextmanager
def _numpy_row_stack_alias() -> Iterator[None]:
    """Lend NumPy 2.5+ the ``np.row_stack`` alias while Numba compiles.

    numba-cuda 0.30 registers an overload of ``np.row_stack`` when its array module is first
    imported; NumPy 2.5 removed that alias (it was ``np.vstack``), so the import, and with it
    every compile, fails. The alias is taken back when the last compile that lent it is done:
    threads compiling at once share one loan (counted under a lock) rather than one taking it
    away from under another.
    """
    import numpy as np

    global _alias_users
    with _alias_lock:
        lend = _alias_users > 0 or not hasattr(np, "row_stack")
        if lend:
            if _alias_users == 0:
                np.row_stack = np.vstack
            _alias_users += 1
    try:
        yield
    finally:
        if lend:
            with _alias_lock:
                _alias_users -= 1
                if _alias_users == 0:
                    del np.row_stack


def numba_spec(fn: Any, signature: Any, arch: Any, lto: bool, link: Iterable[Any]) -> KernelSpec:
    """The finished spec of a Numba kernel (see :func:`from_numba`)."""
    pyfunc = getattr(fn, "py_func", fn)
    if not callable(pyfunc) or not hasattr(pyfunc, "__code__"):  # (Numba's own error names nothing of ours)
        raise ArgumentTypeError(f"from_numba takes a Python function (plain, or decorated with @cuda.jit), got "
                                f"{type(fn).__name__} {fn!r:.80}")  # fmt: skip
    target_options = dict(getattr(fn, "targetoptions", None) or {})
    if target_options.get("device"):
        raise ArgumentTypeError(f"{pyfunc.__name__!r} is a device function (device=True), not a kernel")
    name = getattr(pyfunc, "__name__", "numba_kernel")
    _refuse_dispatcher_only(name, target_options)
    argtypes, return_type = _normalize_signature(signature, name)
    if return_type is not None and str(return_type) not in ("none", "void"):
        raise ArgumentError(f"kernel {name!r}: a kernel returns nothing, the signature returns {return_type}")
    _check_count(pyfunc, name, argtypes)
    names = _argument_names(pyfunc, len(argtypes))
    try:
        words, param_names, args = describe_arguments(argtypes, names)
    except LaunchpadError as exc:  # a type launchpad cannot pass: say which kernel
        raise ArgumentTypeError(f"kernel {name!r}, {exc}") from None

    arch = toolchain.resolve_arch(arch, kernel=name)
    cc = _compute_capability(arch)
    options = {k: target_options[k] for k in _JIT_OPTIONS if target_options.get(k) is not None}
    compiled = compile_kernel(pyfunc, argtypes, cc, lto, options)
    refuse_nrt(name, compiled)
    objects = [*compiled.codes, *(linked_object(f, arch, compiled.output) for f in compiled.linking_files), *link]
    if compiled.cooperative:
        objects.append(cudadevrt())
    # LTO when Numba's code is LTO-IR; otherwise the linker decides from the objects given
    lto_link = True if compiled.output == "ltoir" else None
    try:
        cubin = toolchain.link(objects, arch, lto=lto_link, what=f"kernel {name!r}")
    except CompileError as exc:
        if "NRT_" in str(exc.log):
            refuse_nrt(name, replace(compiled, uses_nrt=True))
        raise
    linked = spec_from_image(cubin, "cubin", compiled.entry, signature=words, display_name=name)
    # What it writes, for torch.compile: from its PTX where Numba gave PTX (lto=False); its LTO-IR says
    # nothing this can read, and compiling the PTX besides would cost most of a second compile.
    # TODO(launchpad): a kernel compiled to LTO-IR (the default, lto=True) gets no "written", so
    # torch.compile declares every tensor argument written.
    found = None
    if compiled.output == "ptx":  # (LTO-IR is binary: never decoded)
        ptx = next((c.decode() for c in compiled.codes if compiled.entry.encode() in c), None)
        found = written_args(args, len(linked.params), ptx, compiled.entry) if ptx else None
    written = {"written": found} if found is not None else {}
    return linked.replace(
        params=tuple(replace(p, name=param_names[p.index]) for p in linked.params),
        args=tuple(args),
        plan=LaunchPlan(cooperative=compiled.cooperative),
        metadata={
            **written,
            "frontend": "numba",
            "arch": arch,
            "signature": ", ".join(str(t) for t in argtypes),
            "cooperative": compiled.cooperative,
            "lto": compiled.output == "ltoir",
        },
        callbacks=ModuleCallbacks(compiled.setup, compiled.teardown) if compiled.setup or compiled.teardown else None,
        # device arrays a kernel captured from globals: their addresses are baked into the code
        keepalive=tuple(compiled.keepalive.values()),
    )


def _refuse_dispatcher_only(name: str, target_options: dict) -> None:
    """Refuse what only Numba's dispatcher does at a launch, which launching without it would drop
    silently: reporting exceptions raised in a ``debug=True`` kernel (the dispatcher reads an
    error flag after every launch), and argument extensions (``prepare_args`` hooks it runs)."""
    from numba.cuda.core import config

    debug = target_options.get("debug")
    if debug or (debug is None and getattr(config, "CUDA_DEBUGINFO_DEFAULT", False)):
        raise ArgumentError(
            f"kernel {name!r} is compiled with debug=True (or NUMBA_CUDA_DEBUGINFO=1): Numba's dispatcher "
            "reports the exceptions such a kernel raises by reading an error flag after every launch, which "
            "launchpad does not do; compile it without debug to launch it here"
        )
    if target_options.get("extensions"):
        names = ", ".join(type(e).__name__ for e in target_options["extensions"])
        raise ArgumentError(
            f"kernel {name!r} has dispatcher extensions ({names}): Numba's dispatcher runs their prepare_args "
            "on every launch's arguments, which launchpad does not; pass the arguments they would make instead"
        )


# --- the kernel's parameters ----------------------------------------------------------------------


def describe_arguments(argtypes: Sequence[Any], names: Sequence[str]) -> tuple[list[str], list[str], list[Arg]]:
    """Numba's flattened parameter list for argument types, and how arguments fill it.

    Returns the parameters' type words, their names (``a.shape[1]``) and one :class:`Arg`
    per argument (per tuple element for tuples).
    """
    from numba.cuda import types

    words: list[str] = []
    param_names: list[str] = []
    args: list[Arg] = []

    def add(ty: Any, path: tuple[int, ...], label: str, name: str) -> None:
        first = len(words)
        if isinstance(ty, types.Array):
            dtype, itemsize = _element_dtype(ty.dtype, name, ty)
            n = ty.ndim
            words.extend(["*void", "*void", "i64", "i64", f"*{_ELEMENT_WORDS.get(dtype, 'void')}", *["i64"] * (2 * n)])
            param_names.extend(
                [f"{label}.meminfo", f"{label}.parent", f"{label}.nitems", f"{label}.itemsize", f"{label}.data"]
                + [f"{label}.shape[{d}]" for d in range(n)]
                + [f"{label}.strides[{d}]" for d in range(n)]
            )
            options = {"ndim": n, "dtype": dtype, "layout": ty.layout, "itemsize": itemsize, "type": str(ty)}
            params = tuple(range(first, len(words)))
            args.append(Arg(name, "expand", path, params=params, converter="numba_array", options=options))
        elif isinstance(ty, types.Complex):
            word = "fp32" if ty.bitwidth == 64 else "fp64"
            words.extend([word, word])
            param_names.extend([f"{label}.real", f"{label}.imag"])
            args.append(Arg(name, "expand", path, params=(first, first + 1), converter="numba_complex"))
        elif isinstance(ty, types.BaseTuple):
            if len(ty) == 0:  # passed, and nothing of it reaches the kernel: an empty tuple it must be
                args.append(Arg(name, "const", path, value=()))
            for j, element in enumerate(ty):
                add(element, (*path, j), f"{label}[{j}]", name)
        elif isinstance(ty, types.EnumMember) and not isinstance(ty, types.IntEnumMember):
            # an Enum member is passed as its value, as Numba's dispatcher passes it
            def leaves(t: Any, leaf_label: str) -> None:
                if isinstance(t, types.BaseTuple):
                    for j, element in enumerate(t):
                        leaves(element, f"{leaf_label}[{j}]")
                else:
                    words.append(_scalar_word(t, name))
                    param_names.append(leaf_label)

            leaves(ty.dtype, f"{label}.value")
            options = {"enum": ty.instance_class.__qualname__, "type": str(ty)}
            params = tuple(range(first, len(words)))
            args.append(Arg(name, "expand", path, params=params, converter="numba_enum", options=options))
        elif isinstance(ty, types.Record):  # by pointer to a device copy, as Numba's dispatcher passes it
            words.append("*void")
            param_names.append(label)
            fields = [[f, ty.offset(f), str(ty.typeof(f))] for f in ty.fields]
            options = {"itemsize": ty.size, "type": str(ty), "fields": fields}
            args.append(Arg(name, "expand", path, params=(first,), converter="numba_record", options=options))
        else:
            words.append(_scalar_word(ty, name))
            param_names.append(label)
            # Numba converts ints as C does: any value whose bits fit (0xFFFFFFFF for an int32 is -1)
            wrap = isinstance(ty, (types.Integer, types.IntEnumMember))
            args.append(Arg(name, "param", path, first, options={"wrap": True} if wrap else {}))

    for i, (ty, name) in enumerate(zip(argtypes, names)):
        add(ty, (i,), name, name)
    return words, param_names, args


def _scalar_word(ty: Any, name: str) -> str:
    from numba.cuda import types

    if isinstance(ty, (types.IntEnumMember, types.Boolean, types.Integer, types.Float)):
        base = ty.dtype if isinstance(ty, types.IntEnumMember) else ty
        if isinstance(base, types.Boolean):
            return "i1"  # Numba passes booleans as 8 bits
        if isinstance(base, types.Integer):
            return f"{'i' if base.signed else 'u'}{base.bitwidth}"
        if isinstance(base, types.Float):
            return f"fp{base.bitwidth}"
    if isinstance(ty, types.CPointer):
        element = _ELEMENT_WORDS.get(_numpy_name(ty.dtype) or "", "void")
        return f"*{element}"
    if isinstance(ty, types.RawPointer):  # voidptr
        return "*void"
    raise ArgumentTypeError(
        f"argument {name!r}: launchpad cannot pass Numba type {ty} (it passes arrays, integers, floats, "
        "booleans, complex numbers, pointers, records, enum members and tuples of these)"
    )


def _numpy_name(ty: Any) -> str | None:
    try:
        from numba.cuda.np.numpy_support import as_dtype

        return as_dtype(ty).name
    except Exception:
        return None


def _element_dtype(ty: Any, name: str, array: Any) -> tuple[str, int]:
    from numba.cuda import types

    if isinstance(ty, types.Record):  # opaque bytes of the record's size (numpy's "V16")
        return f"V{ty.size}", ty.size
    dtype = _numpy_name(ty)
    if dtype not in _ELEMENT_WORDS:
        raise ArgumentTypeError(
            f"argument {name!r}: launchpad cannot pass arrays of {ty} ({array}); element types: "
            + ", ".join(_ELEMENT_WORDS)
        )
    import numpy as np

    return dtype, np.dtype(dtype).itemsize


def _normalize_signature(signature: Any, name: str) -> tuple[tuple[Any, ...], Any]:
    from numba.cuda.core import sigutils

    unbalanced = _unbalanced(signature) if isinstance(signature, str) else None
    if unbalanced:
        raise ArgumentError(f"kernel {name!r}: invalid Numba signature {signature!r}: {unbalanced}; "
                            'a signature reads "void(float32[::1], float32, int32)"')  # fmt: skip
    try:
        args, return_type = sigutils.normalize_signature(signature)
    except Exception as exc:
        raise ArgumentError(f"kernel {name!r}: invalid Numba signature {signature!r}: {exc}; "
                            'a signature reads "void(float32[::1], float32, int32)"') from None  # fmt: skip
    return tuple(args), return_type


def _unbalanced(signature: str) -> str | None:
    """What a signature's brackets lack (``"a ')' is missing"``), or None where they pair up."""
    stack: list[str] = []
    pairs = {")": "(", "]": "["}
    for at, char in enumerate(signature):
        if char in "([":
            stack.append(char)
        elif char in pairs:
            if not stack or stack[-1] != pairs[char]:
                return f"the {char!r} at position {at} closes nothing"
            stack.pop()
    if stack:
        closing = "".join(")" if c == "(" else "]" for c in reversed(stack))
        return f"{' and '.join(repr(c) for c in closing)} {'is' if len(closing) == 1 else 'are'} missing at its end"
    return None


def _check_count(pyfunc: Any, name: str, argtypes: Sequence[Any]) -> None:
    """The signature gives one type per argument of the kernel's function (Numba's own check
    raises a bare TypeError that names neither the kernel nor its arguments)."""
    try:
        params = list(inspect.signature(pyfunc).parameters.values())
    except (TypeError, ValueError):
        return
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY) for p in params):
        return
    if len(params) != len(argtypes):
        names = ", ".join(p.name for p in params)
        raise ArgumentError(
            f"kernel {name!r} takes {len(params)} argument{'s' if len(params) != 1 else ''} ({names}), but the "
            f"signature gives {len(argtypes)} type{'s' if len(argtypes) != 1 else ''} "
            f"({', '.join(map(str, argtypes)) or 'none'}): one type per argument, in order"
        )


def _argument_names(pyfunc: Any, count: int) -> list[str]:
    try:
        params = [
            p.name
            for p in inspect.signature(pyfunc).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"arg{i}" for i in range(count)]


def _compute_capability(arch: str) -> tuple:
    """``(9, 0)`` from ``"sm_90"``, ``(9, 0, "a")`` from ``"sm_90a"``: Numba's ``cc``."""
    m = re.fullmatch(r"(?:sm|compute)_(\d+)(\d)([a-z]?)", arch)
    if m is None:
        raise ArgumentError(f"cannot tell the compute capability of arch {arch!r}")
    major, minor, suffix = int(m.group(1)), int(m.group(2)), m.group(3)
    return (major, minor, suffix) if suffix else (major, minor)
