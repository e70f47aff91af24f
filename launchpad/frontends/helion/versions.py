"""The Helion releases this front end follows, what each keys on, and the refusal of any other.

What Helion specializes a kernel on (:mod:`launchpad.frontends.helion.keys` computes the same key)
changes between minor releases; how its generated host functions call their launcher does not,
from 1.0 to 1.4 (``_launcher(kernel, grid, *args, num_warps=..., num_stages=..., **options)``,
the keywords from one unchanged ``launcher_keyword_args``). Per release, in
``Kernel._base_specialization_key``:

- 1.0: each tensor's entry holds its device type; a dynamic size keys as ``min(size, 2)``;
- 1.1: the device type leaves the tensor entries for one entry after the arguments (the first
  tensor argument's), and every dynamic size keys as 2 (0 and 1 no longer apart);
- 1.2: that entry is the device ``_find_device`` finds (inside lists, tuples and dicts too, or a
  ``torch.device`` argument), followed by its CUDA compute capability;
- 1.4: then whether the call is distributed (symmetric-memory tensors, or a process group in an
  initialized ``torch.distributed``); ``Kernel.__call__`` gains a dispatch cache of its own,
  which picks the bound kernel ``bind`` would (its key is finer).

1.3 was never released. 1.5 rewrites the binding: the base key gains input-tensor aliasing and
a hardware promotion key, the bound-kernel cache keys compiler-seed results, compiling publishes
new extractors (guarded input facts) that re-key or retire bound kernels, and
``BoundKernel.__call__`` re-binds when those change. Its key is not reproduced: launchpad asks
Helion's own ``Kernel.bind`` on every call (``Rules.bind_per_call``) and runs the host function of
the bound kernel it returns. Its launcher calls may carry runtime keywords (``_remote_copy_*``,
``_persistent_state_*``, ``_minimum_resident_programs``), refused by name
(:mod:`launchpad.frontends.helion.launch`). 1.5.1 also needs a torch newer than 2.11 (it imports
``IntelGPUError`` from ``torch._inductor.runtime.triton_compat``). A release is followed once its
key has been checked against Helion's own, or is Helion's own (``tests/test_helion.py``); any
other is refused with :class:`~launchpad.UnsupportedVersion` when the front end is used, never
keyed by guesswork.
"""

from __future__ import annotations

import dataclasses

from ...core.versions import parse_version
from ...errors import UnsupportedVersion

__all__ = ["RELEASES", "SUPPORTED", "Rules", "check_installed", "installed_version", "rules_of", "supported_text"]


@dataclasses.dataclass(frozen=True)
class Rules:
    """What one Helion minor release keys a call on (beside the per-argument entries all share).

    Attributes
    ----------
    device_in_tensor
        Each tensor's entry holds its device type (1.0).
    small_sizes_apart
        A dynamic size keys as ``min(size, 2)`` (1.0); else every size keys alike (2).
    device_entry
        The entry after the arguments: None (1.0), ``"first_tensor"`` (1.1: the device type of
        the first tensor argument) or ``"find_device"`` (1.2 on: ``_find_device``'s device type
        and its CUDA compute capability).
    distributed
        Whether the call is distributed follows (1.4).
    bind_per_call
        The key is not reproduced: every call asks Helion's own ``Kernel.bind`` (1.5, whose key
        and binding depend on what compiling publishes); the other fields then go unused.
    """

    device_in_tensor: bool
    small_sizes_apart: bool
    device_entry: str | None
    distributed: bool
    bind_per_call: bool = False


#: Each Helion release launchpad follows, as (major, minor), with what it keys on.
RELEASES: dict[tuple[int, int], Rules] = {
    (1, 0): Rules(device_in_tensor=True, small_sizes_apart=True, device_entry=None, distributed=False),
    (1, 1): Rules(device_in_tensor=False, small_sizes_apart=False, device_entry="first_tensor", distributed=False),
    (1, 2): Rules(device_in_tensor=False, small_sizes_apart=False, device_entry="find_device", distributed=False),
    (1, 4): Rules(device_in_tensor=False, small_sizes_apart=False, device_entry="find_device", distributed=True),
    (1, 5): Rules(
        device_in_tensor=False,
        small_sizes_apart=False,
        device_entry="find_device",
        distributed=True,
        bind_per_call=True,
    ),
}

#: Oldest and newest Helion release launchpad follows, as (major, minor), inclusive (1.3 was
#: never released; :data:`RELEASES` lists each).
SUPPORTED: tuple[tuple[int, int], tuple[int, int]] = (min(RELEASES), max(RELEASES))

_PIP = "pip install 'helion>=1.0,<1.6'"


def installed_version() -> str | None:
    """The installed Helion's version (``"1.0.0"``), or None when Helion is not installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version("helion")
    except importlib.metadata.PackageNotFoundError:
        return None


def supported_text() -> str:
    """The supported releases as words: ``"1.0, 1.1, 1.2, 1.4 and 1.5"``."""
    names = [f"{a}.{b}" for a, b in sorted(RELEASES)]
    return names[0] + ".x" if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def rules_of(version: str | None = None) -> Rules:
    """What the installed Helion (or ``version``) keys on; refused as :func:`check_installed` refuses."""
    parsed = parse_version(check_installed(version))
    assert parsed is not None  # check_installed refuses what does not parse
    return RELEASES[parsed]


def check_installed(version: str | None = None) -> str:
    """The installed Helion's version, refused unless launchpad follows it.

    Parameters
    ----------
    version
        The version to check; the installed one when None.

    Raises
    ------
    UnsupportedVersion
        Helion is not installed, or is a release outside :data:`RELEASES` (naming both, and the
        pip command that installs a followed one).
    """
    version = version if version is not None else installed_version()
    supported = supported_text()
    if version is None:
        raise UnsupportedVersion(
            f"Helion is not installed; launchpad's Helion front end needs helion {supported} "
            f"({_PIP}: the helion extra of launchpad-kernels)"
        )
    parsed = parse_version(version)
    if parsed is None or parsed not in RELEASES:
        raise UnsupportedVersion(
            f"Helion {version} is installed; launchpad's Helion front end follows helion {supported}, whose "
            "specialization key and launcher calls it follows; call the Helion kernel itself, or install "
            f"a followed release ({_PIP})"
        )
    return version
