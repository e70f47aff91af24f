"""CuTe DSL kernels for the tests, and the script that compiles the carried cubins.

* ``add_kernel`` / ``add``: CuTe DSL's own first example (``examples/python/CuTeDSL/notebooks/
  elementwise_add.ipynb``, the naive kernel): one thread per element of a dynamic (M, N) tensor.
* ``row_softmax_kernel`` / ``row_softmax``: a softmax over each row, one block of 128 threads per
  row, block reductions through warp shuffles and shared memory from CuTe's ``SmemAllocator``
  (dynamic shared memory, sized by CuTe).
* ``cluster_scale_kernel`` / ``cluster_scale``: a Hopper kernel launched in clusters of 2 blocks
  (``cluster=(2, 1, 1)``): each block writes ``2 * x + its rank in the cluster`` after a cluster
  barrier, so a launch without the cluster gives different values.
* ``cluster_rotate_kernel`` / ``cluster_rotate``: clusters of 2 blocks exchanging shared memory
  (distributed shared memory through ``mapa``): each block writes ``2 * (its cluster peer's x) + x``.
  Its output is a ``cutlass.Array`` (a static layout: a bare pointer), its host function takes a
  ``stream`` and its cluster shape is a ``Constexpr`` tuple.
* ``Scaled``: a class-based kernel (``__call__`` the ``@cute.jit`` host function, the kernel a method
  taking a static ``TiledCopy``): ``y = 3 * x``.

``python tests/cute_kernels.py`` (with nvidia-cutlass-dsl installed, no GPU needed) compiles each for
sm_90a through ``launchpad.from_cute`` and saves the artifacts under ``tests/cubins/cute/``, which
the GPU tests load where CuTe DSL is absent.
"""

from __future__ import annotations

import os
import sys

import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream
from cutlass.experimental import primitives as prims

THREADS = 128


@cute.kernel
def add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    bdim, _, _ = cute.arch.block_dim()
    thread_idx = bidx * bdim + tidx
    m, n = gA.shape
    ni = thread_idx % n
    mi = thread_idx // n
    if mi < m:
        gC[mi, ni] = gA[mi, ni] + gB[mi, ni]


