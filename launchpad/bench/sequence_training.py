"""A training step recorded, against eager, torch's ``CUDAGraph`` and ``torch.compile``.

Two models (:data:`MODELS`), each trained by ``AdamW(capturable=True, foreach=True)`` on the MSE
to random targets; the step: ``zero_grad(set_to_none=True)``, forward, loss, ``backward()``,
``optimizer.step()``, return the loss. Variants: eager; torch's ``CUDAGraph`` of the step (warmed
up on a side stream, as torch's documentation does it), replayed after ``copy_`` of each batch
into its static input and target; ``launchpad.record(step, x, y)`` replayed as ``seq(x, y)``, its
nodes changed from the device (launchpad's updater node) and, with ``host_updates=True``, from the
host;
``torch.compile(mode="reduce-overhead")`` of the forward and loss (``backward()`` and the step
called eagerly), and of the whole step (the note counts Dynamo's graph breaks). Each variant
trains its own copy of the same weights and is checked before it is timed: weights and optimizer
state reset in place, the losses of :data:`CHECK_STEPS` steps on the same batches compared with
eager's (:data:`RTOL`, :data:`COMPILE_RTOL` for torch.compile) and bit for bit. Batches rotate
through a pool. Two figures per variant, as in the rest of the section: the host's cost per step
and the wall time per step of a GPU-bound loop; medians; ratios to torch's graph after ``copy_``.
"""

from __future__ import annotations

import copy
import functools
import gc
import itertools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import harness
from .harness import Entry, Failed, Missing, Timed, WrongResult
from .training_tables import check_text, determinism_text, training_tables

__all__ = ["CHECK_STEPS", "COMPILE_RTOL", "MODELS", "RTOL", "Workload", "check_text", "first_line", "main",
           "measure_training", "training_entries", "training_tables"]  # fmt: skip

MODELS = {
    "mlp": "MLP: 3 Linear(1024, 1024) with GELU between, batch 64",
    "transformer": "transformer block: LayerNorm, 4-head causal attention (F.scaled_dot_product_attention), "
    "LayerNorm, MLP 256-1024-256; d_model 256, sequence 128, batch 8",
}
SHAPES = {"mlp": (64, 1024), "transformer": (8, 128, 256)}  # of the input and of the target
HEADS = 4
LR = 1e-3
POOL = 8  # batches in the rotation
CHECK_STEPS = 5
RTOL = 1e-4  # eager, torch's graph, launchpad.record: the same kernels
COMPILE_RTOL = 1e-3  # torch.compile: inductor's fused kernels round differently
GRAPH = "torch_graph"  # the variant the ratios are to
FIRST_PHASE = (GRAPH, "record", "record_host", "graph_alone")  # timed together, interleaved


def first_line(exc: BaseException, limit: int = 300) -> str:
    """``"Type: first line"`` of an exception, with the second line where the first only announces
    it (``backend='inductor' raised:``)."""
    lines = [" ".join(line.split()) for line in str(exc).splitlines() if line.strip()]
    text = lines[0] + (" " + lines[1] if len(lines) > 1 and lines[0].endswith(":") else "") if lines else ""
    if not isinstance(exc, (Missing, WrongResult)):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def build_model(name: str) -> Any:
    """A fresh model (on the CPU, torch's default initialization)."""
    import torch
    from torch import nn

    if name == "mlp":
        d = SHAPES["mlp"][1]
        return nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d), nn.GELU(), nn.Linear(d, d))
    d = SHAPES["transformer"][2]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4).unbind(0)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
            return x + self.mlp(self.ln2(x))

    return Block()


class Trainer:
    """One variant's copy of the model and its AdamW; :meth:`step` is the training step."""

    def __init__(self, work: Workload) -> None:
        import torch

        self.torch, self.work = torch, work
        self.model = copy.deepcopy(work.template)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=LR, foreach=True, capturable=work.device != "cpu")
        self.loss_of: Callable[[Any, Any], Any] = self.forward_loss  # torch.compile's forward variant swaps it

    def forward_loss(self, x: Any, y: Any) -> Any:
        return self.torch.nn.functional.mse_loss(self.model(x), y)

    def step(self, x: Any, y: Any) -> Any:
        self.opt.zero_grad(set_to_none=True)
        loss = self.loss_of(x, y)
        loss.backward()
        self.opt.step()
        return loss.detach()

    def reset(self) -> None:
        """The initial weights and a fresh optimizer state, in place (graphs read them where they are)."""
        with self.torch.no_grad():
            for p, p0 in zip(self.model.parameters(), self.work.template.parameters()):
                p.copy_(p0)
            for state in self.opt.state.values():
                for value in state.values():
                    if isinstance(value, self.torch.Tensor):
                        value.zero_()  # step, exp_avg, exp_avg_sq: what a fresh AdamW starts from


