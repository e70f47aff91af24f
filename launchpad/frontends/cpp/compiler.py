"""C++ front end: CUDA C++ source compiled at run time with NVRTC (cuda.core ``Program``) and
linked with nvJitLink (cuda.core ``Linker``), turned into :class:`~launchpad.Kernel` objects.

Compiled binaries are cached on disk (see :mod:`launchpad.core.cache`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...core import cache as _cache
from ...core import driver as _driver
from ...core.params import type_size
from ...core.spec import KernelSpec, plain_args
from ...errors import BinaryError, CompileError
from ...kernel import Kernel, spec_from_image
from .demangle import (  # fmt: skip
    PROBE,
    PROBE_SOURCE,
    kernel_parameter_types,
    parameter_names,
    pointee_alignment,
    probe_expression,
    type_word,
)

__all__ = ["compile_cuda", "compile_cuda_module", "compile_cuda_object", "link", "resolve_arch"]


def resolve_arch(arch: str | int | tuple[int, int] | None) -> str:
    """``"sm_90"`` from ``"sm_90"``, ``"90"``, ``90`` or ``(9, 0)``; None asks the current GPU."""
    if arch is None:
        import torch

        major, minor = _driver.compute_capability(torch.cuda.current_device() if _driver.device_count() else 0)
        return f"sm_{major}{minor}"
    if isinstance(arch, tuple):
        return f"sm_{arch[0]}{arch[1]}"
    text = str(arch)
    return text if text.startswith(("sm_", "compute_")) else f"sm_{text}"


@functools.cache
def _cuda_include_dir() -> str | None:
    """CUDA's own headers (``cuda_fp16.h``, ``cooperative_groups.h``...): NVRTC does not find
    them by itself."""
    return _header_directory("cudart")


@functools.cache
def _cccl_include_dir() -> str | None:
    """The CCCL headers (``cub/``, ``cuda/std/``, ``thrust/``, ``<nv/target>``, which
    ``cooperative_groups`` needs): the ``nvidia-cuda-cccl`` wheel or the CUDA toolkit's."""
    return _header_directory("cccl")


def _header_directory(library: str) -> str | None:
    try:
        from cuda import pathfinder

        return pathfinder.find_nvidia_header_directory(library)
    except Exception:  # not installed, or a cuda-pathfinder that does not know the library
        return None


#: Where a header NVRTC could not open comes from, by its first path component.
_HEADER_PACKAGES = {
    "cub": "nvidia-cuda-cccl", "thrust": "nvidia-cuda-cccl", "cuda": "nvidia-cuda-cccl", "nv": "nvidia-cuda-cccl",
    "curand": "nvidia-curand", "cublas": "nvidia-cublas", "cufft": "nvidia-cufft", "cusparse": "nvidia-cusparse",
    "nvshmem": "nvidia-nvshmem-cu13",
}  # fmt: skip
#: The host's C and C++ library headers, which NVRTC does not have (device code gets CCCL's).
_HOST_HEADERS = re.compile(
    r"(std\w*|string|math|stdlib|assert|limits|float|climits|cmath|cstdint|cstdio|cstdlib|cstring|cassert|cfloat"
    r"|type_traits|utility|array|tuple|algorithm|iostream|vector|memory|functional|complex)(\.h)?"
)


def _missing_header_hint(log: str) -> str:
    """What to install for a header NVRTC could not open, or ""."""
    m = re.search(r'cannot open source file "([^"]+)"', log)
    if m is None:
        return ""
    header = m.group(1)
    if _HOST_HEADERS.fullmatch(header):
        std = header.removesuffix(".h")
        std = std if not header.endswith(".h") or std.startswith("c") else f"c{std}"
        return (f"; {header!r} is a host C/C++ library header, which NVRTC does not have: for device code include "
                f"CCCL's <cuda/std/{std}> where it exists (on the include path)")  # fmt: skip
    first = re.split(r"[/_.]", header)[0]
    package = _HEADER_PACKAGES.get(first) or _HEADER_PACKAGES.get(header.split("/")[0]) or (
        "nvidia-cuda-runtime" if header.startswith(("cuda_", "cooperative_groups", "vector_", "device_", "sm_")) else ""
    )  # fmt: skip
    if not package:
        return f"; {header!r} is on no include path launchpad knows (pass include_dirs=)"
    found = {"nvidia-cuda-cccl": _cccl_include_dir(), "nvidia-cuda-runtime": _cuda_include_dir()}.get(package)
    where = f" (searched {found})" if found else ""
    return f"; {header!r} comes with the {package} package (pip install {package}) or a CUDA toolkit{where}"


