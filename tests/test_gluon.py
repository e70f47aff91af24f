"""Gluon kernels on CPU: compiled for sm_90 through each way into launchpad (``triton_launcher``,
``from_triton`` of a jit function and of a compiled kernel, the cache folder, a saved artifact),
checked for the spec launchpad builds (parameters, scratch, shared memory, warps, tensor
descriptors) and launched on ``fake_gpu`` for the bytes that reach the driver.

The kernels (``tests/gluon_kernels.py``) are written for the Gluon of Triton 3.6 (what the GPU
machine runs) and of Triton 3.9, choosing the TMA copies' spelling by what the installed Gluon has.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import launchpad
from launchpad.core import driver as _driver
from launchpad.frontends.triton import launcher as lpt
from launchpad.frontends.triton import tensordesc as _tensordesc

triton = pytest.importorskip("triton")
pytest.importorskip("triton.experimental.gluon")
import gluon_kernels as G  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton_abi import NULL_SCRATCH, SCRATCH_WORDS, i32, i64, q  # noqa: E402

SM90 = GPUTarget("cuda", 90, 32)


pytestmark = pytest.mark.usefixtures("private_triton_cache", "compiled_in_a_child")


@pytest.fixture(scope="module")
def compiled_in_a_child(private_triton_cache):
    """The Gluon kernels compiled in a child process into the module's Triton cache, so that this
    process only loads them from it. Compiling a Gluon kernel with shared-memory layouts leaves four
    of Triton's ``ir.attribute`` objects alive (Triton's nanobind bindings, not launchpad), which
    nanobind reports as "leaked" at interpreter exit, after pytest's closing line; a cache hit
    builds no IR. The child's own report is its stderr, shown only if it fails."""
    code = "import test_gluon as T\nfor name in T.KERNELS:\n    T.compiled_by_launcher(name)\n"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def aligned(n: int, dtype=torch.float32) -> torch.Tensor:
    t = torch.randn(n + 64).to(dtype)
    start = (-t.data_ptr() % 16) // t.element_size()
    return t[start : start + n]


def problems() -> dict:
    """Each kernel's (jit function, grid, arguments, options) on CPU tensors."""
    a16 = aligned(128 * 64, torch.float16).view(128, 64)
    b16 = aligned(64 * 128, torch.float16).view(64, 128)
    t16 = aligned(128 * 128, torch.float16).view(128, 128)
    rows = aligned(256 * 64, torch.float16).view(256, 64)
    return {
        "blocked_add": (G.blocked_add, (5,), (aligned(5000), aligned(5000), aligned(5000), 5000, 1024, 8), {}),
        "transpose": (G.transpose_via_shared, (2, 3), (aligned(64 * 96).view(64, 96), aligned(96 * 64), 64, 96, 32, 32),
                      {}),
        "tma": (G.tma_copy_tile, (2, 2), (G.descriptor(t16, [64, 64]), G.descriptor(aligned(128 * 128, torch.float16)
                .view(128, 128), [64, 64]), 2.0), {}),
        "wgmma": (G.wgmma_matmul, (2, 2), (G.descriptor(a16, [64, 32]), G.descriptor(b16, [32, 64]),
                  aligned(128 * 128), 128, 128, 64, 128), {}),
        "ws": (G.ws_scale, (2,), (G.descriptor(rows, [32, 64]), aligned(256 * 64, torch.float16), 256, 3.0, 4), {}),
    }  # fmt: skip


def compiled_by_launcher(name: str):
    fn, _grid, args, options = problems()[name]
    return lpt.TritonLauncher(fn, target=SM90).warmup(*args, **options)


# --- the spec launchpad builds -------------------------------------------------------------------

EXPECTED = {
    # name: (parameter types, shared memory at least, num_warps)
    "blocked_add": (["*fp32", "*fp32", "*fp32", "i32"], 0, 4),
    "transpose": (["*fp32", "*fp32", "i32", "i32"], 32 * 32 * 4, 4),
    "tma": (["bytes128", "i32", "i32", "i64", "i64"] * 2, 64 * 64 * 2 + 8, 4),
    "wgmma": (["bytes128", "i32", "i32", "i64", "i64"] * 2 + ["*fp32", "i32", "i32", "i32", "i32"],
              (64 * 32 + 32 * 64) * 2 + 8, 4),
    "ws": (["bytes128", "i32", "i32", "i64", "i64", "*fp16", "i32"], 2 * 32 * 64 * 2 + 4 * 8, 8),
}  # fmt: skip


