"""The Helion releases this front end follows, and the refusal of any other.

What Helion specializes a kernel on (:mod:`launchpad.frontends.helion.keys` computes the same key)
and how its generated host functions call their launcher change between minor releases: 1.1
drops the device type from each tensor's key and buckets every dynamic size alike, 1.2 adds the
device's compute capability, 1.4 whether the call is distributed, 1.5 the aliasing between input
tensors, compiler seeds and a dispatch cache of its own. A release is supported once its key
has been checked against Helion's own (``tests/test_helion.py``); any other is refused with
:class:`~launchpad.UnsupportedVersion` when the front end is used, never keyed by guesswork.
"""

from __future__ import annotations

import re

from ...errors import UnsupportedVersion

__all__ = ["SUPPORTED", "check_installed", "installed_version", "supported_text"]

#: Oldest and newest Helion release launchpad follows, as (major, minor), inclusive.
SUPPORTED: tuple[tuple[int, int], tuple[int, int]] = ((1, 0), (1, 0))


def installed_version() -> str | None:
    """The installed Helion's version (``"1.0.0"``), or None when Helion is not installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version("helion")
    except importlib.metadata.PackageNotFoundError:
        return None


def _parse(text: str) -> tuple[int, int] | None:
    m = re.match(r"\s*(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def supported_text() -> str:
    """The supported releases as words: ``"1.0.x"``."""
    (a, b), (c, d) = SUPPORTED
    return f"{a}.{b}.x" if (a, b) == (c, d) else f"{a}.{b} to {c}.{d}"


def check_installed(version: str | None = None) -> str:
    """The installed Helion's version, refused unless launchpad follows it.

    Parameters
    ----------
    version
        The version to check; the installed one when None.

    Raises
    ------
    UnsupportedVersion
        Helion is not installed, or is a release outside :data:`SUPPORTED` (naming both).
    """
    version = version if version is not None else installed_version()
    supported = supported_text()
    if version is None:
        raise UnsupportedVersion(
            f"Helion is not installed; launchpad's Helion front end needs helion {supported} "
            "(pip install 'helion>=1.0,<1.1': the helion extra of launchpad-kernels)"
        )
    parsed = _parse(version)
    if parsed is None or not SUPPORTED[0] <= parsed <= SUPPORTED[1]:
        raise UnsupportedVersion(
            f"Helion {version} is installed; launchpad's Helion front end follows helion {supported}, whose "
            "specialization key and launcher calls it reproduces; call the Helion kernel itself, or install "
            f"helion {supported}"
        )
    return version
