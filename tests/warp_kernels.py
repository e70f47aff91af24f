"""Warp kernels for the Warp front end's tests, and the artifacts carried to a GPU without Warp.

Each :class:`Case` is a ``@wp.kernel``, how to make its arguments and launch dimensions on a device,
and the torch reference of what it writes. ``python tests/warp_kernels.py [FOLDER]`` compiles every
kernel for sm_90 with Warp's ahead-of-time compiler (no GPU needed) and saves each as a launchpad
artifact in ``FOLDER`` (default ``tests/cubins/warp``, committed): the GPU tests load those
(:func:`launchpad.load`) where Warp is not installed. This module imports Warp only to define the
kernels (:func:`kernels`), so its cases and references work without it.
"""

# (no ``from __future__ import annotations``: Warp reads the kernels' annotations as objects)

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

ARTIFACTS = Path(__file__).parent / "cubins" / "warp"
ARCH = 90


@dataclass(frozen=True)
class Case:
    """A kernel's test: ``make(device, generator)`` gives ``(args, dim, expected)``, ``expected``
    mapping an argument's position to the tensor it must hold after the launch."""

    name: str
    make: Callable[[str, torch.Generator], tuple[tuple, Any, dict[int, torch.Tensor]]]
    atol: float = 1e-5
    rtol: float = 1e-5
    tiled: bool = False  # launched as wp.launch_tiled(kernel, dim, block_dim=256)


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32, device: str = "cpu") -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) + 0.5).to(dtype=dtype, device=device)  # never all zeros


def make_saxpy(device: str, gen: torch.Generator) -> tuple:
    n = 10_000 + int(torch.randint(0, 100, (1,), generator=gen))
    x, y = _randn(gen, n, device=device), _randn(gen, n, device=device)
    a = float(torch.rand((), generator=gen)) + 0.5
    return (a, x, y), n, {2: a * x + y}


def make_scale2d(device: str, gen: torch.Generator) -> tuple:
    base = _randn(gen, 48, 70, device=device)
    x = base[3:43, ::2].t()  # a strided, transposed view: shape (35, 40), strides (2, 70), offset 3 rows
    out = torch.empty(70, 50, device=device)[5:40, 3:43]  # a strided output: shape (35, 40), strides (50, 1)
    s = float(torch.rand((), generator=gen)) + 0.25
    i = torch.arange(35, device=device, dtype=torch.float32)[:, None]
    j = torch.arange(40, device=device, dtype=torch.float32)[None, :]
    return (x, out, s), (35, 40), {1: s * x + i - 2.0 * j}


def make_cross(device: str, gen: torch.Generator) -> tuple:
    n = 777
    a, b, out = _randn(gen, n, 3, device=device), _randn(gen, n, 3, device=device), torch.empty(n, 3, device=device)
    offset = tuple(float(v) for v in torch.rand(3, generator=gen) + 0.5)
    expected = torch.linalg.cross(a, b) + torch.tensor(offset, device=device)
    return (a, b, out, offset), n, {2: expected}


def make_matvec(device: str, gen: torch.Generator) -> tuple:
    n = 513
    m = torch.rand(3, 3, generator=gen) + 0.5  # passed by value: a CPU tensor of its 9 components
    v, out = _randn(gen, n, 3, device=device), torch.empty(n, 3, device=device)
    return (m, v, out), n, {2: v @ m.to(device).t()}


def make_index3d(device: str, gen: torch.Generator) -> tuple:
    out = torch.full((5, 6, 7), -1, dtype=torch.int32, device=device)
    scale = int(torch.randint(2, 9, (1,), generator=gen))
    i, j, k = torch.meshgrid(*(torch.arange(n, device=device, dtype=torch.int32) for n in (5, 6, 7)), indexing="ij")
    return (out, scale), (5, 6, 7), {0: (i * 100 + j * 10 + k) * scale}


def make_add4d(device: str, gen: torch.Generator) -> tuple:
    shape = (3, 4, 5, 6)
    a, b = (
        _randn(gen, *shape, dtype=torch.float64, device=device),
        _randn(gen, *shape, dtype=torch.float64, device=device),
    )
    out = torch.empty(shape, dtype=torch.float64, device=device)
    return (a, b, out), shape, {2: a + b * 2.0}


def make_mixed(device: str, gen: torch.Generator) -> tuple:
    n = 300
    x = (torch.rand(n, generator=gen) * 100).to(torch.float16).to(device)
    out = torch.empty(n, dtype=torch.int64, device=device)
    k, u = -(2**40) - 3, 200
    expected = x.to(torch.float32).to(torch.int64) * k + u
    return (x, out, k, u, True), n, {1: expected}


