"""Triton front end (being written): turns Triton compiled kernels into launchpad Kernels."""

from __future__ import annotations

from typing import Any


def from_triton(compiled_or_jit: Any, **options: Any) -> Any:
    raise NotImplementedError("launchpad.from_triton is being written")


def load_triton(path: Any) -> Any:
    raise NotImplementedError("launchpad.load_triton is being written")


def triton_launcher(jit_fn: Any) -> Any:
    raise NotImplementedError("launchpad.triton_launcher is being written")
