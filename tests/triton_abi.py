"""What the installed Triton's own launcher passes, stated for the tests independently of
launchpad's ``_triton_versions`` table (read from each release's ``backends/nvidia/driver.py``:
``make_tensordesc_arg``, ``expand_signature``, ``CudaLauncher``)."""

from __future__ import annotations

import re
import struct

import triton

VERSION = tuple(int(x) for x in re.match(r"(\d+)\.(\d+)", triton.__version__).groups())

#: Hidden pointers after the kernel's own parameters: global scratch, and profile scratch from 3.5.
SCRATCH_WORDS = ["*i8"] if VERSION < (3, 5) else ["*i8", "*i8"]
SCRATCH_NAMES = ["global_scratch"] if VERSION < (3, 5) else ["global_scratch", "profile_scratch"]
NULL_SCRATCH = [struct.pack("<Q", 0)] * len(SCRATCH_WORDS)

#: The 1-byte flags of a pointer-form (no TMA) host descriptor: none in 3.4, NaN padding from 3.5,
#: and round_f32_to_tf32 after it from 3.7.
DESCRIPTOR_FLAGS = [] if VERSION < (3, 5) else ["padding"] if VERSION < (3, 7) else ["padding", "round_f32_to_tf32"]

#: Whether CompiledKernel has ``metadata_group`` and TensorDescriptor ``padding`` (3.5+).
HAS_PADDING = VERSION >= (3, 5)


def q(v: int) -> bytes:
    """A pointer or 64-bit word as the launcher packs it."""
    return struct.pack("<Q", v)


def i32(v: int) -> bytes:
    return struct.pack("<i", v)


def i64(v: int) -> bytes:
    return struct.pack("<q", v)
