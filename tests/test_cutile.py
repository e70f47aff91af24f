"""The cuTile front end without a GPU: real kernels from cuTile's samples compiled by ``tileiras``
for sm_90, their parameter layout read from the cubin, and launches through both executors into
the fake GPU, checking the exact bytes of cuTile's calling convention (an array as its pointer,
extents and strides) and every refusal of an argument the kernel was not compiled for.

Needs ``cuda-tile`` and its compiler (``pip install 'launchpad-kernels[cutile]'``); without them the
tests skip, saying which is missing.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

ct = pytest.importorskip("cuda.tile", reason="cuTile (PyPI cuda-tile) is not installed")

import launchpad  # noqa: E402
from launchpad import ArgumentError, ArgumentTypeError, BinaryError, LaunchpadError, UnsupportedVersion  # noqa: E402
from launchpad.frontends.cutile import args as cutile_args  # noqa: E402
from launchpad.frontends.cutile import versions  # noqa: E402
from launchpad.frontends.cutile.signature import describe, signature_from_args  # noqa: E402
from launchpad.launch.checks import Context  # noqa: E402


def _no_tileiras() -> str:
    try:
        versions.check_tileiras("sm_90")
    except UnsupportedVersion as exc:
        return str(exc)
    return ""


NO_TILEIRAS = _no_tileiras()
needs_tileiras = pytest.mark.skipif(bool(NO_TILEIRAS), reason=f"cannot compile cuTile kernels here: {NO_TILEIRAS}")

from cuda.tile.compilation import (  # noqa: E402
    ArrayConstraint,
    CallingConvention,
    KernelSignature,
    ListConstraint,
    ScalarConstraint,
)
from cutile_kernels import layer_norm_fwd, softmax, vector_add  # noqa: E402


@ct.kernel
def pair_add(ab, c, flag, scale, tile: ct.Constant[int]):
    bid = ct.bid(0)
    a = ct.load(ab[0], index=(bid,), shape=(tile,))
    b = ct.load(ab[1], index=(bid,), shape=(tile,))
    ct.store(c, index=(bid,), tile=ct.where(flag, a + b * scale, a))


@ct.kernel
def copy2d(x, y, tm: ct.Constant[int], tn: ct.Constant[int]):
    t = ct.load(x, index=(ct.bid(0), ct.bid(1)), shape=(tm, tn), padding_mode=ct.PaddingMode.ZERO)
    ct.store(y, index=(ct.bid(0), ct.bid(1)), tile=t)


ANY_2D_I64 = ArrayConstraint(ct.float32, 2, index_dtype=ct.int64, stride_lower_bound_incl=0, alias_groups=(),
                             may_alias_internally=False)  # fmt: skip
_BUILT: dict = {}


def build(name: str) -> launchpad.Kernel:
    """Each test kernel compiled once per session."""
    if name not in _BUILT:
        x, h = torch.randn(64), torch.randn(64, 128)
        made = {
            "vector_add": lambda: launchpad.from_cutile(vector_add, (x, x, x, 16), arch="sm_90"),
            "pair_add": lambda: launchpad.from_cutile(pair_add, ((x, x), x, True, 2.0, 16), arch="sm_90"),
            "copy2d": lambda: launchpad.from_cutile(
                copy2d, KernelSignature([ANY_2D_I64, ANY_2D_I64, 8, 8], CallingConvention.cutile_python_v2()), arch=90
            ),
            "softmax": lambda: launchpad.from_cutile(softmax, (h, h, 16, 128), arch=(9, 0)),
            "layer_norm": lambda: launchpad.from_cutile(
                layer_norm_fwd, (h, h[0], h[0], h, h[:, 0].contiguous(), h[:, 0].contiguous(), 1e-5, 128), arch="sm_90"
            ),
        }
        _BUILT[name] = made[name]()
    return _BUILT[name]


def i32(*values: int) -> list[bytes]:
    return [struct.pack("<i", v) for v in values]


def q(*values: int) -> list[bytes]:
    return [struct.pack("<q", v) for v in values]


# --- compiled for sm_90, the layout from the cubin ------------------------------------------------


@needs_tileiras
def test_vector_add_layout_from_the_cubin():
    k = build("vector_add")
    assert isinstance(k, launchpad.frontends.cutile.frontend.CutileKernel)
    # cuTile's mangled symbol: v1 (what ct.launch picks), three 1-d float32 arrays whose extents are
    # multiples of 16 (i16), stride 1 (t1), 16-byte aligned (p16), and the constant 16 (I16)
    assert k.name == "vector_add_Kt1_" + "_".join(["A1f32_1i16t1_p16"] * 3) + "_I16"
    assert k.binary.arch == "sm_90" and k.metadata["calling_convention"] == "t1"
    assert [(p.offset, p.size, p.type, p.name) for p in k.params] == [
        (0, 8, "*fp32", "a"), (8, 4, "i32", "a.shape[0]"), (12, 4, "i32", "a.strides[0]"),
        (16, 8, "*fp32", "b"), (24, 4, "i32", "b.shape[0]"), (28, 4, "i32", "b.strides[0]"),
        (32, 8, "*fp32", "c"), (40, 4, "i32", "c.shape[0]"), (44, 4, "i32", "c.strides[0]"),
    ]  # fmt: skip
    assert k.plan.block == (1, 1, 1) and k.plan.shared_mem == 0  # ct.launch's launch
    assert [a.kind for a in k.args] == ["expand", "expand", "expand", "const"] and k.args[3].value == 16
    assert k.args[0].options["align"] == 16 and k.args[0].options["shape_div"] == [16]


@needs_tileiras
def test_tuple_bool_and_float_parameters_use_v2():
    k = build("pair_add")
    assert k.metadata["calling_convention"] == "t2"  # a tuple parameter needs cutile_python_v2
    assert [(p.offset, p.size, p.type) for p in k.params[6:]] == [
        (32, 8, "*fp32"), (40, 4, "i32"), (44, 4, "i32"), (48, 1, "i1"), (52, 4, "fp32")]  # fmt: skip
    assert [p.name for p in k.params[:3]] == ["ab[0]", "ab[0].shape[0]", "ab[0].strides[0]"]
    assert [a.path for a in k.args[:2]] == [(0, 0), (0, 1)]


@needs_tileiras
def test_int64_index_layout():
    k = build("copy2d")
    assert [p.size for p in k.params] == [8] * 10 and k.params[1].type == "i64"
    assert k.args[0].options["stride_const"] == [None, None] and k.args[0].options["stride_min"] == [0, 0]


# --- launches: the bytes, in both executors -------------------------------------------------------


@needs_tileiras
def test_vector_add_bytes(fake_gpu):
    k = fake_gpu.install(build("vector_add"))
    a, b, c = torch.randn(4096), torch.randn(4096), torch.empty(4096)
    k[(256,)](a, b, c, 16)
    launch = fake_gpu.last
    assert (launch.grid, launch.block, launch.shared_mem, launch.stream) == ((256, 1, 1), (1, 1, 1), 0, 0x5000)
    assert launch.params == [
        *q(a.data_ptr()), *i32(4096, 1), *q(b.data_ptr()), *i32(4096, 1), *q(c.data_ptr()), *i32(4096, 1)]  # fmt: skip
    k[256](a, b, c)  # the constant may be left out, and an int grid is (256, 1, 1)
    assert fake_gpu.last.params == launch.params and fake_gpu.last.grid == (256, 1, 1)
    k.launch((256, 1, 1), None, a, b, c, tile_size=16)
    assert fake_gpu.last.params == launch.params


@needs_tileiras
def test_tuple_scalar_bytes(fake_gpu):
    k = fake_gpu.install(build("pair_add"))
    a, b, c = torch.randn(64), torch.randn(64), torch.empty(64)
    k[4]((a, b), c, False, 0.5)
    p = fake_gpu.last.params
    assert p[:6] == [*q(a.data_ptr()), *i32(64, 1), *q(b.data_ptr()), *i32(64, 1)]
    assert p[9:] == [b"\x00", struct.pack("<f", 0.5)]


@needs_tileiras
def test_strided_views_pass_their_strides(fake_gpu):
    k = fake_gpu.install(build("copy2d"))
    base = torch.randn(12, 10)
    view, out = base[1:9, ::2].t(), torch.empty(5, 8)  # shape (5, 8), strides (2, 10), offset 10 elements
    k[(1, 1)](view, out)
    p = fake_gpu.last.params
    assert p[:5] == q(base.data_ptr() + 40, 5, 8, 2, 10)
    assert p[5:] == q(out.data_ptr(), 5, 8, 8, 1)


@needs_tileiras
def test_layer_norm_scalar_and_mixed_ranks(fake_gpu):
    k = fake_gpu.install(build("layer_norm"))
    x, y = torch.randn(64, 128), torch.empty(64, 128)
    w, b, mean, rstd = torch.randn(128), torch.randn(128), torch.empty(64), torch.empty(64)
    k[(64,)](x, w, b, y, mean, rstd, 1e-5, 128)
    p = fake_gpu.last.params
    assert p[:5] == [*q(x.data_ptr()), *i32(64, 128, 128, 1)]
    assert p[5:8] == [*q(w.data_ptr()), *i32(128, 1)]
    assert p[-1] == struct.pack("<f", 1e-5)


# --- refusals, named -------------------------------------------------------------------------------


@needs_tileiras
@pytest.mark.parametrize(
    "make, error, words",
    [
        (lambda: torch.randn(64, dtype=torch.float64), ArgumentTypeError, "expected float32 elements"),
        (lambda: torch.randn(4, 16), ArgumentError, "expected a 1-d array"),
        (lambda: torch.randn(65)[1:], ArgumentError, "not 16-byte aligned"),
        (lambda: torch.randn(40), ArgumentError, "shape[0] is 40; the kernel was compiled assuming it is a multiple of 16"),
        (lambda: torch.randn(128)[::2], ArgumentError, "stride[0] is 2"),
        (lambda: [0.0] * 64, ArgumentTypeError, "expected an array"),
    ],
)  # fmt: skip
def test_arrays_that_break_a_promise_are_refused(fake_gpu, make, error, words):
    k = fake_gpu.install(build("vector_add"))
    ok = torch.randn(64)
    with pytest.raises(error) as info:
        k[4](make(), ok, ok, 16)
    assert "kernel 'vector_add', argument 0 ('a')" in str(info.value) and words in str(info.value)
    assert not fake_gpu.launches


@needs_tileiras
def test_wrong_constant_and_grid_limit_are_refused(fake_gpu):
    k = fake_gpu.install(build("vector_add"))
    x = torch.randn(64)
    with pytest.raises(ArgumentError, match=r"kernel 'vector_add', argument 3 \('tile_size'\)"):
        k[4](x, x, x, 32)
    unpatched = type(k)(k.spec)  # the fake GPU replaces .launch; the check comes before any device
    for launch in (lambda: k[1 << 24](x, x, x), lambda: unpatched.launch((1 << 24,), None, x, x, x),
                   lambda: k.bind((1 << 24, 1), None, x, x, x),
                   lambda: unpatched.launch((np.int64(1 << 24),), None, x, x, x)):  # fmt: skip
        with pytest.raises(ArgumentError, match="grid dimension x = 16777216 is above cuTile's limit"):
            launch()
    assert not fake_gpu.launches


@needs_tileiras
def test_broadcast_views_are_refused_where_cutile_assumed_no_overlap(fake_gpu):
    k = fake_gpu.install(build("copy2d"))
    row, out = torch.randn(1, 8), torch.empty(5, 8)
    with pytest.raises(ArgumentError, match=r"argument 0 \('x'\).*reaches one element from two indices"):
        k[(1, 1)](row.expand(5, 8), out)


def test_index_range_and_every_promise_checked_by_the_converter():
    arg = launchpad.Arg("x", "expand", (0,), params=(0, 1, 2, 3, 4), converter="cutile_array",
                        options={"ndim": 2, "dtype": "float32", "index": "i32"})  # fmt: skip
    ctx = Context("k", (), (arg,))
    convert = cutile_args.array_converter(**arg.options)
    huge = torch.randn(2).as_strided((1, 2), (2**31, 1))  # an extent-1 dimension may have any stride
    with pytest.raises(ArgumentError, match=r"stride\[0\] = 2147483648 does not fit.*ct.IndexedWithInt64"):
        convert(huge, -1, 0, ctx, arg)
    x = torch.randn(3, 4).t()
    assert convert(x, -1, 0, ctx, arg) == (x.data_ptr(), 4, 3, 1, 4)  # no promise: any strides
    const = cutile_args.array_converter(ndim=2, dtype="float32", shape_const=[None, 3], stride_min=[1, 1])
    with pytest.raises(ArgumentError, match=r"shape\[1\] is 4; the kernel was compiled assuming it is 3"):
        const(torch.randn(2, 4), -1, 0, ctx, arg)
    assert cutile_args.elements_disjoint((4, 3), (1, 4)) and not cutile_args.elements_disjoint((2, 2), (1, 1))


# --- signatures: derived as ct.launch derives them, and what launchpad refuses -------------------


def test_signature_rules_without_a_driver(monkeypatch):
    def no_driver(*args, **kw):
        raise OSError("libcuda.so.1: cannot open shared object file")  # what cuTile raises without a driver

    monkeypatch.setattr(KernelSignature, "from_kernel_args", staticmethod(no_driver))
    x = torch.randn(64)
    sig = signature_from_args(vector_add, (x[1:17], x[:32], x[::2], 16))
    a, b, c, tile = sig.parameters
    assert (a.base_addr_divisible_by, a.shape_divisible_by, a.stride_constant) == (1, (16,), (1,))
    assert (b.base_addr_divisible_by, b.shape_divisible_by) == (16, (16,))
    assert c.stride_constant == (None,) and c.shape_divisible_by == (16,) and not c.may_alias_internally
    assert tile.value == 16 and sig.calling_convention.code == "t1"
    one = signature_from_args(softmax, (torch.randn(1, 128), torch.randn(1, 128), 16, 128))
    assert one.parameters[0].shape_constant == (1, None) and one.calling_convention.code == "t2"
    assert signature_from_args(vector_add, (x, x, x, 16), CallingConvention.cutile_python_v1()).symbol.startswith(
        "vector_add_Kt1_"
    )


def test_unsupported_parameters_are_refused_by_name():
    element = ArrayConstraint(ct.float32, 1, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                              may_alias_internally=False)  # fmt: skip
    sig = KernelSignature([ListConstraint(element, alias_groups=(), elements_may_alias=False), element,
                           ScalarConstraint(ct.int32)], CallingConvention.cutile_python_v2())  # fmt: skip
    with pytest.raises(LaunchpadError, match=r"kernel 'k', parameter 'xs': launchpad does not pass ListConstraint"):
        describe(sig, ["xs", "y", "n"], "k")
    with pytest.raises(ArgumentError, match="the signature has 3 parameters, the function 2"):
        describe(sig, ["xs", "y"], "k")


@needs_tileiras
def test_a_cubin_exported_earlier_is_taken_without_compiling(tmp_path, monkeypatch):
    k = build("vector_add")
    path = tmp_path / "va.cubin"
    path.write_bytes(k.image)
    monkeypatch.setattr(versions, "check_tileiras", lambda arch: pytest.fail("compiled"))
    x = torch.randn(64)
    again = launchpad.from_cutile(vector_add, (x, x, x, 16), cubin=path)
    assert again.spec == k.spec
    with pytest.raises(BinaryError, match=r"vector_add_Kt1_.* is not in this cubin"):
        launchpad.from_cutile(vector_add, (x[1:17], x, x, 16), cubin=path)  # another signature, another symbol


@needs_tileiras
def test_saved_kernel_loads_and_launches_without_cutile(tmp_path, fake_gpu):
    k = build("vector_add")
    path = tmp_path / "va.json"
    k.save(path)
    code = ("import sys, json; sys.modules['cuda.tile'] = None; import launchpad; k = launchpad.load(sys.argv[1]); "
            "print(json.dumps([k.name, [a.to_json() for a in k.args]]))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == [k.name, [a.to_json() for a in k.args]]
    loaded = fake_gpu.install(launchpad.load(path))
    x = torch.randn(64)
    loaded[4](x, x, x)
    assert fake_gpu.last.params[:3] == [*q(x.data_ptr()), *i32(64, 1)]


# --- versions ---------------------------------------------------------------------------------------


def test_missing_or_old_cutile_is_named(monkeypatch):
    monkeypatch.setattr(ct, "__version__", "1.3.0")
    with pytest.raises(UnsupportedVersion, match=r"cuTile \(PyPI cuda-tile\) >= 1.4.*cuda-tile 1.3.0 is installed"):
        launchpad.from_cutile(vector_add, (torch.randn(64),) * 3 + (16,), arch="sm_90")
    monkeypatch.setitem(sys.modules, "cuda.tile", None)
    with pytest.raises(
        UnsupportedVersion,
        match=r"needs cuTile \(PyPI cuda-tile >= 1.4\).*cuda-tile\[tileiras\].*the cutile extra of launchpad-kernels",
    ):
        launchpad.from_cutile(vector_add, (), arch="sm_90")


def test_missing_or_old_tileiras_is_named(monkeypatch):
    versions.tileiras_version.cache_clear()
    from cuda.tile import _compile

    def missing():
        raise FileNotFoundError("'tileiras' compiler not found")

    monkeypatch.setattr(_compile, "_find_compiler_bin", missing)
    try:
        with pytest.raises(UnsupportedVersion, match=r"tileiras \(PyPI nvidia-cuda-tileiras\) is not found"):
            launchpad.from_cutile(vector_add, (torch.randn(64),) * 3 + (16,), arch="sm_90")
    finally:
        versions.tileiras_version.cache_clear()
    monkeypatch.setattr(versions, "tileiras_version", lambda: ("/x/tileiras", (13, 2)))
    with pytest.raises(UnsupportedVersion, match=r"tileiras 13.2; compiling for sm_90 needs tileiras >= 13.3"):
        launchpad.from_cutile(vector_add, (torch.randn(64),) * 3 + (16,), arch="sm_90")
    versions.check_tileiras("sm_100")  # Blackwell from 13.1


# --- the compiled executor takes cuTile arrays itself, and hands every refusal over -----------------


@pytest.fixture
def handed_over(monkeypatch):
    """Launches the compiled executor handed to the Python one (counted at the Python launch)."""
    from launchpad.launch import pylaunch

    counted: list[int] = []
    build_python = pylaunch.build

    def counting(spec, runtime, devices):
        made = build_python(spec, runtime, devices)
        inner = made.launch
        made.launch = lambda *a, **kw: (counted.append(1), inner(*a, **kw))[1]
        return made

    monkeypatch.setattr(pylaunch, "build", counting)
    return counted


@needs_tileiras
def test_compiled_executor_takes_arrays_and_hands_refusals_over(monkeypatch, handed_over):
    from conftest import FakeGPU, why_executor_unavailable

    if why_executor_unavailable("compiled"):
        pytest.skip(why_executor_unavailable("compiled"))
    gpu = FakeGPU(monkeypatch, "compiled")
    va = gpu.install(type(build("vector_add"))(build("vector_add").spec, compiled=True))
    c2 = gpu.install(type(build("copy2d"))(build("copy2d").spec, compiled=True))
    x, base, out = torch.randn(64), torch.randn(12, 10), torch.empty(5, 8)
    va[4](x, x, x, 16)
    c2[(1, 1)](base[1:9, ::2].t(), out)  # any strides: taken in C, with its strides
    c2[(1, 1)](base[:5, :8], out)
    assert handed_over == []
    assert gpu.launches[1].params[:5] == q(base.data_ptr() + 40, 5, 8, 2, 10)
    assert gpu.launches[2].params[:5] == q(base.data_ptr(), 5, 8, 10, 1)
    refused = [lambda: va[4](x[1:17], x, x), lambda: va[4](x[::2], x, x), lambda: va[4](x[:40], x, x),
               lambda: c2[(1, 1)](torch.randn(1, 8).expand(5, 8), out),
               lambda: va[4](x.double(), x, x)]  # fmt: skip
    for i, call in enumerate(refused):
        with pytest.raises(ArgumentError):
            call()
        assert len(handed_over) == i + 1
    assert len(gpu.launches) == 3
    # a stride's lower bound, checked in C too: a launch that keeps it is taken, one that breaks it handed over
    spec = build("copy2d").spec
    args = list(spec.args)
    args[0] = dataclasses.replace(args[0], options={**args[0].options, "stride_min": [3, 1]})
    strict = gpu.install(type(build("copy2d"))(spec.replace(args=tuple(args)), compiled=True))
    strict[(1, 1)](base[:5, :8], out)
    assert len(handed_over) == 5
    with pytest.raises(ArgumentError, match=r"stride\[0\] is 2; .* at least 3"):
        strict[(1, 1)](base[1:9, ::2].t(), out)
    assert len(handed_over) == 6


# --- where cuTile cannot compile (the GPU machine): carried cubins, for launchpad and ct.launch ------


@needs_tileiras
def test_carried_cubins_stand_in_for_tileiras(tmp_path, monkeypatch):
    from launchpad.bench import cutile as carry
    from launchpad.bench.harness import Missing
    from launchpad.frontends.cutile import frontend

    x = torch.randn(64)
    args = (x, x, x, 16)
    compiled = build("vector_add")
    signature = signature_from_args(vector_add, args)
    (tmp_path / f"{signature.symbol}.cubin").write_bytes(compiled.image)
    monkeypatch.setenv("LAUNCHPAD_CUTILE_CUBINS", str(tmp_path))
    monkeypatch.setattr(carry, "_cannot_compile", [])

    def no_compiler(arch):
        raise UnsupportedVersion("cuTile's compiler tileiras (PyPI nvidia-cuda-tileiras) is not found")

    monkeypatch.setattr(frontend, "check_tileiras", no_compiler)
    kernel, how = carry.build(vector_add, args)
    assert kernel.spec == compiled.spec and how == f"carried cubin {signature.symbol}.cubin"
    undo = carry.carried_compile(vector_add)  # what ct.launch's cache miss calls: the same cubin, no tileiras
    try:
        image, symbol, smem, providers = vector_add._compile(signature.with_symbol(None), None, (9, 0))
        assert (image, symbol, smem, providers) == (compiled.image, signature.symbol, None, ())
    finally:
        undo()
    assert "_compile" not in vars(vector_add)
    with pytest.raises(Missing, match=r"cuTile cannot compile here \(.*\) and no cubin is carried for vector_add_Kt1_"):
        carry.build(vector_add, (x[1:17], x, x, 16))
