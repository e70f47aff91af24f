"""Tensor maps: the 128-byte ``CUtensorMap`` descriptors Hopper's TMA copies take."""

from __future__ import annotations

import ctypes

from cuda.bindings import driver as _cu

from . import device as _device
from .device import check

__all__ = ["encode_tensor_map_tiled"]


def encode_tensor_map_tiled(
    dtype: int,
    rank: int,
    address: int,
    shape: list[int],
    strides_bytes: list[int],
    box: list[int],
    element_strides: list[int],
    interleave: int,
    swizzle: int,
    l2_promotion: int,
    oob_fill: int,
) -> bytes:
    """Encode a ``CUtensorMap`` with ``cuTensorMapEncodeTiled``; returns its 128 bytes.

    ``shape``/``box``/``element_strides`` are given fastest-varying dimension first, as the
    driver wants them; ``strides_bytes`` has ``rank - 1`` entries (the innermost stride is the
    element size).
    """
    _device.init()
    tmap = check(
        _cu.cuTensorMapEncodeTiled(
            _cu.CUtensorMapDataType(dtype),
            rank,
            address,
            # older bindings (13.3) take only their own integer wrappers in these lists
            [_cu.cuuint64_t(v) for v in shape],
            [_cu.cuuint64_t(v) for v in strides_bytes],
            [_cu.cuuint32_t(v) for v in box],
            [_cu.cuuint32_t(v) for v in element_strides],
            _cu.CUtensorMapInterleave(interleave),
            _cu.CUtensorMapSwizzle(swizzle),
            _cu.CUtensorMapL2promotion(l2_promotion),
            _cu.CUtensorMapFloatOOBfill(oob_fill),
        ),
        "cuTensorMapEncodeTiled",
    )
    return ctypes.string_at(tmap.getPtr(), 128)
