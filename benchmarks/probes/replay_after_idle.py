"""The host cost of a replay right after the device went idle (a training loop that reads its loss
each step), launchpad's against torch's graph, on the bench's two training steps.

Run on a GPU machine from the checkout's root: ``PYTHONPATH=. python3 benchmarks/probes/replay_after_idle.py``.
Each figure is the median of 30 trials of: synchronize, sleep 2 ms, (two calls), one timed call.
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

import launchpad
from launchpad.bench import sequence_training as stt


def after_idle(
    call: Callable[..., Any], batches: Iterator[tuple], trials: int = 30, skip: int = 0
) -> tuple[float, float]:
    """Median and least µs of the call made after ``skip`` others, each trial from an idle device."""
    out = []
    for _ in range(trials):
        args = [next(batches) for _ in range(skip + 1)]
        torch.cuda.synchronize()
        time.sleep(0.002)
        for a in args[:skip]:
            call(*a)
        t = time.perf_counter_ns()
        call(*args[-1])
        out.append((time.perf_counter_ns() - t) / 1e3)
        torch.cuda.synchronize()
    return statistics.median(out), min(out)


def variants(work: stt.Workload) -> dict[str, Callable[..., Any]]:
    copied, alone = stt.torch_graph(work, copies=True), stt.torch_graph(work, copies=False)
    return {
        "seq": launchpad.record(stt.Trainer(work).step, *work.batches[0]),
        "seq host_updates": launchpad.record(stt.Trainer(work).step, *work.batches[0], host_updates=True),
        "graph+copy_": lambda x, y: copied.call(),
        "graph alone": lambda x, y: alone.call(),
        "torch.empty": lambda x, y: torch.empty((), device="cuda"),
        "x.add_(0) (one kernel)": lambda x, y: x.add_(0),
    }


def main() -> None:
    for name in ("transformer", "mlp"):
        work = stt.Workload(name)
        batches = itertools.cycle(work.batches)
        print(f"== {name}")
        for label, call in variants(work).items():
            first, least = after_idle(call, batches)
            third, _ = after_idle(call, batches, skip=2)
            print(f"  {label:24s} first after a sync: {first:7.1f} us (min {least:6.1f}); third: {third:6.1f} us")


if __name__ == "__main__":
    main()
