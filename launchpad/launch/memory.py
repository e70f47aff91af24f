"""Device memory a single launch needs: Triton's scratch, and the device copies of host memory
(Numba's host arrays and records), all from torch's caching allocator on the launch stream.

The launch holds what it allocated until the driver has its arguments; the allocator reuses the
memory only in stream order after that, behind the kernel.
"""

from __future__ import annotations

from typing import Any

import torch

from ..core import driver as _driver
from . import checks as _checks

__all__ = ["HostCopy", "copy_back", "copy_in", "scratch"]


def scratch(nbytes: int, align: int, device: int, stream: int, zero: bool = False) -> tuple[Any, int]:
    """Per-launch scratch from torch's caching allocator, ordered on the launch stream.

    Returns ``(owner, address)``: the launch keeps ``owner`` until the driver has its arguments;
    the allocator reuses the memory only in stream order after that. ``zero`` zero-fills it on
    the launch stream (Triton 3.8+'s profile scratch).
    """
    if nbytes == 0:
        return None, 0
    pad = max(align - 256, 0)  # the caching allocator already aligns to 256 bytes or more
    buf = torch.empty(nbytes + pad, dtype=torch.uint8, device=f"cuda:{device}")
    if stream != _checks.current_raw_stream(device):
        launch_stream = torch.cuda.ExternalStream(stream, device=f"cuda:{device}")
        buf.record_stream(launch_stream)
        if zero:
            with torch.cuda.stream(launch_stream):
                buf.zero_()
    elif zero:
        buf.zero_()
    address = buf.data_ptr()
    return buf, address + (-address % align if align else 0)


class HostCopy(int):
    """The device address of host memory copied in for one launch: a host NumPy array or record a
    Numba kernel takes, passed as Numba's dispatcher passes it. The launch keeps it (and so the
    device memory) until the driver has the arguments; the Python executor then waits for the
    launch and copies back what the kernel may have written (:func:`copy_back`). Every executor
    hands a launch with one to the Python executor (the compiled one takes exact ints only)."""

    owner: Any  # the device memory
    host: int  # the host address
    nbytes: int
    back: bool  # copy back after the launch
    source: Any  # the host object, kept alive until then


def copy_in(source: Any, host: int, nbytes: int, device: int, stream: int, *, copy: bool, back: bool) -> HostCopy:
    """Device memory for ``nbytes`` of host memory at ``host`` (owned by ``source``), filled from it
    in stream order when ``copy``; ``back``: copy it back after the launch."""
    owner, address = scratch(nbytes, 16, device, stream)
    if copy and nbytes:
        _driver.copy_to_device(address, host, nbytes, stream)
    made = HostCopy(address)
    made.owner, made.host, made.nbytes, made.back, made.source = owner, host, nbytes, back, source
    return made


def copy_back(stream: int, values: tuple) -> None:
    """After a launch: copy the host copies among ``values`` that go back to their host memory,
    in stream order after the kernel, and wait for them (the launch is synchronous then, as
    Numba's dispatcher makes a launch with host arrays)."""
    copies = [v for v in values if v.__class__ is HostCopy and v.back and v.nbytes]
    for c in copies:
        _driver.copy_to_host(c.host, int(c), c.nbytes, stream)
    if copies:
        _driver.synchronize(stream)
