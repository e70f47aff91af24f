"""launchpad: launch CUDA kernels from Python with the lowest overhead Python can reach.

C++ kernels compiled at run time (:func:`compile_cuda`), Triton kernels (:func:`from_triton`,
:func:`load_triton`, :func:`triton_launcher`) and Numba kernels (:func:`from_numba`) all become
one :class:`KernelSpec`, launched as a :class:`Kernel` on torch's current stream with one packed
argument buffer, by the compiled executor where it is built and the Python one otherwise.
"""

from __future__ import annotations

from ._artifact import load
from ._cache import cache_dir
from ._cpp import compile_cuda, compile_cuda_module, compile_cuda_object, link
from ._executor import launch_path
from ._loader import ModuleCallbacks
from ._numba import from_numba
from ._spec import Arg, KernelSpec, LaunchPlan
from ._torch_op import torch_op
from ._triton import from_triton
from ._triton_cache import load_triton
from ._triton_launcher import TritonLauncher, triton_launcher
from ._types import Param
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
from .kernel import Kernel, from_image, load_cubin

# isort: split
# Converters for arguments that expand into several parameters, and launch hooks, register on import.
from . import _numba_args, _tensordesc, _triton_hooks  # noqa: F401

__version__ = "0.3.0"

# Param, Arg and LaunchPlan (the parts of a KernelSpec) stay importable from here; the names
# below are what a user calls or catches.
__all__ = [
    "ArgumentError",
    "ArgumentTypeError",
    "BinaryError",
    "CacheWarning",
    "CompileError",
    "CudaError",
    "Kernel",
    "KernelSpec",
    "LaunchpadError",
    "LaunchpadWarning",
    "ModuleCallbacks",
    "NoDeviceError",
    "OutOfResources",
    "TritonLauncher",
    "UnsupportedVersion",
    "__version__",
    "cache_dir",
    "compile_cuda",
    "compile_cuda_module",
    "compile_cuda_object",
    "from_image",
    "from_numba",
    "from_triton",
    "launch_path",
    "link",
    "load",
    "load_cubin",
    "load_triton",
    "torch_op",
    "triton_launcher",
]
_PARTS = (Arg, LaunchPlan, Param)
