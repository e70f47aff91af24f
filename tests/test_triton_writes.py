"""Which arguments a Triton kernel writes, read from its TTIR (launchpad.frontends.triton.writes):
real kernels compiled here for sm_90, and hand-written TTIR for what Triton rarely prints."""

from __future__ import annotations

import pytest

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
from triton.backends.compiler import GPUTarget  # noqa: E402

import launchpad as lp  # noqa: E402
from launchpad.frontends.triton.writes import written_arguments  # noqa: E402


def written(fn, signature, **constexprs):
    source = triton.compiler.ASTSource(fn, signature={**signature, **dict.fromkeys(constexprs, "constexpr")},
                                       constexprs=constexprs)  # fmt: skip
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32))
    found = written_arguments(compiled.asm["ttir"], compiled.metadata.name)
    return None if found is None else {name for name, w in zip(signature, found) if w}


@triton.jit
def scale_bias(h, bias, out, n, dim, scale, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(h + i, mask=m) * scale + tl.load(bias + i % dim, mask=m), mask=m)


@triton.jit
def scatter(x, idx, out, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out + tl.load(idx + i), tl.load(x + i))  # an address from loaded data: idx is only read


@triton.jit
def pick(a, b, flag, BLOCK: tl.constexpr):
    p = a
    if flag > 0:
        p = b
    tl.store(p + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))


@triton.jit
def loop(a, b, c, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    pa = a + i
    for _ in range(0, n, BLOCK):
        acc += tl.load(pa)
        pa += BLOCK
    if tl.program_id(0) == 0:
        tl.atomic_add(b + i, acc)
    tl.store(c + i, acc)


@triton.jit
def swap_in_while(a, b, n, BLOCK: tl.constexpr):
    k = 0
    p = a
    while k < n:
        tl.store(p + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))
        p = b
        k += 1


@triton.jit
def descriptor(a, out, M, N, BLOCK: tl.constexpr):
    d = tl.make_tensor_descriptor(out, shape=[M, N], strides=[N, 1], block_shape=[BLOCK, BLOCK])
    d.store([0, 0], tl.load(a + tl.arange(0, BLOCK)[:, None] * N + tl.arange(0, BLOCK)[None, :]))


@triton.jit
def inline_asm(x, out, PURE: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [tl.load(x + i)], dtype=tl.float32, is_pure=PURE, pack=1)
    tl.store(out + i, y)


@triton.jit
def from_int(x, address, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(address.to(tl.pointer_type(tl.float32), bitcast=True) + i, tl.load(x + i))


F32 = "*fp32"


@pytest.mark.parametrize(("fn", "signature", "expected"), [
    (scale_bias, {"h": F32, "bias": F32, "out": F32, "n": "i32", "dim": "i32", "scale": "fp32"}, {"out"}),
    (scatter, {"x": F32, "idx": "*i32", "out": F32}, {"out"}),
    (pick, {"a": F32, "b": F32, "flag": "i32"}, {"a", "b", "flag"}),  # (an int in the set is dropped later)
    (loop, {"a": F32, "b": F32, "c": F32, "n": "i32"}, {"b", "c"}),
    (swap_in_while, {"a": F32, "b": F32, "n": "i32"}, {"a", "b", "n"}),
    (descriptor, {"a": F32, "out": F32, "M": "i32", "N": "i32"}, {"out", "M", "N"}),
    (inline_asm, {"x": F32, "out": F32}, {"out"}),  # declared pure (PURE=True below)
    (inline_asm, {"x": F32, "out": F32, "impure": None}, None),  # effects unknown: every tensor counts as written
    (from_int, {"x": F32, "address": "i64"}, None),
])  # fmt: skip
def test_the_arguments_a_kernel_stores_through(fn, signature, expected):
    options = {"BLOCK": 32 if fn is descriptor else 128}
    if fn is inline_asm:
        options["PURE"] = "impure" not in signature
        signature = {k: v for k, v in signature.items() if k != "impure"}
    assert written(fn, signature, **options) == expected


LOADED_POINTER = """module {
  tt.func public @k(%pp: !tt.ptr<!tt.ptr<f32>>, %x: !tt.ptr<f32>) attributes {noinline = false} {
    %0 = tt.load %pp : !tt.ptr<!tt.ptr<f32>>
    %1 = tt.load %x : !tt.ptr<f32>
    tt.store %0, %1 : !tt.ptr<f32>
    tt.return
  }
}"""
TWO_FUNCTIONS = """module {
  tt.func private @helper(%p: !tt.ptr<f32>) { tt.return }
  tt.func public @k(%x: !tt.ptr<f32>, %y: !tt.ptr<f32>) attributes {noinline = false} {
    tt.call @helper(%y) : (!tt.ptr<f32>) -> ()
    tt.return
  }
}"""
BRANCHES = """module {
  tt.func public @k(%x: !tt.ptr<f32>, %y: !tt.ptr<f32>) attributes {noinline = false} {
    cf.br ^bb1(%y : !tt.ptr<f32>)
  ^bb1(%p: !tt.ptr<f32>):
    tt.store %p, %x : !tt.ptr<f32>
    tt.return
  }
}"""


@pytest.mark.parametrize("ttir", [LOADED_POINTER, TWO_FUNCTIONS, BRANCHES])
def test_what_cannot_be_followed_says_so(ttir):
    assert written_arguments(ttir, "k") is None


def test_a_from_triton_kernel_carries_what_it_writes_to_its_saved_artifact(tmp_path):
    k = lp.from_triton(scale_bias, signature={"h": F32, "bias": F32, "out": F32, "n": "i32", "dim": "i32",
                                              "scale": "fp32"},
                       constexprs={"BLOCK": 128}, target=GPUTarget("cuda", 90, 32))  # fmt: skip
    assert [k.spec.args[i].name for i in k.spec.metadata["written"]] == ["out"]
    saved = k.save(tmp_path / "k.json")
    assert lp.load(saved).spec.metadata["written"] == k.spec.metadata["written"]
