"""launchpad: launch CUDA kernels from Python with the lowest overhead Python can reach.

C++ kernels compiled at run time (:func:`compile_cuda`), Triton kernels (:func:`from_triton`,
:func:`load_triton`, :func:`triton_launcher`) and Numba kernels (:func:`from_numba`) all become
one :class:`KernelSpec`, launched as a :class:`Kernel` on torch's current stream with one packed
argument buffer, by the compiled executor where it is built and the Python one otherwise.
"""

# No ``from __future__ import annotations`` here: it would put ``annotations`` among the package's names.
from .core.cache import cache_dir
from .core.params import Param
from .core.spec import Arg, KernelSpec, LaunchPlan, ModuleCallbacks
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
    RecordError,
    UnsupportedVersion,
)
from .frontends.cpp.compiler import compile_cuda, compile_cuda_module, compile_cuda_object, link
from .frontends.numba.frontend import from_numba
from .frontends.triton.cache_folder import load_triton
from .frontends.triton.in_process import from_triton
from .frontends.triton.launcher import TritonLauncher, triton_launcher
from .kernel import Kernel, from_image, load, load_cubin
from .launch.executor import launch_path
from .launch.sequence import Sequence, record
from .torch_ops import torch_op

# isort: split
# Converters for arguments that expand into several parameters, and launch hooks, register on import.
from .frontends.numba import args as _numba_args  # noqa: F401
from .frontends.triton import hooks as _triton_hooks  # noqa: F401
from .frontends.triton import tensordesc as _tensordesc  # noqa: F401

__version__ = "0.4.0"

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
    "RecordError",
    "Sequence",
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
    "record",
    "torch_op",
    "triton_launcher",
]
_PARTS = (Arg, LaunchPlan, Param)
