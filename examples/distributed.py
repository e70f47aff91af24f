"""launchpad kernels under torch.distributed: each rank launches on its own GPU, NCCL sums.

Every rank compiles a CUDA C++ kernel (NVRTC) and a Triton kernel, runs them on its own random
data on its own GPU, and the ranks all-reduce the results with NCCL. Each rank then checks the
sum against torch computing every rank's part itself (the ranks' inputs come from known seeds).

Run on a machine with two or more GPUs::

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node=2 examples/distributed.py
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import triton
import triton.language as tl

import launchpad as lp

N = 1 << 20
BLOCK = 1024

SOURCE = r"""
extern "C" __global__ void scale_shift(const float* x, float* y, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
"""


@triton.jit
def mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * tl.load(y_ptr + offs, mask=mask), mask=mask)


def inputs(rank: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s random inputs; any rank can make any rank's."""
    g = torch.Generator(device=device).manual_seed(1000 + rank)
    return torch.randn(N, device=device, generator=g), torch.randn(N, device=device, generator=g)


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)

    # Both ranks compile the same kernels at once: the disk cache takes concurrent writers.
    scale_shift = lp.compile_cuda(SOURCE, "scale_shift", signature="*fp32, *fp32, fp32, fp32, i32")
    mul = lp.from_triton(mul_kernel, signature="*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": BLOCK})

    x, w = inputs(rank, device)
    y, out = torch.empty_like(x), torch.empty_like(x)
    grid = triton.cdiv(N, BLOCK)
    scale_shift.launch(grid, BLOCK, x, y, 2.0, float(rank), N)  # on this rank's GPU and current stream
    mul[grid](y, w, out, N, BLOCK)
    dist.all_reduce(out)  # NCCL, on the same stream: ordered after the launches

    expected = torch.zeros(N, device=device)
    for r in range(world):
        xr, wr = inputs(r, device)
        expected += (2.0 * xr + r) * wr
    torch.testing.assert_close(out, expected)
    print(f"rank {rank}: all-reduced C++ and Triton results match torch on cuda:{device.index}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
