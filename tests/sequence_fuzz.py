"""A differential fuzzer for ``launchpad.record``: random steps, recorded once, replayed with new
inputs, compared bit for bit with eager execution of the same function on copies of the same inputs.

    PYTHONPATH=. python3 tests/sequence_fuzz.py --seed S --steps N --replays R [--out FILE] [--only CASE]

Step ``i`` of seed ``S`` is generated from its own seed (``case_seed(S, i)``, printed with each
case): ``--only CASE`` runs that one step alone. A step is one of

- ``compose``: 2 to 8 ops of :data:`sequence_fuzz_ops.POOL` on one activation, with random shapes,
  dtypes, layouts (transposed and sliced views as inputs), scalar inputs, outputs in a tensor, a
  tuple, a dict or a list; some replayed from 2 threads on their own streams, some with inputs left
  out (they keep their last value), the same tensor given as two inputs (or not);
- ``train``: an MLP's forward, MSE loss, backward and optimizer step (SGD, Adam, AdamW: foreach,
  fused, single-tensor; ``zero_grad(set_to_none=True)`` inside), against a deep copy of the model
  and optimizer taken right after ``record()`` stepped eagerly with the same batches: the loss, the
  parameters and the gradients;
- ``dropout``: replay and eager after the same ``torch.manual_seed(k)`` draw the same mask, the
  replay after it draws eager's second mask, and the two differ.

Every comparison is of the raw bytes (NaN-safe), after ``torch.cuda.synchronize()``: the outputs,
and every tensor input (in-place writes). Between replays random CUDA tensors are allocated,
filled and freed; where a case holds its replays' outputs, they are compared again after every
replay and after the sequence is dropped. cuDNN runs deterministic; no op draws on an atomic
float accumulation (embedding's backward, index_add, scatter_add are left out). Cases alternate
the compiled and the Python replay. A ``RecordError`` is a refusal (counted, acceptable); a replay
that differs is WRONG; any other exception is an error (its traceback's last lines are printed).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import inspect
import os
import random
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import sequence_fuzz_ops as fops
import torch
import torch.nn.functional as F
from sequence_fuzz_compare import Tracker, churn, clone_exact, clone_inputs, compare, compare_inputs, diff, draw_inputs
from sequence_fuzz_ops import ACT_MODULES, BATCHES, OPTIMIZERS, POOL, WIDTHS, Consts, Gen, Input
from torch import nn

import launchpad as lp

KINDS = ("compose", "train", "dropout")
FORMS = ("tensor", "tuple", "dict", "nested")


@dataclass
class Case:
    """A step as drawn from its seed (on the CPU: no CUDA involved)."""

    seed: int
    kind: str
    compiled: bool  # launchpad.record(..., compiled=...): alternates by case
    batch: int
    width: int
    ops: tuple = ()  # ((name, params), ...) for compose
    inputs: tuple[Input, ...] = ()
    form: str = "tuple"
    threads: bool = False
    leave_out: bool = False
    churn: bool = False
    hold: bool = False
    extra: dict = field(default_factory=dict)  # train: opt, hidden, dout, act; dropout: p


def case_seed(seed: int, index: int) -> int:
    """Step ``index``'s own seed: even for even steps (the compiled replay), odd for odd ones."""
    return (random.Random(f"sequence-fuzz:{seed}:{index}").getrandbits(40) & ~1) | (index & 1)


def make_case(seed: int, ops: list[str] | None = None) -> Case:
    """The step of a case seed (``ops``: a composed step of these ops, in this order)."""
    rng = random.Random(seed)
    kind = "compose" if ops else rng.choices(KINDS, weights=(80, 12, 8))[0]
    g = Gen(rng, rng.choice(BATCHES), rng.choice(WIDTHS))
    case = Case(seed, kind, seed % 2 == 0, g.B, g.D)
    g.tensor((g.B, g.D), name="x")
    if kind == "compose":
        names = list(ops) if ops else [rng.choice(list(POOL)) for _ in range(rng.randint(2, 8))]
        case.ops = tuple((name, POOL[name].draw(g)) for name in names)
        case.form, case.threads = rng.choice(FORMS), rng.random() < 0.15
        case.leave_out = not case.threads and rng.random() < 0.4
    elif kind == "train":
        dout = rng.choice((1, 8, 32))
        g.tensor((g.B, dout), name="y")
        case.extra = {"opt": rng.choice(list(OPTIMIZERS)), "hidden": rng.choice(WIDTHS),
                      "act": rng.choice(list(ACT_MODULES)), "dout": dout}  # fmt: skip
    else:
        case.extra = {"p": rng.choice((0.1, 0.5))}
    case.churn, case.hold = rng.random() < 0.5, rng.random() < 0.5
    case.inputs = tuple(g.inputs)
    return case


