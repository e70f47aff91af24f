"""Compiling a Numba kernel with Numba's compiler (never its dispatcher), and what its code asks to
link: the files given to ``declare_device(link=...)`` (with their module callbacks), numba-cuda's
shims (fp16, libdevice), libcudadevrt for grid synchronization. Numba's runtime (NRT) is refused.
Used by :mod:`launchpad.frontends.numba.frontend`; Numba is imported only inside these functions.
"""

from __future__ import annotations

import contextlib
import re
import threading
import types as pytypes
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.toolchain import compile_object
from ...errors import ArgumentError, CompileError, LaunchpadError

__all__ = ["Compiled", "compile_kernel", "cudadevrt", "helper_files", "linked_object", "refuse_nrt"]

#: Symbols a kernel calls when it synchronizes the grid (``cuda.cg.this_grid().sync()``);
#: they live in libcudadevrt and work only in a cooperative launch.
_GRID_SYNC_SYMBOLS = ("cudaCGGetIntrinsicHandle", "cudaCGSynchronize")


@dataclass
class Compiled:
    codes: list[bytes]  # LTO-IR or PTX of the kernel and the device functions it calls
    output: str  # "ltoir" or "ptx"
    entry: str  # the mangled kernel name
    cooperative: bool  # the code synchronizes the grid
    linking_files: list[Any]  # files declared with declare_device(link=...)
    keepalive: dict  # objects the code refers to by address
    setup: tuple = ()  # the linked files' module callbacks, as numba-cuda collects them
    teardown: tuple = ()
    uses_nrt: bool = False  # the code calls Numba's runtime (allocates, reference-counts)


@contextlib.contextmanager
def compiling_for(cc: tuple) -> Iterator[None]:
    """Make Numba compile the device functions a kernel calls for ``cc``.

    Numba's dispatcher compiles a called device function (a ``@cuda.jit(device=True)``
    function, or an overload such as ``cuda.cg.this_grid``) for "the current device", which it
    asks the driver for: without a GPU that fails, and with one it may not be the target. While
    this thread compiles (the caller holds Numba's compiler lock), it answers ``cc`` instead;
    other threads still get the real device.
    """
    from numba.cuda import dispatcher

    original = dispatcher.get_current_device
    target = pytypes.SimpleNamespace(compute_capability=tuple(cc[:2]))
    me = threading.get_ident()

    def current_device() -> Any:
        return target if threading.get_ident() == me else original()

    dispatcher.get_current_device = current_device
    try:
        yield
    finally:
        dispatcher.get_current_device = original


def compile_kernel(pyfunc: Any, argtypes: tuple, cc: tuple, lto: bool, options: dict) -> Compiled:
    """Compile with Numba's compiler (never the dispatcher) for compute capability ``cc``.

    The public ``numba.cuda.compile`` returns the code alone; the code library behind it also
    knows the entry name, whether the kernel synchronizes the grid (what Numba's dispatcher
    reads to launch cooperatively) and the files ``declare_device`` asked to link, so that is
    used where this numba-cuda has it, and the public call otherwise.
    """
    from numba.cuda.core.compiler_lock import global_compiler_lock

    internal = internal_compiler()
    try:
        with global_compiler_lock, compiling_for(cc):
            if internal is None:
                return _compile_public(pyfunc, argtypes, cc, options)
            lib, _ = internal(pyfunc, argtypes, device=False, cc=cc, abi="numba", lto=lto, **options)
            if lto:
                codes = [bytes(lib.get_ltoir(cc=cc))]
            else:
                codes = [ptx.encode() for ptx in lib.get_asm_strs(cc=cc)]
            ir = "\n".join(getattr(lib, "llvm_strs", ()))
            return Compiled(
                codes,
                "ltoir" if lto else "ptx",
                lib._entry_name,
                bool(lib.use_cooperative),
                [*lib._linking_files, *helper_files(ir)],
                dict(getattr(lib, "referenced_objects", {})),
                module_callbacks(getattr(lib, "_setup_functions", ())),
                module_callbacks(getattr(lib, "_teardown_functions", ())),
                bool(_NRT_CALLS.search(ir)),
            )
    except LaunchpadError:
        raise
    except Exception as exc:
        if type(exc).__module__.startswith("numba"):  # typing and lowering errors: the user's code
            log = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # without Numba's terminal colours
            kinds = ", ".join(map(str, argtypes))
            raise CompileError(f"Numba could not compile kernel {pyfunc.__name__!r} for ({kinds})", log) from exc
        raise


def internal_compiler() -> Any:
    """numba-cuda's compile entry point that returns the code library, or None."""
    from numba.cuda import compiler

    return getattr(compiler, "_compile_pyfunc_with_fixup", None)


