"""Recorded sequences against torch's CUDAGraph after ``copy_``, as the inputs grow: the wall time
of a GPU-bound loop of steps.

The step is 20 kernels ``out[j] = a * x + y`` over ``n`` floats (a grid-stride loop of up to 1024
blocks); each step has 2 new input tensors. A replay re-points the 20 nodes at them (from the
device; a second sequence from the host, for comparison); torch's graph copies them into its
static buffers first (2 copies of ``4n`` bytes each). torch's replay alone, with no new input,
is the floor. Each figure is one
step's share of a loop of back-to-back steps closed by one synchronization (the GPU paces it);
medians over rounds that alternate the two launchers. From 16 KB to 256 MB per input.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from .harness import WrongResult

__all__ = ["SIZES", "measure_sizes"]

#: Floats per input: 16 KB, 256 KB, 4 MB, 64 MB and 256 MB.
SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 24, 1 << 26)
KERNELS = 20
SOURCE = r"""
extern "C" __global__ void axpy_grid(float a, const float* x, const float* y, float* out, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = a * x[i] + y[i];
}
"""


class _SizedStep:
    def __init__(self, n: int) -> None:
        import torch

        import launchpad

        self.torch, self.n = torch, n
        self.kernel = launchpad.compile_cuda(SOURCE, "axpy_grid")[min(1024, (n + 255) // 256), 256]
        gen = torch.Generator(device="cuda").manual_seed(n)
        self.sets = [(torch.randn(n, device="cuda", generator=gen), torch.randn(n, device="cuda", generator=gen))
                     for _ in range(2)]  # fmt: skip
        self.out = torch.empty(KERNELS, n, device="cuda")

    def launches(self, x: Any, y: Any) -> None:
        for j in range(KERNELS):
            self.kernel(0.5, x, y, self.out[j], self.n)

    def check(self, x: Any, y: Any) -> None:
        self.torch.cuda.synchronize()
        if not self.torch.allclose(self.out[-1], 0.5 * x + y, rtol=1e-6, atol=1e-6):
            raise WrongResult("wrong result: the step's last output differs from torch")


def _variants(step: _SizedStep) -> dict[str, Any]:
    import torch

    import launchpad
    from launchpad.sequences import updates

    seq = launchpad.record(step.launches, *step.sets[0])
    device_updater = updates.updater
    updates.updater = lambda device: (0, "switched off by the benchmark")
    try:
        host = launchpad.record(step.launches, *step.sets[0])
    finally:
        updates.updater = device_updater
    xs, ys = torch.empty_like(step.sets[0][0]), torch.empty_like(step.sets[0][1])
    step.launches(xs, ys)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step.launches(xs, ys)
    turn = [0]

    def new_inputs(sequence: Any) -> Any:
        def replay() -> None:
            turn[0] ^= 1
            sequence(*step.sets[turn[0]])

        return replay

    def copy_and_replay() -> None:
        turn[0] ^= 1
        x, y = step.sets[turn[0]]
        xs.copy_(x)
        ys.copy_(y)
        graph.replay()

    calls = {"seq_new": new_inputs(seq), "torch_copy": copy_and_replay, "seq_host": new_inputs(host),
             "torch_replay": graph.replay}  # fmt: skip
    for key in ("seq_new", "torch_copy", "seq_host"):
        calls[key]()
        step.check(*step.sets[turn[0]])
    calls["_keep"] = (seq, host, graph)
    return calls


def measure_sizes(rounds: int = 7, log: Any = print) -> dict[str, Any]:
    """``{size: {"seq_new": us per step, "torch_copy", "seq_host", "torch_replay": ..., "ratio": seq_new /
    torch_copy}}``, or ``{size: {"error": why}}``."""
    import torch

    out: dict[str, Any] = {}
    for n in SIZES:
        label = f"{4 * n // 1024} KB" if n < 1 << 18 else f"{4 * n // (1 << 20)} MB"
        try:
            step = _SizedStep(n)
            calls = _variants(step)
            steps = max(5, min(200, int(2e5 // n) + 5))
            keys = ["seq_new", "torch_copy", "seq_host", "torch_replay"]
            walls: dict[str, list[float]] = {key: [] for key in keys}
            for r in range(rounds):
                for key in keys[r % len(keys) :] + keys[: r % len(keys)]:  # each first in turn
                    call = calls[key]
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(steps):
                        call()
                    torch.cuda.synchronize()
                    walls[key].append((time.perf_counter() - t0) / steps * 1e6)
            row = {key: statistics.median(v) for key, v in walls.items()}
            row["ratio"] = row["seq_new"] / row["torch_copy"]
            out[label] = row
            log(f"  {label:>7} per input: seq {row['seq_new']:9.1f} us, torch graph + copy_ {row['torch_copy']:9.1f} us "
                f"per step ({row['ratio']:.3f}x); seq updated from the host {row['seq_host']:9.1f}, torch's replay alone "
                f"{row['torch_replay']:9.1f}")  # fmt: skip
            del step, calls
        except Exception as exc:  # one size failing leaves the others
            out[label] = {"error": f"{type(exc).__name__}: {exc}"}
        torch.cuda.empty_cache()
    return out
