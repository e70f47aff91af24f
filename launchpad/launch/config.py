"""A launch's configuration as it was given: the grid and the block (:func:`dims`), the dynamic
shared memory, the stream (:func:`stream_of`, :class:`RawStream`) and the device the launch runs on.

The executors take a plain int grid and block and torch's current stream straight; anything else
comes here, on the slow path, and every refusal is worded here, for both executors.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..errors import ArgumentError, ArgumentTypeError, NoDeviceError
from . import checks as _checks
from .checks import Context, describe, no_device

__all__ = [
    "MAX_BLOCK",
    "MAX_GRID",
    "RawStream",
    "cacheable",
    "device_of_launch",
    "dims",
    "index",
    "shared_mem_value",
    "stream_of",
]

#: The device limits of a grid's and a block's dimensions (x, y, z).
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_BLOCK = (1024, 1024, 64)


def shared_mem_value(ctx: Context, value: Any) -> int:
    """The dynamic shared memory of a launch that is not a plain non-negative int: checked."""
    try:
        nbytes = index(value)
    except TypeError:
        raise ArgumentTypeError(
            f"kernel {ctx.kernel_name!r}: shared_mem must be an int number of bytes, got {describe(value)}"
        ) from None
    if nbytes < 0:
        raise ArgumentError(f"kernel {ctx.kernel_name!r}: shared_mem must not be negative, got {nbytes}")
    return nbytes


def index(value: Any) -> int:
    """An int from an int-like value (numpy ints too); TypeError for bools, floats, strings."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("a bool is not a size")
    return operator.index(value)


def dims(value: Any, what: str, ctx: Context) -> tuple[int, int, int]:
    """A grid or block given as an int or a 1-3 tuple, as three ints, range-checked.

    Only integers are taken (numpy integers too): a float, a bool or a string is refused rather
    than truncated or read as digits.
    """
    try:
        t: tuple[int, ...]
        if hasattr(value, "__index__") or isinstance(value, (bool, np.bool_)):
            t = (index(value), 1, 1)
        elif isinstance(value, (str, bytes)):
            raise TypeError(value)
        else:
            items = tuple(value)
            if not 1 <= len(items) <= 3:
                raise ArgumentError(f"kernel {ctx.kernel_name!r}: {what} must have 1-3 dimensions, got {value!r}")
            t = (*(index(v) for v in items), 1, 1)
    except TypeError:
        # (Triton's grid may be a function of the launch's meta-parameters; launchpad's never is)
        meta = ": compute it before the launch, kernel[(triton.cdiv(n, BLOCK),)](...)" if callable(value) else ""
        raise ArgumentTypeError(
            f"kernel {ctx.kernel_name!r}: {what} must be an int or a tuple of 1-3 ints, got {describe(value)}{meta}"
        ) from None
    x, y, z = t[:3]
    limits = MAX_GRID if what == "grid" else MAX_BLOCK
    low = 0 if what == "grid" else 1
    for axis, v, limit in zip("xyz", (x, y, z), limits):
        if not low <= v <= limit:
            raise ArgumentError(
                f"kernel {ctx.kernel_name!r}: {what} dimension {axis} = {v} is outside the device limit [{low}, {limit}]"
            )
    return x, y, z


class RawStream:
    """A raw stream handle that remembers its device (what ``Kernel.bind`` keeps)."""

    __slots__ = ("device", "handle")

    def __init__(self, handle: int, device: int):
        self.handle = handle
        self.device = device

    def __repr__(self) -> str:
        return f"RawStream({self.handle:#x}, device={self.device})"


def stream_of(stream: Any, ctx: Context | None = None, current: Callable[[], int] | None = None) -> tuple[int, int]:
    """``(raw handle, device)`` of an explicit stream argument (``ctx`` names the kernel in errors;
    ``current`` gives the current device, torch's by default).

    An int is a raw handle on the current device: ``0`` is the legacy default stream (not torch's
    current stream, which is what leaving the stream out gives).
    """
    if isinstance(stream, RawStream):
        return stream.handle, stream.device
    if isinstance(stream, torch.cuda.Stream):
        return stream.cuda_stream, stream.device_index
    if isinstance(stream, int) and not isinstance(stream, bool):
        if not 0 <= stream < 1 << 64:
            kernel = f"kernel {ctx.kernel_name!r}: " if ctx is not None else ""
            raise ArgumentError(f"{kernel}stream {stream} is not a CUstream handle (an address: 0 <= handle < 2**64)")
        return stream, device_of_launch(ctx, current)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        handle = int((proto() if callable(proto) else proto)[1])
        device = getattr(getattr(stream, "device", None), "device_id", None)
        return handle, device_of_launch(ctx, current) if device is None else int(device)
    kernel = f"kernel {ctx.kernel_name!r}: " if ctx is not None else ""
    raise ArgumentTypeError(
        f"{kernel}stream must be a torch.cuda.Stream, a cuda.core Stream, an int handle or have __cuda_stream__; "
        f"got {describe(stream)}"
    )


def device_of_launch(ctx: Context | None, current: Callable[[], int] | None = None) -> int:
    """The current device (torch's unless ``current`` is given); the error names the kernel when
    torch has no CUDA."""
    try:
        return (current or _checks.current_device)()  # (looked up each time: tests replace it)
    except NoDeviceError as exc:
        if ctx is None or current is not None:  # a kernel's own current-device function names it
            raise
        raise NoDeviceError(f"kernel {ctx.kernel_name!r}: {exc}") from None
    except (RuntimeError, AssertionError) as exc:  # torch's: a CUDA build without a GPU or driver
        no_device(ctx, exc)


def cacheable(config: Any) -> bool:
    """Whether ``kernel[config]``'s callable may answer every equal config: its numbers are ints (a
    dict finds ``(1, 64)``'s entry for ``(1, 64.0)`` or ``(1, np.int64(64))``, so an entry made for
    one that is refused at the call must never be found for the other, nor one of ints for a float)."""
    items = config if isinstance(config, tuple) else (config,)
    for item in items:
        for v in item if isinstance(item, tuple) else (item,):
            if v is not None and type(v) is not int and (isinstance(v, (float, complex)) or hasattr(v, "__index__")):
                return False
    return True
