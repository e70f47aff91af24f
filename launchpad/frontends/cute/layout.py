"""CuTe DSL's calling convention: what a kernel parameter of each CuTe type is, in bytes.

Read from the PTX CuTe DSL 4.8 writes (and checked against the cubin's parameter sizes by
:mod:`.frontend`, and against CuTe's own argument packing by the tests):

* a ``cute.Tensor`` in global (or generic) memory, ``!cute.memref<f32, gmem, align<16>, "(?,?{div=8}):(?{i64 div=8},1)">``,
  is one by-value struct, aligned to 8 bytes: its data pointer, then each **dynamic** shape mode
  (``?``) as an ``i32`` (``i64`` where the type says ``?{i64}``), then each dynamic stride mode as
  an ``i64`` (``?{i64}``) or ``i32`` (``?``, a tensor made with 32-bit strides), every field at
  its natural alignment. Static modes (an integer in the type) are compiled in and not passed; a
  tensor whose layout is fully static is its bare pointer (8 bytes). ``{div=N}`` is a divisibility
  the kernel was compiled assuming, ``align<N>`` the data pointer's alignment in bytes;
* a scalar (``Int32``, ``Float32``, ...) is passed by value; a ``Constexpr`` is compiled in.

Only flat layouts (one level of modes, as a torch tensor has) are taken: a hierarchical layout
(``((8,16),(?,?)):...``, a tensor tiled by the host function) has no torch tensor to pack from.
This module imports no CuTe DSL: saved kernels carry its result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import LaunchpadError

__all__ = ["ELEMENT_TYPES", "SCALAR_WORDS", "TensorLayout", "packed_widths", "parse_memref"]

#: CuTe's element type names (in a memref type) and the torch dtype of each.
ELEMENT_TYPES: dict[str, str] = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "tf32": "float32",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64", "i1": "bool",
    "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2",
}  # fmt: skip

#: CuTe DSL's scalar classes (``cutlass.Int32``...) and launchpad's type word of each.
SCALAR_WORDS: dict[str, str] = {
    "Int8": "i8", "Int16": "i16", "Int32": "i32", "Int64": "i64", "Uint8": "u8", "Uint16": "u16",
    "Uint32": "u32", "Uint64": "u64", "Boolean": "i1", "Float16": "fp16", "BFloat16": "bf16",
    "Float32": "fp32", "Float64": "fp64",
}  # fmt: skip

_MEMREF = re.compile(r'^!cute\.memref<\s*([A-Za-z0-9]+)\s*,\s*(\w+)\s*(?:,\s*align<(\d+)>\s*)?,\s*"(.*)"\s*>$')
_MODE = re.compile(r"^(?:(-?\d+)|\?(?:\{([^}]*)\})?)$")


@dataclass(frozen=True)
class TensorLayout:
    """One ``cute.Tensor`` parameter: what the kernel assumes and where each passed value goes.

    Attributes
    ----------
    type : str
        CuTe's type, as the kernel was compiled for it (for messages).
    dtype : str
        The torch dtype of its elements.
    align : int
        The data pointer's alignment the kernel assumes, in bytes (1: none beyond the element).
    shape, stride : tuple
        Each mode's static value, or None where it is dynamic (passed).
    shape_div, stride_div : tuple
        Each dynamic mode's divisibility (1: none).
    fields : tuple
        ``(kind, mode, offset, size)`` of each passed value after the pointer, in order:
        ``("shape", 1, 8, 4)`` is the second shape mode, an ``i32`` at byte 8.
    size : int
        The struct's size in bytes (8: a bare pointer).
    """

    type: str
    dtype: str
    align: int
    shape: tuple[int | None, ...]
    stride: tuple[int | None, ...]
    shape_div: tuple[int, ...]
    stride_div: tuple[int, ...]
    fields: tuple[tuple[str, int, int, int], ...]
    size: int

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def options(self, offset: int) -> dict:
        """The JSON-able options of the argument's converter (``CONVERTERS["cute_tensor"]``), for the
        struct at ``offset`` in the parameter buffer: besides the layout, ``slots``, where the compiled
        executor writes the pointer and each extent and stride (``OP_TILE_ARRAY``, the operation of
        cuTile's arrays: a static mode's slot is empty, its value only checked)."""
        widths = packed_widths(self.fields, self.size)
        at = {(kind, mode): (offset + off, width) for (kind, mode, off, _), width in zip(self.fields, widths)}
        slots = [[offset, 8, 0]] + [[*at.get((kind, d), (offset, 0)), 1] for kind in ("shape", "stride")
                                    for d in range(self.ndim)]  # fmt: skip
        return {
            "type": self.type, "dtype": self.dtype, "align": self.align, "ndim": self.ndim,
            "shape_const": list(self.shape), "stride_const": list(self.stride), "shape_div": list(self.shape_div),
            "stride_div": list(self.stride_div), "fields": [list(f) for f in self.fields], "size": self.size,
            "slots": slots,
        }  # fmt: skip

    def field_names(self, name: str) -> list[str]:
        """How messages name the struct's fields: ``x``, ``x.shape[0]``, ``x.stride[0]``."""
        return [name] + [f"{name}.{kind}[{mode}]" for kind, mode, _, _ in self.fields]


