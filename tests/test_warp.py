"""The Warp front end on the CPU: layouts against Warp's own ctypes structures, the bytes that reach
the driver (both executors, ``fake_gpu``), refusals, artifacts without Warp, the operator schema.

Tests marked ``needs_warp`` compile with Warp (PyPI ``warp-lang``; sm_90 without a GPU); the others
run on the artifacts carried in ``tests/cubins/warp`` (``python tests/warp_kernels.py`` remakes them).
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from warp_kernels import ARTIFACTS, CASES, kernels

import launchpad
from launchpad import ArgumentError, ArgumentTypeError, LaunchpadError, UnsupportedVersion
from launchpad.frontends.warp import args as warp_args
from launchpad.frontends.warp.versions import check_version

needs_warp = pytest.mark.skipif(
    importlib.util.find_spec("warp") is None, reason="Warp (PyPI warp-lang) is not installed"
)


@pytest.fixture(autouse=True, scope="module")
def _warp_cache(tmp_path_factory):
    """Warp's kernel cache in a folder of the test session's, not the user's ``~/.cache/warp``."""
    if importlib.util.find_spec("warp") is None:
        yield
        return
    import warp as wp

    wp.config.quiet = True
    wp.init()  # (which sets kernel_cache_dir: before, a setting would be overwritten)
    before = wp.config.kernel_cache_dir
    wp.config.kernel_cache_dir = str(tmp_path_factory.mktemp("warp-cache"))
    yield
    wp.config.kernel_cache_dir = before


STRUCT_CASE = next(case for case in CASES if case.name == "with_struct")


def carried(name: str) -> launchpad.WarpKernel:
    kernel = launchpad.load(ARTIFACTS / f"{name}.json")
    assert isinstance(kernel, launchpad.WarpKernel)
    return kernel


def array_t(t: torch.Tensor, inner: int = 0) -> bytes:
    """``wp::array_t`` of a tensor, by hand: its last ``inner`` dimensions are the element's."""
    n = t.dim() - inner
    shape, strides = list(t.shape[:n]), [s * t.element_size() for s in t.stride()[:n]]
    pad = [0] * (4 - n)
    return struct.pack("<QQ4i4iHH4x", t.data_ptr(), 0, *shape, *pad, *strides, *pad, n, 0)


def bounds(shape: tuple[int, ...], size: int, coord_mult: int = 1) -> bytes:
    head = struct.pack(f"<{len(shape)}I", *shape)
    return head + bytes(-len(head) % 8) + struct.pack("<QQ", size, coord_mult)


# --- layouts against Warp's own structures ---------------------------------------------------------


@needs_warp
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (2, 3, 4, 5), (0,), (1, 1)])
def test_array_t_equals_warps(shape):
    from warp._src.types import array_t as warp_array_t

    strides = tuple(4 * math.prod(shape[d + 1 :]) + 8 * d for d in range(len(shape)))
    theirs = bytes(warp_array_t(data=0x7F0012345600, grad=0, ndim=len(shape), shape=shape, strides=strides))
    assert warp_args.pack_array(0x7F0012345600, shape, strides) == theirs
    assert len(theirs) == warp_args.ARRAY_BYTES == 56


@needs_warp
@pytest.mark.parametrize("kernel_dim", [1, 2, 3, 4])
@pytest.mark.parametrize("dim", [(5,), (3, 4), (2, 3, 4), (2, 3, 4, 5), (0, 7), (1000000,)])
def test_launch_bounds_equal_warps(dim, kernel_dim):
    from warp._src.context import _build_launch_bounds_from_tuple

    theirs = _build_launch_bounds_from_tuple(dim, kernel_dim)
    ours, size = warp_args.launch_bounds(dim, kernel_dim)
    assert ours == bytes(theirs) and size == theirs.size
    assert len(ours) == warp_args.BOUNDS_BYTES[kernel_dim] == ctypes.sizeof(theirs)


