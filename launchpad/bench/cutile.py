"""The cuTile rows of the launch benchmark (``python -m launchpad bench --only cutile``), and the
cubins that stand in for ``tileiras`` where it cannot compile.

The same cuTile kernel (its quickstart ``vector_add``, 4,096 floats in 4 tile blocks), launched
as its users launch it, ``ct.launch(stream, grid, kernel, args)``, and through launchpad
(``launchpad.from_cutile``), with the same cubin from a C loop as this group's floor.

Where cuTile's compiler cannot run (the GPU machine: see the cuTile page of the documentation),
cubins exported elsewhere for sm_90 are taken from :func:`cubin_folder`, one ``<symbol>.cubin``
per signature (``python tests/cutile_kernels.py FOLDER`` writes them): :func:`build` gives
launchpad the one for the arguments' signature, and :func:`carried_compile` makes ``ct.launch``
load it instead of compiling, so both launch the same code. The GPU tests use both too.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .harness import Entry, Missing, Timed

__all__ = ["CUTILE_LAUNCHERS", "build", "carried_compile", "cubin_folder"]

N, TILE = 4096, 1024
_cannot_compile: list[str] = []  # why cuTile could not compile in this process (tried once)


def cubin_folder() -> Path:
    """Where carried cubins are: ``$LAUNCHPAD_CUTILE_CUBINS``, else ``.whl/cutile`` of the checkout."""
    given = os.environ.get("LAUNCHPAD_CUTILE_CUBINS")
    return Path(given) if given else Path(__file__).resolve().parents[2] / ".whl" / "cutile"


def build(kernel: Any, args: tuple) -> tuple[Any, str]:
    """``(launchpad kernel, how it was made)`` for ``args``: compiled here where cuTile can, else
    from the carried cubin of the arguments' signature; raises :class:`Missing` saying what is
    missing when neither works."""
    import launchpad
    from launchpad.frontends.cutile.signature import signature_from_args

    signature = signature_from_args(kernel, args)
    if not _cannot_compile:
        try:
            return launchpad.from_cutile(kernel, signature), "compiled here by tileiras"
        except (launchpad.UnsupportedVersion, launchpad.CompileError, launchpad.NoDeviceError) as exc:
            _cannot_compile.append(str(exc).strip().splitlines()[0][:300])
    path = cubin_folder() / f"{signature.symbol}.cubin"
    if not path.is_file():
        raise Missing(f"cuTile cannot compile here ({_cannot_compile[0]}) and no cubin is carried for "
                      f"{signature.symbol} in {path.parent} (python tests/cutile_kernels.py {path.parent}, "
                      "where tileiras runs, writes them)")  # fmt: skip
    return launchpad.from_cutile(kernel, signature, cubin=path), f"carried cubin {path.name}"


def carried_compile(kernel: Any) -> Callable[[], None] | None:
    """Where cuTile cannot compile here, make ``ct.launch`` load the carried cubin of the signature
    it asks for (its kernel's ``_compile`` hook, which its launcher calls on a cache miss) instead
    of running ``tileiras``; returns the function that undoes it (None: nothing to do)."""
    if not _cannot_compile:
        return None
    from cuda.tile.compilation import mangle_kernel_name

    name = kernel._annotated_function.pyfunc.__name__

    def _compile(signature: Any, context: Any, compute_capability: Any = None) -> tuple:
        symbol = signature.symbol or mangle_kernel_name(name, signature)
        path = cubin_folder() / f"{symbol}.cubin"
        if not path.is_file():
            raise FileNotFoundError(f"ct.launch asks for {symbol}, which is not carried in {path.parent}")
        return path.read_bytes(), symbol, None, ()

    kernel._compile = _compile
    return lambda: vars(kernel).pop("_compile", None)


class _Setup:
    """The kernel, its tensors and both ways to launch it, made once per run."""

    def __init__(self, ctx: Any):
        try:
            import cuda.tile as ct
        except ImportError as exc:
            raise Missing(f"cuTile is not installed ({exc}): pip install 'cuda-tile[tileiras]'") from None
        from . import _cutile_kernels

        torch = ctx.torch
        self.ct, self.kernel = ct, _cutile_kernels.vector_add
        self.a = torch.randn(N, device=ctx.device)
        self.b = torch.randn(N, device=ctx.device)
        self.c = torch.empty(N, device=ctx.device)
        self.args = (self.a, self.b, self.c, TILE)
        self.grid = (N // TILE, 1, 1)
        self.lp, self.how = build(self.kernel, self.args)
        carried_compile(self.kernel)  # ct.launch below, then, loads the same cubin

    def verify(self, ctx: Any, call: Callable[[], Any]) -> None:
        ctx.verify(call, reset=self.c.zero_, read=self.c.cpu, expected=(self.a + self.b).cpu())


def _setup(ctx: Any) -> _Setup:
    return ctx.once("cutile", lambda: _Setup(ctx))


def cutile_launch(ctx: Any) -> Timed:
    s = _setup(ctx)
    launch, stream, grid, kernel, args = s.ct.launch, ctx.torch.cuda.current_stream(), s.grid, s.kernel, s.args
    call = lambda: launch(stream, grid, kernel, args)
    s.verify(ctx, call)
    return Timed(call, note=f"ct.launch(torch stream, {grid}, vector_add, (a, b, c, {TILE})), {N} floats ({s.how})")


def lp_cutile(ctx: Any) -> Timed:
    s = _setup(ctx)
    k, a, b, c = s.lp, s.a, s.b, s.c
    launch = k[s.grid]
    call = lambda: launch(a, b, c, TILE)
    s.verify(ctx, call)
    return Timed(call, note=f"k = launchpad.from_cutile(vector_add, args); k[{s.grid}](a, b, c, {TILE}) ({s.how})")


def lp_cutile_py(ctx: Any) -> Timed:
    s = _setup(ctx)
    k = type(s.lp)(s.lp.spec, compiled=False)
    a, b, c, launch = s.a, s.b, s.c, k[s.grid]
    call = lambda: launch(a, b, c, TILE)
    s.verify(ctx, call)
    return Timed(call, note="the same, Python executor")


def c_floor_cutile(ctx: Any) -> Timed:
    s = _setup(ctx)
    floor = ctx.cfloor()
    function = floor.load(s.lp)
    values: list[Any] = []
    for t in (s.a, s.b, s.c):
        values += [ctypes.c_uint64(t.data_ptr()), ctypes.c_int32(N), ctypes.c_int32(1)]
    batch = floor.launcher(function, s.grid[0], 1, values, ctx.stream)
    s.verify(ctx, lambda: batch(1))
    return Timed(batch=batch, note="cuLaunchKernel in a C loop, the same cuTile cubin, prepacked params")


CUTILE_LAUNCHERS: list[Entry] = [
    Entry("c_floor_cutile", "C loop calling cuLaunchKernel, cuTile vector_add cubin", "floor", c_floor_cutile),
    Entry("lp_cutile", "launchpad k[grid](...), cuTile vector_add (from_cutile)", "launchpad", lp_cutile),
    Entry("lp_cutile_py", "launchpad k[grid](...), cuTile vector_add, Python executor", "launchpad", lp_cutile_py),
    Entry("cutile_launch", "cuTile ct.launch(stream, grid, kernel, args), vector_add", "peer", cutile_launch),
]
#: ``--only cutile``: the launch section, these launchers (and the C floor, always).
GROUP = ["launch", *(e.key for e in CUTILE_LAUNCHERS)]
