"""Triton kernels on a real GPU: every launchpad way in gives what Triton's own launch gives.

For each kernel, Triton runs ``jit_fn[grid](...)`` on random inputs; launchpad then runs the same
cubin from the CompiledKernel, from a saved artifact, from Triton's cache folder and through
``triton_launcher``, each into fresh copies of the (random) outputs, and must match exactly.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

import launchpad

pytestmark = pytest.mark.gpu

triton = pytest.importorskip("triton")
import triton_kernels as K  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _triton_setup(tmp_path_factory):
    """A private Triton cache (so cache folders hold this run's files) and a torch allocator for the
    global scratch of Triton's own launches."""

    def alloc(size: int, alignment: int, stream):
        return torch.empty(size, dtype=torch.int8, device="cuda")

    triton.set_allocator(alloc)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        yield


def rand(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(dtype)


def full_args(jit_fn, args: list, kwargs: dict) -> list:
    """Every Python argument in order, as launchpad's Triton kernels take them."""
    out = []
    for i, p in enumerate(jit_fn.params):
        if i < len(args):
            out.append(args[i])
        else:
            out.append(kwargs.get(p.name, p.default))
    return out


def grid_of(grid, jit_fn, values: list):
    return grid(dict(zip(jit_fn.arg_names, values))) if callable(grid) else grid


def check_all_ways(jit_fn, grid, args: list, outs: list[int], tmp_path, *, kwargs=None, cache=True):
    """Run Triton, then launchpad four ways, on copies of the same random outputs; compare exactly.

    Returns Triton's outputs.
    """
    kwargs = dict(kwargs or {})
    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "num_ctas", "launch_pdl") if k in kwargs}
    init = {i: args[i].clone() for i in outs}

    def fresh() -> list:
        a = list(args)
        for i in outs:
            a[i] = init[i].clone()
        return a

    ref_args = fresh()
    compiled = jit_fn[grid](*ref_args, **kwargs, **options)
    torch.cuda.synchronize()
    ref = [ref_args[i] for i in outs]

    kernel = launchpad.from_triton(compiled)
    saved = launchpad.load(kernel.save(tmp_path / "kernel.json"))
    for k in (kernel, saved):
        a = fresh()
        values = full_args(jit_fn, a, kwargs)
        k[grid_of(grid, jit_fn, values)](*values)
        torch.cuda.synchronize()
        for i, r in zip(outs, ref):
            assert torch.equal(a[i], r), (k, i)

    if cache:  # the cache folder keeps no constexpr values: the call leaves them (and specialized ones) out
        folder = next(p for n, p in compiled.metadata_group.items() if n.endswith(".json"))
        loaded = launchpad.load_triton(folder)
        a = fresh()
        values = full_args(jit_fn, a, kwargs)
        names = list(dict.fromkeys(x.name for x in loaded.args if x.path and x.kind != "const"))
        loaded[grid_of(grid, jit_fn, values)](**{n: values[jit_fn.arg_names.index(n)] for n in names})
        torch.cuda.synchronize()
        for i, r in zip(outs, ref):
            assert torch.equal(a[i], r), ("cache", i)

    a = fresh()
    launchpad.triton_launcher(jit_fn)[grid](*a, **kwargs, **options)
    torch.cuda.synchronize()
    for i, r in zip(outs, ref):
        assert torch.equal(a[i], r), ("triton_launcher", i)
    return ref


@pytest.mark.parametrize("n", [10000, 9999])
def test_add(n, tmp_path):
    x, y = rand(n), rand(n)
    (out,) = check_all_ways(K.add_kernel, (triton.cdiv(n, 1024),), [x, y, rand(n), n], [2], tmp_path,
                            kwargs={"BLOCK": 1024})  # fmt: skip
    assert torch.equal(out, x + y)


def test_add_with_a_callable_grid(tmp_path):
    n = 7777
    x, y = rand(n), rand(n)
    (out,) = check_all_ways(K.add_kernel, lambda meta: (triton.cdiv(meta["n"], meta["BLOCK"]),), [x, y, rand(n), n],
                            [2], tmp_path, kwargs={"BLOCK": 256})  # fmt: skip
    assert torch.equal(out, x + y)


def test_rowsum(tmp_path):
    x = rand(64, 1000)
    (out,) = check_all_ways(K.rowsum_kernel, (64,), [x, rand(64), 1000, 1000], [1], tmp_path, kwargs={"BLOCK": 1024})
    torch.testing.assert_close(out, x.sum(dim=1), rtol=1e-5, atol=1e-4)


