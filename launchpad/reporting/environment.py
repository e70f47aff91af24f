"""What launchpad runs on: package versions, the driver, the devices and their launch limits, the
cache. ``python -m launchpad info`` prints it; the benchmarks record it with their results."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any

__all__ = ["devices", "environment", "file_size", "gpu_status", "package_versions"]

#: Distributions whose versions ``info`` and the benchmarks report; the first installed name wins.
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "triton": ("triton",),
    "numba": ("numba",),
    "numba-cuda": ("numba-cuda",),
    "cuda-tile": ("cuda-tile",),
    "tileiras": ("nvidia-cuda-tileiras",),
    "helion": ("helion",),
    "cuda-core": ("cuda-core",),
    "cuda-bindings": ("cuda-bindings",),
    "cupy": ("cupy", "cupy-cuda13x", "cupy-cuda12x"),
    "numpy": ("numpy",),
    "matplotlib": ("matplotlib",),
}


def package_versions() -> dict[str, str | None]:
    """Installed version of each peer distribution, None when it is not installed.

    Read from package metadata, so nothing is imported (importing triton or numba takes seconds).
    """
    out: dict[str, str | None] = {}
    for label, names in DISTRIBUTIONS.items():
        out[label] = None
        for name in names:
            try:
                out[label] = importlib.metadata.version(name)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return out


def import_package_owners() -> list[str]:
    """The installed distributions that provide the import package ``launchpad``: launchpad's
    own (``launchpad-kernels``) and any other that does (``dm-launchpad``, PyPI's ``launchpad``),
    which installs its files into the same folder (see docs/versions.md)."""
    owners = importlib.metadata.packages_distributions().get("launchpad", [])
    return sorted(set(owners), key=lambda name: (name != "launchpad-kernels", name))


def gpu_status() -> tuple[bool, str]:
    """``(True, "")`` when torch and the CUDA driver both see a GPU, else ``(False, why not)``.

    launchpad launches on torch's streams, so it needs a CUDA build of torch as well as a GPU.
    Why not is one short clause per missing piece, in words a newcomer acts on (``torch
    2.13.0+cpu is a CPU-only build, and no NVIDIA driver was found``), not the driver
    bindings' own text: the demo, ``info`` and ``bench`` put it in a sentence.
    """
    import torch

    from ..core import driver as _driver
    from ..errors import NoDeviceError

    reasons = []
    if torch.version.cuda is None:
        reasons.append(f"torch {torch.__version__} is a CPU-only build")
    elif not torch.cuda.is_available():
        reasons.append(f"torch {torch.__version__} sees no CUDA device")
    try:
        _driver.init()
        if _driver.device_count() == 0:
            reasons.append("the NVIDIA driver reports no GPU")
    except NoDeviceError as exc:
        missing = str(exc).startswith(_driver.NO_DRIVER)
        reasons.append("no NVIDIA driver was found" if missing else "the NVIDIA driver reports no GPU")
    return not reasons, ", and ".join(reasons)


def toolchain() -> dict[str, dict[str, str | None]]:
    """NVRTC's and nvJitLink's versions (None: not found) and, where one is missing, what to install."""
    from ..core import toolchain as _toolchain

    out: dict[str, dict[str, str | None]] = {}
    for library in _toolchain.LIBRARIES:
        version = _toolchain.library_version(library)
        out[library] = {"version": version, "install": _toolchain.install_hint() if version is None else None}
    return out


def driver_version() -> str | None:
    """The CUDA version the driver supports (``"13.0"``), None without a driver."""
    from ..core import driver as _driver
    from ..errors import LaunchpadError

    try:
        v = _driver.driver_version()
    except LaunchpadError:
        return None
    return f"{v // 1000}.{v % 1000 // 10}"


def devices() -> list[dict[str, Any]]:
    """Name, compute capability and launch limits of every device the driver sees."""
    from ..core import driver as _driver

    out = []
    for d in range(_driver.device_count()):
        major, minor = _driver.compute_capability(d)
        info: dict[str, Any] = {
            "index": d,
            "name": _driver.device_name(d),
            "compute_capability": f"{major}.{minor}",
            "arch": f"sm_{major}{minor}",
            "sms": _driver.device_attribute(d, "multiprocessor_count"),
            "max_threads_per_block": _driver.device_attribute(d, "max_threads_per_block"),
            "max_shared_per_block": _driver.device_attribute(d, "max_shared_memory_per_block"),
            "max_shared_per_block_optin": _driver.device_attribute(d, "max_shared_memory_per_block_optin"),
            "max_shared_per_sm": _driver.device_attribute(d, "max_shared_memory_per_multiprocessor"),
        }
        try:
            import torch

            if torch.cuda.is_available() and d < torch.cuda.device_count():
                info["total_memory"] = torch.cuda.get_device_properties(d).total_memory
        except Exception:  # memory size is a nicety; the driver's attributes above are what matter
            pass
        out.append(info)
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cache_summary() -> dict[str, Any]:
    from ..core import cache as _cache

    found = _cache.entries()
    return {
        "dir": str(_cache.cache_dir()),
        "entries": len(found),
        "bytes": sum(file_size(p) for p in found),
    }


def _tensor_reads() -> str:
    """How the compiled executor reads a tensor argument here (its fields are learned on the CPU now;
    a launch learns CUDA's at its first launch on a device)."""
    from ..launch import executor, torch_fields

    if executor._claunch is None:
        return "by the Python executor"
    if os.environ.get("LAUNCHPAD_TORCH_FIELDS", "") == "0":
        return "through torch's DLPack exchange API (LAUNCHPAD_TORCH_FIELDS=0)"
    fields, why = torch_fields.learn(executor._claunch)
    if fields is None:
        return f"through torch's DLPack exchange API ({why})"
    return "from torch's tensor fields, checked against its DLPack exchange API (CUDA's at a first launch)"


def environment() -> dict[str, Any]:
    """Everything ``info`` reports, as a JSON-ready dict (the benchmarks record it too)."""
    import torch

    import launchpad

    ok, reason = gpu_status()
    return {
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "launchpad": launchpad.__version__,
        "launch_path": list(launchpad.launch_path()),
        "tensor_reads": _tensor_reads(),
        "packages": package_versions(),
        "launchpad_installed_by": import_package_owners(),
        "torch_cuda": torch.version.cuda,
        "toolchain": toolchain(),
        "driver": driver_version(),
        "gpu_available": ok,
        "no_gpu_reason": reason,
        "devices": devices(),
        "cache": cache_summary(),
    }


def file_size(path: Path) -> int:
    """A file's size in bytes, 0 where it cannot be read."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
