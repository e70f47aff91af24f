"""The launch core without a GPU: real NVRTC/nvJitLink compiles for sm_90, layouts read from the
binaries, the exact bytes that reach cuLaunchKernel, and every validation error."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import EXECUTORS, FakeGPU, why_executor_unavailable
from hypothesis import given, settings
from hypothesis import strategies as st

import launchpad as lp
from launchpad.core.binary import kernels_in_image, read_image

SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
struct alignas(64) Blob { unsigned char b[128]; };

extern "C" __global__ void all_types(unsigned long long* out, signed char i8, unsigned char u8, short i16,
                                     unsigned short u16, int i32, unsigned u32, long long i64,
                                     unsigned long long u64, __half f16, __nv_bfloat16 bf16, float f32,
                                     double f64, bool b, Blob blob) {
    out[0] = i8 + u8 + i16 + u16 + i32 + u32 + i64 + u64 + (float)f16 + (float)bf16 + f32 + f64 + b + blob.b[3];
}

template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void no_params() {}
"""
ALL_TYPES_SIG = "*u64, i8, u8, i16, u16, i32, u32, i64, u64, fp16, bf16, fp32, fp64, i1, bytes128"
# (offset, size) of each parameter as the compiler lays them out. The 64-byte aligned struct lands at
# 112, not at the 64 that PTX's relative layout gives: ptxas aligns it within the constant bank,
# whose parameters start at 0x210 (0x210 + 112 = 640 = 10 * 64). Only the cubin knows this.
ALL_TYPES_LAYOUT = [(0, 8), (8, 1), (9, 1), (10, 2), (12, 2), (16, 4), (20, 4), (24, 8), (32, 8), (40, 2),
                    (42, 2), (44, 4), (48, 8), (56, 1), (112, 128)]  # fmt: skip


@pytest.fixture(scope="module")
def module():
    return lp.compile_cuda_module(SOURCE, ["all_types", "axpy<float>", "no_params"], arch=90,
                                  signatures={"all_types": ALL_TYPES_SIG, "axpy<float>": "fp32, *fp32, *fp32, i32"})  # fmt: skip


def cuobjdump_layout(cubin: bytes, symbol: str, tmp_path: Path) -> list[tuple[int, int]]:
    """(offset, size) per parameter as NVIDIA's own cuobjdump reads the cubin."""
    triton = pytest.importorskip("triton")
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    if not tool.exists():
        pytest.skip("no cuobjdump")
    path = tmp_path / "k.cubin"
    path.write_bytes(cubin)
    text = subprocess.run([str(tool), "-elf", str(path)], capture_output=True, text=True, check=True).stdout
    section = re.search(rf"^\.nv\.info\.{re.escape(symbol)}\n((?:\t.*\n)+)", text, re.M).group(1)
    records = re.findall(
        r"Ordinal\s*:\s*0x([0-9a-f]+)\s+Offset\s*:\s*0x([0-9a-f]+)\s+Size\s*:\s*0x([0-9a-f]+)", section
    )
    return [(int(o, 16), int(s, 16)) for _, o, s in sorted(records, key=lambda r: int(r[0], 16))]


# --- layouts ----------------------------------------------------------------------------------------


def test_layout_of_every_scalar_type_and_a_struct_matches_cuobjdump(module, tmp_path):
    k = module["all_types"]
    assert [(p.offset, p.size) for p in k.params] == ALL_TYPES_LAYOUT
    assert cuobjdump_layout(k.image, k.name, tmp_path) == ALL_TYPES_LAYOUT
    assert [p.type for p in k.params] == [w.strip() for w in ALL_TYPES_SIG.split(",")]
    assert k.params[-1].kind == "bytes" and k.params[0].kind == "pointer"


def test_template_instance_is_found_by_name_expression(module, tmp_path):
    k = module["axpy<float>"]
    assert k.name == "_Z4axpyIfEvT_PKS0_PS0_i" and k.display_name == "axpy<float>"
    assert [(p.offset, p.size) for p in k.params] == cuobjdump_layout(k.image, k.name, tmp_path)
    assert module["no_params"].params == ()


