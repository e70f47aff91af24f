"""Recorded sequences on a real GPU: real steps (torch's relu, matmul and layer norm on the inputs,
kernels of every front end) replayed many times with new inputs equal eager; outputs of successive
replays all intact; what a partial binds read correctly after the caller dropped it; nodes updated
from the device and from the host; replays from several threads on their own streams."""

from __future__ import annotations

import functools
import gc
import threading

import pytest
import torch
import torch.nn.functional as F

import launchpad as lp
from launchpad.sequences import updates as _updates

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void mul(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * y[i];
}
extern "C" __global__ void flagged(float* out, bool flag, int n) { if (flag) out[threadIdx.x] = n; }
"""
N = 4096
D = 256


@pytest.fixture(scope="module")
def cpp():
    return lp.compile_cuda_module(SOURCE, ["axpy", "mul", "flagged"])


@pytest.fixture(params=["device", "host"])
def updates(request, monkeypatch):
    """Nodes updated from the device (launchpad's updater), or forced onto the host path."""
    if request.param == "host":
        monkeypatch.setattr(_updates, "updater", lambda device: (0, "forced by the test"))
    return request.param


def torch_step(cpp):
    w = torch.randn(D, D, device="cuda") / D**0.5

    def step(x, y, lr):
        h = torch.relu(x)  # torch's elementwise kernel reads input x
        m = torch.matmul(h, w)  # cuBLAS
        n = F.layer_norm(m + y, (D,))  # torch's add (reads input y) and layer norm
        out = n.clone()
        cpp["axpy"][N * D // 256 // 16, 256](lr, n, out, N * D // 16)  # launchpad: out = lr * n + n
        return out

    return step


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_torch_ops_on_inputs_a_thousand_replays_equal_eager(cpp, updates, compiled):
    if compiled and lp.launch_path()[0] != "compiled":
        pytest.skip(lp.launch_path()[1])
    torch.manual_seed(0)
    step = torch_step(cpp)
    seq = lp.record(step, torch.randn(N // 16, D, device="cuda"), torch.randn(N // 16, D, device="cuda"), 0.5,
                    compiled=compiled)  # fmt: skip
    assert seq.replay_path == ("compiled" if compiled else "python")
    assert ("from the device" in seq.explain()) == (updates == "device"), seq.explain()
    assert "copies" not in repr(seq), seq.explain()  # every node follows its inputs: no input copied
    for i in range(1000):
        x, y = torch.randn(N // 16, D, device="cuda"), torch.randn(N // 16, D, device="cuda")
        lr = float(torch.rand(()).item())
        got = seq(x, y, lr)
        if i % 97 == 0 or i == 999:
            torch.testing.assert_close(got, step(x, y, lr), rtol=1e-5, atol=1e-5)


def test_the_outputs_of_successive_replays_stay_intact(cpp, updates):
    step = torch_step(cpp)
    seq = lp.record(step, torch.randn(N // 16, D, device="cuda"), torch.randn(N // 16, D, device="cuda"), 0.5)
    inputs = [(torch.randn(N // 16, D, device="cuda"), torch.randn(N // 16, D, device="cuda"), 0.1 * k) for k in
              range(5)]  # fmt: skip
    outs = [seq(*args) for args in inputs]  # no synchronization between them
    assert len({o.data_ptr() for o in outs}) == 5
    for args, out in zip(inputs, outs):
        torch.testing.assert_close(out, step(*args), rtol=1e-5, atol=1e-5)


def test_a_tensor_bound_by_partial_outlives_its_caller(cpp, updates):
    def step(x, w):
        out = torch.empty(N, device="cuda")
        cpp["mul"][N // 256, 256](x, w, out, N)
        return out

    w = torch.randn(N, device="cuda")
    expected = w.clone()
    seq = lp.record(functools.partial(step, w=w), torch.randn(N, device="cuda"))
    del w
    gc.collect()
    torch.cuda.empty_cache()
    clobber = [torch.full((N,), 7.0, device="cuda") for _ in range(8)]  # memory the allocator hands out again
    x = torch.randn(N, device="cuda")
    torch.testing.assert_close(seq(x), x * expected, rtol=0, atol=0)
    del clobber


def test_inputs_read_by_copies_and_memsets_and_views(cpp, updates):
    tmp = torch.empty(N, device="cuda")

    def step(x, y):
        tmp.copy_(x)  # a memcpy node reads x
        y[: N // 2].zero_()  # a memset node (or torch's fill kernel) writes a view of y
        out = torch.empty(N, device="cuda")
        cpp["mul"][N // 256, 256](tmp, y, out, N)
        return out

    seq = lp.record(step, torch.randn(N, device="cuda"), torch.randn(N, device="cuda"))
    for _ in range(10):
        x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
        expected = x * torch.cat([torch.zeros(N // 2, device="cuda"), y[N // 2 :]])
        torch.testing.assert_close(seq(x, y), expected, rtol=0, atol=0)
        assert torch.count_nonzero(y[: N // 2]) == 0  # the new y was written


def test_half_precision_matmuls_on_inputs(updates):
    """cuBLAS's Hopper kernels (bf16) reading the inputs and writing the output."""
    w = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)

    def step(x):
        return torch.relu(x @ w)

    seq = lp.record(step, torch.randn(256, 512, device="cuda", dtype=torch.bfloat16))
    print(seq.explain())
    outs = []
    for _ in range(20):
        x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
        outs.append((x, seq(x)))
    for x, out in outs:
        torch.testing.assert_close(out, step(x), rtol=2e-2, atol=2e-2)  # (the same kernel: any stale input is far off)


def test_the_reviews_defects_on_a_gpu(cpp, updates):
    out = torch.empty(256, device="cuda")
    # 2: a value computed from two inputs is refused
    with pytest.raises(lp.RecordError, match=r"changes with inputs 'm' and 'n'"):
        lp.record(lambda m, n: cpp["flagged"][1, 32](out, True, max(m, n)), 5, 5)
    # 4: a True bool parameter leaves the int input free
    seq = lp.record(lambda n: cpp["flagged"][1, 32](out, True, n), 5)
    seq(11)
    torch.testing.assert_close(out[:32], torch.full((32,), 11.0, device="cuda"))
    # 5: an untyped kernel's replay writes what its launch writes (an int recorded, a float replayed)
    raw = lp.load_cubin(cpp["flagged"].image, "flagged")
    seq = lp.record(lambda n: raw[1, 32](out, True, n), -3)
    seq(-7)
    torch.testing.assert_close(out[:32], torch.full((32,), -7.0, device="cuda"))
    # 6: a replaced input is released
    x = torch.randn(N, device="cuda")
    seq = lp.record(lambda x: cpp["mul"][N // 256, 256](x, x, out[:0].new_empty(N), N), x)
    import weakref

    gone = weakref.ref(x)
    del x
    seq(torch.randn(N, device="cuda"))
    gc.collect()
    assert gone() is None


def test_seventy_inputs_replayed_by_c():
    """Defect 8: more inputs than the compiled replay keeps on its stack."""
    names = [f"a{i}" for i in range(70)]
    source = f'extern "C" __global__ void sum70(long long* out, {", ".join(f"int {n}" for n in names)}) {{ ' \
             f'out[0] = 0LL + {" + ".join(names)}; }}'  # fmt: skip
    k = lp.compile_cuda(source, "sum70")
    out = torch.zeros(1, dtype=torch.int64, device="cuda")
    namespace = {"k": k, "out": out}
    exec(f"def step({', '.join(names)}):\n    k[1, 1](out, {', '.join(names)})", namespace)
    seq = lp.record(namespace["step"], *range(100, 170))
    assert seq.replay_path == lp.launch_path()[0]
    seq(*range(1000, 1070))
    assert int(out.item()) == sum(range(1000, 1070))


def test_a_triton_int_input_whose_probe_was_one():
    """Defect 9: 17's old probe (17 ^ 16 == 1) made Triton compile a kernel specialized on 1."""
    triton = pytest.importorskip("triton")
    from triton_kernels import add_kernel

    add = lp.triton_launcher(add_kernel)
    x, y, out = (torch.randn(64, device="cuda") for _ in range(3))
    seq = lp.record(lambda n: add[(1,)](x, y, out, n, BLOCK=64), 17)
    for n in (33, 5, 49):
        out.zero_()
        seq(n)
        torch.testing.assert_close(out[:n], (x + y)[:n])
        assert torch.count_nonzero(out[n:]) == 0
    del triton


def test_replays_from_threads_on_their_own_streams(cpp, updates):
    step = torch_step(cpp)
    seq = lp.record(step, torch.randn(N // 16, D, device="cuda"), torch.randn(N // 16, D, device="cuda"), 0.5)
    failures = []

    def worker(seed):
        gen = torch.Generator(device="cuda").manual_seed(seed)
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            for _ in range(50):
                x = torch.randn(N // 16, D, device="cuda", generator=gen)
                y = torch.randn(N // 16, D, device="cuda", generator=gen)
                got = seq(x, y, 0.25)
                if not torch.allclose(got, step(x, y, 0.25), rtol=1e-5, atol=1e-5):
                    failures.append(seed)
        stream.synchronize()

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_kernels_of_every_front_end_and_torch_ops(cpp):
    triton = pytest.importorskip("triton")
    pytest.importorskip("numba.cuda")
    import numpy as np

    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    from test_numba import SIGS
    from triton_kernels import add_kernel

    add = lp.triton_launcher(add_kernel)
    scale = lp.from_numba(*SIGS["axpy"])  # out = a * x + y, Numba arrays

    def everything(x, y, a):
        tmp, tmp2 = torch.empty(N, device="cuda"), torch.empty(N, device="cuda")
        add[(triton.cdiv(N, 1024),)](x, y, tmp, N, BLOCK=1024)  # Triton: tmp = x + y
        scale[N // 256, 256](tmp2, tmp, y, a)  # Numba: tmp2 = a * tmp + y
        doubled = torch.mul(tmp2, 2.0)  # torch
        out = torch.empty(N, device="cuda")
        cpp["mul"][N // 256, 256](doubled, x, out, N)  # C++: out = doubled * x
        return out

    seq = lp.record(everything, torch.randn(N, device="cuda"), torch.randn(N, device="cuda"), 1.5)
    for _ in range(20):
        x, y, a = torch.randn(N, device="cuda"), torch.randn(N, device="cuda"), float(torch.randn(()).item())
        torch.testing.assert_close(seq(x, y, a), 2 * (a * (x + y) + y) * x, rtol=1e-5, atol=1e-5)


def test_a_replay_beside_another_streams_work_and_after_close(cpp):
    a_out = torch.empty(N, device="cuda")

    def fn(x, y):
        cpp["mul"][N // 256, 256](x, y, a_out, N)

    seq = lp.record(fn, torch.randn(N, device="cuda"), torch.randn(N, device="cuda"))
    cpp["mul"].close()  # the sequence keeps its module loaded
    busy = torch.cuda.Stream()
    big = torch.randn(4096, 4096, device="cuda")
    with torch.cuda.stream(busy):
        for _ in range(20):
            big = big @ big.T / 4096  # other work in flight on another stream
    side = torch.cuda.Stream()
    for _ in range(50):
        x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            seq(x, y)  # replayed on torch's current stream: the side stream
        side.synchronize()
        torch.testing.assert_close(a_out, x * y, rtol=0, atol=0)
    busy.synchronize()


def test_an_autotuned_triton_kernel_once_tuned():
    """``@triton.autotune`` through ``triton_launcher``: the warm-up tunes (outside the capture);
    the recorded graph holds the chosen config, replayed with new inputs."""
    triton = pytest.importorskip("triton")
    import triton.language as tl

    @triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_warps=2), triton.Config({"BLOCK": 1024}, num_warps=4)],
                     key=["n"])  # fmt: skip
    @triton.jit
    def tuned_scale(x_ptr, out_ptr, s, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * s, mask=mask)

    launcher = lp.triton_launcher(tuned_scale)
    out = torch.empty(N, device="cuda")
    seq = lp.record(lambda x, s: launcher[lambda meta: (triton.cdiv(N, meta["BLOCK"]),)](x, out, s, N),
                    torch.randn(N, device="cuda"), 2.0)  # fmt: skip
    assert launcher.best_config is not None and len(launcher.cache) == 1
    for _ in range(10):
        x, s = torch.randn(N, device="cuda"), float(torch.randn(()).item())
        seq(x, s)
        torch.testing.assert_close(out, x * s, rtol=1e-6, atol=1e-6)
