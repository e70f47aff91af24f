"""Release numbers as the front ends compare them: ``(major, minor)``.

Each front end decides from a framework's release what it can do (Triton's calling convention,
cuTile's export, Helion's specialization key) and refuses the releases it does not follow. They
read and word those releases alike, here: a version string is its leading ``major.minor``
(``"3.10.0+git1234"`` is ``(3, 10)``), and a supported range is worded as every refusal words it.
"""

from __future__ import annotations

import re

__all__ = ["Release", "parse_version", "range_text"]

#: A release as ``(major, minor)``: tuples compare as releases do (``(3, 10) > (3, 9)``).
Release = tuple[int, int]

_LEADING = re.compile(r"\s*(\d+)\.(\d+)")


def parse_version(text: object) -> Release | None:
    """``(3, 9)`` from ``"3.9.0"``, ``(3, 10)`` from ``"3.10.0+git1234"``; None when ``text`` does
    not start with a version (anything is taken: a module's ``__version__`` may be any object)."""
    m = _LEADING.match(str(text))
    return (int(m.group(1)), int(m.group(2))) if m else None


def range_text(supported: tuple[Release, Release]) -> str:
    """An inclusive range of releases in words: ``"3.4 to 3.9"``, or ``"1.0.x"`` for one release."""
    (a, b), (c, d) = supported
    return f"{a}.{b}.x" if (a, b) == (c, d) else f"{a}.{b} to {c}.{d}"
