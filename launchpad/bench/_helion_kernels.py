"""Helion kernels of the Helion benchmarks (imported only when Helion is installed): an add with
torch's broadcasting and a matmul (its epilogue argument left to the identity), the computations of Helion's own ``add`` and
``matmul`` examples, each with one fixed config, so that the timings measure calls, not tuning.
"""

from __future__ import annotations

from collections.abc import Callable

import helion
import helion.language as hl
import torch


@helion.kernel(config=helion.Config(block_sizes=[1024], num_warps=4, num_stages=1))
def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = torch.broadcast_tensors(a, b)
    result = torch.empty(a.shape, dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)
    for block in hl.tile(result.size()):
        result[block] = a[block] + b[block]
    return result


@helion.kernel(static_shapes=True, config=helion.Config(block_sizes=[64, 64, 32], num_warps=4, num_stages=3))
def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    epilogue: Callable[[torch.Tensor, tuple[torch.Tensor, ...]], torch.Tensor] = lambda acc, tile: acc,
) -> torch.Tensor:
    m, k = a.size()
    _, n = b.size()
    c = torch.empty([m, n], dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = torch.addmm(acc, a[tm, tk], b[tk, tn])
        c[tm, tn] = epilogue(acc, (tm, tn))
    return c
