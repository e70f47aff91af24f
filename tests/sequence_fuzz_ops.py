"""The op pool of the recorded-sequence fuzzer (``tests/sequence_fuzz.py``).

A composed step runs a chain of ops on one activation ``h`` of shape ``(B, D)`` (float32 between
ops; an op may change ``D``), starting from the input ``x``. Each op of :data:`POOL` has two parts:

- ``draw(g)``: on the CPU, from the case's ``random.Random`` only: its shapes and options (a dict),
  the inputs it adds (``g.tensor``, ``g.scalar``, ``g.index``) and the outputs it adds (``g.out``);
- ``make(p, c)``: on the GPU, once per case: its bound modules and weights (``c``, seeded by the
  case) and the function ``apply(v, h, out) -> h`` that the step calls with the step's inputs
  ``v`` (by name) and the dict of extra outputs ``out``.

Kernels of launchpad's front ends are compiled once per process (:func:`kernel`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import launchpad as lp

try:
    import triton
    import triton.language as tl
except ImportError:  # (the triton op then fails with this, as an error of its case)
    triton = None

try:  # numba-cuda 0.30 uses np.row_stack, which NumPy 2.5 no longer has
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    from numba import cuda
except Exception:
    cuda = None

DEVICE = "cuda"  # (the fuzzer's own CPU test runs it on "cpu", with a stand-in for launchpad.record)
WIDTHS = (16, 32, 48, 64, 128, 256)  # D: multiples of 16 (conv2d reshapes to 4 rows, heads of 8 and more)
BATCHES = (1, 3, 8, 17, 64)
LAYOUTS = ("contig", "contig", "t", "slice")  # a tensor input: dense, a transposed view, a slice of a bigger one
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int64": torch.int64}
ACTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh, "softmax": lambda h: h.softmax(-1),
}  # fmt: skip
ACT_MODULES = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU, "tanh": nn.Tanh}
OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, foreach=False),
    "sgd_momentum_foreach": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, foreach=True),
    "sgd_momentum_fused": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, fused=True),
    "adam_foreach": lambda ps: torch.optim.Adam(ps, lr=1e-3, capturable=True, foreach=True),
    "adam_fused": lambda ps: torch.optim.Adam(ps, lr=1e-3, capturable=True, fused=True),
    "adamw_single_tensor": lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, capturable=True, foreach=False),
    "adamw_fused": lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01, capturable=True, fused=True),
}


@dataclass(frozen=True)
class Input:
    """One input of a step, as drawn (the runner makes a new random value for it each replay)."""

    name: str
    kind: str  # "tensor", "index" (int64 in [0, hi)), "float" (in [lo, hi]), "int" (in [lo, hi])
    shape: tuple = ()
    dtype: str = "float32"
    layout: str = "contig"
    lo: float = 0.0
    hi: float = 1.0
    alias: str = ""  # given the same tensor as input `alias` at record and on some replays
    triton_int: bool = False  # never a multiple of 16 at record (Triton specializes those)


class Gen:
    """What the ops draw into, on the CPU: the case's random.Random, the batch B, the width D, the inputs."""

    def __init__(self, rng: random.Random, batch: int, width: int):
        self.rng, self.B, self.D = rng, batch, width
        self.inputs: list[Input] = []
        self.outs = 0

    def pick(self, *options: Any) -> Any:
        return self.rng.choice(options)

    def tensor(self, shape: tuple, dtype: str = "float32", layout: str = "", alias: str = "", name: str = "") -> str:
        name = name or f"t{len(self.inputs)}"
        self.inputs.append(Input(name, "tensor", tuple(shape), dtype, layout or self.pick(*LAYOUTS), alias=alias))
        return name

    def scalar(self, kind: str, lo: float, hi: float, triton_int: bool = False) -> str:
        name = f"s{len(self.inputs)}"
        self.inputs.append(Input(name, kind, lo=lo, hi=hi, triton_int=triton_int))
        return name

    def index(self, shape: tuple, hi: int) -> str:
        name = f"i{len(self.inputs)}"
        self.inputs.append(Input(name, "index", tuple(shape), "int64", "contig", hi=hi))
        return name

    def out(self) -> str:
        self.outs += 1
        return f"o{self.outs}"

    def width(self, new: int) -> int:  # an op that changes D: the old one, for the op's params
        old, self.D = self.D, new
        return old