KERNELS = list(EXPECTED)


@pytest.mark.parametrize("name", KERNELS)
def test_spec_of_each_gluon_kernel(name):
    kernel = compiled_by_launcher(name)
    types, shared, warps = EXPECTED[name]
    md = kernel.spec.metadata
    assert [p.type for p in kernel.params] == types + SCRATCH_WORDS
    assert md["shared"] >= shared and kernel.plan.shared_mem == md["shared"]
    assert md["num_warps"] == warps and kernel.plan.block == (32 * warps, 1, 1)
    assert md["global_scratch_size"] == 0  # these kernels allocate no global scratch
    hidden = [a for a in kernel.args if not a.path]
    assert [a.name for a in hidden] == [p for p in ("global_scratch", "profile_scratch")][: len(SCRATCH_WORDS)]
    descriptors = [a for a in kernel.args if a.kind == "expand"]
    assert len(descriptors) == {"tma": 2, "wgmma": 2, "ws": 1}.get(name, 0)
    for d in descriptors:
        assert d.converter == "tensordesc" and d.options["meta"] is not None  # the TMA form
    if name == "wgmma":  # 32 halves are 64-byte rows (swizzle mode 2), 64 halves 128-byte rows (mode 3)
        assert [d.options["meta"]["swizzle"] for d in descriptors] == [2, 3]
        assert [d.options["block"] for d in descriptors] == [[64, 32], [32, 64]]


def cache_folder(c) -> Path:
    root = Path(os.environ["TRITON_CACHE_DIR"])
    return next(p.parent for p in root.rglob(f"{c.metadata.name}.json") if json.loads(p.read_text())["hash"] == c.hash)


def runtime_view(kernel) -> list:
    return [(a.name, a.kind, a.param, a.params, a.align, a.multiple_of) for a in kernel.args if a.kind != "const"]


@pytest.mark.parametrize("name", KERNELS)
def test_every_way_in_builds_the_same_kernel(name, tmp_path):
    """triton_launcher, from_triton of the CompiledKernel Triton's JIT makes, of the jit function
    and a signature (compiled through GluonASTSource, as Triton's JIT does), the cache folder and
    a saved artifact agree on the cubin, the parameters and the arguments."""
    fn, _grid, args, _options = problems()[name]
    via_launcher = compiled_by_launcher(name)
    compiled = _compiled(fn, args)
    via_compiled = launchpad.from_triton(compiled)
    assert via_compiled.spec == via_launcher.spec
    src, names = compiled.src, list(fn.arg_names)
    constexprs = {names[path[0]]: value for path, value in src.constants.items()}
    via_jit = launchpad.from_triton(fn, signature=dict(src.signature), constexprs=constexprs, attrs=dict(src.attrs),
                                    target=SM90)  # fmt: skip
    assert via_jit.spec == via_compiled.spec
    saved = launchpad.load(via_compiled.save(tmp_path / "k.json"))
    assert saved.spec.image == via_compiled.spec.image and saved.params == via_compiled.params
    assert [(a.name, a.kind, a.value) for a in saved.args] == [(a.name, a.kind, a.value) for a in via_compiled.args]
    folder = launchpad.load_triton(cache_folder(compiled))
    assert folder.spec.image == compiled.asm["cubin"] and folder.params == via_compiled.params
    assert runtime_view(folder) == runtime_view(via_compiled)


