"""launchpad: launch CUDA kernels from Python with the lowest overhead Python can reach.

C++ kernels compiled at run time (:func:`compile_cuda`), Triton kernels (:func:`from_triton`,
:func:`load_triton`, :func:`triton_launcher`), Numba kernels (:func:`from_numba`), cuTile kernels
(:func:`from_cutile`), Warp kernels (:func:`from_warp`) and the Triton kernels of Helion's host functions (:func:`helion_kernel`) all
become one :class:`KernelSpec`, launched as a :class:`Kernel` on torch's current stream with one packed
argument buffer, by the compiled executor where it is built and the Python one otherwise.

``import launchpad`` loads only the errors: every other name below is imported from its module the
first time it is used (PEP 562), so a front end, recorded sequences or the torch.compile
integration cost nothing until then. :data:`_LAZY` says where each name lives.
"""

# No ``from __future__ import annotations`` here: it would put ``annotations`` among the package's names.
import importlib as _importlib
import typing as _typing

from .core.after_import import after_import as _after_import
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

if _typing.TYPE_CHECKING:
    from .core.cache import cache_dir
    from .core.params import Param
    from .core.spec import Arg, KernelSpec, LaunchPlan, ModuleCallbacks
    from .frontends.cpp.frontend import compile_cuda, compile_cuda_module, compile_cuda_object, link
    from .frontends.cute.frontend import from_cute
    from .frontends.cutile.frontend import from_cutile
    from .frontends.helion.frontend import HelionKernel
    from .frontends.numba.frontend import from_numba
    from .frontends.triton.cache_folder import load_triton
    from .frontends.triton.frontend import from_triton
    from .frontends.triton.launcher import TritonLauncher, triton_launcher
    from .frontends.warp.frontend import from_warp
    from .frontends.warp.kernel import WarpKernel
    from .kernel import Kernel, from_image, load, load_cubin
    from .launch.executor import launch_path
    from .sequences.sequence import Sequence, record
    from .torch_ops import torch_op

__version__ = "0.4.0"

#: Each public name and the module it is imported from on first use. A new front end adds its line.
_LAZY: dict[str, str] = {
    "cache_dir": "launchpad.core.cache",
    "Param": "launchpad.core.params",
    "Arg": "launchpad.core.spec",
    "KernelSpec": "launchpad.core.spec",
    "LaunchPlan": "launchpad.core.spec",
    "ModuleCallbacks": "launchpad.core.spec",
    "compile_cuda": "launchpad.frontends.cpp.frontend",
    "compile_cuda_module": "launchpad.frontends.cpp.frontend",
    "compile_cuda_object": "launchpad.frontends.cpp.frontend",
    "link": "launchpad.frontends.cpp.frontend",
    "from_cute": "launchpad.frontends.cute.frontend",
    "from_cutile": "launchpad.frontends.cutile.frontend",
    "HelionKernel": "launchpad.frontends.helion.frontend",
    "from_numba": "launchpad.frontends.numba.frontend",
    "load_triton": "launchpad.frontends.triton.cache_folder",
    "from_triton": "launchpad.frontends.triton.frontend",
    "TritonLauncher": "launchpad.frontends.triton.launcher",
    "triton_launcher": "launchpad.frontends.triton.launcher",
    "from_warp": "launchpad.frontends.warp.frontend",
    "WarpKernel": "launchpad.frontends.warp.kernel",
    "Kernel": "launchpad.kernel",
    "from_image": "launchpad.kernel",
    "load": "launchpad.kernel",
    "load_cubin": "launchpad.kernel",
    "launch_path": "launchpad.launch.executor",
    "Sequence": "launchpad.sequences.sequence",
    "record": "launchpad.sequences.sequence",
    "torch_op": "launchpad.torch_ops",
}

#: What a kernel from any front end may need, imported with the Kernel's own names (``load`` of a
#: saved artifact, ``Kernel(spec)``): the converters of arguments that expand into several
#: parameters and the launch hooks, which these modules register on import. Each front end imports
#: its own when it is first used.
_REGISTRIES = (
    "launchpad.frontends.cute.args",
    "launchpad.frontends.cutile.args",
    "launchpad.frontends.numba.args",
    "launchpad.frontends.triton.hooks",
    "launchpad.frontends.triton.tensordesc",
    "launchpad.frontends.warp.kernel",
)

# What a user calls, catches or builds a KernelSpec from (Arg, LaunchPlan, Param): the stable names.
# Every module path below launchpad is internal and moves as the code does (docs/api.md).
__all__ = [
    "Arg",
    "ArgumentError",
    "ArgumentTypeError",
    "BinaryError",
    "CacheWarning",
    "CompileError",
    "CudaError",
    "HelionKernel",
    "Kernel",
    "KernelSpec",
    "LaunchPlan",
    "LaunchpadError",
    "LaunchpadWarning",
    "MissingFileError",
    "ModuleCallbacks",
    "NoDeviceError",
    "OutOfResources",
    "Param",
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


def __getattr__(name: str) -> _typing.Any:
    """A public name, imported from its module the first time it is asked for (PEP 562)."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'launchpad' has no attribute {name!r}")
    if where == "launchpad.kernel":
        for module in _REGISTRIES:
            _importlib.import_module(module)
    value = getattr(_importlib.import_module(where), name)
    globals()[name] = value  # the next lookup is an ordinary one
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(__all__))


def helion_kernel(kernel: object) -> "HelionKernel":
    """A ``@helion.kernel`` whose launches go through launchpad: ``helion_kernel(k)(*args)`` returns
    what ``k(*args)`` returns (see :mod:`launchpad.frontends.helion.frontend`).

    The Helion front end launches through :func:`triton_launcher`, given here (front ends do not
    import one another). Raises :class:`UnsupportedVersion` for a Helion release launchpad does not
    follow, :class:`ArgumentError` for what is not a Helion kernel.
    """
    from .frontends.helion.frontend import HelionKernel
    from .frontends.triton.launcher import triton_launcher

    return HelionKernel(kernel, triton_launcher)


def _trace_with_dynamo() -> None:
    """Kernels under torch.compile: registered with Dynamo once it is imported (:mod:`launchpad.tracing`)."""
    from . import tracing

    tracing.register()


if not _after_import("torch._dynamo", _trace_with_dynamo):
    _trace_with_dynamo()  # Dynamo came first: register now
