"""Inputs, comparisons and allocation churn of the recorded-sequence fuzzer (``tests/sequence_fuzz.py``).

Inputs are drawn from a case's own CUDA generator and ``random.Random`` (never torch's default
generator, which the dropout steps seed); eager runs on exact copies of them (the same strides and
storage offsets: the same alignment, so the same kernels). Comparisons are of the raw bytes.
"""

from __future__ import annotations

import math
import random
import threading
import traceback
from typing import Any

import sequence_fuzz_ops as fops
import torch
from sequence_fuzz_ops import DTYPES, Input

CHURN_SIZES = (1, 100, 4096, 65536, 1 << 20, 3 << 20)

# --- inputs ----------------------------------------------------------------------------------------


def new_value(spec: Input, gen: torch.Generator, pyr: random.Random, record: bool) -> Any:
    if spec.kind == "float":  # (never 0 or +-1, which a kernel could treat as special)
        v = round(pyr.uniform(spec.lo, spec.hi), 4)
        return v + 0.125 if v in (0.0, 1.0, -1.0) else v
    if spec.kind == "int":
        v = pyr.randint(int(spec.lo), int(spec.hi))
        return v - 1 if spec.triton_int and record and v % 16 == 0 else v
    if spec.kind == "index":
        return torch.randint(0, int(spec.hi), spec.shape, generator=gen, device=fops.DEVICE)
    shape, dtype = spec.shape, DTYPES[spec.dtype]
    rand = lambda *s: torch.randn(s, generator=gen, device=fops.DEVICE, dtype=dtype)
    if spec.layout == "t" and len(shape) == 2:
        return rand(shape[1], shape[0]).t()
    if spec.layout == "slice":
        return rand(shape[0] + 7)[3 : 3 + shape[0]] if len(shape) == 1 else rand(shape[0] + 1, shape[1] + 8)[1:, 4:-4]
    return rand(*shape)


def draw_inputs(inputs: tuple[Input, ...], gen: torch.Generator, pyr: random.Random, record: bool = False,
                threaded: bool = False) -> dict[str, Any]:  # fmt: skip
    """New values for every input, in the step's order (``record``: alias pairs the same tensor;
    ``record`` or ``threaded``: Triton's ints never multiples of 16)."""
    values: dict[str, Any] = {}
    for spec in inputs:
        same = spec.alias and (record or pyr.random() < 0.5)
        values[spec.name] = values[spec.alias] if same else new_value(spec, gen, pyr, record or threaded)
    return values


def clone_exact(t: Any) -> Any:
    """A copy with the same shape, strides and storage offset (the same alignment, so the same kernels)."""
    if not isinstance(t, torch.Tensor):
        return t
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    flat = torch.empty(t.storage_offset() + max(span, 1), dtype=t.dtype, device=t.device)
    c = flat.as_strided(t.shape, t.stride(), t.storage_offset())
    c.copy_(t)
    return c


def clone_inputs(values: dict[str, Any]) -> dict[str, Any]:
    memo: dict[int, Any] = {}  # the same tensor given twice stays one tensor
    return {k: memo.setdefault(id(v), clone_exact(v)) if isinstance(v, torch.Tensor) else v for k, v in values.items()}


# --- comparisons -----------------------------------------------------------------------------------


def leaves(obj: Any, path: str = "") -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in leaves(v, f"{path}[{k!r}]")]
    if isinstance(obj, (list, tuple)):
        return [x for i, v in enumerate(obj) for x in leaves(v, f"{path}[{i}]")]
    return [(path or "result", obj)]


def _bits(t: torch.Tensor) -> torch.Tensor:
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().reshape(-1).view(ints)


