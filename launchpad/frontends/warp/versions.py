"""The Warp releases the Warp front end follows, and the refusal of the others.

Warp's calling convention is its own and changes between releases: ``launch_bounds_t`` became a
template over the kernel's ``wp.tid()`` dimensions with a ``coord_mult`` word (1.19 has it: the
layout launchpad packs, :mod:`.args`), array and vector layouts have stayed put. launchpad follows
releases whose generated code it has read (``warp/native/builtin.h``, ``array.h``, ``codegen.py``)
and refuses the others by name, rather than launch a kernel with a layout it has not checked.
Launching a compiled Warp kernel needs no Warp: the layout is in its spec (``metadata["warp_version"]``
records which release compiled it).
"""

from __future__ import annotations

from typing import Any

from ...core.versions import parse_version
from ...errors import UnsupportedVersion

__all__ = ["FOLLOWED", "check_version", "check_warp"]

#: The Warp releases (major, minor) whose layouts launchpad packs.
FOLLOWED = ((1, 19),)

_INSTALL = "pip install 'warp-lang>=1.19,<1.20' (the warp extra of launchpad-kernels)"


def _followed() -> str:
    return ", ".join(f"{a}.{b}" for a, b in FOLLOWED)


def check_version(version: str) -> None:
    """Refuse a Warp release launchpad does not follow, naming it.

    Raises
    ------
    UnsupportedVersion
        ``version`` is not one of :data:`FOLLOWED`.
    """
    parsed = parse_version(version)
    if parsed is None or parsed[:2] not in FOLLOWED:
        raise UnsupportedVersion(
            f"launchpad.from_warp follows Warp {_followed()}, whose launch_bounds_t, array_t and value layouts it "
            f"packs; warp-lang {version or '?'} is installed, whose layout launchpad has not checked; {_INSTALL}"
        )


def check_warp() -> Any:
    """``warp``, imported, after checking its version.

    Raises
    ------
    UnsupportedVersion
        Warp is not installed, or is a release launchpad does not follow.
    """
    try:
        import warp as wp
    except ImportError as exc:
        raise UnsupportedVersion(f"launchpad.from_warp needs NVIDIA Warp (PyPI warp-lang), which does not import "
                                 f"here ({exc}); {_INSTALL}") from None  # fmt: skip
    check_version(str(getattr(wp, "__version__", "")))
    return wp
