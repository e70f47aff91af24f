"""The toolchain: NVRTC compiles and nvJitLink links, each result cached on disk.

The C++ front end compiles kernels through :func:`compile_program`; the Numba front end links
what Numba compiled (and the CUDA C++ files its kernels declare) through :func:`link` and
:func:`compile_object`. Both use cuda.core's ``Program`` and ``Linker``, imported on first use
(importing cuda.core costs more than all of launchpad). Results are cached on disk
(:mod:`launchpad.core.cache`) under a key of everything that decides them.
"""

from __future__ import annotations

import functools
import numbers
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import DISTRIBUTION, ArgumentError, ArgumentTypeError, BinaryError, CompileError
from . import cache as _cache
from . import driver as _driver
from .arch import nvrtc_archs, resolve_arch  # the front ends resolve arch= here, where they compile
from .binary import TYPE_PROBE

__all__ = [
    "compile_object",
    "compile_program",
    "device_runtime",
    "install_hint",
    "library_version",
    "link",
    "object_code",
    "resolve_arch",
]


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


#: The libraries compiling and linking need, by the names messages and ``launchpad info`` give them.
LIBRARIES = ("NVRTC", "nvJitLink")


def library_version(library: str) -> str | None:
    """``"13.5"``: the version of ``"NVRTC"`` or ``"nvJitLink"`` where cuda.bindings would load it
    from (cuda.pathfinder: NVIDIA's wheels, a conda environment, the system's CUDA); None where
    there is none, ``"unknown"`` where the library does not say."""
    if library not in LIBRARIES:
        raise KeyError(library)
    return _driver.library_version(library)


#: The CUDA toolkit's wheels the cu12 and cu13 extras install (pyproject.toml), without the version.
TOOLKIT_WHEELS = "cuda-toolkit[nvrtc,nvjitlink,nvfatbin,cccl,cudart]"


def install_hint() -> str:
    """What to install for a missing NVRTC or nvJitLink: the exact pip command with the extra that
    fits the installed cuda-bindings."""
    bindings = _driver.bindings_version()
    major = bindings.split(".")[0]
    cuda = major if major in ("12", "13") else "13"
    # The packages themselves, not the extra: the distribution is not on PyPI yet, and in a clone's
    # editable install `pip install "launchpad-kernels[cu13]"` would replace the clone's own install.
    return (
        f'pip install "{TOOLKIT_WHEELS}=={cuda}.*" (NVRTC, nvJitLink and the CUDA {cuda} headers, for the installed '
        f"cuda-bindings {bindings}: what the cu{cuda} extra of {DISTRIBUTION} brings), or install a CUDA {cuda} toolkit"
    )


def _missing(library: str) -> str:
    """What to install where ``library`` cannot be found, else "" (asked only after a failure)."""
    return f"{library} is not installed: {install_hint()}" if library_version(library) is None else ""


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


def _listed(items: Iterable[str | Path], argument: str, what: str) -> list[str]:
    """``items`` as a list of strings. One string or path alone is refused: iterating a string would
    hand NVRTC each of its characters as a flag or a directory."""
    if isinstance(items, (str, bytes, Path)):
        raise ArgumentTypeError(f"{what}: {argument} takes a list, got the {type(items).__name__} {items!r} alone: "
                                f"write [{str(items)!r}]")  # fmt: skip
    try:
        listed = list(items)
    except TypeError:
        raise ArgumentTypeError(f"{what}: {argument} takes a list of strings, got {type(items).__name__} "
                                f"{items!r}") from None  # fmt: skip
    for item in listed:
        if not isinstance(item, (str, Path)):
            raise ArgumentTypeError(f"{what}: {argument} takes strings, got {type(item).__name__} {item!r} among "
                                    f"them")  # fmt: skip
    return [str(item) for item in listed]


#: The C++ standards NVRTC takes for ``std=`` (``--std``), oldest first; a newer NVRTC may take more.
STANDARDS = ("c++03", "c++11", "c++14", "c++17", "c++20", "c++23")


@functools.cache
def _standards(arch: str) -> tuple[str, ...]:
    """The standards of :data:`STANDARDS` this NVRTC takes: asked of it by compiling an empty program
    with each (after a refused ``std=`` only: ~50 ms each)."""
    from cuda.core import Program, ProgramOptions

    def takes(std: str) -> bool:
        try:
            Program("", "c++", ProgramOptions(std=std, arch=arch)).compile("cubin")
        except Exception:
            return False
        return True

    return tuple(std for std in STANDARDS if takes(std))