@needs_warp
def test_vector_and_matrix_values_equal_warps():
    import warp as wp

    wp.config.quiet = True
    wp.init()  # fp16 conversions go through Warp's native library

    ctx = launchpad.launch.checks.Context("k", (), ())
    arg = launchpad.Arg("v", "expand", (1,), params=(1,), converter="warp_value")
    cases = [(wp.vec3, "fp32", [3], (1.5, -2.0, 3.25)), (wp.vec2h, "fp16", [2], (0.5, 7.0)),
             (wp.vec4i, "i32", [4], (1, -2, 3, 2**31 - 1)), (wp.mat22d, "fp64", [2, 2], ((1.0, 2.0), (3.0, 4.0))),
             (wp.quat, "fp32", [4], (0.0, 0.0, 0.0, 1.0)), (wp.transform, "fp32", [7], tuple(range(7)))]  # fmt: skip
    for wtype, word, shape, value in cases:
        theirs = bytes(wtype(*[c for row in value for c in (row if isinstance(row, tuple) else (row,))]))
        ours = warp_args.convert_value(value, 0, 0, ctx, arg, word=word, shape=shape)[0]
        assert ours == theirs, wtype
        flat = torch.tensor(value)  # a tensor of the components packs the same
        assert warp_args.convert_value(flat, 0, 0, ctx, arg, word=word, shape=shape)[0] == theirs


@pytest.mark.parametrize(("size", "block", "max_blocks", "grid"), [
    (1000, 256, 0, 4), (1024, 256, 0, 4), (1025, 256, 0, 5), (1, 256, 0, 1), (0, 256, 0, 0), (10**6, 256, 7, 7),
    (10**6, 128, -1, 7813), (2**40, 256, 0, 2**31 - 1)])  # fmt: skip
def test_grid_is_warps(size, block, max_blocks, grid):
    """wp_cuda_launch_kernel's grid-stride rule: ceil(size / block), capped by max_blocks (or 2**31 - 1)."""
    assert warp_args.grid_of(size, block, max_blocks) == grid


# --- signatures compiled for sm_90 without a GPU ----------------------------------------------------


@needs_warp
def test_signatures_and_layouts():
    import warp as wp

    expected = {
        "saxpy": (["bytes24", "fp32", "bytes56", "bytes56"], 1),
        "scale2d": (["bytes24", "bytes56", "bytes56", "fp32"], 2),
        "cross": (["bytes24", "bytes56", "bytes56", "bytes56", "bytes12"], 1),
        "matvec": (["bytes24", "bytes36", "bytes56", "bytes56"], 1),
        "index3d": (["bytes32", "bytes56", "i32"], 3),
        "add4d": (["bytes32", "bytes56", "bytes56", "bytes56"], 4),
        "mixed": (["bytes24", "bytes56", "bytes56", "i64", "u8", "i1"], 1),
    }
    for name, (words, kernel_dim) in expected.items():
        k = launchpad.from_warp(kernels()[name], arch="sm_90")
        assert [p.type for p in k.params] == words, name
        assert k.kernel_dim == kernel_dim and k.block_dim == 256 and k.spec.metadata["arch"] == "sm_90"
        assert k.metadata["warp_version"] == wp.__version__
        assert k.name.endswith("_cuda_kernel_forward") and k.params[0].name == "dim"
    # the carried artifacts are what from_warp makes here
    for case in CASES:
        assert [p.to_json() for p in carried(case.name).params] == [
            p.to_json() for p in launchpad.from_warp(kernels()[case.name], arch=90).params]  # fmt: skip
    saxpy = launchpad.from_warp(kernels()["saxpy"], arch=90)
    assert [a.converter or a.kind for a in saxpy.args] == ["warp_bounds", "param", "warp_array", "warp_array"]
    assert saxpy.args[2].options == {"ndim": 1, "dtype": "float32", "itemsize": 4, "element": [],
                                     "type": "a 1-d array of float32"}  # fmt: skip


