"""A block under ``torch.compile`` (issue 29): launchpad's launches traced against Triton's own and
``torch_op``.

The block: ``h = x @ w`` (cuBLAS), a Triton kernel ``out = h * scale + bias`` (elementwise, 128 per
program), a C++ kernel ``out += 0.5 * x`` (256 threads a block), ``relu(out) * 2``. Variants, each
eager and compiled with ``torch.compile(fullgraph=True)`` in the default mode and in
``mode="reduce-overhead"``:

- ``launchpad``: ``lp.triton_launcher(fn)[grid]`` (traced as Triton's own launch) and the C++
  kernel's ``k[grid, block]`` (traced as its operator, :mod:`launchpad.tracing`);
- ``triton``: Triton's ``fn[grid]`` and the same C++ launch;
- ``cubin``: the Triton kernel as a launchpad ``Kernel`` (``lp.from_triton``) by ``k[grid]``, traced as
  its operator like the C++ kernel;
- ``torch_op``: both kernels registered by hand with :func:`launchpad.torch_op`.

Two figures per variant and mode, as in the other sections: the host's cost per step (batches with no
synchronization inside) and the wall time per step of a GPU-bound loop; medians; each checked against
eager's result first.

Fair to every variant (issue 37): each variant and mode is its own function (its own code object, so
Dynamo keeps its compiled code and guards apart from the others', rather than one cache entry list
whose order of compilation decides which guards a call checks first), all compiled before any is
timed (no ``torch._dynamo.reset()`` between them), and each round runs every variant once in a new
shuffled order. The ratios are per round (a variant's batch against Triton's default-mode batch of
the same round), given as their median with the p10-p90 spread.
"""

from __future__ import annotations

import itertools
import random
import types
from collections.abc import Callable
from typing import Any

from . import harness
from .harness import Entry, Missing, Timed, WrongResult
from .report import ratio_text, us

__all__ = ["compiled_section", "compiled_tables"]