class Consts:
    """Bound weights and modules of a case, drawn from its own CUDA generator."""

    def __init__(self, seed: int):
        self.gen = torch.Generator(device=DEVICE).manual_seed(seed)

    def randn(self, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(shape, generator=self.gen, device=DEVICE) * scale).to(dtype)

    def module(self, m: nn.Module, grad: bool = False) -> nn.Module:
        m = m.to(DEVICE)
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(self.randn(*p.shape, scale=p.shape[1] ** -0.5 if p.dim() > 1 else 1.0))
        return m.requires_grad_(grad)


# --- launchpad's kernels, one per front end, compiled once per process -----------------------------

CPP_SOURCE = r"""
extern "C" __global__ void axpby(float a, const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}"""

if triton is not None:

    @triton.jit
    def fuzz_axpy_kernel(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def numba_scale(out, x, alpha):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i]


_KERNELS: dict[str, Any] = {}


def kernel(front_end: str) -> Any:
    if front_end not in _KERNELS:
        if front_end == "cpp":
            _KERNELS[front_end] = lp.compile_cuda(CPP_SOURCE, "axpby")
        elif front_end == "triton":
            if triton is None:
                raise RuntimeError("the triton op needs Triton, which is not importable here")
            _KERNELS[front_end] = lp.triton_launcher(fuzz_axpy_kernel)
        else:
            if cuda is None:
                raise RuntimeError("the numba op needs numba-cuda, which is not importable here")
            _KERNELS[front_end] = lp.from_numba(numba_scale, "void(float32[::1], float32[::1], float32)")
    return _KERNELS[front_end]


# --- the ops that need more than a line ------------------------------------------------------------


