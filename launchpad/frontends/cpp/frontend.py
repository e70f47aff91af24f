"""C++ front end: CUDA C++ source compiled at run time with NVRTC, typed by the compiler, turned
into finished specs and so into :class:`~launchpad.Kernel` objects.

Compiling and linking themselves (NVRTC, nvJitLink, the disk cache) are the toolchain's
(:mod:`launchpad.core.toolchain`); this module adds what C++ kernels need on top: a type probe per
kernel and the parameter names of its declaration (:mod:`.demangle`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...core.binary import kernels_in_image
from ...core.params import parse_signature, type_size
from ...core.spec import KernelSpec, plain_args, spec_from_image
from ...core.toolchain import compile_object, compile_program, resolve_arch
from ...core.toolchain import link as link_objects
from ...errors import ArgumentError, ArgumentTypeError, BinaryError, CompileError
from ...kernel import Kernel
from .demangle import (  # fmt: skip
    PROBE_SOURCE,
    kernel_parameter_types,
    parameter_names,
    pointee_alignment,
    probe_expression,
    type_word,
)
from .names import declared_kernels, failed_names, not_defined_message

__all__ = ["compile_cuda", "compile_cuda_module", "compile_cuda_object", "link"]


def compile_cuda(
    source: str,
    name: str,
    *,
    arch: str | int | None = None,
    std: str = "c++17",
    defines: Mapping[str, Any] | None = None,
    include_dirs: Iterable[str | Path] = (),
    options: Iterable[str] = (),
    signature: str | Sequence[str] | None = None,
) -> Kernel:
    """Compile one kernel from CUDA C++ source to a cubin and return it as a :class:`Kernel`.

    Parameters
    ----------
    source : str
        CUDA C++ source. CUDA's headers (``cuda_fp16.h``, ``cuda_bf16.h``,
        ``cooperative_groups.h``...) and the CCCL headers (CUB, ``cuda::std``, Thrust) are on
        the include path.
    name : str
        The kernel: an ``extern "C"`` name, a C++ name, or a template instance such as
        ``"axpy<float>"`` (resolved through NVRTC name expressions).
    arch : optional
        ``"sm_90"``, ``"sm_90a"``, ``"compute_90"``, ``90`` or a GPU's name (``"h100"``, ``"a100"``,
        ``"l4"``...; see :func:`launchpad.core.arch.resolve_arch`); default: the current GPU's
        (needs a GPU).
    defines, include_dirs, options
        Macros (``{"N": 4}``), include directories, raw NVRTC flags.
    signature : optional
        Parameter types in Triton's words (``"*fp32, *fp32, i32"``), checked against the binary.
        Without one, the compiler's own types are used (``float*`` is ``*fp32``, ``int`` is
        ``i32``, a struct by value its bytes): a wrong tensor dtype or an int out of range is
        refused either way.

    Raises
    ------
    CompileError
        The code does not compile: naming the kernel, with NVRTC's full log; or NVRTC is not
        installed (the message gives the pip command that installs it).
    ArgumentError
        ``arch`` is neither an architecture nor a GPU's name (the message lists both).
    NoDeviceError
        No ``arch`` was given and there is no GPU to compile for.
    BinaryError
        The source defines no kernel ``name`` (it compiles, but ``name`` resolves to no
        ``__global__`` function): the message lists the kernels it defines and the closest name,
        for a kernel inside a namespace the qualified one (``"ops::scale<float>"``).
    ArgumentError
        ``signature`` does not agree with the binary's parameters.
    """
    return compile_cuda_module(
        source, [name], arch=arch, std=std, defines=defines, include_dirs=include_dirs, options=options,
        signatures={name: signature} if signature is not None else None,
    )[name]  # fmt: skip


def compile_cuda_module(
    source: str,
    names: Sequence[str],
    *,
    arch: str | int | None = None,
    std: str = "c++17",
    defines: Mapping[str, Any] | None = None,
    include_dirs: Iterable[str | Path] = (),
    options: Iterable[str] = (),
    signatures: Mapping[str, str | Sequence[str]] | None = None,
) -> dict[str, Kernel]:
    """Compile several kernels of one source at once; return them by the names given."""
    _check_names(source, names)
    signatures = signatures or {}
    for name, signature in signatures.items():  # before compiling, and naming the kernel (spec_from_image cannot)
        if signature is not None:
            parse_signature(signature, kernel=name)
    arch = resolve_arch(arch, kernel=names)
    cubin, symbols, probed = _compile_probed(source, names, arch, std, defines, include_dirs, options)
    kernels = {}
    for name in names:
        spec = spec_from_image(cubin, "cubin", symbols[name], signature=signatures.get(name), display_name=name,
                               metadata={"frontend": "cpp", "arch": arch})  # fmt: skip
        if signatures.get(name) is None and probed:
            spec = _typed_by_compiler(spec, symbols.get(probe_expression(name)))
        kernels[name] = Kernel(_named_from_source(spec, source, name))
    return kernels


def _looks_like_source(text: str) -> bool:
    """Whether ``text`` is code rather than a kernel's name (``"axpy<float>"``, ``"ops::scale"``)."""
    return "\n" in text or "__global__" in text or "{" in text or ";" in text