def _std_hint(std: str, arch: str, log: str) -> str:
    """What to write for ``std=`` where NVRTC refused its value (its log says only "invalid value")."""
    if "--std" not in log:
        return ""
    taken = _standards(arch)
    return f"; std={std!r} is not a standard it takes: write one of {', '.join(map(repr, taken))}" if taken else ""


def _arch_hint(arch: str, log: str) -> str:
    """What to write for ``arch=`` where NVRTC refused it (its log says only "invalid value")."""
    if "--gpu-architecture" not in log:
        return ""
    version, taken = nvrtc_archs()
    if not taken:
        return ""
    kind = "compute" if arch.startswith("compute") else "sm"
    return (f"; {arch} is not an architecture the installed NVRTC {version} compiles for: write one of "
            f"{', '.join(f'{kind}_{n}' for n in taken)} (an older CUDA's NVRTC compiles for older GPUs)")  # fmt: skip


#: Raw flags that set what ``arch=`` and ``std=`` set, and would silently win over them.
_OWN_FLAGS = {"-arch": "arch", "--gpu-architecture": "arch", "-std": "std", "--std": "std"}


def _check_options(options: list[str], arch: str, std: str, what: str) -> None:
    """Refuse an ``-arch``/``--gpu-architecture``/``-std`` flag among ``options``."""
    for i, option in enumerate(options):
        flag, equals, value = option.strip().partition("=")
        argument = _OWN_FLAGS.get(flag)
        if argument is None:
            continue
        value = value if equals else (options[i + 1] if i + 1 < len(options) else "")
        given = arch if argument == "arch" else std
        write = f"{argument}={value.strip()!r}" if value.strip() else f"{argument}="
        raise ArgumentError(f"{what}: options has {option!r}, which would silently replace {argument}= "
                            f"({given!r}): give it once, in {argument}= ({write}), not in options")  # fmt: skip


def _checked_defines(defines: Mapping[Any, Any], what: str) -> dict[str, Any]:
    """``defines`` with str names and values NVRTC can spell: a bool as 1 or 0 (``-DN=True`` would
    be a name C++ does not know); anything but an int, float, str or None is refused."""
    checked = {}
    for name, value in defines.items():
        if not isinstance(name, str):
            raise ArgumentTypeError(f"{what}: defines takes macro names as str ({{'N': 4}}), got "
                                    f"{type(name).__name__} {name!r}: write the macro's name as a str")  # fmt: skip
        if isinstance(value, bool) or type(value).__name__ == "bool_":  # NumPy's bool too
            value = int(bool(value))
        elif not (value is None or isinstance(value, (str, numbers.Real))):
            raise ArgumentTypeError(f"{what}: defines[{name!r}] takes an int, a float, a str (the macro's text) or "
                                    f"None (the name defined bare), got {type(value).__name__} {value!r}: write "
                                    f"the text it stands for as a str")  # fmt: skip
        checked[name] = value
    return checked


def compile_program(source: str, names: Sequence[str], output: str, arch: str, std: str, defines: Mapping[str, Any] | None,
             include_dirs: Iterable[str | Path], options: Iterable[str], **fields: Any) -> tuple[bytes, dict[str, str]]:  # fmt: skip
    """Compile (or fetch from the cache) ``source``; return the binary and name -> symbol."""
    shown = [n for n in names if not n.startswith(TYPE_PROBE)]  # the type probes are launchpad's, not the user's
    what = (
        f"kernel{'s' if len(shown) > 1 else ''} {', '.join(map(repr, shown))}" if shown else f"device code ({output})"
    )
    include_dirs, options = _listed(include_dirs, "include_dirs", what), _listed(options, "options", what)
    if not isinstance(std, str):
        raise ArgumentTypeError(f"{what}: std takes a string such as 'c++17' (the default), got "
                                f"{type(std).__name__} {std!r}")  # fmt: skip
    if defines is not None and not isinstance(defines, Mapping):
        raise ArgumentTypeError(f"{what}: defines takes a mapping of macro names to values ({{'N': 4}}; None "
                                f"defines the name bare), got {type(defines).__name__} {defines!r}")  # fmt: skip
    _check_options(options, arch, std, what)
    if defines is not None:
        defines = _checked_defines(defines, what)
    what += f" for {arch}"
    key = _cache.cache_key(
        "nvrtc", _nvrtc_version(), source, list(names), output, arch, std, defines, include_dirs, options, fields
    )
    hit = _cache.get(key, what)
    if hit is not None:
        return hit[1], hit[0]["symbols"]
    from cuda.core import Program

    opts = _program_options(arch, std, defines, include_dirs, options, **fields)
    try:
        obj = Program(source, "c++", opts).compile(output, name_expressions=list(names))
    except Exception as exc:
        missing = _missing("NVRTC")
        if missing:
            raise CompileError(f"NVRTC could not compile {what}: {missing}", str(exc)) from None
        message, _, log = str(exc).partition("compilation log:")
        log = log.strip("\n\0")
        message = message.strip().rstrip(",")
        hint = _std_hint(std, arch, log) or _arch_hint(arch, log) or _missing_header_hint(log)
        raise CompileError(f"NVRTC could not compile {what}: {message}{hint}", log) from None
    symbols = {n: obj.symbol_mapping.get(n, n.encode()).decode() for n in names}
    binary = bytes(obj.code)
    _cache.put(key, {"symbols": symbols, "arch": arch}, binary, what)
    return binary, symbols


