"""Where a checked launch's time goes: launch variants that each leave one step out, timed in one
run, interleaved, as differences to the C floor.

Run on a GPU: ``python -m launchpad.bench.breakdown``. Each row is a launch (or a call) that differs
from the one above it by one piece of work, so the difference between rows is that piece's cost:
the bound launch is the driver call with the GIL released; a launch of a kernel with no parameters
adds the per-launch fixed work (device, entry, grid and block, stream); the raw-pointer launch adds
three scalar arguments; the tensor launch adds reading two tensors from torch's fields (and the
same launch through torch's DLPack exchange API, as before launchpad/launch/torch_fields.py); the Triton
launch adds its constexpr check, two NULL scratch pointers and the launch-hook check. Then a
32-tensor launch against its own C floor gives the cost of one tensor argument (both ways), and a C loop of
torch's DLPack read (``dltensor_from_py_object_no_sync``, which every tensor argument costs) gives
torch's share of it.
"""

from __future__ import annotations

import ctypes
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

import launchpad

from ..launch import executor as _executor
from ..launch import torch_fields as _torch_fields
from .context import CPP_NAME, CPP_SOURCE, SWEEP_N, CFloor, Context, sweep_cpp_source
from .harness import Timed
from .launchers import pointer_value

ROUNDS, BATCH = 40, 400


def through_dlpack(call: Callable[[], object]) -> Callable[[int], None]:
    """``count`` calls with every tensor read through torch's DLPack exchange API (the fields unset
    for the batch, as ``LAUNCHPAD_TORCH_FIELDS=0`` leaves them): the same launch as before them."""

    def batch(count: int) -> None:
        fields = _torch_fields.current()
        _executor._claunch.set_torch_fields(None)
        try:
            for _ in itertools.repeat(None, count):
                call()
        finally:
            _executor._claunch.set_torch_fields(fields)

    return batch


def _time(calls: dict[str, Timed]) -> dict[str, float]:
    """Median ns per call of each, batches interleaved round-robin."""
    samples: dict[str, list[float]] = {k: [] for k in calls}
    for timed in calls.values():
        timed.run(BATCH)
    torch.cuda.synchronize()
    for r in range(ROUNDS):
        keys = list(calls)[r % len(calls) :] + list(calls)[: r % len(calls)]
        for key in keys:
            t0 = time.perf_counter_ns()
            calls[key].run(BATCH)
            samples[key].append((time.perf_counter_ns() - t0) / BATCH)
            torch.cuda.synchronize()
    return {k: statistics.median(v) for k, v in samples.items()}


STEPS = ("current device", "device entry", "grid, block, shared memory", "stream", "launch hooks", "arguments",
         "driver call (GIL released)", "release")  # fmt: skip


def _profile_steps(launches: dict) -> None:
    """With a profiling build of the compiled module (LAUNCHPAD_CFLAGS=-DLP_PROFILE): ns per step."""
    profile = getattr(_executor._claunch, "_profile", None)
    if profile is None:
        return
    print(f"{'ns per launch, by step':<30}" + "".join(f"{name[:14]:>15}" for name in launches))
    rows = {}
    for name, launch in launches.items():
        for _ in range(2000):
            launch()
        torch.cuda.synchronize()
        profile()
        for _ in range(20000):
            launch()
        torch.cuda.synchronize()
        count, steps = profile()
        rows[name] = [ns / max(count, 1) for ns in steps]
    for i, step in enumerate(STEPS):
        print(f"{step:<30}" + "".join(f"{rows[name][i]:15.0f}" for name in launches))


