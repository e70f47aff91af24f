"""The differential fuzzer of ``launchpad.record`` (``tests/sequence_fuzz.py``).

On a GPU: a fixed seed's steps replayed with new inputs equal eager bit for bit (refusals
allowed), and the known bug (a temporary freed mid-step, an output allocated where it was) is
exact or refused. On the CPU: the generator draws the same steps for a seed, in any process, and
every op of the pool, every kind of step and every optimizer is drawn.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import os
import subprocess
import sys

import pytest
import sequence_fuzz as fuzz
import sequence_fuzz_ops as fops
import torch
from sequence_fuzz_ops import ACTS, OPTIMIZERS, POOL

import launchpad as lp

gpu = pytest.mark.gpu  # (per test: the generator's tests below run without a GPU)
SEED, STEPS, REPLAYS = 20261124, 60, 5


def needs_front_ends() -> None:
    pytest.importorskip("triton")
    pytest.importorskip("numba.cuda")


@gpu
def test_sixty_random_steps_replay_exactly_as_eager():
    needs_front_ends()
    lines: list[str] = []
    s = fuzz.run(SEED, STEPS, REPLAYS, log=lines.append)
    text = "\n".join(lines)
    print(text)
    assert s.wrong == 0 and s.errors == 0, text
    assert s.ok > 0, text


@gpu
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_an_output_where_a_freed_temporary_was_is_exact_or_refused(compiled):
    """``t = x.repeat(4); s = t[n:].sum(); del t; out = torch.empty(n); torch.add(x, s, out=out)``."""
    needs_front_ends()
    for k in range(4):
        case = fuzz.make_case(2 * k + (not compiled), ops=["free_then_out", "mul_scalar"])
        case = dataclasses.replace(case, churn=True, hold=True, threads=False, leave_out=False)
        with fuzz.deterministic():
            r = fuzz.run_case(case, replays=8)
        text = fuzz.report(r, 8)
        print(text)
        assert r.status in ("ok", "refused"), text


def test_the_generator_is_deterministic_for_a_seed():
    seeds = [fuzz.case_seed(7, i) for i in range(40)]
    assert seeds == [fuzz.case_seed(7, i) for i in range(40)]
    assert [s % 2 for s in seeds] == [i % 2 for i in range(40)]  # the replays alternate
    assert [fuzz.make_case(s).compiled for s in seeds] == [i % 2 == 0 for i in range(40)]
    cases = [fuzz.make_case(s) for s in seeds]
    assert cases == [fuzz.make_case(s) for s in seeds]
    assert len({repr(c.ops) + repr(c.inputs) for c in cases}) > 30  # and different seeds draw different steps


def test_the_generator_does_not_depend_on_the_process():
    code = ("import json, sequence_fuzz as f; "
            "print(json.dumps([repr(f.make_case(f.case_seed(3, i))) for i in range(20)]))")  # fmt: skip
    here = os.path.dirname(__file__)
    outs = []
    for hashseed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hashseed, "PYTHONPATH": os.pathsep.join([here, os.path.dirname(here)])}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        outs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert outs[0] == outs[1] == [repr(fuzz.make_case(fuzz.case_seed(3, i))) for i in range(20)]


def test_every_op_kind_and_optimizer_is_drawn():
    cases = [fuzz.make_case(fuzz.case_seed(0, i)) for i in range(300)]
    ops = [(name, p) for c in cases for name, p in c.ops]
    assert {name for name, _ in ops} == set(POOL)
    assert {c.kind for c in cases} == set(fuzz.KINDS)
    assert {c.extra["opt"] for c in cases if c.kind == "train"} == set(OPTIMIZERS)
    assert {p["fn"] for name, p in ops if name == "act"} == set(ACTS)
    assert {p["dtype"] for name, p in ops if name in ("matmul", "sdpa")} == {"float32", "float16", "bfloat16"}
    inputs = [i for c in cases for i in c.inputs]
    assert {i.layout for i in inputs} == {"contig", "t", "slice"}
    assert {i.kind for i in inputs} == {"tensor", "index", "float", "int"}
    assert any(i.alias for i in inputs)
    assert {c.form for c in cases if c.kind == "compose"} == set(fuzz.FORMS)
    for flag in ("threads", "leave_out", "churn", "hold"):
        assert any(getattr(c, flag) for c in cases), flag
    assert all(2 <= len(c.ops) <= 8 for c in cases if c.kind == "compose")


def test_each_ops_inputs_are_its_own():
    """Every input a step draws is used by an op (an input no node reads would be refused)."""
    for i in range(300):
        c = fuzz.make_case(fuzz.case_seed(1, i))
        if c.kind != "compose":
            continue
        used = {"x"} | {v for _, p in c.ops for v in p.values() if isinstance(v, str)}
        assert {spec.name for spec in c.inputs} <= used, (c.seed, c.ops, c.inputs)
        assert len({spec.name for spec in c.inputs}) == len(c.inputs)


# --- the harness itself, on the CPU: launchpad.record replaced by a stand-in -----------------------


class StandIn:
    """What ``launchpad.record`` returns, on the CPU: each replay runs the function eagerly on the
    inputs given and those kept ("eager"), or returns the last replay's outputs ("stale"), or
    copies its outputs into buffers that every replay overwrites, as torch's CUDAGraph ("static")."""

    def __init__(self, mode, fn, args):
        self.mode, self.fn, self.last, self.buffers = mode, fn, None, {}
        self.names = list(inspect.signature(fn).parameters)
        self.current = dict(zip(self.names, args))
        self.replay_path = f"{mode} stand-in"
        self.explain = lambda: f"(a {mode} stand-in for launchpad.record)"
        fn(**self.current)  # the warm-up

    def __call__(self, *args, **kwargs):
        self.current = values = {**self.current, **dict(zip(self.names, args)), **kwargs}
        result = self.fn(**values)
        if self.mode == "stale":
            result, self.last = (self.last if self.last is not None else result), result
        elif self.mode == "static":
            index = iter(range(1 << 20))
            result = rebuild(result, lambda t: self.buffers.setdefault(next(index), t.clone()).copy_(t))
        return result


