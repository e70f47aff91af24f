"""The Warp rows of the launch benchmark (``python -m launchpad bench --only warp``).

The same Warp kernel, ``saxpy(a: float, x: wp.array(dtype=float), y: wp.array(dtype=float))`` (three
arguments; 4096 floats, 16 blocks of Warp's 256 threads), launched through launchpad
(``launchpad.from_warp``: ``k[n](a, x, y)``, the launch bounds bound by ``k[n]``, two 56-byte
``array_t`` structs packed from torch tensors per launch), and the same cubin from a C loop with
everything packed once, this group's floor. Where Warp is installed with a GPU, Warp's own
``wp.launch`` (arrays made once with ``wp.from_torch``) and its ``record_cmd`` launch object
(``wp.launch(..., record_cmd=True).launch()``) are timed beside them; elsewhere (the GPU machine has
no Warp) those rows are missing and cite the published figures instead.

The kernel is the artifact carried in ``tests/cubins/warp/saxpy.json`` (``$LAUNCHPAD_WARP_CUBINS``
names another folder); ``python tests/warp_kernels.py`` writes it where Warp is installed.
"""

from __future__ import annotations

import ctypes
import os
import struct
from pathlib import Path
from typing import Any

from .harness import Entry, Missing, Timed

__all__ = ["GROUP", "PUBLISHED", "WARP_LAUNCHERS", "artifact_folder"]

N = 4096
A = 2.0
#: Warp's own launch costs as published (per call, host time), cited where it cannot run here.
PUBLISHED = (
    "published, not measured here: wp.launch 7.3-15.5 us of host time per call on CUDA, growing with the "
    "parameter count (NVIDIA/warp#1862); wp.from_torch and wp.ScopedStream(wp.stream_from_torch()) add more"
)


def artifact_folder() -> Path:
    """Where the carried Warp artifacts are: ``$LAUNCHPAD_WARP_CUBINS``, else ``tests/cubins/warp``."""
    given = os.environ.get("LAUNCHPAD_WARP_CUBINS")
    return Path(given) if given else Path(__file__).resolve().parents[2] / "tests" / "cubins" / "warp"


class _Setup:
    """The kernel and its tensors, made once per run."""

    def __init__(self, ctx: Any):
        import launchpad

        path = artifact_folder() / "saxpy.json"
        if not path.is_file():
            raise Missing(f"no Warp artifact at {path} (python tests/warp_kernels.py writes it where warp-lang is "
                          "installed)")  # fmt: skip
        torch = ctx.torch
        from launchpad.frontends.warp.kernel import WarpKernel

        loaded = launchpad.load(path)
        if not isinstance(loaded, WarpKernel):
            raise Missing(f"{path} is not a Warp artifact")
        self.lp: WarpKernel = loaded
        self.x = torch.randn(N, device=ctx.device)
        self.y0 = torch.randn(N, device=ctx.device)
        self.y = self.y0.clone()

    def verify(self, ctx: Any, call: Any) -> None:
        ctx.verify(call, reset=lambda: self.y.copy_(self.y0), read=self.y.cpu, expected=(A * self.x + self.y0).cpu())


def _setup(ctx: Any) -> _Setup:
    return ctx.once("warp", lambda: _Setup(ctx))


def lp_warp(ctx: Any) -> Timed:
    s = _setup(ctx)
    x, y, launch = s.x, s.y, s.lp[N]
    call = lambda: launch(A, x, y)
    s.verify(ctx, call)
    return Timed(call, note=f"k = launchpad.from_warp(saxpy); k[{N}](a, x, y), torch tensors")


def lp_warp_py(ctx: Any) -> Timed:
    import launchpad

    s = _setup(ctx)
    k = launchpad.load(artifact_folder() / "saxpy.json")
    k = type(k)(k.spec, compiled=False)
    x, y, launch = s.x, s.y, k[N]
    call = lambda: launch(A, x, y)
    s.verify(ctx, call)
    return Timed(call, note="the same, Python executor")


def c_floor_warp(ctx: Any) -> Timed:
    from launchpad.frontends.warp.args import pack_array

    s = _setup(ctx)
    floor = ctx.cfloor()
    function = floor.load(s.lp)
    grid, bounds = s.lp.bounds(N)
    packed = [bounds, struct.pack("<f", A), *(pack_array(t.data_ptr(), (N,), (4,)) for t in (s.x, s.y))]
    values = [ctypes.create_string_buffer(v, len(v)) for v in packed]
    batch = floor.launcher(function, grid, s.lp.block_dim, values, ctx.stream)
    s.verify(ctx, lambda: batch(1))
    return Timed(batch=batch, note="cuLaunchKernel in a C loop, the same Warp cubin, bounds and array_t packed once")


def _warp(ctx: Any) -> tuple[Any, Any, Any]:
    """Warp, the same kernel compiled by Warp on this device, and the setup (or Missing)."""
    try:
        import warp as wp
    except ImportError as exc:
        raise Missing(f"Warp is not installed here ({exc}); {PUBLISHED}") from None
    import sys

    sys.path.insert(0, str(artifact_folder().parents[1]))
    import warp_kernels  # tests/warp_kernels.py: the kernel the artifact was compiled from

    s = _setup(ctx)
    return wp, warp_kernels.kernels()["saxpy"], s


def wp_launch(ctx: Any) -> Timed:
    wp, kernel, s = _warp(ctx)
    x, y = wp.from_torch(s.x), wp.from_torch(s.y)
    stream = wp.stream_from_torch()
    call = lambda: wp.launch(kernel, dim=N, inputs=[A, x, y], device=f"cuda:{ctx.device}", stream=stream)
    s.verify(ctx, call)
    return Timed(call, note="wp.launch(saxpy, dim, inputs=[a, x, y]), wp.from_torch arrays made once")


def wp_record_cmd(ctx: Any) -> Timed:
    wp, kernel, s = _warp(ctx)
    x, y = wp.from_torch(s.x), wp.from_torch(s.y)
    stream = wp.stream_from_torch()
    cmd = wp.launch(kernel, dim=N, inputs=[A, x, y], device=f"cuda:{ctx.device}", stream=stream, record_cmd=True)
    call = lambda: cmd.launch(stream)
    s.verify(ctx, call)
    return Timed(call, note="wp.launch(..., record_cmd=True) once, then cmd.launch(stream)")


WARP_LAUNCHERS: list[Entry] = [
    Entry("c_floor_warp", "C loop calling cuLaunchKernel, Warp saxpy cubin", "floor", c_floor_warp),
    Entry("lp_warp", "launchpad k[dim](a, x, y), Warp saxpy (from_warp)", "launchpad", lp_warp),
    Entry("lp_warp_py", "launchpad k[dim](a, x, y), Warp saxpy, Python executor", "launchpad", lp_warp_py),
    Entry("wp_launch", "Warp wp.launch(saxpy, dim, inputs)", "peer", wp_launch),
    Entry("wp_record_cmd", "Warp recorded launch cmd.launch()", "peer", wp_record_cmd),
]
#: ``--only warp``: the launch section, these launchers (and the C floor, always).
GROUP = ["launch", *(e.key for e in WARP_LAUNCHERS)]
