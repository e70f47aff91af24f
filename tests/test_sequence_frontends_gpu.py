"""A kernel of every front end that runs on the GPU machine inside a recorded step (C++, Triton,
Gluon, Numba, Helion, cuTile; CuTe DSL and Warp in their own GPU tests), each step with torch's
operations on its inputs around the kernel: 20 replays with new random inputs, each bit for bit
equal to the same step run eagerly on the same inputs, through both replays; then
:meth:`launchpad.Sequence.check` (every device-side update of every replay applied).

Every device-side update is tried once when the sequence is made: a node the driver refuses is
updated from the host (``Sequence.refused_device_updates``, ``explain()``), so even the first
replay is right. cuTile's kernels are the case that found it (a refused update went unnoticed
until the second replay).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import launchpad as lp

pytestmark = pytest.mark.gpu
N = 4096
REPLAYS = 20


def randn(seed: int, *shape: int, dtype=torch.float32) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", dtype=dtype, generator=g)


def replays_equal_eager(step: Callable, make: Callable[[int], tuple], compiled: bool) -> lp.Sequence:
    """Record ``step(*make(0))``; each replay with ``make(i)`` equals ``step(*make(i))`` bit for bit."""
    seq = lp.record(step, *make(0), compiled=compiled)
    assert seq.replay_path == ("compiled" if compiled else "python")
    for i in range(1, REPLAYS + 1):
        args = make(1000 + i)
        got = seq(*args)
        want = step(*args)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), f"replay {i}: {(got - want).abs().max()}"
    seq.check()
    print(f"{seq!r}: refused device-side updates {seq.refused_device_updates}")
    return seq


def two_vectors(seed: int, dtype=torch.float32) -> tuple:
    return randn(seed, N, dtype=dtype), randn(seed + 1, N, dtype=dtype)


COMPILED = pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])


@COMPILED
def test_cpp(compiled):
    mul = lp.compile_cuda(
        'extern "C" __global__ void mul(const float* x, const float* y, float* out, int n) {'
        "  int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = x[i] * y[i]; }",
        "mul",
    )

    def step(x, y):
        out = torch.empty_like(x)
        mul[N // 256, 256](torch.relu(x), y, out, N)
        return out + 1.0

    seq = replays_equal_eager(step, two_vectors, compiled)
    assert seq.refused_device_updates == []  # (C++ kernels are updated from the device where it can)


@COMPILED
def test_triton(compiled):
    pytest.importorskip("triton")
    from triton_kernels import add_kernel

    add = lp.triton_launcher(add_kernel)

    def step(x, y):
        out = torch.empty_like(x)
        add[(N // 1024,)](torch.sigmoid(x), y, out, N, BLOCK=1024)
        return out * y

    replays_equal_eager(step, two_vectors, compiled)


@COMPILED
def test_gluon(compiled):
    pytest.importorskip("triton.experimental.gluon")
    import gluon_kernels as G

    add = lp.triton_launcher(G.blocked_add)

    def step(x, y):
        out = torch.empty_like(x)
        add[(N // 1024,)](x, torch.tanh(y), out, N, 1024, 8, num_warps=4)
        return out - x

    replays_equal_eager(step, two_vectors, compiled)


@COMPILED
def test_numba(compiled):
    pytest.importorskip("numba.cuda")
    import numpy as np

    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    from test_numba import SIGS

    axpy = lp.from_numba(*SIGS["axpy"])  # out = a * x + y

    def step(x, y, a):
        out = torch.empty_like(x)
        axpy[N // 256, 256](out, torch.exp(x), y, a)
        return out.sum(0, keepdim=True) + out

    replays_equal_eager(step, lambda seed: (*two_vectors(seed), 0.5 + seed % 7), compiled)


@COMPILED
def test_helion(compiled):
    pytest.importorskip("helion")
    import helion
    import helion_kernels as H

    from launchpad.frontends.helion import versions as hv

    try:
        hv.check_installed()
    except lp.UnsupportedVersion as exc:
        pytest.skip(str(exc))
    add = lp.helion_kernel(helion.kernel(H.add.fn, autotune_effort="none"))

    def step(x, y):
        return add(torch.relu(x), y) * 2.0

    replays_equal_eager(step, two_vectors, compiled)


@COMPILED
def test_cutile(compiled):
    pytest.importorskip("cuda.tile", reason="cuTile (PyPI cuda-tile) is not installed")
    from launchpad.bench._cutile_kernels import vector_add
    from launchpad.bench.cutile import build
    from launchpad.bench.harness import Missing

    tile = 1024
    x, y = two_vectors(0)
    try:
        kernel, how = build(vector_add, (x, y, torch.empty_like(x), tile))
    except Missing as exc:
        pytest.skip(str(exc))

    def step(x, y):
        out = torch.empty_like(x)
        kernel[(N // tile, 1, 1)](torch.relu(x), y, out, tile)
        return out * x

    seq = replays_equal_eager(step, two_vectors, compiled)
    print(f"cuTile kernel ({how}):\n{seq.explain()}")
