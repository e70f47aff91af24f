"""A templated CUDA C++ kernel with dynamic shared memory, launched on torch tensors.

Each block reverses its chunk of ``x`` through shared memory, scaled by ``alpha``. The chunk is
larger than 48 KB, so the launch raises the kernel's dynamic shared memory limit (once).

Run: ``python examples/cpp_kernel.py`` (compiles without a GPU; launches when there is one).
"""

from __future__ import annotations

import torch

import launchpad as lp

SOURCE = r"""
template <typename T>
__global__ void reverse_scale(const T* x, T* y, T alpha, int per_block) {
    extern __shared__ unsigned char smem[];
    T* tile = reinterpret_cast<T*>(smem);
    const T* src = x + (size_t)blockIdx.x * per_block;
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) tile[i] = src[i];
    __syncthreads();
    T* dst = y + (size_t)blockIdx.x * per_block;
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) dst[i] = alpha * tile[per_block - 1 - i];
}
"""


def main() -> None:
    gpu = torch.cuda.is_available()
    kernel = lp.compile_cuda(SOURCE, "reverse_scale<float>", arch=None if gpu else "sm_90",
                             signature="*fp32, *fp32, fp32, i32")  # fmt: skip
    for p in kernel.params:
        print(f"  param {p.index}: offset {p.offset:3d} size {p.size} {p.type}")
    if not gpu:
        print("no GPU: compiled for sm_90 but not launched")
        return
    per_block, blocks = 24 * 1024, 8  # 96 KB of floats per block
    x = torch.randn(blocks * per_block, device="cuda")
    y = torch.empty_like(x)
    kernel.launch(blocks, 256, x, y, 0.5, per_block, shared_mem=per_block * 4)
    expected = 0.5 * x.view(blocks, per_block).flip(1).reshape(-1)
    torch.testing.assert_close(y, expected)
    print("reverse_scale<float>: OK")


if __name__ == "__main__":
    main()