def make_with_struct(device: str, gen: torch.Generator) -> tuple:
    """A ``wp.struct`` argument as a dict of its fields: arrays as tensors, a nested struct as a dict."""
    n = 1000 + int(torch.randint(0, 100, (1,), generator=gen))
    x, y = _randn(gen, n, device=device), _randn(gen, n, 3, device=device)
    s, flag = float(torch.rand((), generator=gen)) + 0.5, bool(torch.randint(0, 2, (1,), generator=gen))
    v = tuple(float(c) for c in torch.rand(3, generator=gen) + 0.5)
    count = int(torch.randint(-50, 50, (1,), generator=gen))
    m = (torch.rand(2, 2, generator=gen) + 0.5).tolist()
    out = torch.empty(n, device=device)
    p = {"x": x, "y": y, "s": s, "inner": {"v": v, "n": count}, "flag": flag, "m": m}
    shifted = y + torch.tensor(v, device=device)
    expected = s * x + shifted[:, 0] - shifted[:, 1] * shifted[:, 2] + count + m[0][1] - m[1][0] + float(flag)
    return (p, out), n, {1: expected}


def make_tile_rowsum(device: str, gen: torch.Generator) -> tuple:
    """A tile kernel, launched as wp.launch_tiled: one block of the module's 256 threads per 8x32 tile."""
    tiles = 50 + int(torch.randint(0, 20, (1,), generator=gen))
    a, sums = _randn(gen, tiles * 8, 32, device=device), torch.empty(tiles, device=device)
    return (a, sums), tiles, {1: a.view(tiles, 8 * 32).sum(dim=1)}


CASES = [
    Case("saxpy", make_saxpy),
    Case("scale2d", make_scale2d),
    Case("cross", make_cross, atol=1e-4, rtol=1e-4),
    Case("matvec", make_matvec, atol=1e-4, rtol=1e-4),
    Case("index3d", make_index3d, atol=0, rtol=0),
    Case("add4d", make_add4d, atol=0, rtol=0),
    Case("mixed", make_mixed, atol=0, rtol=0),
    Case("with_struct", make_with_struct, atol=1e-4, rtol=1e-4),
    Case("tile_rowsum", make_tile_rowsum, atol=1e-4, rtol=1e-5, tiled=True),
]