def rebuild(obj, f):
    if isinstance(obj, dict):
        return {k: rebuild(v, f) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(rebuild(v, f) for v in obj)
    return f(obj) if isinstance(obj, torch.Tensor) else obj


class StandInKernel:
    """launchpad's kernels of the op pool, in torch on the CPU (``k[grid, block](...)``)."""

    def __init__(self, front_end):
        self.front_end = front_end

    def __getitem__(self, grid):
        return self.launch

    def launch(self, *args, **meta):
        if self.front_end == "cpp":
            a, x, y, o, n = args
        elif self.front_end == "triton":
            x, y, o, a, n = args
        else:
            (o, x, a), y, n = args, None, args[0].numel()
        r = torch.tensor(a, dtype=torch.float32) * x.reshape(-1)[:n]
        o.reshape(-1)[:n] = r if y is None else r + y.reshape(-1)[:n]


class StandInStream:
    def synchronize(self):
        pass


@pytest.fixture
def on_cpu(monkeypatch):
    """The fuzzer on the CPU; returns a function that sets the stand-in's mode."""
    mode = {"now": "eager"}
    monkeypatch.setattr(fops, "DEVICE", "cpu")
    monkeypatch.setattr(fops, "kernel", StandInKernel)
    monkeypatch.setattr(fuzz.lp, "record", lambda fn, *args, compiled=None: StandIn(mode["now"], fn, args))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "Stream", StandInStream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    cpu_optimizers = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9),
                      "adam": lambda ps: torch.optim.Adam(ps, lr=1e-3),
                      "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-3)}  # fmt: skip
    for name in OPTIMIZERS:  # (capturable and fused: CUDA's)
        monkeypatch.setitem(OPTIMIZERS, name, cpu_optimizers[name.split("_")[0]])
    return lambda m: mode.update(now=m)


def test_the_harness_finds_nothing_wrong_with_eager_replays(on_cpu):
    lines: list[str] = []
    s = fuzz.run(5, 40, 3, log=lines.append)
    text = "\n".join(lines)
    assert s.wrong == 0 and s.errors == 0 and s.refused == 0, text
    assert s.ok >= 40 * 3, text
    assert lines[-1].startswith(
        f"fuzz: seed 5, 40 steps x 3 replays: {s.ok} replays ok, 0 wrong, 0 refused steps, 0 errors ("
    )


def test_the_harness_finds_stale_outputs(on_cpu):
    on_cpu("stale")
    s = fuzz.run(5, 12, 3, log=lambda line: None)
    assert s.wrong >= 12 and s.errors == 0, [fuzz.report(r, 3) for r in s.results]


def test_the_harness_finds_outputs_a_later_replay_overwrote(on_cpu):
    on_cpu("static")
    found = []
    for i in range(12):
        case = dataclasses.replace(fuzz.make_case(fuzz.case_seed(5, i)), hold=True, threads=False)
        r = fuzz.run_case(case, 3)
        assert not r.errors, fuzz.report(r, 3)
        found += [p for problems in r.problems.values() for p in problems if p.startswith("held output")]
    assert found


def test_a_refusal_line_keeps_its_reason_past_a_mangled_kernel_name(on_cpu, monkeypatch):
    """torch's kernels have mangled names of 300 characters and more: a refused step's line cuts the
    name, not the reason after it."""
    name = "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocast" + "Z" * 300 + "EEvi"
    reason = f"node 7 (kernel {name!r}, not launchpad's), param 1, bytes 8-15 hold the reason"

    def refuse(*args, **kwargs):
        raise lp.RecordError(reason)

    monkeypatch.setattr(lp, "record", refuse)
    r = fuzz.run_case(fuzz.make_case(fuzz.case_seed(5, 0)), 3)
    assert r.refused.startswith(
        "node 7 (kernel '_ZN2at6native18elementwise_kernelILi128ELi2EZNS0...', not launchpad's)"
    )
    assert (
        r.refused.endswith("param 1, bytes 8-15 hold the reason")
        and "ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ" not in r.refused
    )
