"""One Kernel on two GPUs, and the torchrun example (needs two GPUs; skipped otherwise).

A Kernel loads into each device on its first launch there and launches on the device that is
current, on that device's current stream, as torch and Triton do. Run on a machine with NCCL's
NVLink multicast off (``NCCL_NVLS_ENABLE=0``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import launchpad as lp
from launchpad.core import driver as _driver

pytest.importorskip("triton")
pytest.importorskip("numba.cuda")
import reliability_kernels as R

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs"),
]

N = 10_000
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def kernels():
    return R.build()


def rand(n: int, device: int) -> torch.Tensor:
    return torch.randn(n, device=f"cuda:{device}")


@pytest.mark.parametrize("front_end", R.FRONT_ENDS)
def test_one_kernel_runs_on_both_devices(kernels, front_end):
    kernel = kernels[front_end]
    run = R.launcher(front_end, kernel, N)
    results = {}
    for device in (0, 1):
        with torch.cuda.device(device):
            x, out = rand(N, device), rand(N, device)
            expected = out + x
            run(out, x)
            results[device] = (out, expected)
    assert sorted(kernel._loader.modules) == [0, 1]  # loaded once into each device
    for device, (out, expected) in results.items():
        torch.cuda.synchronize(device)
        assert out.device.index == device
        torch.testing.assert_close(out, expected)
    assert torch.cuda.current_device() == 0


@pytest.mark.parametrize("front_end", R.FRONT_ENDS)
def test_launch_follows_the_current_stream_of_device_1(kernels, front_end):
    run = R.launcher(front_end, kernels[front_end], 1 << 22)
    with torch.cuda.device(1):
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            x = rand(1 << 22, 1)
            for _ in range(4):
                x = x * 1.0001 + 0.5  # long torch work on s that the launch must wait for
            out = x * 2.0
            run(out, x)  # out = 3 * x (one rounding, as torch's), if it ran after the work above on s
            diff = out - 3.0 * x  # torch work after the launch, same stream
        s.synchronize()
    assert torch.count_nonzero(diff).item() == 0


@pytest.mark.parametrize("front_end", R.FRONT_ENDS)
def test_tensor_on_the_other_device_is_refused(kernels, front_end):
    kernel = kernels[front_end]
    run = R.launcher(front_end, kernel, N)
    x0, out1 = rand(N, 0), rand(N, 1)
    before = out1.clone()
    name = "x" if front_end == "numba" else "x_ptr" if front_end == "triton" else "argument 1"
    with pytest.raises(lp.ArgumentError, match=rf"kernel '{kernel.display_name}'.*{name}.*cuda:0.*cuda:1"):
        with torch.cuda.device(1):
            run(out1, x0)
    with pytest.raises(lp.ArgumentError, match=rf"kernel '{kernel.display_name}'.*cuda:1.*cuda:0"):
        run(out1, x0)  # current device 0: out1 is the stranger now
    torch.cuda.synchronize(1)
    assert torch.equal(out1, before)


def test_explicit_stream_of_the_other_device_keeps_the_current_device(kernels):
    kernel, run = kernels["cpp"], R.launcher("cpp", kernels["cpp"], N)
    s1 = torch.cuda.Stream(device=1)
    x, out = rand(N, 1), rand(N, 1)
    expected = out + x
    torch.cuda.synchronize(1)
    assert torch.cuda.current_device() == 0
    run(out, x, stream=s1)  # device 1's kernel, launched from a thread whose device is 0
    bound = R.bind("cpp", kernel, out, x, s1)
    bound()
    s1.synchronize()
    torch.testing.assert_close(out, expected + x)
    assert torch.cuda.current_device() == 0  # launchpad changed nothing about the current device
    y = torch.ones(4, device="cuda")
    assert y.device.index == 0


def test_two_threads_two_devices_one_kernel(kernels):
    iters = 2000

    def work(device: int) -> tuple[torch.Tensor, torch.Tensor]:
        torch.cuda.set_device(device)
        x, out = R.small_ints(N, device), R.small_ints(N, device)
        expected = out + len(R.FRONT_ENDS) * iters * x  # small integers: every sum is exact
        for front_end in R.FRONT_ENDS:
            run = R.launcher(front_end, kernels[front_end], N)
            for _ in range(iters):
                run(out, x)
        torch.cuda.synchronize(device)
        return out, expected

    for device, (out, expected) in enumerate(R.run_threads(work, 2, timeout=300)):
        assert out.device.index == device
        assert torch.equal(out, expected)


def test_modules_unload_from_both_devices(kernels):
    before = (_driver.loaded_modules(0), _driver.loaded_modules(1))
    k = lp.load_cubin(kernels["cpp"].image, "accumulate", signature="*fp32, *fp32, i32")
    run = R.launcher("cpp", k, N)
    for device in (0, 1):
        with torch.cuda.device(device):
            run(rand(N, device), rand(N, device))
    assert (_driver.loaded_modules(0), _driver.loaded_modules(1)) == (before[0] + 1, before[1] + 1)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    del k, run
    assert (_driver.loaded_modules(0), _driver.loaded_modules(1)) == before


def test_torchrun_example(tmp_path):
    env = dict(os.environ)
    env.update(
        NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])),
        LAUNCHPAD_CACHE_DIR=str(tmp_path / "cache"), TRITON_CACHE_DIR=str(tmp_path / "triton"),
    )  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
               str(ROOT / "examples" / "distributed.py")]  # fmt: skip
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    for rank in (0, 1):
        assert f"rank {rank}: all-reduced C++ and Triton results match torch" in output, output