@needs_warp
def test_modules_compile_once_into_warps_kernel_cache(tmp_path, monkeypatch):
    """from_warp compiles into Warp's own kernel cache, by the module's hash: a later call (a later
    process) finds the cubin there and compiles nothing; a cached module missing its source (which the
    tile refusal reads) is compiled again apart, the cache left as it was."""
    import warp as wp
    from warp._src.context import Module

    wp.init()  # (which sets kernel_cache_dir)
    monkeypatch.setattr(wp.config, "kernel_cache_dir", str(tmp_path))
    real, codegen = Module._run_codegen, []

    def counted(self, *args, **kwargs):
        codegen.append(self.name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Module, "_run_codegen", counted)
    kernel = kernels()["saxpy"]
    first = launchpad.from_warp(kernel, arch="sm_90")
    assert len(codegen) == 1
    cubins = list(tmp_path.glob("*/*.sm90.cubin"))
    assert len(cubins) == 1 and cubins[0].read_bytes() == first.spec.image
    again = launchpad.from_warp(kernel, arch=90)
    assert len(codegen) == 1 and again.spec.image == first.spec.image  # read back: nothing compiled
    assert [p.to_json() for p in again.params] == [p.to_json() for p in first.params]

    source = cubins[0].with_name(cubins[0].name.removesuffix(".sm90.cubin") + ".cu")
    source.unlink()
    rebuilt = launchpad.from_warp(kernel, arch=90)
    assert len(codegen) == 2 and rebuilt.spec.image == first.spec.image
    assert not source.exists() and list(tmp_path.glob("*/*.sm90.cubin")) == cubins  # (apart: in a temp dir)

    tiled = [launchpad.from_warp(kernels()["tile_rowsum"], arch=90) for _ in range(2)]  # compiled, then read back
    assert [(k.tiled, k.spec.plan.shared_mem) for k in tiled] == [(True, 1024)] * 2  # (its .cu and .meta: cached)


@needs_warp
def test_a_read_only_cache_is_read(tmp_path, monkeypatch):
    """A cache launchpad cannot write (a baked image, a shared folder) still gives what it holds of
    the module, with nothing compiled."""
    import warp as wp
    from warp._src.context import Module

    from launchpad.frontends.warp import compile as warp_compile

    monkeypatch.setattr(wp.config, "kernel_cache_dir", str(tmp_path))
    kernel = kernels()["saxpy"]
    filled = launchpad.from_warp(kernel, arch=90)
    monkeypatch.setattr(warp_compile.os, "access", lambda path, mode: False)
    monkeypatch.setattr(Module, "_run_codegen", lambda *args, **kwargs: pytest.fail("compiled"))
    assert launchpad.from_warp(kernel, arch=90).spec.image == filled.spec.image


@needs_warp
@pytest.mark.parametrize("why", ["strip_hash", "cache_kernels", "read-only"])
def test_modules_compiled_apart_where_the_cache_cannot_be_trusted_or_written(why, tmp_path, monkeypatch):
    """A module whose names carry no hash (strip_hash: a cached file of its name may hold an older
    source's cubin), Warp's cache switched off, or a cache folder launchpad cannot write: compiled
    in a folder of its own on every call, the cache untouched."""
    import warp as wp
    from warp._src.context import Module

    from launchpad.frontends.warp import compile as warp_compile

    monkeypatch.setattr(wp.config, "kernel_cache_dir", str(tmp_path))
    kernel = kernels()["saxpy"]
    if why == "strip_hash":
        monkeypatch.setitem(kernel.module.options, "strip_hash", True)
    elif why == "cache_kernels":
        monkeypatch.setattr(wp.config, "cache_kernels", False)
    else:
        monkeypatch.setattr(warp_compile.os, "access", lambda path, mode: False)  # (root may write anywhere)
    real, codegen = Module._run_codegen, []

    def counted(self, *args, **kwargs):
        codegen.append(self.name)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Module, "_run_codegen", counted)
    first = launchpad.from_warp(kernel, arch=90)
    again = launchpad.from_warp(kernel, arch=90)
    assert len(codegen) == 2 and list(tmp_path.iterdir()) == []
    assert first.spec.image == again.spec.image and first.name == again.name


