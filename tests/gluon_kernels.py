"""Gluon kernels for the tests, written for the Gluon (``triton.experimental.gluon``) of Triton 3.6
and of Triton 3.9 after the topics of Triton's Gluon tutorials that run on Hopper: explicit layouts,
shared memory, TMA with mbarriers, wgmma, warp specialization.

- ``blocked_add``: a blocked register layout chosen by the kernel;
- ``transpose_via_shared``: a tile through swizzled shared memory, read back permuted, and a
  ``convert_layout`` between two blocked layouts (the kernel uses static shared memory);
- ``tma_copy_tile``: TMA loads completing on an mbarrier, TMA stores (host tensor descriptors);
- ``wgmma_matmul``: TMA-fed ``warpgroup_mma`` over K, its accumulator in the MMA layout;
- ``ws_scale``: warp specialization, a 1-warp TMA producer and the default partition consuming a
  two-slot ring of shared buffers through "ready"/"empty" mbarriers.

Of what these kernels use, Gluon renamed only the TMA copies between the two: Triton 3.6's
``tma.async_copy_global_to_shared`` / ``tma.async_copy_shared_to_global`` are Triton 3.9's
``tma.async_load`` / ``tma.async_store`` (same arguments; the old names still exist there but raise
"has been removed" when compiled). ``tma_load`` and ``tma_store`` below are whichever the installed
Gluon has, chosen by which names ``tma`` exports. mbarriers, ``warp_specialize``, ``warpgroup_mma``,
``fence_async_shared``, the layouts and ``TensorDescriptor`` are called alike on both.

``descriptor(...)`` makes the host-side TMA descriptors, so that the CPU tests (compiling for sm_90)
and the GPU tests build the kernels' arguments alike.
"""

from __future__ import annotations

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma, warpgroup_mma
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

#: Whether the installed Gluon spells the TMA copies ``tma.async_load``/``tma.async_store`` (Triton 3.9)
#: rather than ``tma.async_copy_global_to_shared``/``tma.async_copy_shared_to_global`` (Triton 3.6).
TMA_LOAD_STORE = "async_load" in tma.__all__ and "async_store" in tma.__all__
#: TMA global -> shared copy completing on an mbarrier: ``(desc, coord, barrier, smem, pred=True)``.
tma_load = tma.async_load if TMA_LOAD_STORE else tma.async_copy_global_to_shared
#: TMA shared -> global copy: ``(desc, coord, smem)``.
tma_store = tma.async_store if TMA_LOAD_STORE else tma.async_copy_shared_to_global

# --- layouts -------------------------------------------------------------------------------------


@gluon.jit
def blocked_add(x_ptr, y_ptr, out_ptr, n, BLOCK: gl.constexpr, PER_THREAD: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([PER_THREAD], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offs < n
    total = gl.load(x_ptr + offs, mask=mask) + gl.load(y_ptr + offs, mask=mask)
    gl.store(out_ptr + offs, total, mask=mask)


# --- shared memory -------------------------------------------------------------------------------


@gluon.jit
def transpose_via_shared(src, dst, M, N, BM: gl.constexpr, BN: gl.constexpr):
    """dst[N, M] = src[M, N]^T, one BM x BN tile per program."""
    rows: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    cols: gl.constexpr = gl.BlockedLayout([4, 1], [8, 4], [1, gl.num_warps()], [0, 1])
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN
    m = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, rows))
    n = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, rows))
    inside = (m[:, None] < M) & (n[None, :] < N)
    tile = gl.load(src + m[:, None] * N + n[None, :], mask=inside, other=0.0)
    smem = gl.allocate_shared_memory(src.dtype.element_ty, [BM, BN], gl.SwizzledSharedLayout(4, 2, 4, [1, 0]))
    smem.store(tile)
    transposed = smem.permute([1, 0]).load(cols)  # [BN, BM], read column by column
    transposed = gl.convert_layout(transposed, rows)
    tn = off_n + gl.arange(0, BN, layout=gl.SliceLayout(1, rows))
    tm = off_m + gl.arange(0, BM, layout=gl.SliceLayout(0, rows))
    gl.store(dst + tn[:, None] * M + tm[None, :], transposed, mask=(tn[:, None] < N) & (tm[None, :] < M))


# --- TMA with mbarriers --------------------------------------------------------------------------