def _check_names(source: Any, names: Any) -> None:
    """Refuse names that are no kernel names before compiling: the source and the name given the
    other way round (``compile_cuda(name, source)``), a name that is code, one name as a string."""
    if isinstance(names, str):
        raise ArgumentTypeError(f"compile_cuda_module takes a list of kernel names, got the string {names!r}: "
                                f"write [{names!r}]")  # fmt: skip
    if not isinstance(source, str):
        raise ArgumentTypeError(f"compile_cuda: the source must be a str of CUDA C++, got {type(source).__name__}")
    if isinstance(names, Sequence) and not names:  # it would compile the source and return no kernel
        declared = declared_kernels(source, ())  # the text's kernels: no compile on this path
        listing = f"; the source defines {', '.join(map(str, declared))}" if declared else ""
        if declared and not any(d.template for d in declared):  # a template's name is no name expression
            listing += f": write [{', '.join(repr(d.name) for d in declared)}]"
        elif declared:
            listing += " (a template by an instance: its template arguments in <>)"
        raise ArgumentError(f"compile_cuda_module takes at least one kernel name, got none{listing}")
    for name in names:
        if not isinstance(name, str):
            raise ArgumentTypeError(f"compile_cuda: a kernel's name must be a str, got {type(name).__name__}")
        if _looks_like_source(name):
            shown = name if len(name) <= 60 else name[:57] + "..."
            if not _looks_like_source(source):
                raise ArgumentError(
                    f"compile_cuda: the source and the kernel's name are swapped: the name given is CUDA code "
                    f"({shown!r}) and the source {source!r}; write compile_cuda(source, {source.strip()!r})"
                )
            raise ArgumentError(f"compile_cuda: {shown!r} is CUDA code, not a kernel's name "
                                '(an extern "C" name, a C++ name or a template instance such as "axpy<float>")')  # fmt: skip


def _compile_probed(source: str, names: Sequence[str], *args: Any) -> tuple[bytes, dict[str, str], bool]:
    """Compile with a type probe per kernel (see :mod:`launchpad.frontends.cpp.demangle`); where the probe
    cannot be instantiated (an overloaded kernel name), compile without and report no probe."""
    probes = [probe_expression(n) for n in names]
    try:
        cubin, symbols = compile_program(source + PROBE_SOURCE, [*names, *probes], "cubin", *args)
        return cubin, symbols, True
    except CompileError:
        pass
    try:
        cubin, symbols = compile_program(source, names, "cubin", *args)  # the code's own errors, if it has any
    except CompileError as exc:
        if "__nv_name_map" in exc.log:  # NVRTC refused a name expression: is the name or the code wrong?
            _raise_if_not_defined(source, names, exc, *args)
        raise
    return cubin, symbols, False


def _raise_if_not_defined(source: str, names: Sequence[str], error: CompileError, *args: Any) -> None:
    """Raise :class:`BinaryError` naming the kernels ``source`` defines and the closest to each name
    NVRTC refused, where the source compiles without them (else return: the code's errors stand)."""
    try:
        cubin, _ = compile_program(source, [], "cubin", *args)
    except CompileError:
        return
    kernels = declared_kernels(source, kernels_in_image(cubin, "cubin"))
    raise BinaryError(not_defined_message(failed_names(error.log, names), kernels)) from None


def _typed_by_compiler(spec: KernelSpec, lowered: str | None) -> KernelSpec:
    """The spec with its parameters typed by the compiler (the probe's lowered name); unchanged
    where the mangling cannot be read or does not fit the binary's parameters."""
    try:
        types = kernel_parameter_types(lowered or "")
    except ValueError:
        return spec
    if len(types) != len(spec.params):
        return spec
    params = []
    for p, t in zip(spec.params, types):
        word = type_word(t)
        if word is None and p.size not in (1, 2, 4, 8):
            word = f"bytes{p.size}"  # a struct by value: its bytes
        if word is not None and type_size(word) == p.size:
            p = replace(p, type=word, align=max(p.align, min(type_size(word), 8)))
        params.append(p)
    metadata = {**spec.metadata, "parameter_types": [str(t) for t in types]}
    args = tuple(replace(a, align=pointee_alignment(t)) for a, t in zip(plain_args(params), types))
    return spec.replace(params=tuple(params), args=args, metadata=metadata)


def _named_from_source(spec: KernelSpec, source: str, expression: str) -> KernelSpec:
    """The spec with its parameters named as the kernel's declaration names them (so errors and
    ``torch_op`` say ``'n'``, not ``param 3``); unchanged where the source does not tell."""
    names = parameter_names(source, expression, len(spec.params))
    if names is None:
        return spec
    params = tuple(replace(p, name=n) for p, n in zip(spec.params, names))
    return spec.replace(params=params, args=tuple(replace(a, name=n) for a, n in zip(spec.args, names)))


def compile_cuda_object(
    source: str,
    *,
    arch: str | int | None = None,
    output: str = "ltoir",
    std: str = "c++17",
    defines: Mapping[str, Any] | None = None,
    include_dirs: Iterable[str | Path] = (),
    options: Iterable[str] = (),
) -> Any:
    """Compile relocatable device code (``ltoir`` or ``ptx``) for :func:`link`; returns a
    cuda.core ``ObjectCode``."""
    return compile_object(source, arch=resolve_arch(arch), output=output, std=std, defines=defines,
                          include_dirs=include_dirs, options=options)  # fmt: skip


def link(
    objects: Iterable[Any],
    name: str,
    *,
    arch: str | int | None = None,
    signature: str | Sequence[str] | None = None,
    display_name: str | None = None,
    lto: bool | None = None,
) -> Kernel:
    """Link objects (LTO-IR, PTX, cubins, fatbins: ObjectCode, bytes or paths) with nvJitLink
    into a cubin, and return its kernel ``name`` (the entry symbol)."""
    if signature is not None:
        parse_signature(signature, kernel=display_name or name)  # before linking, and naming the kernel
    arch = resolve_arch(arch, kernel=display_name or name)
    cubin = link_objects(objects, arch, lto=lto, what=f"kernel {display_name or name!r}")
    spec = spec_from_image(cubin, "cubin", name, signature=signature, display_name=display_name,
                           metadata={"frontend": "link", "arch": arch})  # fmt: skip
    return Kernel(spec)
