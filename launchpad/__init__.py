"""launchpad: launch CUDA kernels from Python with the lowest overhead Python can reach.

C++ kernels compiled at run time (:func:`compile_cuda`), Triton kernels (:func:`from_triton`,
:func:`load_triton`, :func:`triton_launcher`) and Numba kernels (:func:`from_numba`) all become
one :class:`Kernel`, launched on torch's current stream with one packed argument buffer.
"""

from __future__ import annotations

from ._cache import cache_dir
from ._cpp import compile_cuda, compile_cuda_module, compile_cuda_object, link
from ._launcher import Arg, LaunchPlan
from ._layout import Param
from ._numba import from_numba
from ._torch_op import torch_op
from ._triton import from_triton, load_triton
from ._triton_launcher import triton_launcher
from .errors import (
    ArgumentError,
    ArgumentTypeError,
    BinaryError,
    CacheWarning,
    CompileError,
    CudaError,
    LaunchpadError,
    LaunchpadWarning,
    NoDeviceError,
    OutOfResources,
    UnsupportedVersion,
)
from .kernel import Kernel, load, load_cubin

# isort: split
# Converters for arguments that expand into several parameters register themselves on import.
from . import _numba_args, _tensordesc  # noqa: F401

__version__ = "0.1.0"

__all__ = [
    "Arg",
    "ArgumentError",
    "ArgumentTypeError",
    "BinaryError",
    "CacheWarning",
    "CompileError",
    "CudaError",
    "Kernel",
    "LaunchPlan",
    "LaunchpadError",
    "LaunchpadWarning",
    "NoDeviceError",
    "OutOfResources",
    "Param",
    "UnsupportedVersion",
    "cache_dir",
    "compile_cuda",
    "compile_cuda_module",
    "compile_cuda_object",
    "from_numba",
    "from_triton",
    "link",
    "load",
    "load_cubin",
    "load_triton",
    "torch_op",
    "triton_launcher",
]
