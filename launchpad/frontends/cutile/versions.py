"""The cuTile and ``tileiras`` releases the cuTile front end works with, and the refusals.

cuTile (PyPI ``cuda-tile``) is the Python front end; ``tileiras`` (PyPI ``nvidia-cuda-tileiras``, or
a CUDA toolkit's ``bin``) compiles its Tile IR to a cubin. cuTile exports cubins and documents
their calling convention from 1.4 on, and ``tileiras`` targets Hopper (``sm_90``) from 13.3. cuTile
looks for ``tileiras`` itself (the pip packages first, when ``nvidia-cuda-tileiras``,
``nvidia-cuda-nvcc`` and ``nvidia-nvvm`` share one major.minor; then ``PATH`` and ``CUDA_HOME``);
launchpad asks the same binary for its version before compiling, so a missing or too old compiler
is named before cuTile runs it. Neither is needed to launch a compiled kernel.
"""

from __future__ import annotations

import functools
import re
import subprocess
from typing import Any

from ...core.versions import parse_version
from ...errors import UnsupportedVersion

__all__ = ["MIN_CUTILE", "MIN_TILEIRAS", "check_cutile", "check_tileiras", "tileiras_version"]

#: The oldest cuTile launchpad compiles with (the first with ``export_kernel`` and sm_90).
MIN_CUTILE = (1, 4)
#: The oldest ``tileiras`` per architecture family: Blackwell from 13.1, Hopper from 13.3.
MIN_TILEIRAS = {"sm_9": (13, 3), "": (13, 1)}

_INSTALL = (
    "pip install 'cuda-tile[tileiras]' (cuda-tile with nvidia-cuda-tileiras, nvidia-cuda-nvcc and nvidia-nvvm of one "
    "major.minor: the cutile extra of launchpad-kernels)"
)


def check_cutile() -> Any:
    """``cuda.tile``, imported, after checking its version.

    Raises
    ------
    UnsupportedVersion
        cuTile is not installed, or older than :data:`MIN_CUTILE`.
    """
    try:
        import cuda.tile as ct
    except ImportError as exc:
        raise UnsupportedVersion(f"launchpad.from_cutile needs cuTile (PyPI cuda-tile >= 1.4), which does not import "
                                 f"here ({exc}); {_INSTALL}") from None  # fmt: skip
    version = parse_version(getattr(ct, "__version__", ""))
    if version is None or version < MIN_CUTILE:
        raise UnsupportedVersion(
            f"launchpad.from_cutile needs cuTile (PyPI cuda-tile) >= 1.4, the first that exports cubins with a "
            f"documented calling convention; cuda-tile {getattr(ct, '__version__', '?')} is installed"
        )
    return ct


def _compiler_path() -> str:
    """The ``tileiras`` cuTile would run (its own search), or raise UnsupportedVersion."""
    try:
        from cuda.tile._compile import _find_compiler_bin  # cuTile's own search, so the same binary
    except ImportError:
        import shutil

        path = shutil.which("tileiras")
        if path is None:
            raise UnsupportedVersion(f"cuTile's compiler tileiras is not found on PATH; {_INSTALL}") from None
        return path
    try:
        return str(_find_compiler_bin().path)
    except FileNotFoundError as exc:
        raise UnsupportedVersion(f"cuTile's compiler tileiras (PyPI nvidia-cuda-tileiras) is not found: {exc} "
                                 f"{_pip_versions()}; {_INSTALL}") from None  # fmt: skip


def _pip_versions() -> str:
    """The versions of the pip packages cuTile's search wants at one major.minor (for messages)."""
    from importlib import metadata

    found = []
    for name in ("nvidia-cuda-tileiras", "nvidia-cuda-nvcc", "nvidia-nvvm"):
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    return "(" + ", ".join(found) + ")"


@functools.cache
def tileiras_version() -> tuple[str, tuple[int, int] | None]:
    """``(path, (major, minor))`` of the ``tileiras`` cuTile uses; the version None if unreadable."""
    path = _compiler_path()
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return path, None
    m = re.search(r"release (\d+)\.(\d+)", out)
    return path, (int(m.group(1)), int(m.group(2))) if m else None


def check_tileiras(arch: str) -> None:
    """Refuse a missing ``tileiras``, or one too old for ``arch`` (called before compiling).

    Raises
    ------
    UnsupportedVersion
        Naming the package, the binary found and its version.
    """
    path, version = tileiras_version()
    family = "sm_9" if arch.startswith("sm_9") else ""
    need = MIN_TILEIRAS[family]
    if version is None:
        raise UnsupportedVersion(f"cannot read the version of cuTile's compiler {path} (tileiras --version failed); "
                                 f"{_INSTALL}")  # fmt: skip
    if version < need:
        raise UnsupportedVersion(
            f"cuTile's compiler {path} is tileiras {version[0]}.{version[1]}; compiling for {arch} needs "
            f"tileiras >= {need[0]}.{need[1]} (PyPI nvidia-cuda-tileiras); {_INSTALL}"
        )
