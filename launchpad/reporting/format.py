"""Plain text tables, for the command line and the benchmarks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["format_table", "human_bytes", "layout_table"]


def human_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}"
    raise AssertionError("unreachable")


def format_table(header: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "", indent: str = "") -> str:
    """A plain text table under a rule.

    ``align`` has one ``l`` or ``r`` per column (default: the first left, the others right). A
    row shorter than the header (a launcher that is missing, with its reason) spans the rest. A
    cell of several lines (``"\\n"``, a long text wrapped) takes that many lines, each in its column.
    """
    align = align or "l" + "r" * (len(header) - 1)
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    width = [len(h) for h in header]
    for row in cells:
        if len(row) == len(header):
            width = [max(w, *(len(part) for part in c.split("\n"))) for w, c in zip(width, row)]

    def line(row: Sequence[str]) -> str:
        if len(row) < len(header):
            return indent + "  ".join([row[0].ljust(width[0]), *row[1:]]).rstrip()
        parts = [c.split("\n") for c in row]
        return "\n".join(
            indent
            + "  ".join(
                (p[i] if i < len(p) else "").rjust(w) if a == "r" else (p[i] if i < len(p) else "").ljust(w)
                for p, w, a in zip(parts, width, align)
            ).rstrip()
            for i in range(max(len(p) for p in parts))
        )

    rule = indent + "  ".join("-" * w for w in width)
    return "\n".join([line(list(header)), rule, *(line(r) for r in cells)])


def layout_table(params: Sequence[Any], indent: str = "    ") -> str:
    """The parameter layout as a table (index, offset, size, align, type and name where known)."""
    if not params:
        return indent + "(no parameters)"
    fields = ("index", "offset", "size", "align", "type", "name")
    rows = []
    for p in params:  # Param objects, or their dicts as an artifact stores them
        values = [p.get(f) if isinstance(p, dict) else getattr(p, f) for f in fields]
        rows.append([*values[:4], values[4] or "?", values[5] or ""])
    header = list(fields)
    if not any(r[-1] for r in rows):
        header, rows = header[:-1], [r[:-1] for r in rows]
    return format_table(header, rows, "rrrrll", indent)
