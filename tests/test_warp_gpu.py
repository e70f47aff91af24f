"""Warp kernels launched through launchpad on a GPU, from the artifacts carried in ``tests/cubins/warp``
(compiled for sm_90 by ``python tests/warp_kernels.py`` where Warp is installed; the GPU machine has
no Warp): against torch on random inputs, in both executors, refusals before the launch, a bound
launch, a recorded step replayed bit for bit, a ``torch.compile(fullgraph=True)`` function, and,
where Warp is installed, bit for bit against ``wp.launch``.
"""

from __future__ import annotations

import pytest
import torch
from warp_kernels import ARTIFACTS, CASES

import launchpad

pytestmark = pytest.mark.gpu
IDS = [c.name for c in CASES]


@pytest.fixture(autouse=True)
def _needs_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("the carried Warp cubins are sm_90")


def carried(name: str, compiled: bool | None = None) -> launchpad.Kernel:
    kernel = launchpad.load(ARTIFACTS / f"{name}.json")
    return kernel if compiled is None else type(kernel)(kernel.spec, compiled=compiled)


def check(case, args, expected):
    torch.cuda.synchronize()
    for position, want in expected.items():
        torch.testing.assert_close(args[position], want, atol=case.atol, rtol=case.rtol)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_matches_torch(case, compiled):
    kernel = carried(case.name, compiled)
    assert kernel.launch_path == ("compiled" if compiled else "python")
    for seed in (0, 1):  # new inputs, same kernel: nothing of the first launch is reused
        args, dim, expected = case.make("cuda", torch.Generator().manual_seed(seed))
        kernel[dim](*args)
        check(case, args, expected)


def test_max_blocks_and_folded_dimensions():
    case = CASES[0]
    kernel = carried("saxpy")
    args, n, expected = case.make("cuda", torch.Generator().manual_seed(2))
    kernel.configure(n, max_blocks=3)(*args)  # three blocks loop over every element
    check(case, args, expected)
    a, x, y = args
    out = y.clone()
    kernel[(n, 1, 1)](a, x, out)  # trailing dimensions of 1: coord_mult 1, the same launch
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a * x + y)


def test_bound_launch():
    case = CASES[0]
    kernel = carried("saxpy")
    args, n, expected = case.make("cuda", torch.Generator().manual_seed(3))
    grid, data = kernel.bounds(n)
    kernel.bind(grid, None, data, *args)()
    check(case, args, expected)


def test_wrong_arguments_refused_before_launch():
    kernel = carried("saxpy")
    x, y = torch.randn(256, device="cuda"), torch.randn(256, device="cuda")
    before = y.clone()
    with pytest.raises(launchpad.ArgumentTypeError, match=r"argument 2 \('x'\): expected float32 elements"):
        kernel[256](1.0, x.half(), y)
    with pytest.raises(launchpad.ArgumentError, match=r"argument 3 \('y'\): expected a tensor of 1 dimensions"):
        kernel[256](1.0, x, y.view(16, 16))
    with pytest.raises(launchpad.ArgumentError, match=r"argument 2 \('x'\): expected a CUDA tensor"):
        kernel[256](1.0, x.cpu(), y)
    cross = carried("cross")
    a = torch.randn(8, 3, device="cuda")
    with pytest.raises(launchpad.ArgumentTypeError, match=r"argument 4 \('offset'\): expected 3 components"):
        cross[8](a, a, a, (1.0,))
    torch.cuda.synchronize()
    assert torch.equal(y, before)


def test_recorded_step_replays_bit_for_bit():
    saxpy, scale = carried("saxpy"), carried("scale2d")
    n = 4096

    def step(x, y, a):
        out = y * 1.0  # a torch kernel before, one after
        saxpy[n](a, x, out)
        grid2d = torch.empty(64, 64, device="cuda")
        scale[(64, 64)](out.view(64, 64), grid2d, 0.5)
        return grid2d.sum(dim=1)

    gen = torch.Generator(device="cuda").manual_seed(5)
    sample = [torch.randn(n, device="cuda", generator=gen) for _ in range(2)]
    seq = launchpad.record(step, *sample, 1.5)
    for _ in range(20):
        x, y = (torch.randn(n, device="cuda", generator=gen) for _ in range(2))
        a = float(torch.rand((), device="cuda", generator=gen)) + 0.1
        got = seq(x, y, a)
        want = step(x, y, a)
        torch.cuda.synchronize()
        assert torch.equal(got, want)