def describe(case: Case) -> str:
    flags = ", ".join(f for f in ("threads", "leave_out", "churn", "hold") if getattr(case, f)) or "serial"
    if case.kind == "train":
        e = case.extra
        return f"mlp {case.width}-{e['hidden']}-{e['dout']} {e['act']} {e['opt']}, batch {case.batch} ({flags})"
    if case.kind == "dropout":
        return f"dropout p={case.extra['p']} after Linear({case.width}, 256), batch {case.batch} ({flags})"
    return f"{' '.join(name for name, _ in case.ops)} -> {case.form} ({flags})"


# --- the three kinds of step -----------------------------------------------------------------------


def compose_step(case: Case, c: Consts) -> Any:
    applies = [POOL[name].make(p, c) for name, p in case.ops]

    def step(**v: Any) -> Any:
        h, out = v["x"], {}
        for apply in applies:
            h = apply(v, h, out)
        if case.form == "tensor" and not out:
            return h
        if case.form == "dict":
            return {"h": h, **out}
        return [h, out] if case.form == "nested" else (h, *out.values())

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD  # one named parameter per input (record wants names)
    step.__signature__ = inspect.Signature([inspect.Parameter(i.name, kind) for i in case.inputs])  # type: ignore[attr-defined]
    return step


def replays_serial(case: Case, fn: Any, first: dict, replays: int, t: Tracker, gen: Any, pyr: random.Random,
                   junk: list) -> None:  # fmt: skip
    current = dict(first)
    for i in range(replays):
        if case.churn:
            churn(pyr, junk)
        new = draw_inputs(case.inputs, gen, pyr)
        passed = new
        if case.leave_out and pyr.random() < 0.6:
            passed = {k: v for k, v in new.items() if pyr.random() < 0.5}  # the others keep their last value
        current.update(passed)
        eager_in = clone_inputs(current)
        got = t.seq(*passed.values()) if len(passed) == len(new) and pyr.random() < 0.5 else t.seq(**passed)
        want = fn(**eager_in)
        torch.cuda.synchronize()
        label = f"replay {i} (gave {', '.join(passed) or 'nothing'})"
        t.check(label, compare(got, want) + compare_inputs(current, eager_in))
        if case.hold:
            t.hold(label, got, want, current)


