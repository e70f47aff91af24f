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
import difflib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..errors import ArgumentError, ArgumentTypeError, BinaryError

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
        raise ArgumentError(f"unknown type word {word!r}{_write_instead(word)}") from None


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


def parse_signature(signature: str | Sequence[str], kernel: str | None = None) -> list[str]:
    """Split ``"*fp32, *fp32, i32"`` into type words and check each one.

    Parameters
    ----------
    signature : str or sequence of str
        The type words, comma-separated or as a list.
    kernel : str, optional
        The kernel the signature types, for the messages.

    Raises
    ------
    ArgumentTypeError
        ``signature`` is neither a string nor a list of strings.
    ArgumentError
        A word is no type word; the message gives the one to write (``'*fp32'`` for ``float*``).
    """
    what = f"kernel {kernel!r}: " if kernel else ""
    if isinstance(signature, str):
        words = [w.strip() for w in signature.split(",")]
    else:
        listed = list(signature) if isinstance(signature, (list, tuple)) else None
        odd = next((w for w in listed if not isinstance(w, str)), None) if listed is not None else None
        if listed is None or odd is not None:
            got = f"{type(odd).__name__} {odd!r} among them" if listed is not None else (
                f"{type(signature).__name__} {signature!r}")  # fmt: skip
            raise ArgumentTypeError(f"{what}signature takes a str or a list of type words, got {got}: write "
                                    "'*fp32, fp32, i32' or ['*fp32', 'fp32', 'i32']")  # fmt: skip
        words = [w.strip() for w in listed]
    words = [w for w in words if w]
    for w in words:
        if not _known(w):
            kind = "pointer type" if w.startswith("*") else "type word"
            fixed = [_suggestion(v) or v for v in words]
            whole = (
                f" (the whole signature: {', '.join(fixed)!r})" if fixed != words and all(map(_known, fixed)) else ""
            )
            raise ArgumentError(f"{what}unknown {kind} {w!r} in the signature{_write_instead(w, whole)}")
    return words


def _known(word: str) -> bool:
    """Whether ``word`` is a type word: a typed pointer, a scalar, an opaque struct (``"bytes128"``)."""
    if word.startswith("*"):
        return word[1:] in POINTER_DTYPES
    return word in SCALAR_TYPES or (word.startswith("bytes") and word[5:].isdigit())


#: C++, torch and NumPy spellings of the types, and the type word of each (``long`` as on Linux).
_SPELLINGS = {
    "float": "fp32", "float32": "fp32", "f32": "fp32", "double": "fp64", "float64": "fp64", "f64": "fp64",
    "half": "fp16", "__half": "fp16", "float16": "fp16", "f16": "fp16",
    "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16", "bfloat16": "bf16",
    "bool": "i1", "char": "i8", "signed char": "i8", "int8_t": "i8", "int8": "i8",
    "unsigned char": "u8", "uint8_t": "u8", "uint8": "u8",
    "short": "i16", "int16_t": "i16", "int16": "i16", "unsigned short": "u16", "uint16_t": "u16", "uint16": "u16",
    "int": "i32", "int32_t": "i32", "int32": "i32", "unsigned": "u32", "unsigned int": "u32", "uint32_t": "u32",
    "uint32": "u32", "long": "i64", "long long": "i64", "int64_t": "i64", "int64": "i64", "unsigned long": "u64",
    "unsigned long long": "u64", "uint64_t": "u64", "uint64": "u64", "size_t": "u64",
}  # fmt: skip


def _suggestion(word: str) -> str | None:
    """The type word meant by ``word`` (``"*fp32"`` for ``"const float*"``), or None. Asked only for a
    word that is none: a refusal's message."""
    text = " ".join(w for w in word.replace("*", " * ").split() if w not in ("const", "volatile", "__restrict__"))
    pointer = text.startswith("*") or text.endswith("*")
    base = text.strip("* ")
    base = _SPELLINGS.get(base, base)
    if pointer:
        return f"*{base}" if base in POINTER_DTYPES else None
    if base in SCALAR_TYPES:
        return base
    close = difflib.get_close_matches(base, [*SCALAR_TYPES, *(f"*{p}" for p in POINTER_DTYPES)], n=1, cutoff=0.6)
    return close[0] if close else None


def _write_instead(word: str, whole: str = "") -> str:
    """``": write '*fp32'; signatures take ..."``: what to write for ``word``, which is no type word
    (``whole``: the signature rewritten, where every word of it could be)."""
    suggestion = _suggestion(word)
    said = f": write {suggestion!r}{whole}" if suggestion and suggestion != word else ""
    return (f"{said}; signatures take Triton's type words: '*fp32' for float*, 'i32' for int, 'fp32' for float, "
            "'fp64' for double, 'i64' for long long, 'u32' for unsigned, 'fp16' for __half, 'bf16' for "
            "__nv_bfloat16, 'i1' for bool, 'bytes16' for a 16-byte struct")  # fmt: skip


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