def main() -> int:
    if not torch.cuda.is_available():
        print("needs a GPU")
        return 1
    if _executor._claunch is None:  # its C floor, its DLPack loop and the launches it takes apart are the module's
        print(f"needs launchpad's compiled module ({launchpad.launch_path()[1]})")
        return 1
    work = Path(tempfile.mkdtemp(prefix="lp_breakdown_"))
    ctx = Context(work)
    x, y, n = ctx.x, ctx.y, ctx.n
    k = launchpad.compile_cuda(CPP_SOURCE, CPP_NAME)
    empty = launchpad.compile_cuda('extern "C" __global__ void empty() {}', "empty")
    floor = CFloor(ctx.device)
    batch = floor.launcher(floor.load(k), 1, 1024, [pointer_value(x), pointer_value(y), ctypes.c_int32(n)], ctx.stream)
    bound = k.bind(1, 1024, x, y, n)
    t = ctx.triton()
    tri = launchpad.from_triton(t.compiled)
    wide, many = launchpad.compile_cuda(sweep_cpp_source(32), "ptrs32"), ctx.sweep(32).ptrs
    wide_floor = floor.launcher(floor.load(wide), 1, SWEEP_N, [*map(pointer_value, many), ctypes.c_int32(SWEEP_N)],
                                ctx.stream)  # fmt: skip
    dlpack_loop = _executor._claunch.dlpack_loop
    raw_x, raw_y, stream = x.data_ptr(), y.data_ptr(), ctx.stream
    get_device, get_stream = torch._C._cuda_getDevice, torch._C._cuda_getCurrentRawStream
    calls = {
        "C floor (cuLaunchKernel in a C loop)": Timed(batch=batch),
        "bound launch (driver call, GIL released)": Timed(bound),
        "launch, no parameters (fixed per-launch work)": Timed(lambda: empty.launch(1, 1024)),
        "launch, 3 scalars (raw pointers and n)": Timed(lambda: k.launch(1, 1024, raw_x, raw_y, n)),
        "launch, 2 tensors and n (torch's fields)": Timed(lambda: k.launch(1, 1024, x, y, n)),
        "launch, 2 tensors and n, through DLPack": Timed(batch=through_dlpack(lambda: k.launch(1, 1024, x, y, n))),
        "launch, 2 tensors and n, stream= given": Timed(lambda: k.launch(1, 1024, x, y, n, stream=stream)),
        "Triton cubin, bound launch (its driver call)": Timed(tri.bind(1, None, x, y, n)),
        "Triton cubin launch (x, y, n; BLOCK built in)": Timed(lambda: tri.launch(1, None, x, y, n)),
        "C floor, 32 pointers and n": Timed(batch=wide_floor),
        "launch, 32 tensors and n": Timed(lambda: wide.launch(1, SWEEP_N, *many, SWEEP_N)),
        "launch, 32 tensors and n, through DLPack": Timed(
            batch=through_dlpack(lambda: wide.launch(1, SWEEP_N, *many, SWEEP_N))
        ),
        "torch: one tensor's DLPack read (C loop)": Timed(batch=lambda count: dlpack_loop(x, count)),
        "python: torch._C._cuda_getDevice()": Timed(lambda: get_device()),
        "python: torch._C._cuda_getCurrentRawStream(0)": Timed(lambda: get_stream(0)),
        "python: an empty lambda": Timed(lambda: None, through_lambda=True),
    }
    _profile_steps({"no parameters": lambda: empty.launch(1, 1024), "3 raw scalars": lambda: k.launch(1, 1024, raw_x, raw_y, n),
                    "2 tensors and n": lambda: k.launch(1, 1024, x, y, n),
                    "Triton cubin": lambda: tri.launch(1, None, x, y, n)})  # fmt: skip
    medians = _time(calls)
    base = medians["C floor (cuLaunchKernel in a C loop)"]
    previous: float | None = None
    path, why = launchpad.launch_path()
    print(f"launch path: {path}{f' ({why})' if why else ''}, {torch.cuda.get_device_name()}")
    print(f"{'variant':<50} {'ns':>8} {'x floor':>8} {'step':>8}")
    for key, value in medians.items():
        alone = previous is None or key.startswith(("python", "torch", "C floor, 32"))
        step = "" if alone or previous is None else f"{value - previous:+8.0f}"
        print(f"{key:<50} {value:8.0f} {value / base:8.3f} {step:>8}")
        previous = value
    fixed = medians["launch, no parameters (fixed per-launch work)"] - base
    wide_cost = medians["launch, 32 tensors and n"] - medians["C floor, 32 pointers and n"]
    per_tensor, read = (wide_cost - fixed) / 32, medians["torch: one tensor's DLPack read (C loop)"]
    dlpack_tensor = (
        medians["launch, 32 tensors and n, through DLPack"] - medians["C floor, 32 pointers and n"] - fixed
    ) / 32
    print(f"one tensor argument: {per_tensor:.0f} ns read from torch's fields, {dlpack_tensor:.0f} ns through DLPack "
          f"((32-tensor launch over its floor - the fixed work) / 32); torch's DLPack read alone: {read:.0f} ns; "
          f"tensor reads: {_torch_fields.state()}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