def replays_threaded(case: Case, fn: Any, replays: int, t: Tracker) -> None:
    def worker(k: int) -> None:
        try:
            stream = torch.cuda.Stream()
            gen = torch.Generator(device=fops.DEVICE).manual_seed(case.seed * 31 + k)
            pyr = random.Random(f"{case.seed}/thread{k}")
            with torch.cuda.stream(stream):
                for i in range(replays):
                    values = draw_inputs(case.inputs, gen, pyr, threaded=True)
                    eager_in = clone_inputs(values)
                    got = t.seq(**values)
                    want = fn(**eager_in)
                    stream.synchronize()
                    t.check(f"thread {k} replay {i}", compare(got, want) + compare_inputs(values, eager_in))
                    if case.hold:
                        t.hold(f"thread {k} replay {i}", got, want, values)
        except Exception as exc:
            t.error(f"thread {k}: ", exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    torch.cuda.synchronize()


def run_compose(case: Case, replays: int, t: Tracker, gen: Any, pyr: random.Random, junk: list) -> None:
    fn = compose_step(case, Consts(case.seed))
    first = draw_inputs(case.inputs, gen, pyr, record=True)
    t.recorded(lp.record(fn, *first.values(), compiled=case.compiled))
    if case.threads:
        replays_threaded(case, fn, replays, t)
    else:
        replays_serial(case, fn, first, replays, t, gen, pyr, junk)


def train_step(model: nn.Module, opt: torch.optim.Optimizer) -> Any:
    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def run_train(case: Case, replays: int, t: Tracker, gen: Any, pyr: random.Random, junk: list) -> None:
    e, c = case.extra, Consts(case.seed)
    hidden, act = e["hidden"], ACT_MODULES[e["act"]]()
    model = c.module(nn.Sequential(nn.Linear(case.width, hidden), act, nn.Linear(hidden, e["dout"])), grad=True)
    opt = OPTIMIZERS[e["opt"]](model.parameters())
    first = draw_inputs(case.inputs, gen, pyr, record=True)
    train_step(model, opt)(**clone_inputs(first))  # one eager step first: the optimizer's state exists
    t.recorded(lp.record(train_step(model, opt), *first.values(), compiled=case.compiled))
    twin, twin_opt = copy.deepcopy((model, opt))  # right after record()
    eager = train_step(twin, twin_opt)
    for i in range(replays):
        if case.churn:
            churn(pyr, junk)
        values = draw_inputs(case.inputs, gen, pyr)
        eager_in = clone_inputs(values)
        got = t.seq(**values)
        want = eager(**eager_in)
        torch.cuda.synchronize()
        problems = compare(got, want, "loss")
        for (name, p), q in zip(model.named_parameters(), twin.parameters()):
            problems += [f"param {name}: {d}"] if (d := diff(p.detach(), q.detach())) else []
            gp, gq = p.grad, q.grad
            if (gp is None) != (gq is None):
                kinds = ["None" if g is None else "a tensor" for g in (gp, gq)]
                problems.append(f"grad {name}: {kinds[0]} against eager's {kinds[1]}")
            elif gp is not None and (d := diff(gp, gq)):
                problems.append(f"grad {name}: {d}")
        t.check(f"replay {i}", problems)
        if case.hold:
            t.hold(f"replay {i}", got, want, values)


def run_dropout(case: Case, replays: int, t: Tracker, gen: Any, pyr: random.Random, junk: list) -> None:
    lin, p = Consts(case.seed).module(nn.Linear(case.width, 256)), case.extra["p"]

    def step(x: torch.Tensor) -> torch.Tensor:
        return F.dropout(lin(x), p=p, training=True)

    t.recorded(lp.record(step, draw_inputs(case.inputs, gen, pyr, record=True)["x"], compiled=case.compiled))
    for i in range(replays):
        if case.churn:
            churn(pyr, junk)
        x = draw_inputs(case.inputs, gen, pyr)["x"]
        xc = clone_exact(x)
        torch.manual_seed(case.seed + i)
        first, second = t.seq(x), t.seq(x)
        torch.manual_seed(case.seed + i)
        want_first, want_second = step(xc), step(xc)
        torch.cuda.synchronize()
        problems = compare(first, want_first, f"replay after torch.manual_seed({case.seed + i})")
        problems += compare(second, want_second, "the next replay (no reseed) against eager's next draw")
        if not diff(first, second):
            problems.append("two consecutive replays drew the same dropout mask")
        t.check(f"replay {i}", problems)
        if case.hold:
            t.hold(f"replay {i}", first, want_first, {"x": x})


RUNNERS = {"compose": run_compose, "train": run_train, "dropout": run_dropout}


# --- running cases ---------------------------------------------------------------------------------


@dataclass
class Result:
    case: Case
    index: int = 0
    ok: int = 0
    wrong: int = 0
    refused: str = ""
    errors: list[str] = field(default_factory=list)
    problems: dict[str, list[str]] = field(default_factory=dict)
    path: str = ""
    explain: str = ""  # seq.explain() after record
    seconds: float = 0.0
    broken: bool = False  # the CUDA context no longer works

    @property
    def status(self) -> str:
        return "refused" if self.refused else "wrong" if self.wrong else "error" if self.errors else "ok"


#: A C++ kernel's mangled name (torch's run to 300 characters and more), cut in a refusal's line.
MANGLED = re.compile(r"_Z[A-Za-z0-9_]{48,}")


def run_case(case: Case, replays: int, index: int = 0) -> Result:
    """Record the case's step, replay it ``replays`` times, compare; never raises."""
    start, t, junk = time.perf_counter(), Tracker(), []
    result = Result(case, index)
    pyr = random.Random(case.seed + 1)
    try:
        gen = torch.Generator(device=fops.DEVICE).manual_seed(case.seed)
        RUNNERS[case.kind](case, replays, t, gen, pyr, junk)
    except lp.RecordError as exc:
        if t.seq is None:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            result.refused = MANGLED.sub(lambda m: m[0][:48] + "...", first)[:400]  # (the reason, not the name)
        else:
            t.error("", exc)
    except Exception as exc:
        t.error("", exc)
    try:
        result.path = t.seq.replay_path if t.seq is not None else ""
        if t.held:
            t.verify_held("after every replay")
        t.seq = None  # drop the sequence (its graph and memory pool), then check the held outputs again
        gc.collect()
        churn(pyr, junk)
        if t.held:
            t.verify_held("after the sequence was dropped")
    except Exception as exc:
        t.error("after the replays: ", exc)
    if t.errors:
        try:
            torch.cuda.synchronize()
        except Exception as exc:
            result.broken = True
            t.error("then torch.cuda.synchronize(): ", exc)
    result.problems = {label: p for label, p in t.problems.items() if p}
    result.wrong = len(result.problems)
    result.ok = len(t.problems) - result.wrong
    result.errors, result.explain, result.seconds = t.errors, t.explain, time.perf_counter() - start
    return result


def describe_input(i: Input) -> str:
    if i.kind in ("float", "int"):
        return f"{i.name}:{i.kind} in [{i.lo:g}, {i.hi:g}]"
    alias = f" (the same tensor as {i.alias} or not)" if i.alias else ""
    return f"{i.name}:{i.dtype}{list(i.shape)}/{i.layout}{f' < {i.hi:g}' if i.kind == 'index' else ''}{alias}"


def copies(r: Result) -> str:
    """What the sequence copies, as its ``explain()`` says: inputs in (and back), outputs out."""
    ins, outs = r.explain.count("copied into the sequence's own buffer"), r.explain.count("copied there at the graph")
    return f", copies {ins} in {outs} out" if ins or outs else ""


def report(r: Result, replays: int) -> str:
    """One line for the case; for a wrong or failed one, then what differs, the step and how to run it alone."""
    c = r.case
    head = f"case {r.index} seed {c.seed} {c.kind}/{r.path or ('compiled' if c.compiled else 'python')}"
    if r.status == "refused":
        return f"{head}: refused: {r.refused} [{describe(c)}]"
    if r.status == "ok":
        return f"{head}: ok {r.ok} replays{copies(r)} [{describe(c)}] ({r.seconds:.1f} s)"
    first = next((f"{label}: {p[0]}" for label, p in r.problems.items()), "")
    status = f"WRONG {r.wrong} of {r.wrong + r.ok} replays: {first}" if r.wrong else "ERROR"
    lines = [f"{head}: {status}{' (and an ERROR)' if r.wrong and r.errors else ''} [{describe(c)}]"]
    for label, problems in list(r.problems.items())[:4]:
        lines += [f"    {label}: {p}" for p in problems[:4]]
    lines += [f"    error: {e}" for e in r.errors[:3]]
    lines.append(f"    ops: {'; '.join(f'{n} {p}' for n, p in c.ops) or c.extra}")
    lines.append(f"    inputs: {', '.join(describe_input(i) for i in c.inputs)}")
    if r.explain:
        lines += ["    explain():"] + [f"      {s}" for s in r.explain.splitlines()[:40]]
    lines.append(f"    rerun: PYTHONPATH=. python3 tests/sequence_fuzz.py --only {c.seed} --replays {replays}")
    return "\n".join(lines)


@dataclass
class Summary:
    ok: int = 0
    wrong: int = 0
    refused: int = 0
    errors: int = 0
    results: list[Result] = field(default_factory=list)


@contextlib.contextmanager
def deterministic() -> Any:
    saved = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    try:
        yield
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved


def run(seed: int, steps: int, replays: int, only: int | None = None, log: Any = print) -> Summary:
    """Run the fuzzer in this process; ``log`` gets each line. Returns the counts and every result."""
    seeds = [only] if only is not None else [case_seed(seed, i) for i in range(steps)]
    s = Summary()
    path, why = lp.launch_path()
    log(f"fuzz: seed {seed}, {len(seeds)} steps x {replays} replays, each compared bit for bit with eager (cuDNN "
        f"deterministic; no nondeterministic op in the pool); launch path {path}{f' ({why})' if why else ''}")  # fmt: skip
    with deterministic():
        for index, cs in enumerate(seeds):
            try:
                case = make_case(cs)
            except Exception as exc:  # (a bug of the generator: reported, the others still run)
                log(f"case {index} seed {cs}: ERROR drawing the step: {type(exc).__name__}: {exc}")
                s.errors += 1
                continue
            r = run_case(case, replays, index)
            s.results.append(r)
            s.ok, s.wrong = s.ok + r.ok, s.wrong + r.wrong
            s.refused, s.errors = s.refused + bool(r.refused), s.errors + bool(r.errors)
            log(report(r, replays))
            if r.broken:
                log(f"fuzz: the CUDA context no longer works after case {index}: the remaining steps are not run")
                break
    copying = sum(1 for r in s.results if r.status == "ok" and copies(r))
    log(f"fuzz: seed {seed}, {len(seeds)} steps x {replays} replays: {s.ok} replays ok, {s.wrong} wrong, "
        f"{s.refused} refused steps, {s.errors} errors ({copying} steps with copies)")  # fmt: skip
    return s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--replays", type=int, default=5)
    parser.add_argument("--only", type=int, default=None, help="run only this case seed (printed with each case)")
    parser.add_argument("--out", default=None, help="also write every line to this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # (before cuBLAS starts: reproducible across streams)
    lines: list[str] = []

    def log(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    s = run(args.seed, args.steps, args.replays, args.only, log)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 1 if s.wrong or s.errors else 0


if __name__ == "__main__":
    sys.exit(main())
