"""launchpad kernels under torch.distributed: each rank launches on its own GPU, NCCL sums.

Every rank compiles a CUDA C++ kernel (NVRTC) and a Triton kernel, runs them on its own random
data on its own GPU, and the ranks all-reduce the results with NCCL. Each rank then checks the
sum against torch computing every rank's part itself (the ranks' inputs come from known seeds).

Run on a machine with two or more GPUs::

    NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node=2 examples/distributed.py

``python examples/distributed.py`` on a GPU runs it as a world of one process. Without a GPU
(with ``python`` or under ``torchrun``) each process compiles both kernels for sm_90, prints their
parameters and says why it launched nothing, as the other examples do.
"""

from __future__ import annotations

import os

# Triton 3.9 warns on each compile that leaves FP fusion to its default (which Triton 3.10
# changes): this example takes the default of the releases before (fusion on) explicitly.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

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


def compile_only(rank: int) -> None:
    """Without a GPU: both kernels compiled for sm_90 (no GPU needed), described, not launched."""
    from triton.backends.compiler import GPUTarget

    scale_shift = lp.compile_cuda(SOURCE, "scale_shift", arch="sm_90", signature="*fp32, *fp32, fp32, fp32, i32")
    mul = lp.from_triton(mul_kernel, signature="*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": BLOCK},
                         target=GPUTarget("cuda", 90, 32))  # fmt: skip
    for kernel in (scale_shift, mul):
        print(f"rank {rank}: {kernel!r}: " + ", ".join(f"{p.name or p.index} {p.type}" for p in kernel.params),
              flush=True)  # fmt: skip
    print(f"rank {rank}: no GPU: compiled for sm_90 but not launched; this example launches on one GPU per process "
          "(NCCL_NVLS_ENABLE=0 torchrun --nproc-per-node=2 examples/distributed.py on a machine with two)",
          flush=True)  # fmt: skip


def main() -> None:
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if not torch.cuda.is_available():
        compile_only(rank)
        return
    if local_rank >= torch.cuda.device_count():
        raise SystemExit(f"rank {rank}: this machine has {torch.cuda.device_count()} GPU(s), none for local rank "
                         f"{local_rank}: start at most one process per GPU")  # fmt: skip
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    if "RANK" in os.environ:  # under torchrun: its rendezvous
        dist.init_process_group("nccl", device_id=device)
    else:  # plain python: a world of one, with a store of its own
        dist.init_process_group("nccl", device_id=device, store=dist.HashStore(), rank=0, world_size=1)

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