@functools.cache
def _nvrtc_version() -> str:
    """Which NVRTC compiles, for cache keys.

    Loading libnvrtc to ask it costs most of a cache hit, so NVIDIA's pip wheel (which
    cuda.pathfinder prefers when present) is identified by its dist-info name instead.
    """
    try:
        import nvidia  # the namespace package of NVIDIA's wheels

        for root in nvidia.__path__:
            found = sorted(Path(root).parent.glob("nvidia_cuda_nvrtc*.dist-info"))
            if found:
                return found[-1].name
    except ImportError:
        pass
    return _driver.nvrtc_version()  # a system toolkit's NVRTC: ask the library


@functools.cache
def _options_class() -> type:
    """``ProgramOptions`` plus raw NVRTC flags it has no field for (cuda.core is imported on
    first compile: importing it costs more than all of launchpad)."""
    from cuda.core import ProgramOptions

    class Options(ProgramOptions):
        extra: tuple[str, ...] = ()

        def as_bytes(self, backend: str, *args: Any, **kwargs: Any) -> list[bytes]:
            return [*super().as_bytes(backend, *args, **kwargs), *(o.encode() for o in self.extra)]

    return Options


def _program_options(arch: str, std: str, defines: Mapping[str, Any] | None, include_dirs: Iterable[str],
                     options: Iterable[str], **fields: Any) -> Any:  # fmt: skip
    includes = [str(d) for d in include_dirs]
    includes += [d for d in (_cuda_include_dir(), _cccl_include_dir()) if d]
    macros = [name if value is None else (name, str(value)) for name, value in (defines or {}).items()]
    opts = _options_class()(arch=arch, std=std, include_path=includes or None, define_macro=macros or None, **fields)
    opts.extra = tuple(options)
    return opts


def _compile(source: str, names: Sequence[str], output: str, arch: str, std: str, defines: Mapping[str, Any] | None,
             include_dirs: Iterable[str], options: Iterable[str], **fields: Any) -> tuple[bytes, dict[str, str]]:  # fmt: skip
    """Compile (or fetch from the cache) ``source``; return the binary and name -> symbol."""
    include_dirs, options = list(map(str, include_dirs)), list(options)
    key = _cache.cache_key(
        "nvrtc", _nvrtc_version(), source, list(names), output, arch, std, defines, include_dirs, options, fields
    )
    shown = [n for n in names if not n.startswith(PROBE)]  # the type probes are launchpad's, not the user's
    what = (
        f"kernel{'s' if len(shown) > 1 else ''} {', '.join(map(repr, shown))}" if shown else f"device code ({output})"
    )
    what += f" for {arch}"
    hit = _cache.get(key, what)
    if hit is not None:
        return hit[1], hit[0]["symbols"]
    from cuda.core import Program

    opts = _program_options(arch, std, defines, include_dirs, options, **fields)
    try:
        obj = Program(source, "c++", opts).compile(output, name_expressions=list(names))
    except Exception as exc:
        message, _, log = str(exc).partition("compilation log:")
        log = log.strip("\n\0")
        message = message.strip().rstrip(",")
        raise CompileError(f"NVRTC could not compile {what}: {message}{_missing_header_hint(log)}", log) from None
    symbols = {n: obj.symbol_mapping.get(n, n.encode()).decode() for n in names}
    binary = bytes(obj.code)
    _cache.put(key, {"symbols": symbols, "arch": arch}, binary, what)
    return binary, symbols


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
        ``"sm_90"``, ``90`` ...; default: the current GPU's (needs a GPU).
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
        Naming the kernel, with NVRTC's full log.
    BinaryError
        The binary has no kernel ``name`` (e.g. a name that is neither ``extern "C"`` nor
        resolvable as a name expression).
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
    arch = resolve_arch(arch)
    signatures = signatures or {}
    cubin, symbols, probed = _compile_probed(source, names, arch, std, defines, include_dirs, options)
    kernels = {}
    for name in names:
        spec = spec_from_image(cubin, "cubin", symbols[name], signature=signatures.get(name), display_name=name,
                               metadata={"frontend": "cpp", "arch": arch})  # fmt: skip
        if signatures.get(name) is None and probed:
            spec = _typed_by_compiler(spec, symbols.get(probe_expression(name)))
        kernels[name] = Kernel(_named_from_source(spec, source, name))
    return kernels


