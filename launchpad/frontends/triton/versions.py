"""Triton's launch convention, version by version: the one table launchpad's Triton front end follows.

Triton changes how its launcher passes arguments between minor releases. Everything launchpad
does differently for one Triton version is decided here, from the version recorded in a kernel's
metadata (``triton_version``), never from the Triton that happens to be installed: a cubin
compiled by Triton 3.6 and loaded from a saved artifact in a process with Triton 3.9 (or none)
is launched as 3.6 launched it.

=========================  =====  =========  =====  =========
rule                       3.4    3.5 - 3.6  3.7    3.8 - 3.9
=========================  =====  =========  =====  =========
hidden scratch pointers    1      2          2      2
pointer-form descriptor    none   padding    padding, round_f32_to_tf32
  flags (1 byte each)
fp4 descriptor i32 shape   as is  doubled    as is  as is
TF32 tensor maps           no     no         yes    yes
TTIR part names            the argument's name      ``t.0``, ``d.shape.0``
TTIR descriptor type       ``!tt.tensordesc<tensor<64x64xf16>>``  ``!tt.tensordesc<64x64xf16>``
profile scratch            (none) left uninitialized  zero-filled
oversized shared memory    no     no         no     yes
=========================  =====  =========  =====  =========

Kernels compiled with GSan instrumentation (3.8+) take extra hidden parameters whose values only
Triton's GSan runtime can give; launchpad refuses them. Versions outside
:data:`SUPPORTED` are refused with :class:`~launchpad.UnsupportedVersion` rather than launched by
guesswork.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.versions import parse_version, range_text
from ...errors import UnsupportedVersion

__all__ = ["SUPPORTED", "Convention", "check_installed", "convention", "parse_version"]

#: Oldest and newest Triton release launchpad launches kernels of, as (major, minor), inclusive.
SUPPORTED: tuple[tuple[int, int], tuple[int, int]] = ((3, 4), (3, 9))

#: torch's Linux wheels and the Triton each pins (for the README and error messages).
TORCH_PINS = {"2.11": "3.6.0", "2.12": "3.7.1", "2.13": "3.7.1", "2.14": "3.8.x", "2.15": "3.9.x"}


@dataclass(frozen=True)
class Convention:
    """How Triton ``version`` launches a kernel (see the module's table)."""

    version: tuple[int, int]

    @property
    def scratch(self) -> tuple[str, ...]:
        """The hidden pointer parameters after the kernel's own, in order."""
        return ("global",) if self.version < (3, 5) else ("global", "profile")

    @property
    def descriptor_flags(self) -> tuple[str, ...]:
        """The 1-byte flags a pointer-form host tensor descriptor passes after its i64 shape and strides."""
        if self.version < (3, 5):
            return ()
        if self.version < (3, 7):
            return ("padding",)
        return ("padding", "round_f32_to_tf32")

    @property
    def fp4_shape_doubled(self) -> bool:
        """Whether an fp4-padded TMA descriptor passes its doubled last dimension as the i32 shape."""
        return (3, 5) <= self.version < (3, 7)

    @property
    def tf32_maps(self) -> bool:
        """Whether ``round_f32_to_tf32`` descriptors are encoded as TF32 tensor maps."""
        return self.version >= (3, 7)

    @property
    def dotted_ttir_names(self) -> bool:
        """Whether the TTIR names tuple items ``t.0`` and descriptor parts ``d.shape.0``."""
        return self.version >= (3, 8)

    @property
    def zeroed_profile_scratch(self) -> bool:
        """Whether the profile scratch is zero-filled (Triton allocates it itself from 3.8)."""
        return self.version >= (3, 8)

    @property
    def oversized_shared(self) -> bool:
        """Whether loading a kernel above 48 KiB of shared memory first asks for the oversized mode."""
        return self.version >= (3, 8)


def convention(metadata: dict[str, Any]) -> Convention:
    """The convention of the Triton that compiled a kernel, from its metadata.

    Raises
    ------
    UnsupportedVersion
        The kernel was compiled by a Triton outside :data:`SUPPORTED`, or with GSan
        instrumentation.
    """
    raw = metadata.get("triton_version")
    version: tuple[int, int] | None
    if raw is None:  # 3.4 wrote no version; 3.5 added profile scratch and the version together
        version = (3, 5) if "profile_scratch_size" in metadata else (3, 4)
    else:
        version = parse_version(raw)
        if version is None:
            raise UnsupportedVersion(f"kernel {metadata.get('name')!r}: unreadable triton_version {raw!r}")
    name = metadata.get("name")
    if not SUPPORTED[0] <= version <= SUPPORTED[1]:
        raise UnsupportedVersion(
            f"kernel {name!r} was compiled by Triton {raw}; launchpad launches kernels of Triton "
            f"{range_text(SUPPORTED)}, whose calling conventions it knows"
        )
    if "gsan" in str(metadata.get("instrumentation_mode") or ""):
        raise UnsupportedVersion(
            f"kernel {name!r} was compiled with instrumentation_mode={metadata['instrumentation_mode']!r}: "
            "GSan kernels take hidden parameters only Triton's GSan runtime can fill; launch it with Triton"
        )
    return Convention(version)


def check_installed() -> None:
    """Refuse an installed Triton outside :data:`SUPPORTED` (called before the front end uses Triton).

    Raises
    ------
    UnsupportedVersion
        Naming the installed version and the supported range.
    """
    import triton

    version = parse_version(getattr(triton, "__version__", ""))
    if version is None or not SUPPORTED[0] <= version <= SUPPORTED[1]:
        raise UnsupportedVersion(
            f"Triton {getattr(triton, '__version__', '?')} is installed; launchpad's Triton front end supports "
            f"Triton {range_text(SUPPORTED)} (torch pins: "
            + ", ".join(f"{t} -> {v}" for t, v in TORCH_PINS.items())
            + "); install a supported Triton, or launch saved artifacts, which need no Triton"
        )
