"""launchpad: launch CUDA kernels from Python with the lowest overhead Python can reach.

C++ kernels compiled at run time (:func:`compile_cuda`), Triton kernels (:func:`from_triton`,
:func:`load_triton`, :func:`triton_launcher`), Numba kernels (:func:`from_numba`), cuTile kernels
(:func:`from_cutile`), Warp kernels (:func:`from_warp`) and the Triton kernels of Helion's host functions (:func:`helion_kernel`) all
become one :class:`KernelSpec`, launched as a :class:`Kernel` on torch's current stream with one packed
argument buffer, by the compiled executor where it is built and the Python one otherwise.
"""

# No ``from __future__ import annotations`` here: it would put ``annotations`` among the package's names.
from . import tracing as _tracing  # noqa: F401  (launches traced by torch.compile)
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
    MissingFileError,
    NoDeviceError,
    OutOfResources,
    RecordError,
    UnsupportedVersion,
)
from .frontends.cpp.compiler import compile_cuda, compile_cuda_module, compile_cuda_object, link
from .frontends.cute.frontend import from_cute
from .frontends.cutile.frontend import from_cutile
from .frontends.helion.kernel import HelionKernel
from .frontends.numba.frontend import from_numba
from .frontends.triton.cache_folder import load_triton
from .frontends.triton.in_process import from_triton
from .frontends.triton.launcher import TritonLauncher, triton_launcher
from .frontends.warp.frontend import from_warp
from .frontends.warp.kernel import WarpKernel
from .kernel import Kernel, from_image, load, load_cubin
from .launch.executor import launch_path
from .sequences.sequence import Sequence, record
from .torch_ops import torch_op

# isort: split
# Converters for arguments that expand into several parameters, and launch hooks, register on import.
from .frontends.cute import args as _cute_args  # noqa: F401
from .frontends.cutile import args as _cutile_args  # noqa: F401
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
    "HelionKernel",
    "Kernel",
    "KernelSpec",
    "LaunchpadError",
    "LaunchpadWarning",
    "MissingFileError",
    "ModuleCallbacks",
    "NoDeviceError",
    "OutOfResources",
    "RecordError",
    "Sequence",
    "TritonLauncher",
    "UnsupportedVersion",
    "WarpKernel",
    "__version__",
    "cache_dir",
    "compile_cuda",
    "compile_cuda_module",
    "compile_cuda_object",
    "from_cute",
    "from_cutile",
    "from_image",
    "from_numba",
    "from_triton",
    "from_warp",
    "helion_kernel",
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


def helion_kernel(kernel: object) -> HelionKernel:
    """A ``@helion.kernel`` whose launches go through launchpad: ``helion_kernel(k)(*args)`` returns
    what ``k(*args)`` returns (see :mod:`launchpad.frontends.helion.kernel`).

    The Helion front end launches through :func:`triton_launcher`, given here (front ends do not
    import one another). Raises :class:`UnsupportedVersion` for a Helion release launchpad does not
    follow, :class:`ArgumentError` for what is not a Helion kernel.
    """
    return HelionKernel(kernel, triton_launcher)