def packed_widths(fields: list | tuple, size: int) -> list[int]:
    """How many bytes each field is written as: its own size, or 8 for an ``i32`` followed by 4 pad
    bytes (written as an ``i64``, so the pad holds its sign extension in both executors, never a
    leftover byte). The kernel reads only the field."""
    out = []
    for k, (_, _, offset, width) in enumerate(fields):
        end = fields[k + 1][2] if k + 1 < len(fields) else size
        out.append(8 if width == 4 and end - offset == 8 else width)
    return out


def _split_modes(text: str, where: str) -> list[str]:
    text = text.strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    if "(" in text or ")" in text:
        raise LaunchpadError(f"{where}: its layout is hierarchical (nested modes, a tensor the host function tiled), "
                             "which no torch tensor gives; pass the kernel the flat tensor and tile it inside")  # fmt: skip
    return [m.strip() for m in _split_top(text)] if text else []


def _split_top(text: str) -> list[str]:
    """Split on commas outside braces (``?{i64 div=8}`` holds none, but be safe)."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def _mode(text: str, where: str, default_bits: int) -> tuple[int | None, int, int]:
    """``(static value or None, divisibility, bits)`` of one mode: ``8``, ``?``, ``?{i64 div=8}``."""
    m = _MODE.match(text)
    if m is None:
        raise LaunchpadError(f"{where}: cannot read the mode {text!r} of its layout")
    if m.group(1) is not None:
        return int(m.group(1)), 1, 0
    bits, div = default_bits, 1
    for word in (m.group(2) or "").split():
        if word in ("i64", "i32"):
            bits = int(word[1:])
        elif word.startswith("div="):
            div = int(word[4:])
        else:
            raise LaunchpadError(
                f"{where}: the mode {text!r} of its layout holds {word!r}, which launchpad does not know"
            )
    return None, div, bits


def parse_memref(type_text: str, where: str = "a tensor") -> TensorLayout:
    """The layout of a ``!cute.memref`` parameter type (see the module's description).

    Raises
    ------
    LaunchpadError
        A memory space other than global, an element type without a torch dtype, a hierarchical
        layout, or a mode launchpad cannot read; ``where`` names the kernel and parameter.
    """
    m = _MEMREF.match(type_text.strip())
    if m is None:
        raise LaunchpadError(f"{where} has the CuTe type {type_text}, which launchpad cannot pass")
    element, space, align, layout = m.group(1), m.group(2), int(m.group(3) or 1), m.group(4)
    if space not in ("gmem", "generic"):  # generic: a from_dlpack view of a CPU tensor; a device pointer is one too
        raise LaunchpadError(f"{where} is a tensor in {space} memory ({type_text}); a launch passes global memory only")
    dtype = ELEMENT_TYPES.get(element)
    if dtype is None:
        raise LaunchpadError(f"{where} has elements of CuTe type {element}, which no torch dtype is ({type_text})")
    shape_text, _, stride_text = layout.partition(":")
    shape_modes = [_mode(t, where, 32) for t in _split_modes(shape_text, where)]
    stride_modes = [_mode(t, where, 32) for t in _split_modes(stride_text, where)]
    if len(shape_modes) != len(stride_modes):
        raise LaunchpadError(f"{where}: its layout {layout!r} has {len(shape_modes)} shape modes but "
                             f"{len(stride_modes)} strides")  # fmt: skip
    fields, offset = [], 8
    for kind, modes in (("shape", shape_modes), ("stride", stride_modes)):
        for d, (value, _, bits) in enumerate(modes):
            if value is None:
                size = bits // 8
                offset += -offset % size
                fields.append((kind, d, offset, size))
                offset += size
    size = offset + (-offset % 8)
    return TensorLayout(
        type=type_text.strip(), dtype=dtype, align=align,
        shape=tuple(v for v, _, _ in shape_modes), stride=tuple(v for v, _, _ in stride_modes),
        shape_div=tuple(d for _, d, _ in shape_modes), stride_div=tuple(d for _, d, _ in stride_modes),
        fields=tuple(fields), size=size,
    )  # fmt: skip
