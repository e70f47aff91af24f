"""How refusals show the values they name: short, on one line, an array by its shape and dtype.

:func:`describe` is what every message of :mod:`launchpad.launch.checks`,
:mod:`launchpad.launch.refusals` and the front ends' converters says it got (re-exported by
:mod:`~launchpad.launch.checks`, where they import it from); :func:`host_array` is the refusal
of a numpy array where a device pointer goes, with the call that makes a tensor of it.
"""

from __future__ import annotations

import reprlib
from typing import Any

import numpy as np
import torch

__all__ = ["describe", "host_array"]

_REPR = reprlib.Repr()  # long values elided in their middle, never cut off mid-message
_REPR.maxstring = _REPR.maxother = 80


def describe(value: Any) -> str:
    """A value as messages name it: ``a torch.float32 tensor on cuda:0``, ``int 5``; an array by
    its shape and dtype, never its values (a message does not print 4,096 floats)."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor on {value.device}"
    if isinstance(value, np.ndarray):
        return f"a numpy.ndarray of shape {value.shape} and dtype {value.dtype}"
    return f"{type(value).__name__} {' '.join(_REPR.repr(value).split())}"


def host_array(value: np.ndarray, dtype: torch.dtype | None) -> str:
    """Why a numpy array is refused where a device pointer goes, and what to pass instead."""
    try:
        same = dtype is None or torch.from_numpy(np.empty(0, value.dtype)).dtype == dtype
    except TypeError:  # a dtype torch has no tensor of (strings, objects)
        same = True
    to = ".cuda()" if same else f".to('cuda', {dtype})"  # the kernel's dtype, where the array has another
    return (
        f"expected a tensor or device pointer, got {describe(value)}, which is in host memory: pass a CUDA tensor "
        f"of it, torch.from_numpy(a){to}"
    )