def test_ptx_layout_agrees_with_the_cubin_in_sizes(module):
    from cuda.bindings import nvrtc  # PTX needs no driver through NVRTC directly

    from launchpad.core.toolchain import _cuda_include_dir

    _, prog = nvrtc.nvrtcCreateProgram(SOURCE.encode(), b"t.cu", 0, [], [])
    opts = [b"-arch=compute_90", f"-I{_cuda_include_dir()}".encode()]
    assert nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    size = nvrtc.nvrtcGetPTXSize(prog)[1]
    ptx = b" " * size
    nvrtc.nvrtcGetPTX(prog, ptx)
    image, kind = read_image(ptx)
    assert kind == "ptx"
    entry = kernels_in_image(image, kind)["all_types"]
    assert [p.size for p in entry.params] == [s for _, s in ALL_TYPES_LAYOUT]
    assert entry.params[-1].align == 64 and entry.params[-1].offset == 64  # PTX's view; the cubin says 112
    assert [p.type for p in entry.params][11:13] == ["fp32", "fp64"]
    k = lp.load_cubin(ptx, "all_types", signature=ALL_TYPES_SIG)
    assert k.image_kind == "ptx" and len(k.params) == 15


def test_registers_and_shared_memory_are_read_without_a_gpu(module):
    info = kernels_in_image(module["all_types"].image, "cubin")["all_types"]
    assert info.registers and info.registers > 0 and info.static_shared == 0 and info.arch == "sm_90"


def test_fatbin_made_by_nvfatbin(module):
    from cuda.bindings import nvfatbin

    cubin = module["axpy<float>"].image
    try:
        handle = nvfatbin.create([], 0)
    except Exception as exc:
        pytest.skip(f"libnvfatbin is not installed: {type(exc).__name__}")
    nvfatbin.add_cubin(handle, cubin, len(cubin), "90", "axpy")
    fatbin = bytearray(nvfatbin.size(handle))
    nvfatbin.get(handle, fatbin)
    nvfatbin.destroy(handle)
    k = lp.load_cubin(bytes(fatbin), module["axpy<float>"].name, signature="fp32, *fp32, *fp32, i32")
    unnamed = [dataclasses.replace(p, name=None) for p in module["axpy<float>"].params]  # a fatbin has no source
    assert k.image_kind == "fatbin" and list(k.params) == unnamed


# --- signatures ------------------------------------------------------------------------------------


def test_signature_must_agree_with_the_binary():
    with pytest.raises(lp.ArgumentError, match=r"signature has 3 parameters but the binary has 4"):
        lp.compile_cuda(SOURCE, "axpy<float>", arch=90, signature="fp32, *fp32, *fp32")
    with pytest.raises(lp.ArgumentError, match=r"'fp64' of param 0 is 8 bytes but the binary's param 0 is 4 bytes"):
        lp.compile_cuda(SOURCE, "axpy<float>", arch=90, signature="fp64, *fp32, *fp32, i32")
    with pytest.raises(lp.ArgumentError, match="unknown type word 'f33'"):
        lp.compile_cuda(SOURCE, "axpy<float>", arch=90, signature="f33, *fp32, *fp32, i32")
    with pytest.raises(lp.ArgumentError, match=r"unknown pointer type '\*float'"):
        lp.compile_cuda(SOURCE, "axpy<float>", arch=90, signature="fp32, *float, *fp32, i32")


def test_unknown_kernel_name_lists_the_kernels(module):
    with pytest.raises(lp.BinaryError, match=r"'nope' is not in this cubin \(kernels: .*all_types"):
        lp.load_cubin(module["all_types"].image, "nope")


# --- packing: the bytes that reach the driver ---------------------------------------------------------


def _all_values(rng):
    return [int(rng.integers(-128, 128)), int(rng.integers(0, 256)), int(rng.integers(-(2**15), 2**15)),
            int(rng.integers(0, 2**16)), int(rng.integers(-(2**31), 2**31)), int(rng.integers(0, 2**32)),
            int(rng.integers(-(2**63), 2**63)), int(rng.integers(0, 2**64, dtype=np.uint64)),
            float(rng.standard_normal()), float(rng.standard_normal()), float(rng.standard_normal()),
            float(rng.standard_normal()), bool(rng.integers(0, 2)), rng.bytes(128)]  # fmt: skip


def test_every_type_packs_to_its_exact_bytes(module, fake_gpu):
    k = fake_gpu.install(module["all_types"])
    rng = np.random.default_rng(7)
    out = torch.empty(4, dtype=torch.uint64)
    for _ in range(20):
        v = _all_values(rng)
        k.launch(2, 64, out, *v)
        bf16 = torch.tensor([v[9]]).to(torch.bfloat16).view(torch.int16).numpy().tobytes()  # torch's rounding
        expected = [struct.pack("<Q", out.data_ptr()), *(struct.pack("<" + c, x) for c, x in zip("bBhHiIqQe", v[:9])),
                    bf16, struct.pack("<f", v[10]), struct.pack("<d", v[11]), bytes([v[12]]), v[13]]  # fmt: skip
        assert fake_gpu.last.params == expected
        assert fake_gpu.last.grid == (2, 1, 1) and fake_gpu.last.block == (64, 1, 1)


