"""A decode-like step recorded, against eager and torch's ways of replaying it.

The step, as a small decoder layer run for 8 new tokens: embedding lookups of the token ids and
their positions (new each step), torch's layer norm and matmuls (cuBLAS), a launchpad C++ kernel
(a rotary-like scale by position) and a Triton kernel (GELU), and the logits returned. Launchers:
eager; torch's ``CUDAGraph`` after ``copy_`` of the two inputs into its static buffers (its output
is the static tensor, overwritten by the next replay); ``torch.cuda.make_graphed_callables``; and
``torch.compile(mode="reduce-overhead")`` where it runs; ``launchpad.record`` (a new output each
replay). Each is measured twice: the host's cost per step (batches without synchronization, as
the launch benchmarks) and the wall time of a GPU-bound loop of steps closed by one synchronization.
"""

from __future__ import annotations

from typing import Any

from .harness import Entry, Missing, Timed, WrongResult

__all__ = ["decode_entries"]

B, D, V, POSITIONS = 8, 1024, 8192, 4096
SOURCE = r"""
extern "C" __global__ void rotary_scale(float* h, const long long* pos, int d) {
    int b = blockIdx.x, i = threadIdx.x + blockIdx.y * blockDim.x;
    if (i < d) h[b * d + i] *= __cosf(pos[b] * 1e-3f * (i % 64));
}
"""
TRITON_SOURCE = """
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * tl.sigmoid(1.702 * x), mask=mask)  # GELU, the sigmoid approximation
"""


class DecodeStep:
    """The weights, the kernels and the step; ``step(tokens, positions) -> logits``."""

    def __init__(self, ctx: Any) -> None:
        import torch

        import launchpad

        self.torch = torch
        gen = torch.Generator(device="cuda").manual_seed(1)
        self.embed = torch.randn(V, D, device="cuda", generator=gen) / D**0.5
        self.pos_embed = torch.randn(POSITIONS, D, device="cuda", generator=gen) / D**0.5
        self.w1 = torch.randn(D, 4 * D, device="cuda", generator=gen) / D**0.5
        self.w2 = torch.randn(4 * D, D, device="cuda", generator=gen) / (4 * D) ** 0.5
        self.rotary = launchpad.compile_cuda(SOURCE, "rotary_scale")[(B, D // 256), 256]
        gelu = ctx.load_module("launchpad_bench_decode_gelu", TRITON_SOURCE).gelu_kernel
        self.gelu = launchpad.triton_launcher(gelu)
        self.inputs = [(torch.randint(0, V, (B,), device="cuda", generator=gen),
                        torch.randint(0, POSITIONS, (B,), device="cuda", generator=gen)) for _ in range(4)]  # fmt: skip

    def step(self, tokens: Any, positions: Any) -> Any:
        torch = self.torch
        h = self.embed[tokens] + self.pos_embed[positions]  # torch's indexing reads both inputs
        self.rotary(h, positions, D)  # launchpad C++ kernel, in place
        a = torch.nn.functional.layer_norm(h, (D,))
        up = a @ self.w1
        act = torch.empty_like(up)
        self.gelu[(up.numel() // 1024,)](up, act, up.numel(), BLOCK=1024)  # Triton
        h = h + act @ self.w2
        return torch.nn.functional.layer_norm(h, (D,)) @ self.embed.T  # logits (B, V)


def _step(ctx: Any) -> DecodeStep:
    return ctx.once("decode step", lambda: DecodeStep(ctx))


def _timed(s: DecodeStep, call: Any, what: str, note: str) -> Timed:
    """``call(tokens, positions)`` checked against eager once, then timed over the rotating inputs."""
    import itertools

    tokens, positions = s.inputs[1]
    if not s.torch.allclose(call(tokens, positions), s.step(tokens, positions), rtol=1e-4, atol=1e-4):
        raise WrongResult(f"wrong result: {what} differs from eager")
    inputs = itertools.cycle(s.inputs)
    return Timed(lambda: call(*next(inputs)), note=note)


def eager(ctx: Any) -> Timed:
    s = _step(ctx)
    return _timed(s, s.step, "eager", "the step, op by op")


def torch_graph(ctx: Any) -> Timed:
    s, torch = _step(ctx), _step(ctx).torch
    tokens_s, positions_s = (t.clone() for t in s.inputs[0])
    s.step(tokens_s, positions_s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = s.step(tokens_s, positions_s)

    def call(tokens: Any, positions: Any) -> Any:
        tokens_s.copy_(tokens)
        positions_s.copy_(positions)
        graph.replay()
        return out

    return _timed(s, call, "torch's graph", "2 copy_ into static inputs, graph.replay(); output overwritten")


def graphed_callables(ctx: Any) -> Timed:
    s, torch = _step(ctx), _step(ctx).torch
    try:
        graphed = torch.cuda.make_graphed_callables(s.step, s.inputs[0], num_warmup_iters=3)
    except Exception as exc:
        raise Missing(f"make_graphed_callables: {type(exc).__name__}: {exc}") from None
    return _timed(s, graphed, "make_graphed_callables", "torch.cuda.make_graphed_callables(step, sample inputs)")


def compiled(ctx: Any) -> Timed:
    s, torch = _step(ctx), _step(ctx).torch
    try:
        fn = torch.compile(s.step, mode="reduce-overhead", fullgraph=False)
        for _ in range(3):
            fn(*s.inputs[0])
        return _timed(s, fn, "torch.compile", "torch.compile(step, mode='reduce-overhead')")
    except WrongResult:
        raise
    except Exception as exc:
        raise Missing(f"torch.compile(mode='reduce-overhead'): {type(exc).__name__}: {str(exc)[:200]}") from None


def recorded(ctx: Any) -> Timed:
    import launchpad

    s = _step(ctx)
    seq = launchpad.record(s.step, *s.inputs[0])
    return _timed(s, seq, "the recorded sequence", f"launchpad.record(step): seq(tokens, positions); {seq.nodes} nodes")


def decode_entries() -> list[Entry]:
    return [
        Entry("decode_eager", "decode step, eager", "peer", eager),
        Entry("decode_torch_graph", "decode step, torch CUDAGraph after copy_", "peer", torch_graph),
        Entry("decode_graphed", "decode step, torch.cuda.make_graphed_callables", "peer", graphed_callables),
        Entry("decode_compile", "decode step, torch.compile(mode='reduce-overhead')", "peer", compiled),
        Entry("decode_record", "decode step, launchpad.record", "launchpad", recorded),
    ]