class Workload:
    """A model's initial weights (``template``), its batches, eager's losses and each variant's
    check; ``device="cpu"`` runs the eager step only (the tests)."""

    def __init__(self, name: str, device: str = "cuda") -> None:
        import torch

        self.torch, self.name, self.device = torch, name, device
        with torch.random.fork_rng(devices=[]):  # the same weights every run, the global generator left alone
            torch.random.default_generator.manual_seed(0)
            self.template = build_model(name).to(device)
        gen = torch.Generator(device=device).manual_seed(1)
        shape = SHAPES[name]
        self.batches = [(torch.randn(shape, device=device, generator=gen),
                         torch.randn(shape, device=device, generator=gen)) for _ in range(POOL)]  # fmt: skip
        self.losses: dict[str, Any] = {}
        self.checks: dict[str, dict[str, Any]] = {}
        self.deterministic: bool | None = None
        self._reference: Any = None

    def losses_of(self, trainer: Trainer, call: Callable[[Any, Any], Any]) -> Any:
        """The losses of :data:`CHECK_STEPS` calls from the initial state on the first batches (float64, CPU)."""
        trainer.reset()
        losses = [call(x, y).detach().clone() for x, y in self.batches[:CHECK_STEPS]]
        return self.torch.stack(losses).double().cpu()

    def reference(self) -> Any:
        """Eager's losses; run twice, which says whether the step is deterministic."""
        if self._reference is None:
            t = Trainer(self)
            first, second = self.losses_of(t, t.step), self.losses_of(t, t.step)
            self.deterministic = bool(self.torch.equal(first, second))
            self._reference = first
        return self._reference

    def check(self, variant: str, trainer: Trainer, call: Callable[[Any, Any], Any], rtol: float) -> dict[str, Any]:
        """Compare a variant's losses with eager's; raise :class:`WrongResult` beyond ``rtol``."""
        reference, losses = self.reference(), self.losses_of(trainer, call)
        rel = float(((losses - reference).abs() / reference.abs()).max())
        check: dict[str, Any] = {"steps": CHECK_STEPS, "rtol": rtol, "max_rel_diff": rel, "losses": losses.tolist(),
                                 "bit_identical": bool(self.torch.equal(losses, reference))}  # fmt: skip
        if variant != GRAPH and GRAPH in self.losses:
            check["bit_identical_to_torch_graph"] = bool(self.torch.equal(losses, self.losses[GRAPH]))
        self.losses[variant], self.checks[variant] = losses, check
        if not rel <= rtol:
            raise WrongResult(f"wrong result: the losses of {CHECK_STEPS} steps differ from eager's by {rel:.1e} "
                              f"relative (tolerance {rtol:g})")  # fmt: skip
        return check

    def timed(self, call: Callable[[Any, Any], Any], note: str) -> Timed:
        batches = itertools.cycle(self.batches)
        return Timed(lambda: call(*next(batches)), note=note)


# --- the variants ----------------------------------------------------------------------------------


def eager(work: Workload) -> Timed:
    t = Trainer(work)
    work.check("eager", t, t.step, RTOL)
    return work.timed(t.step, "the step as written")


def torch_graph(work: Workload, copies: bool = True) -> Timed:
    """torch's graph of the step, the batch copied into its static inputs first; without ``copies``,
    the graph replayed alone: no training step (each replay trains on the captured batch again) but
    the host cost of launching this graph, under any replay of it."""
    torch, t = work.torch, Trainer(work)
    x_s, y_s = (v.clone() for v in work.batches[0])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as torch's documentation does it
        for _ in range(3):
            t.step(x_s, y_s)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # cuBLAS's workspace inside the graph's pool: torch.compile's variants clear torch's table of them,
    # which would free one this graph still uses (an illegal address on the H100 when they ran first)
    getattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: None)()
    with torch.cuda.graph(graph):
        loss_s = t.step(x_s, y_s)

    def replay(x: Any, y: Any, trainer: Trainer = t) -> Any:
        # (``trainer`` held: the graph reads and writes its weights and optimizer state where they are.
        # Dropped with this function's frame, their memory went back to torch while the graph still
        # used it, and the next variant's set-up took it or unmapped it: an illegal address, or
        # another variant's tensors overwritten.)
        x_s.copy_(x)
        y_s.copy_(y)
        graph.replay()
        return loss_s

    if not copies:

        def launch_alone(x: Any, y: Any, trainer: Trainer = t, inputs: tuple = (x_s, y_s)) -> Any:
            # (``inputs`` held as ``trainer`` is: the graph reads them where they are)
            graph.replay()
            return loss_s

        return work.timed(launch_alone, "graph.replay() alone, no copies: the host cost of launching the graph")
    work.check(GRAPH, t, replay, RTOL)
    return work.timed(replay, "x_s.copy_(x); y_s.copy_(y); graph.replay(); the loss is the static tensor")


