"""Numba front end (being written): turns Numba kernels into launchpad Kernels."""

from __future__ import annotations

from typing import Any


def from_numba(fn: Any, signature: Any, **options: Any) -> Any:
    raise NotImplementedError("launchpad.from_numba is being written")
