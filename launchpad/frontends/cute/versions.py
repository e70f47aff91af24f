"""The CuTe DSL releases the CuTe DSL front end works with, and the refusal of the others.

CuTe DSL (PyPI ``nvidia-cutlass-dsl``, imported as ``cutlass``) documents no stable calling
convention: launchpad follows the one it read from the PTX of each release it was tested with
(:mod:`.layout`), and refuses a release outside that range by name rather than guess a layout.
It is needed only to compile; a compiled CuTe kernel launches (and loads, :func:`launchpad.load`)
without it.
"""

from __future__ import annotations

from typing import Any

from ...core.versions import parse_version
from ...errors import UnsupportedVersion

__all__ = ["MAX_CUTE", "MIN_CUTE", "TESTED", "check_cute"]

#: The oldest CuTe DSL release whose calling convention launchpad knows (the one it was read from).
MIN_CUTE = (4, 8)
#: The newest release series launchpad knows (inclusive): a later one may change the layout.
MAX_CUTE = (4, 8)
#: The release the tests ran with.
TESTED = "4.8.1"

_INSTALL = "pip install 'nvidia-cutlass-dsl==4.8.*' (the cute extra of launchpad-kernels)"


def check_cute() -> Any:
    """``cutlass`` (CuTe DSL), imported, after checking its version.

    Raises
    ------
    UnsupportedVersion
        CuTe DSL is not installed, or its release is outside :data:`MIN_CUTE` .. :data:`MAX_CUTE`.
    """
    try:
        import cutlass
        import cutlass.cute
    except ImportError as exc:
        raise UnsupportedVersion(f"launchpad.from_cute needs CuTe DSL (PyPI nvidia-cutlass-dsl 4.8), which does not "
                                 f"import here ({exc}); {_INSTALL}") from None  # fmt: skip
    found = getattr(cutlass, "__version__", "")
    version = parse_version(found)
    if version is None or not MIN_CUTE <= version <= MAX_CUTE:
        raise UnsupportedVersion(
            f"launchpad.from_cute knows the calling convention of CuTe DSL {MIN_CUTE[0]}.{MIN_CUTE[1]} (tested: "
            f"{TESTED}); nvidia-cutlass-dsl {found or '?'} is installed, whose kernels may take their tensors in "
            f"another layout; {_INSTALL}"
        )
    return cutlass
