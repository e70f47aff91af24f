"""Kernel parameters: :class:`Param`, the type words that name their types, signatures.

A parameter's offset and size come from the binary (:mod:`launchpad.core.binary` reads them); its
type, where known, is a type word in Triton's spelling: ``"*fp32"`` (a pointer to float32),
``"i32"``, ``"u1"``, ``"fp16"``, ``"bf16"``, ``"bytes128"`` (an opaque by-value struct). A
signature (``"*fp32, *fp32, i32"``) types a binary's parameters and must agree with it in count
and sizes. The packed argument buffer mirrors the binary's layout exactly: one ``struct``
format per kernel, computed once, with ``x`` pad bytes between parameters.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..errors import ArgumentError, BinaryError

__all__ = [
    "INDEX_RANGE",
    "POINTER_DTYPES",
    "SCALAR_TYPES",
    "Param",
    "apply_signature",
    "layout_from_signature",
    "parameter_block",
    "parse_signature",
    "struct_format",
    "type_size",
]

#: Scalar type words: size in bytes and the ``struct`` code the packer writes.
SCALAR_TYPES: dict[str, tuple[int, str]] = {
    "i1": (1, "?"), "u1": (1, "?"),
    "i8": (1, "b"), "u8": (1, "B"),
    "i16": (2, "h"), "u16": (2, "H"),
    "i32": (4, "i"), "u32": (4, "I"),
    "i64": (8, "q"), "u64": (8, "Q"),
    "fp16": (2, "e"), "bf16": (2, "H"),  # bf16 is converted to its 16 bits before packing
    "fp32": (4, "f"), "fp64": (8, "d"),
}  # fmt: skip

#: Element types a typed pointer may name, with the torch dtype each expects.
POINTER_DTYPES: dict[str, str] = {
    "fp8e4nv": "float8_e4m3fn", "fp8e5": "float8_e5m2", "fp8e4b15": "", "fp8e4b8": "float8_e4m3fnuz",
    "fp8e5b16": "float8_e5m2fnuz", "fp16": "float16", "bf16": "bfloat16", "fp32": "float32",
    "fp64": "float64", "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u1": "bool", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "void": "",
}  # fmt: skip

#: The integer types an array's extents and strides may be passed as (cuTile's ``index_dtype``),
#: with the lowest and largest value of each: one table for the executors and the cuTile front end.
INDEX_RANGE: dict[str, tuple[int, int]] = {
    "i32": (-(2**31), 2**31 - 1), "u32": (0, 2**32 - 1), "i64": (-(2**63), 2**63 - 1),
}  # fmt: skip

_UNTYPED_CODES = {1: "B", 2: "H", 4: "I", 8: "Q"}


@dataclass(frozen=True)
class Param:
    """One kernel parameter as the binary lays it out.

    Attributes
    ----------
    index : int
        Position in the kernel's parameter list.
    offset, size, align : int
        Byte offset in the parameter buffer, size and alignment.
    type : str or None
        A type word (``"*fp32"``, ``"i32"``, ``"fp16"``, ``"bytes128"``) or None when only the
        size is known.
    name : str or None
        The argument's name where known.
    """

    index: int
    offset: int
    size: int
    align: int
    type: str | None = None
    name: str | None = None

    @property
    def kind(self) -> str:
        """``pointer``, ``int``, ``float``, ``bool``, ``bytes`` or ``untyped`` (size known only)."""
        t = self.type
        if t is None:
            return "untyped" if self.size in _UNTYPED_CODES else "bytes"
        if t.startswith("*"):
            return "pointer"
        if t.startswith("bytes"):
            return "bytes"
        if t in ("i1", "u1"):
            return "bool"
        if t.startswith(("fp", "bf")):
            return "float"
        return "int"

    @property
    def code(self) -> str:
        """The ``struct`` code that packs this parameter."""
        kind = self.kind
        if kind == "pointer":
            return "Q"
        if kind == "bytes":
            return f"{self.size}s"
        if kind == "untyped":
            return _UNTYPED_CODES[self.size]
        assert self.type is not None  # kind "untyped" is the only one without a type
        return SCALAR_TYPES[self.type][1]

    def to_json(self) -> dict:
        return {"index": self.index, "offset": self.offset, "size": self.size, "align": self.align,
                "type": self.type, "name": self.name}  # fmt: skip

    @property
    def label(self) -> str:
        """How error messages name the parameter: ``param 2 ('n', i32)``."""
        parts = [repr(self.name)] if self.name else []
        if self.type:
            parts.append(self.type)
        return f"param {self.index}" + (f" ({', '.join(parts)})" if parts else "")


def type_size(word: str) -> int:
    """Size in bytes of a value of a type word."""
    if word.startswith("*"):
        return 8
    if word.startswith("bytes"):
        return int(word[5:])
    try:
        return SCALAR_TYPES[word][0]
    except KeyError:
        raise ArgumentError(f"unknown type word {word!r}") from None


def struct_format(params: list[Param] | tuple[Param, ...]) -> tuple[str, int]:
    """The little-endian ``struct`` format of the whole parameter buffer, and its size."""
    fmt, pos = ["<"], 0
    for p in sorted(params, key=lambda p: p.offset):
        if p.offset < pos:
            raise BinaryError(f"{p.label} overlaps the previous parameter (offset {p.offset})")
        if p.offset > pos:
            fmt.append(f"{p.offset - pos}x")
        fmt.append(p.code)
        pos = p.offset + p.size
    return "".join(fmt), pos


def parameter_block(params: Sequence[Param], size: int) -> tuple[bytearray, ctypes.Array]:
    """A zeroed buffer of ``size`` bytes for a kernel's parameters, and the array of each
    parameter's address in it: what ``cuLaunchKernel`` and graph kernel nodes take.

    The buffer is a ``bytearray`` because ``struct.pack_into`` writes one far more cheaply than a
    ctypes array. A ctypes view pins it (an exported bytearray cannot be resized, so the addresses
    stay valid); the address array holds that view, so keeping the array keeps both.
    """
    buffer = bytearray(max(size, 1))
    view = (ctypes.c_char * len(buffer)).from_buffer(buffer)
    base = ctypes.addressof(view)
    pointers = (ctypes.c_void_p * max(len(params), 1))(*[base + p.offset for p in params])
    pointers._pinned = view  # type: ignore[attr-defined]
    return buffer, pointers


# --- signatures ---------------------------------------------------------------------------------


def parse_signature(signature: str | Sequence[str]) -> list[str]:
    """Split ``"*fp32, *fp32, i32"`` into type words and check each one."""
    words = [w.strip() for w in signature.split(",")] if isinstance(signature, str) else list(signature)
    words = [w for w in words if w]
    for w in words:
        if w.startswith("*"):
            if w[1:] not in POINTER_DTYPES:
                raise ArgumentError(f"unknown pointer type {w!r} in signature")
        else:
            type_size(w)
    return words


def apply_signature(params: list[Param], words: list[str], kernel: str) -> list[Param]:
    """Give the binary's parameters the signature's types; count and sizes must agree."""
    if len(words) != len(params):
        raise ArgumentError(
            f"kernel {kernel!r}: the signature has {len(words)} parameters but the binary has "
            f"{len(params)} ({', '.join(str(p.size) for p in params) or 'none'} bytes)"
        )
    out = []
    for p, w in zip(params, words):
        if type_size(w) != p.size:
            raise ArgumentError(
                f"kernel {kernel!r}: signature type {w!r} of param {p.index} is {type_size(w)} bytes "
                f"but the binary's param {p.index} is {p.size} bytes"
            )
        out.append(replace(p, type=w, align=max(p.align, min(type_size(w), 8))))
    return out


def layout_from_signature(words: list[str]) -> list[Param]:
    """Natural-alignment layout of a signature (for binaries whose own layout is unreadable)."""
    params, pos = [], 0
    for i, w in enumerate(words):
        size = type_size(w)
        align = 64 if w.startswith("bytes") and size == 128 else min(size, 8)
        pos = (pos + align - 1) // align * align
        params.append(Param(i, pos, size, align, w))
        pos += size
    return params
