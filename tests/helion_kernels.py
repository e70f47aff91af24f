"""Helion kernels for the tests, written for these tests after the kernels Helion's own examples
show running on sm_90 (its ``examples/`` at v1.0.0: add, softmax, matmul, layer norm, attention,
split-K with a grid barrier): the same computations in Helion's idiom, exercising the same
features (broadcasting, full-row and tiled reductions with ``hl.register_block_size``, ``tl.dot``
through ``torch.addmm``/``baddbmm``, an epilogue callable, an optional tensor, ``hl.specialize``,
``hl.register_tunable``, ``hl.barrier``), plus small kernels for what Helion specializes on.

Most autotune on their first call, as written; the tests make configured copies with
``helion.kernel(kernel.fn, config=...)`` or ``autotune_effort="none"``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import helion
import helion.language as hl
import torch
from helion.autotuner import PowerOfTwoFragment

# --- elementwise ---------------------------------------------------------------------------------


@helion.kernel()
def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` with torch's broadcasting and type promotion."""
    a, b = torch.broadcast_tensors(a, b)
    result = torch.empty(a.shape, dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)
    for block in hl.tile(result.size()):
        result[block] = a[block] + b[block]
    return result


# --- softmax over rows ---------------------------------------------------------------------------


@helion.kernel()
def softmax(x: torch.Tensor) -> torch.Tensor:
    """Row softmax, each tile of rows loaded whole."""
    rows, _ = x.size()
    y = torch.empty_like(x)
    for r in hl.tile(rows):
        v = x[r, :].to(torch.float32)
        e = torch.exp(v - torch.amax(v, dim=1, keepdim=True))
        y[r, :] = (e / torch.sum(e, dim=1, keepdim=True)).to(y.dtype)
    return y


@helion.kernel()
def softmax_online(x: torch.Tensor) -> torch.Tensor:
    """Row softmax in column tiles: a running maximum and sum, then a second pass writing."""
    m, n = x.size()
    y = torch.empty_like(x)
    bm = hl.register_block_size(m)
    bn = hl.register_block_size(n)
    for r in hl.tile(m, block_size=bm):
        top = hl.full([r], float("-inf"), dtype=torch.float32)
        total = hl.zeros([r], dtype=torch.float32)
        for c in hl.tile(n, block_size=bn):
            v = x[r, c].to(torch.float32)
            new_top = torch.maximum(top, torch.amax(v, dim=1))
            total = total * torch.exp(top - new_top) + torch.sum(torch.exp(v - new_top[:, None]), dim=1)
            top = new_top
        for c in hl.tile(n, block_size=bn):
            v = x[r, c].to(torch.float32)
            y[r, c] = (torch.exp(v - top[:, None]) / total[:, None]).to(y.dtype)
    return y


# --- matmul with an epilogue ---------------------------------------------------------------------


@helion.kernel(static_shapes=True)
def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    epilogue: Callable[[torch.Tensor, tuple[torch.Tensor, ...]], torch.Tensor] = lambda acc, tile: acc,
) -> torch.Tensor:
    """``epilogue(a @ b)``, accumulated in fp32; the epilogue sees each output tile's indices."""
    m, k = a.size()
    k_b, n = b.size()
    assert k == k_b, f"inner sizes differ: {k} and {k_b}"
    c = torch.empty([m, n], dtype=torch.promote_types(a.dtype, b.dtype), device=a.device)
    for tm, tn in hl.tile([m, n]):
        acc = hl.zeros([tm, tn], dtype=torch.float32)
        for tk in hl.tile(k):
            acc = torch.addmm(acc, a[tm, tk], b[tk, tn])
        c[tm, tn] = epilogue(acc, (tm, tn))
    return c


# --- layer norm ----------------------------------------------------------------------------------


@helion.kernel()
def layer_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, eps: float = 1e-5
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Layer norm over the last dimension; also returns each row's mean and 1 / std."""
    m, n = x.size()
    y = torch.empty_like(x)
    means = torch.empty([m], dtype=torch.float32, device=x.device)
    inv_stds = torch.empty([m], dtype=torch.float32, device=x.device)
    for r in hl.tile(m):
        v = x[r, :].to(torch.float32)
        mu = torch.sum(v, dim=-1) / n
        d = v - mu[:, None]
        inv = torch.rsqrt(torch.sum(d * d, dim=-1) / n + eps)
        out = d * inv[:, None] * weight[:].to(torch.float32)
        if bias is not None:
            out = out + bias[:].to(torch.float32)
        y[r, :] = out.to(y.dtype)
        means[r] = mu
        inv_stds[r] = inv
    return y, means, inv_stds


