"""Small CuTe DSL kernels for the layout tests (tests/test_cute.py): one tensor and two scalars, and a
host function that passes its kernel a tiled tensor."""

import cutlass
import cutlass.cute as cute


@cute.kernel
def probe_kernel(t: cute.Tensor, s: cutlass.Int32, f: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    if tidx == 0 and s == 12345:
        cute.printf("{}", f)


@cute.jit
def probe(t: cute.Tensor, s: cutlass.Int32, f: cutlass.Float32):
    probe_kernel(t, s, f).launch(grid=(1, 1, 1), block=(32, 1, 1))


@cute.kernel
def tiled_kernel(g: cute.Tensor):
    pass


@cute.jit
def tiled(m: cute.Tensor):
    tiled_kernel(cute.zipped_divide(m, (4, 8))).launch(grid=(1, 1, 1), block=(32, 1, 1))


@cute.kernel
def pointer_kernel(p: cute.Pointer):
    pass


@cute.jit
def pointer(m: cute.Tensor):
    pointer_kernel(m.iterator).launch(grid=(1, 1, 1), block=(32, 1, 1))
