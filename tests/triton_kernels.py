"""Triton kernels shared by the Triton tests (jit functions must live in a source file).

Each covers one part of Triton's calling convention: plain pointers and ints, a reduction,
a large-tile matmul (dynamic shared memory above 48 KB, ints specialized to 1), None and int-1
arguments, every scalar type, a tuple argument, a host tensor descriptor, a device-side tensor
descriptor (global scratch) and clusters (num_ctas=2).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def rowsum_kernel(x_ptr, out_ptr, stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):  # fmt: skip
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(a, mask=rk[None, :] < K - k, other=0.0), tl.load(b, mask=rk[:, None] < K - k, other=0.0))
        a += BK * sak
        b += BK * sbk
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.float16), mask=mask)


@triton.jit
def strided_scale_kernel(x_ptr, out_ptr, n, sx, so, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs * so, tl.load(x_ptr + offs * sx, mask=mask) * alpha, mask=mask)


@triton.jit
def axpy_bias_kernel(x_ptr, y_ptr, bias_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    r = alpha * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)
    if bias_ptr is not None:
        r += tl.load(bias_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, r, mask=mask)


@triton.jit
def scalars_kernel(out_ptr, a: tl.float16, b: tl.bfloat16, c: tl.float32, d: tl.float64, e: tl.int64, f: tl.int1):
    # each scalar as fp64, so the device shows what it received (annotations type them, as a launch does)
    tl.store(out_ptr + 0, a.to(tl.float64))
    tl.store(out_ptr + 1, b.to(tl.float64))
    tl.store(out_ptr + 2, c.to(tl.float64))
    tl.store(out_ptr + 3, d)
    tl.store(out_ptr + 4, e.to(tl.float64))
    tl.store(out_ptr + 5, f.to(tl.float64))


@triton.jit
def tuple_kernel(out_ptr, t, n, BLOCK: tl.constexpr):
    ptr, scale, shift = t
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(ptr + offs, mask=mask) * scale + shift, mask=mask)


@triton.jit
def host_desc_kernel(in_desc, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    x = in_desc.load([pid_m * BM, pid_n * BN])
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], x * 2, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def device_desc_kernel(in_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    desc = tl.make_tensor_descriptor(in_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    x = desc.load([pid_m * BM, pid_n * BN])
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], x + 1, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def cast_kernel(x_ptr, out_ptr, n, OUT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask).to(OUT), mask=mask)


# the same kernel with Triton's specialization switched off for some arguments
add_no_spec_kernel = triton.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=["x_ptr"])(add_kernel.fn)