def test_numpy_scalars_and_bool_pack(module, fake_gpu):
    k = fake_gpu.install(module["all_types"])
    rng = np.random.default_rng(1)
    v = _all_values(rng)
    v[4], v[10], v[12] = np.int32(-5), np.float32(1.5), np.bool_(True)
    v[13] = np.frombuffer(v[13], dtype=np.dtype([("b", np.uint8, 128)]))[0]  # a numpy struct scalar
    k.launch(1, 1, torch.empty(1, dtype=torch.uint64), *v)
    p = fake_gpu.last.params
    assert p[5] == struct.pack("<i", -5) and p[11] == struct.pack("<f", 1.5) and p[13] == b"\x01"
    assert p[14] == v[13].tobytes()


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**31), 2**31 - 1), st.floats(width=32, allow_nan=False), st.integers(1, 2**31 - 1))
def test_packed_scalars_roundtrip(module, i, f, grid):
    for executor in EXECUTORS:
        if why_executor_unavailable(executor):
            continue
        with pytest.MonkeyPatch.context() as patch:
            gpu = FakeGPU(patch, executor)
            k = gpu.install(module["axpy<float>"])
            x, y = torch.empty(4), torch.empty(4)
            k.launch(grid, 128, f, x, y, i)
            assert gpu.last.params == [
                struct.pack("<f", f),
                struct.pack("<Q", x.data_ptr()),
                struct.pack("<Q", y.data_ptr()),
                struct.pack("<i", i),
            ]
            assert gpu.last.grid == (grid, 1, 1)


def _untyped(kernel):
    """The kernel as a bare cubin gives it: sizes and offsets, no types."""
    return lp.load_cubin(kernel.image, kernel.name)


def test_untyped_parameters_pack_by_value_type(module, fake_gpu):
    k = fake_gpu.install(_untyped(module["all_types"]))
    assert all(p.type is None for p in k.params)
    out = torch.empty(1, dtype=torch.uint64)
    k.launch(1, 1, out, -1, 255, -2, 65535, -3, 2**32 - 1, -4, 2**64 - 1, 1.5, 0x3FC0, 2.5, 3.5, True, b"\x07" * 128)
    p = fake_gpu.last.params
    assert p[1] == b"\xff" and p[2] == b"\xff" and p[3] == struct.pack("<h", -2) and p[6] == b"\xff" * 4
    assert p[9] == struct.pack("<e", 1.5)  # a float into 2 bytes is fp16
    assert p[10] == struct.pack("<H", 0x3FC0) and p[11] == struct.pack("<f", 2.5) and p[12] == struct.pack("<d", 3.5)
    assert p[0] == struct.pack("<Q", out.data_ptr()) and p[14] == b"\x07" * 128
    k.launch(1, 1, None, *[0] * 8, np.float16(2.0), 0, 0.0, 0.0, False, bytes(128))
    assert fake_gpu.last.params[0] == bytes(8) and fake_gpu.last.params[9] == struct.pack("<e", 2.0)


def test_keyword_launch_options_and_getitem(module, fake_gpu):
    k = fake_gpu.install(module["axpy<float>"])
    x, y = torch.empty(8), torch.empty(8)
    k[(3, 2), (32, 2)](1.0, x, y, 8)
    assert fake_gpu.last.grid == (3, 2, 1) and fake_gpu.last.block == (32, 2, 1) and fake_gpu.last.stream == 0x5000
    k[4, 64, 0x1234, 1024](1.0, x, y, 8)
    assert fake_gpu.last.stream == 0x1234 and fake_gpu.last.shared_mem == 1024
    assert k[4, 64] is k[4, 64]  # one callable per configuration, made once
    k[[2, 2], 32](1.0, x, y, 8)  # unhashable configurations work, uncached
    assert fake_gpu.last.grid == (2, 2, 1)
    with pytest.raises(lp.ArgumentError, match=r"use kernel\[grid, block"):
        k[4]
    k.launch(1, 32, 1.0, x, y, 8, shared_mem=100 * 1024)  # above 48 KB: the limit is raised first
    assert fake_gpu.last.shared_mem == 100 * 1024
    k.launch(1, 32, 1.0, x, y, 8, cluster=(1, 1, 1), pdl=True)
    assert fake_gpu.last.ex == {"cluster": (1, 1, 1), "cooperative": False, "pdl": True}