@needs_warp
def test_parameter_kinds_not_packed_are_refused_by_name():
    with pytest.raises(LaunchpadError, match=r"kernel 'struct_refused', parameter 'p' .*field 'p.a' \(indexedarray"):
        launchpad.from_warp(kernels()["struct_refused"], arch=90)

    with pytest.raises(LaunchpadError, match=r"kernel 'indexed', parameter 'a' .*indexedarray parameters"):
        launchpad.from_warp(kernels()["indexed"], arch=90)
    with pytest.raises(LaunchpadError, match=r"kernel 'lean' is a lean kernel \(grid_stride=False\)"):
        launchpad.from_warp(kernels()["lean"], arch=90)
    with pytest.raises(LaunchpadError, match=r"kernel 'generic' is generic: launch an overload"):
        launchpad.from_warp(kernels()["generic"], arch=90)
    with pytest.raises(ArgumentTypeError, match=r"from_warp takes a @wp\.kernel function, got function"):
        launchpad.from_warp(lambda: None, arch=90)


def test_other_releases_refused_by_name():
    check_version("1.19.0")
    for version in ("1.18.2", "1.20.0", "2.0.0", ""):
        with pytest.raises(UnsupportedVersion, match=r"follows Warp 1\.19.*warp-lang .* is installed"):
            check_version(version)


# --- the bytes reaching cuLaunchKernel, both executors ------------------------------------------------


def test_saxpy_bytes(fake_gpu):
    k = fake_gpu.install(carried("saxpy"))
    x, y = torch.randn(1000), torch.randn(1000)
    k[1000](2.5, x, y)
    launch = fake_gpu.last
    assert (launch.grid, launch.block, launch.shared_mem, launch.stream) == ((4, 1, 1), (256, 1, 1), 0, 0x5000)
    assert launch.params == [bounds((1000,), 1000), struct.pack("<f", 2.5), array_t(x), array_t(y)]
    k[(1000,)](2.5, x, y)  # a tuple dim is the same launch
    assert fake_gpu.last.params == launch.params and fake_gpu.last.grid == (4, 1, 1)
    grid, data = k.bounds(1000)
    k.launch(grid, None, data, 2.5, x, y)
    assert fake_gpu.last.params == launch.params
    k.bind(grid, None, data, 2.5, x, y)()
    assert fake_gpu.last.params == launch.params


def test_launch_semantics(fake_gpu):
    k = fake_gpu.install(carried("saxpy"))
    x, y = torch.randn(4096), torch.randn(4096)
    k.configure(4096, max_blocks=3)(1.0, x, y)  # grid-stride: fewer blocks, the same bounds
    assert fake_gpu.last.grid == (3, 1, 1) and fake_gpu.last.params[0] == bounds((4096,), 4096)
    k[(1024, 4)](1.0, x, y)  # dimensions beyond the kernel's wp.tid() fold into coord_mult
    assert fake_gpu.last.grid == (16, 1, 1) and fake_gpu.last.params[0] == bounds((1024,), 4096, 4)
    count = len(fake_gpu.launches)
    k[0](1.0, x, y)  # nothing to launch, as wp.launch
    assert len(fake_gpu.launches) == count
    k3 = fake_gpu.install(carried("index3d"))
    out = torch.empty(5, 6, 7, dtype=torch.int32)
    k3[(5, 6)](out, 3)  # fewer dimensions than wp.tid() unpacks: padded with ones
    assert fake_gpu.last.params[0] == bounds((5, 6, 1), 30)


def test_strided_vector_matrix_and_scalar_bytes(fake_gpu):
    k = fake_gpu.install(carried("scale2d"))
    base = torch.randn(48, 70)
    view, out = base[3:43, ::2].t(), torch.empty(70, 50)[5:40, 3:43]
    k[(35, 40)](view, out, 0.5)
    p = fake_gpu.last.params
    assert p[1] == struct.pack("<QQ4i4iHH4x", base.data_ptr() + 840, 0, 35, 40, 0, 0, 8, 280, 0, 0, 2, 0)
    assert p[2] == array_t(out) and p[3] == struct.pack("<f", 0.5)
    kc = fake_gpu.install(carried("cross"))
    a, b, c = torch.randn(9, 3), torch.randn(9, 3), torch.empty(9, 3)
    kc[9](a, b, c, (1.0, 2.0, 3.0))
    assert fake_gpu.last.params[1:] == [array_t(a, 1), array_t(b, 1), array_t(c, 1), struct.pack("<3f", 1, 2, 3)]
    km = fake_gpu.install(carried("matvec"))
    m = torch.arange(9.0).reshape(3, 3)
    km[9](m, a, c)
    assert fake_gpu.last.params[1] == struct.pack("<9f", *range(9))
    km[9](m.tolist(), a, c)  # nested lists: the same row-major components
    assert fake_gpu.last.params[1] == struct.pack("<9f", *range(9))
    kx = fake_gpu.install(carried("mixed"))
    x, o = torch.randn(30).half(), torch.empty(30, dtype=torch.int64)
    kx[30](x, o, -(2**40), 255, True)
    assert fake_gpu.last.params[3:] == [struct.pack("<q", -(2**40)), b"\xff", b"\x01"]
    k4 = fake_gpu.install(carried("add4d"))
    t = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    k4[(2, 3, 4, 5)](t, t, t)
    assert fake_gpu.last.params[:2] == [bounds((2, 3, 4, 5), 120), array_t(t)]


