"""A scalar as a parameter's bytes, by the rules a launch packs it with.

One rule for every slot kind (the compiled executor's ``SK_*``), shared by the sequence analysis
(which bytes an input became in a capture) and the Python replay (what a new value writes); the
compiled replay packs with the launch's own C code, and ``tests/test_sequence_executors.py``
checks that both agree. :func:`scalar_bytes` raises ``ValueError`` (out of range) or
``TypeError`` (a value of another kind) with the reason as its message; callers word it.
"""

from __future__ import annotations

import struct
from typing import Any

from ..launch.checks import bf16_bits
from ..launch.executor import SK_BF16, SK_BOOL, SK_F16, SK_F32, SK_F64, SK_INT, SK_UINT, SK_UNTYPED

__all__ = ["FOREIGN_KINDS", "kind_name", "scalar_bytes"]

#: The slot kinds a parameter launchpad did not make may hold a scalar as, by its size.
FOREIGN_KINDS = {
    1: (SK_BOOL,),
    2: (SK_INT, SK_UINT, SK_F16, SK_BF16),
    4: (SK_INT, SK_UINT, SK_F32),
    8: (SK_INT, SK_UINT, SK_F64),
}
_FLOAT_CODES = {SK_F16: "<e", SK_F32: "<f", SK_F64: "<d"}
_NAMES = {SK_INT: "i", SK_UINT: "u", SK_BOOL: "bool", SK_F16: "fp16", SK_BF16: "bf16", SK_F32: "fp32",
          SK_F64: "fp64", SK_UNTYPED: "untyped"}  # fmt: skip


def kind_name(kind: int, size: int) -> str:
    """``i32``, ``u64``, ``fp32``, ``bool``, ``8 bytes``: how messages name a slot."""
    name = _NAMES.get(kind, "?")
    if kind in (SK_INT, SK_UINT):
        return f"{name}{8 * size}"
    return f"{size} bytes" if kind == SK_UNTYPED else name


def scalar_bytes(kind: int, size: int, value: Any) -> bytes:
    """The bytes a launch writes for ``value`` (a bool, an int or a float) in a slot."""
    if kind in (SK_INT, SK_UINT):
        if isinstance(value, float):
            raise TypeError(f"expected an int, got float {value!r}")
        bits = 8 * size
        lo, hi = (0, 1 << bits) if kind == SK_UINT else (-(1 << (bits - 1)), 1 << (bits - 1))
        if not lo <= value < hi:
            raise ValueError(f"{value} is out of range for {kind_name(kind, size)}")
        return (int(value) & ((1 << bits) - 1)).to_bytes(size, "little")
    if kind == SK_BOOL:
        if isinstance(value, float):
            raise TypeError(f"expected a bool or an int, got float {value!r}")
        return b"\x01" if value else b"\x00"
    if kind == SK_BF16:
        return bf16_bits(float(value)).to_bytes(2, "little")
    if kind in _FLOAT_CODES:
        try:
            return struct.pack(_FLOAT_CODES[kind], float(value))
        except OverflowError:
            raise ValueError(f"{value!r} is out of range for {kind_name(kind, size)}") from None
    if kind == SK_UNTYPED:  # only the size is known: an int's bits (either signedness), a float at that width
        bits = 8 * size
        if isinstance(value, float):
            if size == 1:
                raise TypeError(f"cannot pack a float into a 1-byte parameter: {value!r}")
            return scalar_bytes({2: SK_F16, 4: SK_F32, 8: SK_F64}[size], size, value)
        if not -(1 << (bits - 1)) <= value < 1 << bits:
            raise ValueError(f"{value} does not fit in {size} bytes")
        return (int(value) & ((1 << bits) - 1)).to_bytes(size, "little")
    raise TypeError(f"a {kind_name(kind, size)} parameter takes no scalar")