ROWS, DIM = 64, 256
CPP = r"""
extern "C" __global__ void axpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""
MODES = {"eager": "eager", "default": "torch.compile(fullgraph=True)", "reduce-overhead":
         "torch.compile(fullgraph=True, mode='reduce-overhead')"}  # fmt: skip
VARIANTS = {
    "launchpad": "lp.triton_launcher(fn)[grid] + C++ k[grid, block]",
    "triton": "Triton fn[grid] + C++ k[grid, block]",
    "cubin": "Triton cubin Kernel k[grid] + C++ k[grid, block]",
    "torch_op": "both kernels as lp.torch_op operators",
}


def _blocks() -> dict[tuple[str, str], Callable[..., Any]]:
    """Each variant's block function ``f(x, w, bias)``."""
    import torch
    import triton
    import triton.language as tl

    import launchpad as lp

    @triton.jit
    def scale_bias(h, bias, out, n, dim, scale, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(out + i, tl.load(h + i, mask=m) * scale + tl.load(bias + i % dim, mask=m), mask=m)

    cpp = lp.compile_cuda(CPP, "axpy")
    launcher = lp.triton_launcher(scale_bias)
    cubin = launcher.warmup(
        *(torch.empty(ROWS * DIM, device="cuda") for _ in range(3)), ROWS * DIM, DIM, 1.5, BLOCK=128
    )
    ops = {
        "triton": lp.torch_op(f"lpbench::scale_bias_{id(cubin)}", cubin, names=("h", "bias", "out", "n", "dim", "scale"),
                              mutates=("out",), grid=lambda h, b, o, n, d, s: ((n + 127) // 128,)),
        "cpp": lp.torch_op(f"lpbench::axpy_{id(cpp)}", cpp, names=("y", "x", "a", "n"), mutates=("y",),
                           grid=lambda y, x, a, n: (n + 255) // 256, block=256),
    }  # fmt: skip

    def block(variant: str, mode: str) -> Callable[..., Any]:
        def f(x: Any, w: Any, bias: Any) -> Any:
            h = x @ w
            out = torch.empty_like(h)
            n = h.numel()
            grid = ((n + 127) // 128,)
            if variant == "launchpad":
                launcher[grid](h, bias, out, n, DIM, 1.5, BLOCK=128)
            elif variant == "triton":
                scale_bias[grid](h, bias, out, n, DIM, 1.5, BLOCK=128)
            elif variant == "cubin":
                cubin[grid](h, bias, out, n, DIM, 1.5)
            else:
                ops["triton"](h, bias, out, n, DIM, 1.5)
            if variant == "torch_op":
                ops["cpp"](out, x, 0.5, n)
            else:
                cpp[(n + 255) // 256, 256](out, x, 0.5, n)
            return torch.relu(out) * 2

        # a code object of its own: Dynamo caches compiled code per code object
        code = f.__code__.replace(co_name=f"block_{variant}_{mode}".replace("-", "_"))
        return types.FunctionType(code, f.__globals__, code.co_name, f.__defaults__, f.__closure__)

    return {(v, m): block(v, m) for v in VARIANTS for m in MODES}


def _entries() -> list[Entry]:
    import torch

    blocks = _blocks()
    torch._dynamo.reset()  # once, before any variant compiles
    gen = torch.Generator(device="cuda").manual_seed(3)
    w = torch.randn(DIM, DIM, device="cuda", generator=gen) / 16
    bias = torch.randn(DIM, device="cuda", generator=gen)
    batches = [torch.randn(ROWS, DIM, device="cuda", generator=gen) for _ in range(4)]
    reference = [(torch.relu((x @ w) * 1.5 + bias + 0.5 * x) * 2) for x in batches]

    def factory(variant: str, mode: str) -> Callable[[Any], Timed]:
        def make(_ctx: Any) -> Timed:
            fn = blocks[variant, mode]
            if mode != "eager":
                compiled = torch.compile(fn, fullgraph=True, mode=None if mode == "default" else mode)

                def fn(x: Any, w: Any, bias: Any) -> Any:
                    if mode == "reduce-overhead":
                        torch.compiler.cudagraph_mark_step_begin()
                    return compiled(x, w, bias)

            try:
                for x, expected in zip(batches, reference):
                    if not torch.allclose(fn(x, w, bias), expected, rtol=1e-4, atol=1e-4):
                        raise WrongResult("wrong result: differs from the block in torch ops")
            except (Missing, WrongResult):
                raise
            except Exception as exc:  # a graph break under fullgraph, a missing peer
                raise Missing(harness.describe(exc)) from None
            cycle = itertools.cycle(batches)
            return Timed(lambda: fn(next(cycle), w, bias), note=f"{VARIANTS[variant]}, {MODES[mode]}")

        return make

    return [Entry(f"compiled_{v}_{m}", f"{v}, {m}", "launchpad" if v != "triton" else "peer", factory(v, m))
            for m in MODES for v in VARIANTS]  # fmt: skip


def compiled_section(rounds: int, batch: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Check and time every variant in every mode (see the module documentation)."""
    import torch

    sync = torch.cuda.synchronize
    log("a block under torch.compile: launchpad's launches, Triton's fn[grid], torch_op")
    try:
        entries = _entries()
    except Exception as exc:
        return {"error": harness.describe(exc)}
    launchers, results = harness.set_up(entries, None, sync=sync, log=log)
    rng = random.Random(37)
    samples, errors = harness.measure(launchers, rounds=0, batch=batch, warmup=batch, sync=sync)  # warm-up
    for _ in range(rounds):  # one round at a time, each in a new order
        order = [lc for lc in launchers if lc.key not in errors]
        rng.shuffle(order)
        got, failed = harness.measure(order, rounds=1, batch=batch, warmup=0, sync=sync)
        errors.update(failed)
        for key, values in got.items():
            samples[key] = [*samples.get(key, []), *(values or [float("nan")])]
    for lc in launchers:
        harness.record_samples(results[lc.key], [v for v in samples[lc.key] if v == v], errors.get(lc.key))
    ready = [lc for lc in launchers if lc.key not in errors]
    walls: dict[str, list[float]] = {lc.key: [] for lc in ready}
    for _ in range(max(5, rounds // 4)):
        order = [lc for lc in ready if lc.key not in errors]
        rng.shuffle(order)
        got, failed = harness.measure_e2e(order, launches=max(20, batch), repeats=1, sync=sync)
        errors.update(failed)
        for key, values in got.items():
            walls[key] = [*walls[key], *(values or [float("nan")])]
    for lc in ready:
        harness.record_e2e(results[lc.key], [v for v in walls[lc.key] if v == v], errors.get(lc.key))
    harness.add_ratios(results, "compiled_triton_default")
    _paired_ratios(results, samples, walls, "compiled_triton_default")
    return {"block": f"x @ w ({ROWS}x{DIM} @ {DIM}x{DIM}), a Triton and a C++ kernel, relu * 2", "results": results}


def _paired_ratios(results: dict[str, Any], host: dict[str, list[float]], wall: dict[str, list[float]],
                   base: str) -> None:  # fmt: skip
    """Each record's ratio to ``base`` round by round (the same round's batches), summarized: the
    median and its p10-p90 spread, in place of the ratio of two medians."""
    for part, samples in (("ratio", host), ("e2e_ratio", wall)):
        reference = samples.get(base, [])
        for key, values in samples.items():
            pairs = [v / r for v, r in zip(values, reference) if v == v and r == r and r > 0]
            if pairs and key in results:
                stats = harness.summarize(pairs)
                results[key][f"paired_{part}"] = {k: stats[k] for k in ("median", "p10", "p90", "n")}


def _ratio_cell(record: dict[str, Any], part: str) -> str:
    paired = record.get(f"paired_{part}")
    if not paired:
        return ""
    return f"{ratio_text(paired['median'])} ({paired['p10']:.2f}-{paired['p90']:.2f})"


def compiled_tables(section: dict[str, Any], table: Callable[..., str], head: str) -> str:
    """One table: host and wall time per step of each variant and mode, ratios to Triton's
    ``fn[grid]`` compiled in the default mode."""
    rows = []
    for rec in section["results"].values():
        if rec.get("status") != "ok" or "stats" not in rec:
            rows.append([rec["label"], f"{rec.get('status', 'missing')}: {rec.get('reason', '')}"])
            continue
        wall = harness.median_of(rec, "e2e")
        host_ratio = _ratio_cell(rec, "ratio") or ratio_text((rec.get("ratio") or {}).get("median"))
        wall_ratio = _ratio_cell(rec, "e2e_ratio") or ratio_text(
            ((rec.get("e2e") or {}).get("ratio") or {}).get("median")
        )
        rows.append([rec["label"], us(rec["stats"]["median"], 1), us(wall, 1) if wall else "", host_ratio,
                     wall_ratio])  # fmt: skip
    return (f"{head}A block under torch.compile\n\n{section['block']}. Host: us per step of the host's work; wall: us "
            "per step of a GPU-bound loop; ratios to Triton's fn[grid] compiled in the default mode, round by round "
            "(every round runs each variant once, in a new shuffled order): median (p10-p90).\n\n"
            + table(["variant, mode", "host us/step", "wall us/step", "host x triton", "wall x triton"], rows))  # fmt: skip
