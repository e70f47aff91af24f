"""CuTe DSL kernels launched through launchpad on a GPU, from the artifacts carried in
``tests/cubins/cute/`` (compiled for sm_90a by ``python tests/cute_kernels.py`` where CuTe DSL is
installed; the GPU machine has no CuTe DSL): each against torch on random inputs, in both
executors; wrong arguments refused before any launch; a recorded step replayed 20 times bit for bit
against eager; a torch.compile(fullgraph=True) function calling one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import launchpad as lp

pytestmark = pytest.mark.gpu

CUBINS = Path(__file__).parent / "cubins" / "cute"


def hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


if not hopper():
    pytest.skip("the carried CuTe DSL cubins are for sm_90a (an H100 or H200)", allow_module_level=True)


def kernel(name: str, compiled: bool = True) -> lp.Kernel:
    k = lp.load(CUBINS / f"{name}.json")
    return k if compiled else lp.Kernel(k.spec, compiled=False)


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", generator=g, dtype=dtype)


@pytest.fixture(params=[True, False], ids=["compiled", "python"])
def compiled(request):
    return request.param


def add_grid(m, n):
    return ((m * n + 255) // 256,)


@pytest.mark.parametrize("shape", [(64, 128), (37, 200), (1, 8), (513, 1032)])
def test_elementwise_add_equals_torch(compiled, shape):
    k = kernel("add", compiled)
    a, b = rand(*shape, seed=1), rand(*shape, seed=2)
    c = torch.full(shape, float("nan"), device="cuda")
    k[add_grid(*shape)](a, b, c)
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)


def test_add_takes_a_strided_row_view(compiled):
    """A dynamic row stride: every other row of a larger tensor."""
    k = kernel("add", compiled)
    big = rand(64, 256, seed=3)
    a, b = big[::2, :128], rand(32, 128, seed=4)
    c = torch.zeros(32, 128, device="cuda")
    k[add_grid(32, 128)](a, b, c)
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)


@pytest.mark.parametrize("shape", [(8, 1000), (300, 129), (1, 4096)])
def test_row_softmax_equals_torch(compiled, shape):
    k = kernel("row_softmax", compiled)
    assert k.spec.plan.shared_mem > 0  # CuTe's SmemAllocator: dynamic shared memory passed
    x = rand(*shape, seed=5) * 4
    y = torch.full(shape, float("nan"), device="cuda")
    k[shape[0],](x, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.softmax(x, dim=1), rtol=1e-4, atol=1e-6)  # CuTe's fast exp


@pytest.mark.parametrize("n", [256, 1000, 4096])
def test_cluster_kernel_runs_in_clusters_of_two(compiled, n):
    k = kernel("cluster_scale", compiled)
    assert k.spec.plan.cluster == (2, 1, 1)
    x = rand(n, seed=6)
    out = torch.full((n,), float("nan"), device="cuda")
    blocks = (n + 127) // 128
    blocks += blocks % 2  # a whole number of clusters
    k[blocks,](x, out, n)
    torch.cuda.synchronize()
    rank = (torch.arange(n, device="cuda") // 128 % 2).float()
    assert torch.equal(out, x * 2.0 + rank)


ROTATE_N = 512  # tests/cute_kernels.py: ROTATE_N, four blocks of 128 in clusters of two


def rotated(x):
    """Each block's output: 2 * its cluster peer's x + its own (peers of a 2-block cluster swap)."""
    tiles = x.view(-1, 2, 128)
    return (tiles.flip(1) * 2.0 + tiles).reshape(-1)


def test_blocks_of_a_cluster_read_each_others_shared_memory(compiled):
    """Distributed shared memory (``mapa``) between the 2 blocks of each cluster; the output a
    ``cutlass.Array`` (a bare pointer), the cluster shape a ``Constexpr`` tuple."""
    k = kernel("cluster_rotate", compiled)
    assert k.spec.plan.cluster == (2, 1, 1) and k.spec.plan.shared_mem == 512
    for seed in range(3):
        x = rand(ROTATE_N, seed=20 + seed)
        out = torch.full((ROTATE_N,), float("nan"), device="cuda")
        k[4](x, out)
        torch.cuda.synchronize()
        assert torch.equal(out, rotated(x))
    with pytest.raises(lp.ArgumentError, match=r"argument 1 \('out'\).*shape\[0\] is 256"):
        k[4](x, torch.empty(256, device="cuda"))


def test_a_cluster_kernel_in_a_recorded_step():
    k = kernel("cluster_rotate")

    def step(x, out):
        k[4](x * 0.5, out)
        return out + 1.0

    x0, out = rand(ROTATE_N, seed=30), torch.empty(ROTATE_N, device="cuda")
    seq = lp.record(step, x0, out)
    for seed in range(20):
        x = rand(ROTATE_N, seed=31 + seed)
        got = seq(x, out)
        torch.cuda.synchronize()
        assert torch.equal(got, rotated(x * 0.5) + 1.0), seed
    seq.close()


def test_a_class_based_kernel_equals_torch(compiled):
    k = kernel("scaled", compiled)
    x = rand(1000, seed=40)
    y = torch.full((1000,), float("nan"), device="cuda")
    k[8](x, y)
    torch.cuda.synchronize()
    assert torch.equal(y, x * 3.0)


def test_wrong_arguments_are_refused_before_the_launch(compiled):
    k = kernel("add", compiled)
    a, b = rand(16, 64, seed=7), rand(16, 64, seed=8)
    c = torch.zeros(16, 64, device="cuda")
    with pytest.raises(lp.ArgumentTypeError, match=r"kernel 'add_kernel', argument 0 \('gA'\).*expected float32"):
        k[4,](a.half(), b, c)
    with pytest.raises(lp.ArgumentError, match=r"argument 1 \('gB'\).*shape\[1\] is 60.*multiple of 8"):
        k[4,](a, rand(16, 60), c)
    with pytest.raises(lp.ArgumentError, match=r"argument 2 \('gC'\).*not 16-byte aligned"):
        k[4,](a, b, torch.zeros(16 * 64 + 1, device="cuda")[1:].view(16, 64))
    with pytest.raises(lp.ArgumentError, match=r"argument 0 \('gA'\).*stride\[1\] is 2.*static"):
        k[4,](rand(16, 128)[:, ::2], b, c)
    with pytest.raises(lp.ArgumentError, match=r"argument 0 \('gA'\).*CUDA"):
        k[4,](a.cpu(), b, c)
    torch.cuda.synchronize()
    assert not c.any()  # nothing launched


def test_recorded_step_replays_bit_for_bit():
    add, softmax = kernel("add"), kernel("row_softmax")

    def step(x, y):
        s = torch.empty_like(x)
        add[add_grid(*x.shape)](x, y, s)
        out = torch.empty_like(x)
        softmax[x.shape[0],](s * 0.5, out)
        return out

    seq = lp.record(step, rand(64, 256, seed=9), rand(64, 256, seed=10))
    for i in range(20):
        x, y = rand(64, 256, seed=100 + i), rand(64, 256, seed=200 + i)
        assert torch.equal(seq(x, y), step(x, y)), f"replay {i}"


def test_under_torch_compile_fullgraph_equals_eager():
    add = kernel("add")

    def f(x, y):
        z = torch.empty_like(x)
        add[add_grid(*x.shape)](x * 2, y, z)
        return z.relu() + 1

    torch._dynamo.reset()
    g = torch.compile(f, fullgraph=True)
    for i in range(3):
        x, y = rand(32, 128, seed=300 + i), rand(32, 128, seed=400 + i)
        assert torch.equal(g(x, y), f(x, y))
    torch._dynamo.reset()


def test_saved_and_loaded_again_launches_the_same(tmp_path):
    k = kernel("add")
    k.save(tmp_path / "add.json")
    again = lp.load(tmp_path / "add.json")
    a, b = rand(8, 64, seed=11), rand(8, 64, seed=12)
    c = torch.zeros(8, 64, device="cuda")
    again[add_grid(8, 64)](a, b, c)
    torch.cuda.synchronize()
    assert torch.equal(c, a + b)
