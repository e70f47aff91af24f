"""What the analysis compares: a node's regions (each parameter of 8 bytes or less whole, a
larger one 8 bytes at a time; a copy's or memset's address fields) and their bytes. Words a torch
kernel provably never reads (:mod:`.torch_kernels`) are left out."""

from __future__ import annotations

from ..core.params import Param
from .capture import MEMCPY_FIELDS, Node
from .torch_kernels import unread

__all__ = ["region_bytes", "region_label", "regions"]


def regions(node: Node) -> list[tuple[int, int, Param | None]]:
    """``(offset, size, launchpad param)`` of each compared region of a node."""
    if node.kind in ("memcpy", "memset"):
        return [(offset, 8, None) for offset in MEMCPY_FIELDS[node.kind]]
    if node.kind != "kernel" or not node.layout:
        return []
    params = node.spec.params if node.spec is not None else [None] * len(node.layout)
    skipped = unread(node)
    out: list[tuple[int, int, Param | None]] = []
    for (offset, size), param in zip(node.layout, params):
        if size <= 8:
            out += [(a, b - a, param) for a, b in _read_parts(offset, offset + size, skipped)]
            continue
        start = offset
        while start < offset + size:  # 8-byte words at 8-aligned addresses, and the bytes around them
            end = min(offset + size, (start // 8 + 1) * 8)
            out += [(a, b - a, param) for a, b in _read_parts(start, end, skipped)]
            start = end
    return out


def _read_parts(start: int, end: int, skipped: tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    """``[start, end)`` less the bytes in ``skipped``: the whole range where none is (a word that
    may be a pointer), else the pieces the kernel may read, each compared on its own."""
    parts = [(start, end)]
    for a, b in skipped:
        if b <= start or end <= a:
            continue
        parts = [piece for lo, hi in parts for piece in ((lo, min(hi, a)), (max(lo, b), hi)) if piece[0] < piece[1]]
    return parts


def region_bytes(node: Node, offset: int, size: int) -> bytes | None:
    if node.kind in ("memcpy", "memset"):
        return node.addresses[MEMCPY_FIELDS[node.kind].index(offset)].to_bytes(8, "little")
    if node.block is None:
        return None
    return node.block[offset : offset + size]


def region_label(node: Node, offset: int, size: int, param: Param | None) -> str:
    if node.kind == "memcpy":
        return "its source address" if offset == 48 else "its destination address"
    if node.kind == "memset":
        return "its destination address"
    if param is not None:
        return param.label if size == param.size else f"{param.label}, bytes {offset - param.offset}-" \
            f"{offset - param.offset + size - 1}"  # fmt: skip
    index = next(j for j, (o, s) in enumerate(node.layout or ()) if o <= offset < o + s)
    start = (node.layout or ())[index][0]
    whole = (node.layout or ())[index][1] == size
    return f"param {index}" if whole else f"param {index}, bytes {offset - start}-{offset - start + size - 1}"
