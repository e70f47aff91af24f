"""Kernel binaries read without a GPU: cubin (ELF), fatbin and PTX images.

A kernel's parameters are laid out by the compiler; the cubin records that layout in its
``.nv.info.<kernel>`` section, which is what the driver uses: one record per parameter (ordinal,
offset, size), ``EIATTR_KPARAM_INFO`` while the parameters fit the classic 4 KB, and
``EIATTR_KPARAM_INFO_V2`` for the large parameter blocks CUDA 12.1 allows (up to
:data:`MAX_PARAM_BYTES` on Volta and newer). PTX declares each parameter in its ``.entry`` list. This module reads both, every kernel an image defines, and the architecture an image
was built for; a truncated or damaged image raises :class:`~launchpad.BinaryError` here,
before the driver ever sees it.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ..errors import BinaryError, MissingFileError
from .params import Param

__all__ = [
    "CLASSIC_PARAM_BYTES",
    "MAX_PARAM_BYTES",
    "BinaryKernel",
    "arch_runs_on",
    "cubin_arch",
    "image_arch",
    "kernels_in_image",
    "ptx_arch",
    "read_image",
]


#: The most bytes of parameters a kernel may take: CUDA 12.1+ on Volta and newer GPUs...
MAX_PARAM_BYTES = 32764
#: ...and before that (or on older GPUs).
CLASSIC_PARAM_BYTES = 4096


@dataclass(frozen=True)
class BinaryKernel:
    """What a binary says about one kernel, read without a GPU."""

    name: str
    params: tuple[Param, ...]
    registers: int | None = None
    static_shared: int | None = None
    arch: str | None = None


def read_image(data_or_path: bytes | bytearray | memoryview | str | Path) -> tuple[bytes, str]:
    """Return ``(image, kind)`` with kind ``cubin``, ``fatbin`` or ``ptx``.

    Raises
    ------
    BinaryError
        The bytes are none of these.
    MissingFileError
        ``data_or_path`` is a path and there is no file there (also a ``FileNotFoundError``).
    """
    if isinstance(data_or_path, (str, Path)):
        try:
            data = Path(data_or_path).read_bytes()
        except FileNotFoundError:
            raise MissingFileError(
                f"no file {str(data_or_path)!r} (a cubin, fatbin or PTX image was expected)", str(data_or_path)
            ) from None
    else:
        data = bytes(data_or_path)
    if data[:4] == b"\x7fELF":
        return data, "cubin"
    if data[:4] == b"\x50\xed\x55\xba":
        return data, "fatbin"
    if b".entry" in data or b".version" in data:
        return data.rstrip(b"\0") + b"\0", "ptx"  # the driver wants NUL-terminated PTX
    raise BinaryError(f"not a cubin, fatbin or PTX image ({len(data)} bytes starting {data[:8]!r})")


#: The empty kernels through which :mod:`launchpad.frontends.cpp.frontend` learns parameter types: launchpad's own,
#: never a user's, so never listed.
TYPE_PROBE = "__launchpad_probe"


def kernels_in_image(image: bytes, kind: str) -> dict[str, BinaryKernel]:
    """Every kernel an image defines, with its parameter layout (launchpad's type probes left out).

    Raises
    ------
    BinaryError
        The image is truncated or damaged where it can be told without a GPU (an ELF whose
        header, section or segment table points past its end, a fatbin entry that does).
    """
    try:
        if kind == "cubin":
            found = _elf_kernels(image)
        elif kind == "ptx":
            found = _ptx_kernels(image.decode(errors="replace"))
        else:
            found = {}
            for entry_kind, payload in _fatbin_entries(image):  # first entry that names a kernel wins
                for name, k in kernels_in_image(payload, entry_kind).items():
                    found.setdefault(name, k)
        return {name: k for name, k in found.items() if TYPE_PROBE not in name}
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, BinaryError):
            raise
        raise BinaryError(f"corrupt {kind}: cannot read its structure ({type(exc).__name__}: {exc})") from None


# --- architectures -------------------------------------------------------------------------------

#: ``e_ident[EI_ABIVERSION]`` from which the SM number is in bits 8-15 of ``e_flags``
#: (``ELFABIVERSION_CUDA_V2``: ptxas 12.8+ for sm_100 and later, every target from CUDA 13).
_ELFABIVERSION_CUDA_V2 = 8
_EF_CUDA_ACCELERATORS_V1 = 0x800  # the "a" variant (sm_90a) in the first layout
_EF_CUDA_ACCELERATORS = 0x8  # the "a" variant in the second layout
_PTX_TARGET = re.compile(rb"^[ \t]*\.target[ \t]+(sm_\d+[af]?)", re.M)
_ARCH = re.compile(r"(?:sm|compute)_(\d+)([af]?)")


def cubin_arch(elf: bytes) -> str | None:
    """The SM a cubin was built for (``"sm_90"``, ``"sm_90a"``), read from its ELF header.

    ``e_flags`` holds it in one of two layouts, told apart by the ABI version in ``e_ident``
    (the ``EF_CUDA_*`` constants of LLVM's ``BinaryFormat/ELF.h``): before
    ``ELFABIVERSION_CUDA_V2`` the SM is the low byte and ``0x800`` marks the architecture-specific
    ("a") variant (ptxas 12.x: ``0x5a0d5a`` for sm_90a); from it on the SM is in bits 8-15 and
    ``0x8`` marks "a" (``0x0900640a`` for sm_100a). ptxas 13 writes the second layout for every
    SM and does not always set ``0x8`` (sm_90a and sm_90 cubins of NVRTC 13.5 have the same
    ``0x06005a04``), so an "a" cubin may read as its base SM; the driver then refuses it on
    another device and launchpad reports that as the same :class:`BinaryError`.
    None when the header cannot tell.
    """
    if len(elf) < 52 or elf[:4] != b"\x7fELF":
        return None
    (flags,) = struct.unpack_from("<I", elf, 48)
    if elf[8] >= _ELFABIVERSION_CUDA_V2:
        sm, specific = (flags >> 8) & 0xFF, flags & _EF_CUDA_ACCELERATORS
    else:
        sm, specific = flags & 0xFF, flags & _EF_CUDA_ACCELERATORS_V1
    if sm < 10:
        return None
    return f"sm_{sm}" + ("a" if specific else "")


def ptx_arch(ptx: bytes) -> str | None:
    """The ``.target`` of a PTX module (``"sm_90"``, ``"sm_90a"``), or None without one."""
    m = _PTX_TARGET.search(ptx, 0, 1 << 16)
    return m.group(1).decode() if m else None


def image_arch(image: bytes, kind: str) -> str | None:
    """The architecture a cubin or PTX image targets; None for fatbins (the driver picks)."""
    if kind == "cubin":
        return cubin_arch(image)
    if kind == "ptx":
        return ptx_arch(image)
    return None


def arch_runs_on(arch: str, kind: str, capability: tuple[int, int]) -> bool:
    """Whether a device of compute ``capability`` can run ``arch`` code of this ``kind``.

    A cubin for sm_XY runs on devices X.Z with Z >= Y (same major version); PTX for sm_XY is
    compiled by the driver for any device of capability X.Y or newer; an architecture-specific
    target (sm_90a, either kind) runs only on exactly X.Y, and a family target (sm_100f) on the
    same major version. An unrecognized ``arch`` is left to the driver (True).
    """
    m = _ARCH.fullmatch(arch)
    if m is None:
        return True
    major, minor = divmod(int(m.group(1)), 10)
    cc = (int(capability[0]), int(capability[1]))
    if m.group(2) == "a":
        return cc == (major, minor)
    if kind == "ptx" and not m.group(2):
        return cc >= (major, minor)
    return cc[0] == major and cc[1] >= minor


_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_EIATTR_KPARAM_INFO = 0x17  # index:u32 ordinal:u16 offset:u16 flags:u32 (the size in bits 18-31)
_EIATTR_KPARAM_INFO_V2 = 0x45  # index:u32 ordinal:u16 offset:u16 size:u16 flags:u16 (large parameter blocks)
_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 4
_STO_CUDA_ENTRY = 0x10


_PROGRAM = struct.Struct("<IIQQQQQQ")
_EM_CUDA = 190
_SHT_NOBITS = 8


def _elf_sections(elf: bytes) -> tuple[tuple, list[tuple]]:
    """The ELF header and section headers of a cubin, after checking that everything the header,
    section and segment tables point at lies inside the bytes (a truncated cubin fails here)."""
    size = len(elf)
    if size < _ELF_HEADER.size:
        raise BinaryError(f"truncated cubin: {size} bytes, less than an ELF header")
    if elf[4] != 2 or elf[5] != 1:
        raise BinaryError("not a cubin: not a 64-bit little-endian ELF file")
    hdr = _ELF_HEADER.unpack_from(elf, 0)
    e_machine, e_phoff, e_shoff, e_phnum, e_shnum, e_shstrndx = hdr[2], hdr[5], hdr[6], hdr[10], hdr[12], hdr[13]
    if e_machine != _EM_CUDA:
        raise BinaryError(f"not a cubin: an ELF file for machine {e_machine}, not CUDA ({_EM_CUDA})")
    for what, offset, count, entry in (
        ("section", e_shoff, e_shnum, _SECTION),
        ("segment", e_phoff, e_phnum, _PROGRAM),
    ):
        end = offset + count * entry.size
        if count and end > size:
            raise BinaryError(f"truncated cubin: its {what} headers end at byte {end} but it has {size} bytes")
    if e_shstrndx >= e_shnum:
        raise BinaryError(f"corrupt cubin: section name table {e_shstrndx} of {e_shnum} sections")
    sections = [_SECTION.unpack_from(elf, e_shoff + i * _SECTION.size) for i in range(e_shnum)]
    for i, sec in enumerate(sections):
        if sec[1] != _SHT_NOBITS and sec[4] + sec[5] > size:
            raise BinaryError(f"truncated cubin: section {i} ends at byte {sec[4] + sec[5]} but it has {size} bytes")
    for i in range(e_phnum):
        p_offset, p_filesz = _PROGRAM.unpack_from(elf, e_phoff + i * _PROGRAM.size)[2:6:3]
        if p_offset + p_filesz > size:
            raise BinaryError(
                f"truncated cubin: segment {i} ends at byte {p_offset + p_filesz} but it has {size} bytes"
            )
    return hdr, sections


def _elf_kernels(elf: bytes) -> dict[str, BinaryKernel]:
    hdr, sections = _elf_sections(elf)
    e_shstrndx = hdr[13]

    def data(sec: tuple) -> bytes:
        return elf[sec[4] : sec[4] + sec[5]] if sec[1] != 8 else b""  # SHT_NOBITS has no bytes

    def cstr(table: bytes, at: int) -> str:
        return table[at : table.index(b"\0", at)].decode()

    shstr = data(sections[e_shstrndx])
    by_name = {cstr(shstr, s[0]): s for s in sections}
    arch = cubin_arch(elf)

    entries: list[str] = []
    symbols: list[str] = []
    symtab = by_name.get(".symtab")
    if symtab is not None:
        strtab = data(sections[symtab[6]])
        raw = data(symtab)
        for i in range(0, len(raw), _SYMBOL.size):
            st_name, st_info, st_other, *_ = _SYMBOL.unpack_from(raw, i)
            symbols.append(cstr(strtab, st_name))
            if st_info & 0xF == 2 and st_other & _STO_CUDA_ENTRY:  # STT_FUNC marked as an entry
                entries.append(symbols[-1])
    info = data(by_name[".nv.info"]) if ".nv.info" in by_name else b""  # a cubin of no kernel may have none
    registers = {
        symbols[sym]: count for sym, count in _info_records(info, _EIATTR_REGCOUNT, "<II") if sym < len(symbols)
    }

    kernels = {}
    for name in entries:
        info = data(by_name[f".nv.info.{name}"]) if f".nv.info.{name}" in by_name else b""
        layout = sorted(
            [(ordinal, offset, flags >> 18 & 0x3FFF) for _, ordinal, offset, flags in
             _info_records(info, _EIATTR_KPARAM_INFO, "<IHHI")]
            + [(ordinal, offset, size) for _, ordinal, offset, size, _ in
               _info_records(info, _EIATTR_KPARAM_INFO_V2, "<IHHHH")]
        )  # fmt: skip
        params = tuple(Param(i, off, size, _natural_align(off, size)) for i, (_, off, size) in enumerate(layout))
        shared = by_name.get(f".nv.shared.{name}")
        kernels[name] = BinaryKernel(
            name,
            params,
            registers=registers.get(name),
            static_shared=shared[5] if shared else 0,
            arch=arch,
        )
    return kernels


def _info_records(info: bytes, attribute: int, layout: str) -> list[tuple]:
    """The payloads of one attribute's records in an ``.nv.info`` section.

    Each record is ``format:u8 attribute:u8 value:u16``; for ``EIFMT_SVAL`` the value is the
    size of a payload that follows.
    """
    out, pos = [], 0
    while pos + 4 <= len(info):
        fmt, attr, value = struct.unpack_from("<BBH", info, pos)
        pos += 4
        if fmt != _EIFMT_SVAL:
            continue
        if attr == attribute:
            out.append(struct.unpack_from(layout, info, pos))
        pos += value
    return out


def _natural_align(offset: int, size: int) -> int:
    """The alignment a parameter of this size needs, as far as its offset allows telling."""
    align = 1
    while align < min(size, 16) and offset % (align * 2) == 0:
        align *= 2
    return align


_PTX_ENTRY = re.compile(r"\.entry\s+([\w$.]+)\s*\((.*?)\)", re.S)
_PTX_PARAM = re.compile(
    r"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)((?:\s+\.ptr)?(?:\s+\.(?:global|shared|const|local))?"
    r"(?:\s+\.align\s+\d+)?)\s+([\w$.]+)(?:\[(\d+)\])?"
)
_PTX_TYPES = {"f32": "fp32", "f64": "fp64", "f16": "fp16"}


def _ptx_kernels(ptx: str) -> dict[str, BinaryKernel]:
    kernels = {}
    for m in _PTX_ENTRY.finditer(ptx):
        params, pos = [], 0
        for i, pm in enumerate(_PTX_PARAM.finditer(m.group(2))):
            align_s, ptype, _qualifiers, _pname, count = pm.groups()
            elem = int(re.sub(r"\D", "", ptype) or 8) // 8
            size = elem * int(count) if count else elem
            align = int(align_s) if align_s else elem
            pos = (pos + align - 1) // align * align
            word = _PTX_TYPES.get(ptype) if not count else None
            params.append(Param(i, pos, size, align, word))
            pos += size
        kernels[m.group(1)] = BinaryKernel(m.group(1), tuple(params))
    return kernels


_FATBIN_ENTRY = struct.Struct("<HHIQ")


def _fatbin_entries(fatbin: bytes) -> list[tuple[str, bytes]]:
    """Uncompressed ELF and PTX entries of a fatbin container (compressed ones are skipped)."""
    header_size, body_size = struct.unpack_from("<HQ", fatbin, 6)
    pos, end, out = header_size, header_size + body_size, []
    while pos + _FATBIN_ENTRY.size <= min(end, len(fatbin)):
        kind, _version, entry_header, payload_size = _FATBIN_ENTRY.unpack_from(fatbin, pos)
        payload = fatbin[pos + entry_header : pos + entry_header + payload_size]
        if kind == 2 and payload[:4] == b"\x7fELF":
            out.append(("cubin", payload))
        elif kind == 1 and b".entry" in payload[: 1 << 20]:
            out.append(("ptx", payload.split(b"\0", 1)[0]))
        if entry_header == 0:
            break
        pos += entry_header + payload_size
    return out