@cute.jit
def add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
    m, n = mA.shape
    add_kernel(mA, mB, mC).launch(grid=((m * n + 255) // 256, 1, 1), block=(256, 1, 1))


@cute.kernel
def row_softmax_kernel(x: cute.Tensor, y: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    n = x.shape[1]
    smem = cutlass.memory.SmemAllocator()
    partial = smem.allocate_tensor(cutlass.Float32, cute.make_layout(THREADS // 32), byte_alignment=16)
    warp = tidx // 32
    lane = tidx % 32

    top = -cutlass.Float32.inf
    for j in cutlass.range(tidx, n, THREADS):
        top = cute.arch.fmax(top, x[row, j].to(cutlass.Float32))
    top = cute.arch.warp_reduction_max(top)
    if lane == 0:
        partial[warp] = top
    cute.arch.sync_threads()
    top = partial[0]
    for w in cutlass.range_constexpr(1, THREADS // 32):
        top = cute.arch.fmax(top, partial[w])
    cute.arch.sync_threads()

    total = cutlass.Float32(0.0)
    for j in cutlass.range(tidx, n, THREADS):
        total += cute.math.exp(x[row, j].to(cutlass.Float32) - top)
    total = cute.arch.warp_reduction_sum(total)
    if lane == 0:
        partial[warp] = total
    cute.arch.sync_threads()
    total = partial[0]
    for w in cutlass.range_constexpr(1, THREADS // 32):
        total = total + partial[w]

    for j in cutlass.range(tidx, n, THREADS):
        y[row, j] = (cute.math.exp(x[row, j].to(cutlass.Float32) - top) / total).to(y.element_type)


@cute.jit
def row_softmax(x: cute.Tensor, y: cute.Tensor):
    row_softmax_kernel(x, y).launch(grid=(x.shape[0], 1, 1), block=(THREADS, 1, 1))


@cute.kernel
def cluster_scale_kernel(x: cute.Tensor, out: cute.Tensor, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    rank = cute.arch.block_idx_in_cluster()
    cute.arch.cluster_arrive()
    cute.arch.cluster_wait()
    i = bidx * THREADS + tidx
    if i < n:
        out[i] = x[i] * 2.0 + cutlass.Float32(rank)


@cute.jit
def cluster_scale(x: cute.Tensor, out: cute.Tensor, n: cutlass.Int32):
    cluster_scale_kernel(x, out, n).launch(
        grid=((n + THREADS - 1) // THREADS, 1, 1), block=(THREADS, 1, 1), cluster=(2, 1, 1)
    )


CLUSTER_BLOCKS = 2
ROTATE_N = CLUSTER_BLOCKS * THREADS * 2  # two clusters of two blocks


@cute.kernel
def cluster_rotate_kernel(x: cute.Tensor, out: cutlass.Array, CLUSTER: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    rank = cute.arch.block_idx_in_cluster()
    size = CLUSTER[0] * CLUSTER[1]
    tile = cutlass.Array(cutlass.Float32, THREADS, space=cutlass.AddressSpace.smem, alignment=16)
    i = bidx * THREADS + tidx
    tile[tidx] = x[i]
    prims.barrier_cluster_arrive()
    prims.barrier_cluster_wait()
    peer = prims.mapa(tile.data_ptr(), (rank + 1) % cutlass.Int32(size))
    out[i] = (peer + tidx).load() * 2.0 + x[i]
    prims.barrier_cluster_arrive()  # the peer's tile stays until every block of the cluster has read it
    prims.barrier_cluster_wait()


@cute.jit
def cluster_rotate(x: cute.Tensor, out: cutlass.Array, stream, CLUSTER: cutlass.Constexpr):
    cluster_rotate_kernel(x, out, CLUSTER).launch(
        grid=(ROTATE_N // THREADS, 1, 1), block=(THREADS, 1, 1), cluster=(CLUSTER[0], CLUSTER[1], 1), stream=stream
    )


class Scaled:
    """A class-based kernel, as CuTe DSL's examples write them: ``__call__`` is the ``@cute.jit`` host
    function, the kernel a ``@cute.kernel`` method taking a static ``TiledCopy`` (no bytes at run
    time) beside its tensors; ``factor`` is the object's, compiled in."""

    def __init__(self, factor: float):
        self.factor = factor

    @cute.jit
    def __call__(self, x: cute.Tensor, y: cute.Tensor):
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), x.element_type, num_bits_per_copy=32)
        tiled = cute.make_tiled_copy_tv(atom, cute.make_layout(THREADS), cute.make_layout(1))
        self.kernel(x, y, tiled).launch(grid=((x.shape[0] + THREADS - 1) // THREADS, 1, 1), block=(THREADS, 1, 1))

    @cute.kernel
    def kernel(self, x: cute.Tensor, y: cute.Tensor, tiled: cute.TiledCopy):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        i = bidx * THREADS + tidx
        if i < x.shape[0]:
            y[i] = x[i] * self.factor


def fake_tensor(dtype, shape, *, align=16, divisibility=1):
    """A fake row-major tensor with dynamic modes (the last one divisible by ``divisibility``)."""
    modes = tuple(cute.sym_int32(divisibility=divisibility if d == len(shape) - 1 else 1) for d in range(len(shape)))
    order = tuple(reversed(range(len(shape))))
    return make_fake_compact_tensor(dtype, modes, stride_order=order, assumed_align=align)


def examples() -> dict:
    """Each carried kernel: ``(jit function, example arguments)``."""
    f32 = cutlass.Float32
    rotate_args = (
        fake_tensor(f32, (0,)),
        make_fake_compact_tensor(f32, (ROTATE_N,)),
        make_fake_stream(),
        (CLUSTER_BLOCKS, 1),
    )
    return {
        "add": (add, (fake_tensor(f32, (0, 0), divisibility=8),) * 3),
        "row_softmax": (row_softmax, (fake_tensor(f32, (0, 0)), fake_tensor(f32, (0, 0)))),
        "cluster_scale": (cluster_scale, (fake_tensor(f32, (0,)), fake_tensor(f32, (0,)), cutlass.Int32(0))),
        "cluster_rotate": (cluster_rotate, rotate_args),
        "scaled": (Scaled(3.0), (fake_tensor(f32, (0,)), fake_tensor(f32, (0,)))),
    }


def main(folder: str) -> None:
    """Compile every example for sm_90a and save it under ``folder``."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import launchpad as lp

    os.makedirs(folder, exist_ok=True)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cute_kernels  # the tests' import of this file: a class's kernel is named after its module

    for name, (fn, args) in cute_kernels.examples().items():
        kernel = lp.from_cute(fn, args, arch="sm_90a")
        kernel.save(os.path.join(folder, f"{name}.json"))
        print(name, kernel.spec.name, [p.size for p in kernel.params], kernel.spec.plan)


if __name__ == "__main__":
    main(
        sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "cubins", "cute")
    )