def test_matmul_large_tiles(tmp_path):
    M = N = K_ = 512
    a, b = rand(M, K_, dtype=torch.float16), rand(K_, N, dtype=torch.float16)
    c = rand(M, N, dtype=torch.float16)
    args = [a, b, c, M, N, K_, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)]
    (out,) = check_all_ways(K.matmul_kernel, (M // 128, N // 256), args, [2], tmp_path,
                            kwargs={"BM": 128, "BN": 256, "BK": 64, "num_warps": 8, "num_stages": 4})  # fmt: skip
    torch.testing.assert_close(out, (a.float() @ b.float()).half(), rtol=2e-2, atol=1e-1)
    kernel = launchpad.triton_launcher(K.matmul_kernel).warmup(*args, BM=128, BN=256, BK=64, num_warps=8, num_stages=4)
    assert kernel.plan.shared_mem > 48 * 1024
    assert [a.value for a in kernel.args if a.name in ("sak", "sbn", "scn")] == [1, 1, 1]


def test_int_one_and_none_arguments(tmp_path):
    n = 3000
    x = rand(n)
    (out,) = check_all_ways(K.strided_scale_kernel, (triton.cdiv(n, 256),), [x, rand(2 * n), n, 1, 2, 0.75], [1],
                            tmp_path, kwargs={"BLOCK": 256})  # fmt: skip
    assert torch.equal(out[::2][:n], x * 0.75)
    y, bias = rand(n), rand(n)
    for b in (None, bias):
        (out,) = check_all_ways(K.axpy_bias_kernel, (triton.cdiv(n, 256),), [x, y, b, rand(n), n, -1.5], [3],
                                tmp_path, kwargs={"BLOCK": 256})  # fmt: skip
        torch.testing.assert_close(out, -1.5 * x + y + (0 if b is None else b))


def test_scalars(tmp_path):
    args = [rand(8, dtype=torch.float64), 0.1, 1.5, 1 / 3, 1 / 7, -(2**40) + 5, True]  # a bf16 that needs no rounding
    (out,) = check_all_ways(K.scalars_kernel, (1,), args, [0], tmp_path)
    expected = [float(np.float16(0.1)), 1.5, float(np.float32(1 / 3)), 1 / 7, float(-(2**40) + 5), 1.0]
    assert out[:6].tolist() == expected
    # A float between two bf16 values: Triton's launcher truncates it, launchpad rounds to nearest even
    b = struct.unpack("<f", struct.pack("<I", 0x3F80FFFF))[0]
    k = launchpad.triton_launcher(K.scalars_kernel).warmup(*args)
    out = rand(8, dtype=torch.float64)
    k[(1,)](out, 0.1, b, 1 / 3, 1 / 7, -(2**40) + 5, True)
    torch.cuda.synchronize()
    assert out[1].item() == 1.0078125  # 0x3F81; Triton's own launch gives 1.0 (0x3F80)


def test_tuple_arguments(tmp_path):
    n = 1000
    x = rand(n)
    (out,) = check_all_ways(K.tuple_kernel, (triton.cdiv(n, 128),), [rand(n), (x, 2.5, 3), n], [0], tmp_path,
                            kwargs={"BLOCK": 128})  # fmt: skip
    torch.testing.assert_close(out, x * 2.5 + 3)  # Triton may fuse the multiply-add
    (out,) = check_all_ways(
        K.tuple_kernel,
        (triton.cdiv(n, 128),),
        [rand(n), (x, 2.5, 1), n],
        [0],
        tmp_path,
        kwargs={"BLOCK": 128},
        cache=False,
    )  # the cache folder cannot know t[2] == 1
    torch.testing.assert_close(out, x * 2.5 + 1)


@pytest.mark.parametrize("padding", ["zero", "nan"])
def test_host_tensor_descriptor(padding, tmp_path):
    M, N = 100, 192  # M is not a multiple of the block: out-of-bounds rows come from the padding
    base = rand(M, N, dtype=torch.float16)
    desc = TensorDescriptor.from_tensor(base, [64, 64], padding=padding)
    (out,) = check_all_ways(K.host_desc_kernel, (2, 3), [desc, rand(M * N, dtype=torch.float16), M, N], [1],
                            tmp_path, kwargs={"BM": 64, "BN": 64})  # fmt: skip
    assert torch.equal(out.view(M, N), base * 2)


def test_device_tensor_descriptor_with_global_scratch(tmp_path):
    M, N = 128, 192
    x = rand(M, N, dtype=torch.float16)
    (out,) = check_all_ways(K.device_desc_kernel, (2, 3), [x, rand(M * N, dtype=torch.float16), M, N], [1], tmp_path,
                            kwargs={"BM": 64, "BN": 64})  # fmt: skip
    assert torch.equal(out.view(M, N), x + 1)
    kernel = launchpad.triton_launcher(K.device_desc_kernel).warmup(x, out, M, N, BM=64, BN=64)
    assert any(a.kind == "scratch" and a.options["size"] > 0 for a in kernel.args)


def test_clusters(tmp_path):
    n = 1 << 16
    x, y = rand(n), rand(n)
    (out,) = check_all_ways(K.add_kernel, (n // 1024,), [x, y, rand(n), n], [2], tmp_path,
                            kwargs={"BLOCK": 1024, "num_ctas": 2, "launch_pdl": True})  # fmt: skip
    assert torch.equal(out, x + y)


def test_from_jit_function_for_the_current_device():
    n = 5000
    k = launchpad.from_triton(K.add_kernel, signature="*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 512},
                              attrs={"x_ptr": "D", "y_ptr": "D", "out_ptr": "D"})  # fmt: skip
    x, y, out = rand(n), rand(n), rand(n)
    k[(triton.cdiv(n, 512),)](x, y, out, n, 512)
    torch.cuda.synchronize()
    assert torch.equal(out, x + y)


def test_rejected_launches_leave_the_context_usable():
    n = 4096
    x, y, out = rand(n + 4), rand(n), rand(n)
    compiled = K.add_kernel[(4,)](x[:n], y, out, n, BLOCK=1024)
    k = launchpad.from_triton(compiled)
    with pytest.raises(launchpad.ArgumentError, match=r"'x_ptr'.*not 16-byte aligned"):
        k[(4,)](x[1:], y, out, n, 1024)  # would fault with CUDA_ERROR_MISALIGNED_ADDRESS
    with pytest.raises(launchpad.ArgumentTypeError, match=r"'y_ptr'.*expected a torch.float32 tensor"):
        k[(4,)](x[:n], y.half(), out, n, 1024)
    with pytest.raises(launchpad.ArgumentError, match=r"'n'.*not a multiple of 16"):
        k[(4,)](x[:n], y, out, n - 1, 1024)
    with pytest.raises(launchpad.ArgumentError, match=r"'x_ptr'.*CUDA tensor"):
        k[(4,)](x[:n].cpu(), y, out, n, 1024)
    k[(4,)](x[:n], y, out, n, 1024)
    torch.cuda.synchronize()
    assert torch.equal(out, x[:n] + y)
    # triton_launcher specializes anew instead: a misaligned pointer gets its own kernel
    out2 = rand(n - 1)
    launchpad.triton_launcher(K.add_kernel)[(4,)](x[1:n], y[: n - 1], out2, n - 1, BLOCK=1024)
    torch.cuda.synchronize()
    assert torch.equal(out2, x[1:n] + y[: n - 1])


def test_scratch_kernel_in_a_cuda_graph():
    M, N = 128, 192
    x, out = rand(M, N, dtype=torch.float16), rand(M * N, dtype=torch.float16)
    compiled = K.device_desc_kernel[(2, 3)](x, out, M, N, BM=64, BN=64)
    k = launchpad.from_triton(compiled)
    k[(2, 3)](x, out, M, N, 64, 64)  # loaded and warm before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        k[(2, 3)](x, out, M, N, 64, 64)
    for _ in range(3):
        x.copy_(rand(M, N, dtype=torch.float16))
        out.copy_(rand(M * N, dtype=torch.float16))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out.view(M, N), x + 1)


def test_metadata_beyond_the_device_is_refused_at_load():
    """Triton fits its pipelines into the device it compiles for, so a kernel whose metadata asks
    for more than this device has (shared memory, threads) is one compiled elsewhere: the same
    real cubin with the plan such metadata gives."""
    import dataclasses

    k = launchpad.from_triton(
        K.matmul_kernel,
        signature={n: "*fp16" for n in ("a_ptr", "b_ptr", "c_ptr")} | {n: "i32" for n in "M N K sam sbk scm".split()},
        constexprs={"sak": 1, "sbn": 1, "scn": 1, "BM": 128, "BN": 128, "BK": 64},
        num_warps=8, num_stages=4,
    )  # fmt: skip
    optin = torch.cuda.get_device_properties(0).shared_memory_per_block_optin

    def with_plan(**changes):
        return launchpad.Kernel(k.spec.replace(plan=dataclasses.replace(k.plan, **changes)))

    with pytest.raises(
        launchpad.OutOfResources, match=rf"'matmul_kernel' asks for {optin + 1024} bytes of dynamic shared memory"
    ):
        with_plan(shared_mem=optin + 1024).load()
    with pytest.raises(launchpad.OutOfResources, match="needs 2048 threads per block but allows at most"):
        with_plan(block=(2048, 1, 1)).load()
    k.load()  # the real plan fits