def struct_bytes(x: torch.Tensor, y: torch.Tensor, s: float, v: tuple, n: int, flag: bool, m: list) -> bytes:
    """``Params`` of tests/warp_kernels.py by hand: x, y (vec3), s at 112, inner {vec3 v; i32 n} at
    116, flag at 132, three bytes of padding, mat22 m at 136: 152 bytes."""
    return array_t(x) + array_t(y, 1) + struct.pack("<f3fi?3x4f", s, *v, n, flag, *[c for row in m for c in row])


def test_struct_bytes_from_a_dict(fake_gpu):
    k = fake_gpu.install(carried("with_struct"))
    gen = torch.Generator().manual_seed(11)
    for _ in range(3):
        (p, out), n, _ = STRUCT_CASE.make("cpu", gen)
        p["flag"] = np.bool_(p["flag"])  # (numpy's bool, as a bool parameter takes it)
        k[n](p, out)
        inner = p["inner"]
        want = struct_bytes(p["x"], p["y"], p["s"], inner["v"], inner["n"], p["flag"], p["m"])
        assert fake_gpu.last.params == [bounds((n,), n), want, array_t(out)]
    assert [a.converter for a in k.args[1:2]] == ["warp_struct"] and k.params[1].size == 152


@needs_warp
def test_struct_bytes_equal_warps(fake_gpu):
    """A dict packs what Warp's own ctypes structure holds for the same values; a Warp instance is
    passed as its own bytes, once its arrays are on the launch device."""
    import warp as wp

    kernel = kernels()["with_struct"]
    k = fake_gpu.install(launchpad.from_warp(kernel, arch=90))
    (p, out), n, _ = STRUCT_CASE.make("cpu", torch.Generator().manual_seed(12))
    params = kernel.adj.args[0].type
    instance = params()
    instance.x, instance.y = wp.from_torch(p["x"]), wp.from_torch(p["y"], dtype=wp.vec3)
    instance.s, instance.flag, instance.m = p["s"], p["flag"], wp.mat22(*[c for row in p["m"] for c in row])
    instance.inner.v, instance.inner.n = wp.vec3(*p["inner"]["v"]), p["inner"]["n"]
    theirs = bytes(memoryview(instance._ctype).cast("B"))
    k[n](p, out)
    assert fake_gpu.last.params[1] == theirs
    with pytest.raises(ArgumentError, match=r"argument 1 \('p'\): p.x is an array on cpu, not on the launch device"):
        k[n](instance, out)  # (host arrays: the kernel would read a host address)
    instance.x, instance.y = None, None  # null arrays: nothing to place
    k[n](instance, out)
    assert fake_gpu.last.params[1] == bytes(memoryview(instance._ctype).cast("B"))
    with pytest.raises(ArgumentTypeError, match=r"expected a wp.struct .*Params.* for p, got a wp.struct .*Inner"):
        k[n](instance.inner, out)