def compile_object(
    source: str,
    *,
    arch: str,
    output: str = "ltoir",
    std: str = "c++17",
    defines: Mapping[str, Any] | None = None,
    include_dirs: Iterable[str | Path] = (),
    options: Iterable[str] = (),
) -> Any:
    """Compile relocatable device code (``ltoir`` or ``ptx``) to link; returns a cuda.core
    ``ObjectCode``."""
    from cuda.core import ObjectCode

    fields: dict[str, Any] = {"relocatable_device_code": True}
    if output == "ltoir":
        fields["link_time_optimization"] = True
    code, _ = compile_program(source, [], output, arch, std, defines, include_dirs, options, **fields)
    return ObjectCode.from_ltoir(code) if output == "ltoir" else ObjectCode.from_ptx(code)


@functools.cache
def device_runtime() -> Any:
    """CUDA's device runtime library (``libcudadevrt.a``: device-side graph updates, dynamic
    parallelism) as a cuda.core ``ObjectCode`` to link, or None where neither a wheel
    (``nvidia-cuda-runtime``, in launchpad's cu12/cu13 extras) nor a toolkit has it."""
    from cuda.core import ObjectCode

    found: list[Path] = []
    try:
        from cuda import pathfinder

        found.append(Path(pathfinder.find_static_lib("cudadevrt")))
    except Exception:  # an older cuda-pathfinder, or none found there
        pass
    import os

    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            found += [Path(root) / "lib64" / "libcudadevrt.a", Path(root) / "lib" / "libcudadevrt.a"]
    for path in found:
        if path.is_file():
            return ObjectCode.from_library(path.read_bytes(), name=path.name)
    return None


def object_code(obj: Any) -> Any:
    """An object to link (cuda.core ``ObjectCode``), from an ObjectCode, a Kernel (its image), bytes
    or a path."""
    from cuda.core import ObjectCode

    if isinstance(obj, ObjectCode):
        return obj
    image = getattr(obj, "image", None)  # a launchpad Kernel or KernelSpec
    if isinstance(image, bytes):
        obj = image
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


def link(objects: Iterable[Any], arch: str, *, lto: bool | None = None, what: str = "kernel") -> bytes:
    """Link objects (LTO-IR, PTX, cubins, fatbins: ``ObjectCode``, bytes or paths) with nvJitLink
    into a cubin for ``arch``; ``lto`` None links with LTO where any object is LTO-IR. ``what``
    names the result in messages."""
    from cuda.core import Linker, LinkerOptions

    codes = [object_code(o) for o in objects]
    if lto is None:
        lto = any(c.code_type == "ltoir" for c in codes)
    key = _cache.cache_key("nvjitlink", _nvrtc_version(), arch, lto, [(c.code_type, bytes(c.code)) for c in codes])
    what = f"{what} (linked for {arch})"
    hit = _cache.get(key, what)
    if hit is not None:
        return hit[1]
    try:
        cubin = bytes(Linker(*codes, options=LinkerOptions(arch=arch, link_time_optimization=lto)).link("cubin").code)
    except Exception as exc:
        missing = _missing("nvJitLink")
        raise CompileError(f"nvJitLink could not link {what}" + (f": {missing}" if missing else ""), str(exc)) from None
    _cache.put(key, {"arch": arch}, cubin, what)
    return cubin