def recorded(work: Workload, host_updates: bool = False) -> Timed:
    import launchpad

    t = Trainer(work)
    seq = launchpad.record(t.step, *work.batches[0], host_updates=host_updates)
    work.check("record_host" if host_updates else "record", t, seq, RTOL)
    updates = seq.update_note or "nodes updated from the device"
    copies = "".join(f"; {line}" for line in seq.explain().splitlines() if "copied" in line)  # what each copy is for
    return work.timed(seq, f"seq(x, y): {seq!r}, {seq.replay_path} replay, {updates}{copies}")


def _dynamo_counts() -> tuple[int, int]:
    """Dynamo's graph breaks and inductor's cudagraph skips so far."""
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values()), counters["inductor"]["cudagraph_skips"]


def compiled(work: Workload, whole: bool) -> Timed:
    torch, t = work.torch, Trainer(work)
    before = _dynamo_counts()
    if whole:
        fn = torch.compile(t.step, mode="reduce-overhead")
    else:
        t.loss_of = torch.compile(t.forward_loss, mode="reduce-overhead")
        fn = t.step

    def step(x: Any, y: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()  # a new step: the last step's graph outputs may be overwritten
        return fn(x, y)

    for x, y in work.batches[:3]:  # compile, record the graphs, replay
        step(x, y)
    breaks, skips = (a - b for a, b in zip(_dynamo_counts(), before))
    work.check("compile_step" if whole else "compile_forward", t, step, COMPILE_RTOL)
    return work.timed(step, f"cudagraph_mark_step_begin(); step(x, y): {breaks} graph breaks, {skips} cudagraph "
                      "skips while compiling")  # fmt: skip


VARIANTS: tuple[tuple[str, str, str, Callable[[Workload], Timed]], ...] = (
    ("eager", "eager", "peer", eager),
    (GRAPH, "torch CUDAGraph of the step after copy_ of x, y", "peer", torch_graph),
    ("record", "launchpad.record(step, x, y): seq(x, y)", "launchpad", recorded),
    ("record_host", "launchpad.record(step, x, y, host_updates=True): seq(x, y)", "launchpad",
     functools.partial(recorded, host_updates=True)),
    ("graph_alone", "torch CUDAGraph replayed alone (no copies; not a training step)", "peer",
     functools.partial(torch_graph, copies=False)),
    ("compile_forward", "torch.compile(forward + loss, reduce-overhead); backward(), AdamW step() called eagerly", "peer",
     functools.partial(compiled, whole=False)),
    ("compile_step", "torch.compile(whole step, AdamW included, reduce-overhead)", "peer",
     functools.partial(compiled, whole=True)),
)  # fmt: skip


def training_entries(work: Workload) -> list[Entry]:
    """The variants of a model as harness entries, ``train_<model>_<variant>``; a variant that fails
    to set up raises its error's first line (:func:`harness.set_up` makes it a row)."""

    def guarded(build: Callable[[Workload], Timed]) -> Callable[[Any], Timed]:
        def factory(_ctx: Any) -> Timed:
            try:
                return build(work)
            except (Missing, WrongResult):
                raise
            except Exception as exc:  # torch.compile unavailable, a RecordError, a failed capture...
                raise Failed(first_line(exc)) from None

        return factory

    return [Entry(f"train_{work.name}_{v}", label, group, guarded(build)) for v, label, group, build in VARIANTS]


# --- measurement and tables ------------------------------------------------------------------------


def measure_training(rounds: int, batch: int, log: Callable[[str], None] = print, *,
                     models: Sequence[str] = tuple(MODELS), workload: Callable[[str], Any] | None = None,
                     entries: Callable[[Any], list[Entry]] | None = None,
                     variants: Sequence[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Check and time every variant of every model (see the module documentation).

    Parameters
    ----------
    rounds, batch : int
        Host cost: ``rounds`` batches of ``batch`` steps per variant, round-robin. Wall time:
        ``max(15, rounds)`` loops of ``max(20, batch)`` steps, round-robin (the wall ratios of these
        GPU-bound loops are a few percent apart: six loops left their medians 1-2% apart run to run).
    log : callable
        Progress lines.
    models : sequence of str
        Keys of :data:`MODELS`.
    workload, entries : callable, optional
        Stand-ins for :class:`Workload` and :func:`training_entries` (the tests').
    variants : sequence of str, optional
        Only these variants (keys after ``train_<model>_``: ``record``, ``eager``...), and torch's
        graph, which the ratios are to; None: all.

    Returns
    -------
    dict
        The settings, and per model its harness records (each with its ``check``) or its ``error``.
    """
    import torch

    steps = max(20, batch)
    make, listed = workload or Workload, entries or training_entries
    out: dict[str, Any] = {"check_steps": CHECK_STEPS, "rtol": RTOL, "compile_rtol": COMPILE_RTOL, "rounds": rounds,
                           "batch": batch, "steps": steps, "models": {}}  # fmt: skip
    for name in models:
        log(f"a training step, {MODELS[name]}")
        try:  # in a function of its own: the model's graphs and compiled code go when it returns
            out["models"][name] = _one_model(name, make, listed, rounds, batch, steps, log, variants)
        except Exception as exc:  # a model failing leaves the other
            out["models"][name] = {"description": MODELS[name], "error": first_line(exc)}
            log(f"  failed: {out['models'][name]['error']}")
        torch.cuda.empty_cache()
    return out


def _one_model(name: str, make: Callable[[str], Any], listed: Callable[[Any], list[Entry]], rounds: int, batch: int,
               steps: int, log: Callable[[str], None], variants: Sequence[str] | None = None) -> dict[str, Any]:  # fmt: skip
    """Set up, check and time one model's variants (see :func:`measure_training`)."""
    import torch

    sync, work = torch.cuda.synchronize, make(name)
    entries = [e for e in listed(work) if variants is None or _variant(e) in (GRAPH, *variants)]
    results: dict[str, Any] = {}
    # Phases, each set up after the last one's graphs and compiled code went, so that no variant's
    # memory pool or graph trees weigh on another's timing; the ratios stay within one run.
    for phase in (
        [e for e in entries if _variant(e) in FIRST_PHASE],
        [e for e in entries if _variant(e) not in FIRST_PHASE and not _compiled(e)],
        [e for e in entries if _compiled(e)],
    ):
        launchers, set_up = harness.set_up(phase, None, sync=sync, log=log)
        results.update(set_up)
        samples, errors = harness.measure(launchers, rounds=rounds, batch=batch, warmup=batch, sync=sync)
        for lc in launchers:
            harness.record_samples(results[lc.key], samples[lc.key], errors.get(lc.key))
        ready = [lc for lc in launchers if lc.key not in errors]
        walls, errors = harness.measure_e2e(ready, launches=steps, repeats=max(15, rounds), sync=sync)
        for lc in ready:
            harness.record_e2e(results[lc.key], walls[lc.key], errors.get(lc.key))
        del launchers, ready  # the phase's graphs and compiled code go before the next is set up
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    harness.add_ratios(results, f"train_{name}_{GRAPH}")
    for key, rec in results.items():
        check = work.checks.get(key.removeprefix(f"train_{name}_"))
        if check is not None:
            rec["check"] = check
            log(f"  {rec['label']:<58} check: {check_text(check)}")
    log(f"  eager twice from the same start: {determinism_text(work.deterministic)}")
    return {"description": MODELS[name], "deterministic": work.deterministic, "results": results}


def _variant(entry: Entry) -> str:
    """An entry's variant (its key is ``train_<model>_<variant>``)."""
    return entry.key.split("_", 2)[-1]


def _compiled(entry: Entry) -> bool:
    return _variant(entry).startswith("compile")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m launchpad.bench.sequence_training [--rounds N] [--batch N] [--models ...]``: this
    part of the section alone; tables on stdout, progress on stderr."""
    import argparse

    from .report import format_table

    p = argparse.ArgumentParser("python -m launchpad.bench.sequence_training", description="A training step recorded.")
    p.add_argument("--rounds", type=int, default=25, help="timed batches per variant (default 25)")
    p.add_argument("--batch", type=int, default=20, help="steps per timed batch (default 20)")
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    p.add_argument("--variants", nargs="+", help="only these variants (record, eager, ...) beside torch's graph")
    p.add_argument("--json", help="also write the results to this file (what the sequence section reads)")
    args = p.parse_args(argv)
    out = measure_training(max(1, args.rounds), max(1, args.batch), lambda s: print(s, file=sys.stderr, flush=True),
                           models=args.models, variants=args.variants)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(out, default=str))
    print("\n\n".join(training_tables(out, "", format_table)))
    return 1 if any("error" in m for m in out["models"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