def test_struct_arguments_refused_by_field(fake_gpu):
    k = fake_gpu.install(carried("with_struct"))
    (p, out), n, _ = STRUCT_CASE.make("cpu", torch.Generator().manual_seed(13))
    with pytest.raises(ArgumentError, match=r"argument 1 \('p'\): p has the fields .*: missing \['flag'\]; no field "
                       r"\['flg'\]"):  # fmt: skip
        k[n]({**{f: v for f, v in p.items() if f != "flag"}, "flg": True}, out)
    with pytest.raises(
        ArgumentTypeError, match=r"expected float32 elements \(p.x, a 1-d array of float32\), got a torch.float64"
    ):
        k[n]({**p, "x": p["x"].double()}, out)
    with pytest.raises(
        ArgumentTypeError, match=r"cannot pack tuple \(1.0, 2.0\) as p.inner.v \(vec3f\): expected 3 components"
    ):
        k[n]({**p, "inner": {"v": (1.0, 2.0), "n": 3}}, out)
    with pytest.raises(
        ArgumentTypeError, match=r"cannot pack float 2.5 as p.inner.n \(int32\): 'float' object cannot be"
    ):
        k[n]({**p, "inner": {"v": (1.0, 2.0, 3.0), "n": 2.5}}, out)
    with pytest.raises(ArgumentError, match=r"cannot pack int 2147483648 as p.inner.n \(int32\)"):
        k[n]({**p, "inner": {"v": (1.0, 2.0, 3.0), "n": 2**31}}, out)
    with pytest.raises(ArgumentTypeError, match=r"expected a wp.struct .* or a dict of its fields for p, got"):
        k[n]((1, 2), out)
    assert not fake_gpu.launches


def test_tile_kernels_launch_as_launch_tiled(fake_gpu):
    """A tile kernel's k[dim] is wp.launch_tiled(kernel, dim, block_dim): the block's threads appended
    to dim (folded into coord_mult past the kernel's wp.tid()), one block per tile, the dynamic shared
    memory of Warp's .meta (8x32 float32 in shared storage: 1024 bytes)."""
    k = fake_gpu.install(carried("tile_rowsum"))
    assert k.tiled and k.block_dim == 256 and k.spec.plan.shared_mem == 1024
    a, sums = torch.randn(40 * 8, 32), torch.empty(40)
    k[40](a, sums)
    launch = fake_gpu.last
    assert (launch.grid, launch.block, launch.shared_mem) == ((40, 1, 1), (256, 1, 1), 1024)
    assert launch.params == [bounds((40,), 40 * 256, 256), array_t(a), array_t(sums)]
    k[(40,)](a, sums)
    assert fake_gpu.last.params == launch.params
    with pytest.raises(ArgumentError, match=r"kernel 'tile_rowsum' is a tile kernel: dim must have 1-3 dimensions "
                       r"\(wp.launch_tiled appends block_dim 256\)"):  # fmt: skip
        k[(2, 2, 2, 2)]


@needs_warp
def test_tile_kernels_bounds_equal_warps_and_cubins_need_their_meta(tmp_path):
    """The bounds are those wp.launch_tiled builds; a tile kernel from a cubin takes its shared memory
    from the .meta beside it, and without one is refused (a launch without it reads past its storage)."""
    import warp as wp
    from warp._src.context import _build_launch_bounds_from_tuple

    kernel = kernels()["tile_rowsum"]
    k = launchpad.from_warp(kernel, arch=90)
    for dim in (7, (3, 5), (2, 3, 4)):
        extents = (dim,) if isinstance(dim, int) else dim
        theirs = _build_launch_bounds_from_tuple((*extents, 256), 1)
        assert k.bounds(dim) == (math.prod(extents), bytes(theirs))
    assert k.spec.plan.shared_mem == kernel.adj.get_total_required_shared() == 1024
    paths = wp.compile_aot_module(kernel.module, arch=90, module_dir=str(tmp_path), use_ptx=False)
    from_file = launchpad.from_warp(kernel, cubin=paths[-1])
    assert from_file.tiled and from_file.spec.plan.shared_mem == 1024 and from_file.spec.image == k.spec.image
    with pytest.raises(LaunchpadError, match=r"kernel 'tile_rowsum' uses tiles, whose shared memory Warp writes in "
                       r"the module's .meta file: pass the cubin's path with its .meta beside it"):  # fmt: skip
        launchpad.from_warp(kernel, cubin=k.spec.image)
    plain = launchpad.from_warp(kernels()["saxpy"], cubin=carried("saxpy").spec.image)  # no tiles: no .meta needed
    assert not plain.tiled and plain.spec.plan.shared_mem == 0


