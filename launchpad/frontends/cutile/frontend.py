"""cuTile front end: ``cuda.tile`` kernels as launchpad Kernels, launched without ``ct.launch``.

:func:`from_cutile` compiles a ``@ct.kernel`` for one signature through cuTile's ahead-of-time
export (``cuda.tile.compilation.export_kernel(..., output_format="cubin")``, which runs cuTile's
compiler ``tileiras``; no GPU needed), or takes a cubin exported earlier, and describes cuTile's
calling convention to the launch core (:mod:`.signature`): each array argument expands into its
pointer, extents and strides, checked per launch against what the kernel was compiled assuming
(:mod:`.args`); constants are compiled in. A cuTile kernel's launch is ``ct.launch``'s: a grid of
tile blocks, the block of one thread the driver widens to the kernel's own thread count, no
dynamic shared memory.

cuTile is imported only here and only when compiling; a saved cuTile kernel loads without it.
"""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

from ...core import toolchain
from ...core.binary import cubin_arch, read_image
from ...core.spec import KernelSpec, LaunchPlan, spec_from_image
from ...errors import ArgumentError, ArgumentTypeError, BinaryError, CompileError
from ...kernel import Kernel
from . import args as _cutile_args  # noqa: F401  (registers the converter the kernels use)
from .signature import describe, parameter_names, pyfunc_of, signature_from_args
from .versions import check_cutile, check_tileiras

__all__ = ["MAX_GRID_DIM", "CutileKernel", "cutile_spec", "from_cutile"]

#: The largest grid dimension ``ct.launch`` takes: larger ones may compute wrong tile block ids
#: (cuTile's launcher refuses them, citing a compiler bug).
MAX_GRID_DIM = (1 << 24) - 1
#: How a refusal of a larger grid names the limit (the spec's ``LaunchPlan.max_grid_words``).
_LIMIT_WORDS = f"cuTile's limit of {MAX_GRID_DIM} tile blocks (2**24 - 1; ct.launch refuses it too)"


class CutileKernel(Kernel):
    """A cuTile kernel (:func:`from_cutile`): a :class:`~launchpad.Kernel` whose grids are checked
    against ``ct.launch``'s limit of :data:`MAX_GRID_DIM` tile blocks per dimension.

    The limit is the spec's (``LaunchPlan.max_grid``), which both executors check on every launch,
    ``kernel[grid](*args)``, ``kernel.launch`` and ``kernel.bind`` alike: a cuTile kernel saved and
    loaded again (a plain :class:`~launchpad.Kernel`) keeps it.
    """


def from_cutile(
    kernel: Any,
    args_or_signature: Any,
    *,
    arch: str | int | tuple[int, int] | None = None,
    calling_convention: Any = None,
    cubin: bytes | str | Any = None,
) -> CutileKernel:
    """Compile a cuTile kernel for one signature into a launchpad :class:`~launchpad.Kernel`.

    Parameters
    ----------
    kernel : cuda.tile.kernel
        A ``@ct.kernel`` function.
    args_or_signature : tuple or cuda.tile.compilation.KernelSignature
        Example arguments, as ``ct.launch`` takes them (tensors, scalars, constants): the kernel
        is compiled with the signature ``ct.launch`` would compile for them
        (``KernelSignature.from_kernel_args``; on a machine without a CUDA driver, the same rules
        applied by launchpad). Or a ``KernelSignature`` (cuTile's recommended way: every
        assumption explicit).
    arch : optional
        ``"sm_90"``, ``90``, ``(9, 0)``, a GPU's name (``"h100"``)...; default: the current GPU's.
    calling_convention : cuda.tile.compilation.CallingConvention, optional
        For example arguments: the convention to compile with; default the one ``ct.launch``
        picks (``cutile_python_v1``, or ``v2`` where the signature needs it).
    cubin : bytes or path, optional
        A cubin exported earlier for this signature (``export_kernel``, or a kernel compiled
        here elsewhere): nothing is compiled, and no ``tileiras`` is needed.

    Returns
    -------
    CutileKernel
        Launch with ``kernel[grid](*args)`` (``grid`` as ``ct.launch`` takes it: up to 3 tile
        block counts) or ``kernel.launch(grid, None, *args)``, passing the arguments as to
        ``ct.launch``: arrays as torch tensors (or objects with ``__cuda_array_interface__``),
        scalars as numbers; constants may be left out and must otherwise equal the compiled value.

    Raises
    ------
    UnsupportedVersion
        cuTile (PyPI ``cuda-tile`` >= 1.4) is missing or too old, or (when compiling) its
        compiler ``tileiras`` (PyPI ``nvidia-cuda-tileiras``; >= 13.3 for ``sm_90``) is.
    CompileError
        cuTile or ``tileiras`` refused the kernel (their message is the log).
    LaunchpadError
        A parameter kind launchpad cannot pass (lists, dataclasses, pointers, tensor maps).
    BinaryError
        ``cubin`` is not a cubin or lacks the signature's symbol.
    """
    ct = check_cutile()
    if not isinstance(kernel, ct.kernel):
        raise ArgumentTypeError(f"from_cutile takes a @ct.kernel function, got {type(kernel).__name__}")
    name = pyfunc_of(kernel).__name__
    if cubin is None:  # the compiler first: a missing one is named before any argument is read
        target = toolchain.resolve_arch(arch, kernel=name)
        check_tileiras(target)
    signature = _signature(kernel, name, args_or_signature, calling_convention)
    if cubin is None:
        image = _export(kernel, name, signature, target)
    else:
        image, kind = read_image(cubin)
        if kind != "cubin":
            raise BinaryError(f"kernel {name!r}: expected a cubin exported by cuTile, got a {kind}")
    return CutileKernel(cutile_spec(image, signature, name, parameter_names(pyfunc_of(kernel)), ct.__version__))