def kernels() -> dict[str, Any]:
    """The ``@wp.kernel`` of each case (and a few for refusals), defined on first use (needs Warp)."""
    if _KERNELS:
        return _KERNELS
    import warp as wp

    wp.config.quiet = True
    wp.set_module_options({"enable_backward": False})

    @wp.kernel(module="unique", enable_backward=False)
    def saxpy(a: float, x: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        y[i] = a * x[i] + y[i]

    @wp.kernel(module="unique", enable_backward=False)
    def scale2d(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float), s: float):
        i, j = wp.tid()
        out[i, j] = s * x[i, j] + float(i) - 2.0 * float(j)

    @wp.kernel(module="unique", enable_backward=False)
    def cross(a: wp.array(dtype=wp.vec3), b: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3), offset: wp.vec3):
        i = wp.tid()
        out[i] = wp.cross(a[i], b[i]) + offset

    @wp.kernel(module="unique", enable_backward=False)
    def matvec(m: wp.mat33, v: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        out[i] = m @ v[i]

    @wp.kernel(module="unique", enable_backward=False)
    def index3d(out: wp.array3d(dtype=wp.int32), scale: int):
        i, j, k = wp.tid()
        out[i, j, k] = (i * 100 + j * 10 + k) * scale

    @wp.kernel(module="unique", enable_backward=False)
    def add4d(a: wp.array4d(dtype=wp.float64), b: wp.array4d(dtype=wp.float64), out: wp.array4d(dtype=wp.float64)):
        i, j, k, m = wp.tid()
        out[i, j, k, m] = a[i, j, k, m] + b[i, j, k, m] * wp.float64(2.0)

    @wp.kernel(module="unique", enable_backward=False)
    def mixed(x: wp.array(dtype=wp.float16), out: wp.array(dtype=wp.int64), k: wp.int64, u: wp.uint8, flag: bool):
        i = wp.tid()
        v = wp.int64(float(x[i])) * k
        if flag:
            v = v + wp.int64(u)
        out[i] = v

    @wp.struct
    class Pair:
        a: float
        b: float

    @wp.kernel(module="unique", enable_backward=False)
    def takes_struct(p: Pair, out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = p.a + p.b

    @wp.struct
    class Inner:
        v: wp.vec3
        n: wp.int32

    @wp.struct
    class Params:
        x: wp.array[float]  # (the subscript form of wp.array(dtype=float))
        y: wp.array(dtype=wp.vec3)
        s: float
        inner: Inner
        flag: bool
        m: wp.mat22

    @wp.kernel(module="structs", enable_backward=False)  # (a module of its own: the others' cubins stay)
    def with_struct(p: Params, out: wp.array(dtype=float)):
        i = wp.tid()
        v = p.y[i] + p.inner.v
        r = p.s * p.x[i] + v[0] - v[1] * v[2] + float(p.inner.n) + p.m[0, 1] - p.m[1, 0]
        if p.flag:
            r = r + 1.0
        out[i] = r

    @wp.struct
    class Gathered:
        a: wp.indexedarray(dtype=float)

    @wp.kernel(module="structs", enable_backward=False)
    def struct_refused(p: Gathered):
        i = wp.tid()
        p.a[i] = 1.0

    @wp.kernel(module="tiles", enable_backward=False)  # (a module of its own: the others' cubins stay)
    def tile_rowsum(a: wp.array2d(dtype=float), sums: wp.array(dtype=float)):
        i = wp.tid()
        t = wp.tile_load(a, shape=(8, 32), offset=(i * 8, 0), storage="shared")  # (dynamic shared memory)
        wp.tile_store(sums, wp.tile_sum(t), offset=(i,))

    @wp.func
    def copy_tile(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float), i: int):
        wp.tile_store(b, wp.tile_load(a, shape=(8, 32), offset=(i * 8, 0)), offset=(i * 8, 0))

    @wp.kernel(module="tiles", enable_backward=False)
    def tile_via_func(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float)):
        copy_tile(a, b, wp.tid())  # register tiles, in a function: no shared memory, no tile code in the kernel

    @wp.func
    def tile_index(i: int) -> int:
        return i * 2

    @wp.kernel(module="tiles", enable_backward=False)
    def tile_lookalike(out: wp.array(dtype=int)):
        i = wp.tid()
        out[i] = tile_index(i)  # unlike wp.tile_load(...), a user function of a tile-like name

    @wp.kernel(module="unique", enable_backward=False)
    def fill(out: wp.array(dtype=float), v: float):
        i = wp.tid()
        out[i] = v

    @wp.kernel(module="unique", enable_backward=False)
    def tiled(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float)):
        i = wp.tid()
        t = wp.tile_load(a, shape=(16, 16), offset=(i * 16, 0))
        wp.tile_store(b, t, offset=(i * 16, 0))

    @wp.kernel(module="unique", enable_backward=False)
    def indexed(a: wp.indexedarray(dtype=float)):
        i = wp.tid()
        a[i] = 1.0

    @wp.kernel(module="unique", enable_backward=False)
    def generic(a: wp.array(dtype=wp.Scalar)):
        pass

    @wp.kernel(module="unique", enable_backward=False, grid_stride=False)
    def lean(out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = 1.0

    _KERNELS.update(saxpy=saxpy, scale2d=scale2d, cross=cross, matvec=matvec, index3d=index3d, add4d=add4d,
                    mixed=mixed, with_struct=with_struct, tile_rowsum=tile_rowsum, tile_via_func=tile_via_func,
                    tile_lookalike=tile_lookalike, struct_refused=struct_refused, takes_struct=takes_struct, fill=fill, tiled=tiled, indexed=indexed,
                    generic=generic, lean=lean)  # fmt: skip
    return _KERNELS


_KERNELS: dict[str, Any] = {}


def to_warp(wp: Any, annotation: Any, value: Any) -> Any:
    """A case's argument as ``wp.launch`` takes it: a Warp array of a CUDA tensor, a Warp vector or
    matrix of a sequence, a struct instance of a dict (its fields converted alike)."""
    if isinstance(value, torch.Tensor) and value.is_cuda:
        return wp.from_torch(value, dtype=annotation.dtype)
    if isinstance(value, dict):
        instance = annotation()
        for name, var in annotation.vars.items():
            setattr(instance, name, to_warp(wp, var.type, value[name]))
        return instance
    if hasattr(annotation, "_shape_"):  # a vector or matrix value
        return annotation(*torch.as_tensor(value).reshape(-1).tolist())
    return value


def write_artifacts(folder: Path = ARTIFACTS) -> list[Path]:
    """Compile every case's kernel for sm_90 and save it as an artifact in ``folder``."""
    import launchpad

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for case in CASES:
        kernel = launchpad.from_warp(kernels()[case.name], arch=ARCH)
        written.append(kernel.save(folder / f"{case.name}.json"))
    return written


if __name__ == "__main__":
    for path in write_artifacts(Path(sys.argv[1]) if len(sys.argv) > 1 else ARTIFACTS):
        print(path, path.stat().st_size)