@needs_warp
def test_tile_kernels_told_by_the_builtins_they_call(tmp_path):
    """Tiles used only inside a @wp.func (register storage: no shared memory, no tile code in the
    kernel's body) make a tile kernel; a user function of a tile-like name and a comment do not.
    Each case is what its Case says, compiled here and from a cubin with its .meta beside it."""
    import warp as wp

    for name, tiled in [("tile_via_func", True), ("tile_lookalike", False), ("tile_rowsum", True), ("saxpy", False)]:
        kernel = kernels()[name]
        compiled = launchpad.from_warp(kernel, arch=90)
        folder = tmp_path / name
        path = wp.compile_aot_module(kernel.module, arch=90, module_dir=str(folder), use_ptx=False)[-1]
        assert (compiled.tiled, launchpad.from_warp(kernel, cubin=path).tiled) == (tiled, tiled), name
    assert launchpad.from_warp(kernels()["tile_via_func"], arch=90).spec.plan.shared_mem == 0
    lookalike = launchpad.from_warp(kernels()["tile_lookalike"], arch=90).spec.image
    assert not launchpad.from_warp(kernels()["tile_lookalike"], cubin=lookalike).tiled  # bytes: nothing to refuse
    for case in CASES:
        assert launchpad.from_warp(kernels()[case.name], arch=90).tiled == carried(case.name).tiled == case.tiled


@needs_warp
def test_tile_cubins_of_another_block_or_module_refused(tmp_path, monkeypatch):
    """A tile kernel's cubin compiled for another block_dim (its .cu says WP_TILE_BLOCK_DIM 64), or
    beside a .meta of another module (no entry for it), would launch wrong: refused by name."""
    import shutil

    import warp as wp

    kernel = kernels()["tile_rowsum"]
    with monkeypatch.context() as patch:
        patch.setitem(kernel.module.options, "block_dim", 64)
        other = wp.compile_aot_module(kernel.module, arch=90, module_dir=str(tmp_path / "b64"), use_ptx=False)[-1]
    with pytest.raises(LaunchpadError, match=r"kernel 'tile_rowsum' is a tile kernel compiled for block_dim 64, and "
                       r"the module's block_dim is 256"):  # fmt: skip
        launchpad.from_warp(kernel, cubin=other)
    mine = Path(wp.compile_aot_module(kernel.module, arch=90, module_dir=str(tmp_path / "own"), use_ptx=False)[-1])
    foreign = Path(wp.compile_aot_module(kernels()["saxpy"].module, arch=90, module_dir=str(tmp_path / "saxpy"),
                                         use_ptx=False)[-1])  # fmt: skip
    swapped = tmp_path / "swapped" / mine.name
    swapped.parent.mkdir()
    shutil.copy(mine, swapped)
    shutil.copy(foreign.with_name(foreign.name.replace(".sm90.cubin", ".meta")), swapped.with_name(
        swapped.name.replace(".sm90.cubin", ".meta")))  # fmt: skip
    with pytest.raises(LaunchpadError, match=r"kernel 'tile_rowsum' uses tiles, and the .meta beside .* has no entry"):
        launchpad.from_warp(kernel, cubin=swapped)


def test_wrong_arguments_refused_before_launch(fake_gpu):
    k = fake_gpu.install(carried("saxpy"))
    x, y = torch.randn(64), torch.randn(64)
    with pytest.raises(ArgumentTypeError, match=r"kernel 'saxpy', argument 2 \('x'\): expected float32 elements"):
        k[64](1.0, x.double(), y)
    with pytest.raises(ArgumentError, match=r"kernel 'saxpy', argument 3 \('y'\): expected a tensor of 1 dimensions"):
        k[64](1.0, x, y.reshape(8, 8))
    with pytest.raises(ArgumentError, match=r"kernel 'saxpy': dim must have 1-4 dimensions"):
        k[(1, 1, 1, 1, 1)]
    with pytest.raises(ArgumentError, match=r"dim\[0\] = -1 is outside"):
        k[-1]
    with pytest.raises(ArgumentTypeError, match=r"dim must be an int or a tuple"):
        k[1.5]
    kc = fake_gpu.install(carried("cross"))
    a = torch.randn(9, 3)
    with pytest.raises(ArgumentTypeError, match=r"argument 4 \('offset'\): expected 3 components for vec3f"):
        kc[9](a, a, a, (1.0, 2.0))
    with pytest.raises(ArgumentError, match=r"argument 1 \('a'\): dimension 1 is 4, the element type's extent is 3"):
        kc[9](torch.randn(9, 4), a, a, (1.0, 2.0, 3.0))
    with pytest.raises(ArgumentError, match=r"argument 1 \('a'\): the element type's dimensions must be compact"):
        kc[9](torch.randn(3, 9).t(), a, a, (1.0, 2.0, 3.0))
    assert not fake_gpu.launches