def _compiled(fn, args):
    """The CompiledKernel Triton's own JIT makes for these arguments (its binder, its source class)."""
    import triton as t

    from launchpad.frontends.triton.frontend import _run_options, source_class

    _, backend, bind = lpt.TritonLauncher(fn, target=SM90)._setup()
    kwargs = _run_options(fn, {}, backend)
    bound, specialization, options = bind(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    assert source_class(fn).__name__ == "GluonASTSource"
    return t.compile(source_class(fn)(fn, signature, constexprs, attrs), target=SM90, options=options.__dict__)


# --- launches on the fake GPU --------------------------------------------------------------------


def fake_encoder(monkeypatch) -> list:
    calls = []

    def encode(*args):
        calls.append(args)
        return bytes(range(len(calls), len(calls) + 128))

    monkeypatch.setattr(_driver, "encode_tensor_map_tiled", encode)
    monkeypatch.setattr(_tensordesc, "_MAP_CACHE", {})
    return calls


def test_blocked_and_shared_memory_kernels_launch_their_arguments(fake_gpu):
    fn, grid, args, _ = problems()["blocked_add"]
    k = fake_gpu.install(launchpad.from_triton(_compiled(fn, args)))
    k[grid](*args)
    x, y, out, n = args[:4]
    assert fake_gpu.last.params == [q(x.data_ptr()), q(y.data_ptr()), q(out.data_ptr()), i32(n), *NULL_SCRATCH]
    assert fake_gpu.last.grid == (5, 1, 1) and fake_gpu.last.block == (128, 1, 1) and fake_gpu.last.shared_mem == 0
    fn, grid, args, _ = problems()["transpose"]
    k = fake_gpu.install(launchpad.from_triton(_compiled(fn, args)))
    k[grid](*args)
    assert fake_gpu.last.grid == (2, 3, 1) and fake_gpu.last.shared_mem == k.spec.metadata["shared"] == 4096


def test_tma_descriptors_are_encoded_from_the_gluon_layout(fake_gpu, monkeypatch):
    calls = fake_encoder(monkeypatch)
    fn, grid, args, _ = problems()["wgmma"]
    compiled = _compiled(fn, args)
    k = fake_gpu.install(launchpad.from_triton(compiled))
    a, b, c, m, n, kk, ldc = args
    k[grid](*args)
    meta = compiled.metadata.tensordesc_meta
    assert calls == [
        (_tensordesc.TMA_DTYPE_DEVICE_TO_HOST[meta[0]["elem_type"]], 2, a.base.data_ptr(), [64, 128], [128], [32, 64],
         [1, 1], 0, meta[0]["swizzle"], 2, 0),
        (_tensordesc.TMA_DTYPE_DEVICE_TO_HOST[meta[1]["elem_type"]], 2, b.base.data_ptr(), [128, 64], [256], [64, 32],
         [1, 1], 0, meta[1]["swizzle"], 2, 0),
    ]  # fmt: skip
    assert fake_gpu.last.params == [bytes(range(1, 129)), i32(128), i32(64), i64(64), i64(1),
                                    bytes(range(2, 130)), i32(64), i32(128), i64(128), i64(1),
                                    q(c.data_ptr()), i32(m), i32(n), i32(kk), i32(ldc), *NULL_SCRATCH]  # fmt: skip
    assert fake_gpu.last.grid == (2, 2, 1) and fake_gpu.last.block == (128, 1, 1)
    with pytest.raises(launchpad.ArgumentError, match=r"'a_desc'.*compiled for block shape \[64, 32\], got \[64, 64\]"):
        k[grid](G.descriptor(a.base, [64, 64]), *args[1:])


def test_warp_specialized_kernel_launches_all_its_warps(fake_gpu, monkeypatch):
    fake_encoder(monkeypatch)
    fn, grid, args, _ = problems()["ws"]
    launcher = lpt.TritonLauncher(fn, target=SM90)
    real = lpt.Kernel
    monkeypatch.setattr(lpt, "Kernel", lambda spec: fake_gpu.install(real(spec)))
    launcher[grid](*args)
    _desc, out, rows = args[:3]
    # 4 warps of the default partition and 1 producer warp, rounded up to a warpgroup: 8 warps
    assert fake_gpu.last.block == (256, 1, 1) and fake_gpu.last.grid == (2, 1, 1)
    assert fake_gpu.last.params[5:7] == [q(out.data_ptr()), i32(rows)]
    assert fake_gpu.last.shared_mem == launcher.kernels[next(iter(launcher.kernels))].spec.metadata["shared"]