def _signature(kernel: Any, name: str, given: Any, calling_convention: Any) -> Any:
    from cuda.tile.compilation import KernelSignature

    if isinstance(given, KernelSignature):
        if calling_convention is not None and calling_convention != given.calling_convention:
            raise ArgumentError(f"kernel {name!r}: the signature has its own calling convention "
                                f"({given.calling_convention.name}); leave calling_convention out")  # fmt: skip
        return given if given.symbol is not None else given.with_mangled_symbol(name)
    if not isinstance(given, (tuple, list)):
        raise ArgumentTypeError(f"kernel {name!r}: expected example arguments (a tuple, as ct.launch takes them) or "
                                f"a KernelSignature, got {type(given).__name__}")  # fmt: skip
    return signature_from_args(kernel, tuple(given), calling_convention)


def _export(kernel: Any, name: str, signature: Any, arch: str) -> bytes:
    """The cubin cuTile's export makes of ``kernel`` for ``signature`` (its disk cache may answer)."""
    from cuda.tile.compilation import export_kernel

    out = io.BytesIO()
    try:
        export_kernel(kernel, [signature], out, gpu_code=arch, output_format="cubin")
    except Exception as exc:  # cuTile's TileError family, tileiras failures: the user's code or the compiler
        raise CompileError(f"cuTile could not compile kernel {name!r} for {arch}: {type(exc).__name__}",
                           str(exc).strip()) from exc  # fmt: skip
    return out.getvalue()


def cutile_spec(image: bytes, signature: Any, name: str, names: list[str], version: str = "") -> KernelSpec:
    """The finished spec of a cubin cuTile exported for ``signature`` (see :func:`from_cutile`)."""
    words, param_names, args = describe(signature, names, name)
    if b"nvshmem" in image:
        raise BinaryError(f"kernel {name!r} calls NVSHMEM, whose per-library setup only ct.launch runs; "
                             "launch it with ct.launch")  # fmt: skip
    spec = spec_from_image(image, "cubin", signature.symbol, signature=words, display_name=name)
    params = tuple(replace(p, name=param_names[p.index]) for p in spec.params)
    return spec.replace(
        params=params,
        args=tuple(args),
        # ct.launch's launch: the grid counts tile blocks, the block is (1, 1, 1), no dynamic shared memory
        plan=LaunchPlan(block=(1, 1, 1), max_grid=MAX_GRID_DIM, max_grid_words=_LIMIT_WORDS),
        metadata={
            "frontend": "cutile",
            "cutile_version": version,
            "calling_convention": signature.calling_convention.code,
            "arch": cubin_arch(image) or "",
        },
    )
