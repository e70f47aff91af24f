"""Recorded sequences against their anchors: a step of 20 small kernels with 2 new input tensors
and 1 new scalar each time.

Each launcher issues whole steps (``per_call`` = 20 kernels, so its figure is per kernel and its
ratio is to one C-floor launch): the 20 launches one by one through launchpad; torch's
``CUDAGraph`` replayed after ``copy_`` of the new tensors into its static inputs and the scalar
into a device tensor (its kernels read the scalar from memory); the recorded sequence replayed
with nothing new (the lower bound); and the recorded sequence replayed with the new inputs, read
by all 20 kernels, by 4 or by 1 (how the cost grows with the nodes updated), and with its nodes
updated from the host instead of the device. Steps rotate among four input sets. Two figures per
launcher: the host's cost (batches of steps without a synchronization inside: the GPU runs
behind) and the wall time of a GPU-bound loop of steps closed by one synchronization (what the
GPU's own work per step costs, updates included). Every launcher's last step is checked against
torch.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
from typing import Any

from .harness import Entry, Timed, WrongResult

__all__ = ["KERNELS", "SEQUENCE_KEYS", "UPDATED", "sequence_entries"]

KERNELS = 20
UPDATED = (1, 4, 20)
N = 1024
SOURCE = r"""
extern "C" __global__ void axpby(float a, const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}
extern "C" __global__ void axpby_from_memory(const float* a, const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[0] * x[i] + y[i];
}
"""


class Step:
    """The kernels, the rotating input sets and the outputs every launcher shares."""

    def __init__(self) -> None:
        import torch

        import launchpad

        self.torch = torch
        kernels = launchpad.compile_cuda_module(SOURCE, ["axpby", "axpby_from_memory"])
        self.axpby, self.from_memory = kernels["axpby"], kernels["axpby_from_memory"]
        gen = torch.Generator(device="cuda").manual_seed(0)
        self.inputs = [(torch.randn(N, device="cuda", generator=gen), torch.randn(N, device="cuda", generator=gen),
                        float(i) * 0.25 + 0.5) for i in range(4)]  # fmt: skip
        self.fixed = (torch.randn(N, device="cuda", generator=gen), torch.randn(N, device="cuda", generator=gen))
        self.out = torch.empty(KERNELS, N, device="cuda")

    def rotation(self) -> Any:
        return itertools.cycle(self.inputs)

    def reference(self, reads: int, x: Any, y: Any, a: float) -> Any:
        fx, fy = self.fixed
        rows = [a * x + y if j < reads else 1.5 * fx + fy for j in range(KERNELS)]
        return self.torch.stack(rows)

    def check(self, reads: int, x: Any, y: Any, a: float) -> None:
        self.torch.cuda.synchronize()
        if not self.torch.allclose(self.out, self.reference(reads, x, y, a), rtol=1e-6, atol=1e-6):
            raise WrongResult("wrong result: the step's outputs differ from torch")

    def launches(self, x: Any, y: Any, a: float, reads: int = KERNELS) -> None:
        """The step, one launch at a time: the first ``reads`` kernels read the inputs."""
        k, out, (fx, fy) = self.axpby[1, N], self.out, self.fixed
        for j in range(KERNELS):
            if j < reads:
                k(a, x, y, out[j], N)
            else:
                k(1.5, fx, fy, out[j], N)


def _step(ctx: Any) -> Step:
    return ctx.once("sequence step", Step)


def floor(ctx: Any) -> Timed:
    s, fl = _step(ctx), ctx.cfloor()
    x, y, _ = s.inputs[0]
    values = [ctypes.c_float(1.0), ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()),
              ctypes.c_void_p(s.out.data_ptr()), ctypes.c_int32(N)]  # fmt: skip
    return Timed(batch=fl.launcher(fl.load(s.axpby), 1, N, values, ctx.stream),
                 note="cuLaunchKernel of the step's kernel in a C loop, prepacked")  # fmt: skip


def one_by_one(ctx: Any) -> Timed:
    s = _step(ctx)
    inputs = s.rotation()
    call = lambda: s.launches(*next(inputs))
    x, y, a = s.inputs[-1]
    s.launches(x, y, a)
    s.check(KERNELS, x, y, a)
    return Timed(call, per_call=KERNELS, note=f"{KERNELS} k[1, {N}](a, x, y, out[j], n) calls; time / {KERNELS}")


def torch_graph(ctx: Any) -> Timed:
    s, torch = _step(ctx), ctx.torch
    x_s, y_s, a_s = torch.empty(N, device="cuda"), torch.empty(N, device="cuda"), torch.empty(1, device="cuda")
    k = s.from_memory[1, N]
    k(a_s, x_s, y_s, s.out[0], N)  # loaded before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for j in range(KERNELS):
            k(a_s, x_s, y_s, s.out[j], N)
    inputs = s.rotation()

    def call() -> None:
        x, y, a = next(inputs)
        x_s.copy_(x)
        y_s.copy_(y)
        a_s.fill_(a)
        graph.replay()

    for _ in range(len(s.inputs)):
        call()
    s.check(KERNELS, *s.inputs[-1])
    return Timed(call, per_call=KERNELS,
                 note="x_s.copy_(x); y_s.copy_(y); a_s.fill_(a); graph.replay(); time / 20")  # fmt: skip


def graph_alone(ctx: Any) -> Timed:
    s, torch = _step(ctx), ctx.torch
    k = s.axpby[1, N]
    x, y, a = s.inputs[0]
    k(a, x, y, s.out[0], N)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for j in range(KERNELS):
            k(a, x, y, s.out[j], N)
    graph.replay()
    s.check(KERNELS, x, y, a)
    return Timed(graph.replay, per_call=KERNELS, note="graph.replay() with nothing new: the GPU's floor; time / 20")


def _sequence(ctx: Any, reads: int, compiled: bool | None = None, host: bool = False) -> tuple[Step, Any]:
    import launchpad
    from launchpad.sequences import updates

    s = _step(ctx)
    x, y, a = s.inputs[0]
    device_updater = updates.updater
    if host:  # the nodes updated from the host, as before device-side updates: the same run's comparison
        updates.updater = lambda device: (0, "switched off by the benchmark")
    try:
        return s, launchpad.record(functools.partial(s.launches, reads=reads), x, y, a, compiled=compiled)
    finally:
        updates.updater = device_updater


def plain(ctx: Any) -> Timed:
    s, seq = _sequence(ctx, KERNELS)
    seq(*s.inputs[0])
    s.check(KERNELS, *s.inputs[0])
    return Timed(seq, per_call=KERNELS, note="seq(): the recorded graph, nothing new")


def replaying(reads: int, compiled: bool | None = None, host: bool = False) -> Any:
    def factory(ctx: Any) -> Timed:
        s, seq = _sequence(ctx, reads, compiled, host)
        inputs = s.rotation()
        call = lambda: seq(*next(inputs))
        for _ in range(len(s.inputs)):
            call()
        s.check(reads, *s.inputs[-1])
        return Timed(call, per_call=KERNELS,
                     note=f"seq(x, y, a) rotating 4 input sets; {reads} of {KERNELS} nodes updated; time / 20")  # fmt: skip

    return factory


def sequence_entries() -> list[Entry]:
    replays = [
        Entry(f"seq_new_{n}", f"launchpad.record: replay, new inputs in {n} of {KERNELS} nodes, per kernel",
              "launchpad", replaying(n))
        for n in UPDATED
    ]  # fmt: skip
    python = Entry("seq_new_20_python", f"launchpad.record: replay, new inputs in {KERNELS} nodes, Python replay, "
                   "per kernel", "launchpad", replaying(KERNELS, compiled=False))  # fmt: skip
    host = Entry("seq_new_20_host", f"launchpad.record: replay, new inputs in {KERNELS} nodes, updated from the host, "
                 "per kernel", "launchpad", replaying(KERNELS, host=True))  # fmt: skip
    return [
        Entry("c_floor", "C loop calling cuLaunchKernel (the floor), per kernel", "floor", floor),
        Entry("seq_one_by_one", f"{KERNELS} launchpad launches one by one, per kernel", "launchpad", one_by_one),
        Entry("seq_torch_graph", "torch CUDAGraph after copy_ of the inputs, per kernel", "peer", torch_graph),
        Entry("seq_torch_replay", "torch CUDAGraph replay alone, nothing new, per kernel", "graph", graph_alone),
        Entry("seq_plain", "launchpad.record: replay, nothing new, per kernel", "graph", plain),
        *replays,
        python,
        host,
    ]


SEQUENCE_KEYS = [e.key for e in sequence_entries()]
