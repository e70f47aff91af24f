"""The CuTe DSL rows of the launch benchmark (``python -m launchpad bench --only cute``).

The same CuTe DSL kernel, its elementwise add of three dynamic (M, N) float32 tensors (CuTe DSL's
first example; 64 x 64 floats, 16 blocks of 256 threads), launched through launchpad
(``launchpad.from_cute``: ``k[grid](a, b, c)``, three 24-byte tensor structs packed per launch),
and the same cubin from a C loop with the structs packed once, this group's floor. Where CuTe DSL
is installed with a GPU, CuTe's own JIT call of the compiled function (its tensors made once with
``from_dlpack``, and made per call) is timed beside them; elsewhere (the GPU machine has no CuTe
DSL) those rows are missing and cite the published figures instead.

The kernel is the artifact carried in ``tests/cubins/cute/add.json`` (``$LAUNCHPAD_CUTE_CUBINS``
names another folder); ``python tests/cute_kernels.py`` writes it where CuTe DSL is installed.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

from .harness import Entry, Missing, Timed

__all__ = ["CUTE_LAUNCHERS", "GROUP", "PUBLISHED", "artifact_folder"]

M = N = 64
BLOCK = 256
#: CuTe DSL's own launch costs as published (per call, host time), cited where it cannot run here.
PUBLISHED = (
    "published, not measured here: CuTe DSL's JIT call 13.5 us with argument objects reused, 20.8 us rebuilt "
    "(B200, NVIDIA/cutlass#3418); 15-47 us with from_dlpack per call, 3.6-5 us through TVM-FFI "
    "(Dao-AILab/flash-attention#2305, meta-pytorch/tritonbench#674)"
)


def artifact_folder() -> Path:
    """Where the carried CuTe artifacts are: ``$LAUNCHPAD_CUTE_CUBINS``, else ``tests/cubins/cute``."""
    given = os.environ.get("LAUNCHPAD_CUTE_CUBINS")
    return Path(given) if given else Path(__file__).resolve().parents[2] / "tests" / "cubins" / "cute"


class _Setup:
    """The kernel and its tensors, made once per run."""

    def __init__(self, ctx: Any):
        import launchpad

        path = artifact_folder() / "add.json"
        if not path.is_file():
            raise Missing(f"no CuTe DSL artifact at {path} (python tests/cute_kernels.py writes it where "
                          "nvidia-cutlass-dsl is installed)")  # fmt: skip
        torch = ctx.torch
        self.lp = launchpad.load(path)
        self.a = torch.randn(M, N, device=ctx.device)
        self.b = torch.randn(M, N, device=ctx.device)
        self.c = torch.empty(M, N, device=ctx.device)
        self.grid = ((M * N + BLOCK - 1) // BLOCK,)

    def verify(self, ctx: Any, call: Any) -> None:
        ctx.verify(call, reset=self.c.zero_, read=self.c.cpu, expected=(self.a + self.b).cpu())


def _setup(ctx: Any) -> _Setup:
    return ctx.once("cute", lambda: _Setup(ctx))


def lp_cute(ctx: Any) -> Timed:
    s = _setup(ctx)
    a, b, c, launch = s.a, s.b, s.c, s.lp[s.grid]
    call = lambda: launch(a, b, c)
    s.verify(ctx, call)
    return Timed(call, note=f"k = launchpad.from_cute(add, args); k[{s.grid}](a, b, c), {M}x{N} floats")


def lp_cute_py(ctx: Any) -> Timed:
    import launchpad

    s = _setup(ctx)
    k = launchpad.Kernel(s.lp.spec, compiled=False)
    a, b, c, launch = s.a, s.b, s.c, k[s.grid]
    call = lambda: launch(a, b, c)
    s.verify(ctx, call)
    return Timed(call, note="the same, Python executor")


def c_floor_cute(ctx: Any) -> Timed:
    s = _setup(ctx)
    floor = ctx.cfloor()
    function = floor.load(s.lp)
    arg = s.lp.spec.args[0]
    from launchpad.launch.checks import CONVERTERS, Context

    convert = CONVERTERS[arg.converter].specialize(**arg.options)
    context = Context(s.lp.spec.display_name, s.lp.spec.params, s.lp.spec.args)
    values = [ctypes.create_string_buffer(convert(t, t.get_device(), 0, context, arg)[0], 24) for t in (s.a, s.b, s.c)]
    batch = floor.launcher(function, s.grid[0], BLOCK, values, ctx.stream)
    s.verify(ctx, lambda: batch(1))
    return Timed(batch=batch, note="cuLaunchKernel in a C loop, the same CuTe cubin, structs packed once")


def _cute_compiled(ctx: Any) -> tuple[Any, Any, Any]:
    """CuTe DSL's own compiled function of the same kernel, and its ``from_dlpack`` (or Missing)."""
    try:
        import cutlass.cute as cute
        from cutlass.cute.runtime import from_dlpack
    except ImportError as exc:
        raise Missing(f"CuTe DSL is not installed here ({exc}); {PUBLISHED}") from None
    import sys

    sys.path.insert(0, str(artifact_folder().parents[1]))
    import cute_kernels  # tests/cute_kernels.py: the kernel the artifact was compiled from

    s = _setup(ctx)
    view = lambda t: from_dlpack(t, assumed_align=16).mark_layout_dynamic()
    compiled = cute.compile(cute_kernels.add, view(s.a), view(s.b), view(s.c))
    return s, compiled, view


def cute_jit_reused(ctx: Any) -> Timed:
    s, compiled, view = _cute_compiled(ctx)
    a, b, c = view(s.a), view(s.b), view(s.c)
    call = lambda: compiled(a, b, c)
    s.verify(ctx, call)
    return Timed(call, note="CuTe DSL compiled(a, b, c), from_dlpack views made once (NULL stream)")


def cute_jit_dlpack(ctx: Any) -> Timed:
    s, compiled, view = _cute_compiled(ctx)
    a, b, c = s.a, s.b, s.c
    call = lambda: compiled(view(a), view(b), view(c))
    s.verify(ctx, call)
    return Timed(call, note="CuTe DSL compiled(from_dlpack(a), ...), views made per call")


CUTE_LAUNCHERS: list[Entry] = [
    Entry("c_floor_cute", "C loop calling cuLaunchKernel, CuTe DSL add cubin", "floor", c_floor_cute),
    Entry("lp_cute", "launchpad k[grid](a, b, c), CuTe DSL add (from_cute)", "launchpad", lp_cute),
    Entry("lp_cute_py", "launchpad k[grid](a, b, c), CuTe DSL add, Python executor", "launchpad", lp_cute_py),
    Entry("cute_jit", "CuTe DSL compiled(a, b, c), views reused", "peer", cute_jit_reused),
    Entry("cute_jit_dlpack", "CuTe DSL compiled(from_dlpack(a), ...) per call", "peer", cute_jit_dlpack),
]
#: ``--only cute``: the launch section, these launchers (and the C floor, always).
GROUP = ["launch", *(e.key for e in CUTE_LAUNCHERS)]
