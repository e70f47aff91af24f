"""The architecture a kernel is compiled for, from what a user writes.

Every front end that compiles takes ``arch=`` and passes it through :func:`resolve_arch`:
NVRTC's and nvJitLink's own spellings (``"sm_90"``, ``"sm_90a"``, ``"compute_90"``), a compute
capability (``90``, ``"90"``, ``"9.0"``, ``(9, 0)``), or a GPU's name (``"H100"``), which is what
people know about their machine; ``None`` asks the current GPU. Anything else is refused here,
listing the forms and the names, rather than reaching NVRTC as ``sm_<it>`` and coming back as
"invalid value for --gpu-architecture".
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Sequence

from ..errors import ArgumentError, ArgumentTypeError, NoDeviceError
from . import driver as _driver

__all__ = ["GPU_ARCHS", "nvrtc_archs", "resolve_arch"]

#: A GPU's name (lower case, without spaces or dashes) and the architecture of its compute
#: capability: the data-center parts and the consumer cards people compile for.
GPU_ARCHS: dict[str, str] = {
    "v100": "sm_70",
    "t4": "sm_75", "rtx2080": "sm_75", "rtx2080ti": "sm_75",
    "a100": "sm_80", "a800": "sm_80", "a30": "sm_80",
    "a10": "sm_86", "a10g": "sm_86", "a40": "sm_86", "a16": "sm_86", "a2": "sm_86", "rtx3090": "sm_86",
    "rtxa6000": "sm_86",
    "l4": "sm_89", "l40": "sm_89", "l40s": "sm_89", "l20": "sm_89", "rtx4090": "sm_89", "rtx6000ada": "sm_89",
    "h100": "sm_90", "h200": "sm_90", "h800": "sm_90", "h20": "sm_90", "gh200": "sm_90",
    "b200": "sm_100", "b100": "sm_100", "gb200": "sm_100",
    "b300": "sm_103", "gb300": "sm_103",
    "rtx5090": "sm_120", "rtx5080": "sm_120", "rtxpro6000": "sm_120",
}  # fmt: skip

#: Words of a full device name that say nothing of the architecture ("NVIDIA GeForce RTX 4090").
_VENDOR_WORDS = re.compile(r"^(nvidia|geforce|tesla|quadro)+")
#: What may follow a GPU's name in its full form: memory size and kind, form factor
#: ("H100 80GB HBM3", "A100-SXM4-40GB", "H100 PCIe", "H100 NVL").
_VARIANT = re.compile(r"((\d+gb)|hbm\d*e?|sxm\d*|pcie|nvl|mig)*")
#: NVRTC's and nvJitLink's spellings: a real architecture, one with its architecture-specific
#: (``a``) or family-specific (``f``) features, or a virtual one (PTX for it and newer).
_ARCH = re.compile(r"(sm|compute)_?(\d{2,3})([af]?)")
#: Every compute capability a CUDA release has compiled for (CUDA 11 to 13; NVRTC takes a subset):
#: a number among them, or above the newest (a GPU newer than this list), reaches the compiler;
#: one between them ("sm_95") is refused here with the list, not by NVRTC's "invalid value".
KNOWN_ARCHS = (35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 88, 89, 90, 100, 101, 103, 107, 110, 120, 121)


def resolve_arch(arch: str | int | tuple[int, int] | None, kernel: str | Sequence[str] | None = None) -> str:
    """The architecture NVRTC and nvJitLink take (``"sm_90"``) from what ``arch=`` was given.

    Parameters
    ----------
    arch : str, int, tuple or None
        ``"sm_90"``, ``"sm_90a"``, ``"compute_90"`` (case and a missing underscore forgiven),
        ``90``, ``"90"``, ``"9.0"``, ``(9, 0)``, or a GPU's name (:data:`GPU_ARCHS`, any case,
        ``"H100"``, ``"RTX 4090"``, ``"NVIDIA H100 80GB HBM3"``); None: the current GPU's.
    kernel : str or sequence of str, optional
        The kernel (or kernels) being compiled, for the messages.

    Raises
    ------
    ArgumentError
        ``arch`` is none of these; the message lists the forms and the names.
    ArgumentTypeError
        ``arch`` is a float (``9.0``, ``90.0``): the message gives the int and the strings to write.
    NoDeviceError
        ``arch`` is None and there is no GPU to ask: the message says to pass ``arch``.
    """
    if arch is None:  # the current GPU's; here, not in a helper, so a refusal's traceback stays short
        import torch

        try:
            major, minor = _driver.compute_capability(torch.cuda.current_device() if _driver.device_count() else 0)
        except NoDeviceError as exc:
            reason = str(exc).split(";")[0]  # the driver's own words, without its advice: given here
            raise NoDeviceError(
                f"cannot compile {_what(kernel) or 'the code'} for this machine's GPU: {reason}. Pass the target "
                'architecture to compile without a GPU: arch="sm_90" for an H100, or the GPU\'s name (arch="h100", '
                '"a100", "l4", "b200"...)'
            ) from None
        return f"sm_{major}{minor}"
    if isinstance(arch, float):  # 9.0 and 90.0 are both meant as sm_90: refused rather than guessed
        raise ArgumentTypeError(_refusal(arch, kernel, _float_hint(arch)))
    if isinstance(arch, tuple) and len(arch) == 2 and all(isinstance(v, int) and v >= 0 for v in arch):
        if _known(f"{arch[0]}{arch[1]}"):
            return f"sm_{arch[0]}{arch[1]}"
    elif isinstance(arch, int) and not isinstance(arch, bool) and arch >= 10:
        if _known(str(arch)):
            return f"sm_{arch}"
    if isinstance(arch, str):
        text = arch.strip().lower()
        found = _ARCH.fullmatch(text)
        if found and _known(found.group(2)):
            return f"{found.group(1)}_{found.group(2)}{found.group(3)}"
        number = re.fullmatch(r"(\d{2,3})|(\d{1,2})\.(\d)", text)
        if number and _known(number.group(1) or number.group(2) + number.group(3)):
            return f"sm_{number.group(1) or number.group(2) + number.group(3)}"
        named = _by_name(text)
        if named is not None:
            return named
    raise ArgumentError(_refusal(arch, kernel))


@functools.cache
def nvrtc_archs() -> tuple[str, tuple[int, ...]]:
    """The installed NVRTC's version (``"13.4"``) and the compute capabilities it compiles for
    (``(75, 80, ...)``); ``("", ())`` where there is no NVRTC to ask. Asked only for a refusal's
    message: loading libnvrtc costs more than a cached compile."""
    try:
        from cuda.bindings import nvrtc

        _, major, minor = nvrtc.nvrtcVersion()
        _, archs = nvrtc.nvrtcGetSupportedArchs()
        return f"{major}.{minor}", tuple(int(a) for a in archs)
    except Exception:  # no NVRTC, or a cuda-bindings without the call
        return "", ()


def _float_hint(arch: float) -> str:
    """What to write for a float ``arch``: ``9.0`` and ``90.0`` read as compute capability 9.0, a
    float below 20 as major.minor (no major has reached 20), one above as XY."""
    number = (round(arch * 10) if arch < 20 else round(arch)) if math.isfinite(arch) and arch > 0 else 0
    if number >= 10 and _known(str(number)):
        return f" (a float, which cannot tell 9.0 from 90: write {number}, '{number // 10}.{number % 10}' or 'sm_{number}')"
    return " (a float, which cannot tell 9.0 from 90: write an int such as 90, or a str such as '9.0' or 'sm_90')"


def _known(number: str) -> bool:
    """Whether compute capability ``number`` ("90") is one CUDA has, or newer than every one listed."""
    return int(number) in KNOWN_ARCHS or int(number) > KNOWN_ARCHS[-1]


def _by_name(text: str) -> str | None:
    """The architecture of a GPU named ``text`` (already lower case), or None."""
    name = _VENDOR_WORDS.sub("", re.sub(r"[\s_\-]+", "", text))
    if name in GPU_ARCHS:
        return GPU_ARCHS[name]
    # the longest name the text starts with, followed only by memory and form-factor words:
    # "a100sxm480gb" is an A100, "h1000" is no GPU
    for known in sorted(GPU_ARCHS, key=len, reverse=True):
        if name.startswith(known) and _VARIANT.fullmatch(name[len(known) :]):
            return GPU_ARCHS[known]
    return None


def _what(kernel: str | Sequence[str] | None) -> str:
    """``kernel 'axpy'``, ``kernels 'a', 'b'``, or ``""``."""
    if isinstance(kernel, str):
        return f"kernel {kernel!r}"
    if kernel:
        return f"kernel{'s' if len(kernel) > 1 else ''} " + ", ".join(map(repr, kernel))
    return ""


def _refusal(arch: object, kernel: str | Sequence[str] | None, hint: str = "") -> str:
    """Why ``arch`` is refused, with every form it may take and the closest GPU name (``hint``, where
    given, says why instead)."""
    what = f"{_what(kernel)}: " if kernel else ""
    names = ", ".join(f"{n} ({a})" for n, a in GPU_ARCHS.items())
    close = [] if hint else difflib.get_close_matches(str(arch).strip().lower().replace(" ", ""), GPU_ARCHS, n=1)
    hint = hint or (f" (did you mean {close[0]!r}, {GPU_ARCHS[close[0]]}?)" if close else "")
    number = re.fullmatch(r"(?:sm|compute)?_?(\d{2,3})[af]?|(\d{1,2})\.(\d)", str(arch).strip().lower())
    if number and not close and not hint:  # a number, but no architecture of CUDA's: the nearest ones
        value = int(number.group(1) or number.group(2) + number.group(3))
        near = sorted(KNOWN_ARCHS, key=lambda known: (abs(known - value), known))[:2]
        hint = f" (no GPU has compute capability {value}; did you mean {' or '.join(f'sm_{n}' for n in sorted(near))}?)"
    known = ", ".join(str(n) for n in KNOWN_ARCHS)
    version, taken = nvrtc_archs()
    if taken:  # the list above is CUDA's: say which of them the NVRTC that will compile takes
        known += f" (those of CUDA 11 to 13; the installed NVRTC {version} compiles for {', '.join(map(str, taken))})"
    return (
        f"{what}arch {arch!r} is not an architecture launchpad can compile for{hint}. Give 'sm_XY' (a real "
        "architecture, e.g. 'sm_90' for an H100), 'sm_XYa' (with its architecture-specific features, 'sm_90a'), "
        "'compute_XY' (PTX for XY and newer), a compute capability (90, '9.0', (9, 0)) or a GPU's name, any "
        f"case: {names}. The architectures (XY): {known}"
    )
