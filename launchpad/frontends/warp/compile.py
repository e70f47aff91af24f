"""A Warp module compiled for one architecture by Warp's ahead-of-time compiler, through its cache.

:func:`compile_module` gives the cubin, ``.meta`` (JSON: each kernel's dynamic shared memory) and
``.cu`` source ``wp.compile_aot_module(module, arch=..., use_ptx=False)`` writes (NVRTC; no GPU
needed), in Warp's own kernel cache (``wp.config.kernel_cache_dir``, ``WARP_CACHE_PATH``): Warp
names each module's folder and files by the module's hash, and compiles nothing where the cubin
and its ``.meta`` are there already, so a module compiled once (by ``from_warp``, or by
``wp.launch`` on a GPU of this architecture) is read back in a later call or process.

A module is compiled apart, in a temporary folder, each time where the cache cannot be trusted:
its names carry no hash (``strip_hash``: a cached file of its name may be an older source's) or
Warp's cache is switched off (``wp.config.cache_kernels``); or where Warp cannot build in it (a
read-only cache: what it holds of the module is read, else the module is compiled apart); or
where a cached module lacks its source, which :mod:`.tiles` reads.

Warp is imported by the caller (:func:`launchpad.from_warp`) and passed in.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from ...errors import CompileError

__all__ = ["Compiled", "beside", "compile_module", "module_files", "read_compiled"]

#: ``wp_<module>_<hash>.sm90.cubin`` (``sm90a``, ``sm100f``: Warp's arch suffixes).
_CUBIN = re.compile(r"\.sm\d+[af]?\.cubin$")

#: A compiled module: the cubin's bytes, its ``.meta`` (``{}`` where absent) and ``.cu`` source ("").
Compiled = tuple[bytes, dict, str]


def compile_module(wp: Any, kernel: Any, name: str, arch: str) -> Compiled:
    """The kernel's module compiled for ``arch`` (``"sm_90"``) by Warp, through Warp's cache
    (see the module documentation)."""
    number = int(re.sub(r"\D", "", arch.removeprefix("sm_")))
    wp.init()  # (sets wp.config.kernel_cache_dir, None before; at once where Warp is initialized already)
    cache, module = wp.config.kernel_cache_dir, kernel.module
    if wp.config.cache_kernels and not module.options.get("strip_hash") and cache:
        cubin: Path | None
        if _writable(cache):
            cubin = _compile_into(wp, kernel, name, arch, number, None)
        else:  # a read-only cache: what it holds of this module, else compiled apart
            folder = Path(cache) / module.get_module_identifier(int(module.options.get("block_dim") or 256))
            found = [p for p in folder.glob(f"*.sm{number}*.cubin") if _CUBIN.search(p.name)]
            cubin = found[0] if len(found) == 1 and beside(found[0], ".meta").is_file() else None
        if cubin is not None and beside(cubin, ".cu").is_file():
            return read_compiled(cubin)
    with tempfile.TemporaryDirectory(prefix="launchpad-warp-") as folder:
        return read_compiled(_compile_into(wp, kernel, name, arch, number, folder))


def beside(cubin: Path, suffix: str) -> Path:
    """The module's file of ``suffix`` beside its cubin: ``wp_<module>_<hash>.sm90.cubin`` -> ``.cu``."""
    return cubin.with_name(_CUBIN.sub("", cubin.name) + suffix)


def read_compiled(cubin: Path) -> Compiled:
    """A Warp cubin, and its module's ``.meta`` and ``.cu`` source beside it where they are."""
    return (cubin.read_bytes(), *module_files(cubin))


def module_files(cubin: Path) -> tuple[dict, str]:
    """The ``.meta`` (``{}`` where absent) and ``.cu`` source ("") beside a Warp cubin."""
    meta_path, source_path = beside(cubin, ".meta"), beside(cubin, ".cu")
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    return meta, source_path.read_text() if source_path.is_file() else ""


def _writable(folder: str) -> bool:
    """Whether Warp can build in its cache: its build folders are made beside the modules' own."""
    path = Path(folder)
    while not path.exists() and path.parent != path:
        path = path.parent
    return os.access(path, os.W_OK | os.X_OK)


def _compile_into(wp: Any, kernel: Any, name: str, arch: str, number: int, folder: str | None) -> Path:
    """The cubin ``wp.compile_aot_module`` compiles (or finds) in ``folder`` (None: Warp's cache)."""
    try:
        paths = wp.compile_aot_module(kernel.module, arch=number, module_dir=folder, use_ptx=False)
    except Exception as exc:  # Warp's codegen and NVRTC failures: the user's code or the compiler
        raise CompileError(f"Warp could not compile kernel {name!r} for {arch}: {type(exc).__name__}",
                           str(exc).strip()) from exc  # fmt: skip
    cubin = Path(paths[-1]) if paths else None  # (one path per device, then one per arch: ours, the last)
    if cubin is None or not _CUBIN.search(cubin.name) or f".sm{number}" not in cubin.name or not cubin.is_file():
        raise CompileError(f"Warp compiled kernel {name!r} for {arch} but wrote no cubin where it says",
                           str(cubin))  # fmt: skip
    return cubin
