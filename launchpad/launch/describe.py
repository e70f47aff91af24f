"""The words refusals share: how they show the values they name (short, on one line, an array by
its shape and dtype), and two refusals given from more than one place.

:func:`describe` is what every message of :mod:`launchpad.launch.checks`,
:mod:`launchpad.launch.refusals` and the front ends' converters says it got (re-exported by
:mod:`~launchpad.launch.checks`, where they import it from); :func:`host_array` is the refusal
of a numpy array where a device pointer goes, with the call that makes a tensor of it;
:func:`no_config`, of a launch without its grid or its block (``Fail.no_config``, and
``checks.dims`` where the block came by name).
"""

from __future__ import annotations

import reprlib
from typing import Any

import numpy as np
import torch

from ..core.spec import constexpr_positions, names_by_position
from ..errors import ArgumentTypeError

__all__ = ["describe", "host_array", "no_config"]

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


def no_config(ctx: Any, lacks: str, call: str, fixed_block: tuple[int, int, int] | None = None) -> ArgumentTypeError:
    """The refusal of ``launch`` or ``bind`` called without its grid or its block (``lacks``: "the
    grid", "the block" or both) for the kernel of ``ctx`` (a ``checks.Context``): Python's own
    TypeError would name neither the kernel nor what comes first. The arguments listed are those to
    give (not a constexpr the binary fixed, which may be left out); ``fixed_block``: the block the
    kernel was compiled for, which ``None`` asks for."""
    left_out = constexpr_positions(ctx.args)
    names = [n for i, n in enumerate(names_by_position(ctx.args)) if i not in left_out]
    own = f" (None: the kernel's own, {fixed_block})" if fixed_block else ""
    takes = f"then the kernel's arguments ({', '.join(names)})" if names else "and no arguments"
    return ArgumentTypeError(
        f"kernel {ctx.kernel_name!r}: {call}(grid, block, *args) was called without {lacks}: it takes the grid, "
        f"the block{own}, {takes}; or write kernel[grid, block](*args)"
    )
