"""Helion kernels through launchpad on a GPU: each gives the bits of the same Helion kernel called
as Helion calls it, and matches torch on random inputs.

The kernels (``tests/helion_kernels.py``: the computations of Helion's examples that run on sm_90)
run with Helion's default config (``autotune_effort="none"``), except in the autotuning test,
where Helion times two configs on the first call.
"""

from __future__ import annotations

import math

import pytest
import torch

import launchpad

pytestmark = pytest.mark.gpu

helion = pytest.importorskip("helion")
import helion_kernels as H  # noqa: E402

from launchpad.frontends.helion import versions as hv  # noqa: E402

try:
    hv.check_installed()
except launchpad.UnsupportedVersion as exc:
    pytest.skip(str(exc), allow_module_level=True)


def untuned(kernel, **settings):
    """The kernel with Helion's default config instead of autotuning (its other settings kept)."""
    keep = {k: getattr(kernel.settings, k) for k in ("static_shapes", "dot_precision")}
    return helion.kernel(kernel.fn, **{**keep, **settings}, autotune_effort="none")


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", dtype=dtype, generator=g)


def same_bits(ours, theirs) -> None:
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (a - b).abs().max()


def bound_of(hk, args):
    """The bound kernel whose host function ``hk(*args)`` ran: by launchpad's key, or (Helion 1.5,
    whose key is Helion's own binding) the one Helion binds."""
    if hk._bind_per_call:
        return hk.host_functions[hk._settle(hk.kernel.bind(args), args)][0]
    entry = hk.host_functions[hk._key(args)]
    return (entry.entries[tuple(f(args) for f in entry.extractors)] if hasattr(entry, "entries") else entry)[0]


def through_both(kernel, *args):
    """The kernel's results through launchpad, checked bit for bit against Helion's own call."""
    ours = launchpad.helion_kernel(kernel)(*args)
    torch.cuda.synchronize()
    theirs = kernel(*args)
    same_bits(ours, theirs)
    return ours


@pytest.mark.parametrize(
    "shape, dtype", [((4096,), torch.float32), ((1024, 1024), torch.bfloat16), ((300, 7), torch.float16)]
)
def test_add(shape, dtype):
    x, y = randn(*shape, dtype=dtype), randn(*shape, dtype=dtype, seed=1)
    out = through_both(untuned(H.add), x, y)
    torch.testing.assert_close(out, torch.add(x, y))


@pytest.mark.parametrize("kernel", [H.softmax, H.softmax_online], ids=["whole_rows", "online"])
def test_softmax(kernel):
    x = randn(1024, 2560, dtype=torch.float16)
    out = through_both(untuned(kernel), x)
    torch.testing.assert_close(out, torch.nn.functional.softmax(x, dim=1), rtol=1e-2, atol=1e-3)


def test_matmul_and_an_epilogue():
    x, y = randn(512, 256, dtype=torch.float16), randn(256, 384, dtype=torch.float16, seed=1)
    bias = randn(384, dtype=torch.float16, seed=2)
    matmul = untuned(H.matmul)
    out = through_both(matmul, x, y)
    torch.testing.assert_close(out, torch.matmul(x, y), rtol=1e-2, atol=1e-1)
    relu_bias = lambda acc, tile: torch.relu(acc + bias[tile[1]])
    out = through_both(matmul, x, y, relu_bias)
    torch.testing.assert_close(out, torch.relu(torch.matmul(x, y) + bias), rtol=1e-2, atol=1e-1)


