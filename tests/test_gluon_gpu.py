"""Gluon kernels on a GPU (Hopper), each launched by Gluon itself and through every way into
launchpad: ``triton_launcher``, ``from_triton`` of the CompiledKernel Gluon's launch returned, the
Triton cache folder it wrote, and that kernel saved and loaded; every output bit for bit equal to
Gluon's own, and checked against torch on random inputs.

The kernels (``tests/gluon_kernels.py``) are written for the Gluon of Triton 3.6 and of Triton 3.9
(which renamed the TMA copies), so every test here runs, and asserts the same, on either.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import launchpad

pytestmark = pytest.mark.gpu

triton = pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon")
import gluon_kernels as G  # noqa: E402


def randn(*shape, dtype=torch.float32, seed=0) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", dtype=dtype, generator=g)


def hopper() -> None:
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("needs a Hopper GPU or newer (TMA, wgmma)")


def every_way(kernel, grid, make: Callable[[], tuple[list, list]], tmp_path, **options) -> list[torch.Tensor]:
    """Launch ``kernel`` with fresh arguments from ``make()`` (``(args, outputs)``) each way; every
    way's outputs must equal Gluon's own bits. Returns Gluon's outputs."""
    args, outs = make()
    compiled = kernel[grid](*args, **options)  # Gluon's own launch
    torch.cuda.synchronize()
    expected = [o.clone() for o in outs]

    def check(way: str, launch: Callable[[list], None]) -> None:
        args, outs = make()
        launch(args)
        torch.cuda.synchronize()
        for got, want in zip(outs, expected):
            assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), way

    check("triton_launcher", lambda a: launchpad.triton_launcher(kernel)[grid](*a, **options))
    loaded = launchpad.from_triton(compiled)
    check("from_triton", lambda a: loaded[grid](*a))
    saved = launchpad.load(loaded.save(tmp_path / "kernel.json"))
    check("saved artifact", lambda a: saved[grid](*a))
    folder = next(p for n, p in compiled.metadata_group.items() if n.endswith(".json"))
    cached = launchpad.load_triton(folder)
    runtime = list(dict.fromkeys(a.name for a in cached.args if a.path and a.kind != "const"))
    names = list(kernel.arg_names)
    check("cache folder", lambda a: cached[grid](**{n: a[names.index(n)] for n in runtime}))
    return expected


def test_blocked_layout_add(tmp_path):
    n = 10_000
    x, y = randn(n), randn(n, seed=1)

    def make():
        out = torch.empty_like(x)
        return [x, y, out, n, 1024, 8], [out]

    (out,) = every_way(G.blocked_add, (triton.cdiv(n, 1024),), make, tmp_path, num_warps=4)
    torch.testing.assert_close(out, x + y)


def test_transpose_through_shared_memory(tmp_path):
    m, n = 200, 136
    src = randn(m, n)

    def make():
        dst = torch.empty(n, m, device="cuda")
        return [src, dst, m, n, 32, 32], [dst]

    (dst,) = every_way(G.transpose_via_shared, (triton.cdiv(m, 32), triton.cdiv(n, 32)), make, tmp_path)
    assert torch.equal(dst, src.t())


def test_tma_with_an_mbarrier(tmp_path):
    hopper()
    src = randn(256, 192, dtype=torch.float16)

    def make():
        out = torch.empty_like(src)
        return [G.descriptor(src, [64, 64]), G.descriptor(out, [64, 64]), 2.0], [out]

    (out,) = every_way(G.tma_copy_tile, (4, 3), make, tmp_path)
    assert torch.equal(out, src * 2)


@pytest.mark.parametrize("m, n, k", [(128, 128, 64), (256, 192, 320)])
def test_wgmma_matmul(m, n, k, tmp_path):
    hopper()
    a, b = randn(m, k, dtype=torch.float16), randn(k, n, dtype=torch.float16, seed=1)

    def make():
        c = torch.empty(m, n, device="cuda")
        return [G.descriptor(a, [64, 32]), G.descriptor(b, [32, 64]), c, m, n, k, c.stride(0)], [c]

    (c,) = every_way(G.wgmma_matmul, (triton.cdiv(m, 64), triton.cdiv(n, 64)), make, tmp_path, num_warps=4)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-3, atol=1e-2)


def test_warp_specialized_producer_and_consumer(tmp_path):
    hopper()
    rows, steps = 32 * 4 * 6, 4
    src = randn(rows, 64, dtype=torch.float16)

    def make():
        out = torch.empty_like(src)
        return [G.descriptor(src, [32, 64]), out, rows, 3.0, steps], [out]

    (out,) = every_way(G.ws_scale, (rows // (32 * steps),), make, tmp_path, num_warps=4)
    assert torch.equal(out, src * 3)