def test_bind_packs_once_and_replaces_arguments(module, fake_gpu):
    k = fake_gpu.install(module["axpy<float>"])
    x, y, z = torch.empty(8), torch.empty(8), torch.empty(8)
    bound = k.bind(5, 64, 2.0, x, y, 8)
    bound()
    first = fake_gpu.last
    assert first.params == [
        struct.pack("<f", 2.0),
        struct.pack("<Q", x.data_ptr()),
        struct.pack("<Q", y.data_ptr()),
        struct.pack("<i", 8),
    ]
    bound(3.0, z)
    assert fake_gpu.last.params[:2] == [struct.pack("<f", 3.0), struct.pack("<Q", z.data_ptr())]
    assert fake_gpu.last.params[2:] == first.params[2:] and fake_gpu.last.stream == first.stream
    bound()
    assert fake_gpu.last.params == first.params
    with pytest.raises(lp.ArgumentError, match="out of range for i32"):
        bound(2.0, x, y, 2**40)
    with pytest.raises(
        lp.ArgumentTypeError, match=r"kernel 'axpy<float>': launch\(\) got an unexpected keyword argument 'zz'"
    ):
        bound(zz=1)


def test_two_threads_never_share_an_argument_buffer(module, fake_gpu):
    k = fake_gpu.install(module["axpy<float>"])
    fake_gpu.delay = 0.0005  # the driver reads the arguments while the other threads pack theirs
    ident_to_value = {}

    def work(value: int) -> None:
        ident_to_value[threading.get_ident()] = value
        x, y = torch.empty(2), torch.empty(2)
        for _ in range(200):
            k.launch(1, 32, 1.0, x, y, value)

    threads = [threading.Thread(target=work, args=(v,)) for v in (111, 222, 333)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(fake_gpu.launches) == 600
    assert all(launch.params[3] == struct.pack("<i", ident_to_value[launch.thread]) for launch in fake_gpu.launches)


# --- validation: every error names the kernel and the parameter --------------------------------------


def test_argument_errors(module, fake_gpu):
    k = fake_gpu.install(module["axpy<float>"], device=0, max_threads=256)
    x = torch.empty(8)  # a CPU tensor: wrong for device 0
    cases = [
        (
            lambda: k.launch(1, 32, 1.0, x, x),
            lp.ArgumentTypeError,
            r"kernel 'axpy<float>' takes 4 arguments \(a, x, y, n\), got 3; missing: n",
        ),
        (lambda: k.launch(1, 32, 1.0, x, x, 1, 2), lp.ArgumentTypeError, r"takes 4 arguments \(a, x, y, n\), got 5"),
        (
            lambda: k.launch(1, 32, 1.0, x, x, 8),
            lp.ArgumentError,
            r"kernel 'axpy<float>', argument 1 \('x'\), param 1 \(\*fp32\): expected a CUDA tensor, got a torch.float32 tensor on cpu",
        ),
        (
            lambda: k.launch(1, 32, 1.0, "x", x, 8),
            lp.ArgumentTypeError,
            r"argument 1 \('x'\), param 1 \(\*fp32\): expected a tensor or device pointer, got str",
        ),
        (
            lambda: k.launch(1, 32, 1.0, 1.5, x, 8),
            lp.ArgumentTypeError,
            r"expected a device pointer \(tensor\), got float",
        ),
        (
            lambda: k.launch(2**31, 32, 1.0, 0, 0, 8),
            lp.ArgumentError,
            r"grid dimension x = 2147483648 is outside the device limit \[0, 2147483647\]",
        ),
        (lambda: k.launch((1, 65536), 32, 1.0, 0, 0, 8), lp.ArgumentError, r"grid dimension y = 65536"),
        (lambda: k.launch(-1, 32, 1.0, 0, 0, 8), lp.ArgumentError, r"grid dimension x = -1"),
        (lambda: k.launch((1, 2, 3, 4), 32, 1.0, 0, 0, 8), lp.ArgumentError, r"grid must have 1-3 dimensions"),
        (lambda: k.launch("a", 32, 1.0, 0, 0, 8), lp.ArgumentTypeError, r"grid must be an int or a tuple"),
        (
            lambda: k.launch(1, (2, 2, 65), 1.0, 0, 0, 8),
            lp.ArgumentError,
            r"block dimension z = 65 is outside the device limit \[1, 64\]",
        ),
        (
            lambda: k.launch(1, 512, 1.0, 0, 0, 8),
            lp.ArgumentError,
            r"block 512 has 512 threads, the kernel allows at most 256 per block",
        ),
        (lambda: k.launch(1, (16, 32), 1.0, 0, 0, 8), lp.ArgumentError, r"block \(16, 32\) has 512 threads"),
        (lambda: k.launch(1, 0, 1.0, 0, 0, 8), lp.ArgumentError, r"block dimension x = 0"),
        (
            lambda: k.launch(1, 32, 1.0, 0, 0, 2**31),
            lp.ArgumentError,
            r"argument 3 \('n'\), param 3 \(i32\): 2147483648 is out of range for i32",
        ),
        (lambda: k.launch(1, 32, 1.0, 0, 0, -(2**31) - 1), lp.ArgumentError, r"out of range for i32"),
        (
            lambda: k.launch(1, 32, 1.0, 0, 0, 1.5),
            lp.ArgumentTypeError,
            r"argument 3 \('n'\), param 3 \(i32\): cannot pack float 1.5 as i32",
        ),
        (
            lambda: k.launch(1, 32, "a", 0, 0, 1),
            lp.ArgumentTypeError,
            r"argument 0 \('a'\), param 0 \(fp32\): cannot pack str 'a' as fp32",
        ),
        (lambda: k.launch(1, 32, 1.0, 0, 0, 1, shared_mem=300 * 1024), lp.OutOfResources, r"307200"),
        (
            lambda: k.launch(1, 32, 1.0, 0, 0, 1, stream="s"),
            lp.ArgumentTypeError,
            r"stream must be a torch.cuda.Stream",
        ),
    ]
    for fn, exc, message in cases:
        with pytest.raises(exc, match=message):
            fn()
    assert fake_gpu.launches == []  # nothing reached the driver
    k.launch(1, 32, 1.0, 0x1000, 0x2000, 8)  # raw device addresses pass through
    assert fake_gpu.last.params[1:3] == [struct.pack("<Q", 0x1000), struct.pack("<Q", 0x2000)]


def test_dtype_that_contradicts_the_signature(module, fake_gpu):
    k = fake_gpu.install(module["axpy<float>"])
    with pytest.raises(
        lp.ArgumentTypeError,
        match=r"argument 2 \('y'\), param 2 \(\*fp32\): expected a CUDA tensor|expected a torch.float32 tensor, got a torch.float64",
    ):
        k.launch(1, 32, 1.0, torch.empty(2), torch.empty(2, dtype=torch.float64), 2)


def test_wrong_size_struct_and_unpackable_values(module, fake_gpu):
    k = fake_gpu.install(module["all_types"])
    v = _all_values(np.random.default_rng(3))
    with pytest.raises(
        lp.ArgumentError, match=r"argument 14 \('blob'\), param 14 \(bytes128\): expected 128 bytes, got 127"
    ):
        k.launch(1, 1, None, *v[:13], b"\0" * 127)
    with pytest.raises(lp.ArgumentError, match=r"argument 2 \('u8'\), param 2 \(u8\): 256 is out of range for u8"):
        k.launch(1, 1, None, v[0], 256, *v[2:])
    with pytest.raises(lp.ArgumentError, match=r"argument 8 \('u64'\), param 8 \(u64\): -1 is out of range for u64"):
        k.launch(1, 1, None, *v[:7], -1, *v[8:])
    untyped = fake_gpu.install(_untyped(k))
    with pytest.raises(lp.ArgumentError, match=r"argument 1, param 1: int 300 does not fit in 1 bytes"):
        untyped.launch(1, 1, None, 300, *v[1:])
    with pytest.raises(lp.ArgumentError, match=r"argument 5, param 5: float64 .* is 8 bytes, the parameter 4"):
        untyped.launch(1, 1, None, *v[:4], np.float64(1), *v[5:])


def test_zero_grid_checks_but_launches_nothing(module, fake_gpu):
    k = fake_gpu.install(module["axpy<float>"])
    x = torch.empty(2)
    k.launch(0, 32, 1.0, x, x, 2)
    k.launch((3, 0, 1), 32, 1.0, x, x, 2)
    assert fake_gpu.launches == []
    with pytest.raises(lp.ArgumentError, match="out of range"):
        k.launch(0, 32, 1.0, x, x, 2**33)


def test_launch_without_a_gpu_says_so(module):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(lp.NoDeviceError, match="launching needs"):
        module["axpy<float>"].launch(1, 32, 1.0, None, None, 1)


# --- compiling, linking, caching ------------------------------------------------------------------


def test_nvrtc_error_carries_the_full_log():
    with pytest.raises(lp.CompileError) as info:
        lp.compile_cuda('extern "C" __global__ void bad(int* p) { p[0] = undefined_name; }', "bad", arch=90)
    assert "NVRTC_ERROR_COMPILATION" in str(info.value)
    assert 'identifier "undefined_name" is undefined' in info.value.log


def test_defines_includes_and_options(tmp_path):
    (tmp_path / "twice.cuh").write_text("#define TWICE(x) (2 * (x))\n")
    src = '#include "twice.cuh"\nextern "C" __global__ void k(int* p) { p[0] = TWICE(N) + M; }'
    k = lp.compile_cuda(
        src, "k", arch="sm_90", defines={"N": 3, "M": None}, include_dirs=[tmp_path], options=["-lineinfo"]
    )
    assert k.params[0].size == 8
    with pytest.raises(lp.CompileError, match="M"):
        lp.compile_cuda(src.replace("+ M", "+ MM"), "k", arch=90, defines={"N": 3})


def test_link_lto_device_function_into_kernel():
    device = lp.compile_cuda_object('extern "C" __device__ float twice(float x) { return 2.0f * x; }', arch=90)
    kernel_src = 'extern "C" __device__ float twice(float);\nextern "C" __global__ void use(float* y) { y[threadIdx.x] = twice(y[threadIdx.x]); }'
    kernel_obj = lp.compile_cuda_object(kernel_src, arch=90)
    k = lp.link([kernel_obj, device], "use", arch=90, signature="*fp32")
    assert k.image_kind == "cubin" and k.params[0].type == "*fp32"
    assert "use" in kernels_in_image(k.image, "cubin")


# --- artifacts and imports --------------------------------------------------------------------------


def test_saved_artifact_round_trips(module, tmp_path, fake_gpu):
    k = module["all_types"]
    path = k.save(tmp_path / "k.json")
    k2 = lp.load(path)
    assert (k2.image, k2.name, k2.params, k2.args, k2.plan) == (k.image, k.name, k.params, k.args, k.plan)
    assert k2.display_name == "all_types" and k2.metadata["arch"] == "sm_90"
    with pytest.raises(lp.BinaryError, match="not a launchpad kernel artifact"):
        (tmp_path / "other.json").write_text('{"format": "x"}')
        lp.load(tmp_path / "other.json")


def test_import_does_not_import_triton_or_numba_or_cuda_core():
    code = "import sys, launchpad; print(sorted(m for m in ('triton', 'numba', 'cuda.core') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}).stdout  # fmt: skip
    assert out.strip() == "[]"


def test_kernel_is_freed_when_unreferenced(module):
    import weakref

    k = lp.load_cubin(module["no_params"].image, "no_params")
    ref = weakref.ref(k)
    del k
    assert ref() is None


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc")
def test_nvcc_cubin_with_opaque_struct_loads(tmp_path):  # pragma: no cover - developer machines only
    (tmp_path / "k.cu").write_text(SOURCE)
    subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90", "-o", str(tmp_path / "k.cubin"), str(tmp_path / "k.cu")], check=True
    )
    k = lp.load_cubin(tmp_path / "k.cubin", "all_types", signature=ALL_TYPES_SIG)
    assert [(p.offset, p.size) for p in k.params] == ALL_TYPES_LAYOUT


def test_a_cubin_without_a_global_info_section_is_read():
    """NVRTC 12 writes no ``.nv.info`` section into a cubin of no kernel (a source of templates
    only, compiled without name expressions, as a name the source does not define makes
    compile_cuda do): a cubin without one is still read, a kernel's register count unknown."""
    k = lp.compile_cuda('extern "C" __global__ void one(float* y, int n) { y[n] = 1.0f; }', "one", arch="sm_90")
    assert b".nv.info\x00" in k.image
    renamed = k.image.replace(b".nv.info\x00", b".nv.infx\x00", 1)  # the global section gone, the kernel's kept
    found = kernels_in_image(renamed, "cubin")["one"]
    assert [(p.offset, p.size) for p in found.params] == [(0, 8), (8, 4)] and found.registers is None