def draw_front_end(g: Gen, front_end: str) -> dict:
    """Inputs of o = a * h + y (Numba's: o = a * h), written by a launchpad kernel: a a float input,
    y h or a new input, n the size or an int input (at least half of it: beyond n, o stays 0)."""
    numel, axpy = g.B * g.D, front_end != "numba"
    y = g.tensor((g.B, g.D)) if axpy and g.rng.random() < 0.5 else ""
    n = g.scalar("int", max(2, numel // 2), numel, front_end == "triton") if axpy and g.rng.random() < 0.5 else ""
    return {"numel": numel, "a": g.scalar("float", -2.0, 2.0), "y": y, "n": n, "block": g.pick(128, 256, 1024)}


def make_front_end(front_end: str) -> Callable[[dict, Consts], Callable]:
    def make(p: dict, c: Consts) -> Callable:
        k, numel, block = kernel(front_end), p["numel"], p["block"]

        def apply(v: dict, h: torch.Tensor, out: dict) -> torch.Tensor:
            hc = h.contiguous()
            y = v[p["y"]].contiguous() if p["y"] else hc
            n = v[p["n"]] if p["n"] else numel
            o = torch.zeros_like(hc)  # (beyond n: zeros, in both runs)
            if front_end == "cpp":
                k[(numel + 255) // 256, 256](v[p["a"]], hc, y, o, n)
            elif front_end == "triton":
                k[((numel + block - 1) // block,)](hc, y, o, v[p["a"]], n, BLOCK=block)
            else:
                k[(numel + 255) // 256, 256](o.view(-1), hc.view(-1), v[p["a"]])
            return o

        return apply

    return make


def draw_sdpa(g: Gen) -> dict:
    heads = g.pick(*[k for k in (1, 2, 4) if g.D % (8 * k) == 0])
    dtype = g.pick("float32", "float16", "bfloat16")
    kv = g.tensor((1, heads, g.pick(4, 16, 33), g.D // heads), dtype, "contig") if g.rng.random() < 0.5 else ""
    return {"b": g.B, "d": g.D, "heads": heads, "dtype": dtype, "kv": kv, "causal": g.pick(False, True)}


def make_sdpa(p: dict, c: Consts) -> Callable:
    b, d, heads, dtype = p["b"], p["d"], p["heads"], DTYPES[p["dtype"]]

    def apply(v: dict, h: torch.Tensor, out: dict) -> torch.Tensor:
        q = h.reshape(b, heads, d // heads).transpose(0, 1).unsqueeze(0).to(dtype)
        kv = v[p["kv"]] if p["kv"] else q
        o = F.scaled_dot_product_attention(q, kv, kv, is_causal=p["causal"])
        return o.squeeze(0).transpose(0, 1).reshape(b, d).float()

    return apply


def draw_matmul(g: Gen) -> dict:
    dtype, d2 = g.pick("float32", "float16", "bfloat16"), g.pick(*WIDTHS)
    w = g.tensor((g.D, d2), dtype, g.pick("contig", "t")) if g.rng.random() < 0.5 else ""
    return {"dtype": dtype, "d": g.width(d2), "d2": d2, "w": w}


def make_matmul(p: dict, c: Consts) -> Callable:
    dtype, bound = DTYPES[p["dtype"]], c.randn(p["d"], p["d2"], dtype=DTYPES[p["dtype"]])  # closure: a bound weight
    scale = p["d"] ** -0.5
    return lambda v, h, out: (h.to(dtype) @ (v[p["w"]] if p["w"] else bound)).float() * scale


def make_rmsnorm(p: dict, c: Consts) -> Callable:
    if hasattr(nn, "RMSNorm"):
        m = c.module(nn.RMSNorm(p["d"], eps=1e-6))
        return lambda v, h, out: m(h)
    w = c.randn(p["d"])
    return lambda v, h, out: h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w


VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "t": lambda t: t.t(), "slice": lambda t: t[1:, ::2], "flat": lambda t: t.reshape(-1),
    "int32": lambda t: t.view(torch.int32), "same": lambda t: t,
}  # fmt: skip


def free_then_out(v: dict, h: torch.Tensor, p: dict, out: dict) -> torch.Tensor:
    """The known bug: a temporary freed mid-step, then an output allocated where it was."""
    x, n = v[p["x"]], p["n"]
    t = x.repeat(4)
    s = t[n:].sum()
    del t
    o = torch.empty(n, device=DEVICE)
    torch.add(x, s, out=o)
    out[p["out"]] = o
    return h


def free_then_out_mid(v: dict, h: torch.Tensor, p: dict, out: dict) -> torch.Tensor:
    """The same on an intermediate: h's temporary freed, the new h where it was."""
    t = h.repeat(4, 1)
    s = t[p["b"] :].sum(0)
    del t
    o = torch.empty_like(h)
    torch.add(h, s, out=o)
    return o


def inplace_mid(v: dict, h: torch.Tensor, p: dict, out: dict) -> torch.Tensor:
    h = h * 1.5
    if p["s"]:
        return h.mul_(v[p["s"]])
    return h.add_(0.25).relu_()


def inplace_input(v: dict, h: torch.Tensor, p: dict, out: dict) -> torch.Tensor:
    u = v[p["u"]]
    u.mul_(p["factor"])  # writes the input
    return h + u if u.shape == h.shape else h * u.mean()  # (x keeps its width where the step changed h's)


def out_op(v: dict, h: torch.Tensor, p: dict, out: dict) -> torch.Tensor:
    buf = torch.empty_like(h)  # allocated in the step
    (torch.add if p["fn"] == "add" else torch.mul)(h, v[p["y"]] if p["y"] else h, out=buf)
    return buf


def reduce(v: dict, h: torch.Tensor, p: dict, out: dict) -> torch.Tensor:
    r = getattr(torch, p["fn"])(h, p["dim"], keepdim=True)
    r = r.values if p["fn"] == "max" else r
    out[p["out"]] = r.squeeze(p["dim"])  # a view of r
    return h - r


def relayout(v: dict, h: torch.Tensor, p: dict, out: dict) -> torch.Tensor:
    if p["how"] == "colmajor":  # the same values, column-major
        return h.t().contiguous().t()
    b, d = h.shape
    return h.reshape(b, d // 2, 2).transpose(1, 2).reshape(b, d)


def draw_inplace_input(g: Gen) -> dict:
    return {"u": "x" if g.rng.random() < 0.3 else g.tensor((g.B, g.D)), "factor": g.pick(2.0, -0.5)}


@dataclass(frozen=True)
class Op:
    what: str  # what the step does, for a reader
    draw: Callable[[Gen], dict]
    make: Callable[[dict, Consts], Callable]


def plain(fn: Callable) -> Callable[[dict, Consts], Callable]:
    """make for an op with nothing bound: ``fn(v, h, p, out)``."""
    return lambda p, c: lambda v, h, out: fn(v, h, p, out)


def module(factory: Callable[[dict], nn.Module], after: Callable = lambda m, v, h, p: m(h)) -> Callable:
    """make for an op around one bound module (requires_grad off)."""

    def make(p: dict, c: Consts) -> Callable:
        m = c.module(factory(p))
        return lambda v, h, out: after(m, v, h, p)

    return make


# fmt: off
POOL: dict[str, Op] = {
    "linear":       Op("h = nn.Linear(D, D2)(h)",
                       lambda g: {"bias": g.pick(True, False), "d2": (d2 := g.pick(*WIDTHS)), "d": g.width(d2)},
                       module(lambda p: nn.Linear(p["d"], p["d2"], bias=p["bias"]))),
    "conv1d":       Op("h = nn.Conv1d(1, C, k)(h[:, None]).sum(1)",
                       lambda g: {"ch": g.pick(2, 4), "k": g.pick(1, 3, 5)},
                       module(lambda p: nn.Conv1d(1, p["ch"], p["k"], padding=p["k"] // 2),
                              lambda m, v, h, p: m(h.unsqueeze(1)).sum(1))),
    "conv2d":       Op("h = nn.Conv2d(1, C, 3)(h as (B, 1, 4, D/4)).mean(1)",
                       lambda g: {"ch": g.pick(2, 3), "b": g.B, "d": g.D},
                       module(lambda p: nn.Conv2d(1, p["ch"], 3, padding=1),
                              lambda m, v, h, p: m(h.reshape(p["b"], 1, 4, p["d"] // 4)).mean(1).reshape(p["b"], p["d"]))),
    "layernorm":    Op("h = nn.LayerNorm(D)(h)", lambda g: {"d": g.D}, module(lambda p: nn.LayerNorm(p["d"]))),
    "rmsnorm":      Op("h = nn.RMSNorm(D)(h)", lambda g: {"d": g.D}, make_rmsnorm),
    "act":          Op("h = relu/gelu/silu/tanh/softmax(h)",
                       lambda g: {"fn": g.pick(*ACTS)}, lambda p, c: lambda v, h, out: ACTS[p["fn"]](h)),
    "embedding":    Op("h = h + nn.Embedding(V, D)(idx), idx an int64 input",
                       lambda g: {"vocab": (vocab := g.pick(10, 1000)), "d": g.D, "idx": g.index((g.B,), vocab)},
                       module(lambda p: nn.Embedding(p["vocab"], p["d"]), lambda m, v, h, p: h + m(v[p["idx"]]))),
    "sdpa":         Op("h = F.scaled_dot_product_attention(q=h, k=v=h or an input), f32/f16/bf16",
                       draw_sdpa, make_sdpa),
    "matmul":       Op("h = (h.to(dt) @ w).float(), w bound or an input, f32/f16/bf16 (cuBLAS)", draw_matmul, make_matmul),
    "reduce":       Op("out = h.sum/mean/amax(dim); h = h - that (keepdim)",
                       lambda g: {"fn": g.pick("sum", "mean", "amax", "max"), "dim": g.pick(0, 1), "out": g.out()},
                       plain(reduce)),
    "view_out":     Op("out = a view of h (.t(), a slice, reshape, .view(torch.int32))",
                       lambda g: {"how": g.pick(*VIEWS), "out": g.out()},
                       plain(lambda v, h, p, out: out.update({p["out"]: VIEWS[p["how"]](h)}) or h)),
    "input_view":   Op("out = a view of a new input u (.view(torch.int32), .t(), a slice, u itself); h = h + u",
                       lambda g: {"u": g.tensor((g.B, g.D)), "how": g.pick("int32", "t", "slice", "same"), "out": g.out()},
                       plain(lambda v, h, p, out: out.update({p["out"]: VIEWS[p["how"]](v[p["u"]])}) or h + v[p["u"]])),
    "relayout":     Op("h = h column-major, or its columns interleaved (transposes, reshapes)",
                       lambda g: {"how": g.pick("colmajor", "interleave")}, plain(relayout)),
    "inplace_mid":  Op("h = h * 1.5; h.add_(0.25).relu_() or h.mul_(s), s a float input",
                       lambda g: {"s": g.scalar("float", 0.25, 2.0) if g.rng.random() < 0.5 else ""},
                       plain(inplace_mid)),
    "inplace_input": Op("u.mul_(2) on x or a new input u; h = h + u", draw_inplace_input, plain(inplace_input)),
    "out_op":       Op("buf = torch.empty_like(h); torch.add/mul(h, y, out=buf); h = buf",
                       lambda g: {"fn": g.pick("add", "mul"), "y": g.tensor((g.B, g.D)) if g.rng.random() < 0.5 else ""},
                       plain(out_op)),
    "free_then_out": Op("t = x.repeat(4); s = t[n:].sum(); del t; out = torch.empty(n); torch.add(x, s, out=out)",
                        lambda g: {"n": (n := g.pick(1000, 4096, 12345)), "x": g.tensor((n,), layout="contig"),
                                   "out": g.out()},
                        plain(free_then_out)),
    "free_then_out_mid": Op("t = h.repeat(4, 1); s = t[B:].sum(0); del t; o = torch.empty_like(h); torch.add(h, s, out=o)",
                            lambda g: {"b": g.B}, plain(free_then_out_mid)),
    "mul_scalar":   Op("h = h * lr, lr a float input",
                       lambda g: {"s": g.scalar("float", 0.25, 2.0)}, lambda p, c: lambda v, h, out: h * v[p["s"]]),
    "add_alpha":    Op("h = torch.add(h, y, alpha=a), y and a inputs",
                       lambda g: {"y": g.tensor((g.B, g.D)), "a": g.scalar("float", -2.0, 2.0)},
                       lambda p, c: lambda v, h, out: torch.add(h, v[p["y"]], alpha=v[p["a"]])),
    "clamp_min":    Op("h = h.clamp(min=m), m a float input",
                       lambda g: {"m": g.scalar("float", -1.0, 0.5)}, lambda p, c: lambda v, h, out: h.clamp(min=v[p["m"]])),
    "alias_pair":   Op("h = torch.addcmul(h, a, b, value=0.5), a and b given the same tensor (or not)",
                       lambda g: {"a": (a := g.tensor((g.B, g.D))), "b": g.tensor((g.B, g.D), layout=g.inputs[-1].layout,
                                                                                   alias=a)},
                       lambda p, c: lambda v, h, out: torch.addcmul(h, v[p["a"]], v[p["b"]], value=0.5)),
    "cpp_axpby":    Op("o = zeros; lp.compile_cuda axpby[grid, 256](a, h, y, o, n); h = o",
                       lambda g: draw_front_end(g, "cpp"), make_front_end("cpp")),
    "triton_axpy":  Op("o = zeros; lp.triton_launcher(axpy)[grid](h, y, o, a, n, BLOCK=...); h = o",
                       lambda g: draw_front_end(g, "triton"), make_front_end("triton")),
    "numba_scale":  Op("o = empty; lp.from_numba(scale, 'void(float32[::1], float32[::1], float32)')[grid, 256](o, h, a)",
                       lambda g: draw_front_end(g, "numba"), make_front_end("numba")),
}
# fmt: on
