"""The Triton front end on CPU: real Triton compiles for sm_90 (no GPU needed), checked against the
cubin (launchpad's reader and the cuobjdump shipped in Triton's wheel), the metadata, and the
exact bytes the generated launch path packs (``fake_gpu``)."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import launchpad
from launchpad.core import driver as _driver
from launchpad.core.binary import kernels_in_image
from launchpad.frontends.triton import cache_folder as _triton_cache
from launchpad.frontends.triton import frontend as lpt
from launchpad.frontends.triton import spec as _triton_spec
from launchpad.frontends.triton import tensordesc as _tensordesc
from launchpad.launch.checks import same_value

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
import triton_kernels as K  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402
from triton_abi import DESCRIPTOR_FLAGS, HAS_PADDING, NULL_SCRATCH, SCRATCH_NAMES, SCRATCH_WORDS, VERSION, i32, i64, q  # noqa: E402

SM90 = GPUTarget("cuda", 90, 32)
SM80 = GPUTarget("cuda", 80, 32)
D = [["tt.divisibility", 16]]
REPO = Path(__file__).resolve().parents[1]

# name -> (jit function, signature, constants, divisible-by-16 argument paths, options, target)
SPECS = {
    "add": (K.add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
            {"BLOCK": 1024}, [(0,), (1,), (2,), (3,)], {"num_warps": 4}, SM90),
    "rowsum": (K.rowsum_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "stride": "i32", "N": "i32", "BLOCK": "constexpr"},
               {"BLOCK": 1024}, [(0,), (1,), (2,)], {"num_warps": 4}, SM90),
    "matmul": (K.matmul_kernel,
               {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                "sam": "i32", "sak": "constexpr", "sbk": "i32", "sbn": "constexpr", "scm": "i32", "scn": "constexpr",
                "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"},
               {"sak": 1, "sbn": 1, "scn": 1, "BM": 128, "BN": 256, "BK": 64},
               [(0,), (1,), (2,), (3,), (4,), (5,), (6,), (8,), (10,)], {"num_warps": 8, "num_stages": 4}, SM90),
    "strided": (K.strided_scale_kernel,
                {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "sx": "constexpr", "so": "i32", "alpha": "fp32",
                 "BLOCK": "constexpr"},
                {"sx": 1, "BLOCK": 256}, [(0,), (1,)], {}, SM90),
    "bias_none": (K.axpy_bias_kernel,
                  {"x_ptr": "*fp32", "y_ptr": "*fp32", "bias_ptr": "constexpr", "out_ptr": "*fp32", "n": "i32",
                   "alpha": "fp32", "BLOCK": "constexpr"},
                  {"bias_ptr": None, "BLOCK": 256}, [(0,), (1,), (3,)], {}, SM90),
    "scalars": (K.scalars_kernel,
                {"out_ptr": "*fp64", "a": "fp16", "b": "bf16", "c": "fp32", "d": "fp64", "e": "i64", "f": "u1"},
                {}, [(0,)], {"num_warps": 1}, SM90),
    "tuple": (K.tuple_kernel, {"out_ptr": "*fp32", "t": ("*fp32", "fp32", "i32"), "n": "i32", "BLOCK": "constexpr"},
              {"BLOCK": 128}, [(0,), (1, 0)], {}, SM90),
    "tuple_const": (K.tuple_kernel,
                    {"out_ptr": "*fp32", "t": ("*fp32", "fp32", "constexpr"), "n": "i32", "BLOCK": "constexpr"},
                    {(1, 2): 1, "BLOCK": 128}, [], {}, SM90),
    "host_desc": (K.host_desc_kernel,
                  {"in_desc": "tensordesc<fp16[64, 64]>", "out_ptr": "*fp16", "M": "i32", "N": "i32",
                   "BM": "constexpr", "BN": "constexpr"},
                  {"BM": 64, "BN": 64}, [(1,)], {}, SM90),
    "host_desc_sm80": (K.host_desc_kernel,
                       {"in_desc": "tensordesc<fp16[64, 64]>", "out_ptr": "*fp16", "M": "i32", "N": "i32",
                        "BM": "constexpr", "BN": "constexpr"},
                       {"BM": 64, "BN": 64}, [(1,)], {}, SM80),
    "device_desc": (K.device_desc_kernel,
                    {"in_ptr": "*fp16", "out_ptr": "*fp16", "M": "i32", "N": "i32", "BM": "constexpr",
                     "BN": "constexpr"},
                    {"BM": 64, "BN": 64}, [(0,), (1,), (3,)], {}, SM90),
    "ctas2": (K.add_kernel, {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
              {"BLOCK": 1024}, [(0,), (1,), (2,), (3,)], {"num_warps": 4, "num_ctas": 2, "launch_pdl": True}, SM90),
    "cast": (K.cast_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp16", "n": "i32", "OUT": "constexpr", "BLOCK": "constexpr"},
             {"OUT": tl.float16, "BLOCK": 256}, [(0,), (1,)], {}, SM90),
}  # fmt: skip

# the type words of each kernel's parameters, as Triton's launcher passes them
EXPECTED_WORDS = {
    "add": ["*fp32", "*fp32", "*fp32", "i32"],
    "rowsum": ["*fp32", "*fp32", "i32", "i32"],
    "matmul": ["*fp16"] * 3 + ["i32"] * 6,
    "strided": ["*fp32", "*fp32", "i32", "i32", "fp32"],
    "bias_none": ["*fp32", "*fp32", "*fp32", "i32", "fp32"],
    "scalars": ["*fp64", "fp16", "bf16", "fp32", "fp64", "i64", "u1"],
    "tuple": ["*fp32", "*fp32", "fp32", "i32", "i32"],
    "tuple_const": ["*fp32", "*fp32", "fp32", "i32"],
    "host_desc": ["bytes128", "i32", "i32", "i64", "i64", "*fp16", "i32", "i32"],
    "host_desc_sm80": [
        "*fp16",
        "i64",
        "i64",
        "i64",
        "i64",
        *["u1"] * len(DESCRIPTOR_FLAGS),
        "i32",
        "i32",
        "i64",
        "i64",
        "*fp16",
        "i32",
        "i32",
    ],
    "device_desc": ["*fp16", "*fp16", "i32", "i32"],
    "ctas2": ["*fp32", "*fp32", "*fp32", "i32"],
    "cast": ["*fp32", "*fp16", "i32"],
}


@pytest.fixture(scope="session")
def triton_cache(tmp_path_factory):
    """Compile into a private Triton cache (fresh, so the cache-folder tests see this run's files)."""
    path = tmp_path_factory.mktemp("triton-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(path))
        yield path


class Compiled:
    """Each SPECS kernel compiled once per session, on first use."""

    def __init__(self) -> None:
        self._done: dict[str, object] = {}

    def __getitem__(self, name: str):
        if name not in self._done:
            fn, sig, consts, divisible, options, target = SPECS[name]
            src = ASTSource(fn, sig, consts, {p: D for p in divisible})
            self._done[name] = triton.compile(src, target=target, options=options)
        return self._done[name]


@pytest.fixture(scope="session")
def compiled(triton_cache) -> Compiled:
    return Compiled()


def cuobjdump_params(cubin: bytes, name: str, tmp_path: Path) -> list[tuple[int, int, int]]:
    """(ordinal, offset, size) of each KPARAM_INFO record, read by NVIDIA's cuobjdump."""
    exe = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    path = tmp_path / f"{name}.cubin"
    path.write_bytes(cubin)
    lines = subprocess.run(
        [str(exe), "-elf", str(path)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    start = lines.index(f".nv.info.{name}")
    records = []
    for line in lines[start + 1 :]:
        if line.startswith("."):
            break
        m = re.search(r"Ordinal\s*:\s*0x([0-9a-f]+)\s+Offset\s*:\s*0x([0-9a-f]+)\s+Size\s*:\s*0x([0-9a-f]+)", line)
        if m:
            records.append(tuple(int(g, 16) for g in m.groups()))
    return sorted(records)


def f32(v: float) -> bytes:
    return struct.pack("<f", v)


NULL = q(0)


def aligned(n: int, dtype=torch.float32) -> torch.Tensor:
    t = torch.randn(n + 16).to(dtype)
    off = (-t.data_ptr() % 16) // t.element_size()
    out = t[off : off + n]
    assert out.data_ptr() % 16 == 0
    return out


# --- layout: params, types and plan ------------------------------------------------------------


@pytest.mark.parametrize("name", list(SPECS))
def test_params_equal_the_cubin_and_cuobjdump(name, compiled, tmp_path):
    c = compiled[name]
    k = launchpad.from_triton(c)
    cubin = c.asm["cubin"]
    binary = kernels_in_image(cubin, "cubin")[c.metadata.name]
    layout = [(p.offset, p.size) for p in k.params]
    assert layout == [(p.offset, p.size) for p in binary.params]
    assert [(i, off, size) for i, (off, size) in enumerate(layout)] == cuobjdump_params(
        cubin, c.metadata.name, tmp_path
    )
    assert [p.type for p in k.params] == EXPECTED_WORDS[name] + SCRATCH_WORDS
    assert [p.name for p in k.params[len(EXPECTED_WORDS[name]) :]] == SCRATCH_NAMES
    assert k.name == c.metadata.name and k.image == cubin and k.image_kind == "cubin"


@pytest.mark.parametrize("name", list(SPECS))
def test_plan_follows_the_metadata(name, compiled):
    md = compiled[name].metadata
    plan = launchpad.from_triton(compiled[name]).plan
    assert plan.block == (32 * md.num_warps, 1, 1)
    assert plan.shared_mem == md.shared
    assert plan.grid_scale == (md.num_ctas, 1, 1) and plan.grid_in_clusters is (md.num_ctas > 1)
    assert plan.cluster == ((md.num_ctas, 1, 1) if md.num_ctas > 1 else None)
    assert plan.cluster_spread is (md.num_ctas > 1)
    assert plan.non_portable_cluster is False  # clusters of at most 8 blocks
    assert plan.cooperative is md.launch_cooperative_grid
    assert plan.pdl is md.launch_pdl


def test_metadata_of_the_interesting_kernels(compiled):
    # the test kernels really exercise what they are meant to
    assert compiled["matmul"].metadata.shared > 48 * 1024
    assert compiled["device_desc"].metadata.global_scratch_size > 0
    assert compiled["host_desc"].metadata.tensordesc_meta and not compiled["host_desc_sm80"].metadata.tensordesc_meta
    assert compiled["ctas2"].metadata.num_ctas == 2
    plan = launchpad.from_triton(compiled["ctas2"]).plan
    assert plan.cluster == (2, 1, 1) and plan.grid_scale == (2, 1, 1) and plan.pdl


def test_args_map_python_arguments(compiled):
    k = launchpad.from_triton(compiled["matmul"])
    by_name = {a.name: a for a in k.args}
    assert [a.name for a in k.args if a.path] == list(K.matmul_kernel.arg_names)
    assert {n: by_name[n].value for n in ("sak", "sbn", "scn", "BM", "BN", "BK")} == {
        "sak": 1, "sbn": 1, "scn": 1, "BM": 128, "BN": 256, "BK": 64}  # fmt: skip
    assert all(by_name[n].kind == "const" for n in ("sak", "sbn", "scn", "BM", "BN", "BK"))
    assert [by_name[n].align for n in ("a_ptr", "b_ptr", "c_ptr")] == [16, 16, 16]
    assert [by_name[n].multiple_of for n in ("M", "N", "K", "sam", "sbk", "scm")] == [16] * 6
    k = launchpad.from_triton(compiled["tuple"])
    assert [(a.name, a.kind, a.path) for a in k.args if a.path] == [
        ("out_ptr", "param", (0,)), ("t", "param", (1, 0)), ("t", "param", (1, 1)), ("t", "param", (1, 2)),
        ("n", "param", (2,)), ("BLOCK", "const", (3,))]  # fmt: skip
    assert k.args[1].align == 16 and k.args[0].align == 16
    assert [p.name for p in k.params[:5]] == ["out_ptr", "t[0]", "t[1]", "t[2]", "n"]
    scratch = [a for a in launchpad.from_triton(compiled["device_desc"]).args if a.kind == "scratch"]
    md = compiled["device_desc"].metadata
    profile = {"size": 0, "align": 1, **({"zero": True} if VERSION >= (3, 8) else {})}
    assert [(a.name, a.options) for a in scratch] == [
        ("global_scratch", {"size": md.global_scratch_size, "align": md.global_scratch_align}),
        ("profile_scratch", profile)][: len(SCRATCH_WORDS)]  # fmt: skip


def test_from_jit_function_compiles_like_ast_source(compiled):
    k = launchpad.from_triton(
        K.add_kernel, signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
        constexprs={"BLOCK": 1024}, attrs={"x_ptr": "D", "y_ptr": "D", "out_ptr": "D", "n": "D"},
        num_warps=4, target=SM90,
    )  # fmt: skip
    ref = launchpad.from_triton(compiled["add"])
    assert k.image == ref.image
    assert (k.params, k.args, k.plan) == (ref.params, ref.args, ref.plan)
    # a signature as a string of the runtime arguments' types, in order; an int target
    k2 = launchpad.from_triton(
        K.add_kernel, signature="*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 256}, num_warps=2, target=90
    )
    assert k2.plan.block == (64, 1, 1)
    assert [a.kind for a in k2.args if a.path] == ["param"] * 4 + ["const"]
    assert [a.align for a in k2.args[:3]] == [0, 0, 0]


def test_from_jit_function_errors():
    with pytest.raises(launchpad.ArgumentError, match=r"constexpr argument 'BLOCK' needs a value"):
        launchpad.from_triton(K.add_kernel, signature="*fp32, *fp32, *fp32, i32", target=SM90)
    with pytest.raises(launchpad.ArgumentError, match=r"3 signature types for 4 runtime arguments"):
        launchpad.from_triton(K.add_kernel, signature="*fp32, *fp32, i32", constexprs={"BLOCK": 64}, target=SM90)
    with pytest.raises(launchpad.ArgumentError, match=r"unknown arguments \['z'\]"):
        launchpad.from_triton(K.add_kernel, signature={"z": "i32"}, constexprs={"BLOCK": 64}, target=SM90)
    with pytest.raises(launchpad.ArgumentError, match=r"no type or constexpr value for arguments \['n'\]"):
        launchpad.from_triton(
            K.add_kernel,
            signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32"},
            constexprs={"BLOCK": 64},
            target=SM90,
        )
    with pytest.raises(launchpad.ArgumentTypeError, match=r"from_triton takes a @triton\.jit function or a "
                                                          r"CompiledKernel, got the plain function '<lambda>'"):  # fmt: skip
        launchpad.from_triton(lambda: None, target=SM90)


# --- packed bytes through the real generated launch path ---------------------------------------


def test_add_packs_pointers_int_and_null_scratch(compiled, fake_gpu):
    k = fake_gpu.install(launchpad.from_triton(compiled["add"]))
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    k[(4,)](x, y, out, 4096, 1024)
    launch = fake_gpu.last
    assert launch.grid == (4, 1, 1) and launch.block == (128, 1, 1) and launch.shared_mem == 0
    assert launch.stream == 0x5000 and launch.ex is None
    assert launch.params == [q(x.data_ptr()), q(y.data_ptr()), q(out.data_ptr()), i32(4096), *NULL_SCRATCH]
    k.launch(3, None, x, y, out, 32, 1024)  # the plain launch, block fixed by the plan
    assert fake_gpu.last.grid == (3, 1, 1) and fake_gpu.last.params[3] == i32(32)


def test_add_rejects_what_the_specialization_excludes(compiled, fake_gpu):
    k = fake_gpu.install(launchpad.from_triton(compiled["add"]))
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    with pytest.raises(launchpad.ArgumentError, match=r"'x_ptr'.*not 16-byte aligned"):
        k[(4,)](x[1:], y, out, 4096, 1024)
    with pytest.raises(launchpad.ArgumentError, match=r"'out_ptr'.*not 16-byte aligned"):
        k[(4,)](x, y, out[2:], 4096, 1024)
    with pytest.raises(launchpad.ArgumentError, match=r"argument 3 \('n'\).*1000 is not a multiple of 16"):
        k[(4,)](x, y, out, 1000, 1024)
    with pytest.raises(
        launchpad.ArgumentTypeError, match=r"'y_ptr'.*expected a torch.float32 tensor, got a torch.float16"
    ):
        k[(4,)](x, y.half(), out, 4096, 1024)
    with pytest.raises(
        launchpad.ArgumentError, match=r"argument 4 \('BLOCK'\): the kernel was specialized for 1024, got int 512"
    ):
        k[(4,)](x, y, out, 4096, 512)
    with pytest.raises(
        launchpad.ArgumentTypeError, match=r"takes 5 arguments \(x_ptr, y_ptr, out_ptr, n, BLOCK\), got 3; missing: n"
    ):
        k[(4,)](x, y, out)
    assert fake_gpu.launches == []  # nothing reached the driver
    k[(4,)](x, y, out, 4096)  # a constexpr may be left out: the kernel has it built in
    assert len(fake_gpu.launches) == 1
    fake_gpu.launches.clear()
    k[(4,)](x, y, out, 4096, 1024)
    assert len(fake_gpu.launches) == 1


def test_every_entry_point_takes_the_jit_call(compiled, fake_gpu, tmp_path):
    """from_triton, a saved artifact and a cache folder: positional or keyword arguments by the
    def's names, constexprs optional and checked where their values are known."""
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    expected = [q(x.data_ptr()), q(y.data_ptr()), q(out.data_ptr()), i32(4096), *NULL_SCRATCH]
    direct = launchpad.from_triton(compiled["add"])
    saved = launchpad.load(direct.save(tmp_path / "add.json"))
    cached = launchpad.load_triton(cache_folder(compiled["add"]), constexprs={"BLOCK": 1024})
    for k in (direct, saved, cached):
        fake_gpu.install(k)
        calls = [
            lambda k: k[(4,)](x, y, out, 4096, 1024), lambda k: k[(4,)](x, y, out, 4096),
            lambda k: k[(4,)](x_ptr=x, y_ptr=y, out_ptr=out, n=4096, BLOCK=1024),
            lambda k: k[(4,)](x, y, n=4096, out_ptr=out), lambda k: k.launch((4,), None, x, y, out, n=4096),
        ]  # fmt: skip
        for call in calls:
            call(k)
            assert fake_gpu.last.params == expected and fake_gpu.last.grid == (4, 1, 1)
        with pytest.raises(
            launchpad.ArgumentError, match=r"argument 4 \('BLOCK'\): the kernel was specialized for 1024"
        ):
            k[(4,)](x, y, out, 4096, BLOCK=512)
        with pytest.raises(
            launchpad.ArgumentTypeError, match=r"got an unexpected keyword argument 'N' \(arguments: x_ptr"
        ):
            k[(4,)](x, y, out, N=4096)


def test_matmul_large_shared_memory_and_int_one_constants(compiled, fake_gpu):
    k = fake_gpu.install(launchpad.from_triton(compiled["matmul"]))
    a, b, c = aligned(256 * 256, torch.float16), aligned(256 * 256, torch.float16), aligned(256 * 256, torch.float16)
    args = [a, b, c, 256, 256, 256, 256, 1, 256, 1, 256, 1, 128, 256, 64]
    k[(2, 1)](*args)
    launch = fake_gpu.last
    assert launch.shared_mem == compiled["matmul"].metadata.shared > 48 * 1024
    assert launch.block == (256, 1, 1) and launch.grid == (2, 1, 1)
    assert launch.params == [q(a.data_ptr()), q(b.data_ptr()), q(c.data_ptr())] + [i32(256)] * 6 + [*NULL_SCRATCH]
    bad = list(args)
    bad[7] = 2
    with pytest.raises(
        launchpad.ArgumentError, match=r"argument 7 \('sak'\): the kernel was specialized for 1, got int 2"
    ):
        k[(2, 1)](*bad)
    bad = list(args)
    bad[13] = 128
    with pytest.raises(launchpad.ArgumentError, match=r"'BN'.*specialized for 256"):
        k[(2, 1)](*bad)


def test_rowsum_and_strided_kernels(compiled, fake_gpu):
    k = fake_gpu.install(launchpad.from_triton(compiled["rowsum"]))
    x, out = aligned(64 * 1024), aligned(64)
    k[64](x, out, 1024, 1000, 1024)
    assert fake_gpu.last.params == [q(x.data_ptr()), q(out.data_ptr()), i32(1024), i32(1000), *NULL_SCRATCH]
    with pytest.raises(launchpad.ArgumentError, match=r"'stride'.*1000 is not a multiple of 16"):
        k[64](x, out, 1000, 1000, 1024)

    k = fake_gpu.install(launchpad.from_triton(compiled["strided"]))
    x, out = aligned(300), aligned(600)
    k[(2,)](x, out, 300, 1, 2, 0.1, 256)
    assert fake_gpu.last.params == [q(x.data_ptr()), q(out.data_ptr()), i32(300), i32(2), f32(0.1), *NULL_SCRATCH]
    with pytest.raises(
        launchpad.ArgumentError, match=r"argument 3 \('sx'\): the kernel was specialized for 1, got int 3"
    ):
        k[(2,)](x, out, 300, 3, 2, 0.1, 256)
    with pytest.raises(launchpad.ArgumentError, match=r"'sx'.*specialized for 1, got bool True"):
        k[(2,)](x, out, 300, True, 2, 0.1, 256)  # True is not the int 1 (Triton would make it a u1 parameter)


def test_none_argument_is_a_constant(compiled, fake_gpu):
    k = fake_gpu.install(launchpad.from_triton(compiled["bias_none"]))
    x, y, out = aligned(256), aligned(256), aligned(256)
    k[1](x, y, None, out, 256, -1.5, 256)
    assert fake_gpu.last.params == [q(x.data_ptr()), q(y.data_ptr()), q(out.data_ptr()), i32(256), f32(-1.5),
                                    *NULL_SCRATCH]  # fmt: skip
    with pytest.raises(
        launchpad.ArgumentError, match=r"argument 2 \('bias_ptr'\): the kernel was specialized for None"
    ):
        k[1](x, y, out, out, 256, -1.5, 256)


def bf16_of(value: float) -> bytes:
    """The bfloat16 torch makes of a float (round to nearest even), as bytes."""
    return torch.tensor([value], dtype=torch.float32).to(torch.bfloat16).view(torch.int16).numpy().tobytes()


def test_scalar_bytes_fp16_bf16_rounding_fp32_fp64_i64_u1(compiled, fake_gpu):
    k = fake_gpu.install(launchpad.from_triton(compiled["scalars"]))
    out = aligned(8, torch.float64)
    # 0x3F80FFFF is 1.0078124: the nearest bf16 is 0x3F81, which torch gives and launchpad packs
    # (Triton's own launcher truncates to 0x3F80)
    b = struct.unpack("<f", struct.pack("<I", 0x3F80FFFF))[0]
    k[1](out, 0.1, b, 1 / 3, 2.0**-1074, -(2**40) + 5, True)
    params = fake_gpu.last.params
    assert params[1] == struct.pack("<e", 0.1) == b"\x66\x2e"
    assert params[2] == bf16_of(b) == b"\x81\x3f"
    assert params[3] == struct.pack("<f", 1 / 3)
    assert params[4] == struct.pack("<d", 2.0**-1074)
    assert params[5] == struct.pack("<q", -(2**40) + 5)
    assert params[6] == b"\x01"
    assert params[7:] == NULL_SCRATCH
    k[1](out, -2.0, -2.0, 3, 4, 7, False)  # ints for float parameters, like Triton's "d" format
    assert fake_gpu.last.params[1:7] == [
        struct.pack("<e", -2.0),
        b"\x00\xc0",
        f32(3),
        struct.pack("<d", 4),
        i64(7),
        b"\x00",
    ]
    with pytest.raises(launchpad.ArgumentError, match=r"argument 5 \('e'\).*out of range for i64"):
        k[1](out, 0.0, 0.0, 0.0, 0.0, 2**63, True)


def test_tuple_arguments_flatten(compiled, fake_gpu):
    k = fake_gpu.install(launchpad.from_triton(compiled["tuple"]))
    x, out = aligned(128), aligned(128)
    k[1](out, (x, 2.5, -7), 128, 128)
    assert fake_gpu.last.params == [q(out.data_ptr()), q(x.data_ptr()), f32(2.5), i32(-7), i32(128), *NULL_SCRATCH]
    with pytest.raises(launchpad.ArgumentError, match=r"argument 1\[0\] \('t'\).*not 16-byte aligned"):
        k[1](out, (x[1:], 2.5, -7), 128, 128)

    k = fake_gpu.install(launchpad.from_triton(compiled["tuple_const"]))
    k[1](out, (x, 2.5, 1), 100, 128)
    assert fake_gpu.last.params == [q(out.data_ptr()), q(x.data_ptr()), f32(2.5), i32(100), *NULL_SCRATCH]
    with pytest.raises(
        launchpad.ArgumentError, match=r"argument 1\[2\] \('t'\): the kernel was specialized for 1, got int 2"
    ):
        k[1](out, (x, 2.5, 2), 100, 128)


def test_dtype_constexpr_is_stored_as_str_and_compares(compiled, fake_gpu, tmp_path):
    k = launchpad.from_triton(compiled["cast"])
    assert [a.value for a in k.args if a.kind == "const"] == ["fp16", 256]
    for kernel in (k, launchpad.load(k.save(tmp_path / "cast.json"))):
        fake_gpu.install(kernel)
        x, out = aligned(256), aligned(256, torch.float16)
        kernel[1](x, out, 256, tl.float16, 256)
        assert fake_gpu.last.params[:3] == [q(x.data_ptr()), q(out.data_ptr()), i32(256)]
        with pytest.raises(
            launchpad.ArgumentError,
            match=r"'OUT'\): the kernel was specialized for 'fp16', got dtype triton.language.float32",
        ):
            kernel[1](x, out, 256, tl.float32, 256)


def test_same_value_matches_json_stored_constants():
    assert same_value((1, 2), [1, 2]) and same_value([(1, 2), 3], [[1, 2], 3])
    assert not same_value((1, 2), [1, 3]) and not same_value((1,), [1, 2])
    assert same_value(tl.float16, "fp16") and not same_value(tl.bfloat16, "fp16")
    assert same_value(tl.constexpr(64), 64)
    assert not same_value("fp16x", "fp16") and not same_value(True, 1) and not same_value(None, "None")


def fake_encoder(monkeypatch):
    calls = []

    def encode(*args):
        calls.append(args)
        return bytes(range(128))

    monkeypatch.setattr(_driver, "encode_tensor_map_tiled", encode)
    monkeypatch.setattr(_tensordesc, "_MAP_CACHE", {})
    return calls


def test_host_tensor_descriptor_tma_form(compiled, fake_gpu, monkeypatch):
    calls = fake_encoder(monkeypatch)
    k = fake_gpu.install(launchpad.from_triton(compiled["host_desc"]))
    meta = compiled["host_desc"].metadata.tensordesc_meta[0]
    base = aligned(128 * 192, torch.float16).view(128, 192)
    out = aligned(128 * 192, torch.float16)
    desc = TensorDescriptor.from_tensor(base, [64, 64])
    k[(2, 3)](desc, out, 128, 192, 64, 64)
    assert fake_gpu.last.params == [bytes(range(128)), i32(128), i32(192), i64(192), i64(1), q(out.data_ptr()),
                                    i32(128), i32(192), *NULL_SCRATCH]  # fmt: skip
    # dims reversed, byte strides of all but the innermost, box from the metadata, host dtype enum
    assert calls == [(_tensordesc.TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]], 2, base.data_ptr(), [192, 128], [384],
                      [64, 64], [1, 1], 0, meta["swizzle"], 2, 0)]  # fmt: skip
    k[(2, 3)](desc, out, 128, 192, 64, 64)
    assert len(calls) == 1  # the same map is reused
    if HAS_PADDING:
        k[(2, 3)](descriptor(base, [64, 64], "nan"), out, 128, 192, 64, 64)
        assert calls[-1][-1] == 1  # NaN out-of-bounds fill
    assert _tensordesc.TMA_DTYPE_DEVICE_TO_HOST[8] == 10 and _tensordesc.TMA_DTYPE_DEVICE_TO_HOST[9] == 8
    assert _tensordesc.TMA_DTYPE_DEVICE_TO_HOST[10] == 9 and _tensordesc.TMA_DTYPE_DEVICE_TO_HOST[6] == 6


def test_host_tensor_descriptor_errors(compiled, fake_gpu, monkeypatch):
    fake_encoder(monkeypatch)
    k = fake_gpu.install(launchpad.from_triton(compiled["host_desc"]))
    base = aligned(128 * 192, torch.float16).view(128, 192)
    out = aligned(128 * 192, torch.float16)
    with pytest.raises(
        launchpad.ArgumentError,
        match=r"argument 0 \('in_desc'\): the kernel was compiled for block shape \[64, 64\], got \[32, 64\]",
    ):
        k[1](TensorDescriptor.from_tensor(base, [32, 64]), out, 128, 192, 64, 64)
    with pytest.raises(
        launchpad.ArgumentTypeError, match=r"'in_desc'.*expected a torch.float16 tensor, got a torch.float32"
    ):
        k[1](TensorDescriptor.from_tensor(base.float(), [64, 64]), out, 128, 192, 64, 64)
    with pytest.raises(launchpad.ArgumentTypeError, match=r"'in_desc'.*expected a TensorDescriptor"):
        k[1](base, out, 128, 192, 64, 64)
    odd = types.SimpleNamespace(base=base, shape=[128, 100], strides=[100, 1], block_shape=[64, 64], padding="zero")
    with pytest.raises(launchpad.ArgumentError, match=r"strides \[100, 1\] of 2-byte elements are not multiples of 16"):
        k[1](odd, out, 128, 192, 64, 64)
    odd = types.SimpleNamespace(
        base=base, shape=[128, 192, 1], strides=[192, 1, 1], block_shape=[64, 64], padding="zero"
    )
    with pytest.raises(launchpad.ArgumentError, match=r"rank-2 descriptor, got shape \[128, 192, 1\]"):
        k[1](odd, out, 128, 192, 64, 64)
    assert fake_gpu.launches == []


def descriptor(base, block, padding="zero", tf32=False):
    """A host TensorDescriptor with the options the installed Triton has."""
    options = {"padding": padding} if HAS_PADDING else {}
    if tf32:
        options["round_f32_to_tf32"] = True
    return TensorDescriptor.from_tensor(base, block, **options)


def test_host_tensor_descriptor_pointer_form(compiled, fake_gpu):
    k = fake_gpu.install(launchpad.from_triton(compiled["host_desc_sm80"]))
    base = aligned(128 * 192, torch.float16).view(128, 192)
    out = aligned(128 * 192, torch.float16)
    for padding in ("zero", "nan") if HAS_PADDING else ("zero",):
        k[(2, 3)](descriptor(base, [64, 64], padding), out, 128, 192, 64, 64)
        flags = {"padding": bytes([padding == "nan"]), "round_f32_to_tf32": b"\x00"}
        assert fake_gpu.last.params == [
            q(base.data_ptr()),
            i64(128),
            i64(192),
            i64(192),
            i64(1),
            *(flags[f] for f in DESCRIPTOR_FLAGS),
            i32(128),
            i32(192),
            i64(192),
            i64(1),
            q(out.data_ptr()),
            i32(128),
            i32(192),
            *NULL_SCRATCH,
        ]


def test_device_descriptor_allocates_global_scratch(compiled, fake_gpu, monkeypatch):
    md = compiled["device_desc"].metadata
    calls = []

    def scratch(nbytes, align, dev, stream, zero=False):
        calls.append((nbytes, align, dev, stream))
        return object(), 0xA000

    monkeypatch.setattr(launchpad.launch.memory, "scratch", scratch)  # before the executors are made
    k = fake_gpu.install(launchpad.from_triton(compiled["device_desc"]))
    x, out = aligned(128 * 64, torch.float16), aligned(128 * 64, torch.float16)
    k[(2, 1)](x, out, 128, 64, 64, 64)
    assert calls == [(2 * md.global_scratch_size, md.global_scratch_align, -1, 0x5000)]
    assert fake_gpu.last.params == [q(x.data_ptr()), q(out.data_ptr()), i32(128), i32(64), q(0xA000), *NULL_SCRATCH[1:]]


def test_clusters_multiply_the_grid_and_use_launch_ex(compiled, fake_gpu):
    k = fake_gpu.install(launchpad.from_triton(compiled["ctas2"]))
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    k[(4,)](x, y, out, 4096, 1024)
    launch = fake_gpu.last
    assert launch.grid == (8, 1, 1) and launch.block == (128, 1, 1)
    assert launch.ex == {"cluster": (2, 1, 1), "cooperative": False, "pdl": True}
    assert launch.params == [q(x.data_ptr()), q(y.data_ptr()), q(out.data_ptr()), i32(4096), *NULL_SCRATCH]


def test_plans_of_other_triton_versions():
    base = {"num_warps": 4, "shared": 100, "target": {"backend": "cuda", "arch": 90, "warp_size": 32}}
    assert _triton_spec.launch_plan({**base, "num_ctas": 16}).non_portable_cluster
    # Triton 3.4/3.5: the grid and the cluster come from cluster_dims
    plan = _triton_spec.launch_plan({**base, "num_ctas": 2, "cluster_dims": [2, 1, 1], "triton_version": "3.5.0"})
    assert (plan.grid_scale, plan.cluster, plan.cluster_spread) == ((2, 1, 1), (2, 1, 1), True)
    plan = _triton_spec.launch_plan({**base, "num_ctas": 1, "cluster_dims": [1, 1, 1], "launch_cooperative_grid": True})
    assert (plan.grid_scale, plan.cluster, plan.cooperative) == ((1, 1, 1), None, True)
    with pytest.raises(launchpad.LaunchpadError, match="cluster along y or z"):
        _triton_spec.launch_plan({**base, "num_ctas": 2, "cluster_dims": [1, 2, 1]})


# --- cache folders and artifacts ------------------------------------------------------------------


def cache_folder(c) -> Path:
    """The Triton cache folder of a compiled kernel (found by its hash: 3.4 has no metadata_group)."""
    root = Path(os.environ["TRITON_CACHE_DIR"])
    return next(p.parent for p in root.rglob(f"{c.metadata.name}.json") if json.loads(p.read_text())["hash"] == c.hash)


def runtime_view(kernel) -> list:
    """A kernel's description without the constants a cache folder cannot know."""
    return [(a.name, a.kind, a.param, a.params, a.align, a.multiple_of, a.options) for a in kernel.args
            if a.kind != "const"]  # fmt: skip


@pytest.mark.parametrize("name", ["add", "tuple", "host_desc", "host_desc_sm80", "device_desc", "scalars", "ctas2"])
def test_load_triton_from_the_cache_folder(name, compiled):
    c = compiled[name]
    ref = launchpad.from_triton(c)
    folder = cache_folder(c)
    k = launchpad.load_triton(folder)
    assert k.plan == ref.plan and k.image == ref.image
    if VERSION < (3, 5) and name == "tuple":  # 3.4's TTIR names nothing, and 3 parameters hold 5 values
        assert [(p.offset, p.size, p.type) for p in k.params] == [(p.offset, p.size, p.type) for p in ref.params]
        assert [a.name for a in k.args if a.path] == ["arg0", "arg1", "arg2", "arg3", "arg4"]
    else:
        assert k.params == ref.params
        assert runtime_view(k) == runtime_view(ref)
    # only runtime arguments, numbered in order
    positions = [a.path[0] for a in k.args if a.path]
    assert positions == sorted(positions) and set(positions) == set(range(len(set(positions))))
    json_file = folder / f"{c.metadata.name}.json"
    for alias in (json_file, folder / f"__grp__{c.metadata.name}.json", folder / f"{c.metadata.name}.cubin"):
        assert launchpad.load_triton(alias).to_json() == k.to_json()


def test_load_triton_takes_the_jit_functions_own_call(compiled, fake_gpu):
    k = fake_gpu.install(launchpad.load_triton(cache_folder(compiled["matmul"])))
    a, b, c = aligned(4096, torch.float16), aligned(4096, torch.float16), aligned(4096, torch.float16)
    expected = [q(a.data_ptr()), q(b.data_ptr()), q(c.data_ptr())] + [i32(64)] * 6 + [*NULL_SCRATCH]
    if VERSION < (3, 5):  # an unnamed TTIR whose 9 values do not fit the def's 12: runtime arguments only
        assert [a.name for a in k.args if a.path] == [f"arg{i}" for i in range(9)]
        k[(1, 1)](a, b, c, 64, 64, 64, 64, 64, 64)
        assert fake_gpu.last.params == expected
        return
    # the cache keeps no constexpr values: the def (found through the TTIR's location) names every
    # parameter; the ones the TTIR lacks are constexprs (unknown) or were specialized to 1 or None
    assert [a.name for a in k.args if a.path] == ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "sam", "sak", "sbk",
                                                  "sbn", "scm", "scn", "BM", "BN", "BK"]  # fmt: skip
    assert [a.path[0] for a in k.args if a.path] == list(range(15))
    k[(1, 1)](a, b, c, 64, 64, 64, 64, 1, 64, 1, 64, 1)  # positional, as matmul_kernel[grid](...) takes them
    assert fake_gpu.last.params == expected
    k[(1, 1)](a, b, c, M=64, N=64, K=64, sam=64, sbk=64, scm=64)  # keywords; specialized ones left out
    assert fake_gpu.last.params == expected
    with pytest.raises(launchpad.ArgumentError, match=r"argument 3 \('M'\).*65 is not a multiple of 16"):
        k[(1, 1)](a, b, c, 65, 64, 64, 64, 1, 64, 1, 64, 1)
    with pytest.raises(launchpad.ArgumentError) as err:
        k[(1, 1)](a, b, c, 64, 64, 64, 64, 2, 64, 1, 64, 1)
    assert str(err.value) == ("kernel 'matmul_kernel', argument 7 ('sak'): the kernel was specialized for 1 or None "
                              "(Triton compiles either into the kernel), got int 2")  # fmt: skip
    with pytest.raises(launchpad.ArgumentError, match=r"argument 12 \('BM'\): got int 128, but the value this kernel"):
        k[(1, 1)](a, b, c, 64, 64, 64, 64, 1, 64, 1, 64, 1, BM=128)
    known = fake_gpu.install(launchpad.load_triton(cache_folder(compiled["matmul"]), constexprs={"BM": 128, "BN": 256}))
    known[(1, 1)](a, b, c, 64, 64, 64, 64, 1, 64, 1, 64, 1, 128, 256)
    assert fake_gpu.last.params == expected
    with pytest.raises(launchpad.ArgumentError, match=r"argument 13 \('BN'\): the kernel was specialized for 256"):
        known[(1, 1)](a, b, c, 64, 64, 64, 64, 1, 64, 1, 64, 1, BN=128)
    with pytest.raises(launchpad.ArgumentError, match=r"constexprs names \['M', 'BX'\], which are not its constexpr"):
        launchpad.load_triton(cache_folder(compiled["matmul"]), constexprs={"M": 1, "BX": 2})


def test_load_triton_tuple_arguments(compiled, fake_gpu):
    k = fake_gpu.install(launchpad.load_triton(cache_folder(compiled["tuple"])))
    x, out = aligned(128), aligned(128)
    k[1](out, (x, 2.5, -7), 128) if VERSION >= (3, 5) else k[1](out, x, 2.5, -7, 128)
    assert fake_gpu.last.params == [q(out.data_ptr()), q(x.data_ptr()), f32(2.5), i32(-7), i32(128), *NULL_SCRATCH]
    if VERSION >= (3, 5):
        k[1](out, t=(x, 2.5, -7), n=128)  # by the def's names, BLOCK left out
        assert fake_gpu.last.params[:5] == [q(out.data_ptr()), q(x.data_ptr()), f32(2.5), i32(-7), i32(128)]


def test_load_triton_without_ttir_takes_raw_values(compiled, tmp_path, fake_gpu):
    c = compiled["host_desc"]
    src = cache_folder(c)
    for suffix in (".json", ".cubin"):
        (tmp_path / f"host_desc_kernel{suffix}").write_bytes((src / f"host_desc_kernel{suffix}").read_bytes())
    k = launchpad.load_triton(tmp_path)
    ref = launchpad.from_triton(c)
    assert [(p.offset, p.size) for p in k.params] == [(p.offset, p.size) for p in ref.params]
    assert [p.type for p in k.params] == ["bytes128", "i32", "i32", "i64", "i64", None, None, None, *SCRATCH_WORDS]
    assert [(a.name, a.kind) for a in k.args if a.path] == [("arg0", "expand"), ("arg1", "param"), ("arg2", "param"),
                                                            ("arg3", "param")]  # fmt: skip


def test_load_triton_errors(tmp_path):
    with pytest.raises(launchpad.LaunchpadError, match=r"should hold one Triton kernel's NAME\.json, found none"):
        launchpad.load_triton(tmp_path)
    (tmp_path / "k.json").write_text(json.dumps({"name": "k"}))
    with pytest.raises(launchpad.LaunchpadError, match=r"no k.cubin next to"):
        launchpad.load_triton(tmp_path)


@pytest.mark.parametrize("name", ["add", "matmul", "tuple_const", "host_desc", "host_desc_sm80", "cast", "ctas2"])
def test_save_and_load_round_trip(name, compiled, tmp_path):
    k = launchpad.from_triton(compiled[name])
    loaded = launchpad.load(k.save(tmp_path / f"{name}.json"))
    assert loaded.to_json() == k.to_json()
    assert (loaded.params, loaded.args, loaded.plan) == (k.params, k.args, k.plan)


_NO_TRITON = r"""
import json, sys

# Python's own way to make a package unimportable: `import triton` raises ImportError, and
# importlib.util.find_spec("triton") (which torch's Triton probe calls at import) returns None.
sys.modules["triton"] = None
import launchpad
from launchpad.launch.checks import CONVERTERS

out = {"folders": [launchpad.load_triton(p).to_json() for p in json.loads(sys.argv[1])],
       "artifacts": [launchpad.load(p).to_json() for p in json.loads(sys.argv[2])],
       "tensordesc": "tensordesc" in CONVERTERS,
       "triton_loaded": any(v is not None and (m == "triton" or m.startswith("triton.")) for m, v in sys.modules.items())}
try:
    import triton  # noqa: F401
    out["blocked"] = False
except ImportError:
    out["blocked"] = True
print(json.dumps(out))
"""


def test_cache_folders_and_artifacts_load_without_triton(compiled, tmp_path):
    names = ["add", "tuple_const", "host_desc", "host_desc_sm80", "device_desc", "cast"]
    folders = [str(cache_folder(compiled[n])) for n in names]
    artifacts = [str(launchpad.from_triton(compiled[n]).save(tmp_path / f"{n}.json")) for n in names]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run([sys.executable, "-c", _NO_TRITON, json.dumps(folders), json.dumps(artifacts)],
                            capture_output=True, text=True, env=env, check=True)  # fmt: skip
    out = json.loads(result.stdout)
    assert out["blocked"] and not out["triton_loaded"] and out["tensordesc"]
    assert out["folders"] == [launchpad.load_triton(f).to_json() for f in folders]
    assert out["artifacts"] == [launchpad.from_triton(compiled[n]).to_json() for n in names]
    for name, folder_json in zip(names, out["folders"]):
        ref = launchpad.from_triton(compiled[name]).to_json()
        assert folder_json["plan"] == ref["plan"]
        assert [p.pop("name") for p in folder_json["params"]] == [p.pop("name") for p in ref["params"]] or VERSION < (
            3,
            5,
        )
        assert folder_json["params"] == ref["params"]


def test_tensordesc_converter_entry_points_agree(compiled):
    """``CONVERTERS["tensordesc"](value, device, ctx, arg, **options)`` and the specialized converter
    the generated code calls give the same values."""
    k = launchpad.from_triton(compiled["host_desc_sm80"])
    (arg,) = [a for a in k.args if a.kind == "expand"]
    base = aligned(128 * 192, torch.float16).view(128, 192)
    desc = descriptor(base, [64, 64], "nan" if HAS_PADDING else "zero")
    plain = launchpad.launch.checks.CONVERTERS["tensordesc"](desc, -1, 0, k._context, arg, **arg.options)
    special = _tensordesc.tensordesc.specialize(**arg.options)(desc, -1, 0, k._context, arg)
    flags = {"padding": HAS_PADDING, "round_f32_to_tf32": False}
    assert (
        plain == special == (base.data_ptr(), 128, 192, 192, 1, *(flags[f] for f in DESCRIPTOR_FLAGS), 128, 192, 192, 1)
    )
    assert len(plain) == len(arg.params)


def test_ttir_types():
    assert _triton_cache.ttir_type("!tt.ptr<f32>", "x") == "*fp32"
    assert _triton_cache.ttir_type("!tt.ptr<bf16, 1>", "x") == "*bf16"
    assert _triton_cache.ttir_type("!tt.ptr<i32>", "x") == "*void"  # i32 or u32: signless in MLIR
    assert _triton_cache.ttir_type("!tt.ptr<i1>", "x") == "*u1"
    assert _triton_cache.ttir_type("!tt.ptr<f8E4M3FN>", "x") == "*fp8e4nv"
    assert _triton_cache.ttir_type("i1", "x") == "u1" and _triton_cache.ttir_type("i64", "x") == "i64"
    assert _triton_cache.ttir_type("!tt.tensordesc<tensor<64x32xbf16>>", "x") == "tensordesc<bf16[64, 32]>"  # up to 3.7
    assert _triton_cache.ttir_type("!tt.tensordesc<64x32xbf16>", "x") == "tensordesc<bf16[64, 32]>"  # 3.8+
    with pytest.raises(launchpad.LaunchpadError, match=r"kernel 'k', argument 2: unsupported argument type 'f128'"):
        _triton_cache.ttir_type("f128", "kernel 'k', argument 2")


@pytest.mark.skipif(VERSION < (3, 5), reason="Triton 3.4 is installed: every test here runs on its real cubins")
def test_triton_3_4_layout_one_scratch_pointer_and_wide_bools(compiled, fake_gpu):
    """Triton 3.4 metadata (no profile scratch) and a 4-byte bool parameter, on a newer real cubin
    whose layout fits it: rowsum's (ptr, ptr, i32, i32, ptr, ptr) read as (ptr, ptr, u1, i32, ptr)
    plus 3.4's single global_scratch."""
    c = compiled["rowsum"]
    md = {k: v for k, v in lpt._metadata_of(c).items() if not k.startswith("profile_scratch")}
    md["triton_version"] = "3.4.0"
    leaves = [_triton_spec.Leaf("x_ptr", (0,), "*fp32"), _triton_spec.Leaf("out_ptr", (1,), "*fp32"), _triton_spec.Leaf("flag", (2,), "u1"),
              _triton_spec.Leaf("N", (3,), "i32"), _triton_spec.Leaf("extra", (4,), "*fp32")]  # fmt: skip
    k = fake_gpu.install(launchpad.Kernel(_triton_spec.build_spec(c.asm["cubin"], md, leaves, "rowsum")))
    assert [p.type for p in k.params] == ["*fp32", "*fp32", "u32", "i32", "*fp32", "*i8"]
    assert [a.name for a in k.args if a.kind == "scratch"] == ["global_scratch"]
    x, out = aligned(64), aligned(64)
    k[1](x, out, True, 7, None)
    assert fake_gpu.last.params == [q(x.data_ptr()), q(out.data_ptr()), b"\x01\0\0\0", i32(7), *NULL_SCRATCH]


# --- one test per rule that changed between Triton versions (see launchpad.frontends.triton.versions) ------


def test_versions_outside_the_supported_range_are_refused(compiled):
    md = lpt._metadata_of(compiled["add"])
    for version in ("3.3.1", "3.10.0", "4.0.0"):
        with pytest.raises(
            launchpad.UnsupportedVersion,
            match=rf"compiled by Triton {version}; launchpad launches kernels of Triton 3\.4 to 3\.9",
        ):
            _triton_spec.build_spec(compiled["add"].asm["cubin"], {**md, "triton_version": version}, None, "add_kernel")
    with pytest.raises(launchpad.UnsupportedVersion, match=r"instrumentation_mode='gsan'.*launch it with Triton"):
        _triton_spec.build_spec(
            compiled["add"].asm["cubin"], {**md, "instrumentation_mode": "gsan"}, None, "add_kernel"
        )


def test_installed_triton_outside_the_range_is_refused(monkeypatch):
    from launchpad.frontends.triton import versions as _triton_versions

    monkeypatch.setattr(triton, "__version__", "3.10.0")
    with pytest.raises(
        launchpad.UnsupportedVersion, match=r"Triton 3\.10\.0 is installed; .* supports Triton 3\.4 to 3\.9"
    ):
        _triton_versions.check_installed()
    with pytest.raises(launchpad.UnsupportedVersion, match=r"Triton 3\.10\.0 is installed"):
        launchpad.from_triton(K.add_kernel, signature="*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 64}, target=SM90)
    with pytest.raises(launchpad.UnsupportedVersion, match=r"Triton 3\.10\.0 is installed"):
        launchpad.triton_launcher(K.add_kernel, target=SM90)


def _sm80_descriptor_kernel(compiled, version: str):
    """host_desc_sm80 as Triton ``version`` would have laid it out (its metadata and its flags)."""
    c = compiled["host_desc_sm80"]
    md = {**lpt._metadata_of(c), "triton_version": version}
    leaves = lpt._source_leaves(c.src)
    return launchpad.Kernel(_triton_spec.build_spec(c.asm["cubin"], md, leaves, "host_desc_kernel"))


@pytest.mark.parametrize(
    "version, flags",
    [
        ("3.5.1", ["padding"]),
        ("3.6.0", ["padding"]),
        ("3.7.1", ["padding", "round_f32_to_tf32"]),
        ("3.9.0", ["padding", "round_f32_to_tf32"]),
    ],
)
def test_pointer_form_descriptor_flags_by_version(compiled, fake_gpu, version, flags):
    """3.5 and 3.6 pass one NaN-padding byte; 3.7+ a round_f32_to_tf32 byte after it."""
    if len(flags) != len(DESCRIPTOR_FLAGS):  # the cubin has the installed Triton's parameter count
        with pytest.raises(launchpad.ArgumentError, match=r"the signature has .* parameters but the binary has"):
            _sm80_descriptor_kernel(compiled, version)
        return
    k = fake_gpu.install(_sm80_descriptor_kernel(compiled, version))
    base = aligned(128 * 192, torch.float16).view(128, 192)
    out = aligned(128 * 192, torch.float16)
    desc = types.SimpleNamespace(
        base=base, shape=(128, 192), strides=(192, 1), block_shape=[64, 64], padding="nan", round_f32_to_tf32=True
    )
    k[1](desc, out, 128, 192, 64, 64)
    assert fake_gpu.last.params[5 : 5 + len(flags)] == [b"\x01"] * len(flags)
    assert [p.name for p in k.params[5 : 5 + len(flags)]] == [f"in_desc.{f}" for f in flags]


@pytest.mark.parametrize(
    "version, tf32, doubled",
    [("3.4.0", False, False), ("3.6.0", False, True), ("3.7.1", True, False), ("3.9.0", True, False)],
)
def test_tma_descriptor_tf32_and_fp4_rules_by_version(compiled, monkeypatch, version, tf32, doubled):
    """TF32 maps from 3.7; an fp4-padded descriptor passes its doubled last dimension as the i32
    shape in 3.5 and 3.6 only (every version encodes it doubled)."""
    from launchpad.frontends.triton.versions import Convention, parse_version

    conv = Convention(parse_version(version))
    calls = fake_encoder(monkeypatch)
    meta = {"swizzle": 3, "elem_size": 4, "elem_type": 7, "block_size": [64, 16], "fp4_padded": False}
    convert = _tensordesc.converter(
        rank=2,
        dtype="fp32",
        block=[64, 16],
        meta=meta,
        flags=conv.descriptor_flags,
        fp4_shape_doubled=conv.fp4_shape_doubled,
        tf32_maps=conv.tf32_maps,
    )
    k = launchpad.from_triton(compiled["host_desc"])
    arg = next(a for a in k.args if a.kind == "expand")
    base = aligned(128 * 64).view(128, 64)
    desc = types.SimpleNamespace(
        base=base, shape=(128, 64), strides=(64, 1), block_shape=[64, 16], padding="zero", round_f32_to_tf32=True
    )
    values = convert(desc, -1, 0, k._context, arg)
    assert values[1:] == (128, 64, 64, 1)
    assert calls[-1][0] == (11 if tf32 else 7)  # CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 / FLOAT32
    fp4 = {**meta, "elem_size": 1, "elem_type": 0, "fp4_padded": True}
    convert = _tensordesc.converter(
        rank=2,
        dtype="",
        block=[64, 16],
        meta=fp4,
        flags=conv.descriptor_flags,
        fp4_shape_doubled=conv.fp4_shape_doubled,
        tf32_maps=conv.tf32_maps,
    )
    u8 = (torch.arange(128 * 64, dtype=torch.int32) % 251).to(torch.uint8)
    desc = types.SimpleNamespace(
        base=u8.view(128, 64), shape=(128, 64), strides=(64, 1), block_shape=[64, 16], padding="zero"
    )
    values = convert(desc, -1, 0, k._context, arg)
    assert values[1:3] == ((128, 128) if doubled else (128, 64))
    assert calls[-1][3] == [128, 128]  # the encoded dims, innermost first: always doubled


def test_ttir_of_each_version_groups_tuples_and_descriptors():
    """Up to 3.7 every part of an argument carries its name; from 3.8 tuple items are ``t.0`` and a
    descriptor's parts ``d.shape.0``, ``d.padding``... (real TTIR lines of both)."""
    from launchpad.frontends.triton.versions import Convention

    old = """tt.func public @k(%out: !tt.ptr<f32> {tt.divisibility = 16 : i32} loc("out"(#loc)), %t: !tt.ptr<f32> loc("t"(#loc)),
      %t_0: f32 loc("t"(#loc)), %d: !tt.ptr<f16> loc("d"(#loc)), %d_1: i64 loc("d"(#loc)), %d_2: i64 loc("d"(#loc)),
      %d_3: i64 loc("d"(#loc)), %d_4: i64 loc("d"(#loc)), %d_5: i1 loc("d"(#loc)), %d_6: i32 loc("d"(#loc)),
      %d_7: i32 loc("d"(#loc)), %d_8: i64 loc("d"(#loc)), %d_9: i64 loc("d"(#loc)), %n: i32 loc("n"(#loc))) attributes {}"""
    new = """tt.func public @k(%out: !tt.ptr<f32> {tt.divisibility = 16 : i32} loc("out"(#loc)), %t.0: !tt.ptr<f32> loc("t.0"(#loc)),
      %t.1: f32 loc("t.1"(#loc)), %d: !tt.ptr<f16> loc("d"(#loc)), %d.shape.0: i64 loc("d.shape.0"(#loc16)),
      %d.shape.1: i64 loc("d.shape.1"(#loc16)), %d.stride.0: i64 loc("d.stride.0"(#loc16)),
      %d.stride.1: i64 loc("d.stride.1"(#loc16)), %d.padding: i1 loc("d.padding"(#loc16)),
      %d.roundF32ToTF32: i1 loc("d.roundF32ToTF32"(#loc16)), %d.shape.0_0: i32 loc("d.shape.0"(#loc)),
      %d.shape.1_1: i32 loc("d.shape.1"(#loc)), %d.stride.0_2: i64 loc("d.stride.0"(#loc)),
      %d.stride.1_3: i64 loc("d.stride.1"(#loc)), %e: !tt.tensordesc<64x64xf16> loc("e"(#loc)),
      %e.shape.0: i32 loc("e.shape.0"(#loc)), %e.shape.1: i32 loc("e.shape.1"(#loc)),
      %e.stride.0: i64 loc("e.stride.0"(#loc)), %e.stride.1: i64 loc("e.stride.1"(#loc)), %n: i32 loc("n"(#loc))) attributes {}"""
    expected = [
        ("out", (0,), "*fp32", True),
        ("t", (1, 0), "*fp32", False),
        ("t", (1, 1), "fp32", False),
        ("d", (2,), "tensordesc<fp16[?, ?]>", False),
    ]
    assert [(x.name, x.path, x.type, x.divisible) for x in _triton_cache.ttir_leaves(old, "k", Convention((3, 6)))] == [
        *expected,
        ("n", (3,), "i32", False),
    ]
    assert [(x.name, x.path, x.type, x.divisible) for x in _triton_cache.ttir_leaves(new, "k", Convention((3, 9)))] == [
        *expected,
        ("e", (3,), "tensordesc<fp16[64, 64]>", False),
        ("n", (4,), "i32", False),
    ]


def test_profile_scratch_is_zero_filled_from_3_8(compiled):
    md = lpt._metadata_of(compiled["add"])
    for version, zero in (("3.6.0", False), ("3.7.1", False), ("3.8.0", True), ("3.9.0", True)):
        arg = _triton_spec._scratch_arg(
            {**md, "triton_version": version, "profile_scratch_size": 64},
            "profile",
            4,
            _triton_spec.convention({**md, "triton_version": version}),
        )
        assert arg.options == {
            "size": 64,
            "align": md.get("profile_scratch_align", 1),
            **({"zero": True} if zero else {}),
        }


def test_oversized_shared_memory_mode_from_3_8(compiled):
    md = lpt._metadata_of(compiled["matmul"])
    for version, oversized in (("3.6.0", False), ("3.7.1", False), ("3.8.0", True), ("3.9.0", True)):
        assert _triton_spec.launch_plan({**md, "triton_version": version}).oversized_shared is oversized