def _compile_public(pyfunc: Any, argtypes: tuple, cc: tuple, options: dict) -> Compiled:
    """Through ``numba.cuda.compile`` alone: PTX, whose ``.entry`` and calls tell the rest."""
    from numba import cuda

    ptx, _ = cuda.compile(pyfunc, argtypes, device=False, abi="numba", output="ptx", cc=cc, **options)
    entries = re.findall(r"\.entry\s+([\w$.]+)\s*\(", ptx)
    if len(entries) != 1:
        raise CompileError(f"expected one kernel in Numba's PTX for {pyfunc.__name__!r}, found {entries}")
    cooperative = any(re.search(rf"\b{s}\b", ptx) for s in _GRID_SYNC_SYMBOLS)
    return Compiled([ptx.encode()], "ptx", entries[0], cooperative, helper_files(ptx), {},
                    uses_nrt=bool(_NRT_CALLS.search(ptx)))  # fmt: skip


def helper_files(code: str) -> list[str]:
    """numba-cuda's helper sources a kernel's code calls into, which its dispatcher links when it
    makes the kernel rather than the compiler: ``reshape_funcs.cu`` (array reshapes)."""
    from numba.cuda import dispatcher

    names = getattr(dispatcher, "reshape_funcs", ())
    if not any(name in code for name in names):
        return []
    return [str(Path(dispatcher.__file__).parent / "reshape_funcs.cu")]


# --- linking --------------------------------------------------------------------------------------


def linked_object(item: Any, arch: str, output: str) -> Any:
    """A file given to ``declare_device(link=...)`` (a path or Numba ``LinkableCode``) as an
    object the toolchain links; CUDA C++ sources are compiled with NVRTC."""
    from cuda.core import ObjectCode

    if isinstance(item, (str, Path)):
        path = Path(item)
        if path.suffix == ".cu":
            return compile_object(path.read_text(), arch=arch, output=output, include_dirs=[path.parent])
        data, kind = path.read_bytes(), path.suffix.lstrip(".")
    else:  # a LinkableCode: its callbacks come with the code library (see module_callbacks)
        data = item.data
        kind = _linkable_kind(item)
        if kind == "cu":
            return compile_object(data if isinstance(data, str) else data.decode(), arch=arch, output=output)
        if isinstance(data, str):
            data = data.encode()
    if kind == "a":
        return ObjectCode.from_library(bytes(data))
    if kind == "o":
        return ObjectCode.from_object(bytes(data))
    return bytes(data)  # PTX, LTO-IR, cubin and fatbin are told apart by their bytes


def module_callbacks(functions: Any) -> tuple:
    """A code library's module callbacks, each once, in order, without numba-cuda's fp16 shim's
    ``lto_warning_callback``: it only warns that nvJitLink is missing, and launchpad always links
    with nvJitLink."""
    seen: list = []
    for f in functions:
        if f not in seen and getattr(f, "__name__", "") != "lto_warning_callback":
            seen.append(f)
    return tuple(seen)


#: Functions of Numba's runtime a kernel calls when it allocates (numba-cuda's dispatcher looks for
#: these names in the PTX before it links its runtime in). Reference counting alone is left to
#: the optimizer, which removes it for arrays passed in (their meminfo is NULL); where it stays,
#: the link fails on an ``NRT_`` symbol and is refused the same way.
_NRT_CALLS = re.compile(r"\bNRT_(?:Allocate\w*|MemInfo_(?:alloc\w*|new\w*|init)|Free|dealloc)\b")


def refuse_nrt(name: str, compiled: Compiled) -> None:
    """Refuse kernels that need Numba's runtime: its memory system is set up and its allocations
    freed by numba-cuda's dispatcher, which launchpad does not run."""
    if compiled.uses_nrt or any(getattr(item, "nrt", False) for item in compiled.linking_files):
        raise ArgumentError(
            f"kernel {name!r} uses Numba's runtime (NRT: arrays allocated in the kernel, reference counting), "
            "which numba-cuda's dispatcher initializes on the device; launchpad does not, so it cannot launch it. "
            "Launch it with Numba's dispatcher, or allocate outside the kernel and pass the arrays in"
        )


def _linkable_kind(item: Any) -> str:
    kind = getattr(item, "kind", None)
    if kind == "cu":
        return kind
    try:
        from numba.cuda.cudadrv.linkable_code import FILE_EXTENSION_MAP

        return next((ext for ext, value in FILE_EXTENSION_MAP.items() if value == kind), "")
    except ImportError:
        return ""


def cudadevrt() -> Any:
    """libcudadevrt.a, which holds what grid synchronization calls."""
    from cuda.core import ObjectCode

    path = None
    try:
        from cuda import pathfinder

        path = pathfinder.find_static_lib("cudadevrt")
    except Exception:
        try:
            from numba.cuda.cudadrv.libs import get_cudalib

            path = get_cudalib("cudadevrt", static=True)
        except Exception:
            path = None
    if not path or not Path(path).is_file():
        raise CompileError(
            "this kernel synchronizes the grid, which needs libcudadevrt.a; it was not found "
            "(install the CUDA runtime's static libraries, e.g. the nvidia-cuda-runtime wheel)"
        )
    return ObjectCode.from_library(Path(path).read_bytes())