@gluon.jit
def tma_copy_tile(in_desc, out_desc, SCALE: gl.constexpr):
    """out = SCALE * in, one block of the descriptors per program, through shared memory by TMA."""
    BM: gl.constexpr = in_desc.block_type.shape[0]
    BN: gl.constexpr = in_desc.block_type.shape[1]
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN
    smem = gl.allocate_shared_memory(in_desc.dtype, [BM, BN], in_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, in_desc.block_type.nbytes)
    tma_load(in_desc, [off_m, off_n], bar, smem)
    mbarrier.wait(bar, phase=0)
    mbarrier.invalidate(bar)
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    values = smem.load(layout) * SCALE
    out = gl.allocate_shared_memory(out_desc.dtype, [BM, BN], out_desc.layout)
    out.store(values)
    fence_async_shared()
    tma_store(out_desc, [off_m, off_n], out)
    tma.store_wait(pendings=0)


# --- wgmma ---------------------------------------------------------------------------------------


@gluon.jit
def wgmma_matmul(a_desc, b_desc, c_ptr, M, N, K, stride_cm):
    """c[M, N] = a[M, K] @ b[K, N] in fp32, one BM x BN tile per program, K in BK steps."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN
    a_smem = gl.allocate_shared_memory(a_desc.dtype, [BM, BK], a_desc.layout)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, [BK, BN], b_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                  instr_shape=[16, BN, 16])  # fmt: skip
    acc = gl.zeros([BM, BN], gl.float32, layout=mma)
    phase = 0
    for k in range(0, K, BK):
        mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        tma_load(a_desc, [off_m, k], bar, a_smem)
        tma_load(b_desc, [k, off_n], bar, b_smem)
        mbarrier.wait(bar, phase=phase)
        phase ^= 1
        acc = warpgroup_mma(a_smem, b_smem, acc)
    mbarrier.invalidate(bar)
    m = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, mma))
    n = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, mma))
    gl.store(c_ptr + m[:, None] * stride_cm + n[None, :], acc, mask=(m[:, None] < M) & (n[None, :] < N))


# --- warp specialization -------------------------------------------------------------------------


@gluon.jit
def _ws_consume(buffers, ready, empty, out_ptr, rows, SCALE: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                STEPS: gl.constexpr):  # fmt: skip
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    r = gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    c = gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
    base = gl.program_id(0) * STEPS * BM
    for i in range(STEPS):
        slot = i % 2
        mbarrier.wait(ready.index(slot), phase=(i // 2) & 1)
        tile = buffers.index(slot).load(layout)
        fence_async_shared()  # these reads before the producer's next TMA write into the slot
        mbarrier.arrive(empty.index(slot), count=1)
        row = base + i * BM + r
        gl.store(out_ptr + row[:, None] * BN + c[None, :], tile * SCALE, mask=row[:, None] < rows)


@gluon.jit
def _ws_produce(in_desc, buffers, ready, empty, BM: gl.constexpr, STEPS: gl.constexpr):
    base = gl.program_id(0) * STEPS * BM
    for i in range(STEPS):
        slot = i % 2
        mbarrier.wait(empty.index(slot), phase=((i // 2) & 1) ^ 1, pred=i >= 2)  # the slot's last tile consumed
        mbarrier.expect(ready.index(slot), in_desc.block_type.nbytes)
        tma_load(in_desc, [base + i * BM, 0], ready.index(slot), buffers.index(slot))


@gluon.jit
def ws_scale(in_desc, out_ptr, rows, SCALE: gl.constexpr, STEPS: gl.constexpr):
    """out[r, :] = SCALE * in[r, :] for STEPS row blocks per program: a producer warp streams the
    blocks in by TMA while the default partition scales and stores them."""
    BM: gl.constexpr = in_desc.block_type.shape[0]
    BN: gl.constexpr = in_desc.block_type.shape[1]
    buffers = gl.allocate_shared_memory(in_desc.dtype, [2, BM, BN], in_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(2):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    gl.warp_specialize(
        [
            (_ws_consume, (buffers, ready, empty, out_ptr, rows, SCALE, BM, BN, STEPS)),
            (_ws_produce, (in_desc, buffers, ready, empty, BM, STEPS)),
        ],
        [1],
        [24],
    )


# --- host-side arguments -------------------------------------------------------------------------


def descriptor(t: torch.Tensor, block: list[int]) -> TensorDescriptor:
    dtype = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16, torch.float32: gl.float32}[t.dtype]
    return TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, dtype))