@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm(with_bias):
    x = -2.3 + 0.5 * randn(1024, 4096, dtype=torch.float16)
    weight, bias = randn(4096, dtype=torch.float16, seed=1), randn(4096, dtype=torch.float16, seed=2)
    b = bias if with_bias else None
    out, mean, rstd = through_both(untuned(H.layer_norm), x, weight, b, 1e-4)
    expected = torch.nn.functional.layer_norm(x, [4096], weight, b, 1e-4)
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(mean, x.float().mean(-1), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(rstd, torch.rsqrt(x.float().var(-1, correction=0) + 1e-4), rtol=1e-3, atol=1e-3)


def test_attention():
    q, k, v = (randn(2, 8, 512, 64, dtype=torch.float16, seed=s) for s in range(3))
    out = through_both(untuned(H.attention), q, k, v)
    p = torch.softmax(q.float() @ k.float().transpose(2, 3) / math.sqrt(64), dim=-1)
    torch.testing.assert_close(out, (p @ v.float()).to(q.dtype), rtol=1e-2, atol=1e-2)


def test_grid_barrier_split_k_matmul_launches_cooperatively():
    a, b = randn(16, 4096), randn(16, 4096, seed=1).T
    out = through_both(untuned(H.split_k_matmul), a, b)
    torch.testing.assert_close(out, a @ b, rtol=1e-3, atol=5e-1)  # a 4096-long fp32 reduction, split 64 ways


def test_each_specialization_gets_its_own_host_function():
    """Shapes and dtypes Helion specializes differently, interleaved: each call matches torch."""
    add = untuned(H.add)
    hk = launchpad.helion_kernel(add)
    calls = [
        (randn(4096), randn(4096, seed=1)),
        (randn(1000), randn(1000, seed=1)),
        (randn(4096, dtype=torch.float16), randn(4096, dtype=torch.float16, seed=1)),
        (randn(64, 64).t(), randn(64, 64, seed=1)),
        (randn(4096), randn(1, seed=1)),
    ]
    for x, y in calls + calls[::-1]:
        torch.testing.assert_close(hk(x, y), x + y)
        assert bound_of(hk, (x, y)) is add.bind((x, y))
    assert len(hk.host_functions) == len(calls)
    rows = launchpad.helion_kernel(H.row_mean)  # hl.specialize(x.size(1)): 1/n is compiled in
    for x in (randn(64, 128), randn(32, 96), randn(48, 128), randn(8, 96)):
        torch.testing.assert_close(rows(x), x.mean(-1))
    if rows._bind_per_call:  # Helion 1.5: one entry per bound kernel Helion binds
        assert len(rows.host_functions) == 2
    else:
        (slot,) = rows.host_functions.values()
        assert sorted(slot.entries) == [(96,), (128,)]


def test_aliased_inputs_run_the_bound_kernel_helion_binds():
    """One tensor passed twice (Helion 1.5 keys input-tensor aliasing), an in-place alias of the
    output's input, and a clone: each gives Helion's own bits and x + y."""
    add = untuned(H.add)
    hk = launchpad.helion_kernel(add)
    x = randn(4096)
    for args in [(x, x), (x, x.clone()), (x, x.view(64, 64).view(4096)), (x, x)]:
        torch.testing.assert_close(hk(*args), args[0] + args[1])
        assert bound_of(hk, args) is add.bind(args)
        through_both(add, *args)


def test_under_torch_compile_it_runs_as_the_helion_kernel_does():
    """torch.compile(fullgraph=True) of a function calling a helion_kernel: what the same function
    calling the Helion kernel gives (the same bits, or the same refusal where Helion's kernel does
    not compile in one graph with this torch), and the eager result."""
    add = untuned(H.add)
    hk = launchpad.helion_kernel(add)
    x, y = randn(4096), randn(4096, seed=1)

    def run(fn):
        torch._dynamo.reset()
        try:
            return torch.compile(lambda a, b: fn(a, b) * 2 + 1, fullgraph=True)(x, y)
        except Exception as exc:  # Helion's own kernel refused: launchpad's must be refused alike
            return exc

    theirs, ours = run(add), run(hk)
    torch._dynamo.reset()
    if isinstance(theirs, Exception):
        assert type(ours) is type(theirs), (ours, theirs)
        pytest.skip(f"Helion's kernel does not compile with fullgraph=True here: {theirs!r}"[:300])
    assert not isinstance(ours, Exception), ours
    same_bits(ours, theirs)
    torch.testing.assert_close(ours, (x + y) * 2 + 1)
    same_bits(hk(x, y) * 2 + 1, ours)  # eager through launchpad, after the compiled calls


def test_autotuned_kernel_uses_the_config_helion_chose():
    configs = [helion.Config(block_sizes=[64], num_warps=2), helion.Config(block_sizes=[1024], num_warps=8)]
    add = helion.kernel(H.add.fn, configs=configs)
    x, y = randn(1 << 20), randn(1 << 20, seed=1)
    hk = launchpad.helion_kernel(add)
    out = hk(x, y)  # Helion autotunes here, over the two configs, with its own launches
    torch.testing.assert_close(out, x + y)
    bound = bound_of(hk, (x, y))
    assert bound is add.bind((x, y))
    chosen = (bound._config.config["block_sizes"], bound._config.config["num_warps"])
    assert chosen in [([64], 2), ([1024], 8)]
    same_bits(hk(x, y), add(x, y))


def test_a_helion_runtime_argument_is_refused_before_any_launch():
    from launchpad.frontends.helion.launch import Launcher

    hk = launchpad.helion_kernel(untuned(H.add))
    x = randn(64)
    hk(x, x)
    jit = next(iter(hk.host_functions.values()))[1].__globals__["_helion_add"]
    launcher = Launcher(launchpad.triton_launcher, "add")
    out = torch.zeros(64, device="cuda")
    with pytest.raises(launchpad.ArgumentError, match=r"_remote_copy_signal_slots_per_program= is a Helion runtime"):
        launcher.launch(jit, (1,), x, x, out, num_warps=4, num_stages=1, _remote_copy_signal_slots_per_program=1)
    torch.cuda.synchronize()
    assert not out.any()


def test_the_bench_section_measures_every_row():
    from launchpad.bench.helion import helion_section
    from launchpad.bench.runner import Config

    section = helion_section(Config.make(quick=True, rounds=3, batch=5), log=lambda _: None)
    assert sorted(section["groups"]) == ["add", "matmul"]
    for group in section["groups"].values():
        for rec in group["results"].values():
            assert rec["status"] == "ok" and rec["stats"]["n"] == 3, rec