# --- attention -----------------------------------------------------------------------------------


@helion.kernel(static_shapes=True)
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d)) v`` over the last two dimensions, the softmax online (base 2)."""
    sq = q.size(-2)
    sk = k.size(-2)
    d = hl.specialize(q.size(-1))
    qs = q.reshape([-1, sq, d])
    kt = k.reshape([-1, sk, d]).transpose(1, 2)
    vs = v.reshape([-1, sk, d])
    out = torch.empty_like(qs)
    scale = 1.4426950408889634 / math.sqrt(d)  # log2(e) / sqrt(d): exp2 below
    for tb, tq in hl.tile([qs.size(0), sq]):
        top = hl.full([tb, tq], float("-inf"), dtype=torch.float32)
        total = hl.zeros([tb, tq], dtype=torch.float32)
        acc = hl.zeros([tb, tq, d], dtype=torch.float32)
        query = qs[tb, tq, :]
        for tk in hl.tile(sk):
            logits = torch.bmm(query, kt[tb, :, tk]) * scale
            new_top = torch.maximum(top, torch.amax(logits, -1))
            p = torch.exp2(logits - new_top[:, :, None])
            rescale = torch.exp2(top - new_top)
            total = total * rescale + torch.sum(p, -1)
            acc = torch.baddbmm(acc * rescale[:, :, None], p.to(vs.dtype), vs[tb, tk, :])
            top = new_top
        out[tb, tq, :] = (acc / total[:, :, None]).to(out.dtype)
    return out.view(q.size())


# --- split-K matmul across the grid, a barrier between its two stages ----------------------------


@helion.kernel(static_shapes=True, dot_precision="ieee")
def split_k_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b``: partial products over K chunks, a grid-wide ``hl.barrier()``, then their sum
    (deterministic, unlike atomics): Helion launches it as a cooperative grid."""
    m, k = a.shape
    _, n = b.shape
    splits = hl.register_tunable("splits", PowerOfTwoFragment(16, 512, 64))
    chunk = helion.next_power_of_2(helion.cdiv(k, splits))
    partial = torch.zeros((m, n, splits), device=a.device, dtype=a.dtype)
    out = torch.empty((m, n), device=a.device, dtype=a.dtype)
    for tm, tn, tk in hl.tile([m, n, k], block_size=[None, None, chunk]):
        acc = hl.zeros([tm, tn], device=a.device, dtype=a.dtype)
        for kk in hl.tile(tk.begin, tk.end):
            acc = torch.addmm(acc, a[tm, kk], b[kk, tn])
        partial[tm, tn, tk.id] = acc
    hl.barrier()
    for tm, tn in hl.tile([m, n]):
        out[tm, tn] = torch.sum(partial[tm, tn, :], dim=-1)
    return out


# --- small kernels for what Helion specializes on -------------------------------------------------


@helion.kernel(static_shapes=False, autotune_effort="none")
def row_mean(x: torch.Tensor) -> torch.Tensor:
    """Dynamic shapes, but the row length specialized (``hl.specialize``, so ``1 / n`` is a constant
    of the generated code): one host function per row length, shared by every row count."""
    m = x.size(0)
    n = hl.specialize(x.size(1))
    out = torch.empty([m], dtype=torch.float32, device=x.device)
    for tile_m in hl.tile(m):
        out[tile_m] = torch.sum(x[tile_m, :].to(torch.float32), dim=-1) * (1.0 / n)
    return out


@helion.kernel(autotune_effort="none")
def scale_by(x: torch.Tensor, factor: hl.constexpr, bias: float = 0.0) -> torch.Tensor:
    """A constexpr argument (one host function per value) and a float with a default."""
    out = torch.empty_like(x)
    for tile in hl.tile(x.size()):
        out[tile] = x[tile] * factor + bias
    return out