def _compile_probed(source: str, names: Sequence[str], *args: Any) -> tuple[bytes, dict[str, str], bool]:
    """Compile with a type probe per kernel (see :mod:`launchpad.frontends.cpp.demangle`); where the probe
    cannot be instantiated (an overloaded kernel name), compile without and report no probe."""
    probes = [probe_expression(n) for n in names]
    try:
        cubin, symbols = _compile(source + PROBE_SOURCE, [*names, *probes], "cubin", *args)
        return cubin, symbols, True
    except CompileError:
        cubin, symbols = _compile(source, names, "cubin", *args)  # the code's own errors, if it has any
        return cubin, symbols, False


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
    from cuda.core import ObjectCode

    arch = resolve_arch(arch)
    fields: dict[str, Any] = {"relocatable_device_code": True}
    if output == "ltoir":
        fields["link_time_optimization"] = True
    code, _ = _compile(source, [], output, arch, std, defines, [str(d) for d in include_dirs], options, **fields)
    return ObjectCode.from_ltoir(code) if output == "ltoir" else ObjectCode.from_ptx(code)


def _object_code(obj: Any) -> Any:
    """An object to link (cuda.core ``ObjectCode``), from an ObjectCode, a Kernel, bytes or a path."""
    from cuda.core import ObjectCode

    if isinstance(obj, ObjectCode):
        return obj
    if isinstance(obj, Kernel):
        obj = obj.image
    if isinstance(obj, (str, Path)):
        obj = Path(obj).read_bytes()
    data = bytes(obj)
    if data[:4] == b"\xedCN\x7f":
        return ObjectCode.from_ltoir(data)
    if data[:4] == b"\x7fELF":
        return ObjectCode.from_cubin(data)
    if data[:4] == b"\x50\xed\x55\xba":
        return ObjectCode.from_fatbin(data)
    if b".version" in data[:4096]:
        return ObjectCode.from_ptx(data)
    raise BinaryError(
        f"cannot tell what kind of object this is ({len(data)} bytes starting {data[:8]!r}; expected LTO-IR, PTX, "
        "cubin or fatbin)"
    )


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
    return Kernel(link_spec(objects, name, arch=arch, signature=signature, display_name=display_name, lto=lto))


def link_spec(
    objects: Iterable[Any],
    name: str,
    *,
    arch: str | int | None = None,
    signature: str | Sequence[str] | None = None,
    display_name: str | None = None,
    lto: bool | None = None,
) -> KernelSpec:
    """:func:`link`'s spec (what the Numba front end builds on)."""
    from cuda.core import Linker, LinkerOptions

    arch = resolve_arch(arch)
    codes = [_object_code(o) for o in objects]
    if lto is None:
        lto = any(c.code_type == "ltoir" for c in codes)
    key = _cache.cache_key("nvjitlink", _nvrtc_version(), arch, lto, [(c.code_type, bytes(c.code)) for c in codes])
    what = f"kernel {display_name or name!r} (linked for {arch})"
    hit = _cache.get(key, what)
    if hit is not None:
        cubin = hit[1]
    else:
        try:
            cubin = bytes(
                Linker(*codes, options=LinkerOptions(arch=arch, link_time_optimization=lto)).link("cubin").code
            )
        except Exception as exc:
            raise CompileError(f"nvJitLink could not link {what}", str(exc)) from None
        _cache.put(key, {"arch": arch}, cubin, what)
    return spec_from_image(
        cubin,
        "cubin",
        name,
        signature=signature,
        display_name=display_name,
        metadata={"frontend": "link", "arch": arch},
    )