# --- artifacts without Warp, the operator schema -------------------------------------------------------


def test_artifact_loads_without_warp(tmp_path):
    code = (
        "import sys; sys.modules['warp'] = None\n"
        "import launchpad, struct\n"
        f"k = launchpad.load({str(ARTIFACTS / 'saxpy.json')!r})\n"
        "assert type(k).__name__ == 'WarpKernel' and k.kernel_dim == 1 and k.block_dim == 256\n"
        "grid, data = k.bounds(1000)\n"
        "assert grid == 4 and data == struct.pack('<IIQQ', 1000, 0, 1000, 1)\n"
        "from launchpad.launch.checks import CONVERTERS, Context\n"
        "import torch\n"
        "t, arg = torch.arange(6.0).reshape(2, 3)[:, 1], k.args[2]\n"  # a strided view, packed without Warp
        "got = CONVERTERS[arg.converter].specialize(**arg.options)(t, -1, 0, Context('saxpy', k.params, k.args), arg)\n"
        "assert got == (struct.pack('<QQ4i4iHH4x', t.data_ptr(), 0, 2, 0, 0, 0, 12, 0, 0, 0, 1, 0),)\n"
        "try:\n    import warp\nexcept ImportError:\n    print('no warp')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "no warp"
    metadata = json.loads((ARTIFACTS / "saxpy.json").read_text())["metadata"]
    assert metadata["frontend"] == "warp" and metadata["warp_version"].startswith("1.19.")


def test_operator_schema():
    from launchpad.torch_ops import _describe

    inputs, consts = _describe("warp_saxpy", carried("saxpy"), None)
    assert [(i.name, i.type) for i in inputs] == [("dim", "int[]"), ("a", "float"), ("x", "Tensor"), ("y", "Tensor")]
    inputs, _ = _describe("warp_cross", carried("cross"), None)
    assert inputs[-1].type == "float[]" and not consts


def test_traced_by_dynamo_as_one_operator():
    """``kernel[dim]`` under torch.compile(fullgraph=True): one call of the kernel's operator, the
    launch bounds as their words (meta tensors: traced, not launched)."""
    saxpy, cross = carried("saxpy"), carried("cross")
    graphs = []

    def fn(x, y, a, out):
        saxpy[1000](2.0, x, y)
        cross[(77, 2)](a, a, out, (1.0, 2.0, 3.0))
        return y * 2

    args = (torch.empty(1000, device="meta"), torch.empty(1000, device="meta"), torch.empty(77, 3, device="meta"),
            torch.empty(77, 3, device="meta"))  # fmt: skip
    torch._dynamo.reset()
    torch.compile(fn, fullgraph=True, dynamic=False, backend=lambda gm, ex: (graphs.append(gm), gm.forward)[1])(*args)
    torch._dynamo.reset()
    calls = [n for n in graphs[0].graph.nodes if n.op == "call_function" and str(n.target).startswith("launchpad.")]
    assert len(calls) == 2
    assert calls[0].args[:4] == (4, 1, 1, 0) and calls[0].args[4] == [1000, 1000, 1] and calls[0].args[5] == 2.0
    assert calls[1].args[:4] == (1, 1, 1, 0) and calls[1].args[4] == [77, 154, 2]
    assert calls[1].args[-1] == [1.0, 2.0, 3.0] or calls[1].args[-1] == (1.0, 2.0, 3.0)