def diff(a: Any, b: Any) -> str:
    """How ``a`` (the replay's) differs from ``b`` (eager's), bit for bit: "" where it does not."""
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or a != b:
            return f"{a!r} against eager's {b!r}"
        return ""
    if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
        return f"{a.dtype}{tuple(a.shape)} on {a.device} against eager's {b.dtype}{tuple(b.shape)} on {b.device}"
    if a.numel() == 0:
        return ""
    if [s for s, n in zip(a.stride(), a.shape) if n > 1] != [s for s, n in zip(b.stride(), b.shape) if n > 1]:
        same = "equal" if torch.equal(_bits(a), _bits(b)) else "different"
        return f"strides {a.stride()} against eager's {b.stride()} ({same} values)"
    differ = _bits(a) != _bits(b)
    count = int(differ.sum())
    if count == 0:
        return ""
    d = (a.reshape(-1).double() - b.reshape(-1).double()).abs()[differ]
    nans = int(torch.isnan(d).sum())
    finite = d[~torch.isnan(d)]
    biggest = float(finite.max()) if finite.numel() else math.nan
    return f"max abs diff {biggest:.6g} ({count} of {a.numel()} elements differ{f', {nans} NaN' if nans else ''})"


def compare(got: Any, want: Any, what: str = "output") -> list[str]:
    g, w = leaves(got), leaves(want)
    if [p for p, _ in g] != [p for p, _ in w]:
        return [f"{what} structure {[p for p, _ in g]} against eager's {[p for p, _ in w]}"]
    return [f"{what} {p}: {d}" for (p, a), (_, b) in zip(g, w) if (d := diff(a, b))]


def compare_inputs(values: dict[str, Any], eager: dict[str, Any]) -> list[str]:
    return [f"input {k!r} after the step: {d}" for k, v in values.items() if (d := diff(v, eager[k]))]


class Tracker:
    """What a case found: problems per replay, held outputs, errors (threads report here too)."""

    def __init__(self) -> None:
        self.problems: dict[str, list[str]] = {}
        self.held: list[tuple[str, str, torch.Tensor, torch.Tensor]] = []
        self.errors: list[str] = []
        self.seq: Any = None
        self.explain = ""
        self.lock = threading.Lock()

    def recorded(self, seq: Any) -> Any:
        """Keep the sequence (and what it says of each input and output, for a report)."""
        self.seq = seq
        try:
            self.explain = seq.explain()
        except Exception as exc:
            self.explain = f"(explain() failed: {type(exc).__name__}: {exc})"
        return seq

    def check(self, label: str, problems: list[str]) -> None:
        with self.lock:
            self.problems.setdefault(label, []).extend(problems)

    def hold(self, label: str, got: Any, want: Any, inputs: dict[str, Any]) -> None:
        """Keep a replay's outputs (not those in an input's memory, which a later replay may write)."""
        mine = {v.untyped_storage().data_ptr() for v in inputs.values() if isinstance(v, torch.Tensor)}
        with self.lock:
            self.held += [(label, p, a, b) for (p, a), (_, b) in zip(leaves(got), leaves(want))
                          if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() not in mine]  # fmt: skip

    def verify_held(self, when: str) -> None:
        torch.cuda.synchronize()
        for label, path, a, b in self.held:
            if d := diff(a, b):
                self.check(label, [f"held output {path} {when}: {d}"])

    def error(self, where: str, exc: BaseException) -> None:
        """An exception, with its message's first line and the traceback's last frames."""
        first = (str(exc).strip().splitlines() or [""])[0][:400]
        frames = [f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}: {(f.line or '').strip()}"
                  for f in traceback.extract_tb(exc.__traceback__)[-4:]]  # fmt: skip
        with self.lock:
            self.errors.append(f"{where}{type(exc).__name__}: {first}" + "".join(f"\n        at {f}" for f in frames))


def churn(pyr: random.Random, junk: list[torch.Tensor]) -> None:
    """Allocate, fill and free random-size CUDA tensors (memory a stale pointer would read or write)."""
    for _ in range(pyr.randint(1, 6)):
        t = torch.empty(pyr.choice(CHURN_SIZES) + pyr.randrange(512), device=fops.DEVICE)
        if pyr.random() < 0.7:
            t.fill_(pyr.choice((math.nan, -1e30, 7.0)))
        junk.append(t)
    while len(junk) > 8:
        junk.pop(pyr.randrange(len(junk)))
    if pyr.random() < 0.05:
        torch.cuda.empty_cache()
