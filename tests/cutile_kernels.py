"""cuTile kernels from cuTile's own samples and tests, with the cases the cuTile tests launch.

The kernels are cuTile-Python's (Apache-2.0, NVIDIA): ``vector_add`` from
``samples/quickstart/VectorAdd_quickstart.py`` (defined in :mod:`launchpad.bench._cutile_kernels`,
which the benchmark launches too), ``matmul_kernel`` (with its swizzle) from
``test/kernels/matmul.py`` as ``samples/MatMul.py`` launches it, ``softmax`` from
``test/test_softmax.py`` and ``layer_norm_fwd`` from ``test/kernels/layer_norm.py`` as
``samples/LayerNorm.py`` launches it.

Each :class:`Case` makes random inputs, the arguments ``ct.launch`` takes, the grid, and the torch
reference of what the kernel writes. The GPU tests compile each case where ``tileiras`` runs, and
otherwise take the cubin carried for its signature: ``python tests/cutile_kernels.py DIR`` (run
where ``tileiras`` runs, e.g. a CPU build machine) exports every case's cubin for sm_90 into DIR
as ``<symbol>.cubin``, the symbol cuTile mangles from the signature ``ct.launch`` would compile
for those arguments (so the same file serves launchpad and ``ct.launch``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from math import ceil
from pathlib import Path

import cuda.tile as ct
import torch

from launchpad.bench._cutile_kernels import vector_add

ConstInt = ct.Constant[int]


def swizzle_2d_from_bid(M, N, tm, tn, GROUP_SIZE_M, bid):
    num_bid_m = ct.cdiv(M, tm)
    num_bid_n = ct.cdiv(N, tn)
    num_bid_in_group = GROUP_SIZE_M * num_bid_n
    group_id = bid // num_bid_in_group
    first_bid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_bid_m - first_bid_m, GROUP_SIZE_M)
    bid_m = first_bid_m + (bid % group_size_m)
    bid_n = (bid % num_bid_in_group) // group_size_m
    return bid_m, bid_n


def swizzle_2d(M, N, tm, tn, GROUP_SIZE_M):
    bid = ct.bid(0)
    return swizzle_2d_from_bid(M, N, tm, tn, GROUP_SIZE_M, bid)


@ct.kernel(num_ctas=ct.ByTarget(sm_100=2))
def matmul_kernel(A, B, C, tm: ConstInt, tn: ConstInt, tk: ConstInt):
    GROUP_SIZE_M = 8
    M = A.shape[0]
    N = B.shape[1]
    bidx, bidy = swizzle_2d(M, N, tm, tn, GROUP_SIZE_M)
    num_tiles_k = ct.num_tiles(A, axis=1, shape=(tm, tk))
    accumulator = ct.full((tm, tn), 0, dtype=ct.float32)
    zero_pad = ct.PaddingMode.ZERO
    dtype = ct.tfloat32 if A.dtype == ct.float32 else A.dtype
    for k in range(num_tiles_k):
        a = ct.load(A, index=(bidx, k), shape=(tm, tk), padding_mode=zero_pad).astype(dtype)
        b = ct.load(B, index=(k, bidy), shape=(tk, tn), padding_mode=zero_pad).astype(dtype)
        accumulator = ct.mma(a, b, accumulator)
    accumulator = ct.astype(accumulator, C.dtype)
    ct.store(C, index=(bidx, bidy), tile=accumulator)


@ct.kernel
def softmax(input, output, B: ct.Constant[int], N: ct.Constant[int]):
    rows = ct.load(input, index=(ct.bid(0), 0), shape=(B, N))
    numerator = ct.exp(rows - ct.max(rows, axis=1, keepdims=True))
    denominator = ct.sum(numerator, axis=1, keepdims=True)
    ct.store(output, index=(ct.bid(0), 0), tile=numerator / denominator)


PAD_ZERO = ct.PaddingMode.ZERO


@ct.kernel
def layer_norm_fwd(X, W, B, Y, Mean, Rstd, eps, TILE_N: ConstInt):
    bid_m = ct.bid(0)
    num_tiles = ct.num_tiles(X, axis=1, shape=(1, TILE_N))
    N = X.shape[1]
    mean = ct.full((1, TILE_N), 0, dtype=ct.float32)
    for j in range(num_tiles):
        tx = ct.load(X, index=(bid_m, j), shape=(1, TILE_N), padding_mode=PAD_ZERO)
        mean += tx
    mean = ct.sum(mean, axis=1) / N
    ct.store(Mean, index=(bid_m,), tile=mean)
    var = ct.full((1, TILE_N), 0, dtype=ct.float32)
    for j in range(num_tiles):
        tx = ct.load(X, index=(bid_m, j), shape=(1, TILE_N), padding_mode=PAD_ZERO)
        mask = (j * TILE_N + ct.arange(TILE_N, dtype=ct.int32)) < N
        centered_tx = ct.where(mask, tx - mean, 0)
        var += centered_tx**2
    var = ct.sum(var, axis=1) / N
    rstd = 1 / ct.sqrt(var + eps)
    ct.store(Rstd, index=(bid_m,), tile=rstd)
    for j in range(num_tiles):
        tx = ct.load(X, index=(bid_m, j), shape=(1, TILE_N), padding_mode=PAD_ZERO)
        tw = ct.load(W, index=(j,), shape=(TILE_N,), padding_mode=PAD_ZERO)
        tb = ct.load(B, index=(j,), shape=(TILE_N,), padding_mode=PAD_ZERO)
        ty = (tx - mean) * rstd
        ty = ty * tw + tb
        ct.store(Y, index=(bid_m, j), tile=ty.astype(Y.dtype))


@dataclass(frozen=True)
class Case:
    """One launch of a kernel: ``make(device, generator)`` gives ``(args, grid, expected)`` where
    ``expected`` maps an argument position to the tensor the kernel must leave there."""

    name: str
    kernel: object
    make: Callable[[str, torch.Generator], tuple[tuple, tuple, dict[int, torch.Tensor]]]
    atol: float = 1e-5
    rtol: float = 1e-5


def _vector_add(n: int, tile: int, dtype: torch.dtype) -> Callable:
    def make(device: str, g: torch.Generator) -> tuple:
        a = torch.randn(n, generator=g).to(device, dtype)
        b = torch.randn(n, generator=g).to(device, dtype)
        c = torch.zeros_like(a)
        return (a, b, c, tile), (ceil(n / tile), 1, 1), {2: a + b}

    return make


def _matmul(m: int, n: int, k: int, dtype: torch.dtype) -> Callable:
    tm, tn, tk = (128, 256, 64) if dtype.itemsize == 2 else (32, 32, 32)  # samples/MatMul.py's choice

    def make(device: str, g: torch.Generator) -> tuple:
        a = torch.randn(m, k, generator=g).to(device, dtype)
        b = torch.randn(k, n, generator=g).to(device, dtype)
        c = torch.empty(m, n, device=device, dtype=dtype)
        ref = (a.float() @ b.float()).to(dtype)
        return (a, b, c, tm, tn, tk), (ceil(m / tm) * ceil(n / tn), 1, 1), {2: ref}

    return make


def _softmax(rows: int, cols: int, tile: int) -> Callable:
    def make(device: str, g: torch.Generator) -> tuple:
        x = torch.randn(rows, cols, generator=g).to(device)
        y = torch.zeros_like(x)
        return (x, y, tile, cols), (ceil(rows / tile), 1, 1), {1: torch.softmax(x, dim=1)}

    return make


def _layer_norm(m: int, n: int, tile_n: int) -> Callable:
    def make(device: str, g: torch.Generator) -> tuple:
        x = (-2.3 + 0.5 * torch.randn(m, n, generator=g)).to(device)
        w = torch.randn(n, generator=g).to(device)
        b = torch.randn(n, generator=g).to(device)
        y, mean, rstd = torch.empty_like(x), torch.empty(m, device=device), torch.empty(m, device=device)
        eps = 1e-5
        ref = torch.nn.functional.layer_norm(x, (n,), w, b, eps)
        var = x.var(dim=1, unbiased=False)
        return (x, w, b, y, mean, rstd, eps, tile_n), (m,), {3: ref, 4: x.mean(dim=1), 5: 1 / torch.sqrt(var + eps)}

    return make


CASES = [
    Case("vector_add_f32", vector_add, _vector_add(4096, 16, torch.float32)),
    Case("vector_add_bench", vector_add, _vector_add(4096, 1024, torch.float32)),  # the benchmark's launch
    Case("vector_add_f16", vector_add, _vector_add(1 << 20, 1024, torch.float16), atol=1e-3, rtol=1e-3),
    Case("matmul_f16", matmul_kernel, _matmul(512, 512, 768, torch.float16), atol=1e-1, rtol=1e-2),
    Case("matmul_f32", matmul_kernel, _matmul(256, 256, 384, torch.float32), atol=1e-1, rtol=1e-2),
    Case("softmax", softmax, _softmax(512, 128, 16), atol=1e-5, rtol=1e-4),
    Case("layer_norm", layer_norm_fwd, _layer_norm(256, 1000, 1024), atol=1e-4, rtol=1e-4),
]


def export_all(folder: Path, arch: str = "sm_90") -> list[Path]:
    """Export every case's cubin for ``arch`` into ``folder`` as ``<symbol>.cubin`` (needs tileiras)."""
    import io

    from cuda.tile.compilation import export_kernel

    from launchpad.frontends.cutile.signature import signature_from_args

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for case in CASES:
        args, _, _ = case.make("cpu", torch.Generator().manual_seed(0))
        signature = signature_from_args(case.kernel, args)
        out = io.BytesIO()
        export_kernel(case.kernel, [signature], out, gpu_code=arch, output_format="cubin")
        path = folder / f"{signature.symbol}.cubin"
        path.write_bytes(out.getvalue())
        written.append(path)
    return written


if __name__ == "__main__":
    for written in export_all(Path(sys.argv[1] if len(sys.argv) > 1 else ".whl/cutile")):
        print(written, written.stat().st_size)