def test_recorded_step_with_a_struct_and_a_tile_kernel_replays_bit_for_bit():
    """The step's inputs reach one kernel inside a wp.struct (array_t words inside its bytes) and a tile
    kernel (launch_tiled's bounds, dynamic shared memory): 20 replays on new inputs, against eager."""
    with_struct, rowsum = carried("with_struct"), carried("tile_rowsum")
    n, tiles = 4096, 64

    def step(x, y, a):
        out = torch.empty(n, device="cuda")
        p = {"x": x, "y": y, "s": 1.25, "inner": {"v": (0.5, 1.5, -2.0), "n": 3}, "flag": True, "m": [[1, 2], [3, 4]]}
        with_struct[n](p, out)
        sums = torch.empty(tiles, device="cuda")
        rowsum[tiles](a * 2.0, sums)
        return out + 1.0, sums

    gen = torch.Generator(device="cuda").manual_seed(6)

    def inputs():
        x, y = torch.randn(n, device="cuda", generator=gen), torch.randn(n, 3, device="cuda", generator=gen)
        return x, y, torch.randn(tiles * 8, 32, device="cuda", generator=gen)

    seq = launchpad.record(step, *inputs())
    for _ in range(20):
        x, y, a = inputs()
        got, want = seq(x, y, a), step(x, y, a)
        torch.cuda.synchronize()
        assert all(torch.equal(g, w) for g, w in zip(got, want))


def test_torch_compile_fullgraph():
    saxpy, cross = carried("saxpy"), carried("cross")
    n = 1000

    def fn(x, y, a, b):
        y = y.clone()
        saxpy[n](2.0, x, y)
        out = torch.empty_like(a)
        cross[a.shape[0]](a, b, out, (1.0, 2.0, 3.0))
        return y * 2 + 1, out

    args = (torch.randn(n, device="cuda"), torch.randn(n, device="cuda"), torch.randn(77, 3, device="cuda"),
            torch.randn(77, 3, device="cuda"))  # fmt: skip
    want = fn(*args)
    got = torch.compile(fn, fullgraph=True)(*args)
    torch.cuda.synchronize()
    for g, w in zip(got, want):
        assert torch.equal(g, w)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bits_equal_wp_launch(case):
    """Where Warp is installed (not on the GPU machine): the same kernel compiled here, the same
    inputs, bit for bit against ``wp.launch``."""
    wp = pytest.importorskip("warp", reason="Warp (PyPI warp-lang) is not installed here")
    from warp_kernels import kernels, to_warp

    warp_kernel = kernels()[case.name]
    kernel = launchpad.from_warp(warp_kernel)
    args, dim, _ = case.make("cuda", torch.Generator().manual_seed(7))
    ours = [a.clone() if isinstance(a, torch.Tensor) and a.is_cuda else a for a in args]
    theirs = [to_warp(wp, var.type, a) for var, a in zip(warp_kernel.adj.args, args)]
    where = {"device": f"cuda:{torch.cuda.current_device()}", "stream": wp.stream_from_torch()}
    assert kernel.tiled == case.tiled
    if case.tiled:  # a tile kernel: its dim is launch_tiled's
        wp.launch_tiled(warp_kernel, dim=dim, inputs=theirs, block_dim=kernel.block_dim, **where)
    else:
        wp.launch(warp_kernel, dim=dim, inputs=theirs, **where)
    kernel[dim](*ours)
    torch.cuda.synchronize()
    for a, b in zip(args, ours):
        if isinstance(a, torch.Tensor) and a.is_cuda:
            assert torch.equal(a, b)
