"""Under load: many threads launching one set of kernels, and thousands of kernels made and dropped.

Each front end's kernel accumulates ``out += x`` on small random integers, so after thousands of
launches the exact expected value is known and any lost, doubled or cross-wired launch shows.
"""

from __future__ import annotations

import gc
import os

import pytest
import torch

import launchpad as lp
from launchpad.core import driver as _driver

pytest.importorskip("triton")
pytest.importorskip("numba.cuda")
import reliability_kernels as R
import triton_kernels as TK

pytestmark = pytest.mark.gpu

THREADS = 16
ITERS = int(os.environ.get("LAUNCHPAD_STRESS_ITERS", "10000"))
N = 2048


@pytest.fixture(scope="module")
def kernels():
    return R.build()


def test_16_threads_launch_every_front_end_plain_and_bound(kernels):
    """Each thread: its own stream and tensors; every front end, plain and bound, ITERS times each."""

    def work(t: int) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            x = R.small_ints(N)
            plain = {fe: R.small_ints(N) for fe in R.FRONT_ENDS}
            bound = {fe: R.small_ints(N) for fe in R.FRONT_ENDS}
            expected = {fe: (plain[fe] + ITERS * x, bound[fe] + ITERS * x) for fe in R.FRONT_ENDS}
            runs = [(R.launcher(fe, kernels[fe], N), plain[fe]) for fe in R.FRONT_ENDS]
            bound_launches = [R.bind(fe, kernels[fe], bound[fe], x, stream) for fe in R.FRONT_ENDS]
            for _ in range(ITERS):
                for run, out in runs:
                    run(out, x)  # on this thread's current stream
                for launch in bound_launches:
                    launch()
        stream.synchronize()
        return [(f"{fe} plain", plain[fe], expected[fe][0]) for fe in R.FRONT_ENDS] + [
            (f"{fe} bound", bound[fe], expected[fe][1]) for fe in R.FRONT_ENDS
        ]

    for t, checks in enumerate(R.run_threads(work, THREADS, timeout=900)):
        for what, out, expected in checks:
            assert torch.equal(out, expected), f"thread {t}, {what}: wrong result"


def _copy(kernel: lp.Kernel) -> lp.Kernel:
    """A new Kernel of the same binary and description: loads its own module on first launch."""
    return lp.Kernel(kernel.spec)


def _settle() -> tuple[int, int, int]:
    """Loaded modules, bytes torch has allocated, bytes the driver reports in use (device 0)."""
    torch.cuda.synchronize()
    gc.collect()
    torch.cuda.empty_cache()
    free, total = _driver.memory_info(0)
    return _driver.loaded_modules(0), torch.cuda.memory_allocated(0), total - free


def test_creating_and_dropping_2000_kernels_leaves_nothing_behind(kernels):
    scratchy = lp.from_triton(TK.device_desc_kernel, signature="*fp16, *fp16, i32, i32",
                              constexprs={"BM": 64, "BN": 64})  # fmt: skip
    assert any(a.kind == "scratch" and a.options["size"] > 0 for a in scratchy.args)
    M, N2 = 128, 192
    src = torch.randn(M, N2, device="cuda").half()
    dst = torch.empty(M * N2, device="cuda", dtype=torch.float16)
    x, outs = R.small_ints(N), {fe: R.small_ints(N) for fe in ("cpp", "numba")}
    # 1000 held C++ kernels, then 2000 dropped ones: 1000 C++, 500 Numba, 500 Triton with scratch
    expected = {"cpp": outs["cpp"] + 2000 * x, "numba": outs["numba"] + 500 * x}
    launches_before = torch.cuda.memory_stats()["allocation.all.allocated"]
    modules0, allocated0, used0 = _settle()

    # The measure can see a leak: 1000 kernels held loaded show in both counts. (The driver
    # takes module memory in 2 MiB pieces, so a few hundred modules may fit in one it has.)
    held = [_copy(kernels["cpp"]) for _ in range(1000)]
    for k in held:
        R.launcher("cpp", k, N)(outs["cpp"], x)
    modules_held, _, used_held = _settle()
    assert modules_held == modules0 + 1000
    per_module = (used_held - used0) / 1000
    del held, k
    modules1, _, used1 = _settle()
    assert modules1 == modules0

    for i in range(2000):
        if i % 4 == 0:
            k = _copy(scratchy)  # global scratch from torch's allocator on every launch
            k.launch((M // 64, N2 // 64), None, src, dst, M, N2, 64, 64)
        else:
            fe = "cpp" if i % 2 else "numba"
            k = _copy(kernels[fe])
            R.launcher(fe, k, N)(outs[fe], x)
        del k
    modules2, allocated2, used2 = _settle()
    for fe, out in outs.items():
        assert torch.equal(out, expected[fe]), fe
    torch.testing.assert_close(dst.view(M, N2), src + 1)
    assert modules2 == modules0, "modules left loaded"
    assert allocated2 == allocated0, "scratch not returned to torch's allocator"
    scratch_allocations = torch.cuda.memory_stats()["allocation.all.allocated"] - launches_before
    assert scratch_allocations >= 500  # every scratch launch took its scratch from torch
    # No device memory behind: within 1% of what the 2000 modules held would take.
    print(f"module cost {per_module / 1024:.1f} KiB; used: before {used0}, 1000 held {used_held}, "
          f"dropped {used1}, after 2000 more {used2}")  # fmt: skip
    assert per_module > 0
    assert used2 - used0 <= max(2000 * per_module * 0.01, 2 << 20), (used0, used2, per_module)


def test_a_launch_function_kept_alone_keeps_its_module_until_dropped(kernels):
    before = _driver.loaded_modules(0)
    run = _copy(kernels["cpp"])[R.grid(N), R.BLOCK]  # the Kernel itself is dropped at once
    x, out = R.small_ints(N), R.small_ints(N)
    expected = out + x
    run(out, x, N)
    assert _driver.loaded_modules(0) == before + 1
    torch.cuda.synchronize()
    assert torch.equal(out, expected)
    del run  # no garbage collection needed: nothing keeps it in a reference cycle
    assert _driver.loaded_modules(0) == before
