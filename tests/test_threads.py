"""Thread safety, without a GPU: a kernel closed while other threads launch it, the per-kernel
configuration cache, the tensor-map cache and its eviction, the launch-attribute table, and
concurrent Numba compiles lending numpy's ``row_stack`` alias. Each test runs many threads at once
(the fake driver call sleeps, as a real one releases the GIL) and checks what every thread got."""

from __future__ import annotations

import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import launchpad as lp
from launchpad.core import driver as _driver
from launchpad.core.loader import LoadedModule
from launchpad.frontends.triton import tensordesc as _tensordesc

SOURCE = 'extern "C" __global__ void scale(float* y, const float* x, float a, int n) {}'


@pytest.fixture(scope="module")
def kernel_image() -> bytes:
    return lp.compile_cuda(SOURCE, "scale", arch="sm_90").image


def _run(threads: int, work) -> list:
    barrier = threading.Barrier(threads)

    def start(i):
        barrier.wait()
        return work(i)

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(start, range(threads)))


def test_close_while_other_threads_launch(kernel_image, fake_gpu, monkeypatch):
    """close() while launches are inside the driver call: the module is unloaded once, only after the
    last launch holding it returned; launches after close get the kernel loaded again."""
    unloaded: list = []
    first, second = f"module-0 {id(unloaded):#x}", f"module-1 {id(unloaded):#x}"  # this test's own handles (other
    # tests' kernels may be collected meanwhile, with this fake unload in place)
    monkeypatch.setattr(_driver, "unload_module", lambda m, device: m in (first, second) and unloaded.append(m))
    k = fake_gpu.install(lp.load_cubin(kernel_image, "scale", signature="*fp32, *fp32, fp32, i32"))
    entry = k._loader.entries[-1]
    module = LoadedModule(first, "function-0", -1)
    k._loader.entries[-1] = entry._replace(module=module)
    k._loader.modules[-1] = module
    del module
    # a launch after close loads the kernel again: the fake driver's answers for that load
    monkeypatch.setitem(vars(k._loader), "_load", lambda device: LoadedModule(second, entry.function, device))
    limits = {"max_threads_per_block": 1024, "max_dynamic_shared_size_bytes": 48 * 1024}
    monkeypatch.setattr(_driver, "function_attribute", lambda function, name: limits[name])
    monkeypatch.setattr(_driver, "launch_entry_points", lambda: (entry.launch, entry.launch_ex, 0))
    active, lock, started = [0], threading.Lock(), threading.Event()
    real_read = fake_gpu.read_params

    def in_driver(function, kp):  # the driver call: 20 ms, the GIL released
        with lock:
            active[0] += 1
        started.set()
        time.sleep(0.02)
        try:
            return real_read(function, kp)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(fake_gpu, "read_params", in_driver)
    x, y = torch.rand(4), torch.empty(4)
    at_close: list = []

    def work(i):
        if i == 0:
            started.wait(5)
            k.close()
            with lock:
                at_close.append((active[0], list(unloaded)))
            return "closed"
        k.launch(1, 4, y, x, float(i), 4)
        return i

    assert _run(8, work) == ["closed", *range(1, 8)]
    ((in_flight, unloaded_then),) = at_close
    assert in_flight > 0 and unloaded_then == []  # launches held the module when close() returned
    assert unloaded == [first]  # and it went once they were done
    assert sorted(struct.unpack("<f", launch.params[2])[0] for launch in fake_gpu.launches) == [
        float(i) for i in range(1, 8)]  # fmt: skip


def test_configuration_cache_under_threads(kernel_image, fake_gpu):
    k = fake_gpu.install(lp.load_cubin(kernel_image, "scale", signature="*fp32, *fp32, fp32, i32"))
    x, y = torch.rand(4), torch.empty(4)

    def work(i):
        got = []
        for j in range(300):  # more configurations than the cache keeps: it is cleared while others read
            launch = k[(i % 4 + 1, j % 64 + 1), 32]
            launch(y, x, 1.0, 4)
            got.append((launch, (i % 4 + 1, j % 64 + 1, 1)))
        return got

    results = _run(8, work)
    grids = [launch.grid for launch in fake_gpu.launches]
    assert sorted(grids) == sorted(g for r in results for _, g in r)  # every launch used its own configuration
    assert len(fake_gpu.launches) == 8 * 300


def test_tensor_map_cache_and_eviction_under_threads(fake_gpu, monkeypatch):
    """Host tensor descriptors from many threads, more maps than the cache keeps: every launch gets
    the map of its own descriptor, encoded by the library's converter, while others evict."""
    pytest.importorskip("triton")
    import triton_kernels
    from test_triton_launcher import SM90, aligned
    from triton.tools.tensor_descriptor import TensorDescriptor

    monkeypatch.setattr(
        _driver, "encode_tensor_map_tiled", lambda dtype, rank, address, *rest: struct.pack("<Q", address) * 16
    )
    monkeypatch.setattr(_tensordesc, "_MAP_CACHE", {})
    monkeypatch.setattr(_tensordesc, "_MAP_CACHE_SIZE", 16)
    bases = [aligned(64 * 64, torch.float16).view(64, 64) for _ in range(40)]
    out = aligned(64 * 64, torch.float16)
    k = lp.triton_launcher(triton_kernels.host_desc_kernel, target=SM90).warmup(
        TensorDescriptor.from_tensor(bases[0], [32, 32]), out, 64, 64, 32, 32
    )
    fake_gpu.install(k)

    def work(i):
        for j in range(100):
            base = bases[(i * 7 + j) % len(bases)]
            k[(2, 2)](TensorDescriptor.from_tensor(base, [32, 32]), out, 64, 64)
        return True

    assert all(_run(8, work))
    assert len(fake_gpu.launches) == 800
    addresses = {b.data_ptr() for b in bases}
    for launch in fake_gpu.launches:  # the map names the address of the descriptor that launch was given
        assert struct.unpack("<Q", launch.params[0][:8])[0] in addresses
    assert len(_tensordesc._MAP_CACHE) <= 16


def test_launch_attribute_table_under_threads():
    combos = [(c, coop, pdl) for c in (None, (2, 1, 1), (4, 1, 1)) for coop in (False, True) for pdl in (False, True)]

    def work(i):
        out = []
        for j in range(200):
            cluster, coop, pdl = combos[(i + j) % len(combos)]
            attrs = _driver.launch._launch_attributes(cluster, coop, pdl, False)
            out.append((len(attrs), (cluster is not None) + coop + pdl))
        return out

    for result in _run(8, work):
        assert all(n == expected for n, expected in result)  # every list whole when read


def test_concurrent_numba_compiles_lend_row_stack_once():
    pytest.importorskip("numba.cuda")
    from numba import cuda

    had = hasattr(np, "row_stack")
    saved = np.row_stack if had else None
    if had:
        del np.row_stack  # as NumPy 2.5, which removed it
    try:
        seen: list = []

        def work(i):
            def kernel(out, a):
                j = cuda.grid(1)
                if j < out.size:
                    out[j] = a * (i + 1)

            k = lp.from_numba(kernel, "void(float32[::1], float32)", arch=90)
            seen.append(hasattr(np, "row_stack"))
            return len(k.params)

        assert _run(6, work) == [8] * 6
        assert not hasattr(np, "row_stack")  # the loan ends with the last compile
    finally:
        if had:
            np.row_stack = saved
