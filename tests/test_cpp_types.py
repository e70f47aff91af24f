"""C++ kernels typed by the compiler (no ``signature=``), the CCCL headers on NVRTC's include path,
and the message for a header no include path has: real NVRTC compiles for sm_90, no GPU."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import numpy as np
import pytest
import torch

import launchpad as lp
from launchpad.core import toolchain
from launchpad.frontends.cpp import frontend as _cpp
from launchpad.frontends.cpp.demangle import CType, kernel_parameter_types, probe_expression, type_word

SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
struct Pair { float a; int b; };
struct Triple { float v[3]; };
enum class Mode : int { A, B };
namespace ns { template <typename T, int N> struct Box { T v[N]; }; }

template <typename T>
__global__ void axpy(T a, const T* __restrict__ x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void c_kernel(double* out, long n, unsigned char flag, bool b, unsigned long long u) {}
__global__ void mixed(float4* v, __half* h, __nv_bfloat16 s, Pair p, Mode m, ns::Box<float, 3> box,
                      const ns::Box<float, 3>* boxes, void* raw, float** pp, const volatile int* cv,
                      Triple t, __half2* h2, signed char i8, short i16, unsigned short u16, unsigned u32) {}
__global__ void overloaded(float* x) {}
__global__ void overloaded(int* x) {}
"""
NAMES = ["axpy<float>", "axpy<double>", "c_kernel", "mixed", "(void(*)(float*))overloaded", "(void(*)(int*))overloaded"]


@pytest.fixture(scope="module")
def kernels():
    return lp.compile_cuda_module(SOURCE, NAMES, arch=90)


def test_parameters_are_typed_by_the_compiler(kernels):
    assert [p.type for p in kernels["axpy<float>"].params] == ["fp32", "*fp32", "*fp32", "i32"]
    assert [p.type for p in kernels["axpy<double>"].params] == ["fp64", "*fp64", "*fp64", "i32"]
    assert [p.type for p in kernels["c_kernel"].params] == ["*fp64", "i64", "u8", "i1", "u64"]  # extern "C" too
    assert [p.type for p in kernels["(void(*)(float*))overloaded"].params] == ["*fp32"]
    assert [p.type for p in kernels["(void(*)(int*))overloaded"].params] == ["*i32"]
    # float4* reads float32; a struct by value is its bytes (4 and 8 byte ones, like enums, by size);
    # a pointer to a struct, void* or float** takes any tensor.
    assert [p.type for p in kernels["mixed"].params] == [
        "*fp32", "*fp16", "bf16", None, None, "bytes12", "*void", "*void", "*void", "*i32", "bytes12", "*fp16",
        "i8", "i16", "u16", "u32",
    ]  # fmt: skip
    assert kernels["mixed"].spec.metadata["parameter_types"][:6] == [
        "float4*", "__half*", "__nv_bfloat16", "Pair", "Mode", "ns::Box<float, 3>"
    ]  # fmt: skip


def test_the_type_probes_stay_out_of_sight(kernels):
    from launchpad.core.binary import kernels_in_image

    names = kernels_in_image(kernels["mixed"].image, "cubin")
    assert names and not any("probe" in n for n in names)
    with pytest.raises(lp.BinaryError) as err:
        lp.load_cubin(kernels["mixed"].image, "nope")
    assert "probe" not in str(err.value)


def test_values_are_checked_as_with_a_signature(kernels, fake_gpu):
    k = fake_gpu.install(kernels["axpy<float>"])
    x, y = torch.rand(8), torch.rand(8)
    k.launch(1, 32, 2.0, x, y, 8)
    assert fake_gpu.last.params == [struct.pack("<f", 2.0), struct.pack("<Q", x.data_ptr()),
                                    struct.pack("<Q", y.data_ptr()), struct.pack("<i", 8)]  # fmt: skip
    with pytest.raises(
        lp.ArgumentError, match=r"kernel 'axpy<float>'.*param 3 \(i32\): 2147483648 is out of range for i32"
    ):
        k.launch(1, 32, 2.0, x, y, 2**31)
    d = fake_gpu.install(kernels["axpy<double>"])
    with pytest.raises(lp.ArgumentTypeError, match=r"kernel 'axpy<double>'.*param 1 \(\*fp64\).*float32"):
        d.launch(1, 32, 2.0, x, y.double(), 8)
    c = fake_gpu.install(kernels["c_kernel"])
    with pytest.raises(lp.ArgumentError, match=r"param 2 \(u8\): 256 is out of range for u8"):
        c.launch(1, 1, torch.rand(2, dtype=torch.float64), 1, 256, True, 0)
    m = fake_gpu.install(kernels["mixed"])
    v = [torch.rand(4), torch.rand(2).half(), 1.5, b"\1" * 8, 1, b"\2" * 12, torch.empty(3, dtype=torch.uint8),
         torch.empty(1), torch.empty(1, dtype=torch.int64), torch.empty(2, dtype=torch.int32), b"\3" * 12,
         torch.rand(2).half(), -5, -300, 65535, 2**32 - 1]  # fmt: skip
    m.launch(1, 1, *v)
    assert fake_gpu.last.params[3] == b"\1" * 8 and fake_gpu.last.params[12] == struct.pack("<b", -5)
    with pytest.raises(lp.ArgumentTypeError, match=r"param 0 \(\*fp32\).*int32"):
        m.launch(1, 1, torch.zeros(4, dtype=torch.int32), *v[1:])
    with pytest.raises(lp.ArgumentError, match=r"param 5 \(bytes12\): expected 12 bytes, got 8"):
        m.launch(1, 1, *v[:5], b"\0" * 8, *v[6:])
    with pytest.raises(lp.ArgumentError, match=r"param 3: expected 8 bytes, got 4"):  # Pair, packed by size
        m.launch(1, 1, *v[:3], b"\0" * 4, *v[4:])


def test_loaded_cubins_keep_size_only_parameters(kernels):
    k = lp.load_cubin(kernels["axpy<float>"].image, kernels["axpy<float>"].name)
    assert [p.type for p in k.params] == [None] * 4 and [p.size for p in k.params] == [4, 8, 8, 4]


def test_a_signature_still_wins(kernels):
    k = lp.compile_cuda(SOURCE, "c_kernel", arch=90, signature="*u64, u64, i8, u8, i64")
    assert [p.type for p in k.params] == ["*u64", "u64", "i8", "u8", "i64"]
    assert "parameter_types" not in k.spec.metadata


def _cxxfilt_parameters(lowered: str) -> list[str]:
    """The parameter list binutils' c++filt reads from a probe's lowered name."""
    text = subprocess.run(["c++filt", lowered], capture_output=True, text=True, check=True).stdout.strip()
    inner = re.fullmatch(r"void __launchpad_probe<void \(\*\)\((.*)\)>\(\)", text).group(1)
    params, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        depth += (ch in "<(") - (ch in ">)")
        if ch == "," and depth == 0:
            params.append(inner[start:i].strip())
            start = i + 1
    return [*params, inner[start:].strip()] if inner else []


def _cxxfilt_style(t: CType) -> str:
    """A parsed type as c++filt writes it (``float const*``)."""
    if t.kind == "pointer":
        return _cxxfilt_style(t.pointee) + "*"
    return t.name + (" const" if t.const else "") + (" volatile" if t.volatile else "")


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="needs binutils' c++filt")
def test_demangler_agrees_with_cxxfilt_on_real_nvrtc_names():
    names = [n for n in NAMES if "overloaded" not in n] + ["(void(*)(float*))overloaded"]
    _, symbols, probed = _cpp._compile_probed(SOURCE, names, "sm_90", "c++17", None, (), ())
    assert probed
    for name in names:
        lowered = symbols[probe_expression(name)]
        ours = [_cxxfilt_style(t).replace("half", "__half") if t.name == "half" else _cxxfilt_style(t)
                for t in kernel_parameter_types(lowered)]  # fmt: skip
        assert ours == _cxxfilt_parameters(lowered), (name, lowered)


@pytest.mark.parametrize(
    ("lowered", "expected"),
    [
        ("_Z17__launchpad_probeIPFvvEEvv", []),
        ("_Z17__launchpad_probeIPFvPfPKffiEEvv", ["float*", "const float*", "float", "int"]),
        ("_Z17__launchpad_probeIPFvP6__halfS1_S0_EEvv", ["__half*", "__half*", "__half"]),
        ("_Z17__launchpad_probeIPFvN2ns3BoxIfLi3EEEPKS2_EEvv", ["ns::Box<float, 3>", "const ns::Box<float, 3>*"]),
        ("_Z17__launchpad_probeIPFvPVKiDhEEvv", ["const volatile int*", "half"]),
    ],
)
def test_demangler_on_hand_written_names(lowered, expected):
    assert [str(t) for t in kernel_parameter_types(lowered)] == expected


@pytest.mark.parametrize(
    "lowered", ["_Z3fooPf", "_Z17__launchpad_probeIPFvRfEEvv", "_Z17__launchpad_probeIPFvU3xyzfEEvv"]
)
def test_demangler_refuses_what_it_cannot_read(lowered):
    with pytest.raises(ValueError):
        kernel_parameter_types(lowered)


def test_type_words():
    f = CType("builtin", "float")
    assert type_word(CType("pointer", pointee=CType("builtin", "float", const=True))) == "*fp32"
    assert type_word(CType("pointer", pointee=CType("pointer", pointee=f))) == "*void"
    assert type_word(CType("builtin", "unsigned long")) == "u64" and type_word(CType("class", "Pair")) is None
    assert type_word(CType("builtin", "__nv_fp8_e4m3")) is None  # an fp8 scalar is packed by its byte


CCCL_SOURCE = r"""
#include <cooperative_groups.h>
#include <cub/block/block_reduce.cuh>
#include <cuda/std/limits>
#include <cuda/std/cstdint>
namespace cg = cooperative_groups;

extern "C" __global__ void grid_sum(const float* x, float* partial, float* out, int n) {
    cg::grid_group grid = cg::this_grid();
    float acc = 0.0f;
    for (int i = grid.thread_rank(); i < n; i += grid.size()) acc += x[i];
    using Reduce = cub::BlockReduce<float, 256>;
    __shared__ typename Reduce::TempStorage temp;
    float block = Reduce(temp).Sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = block;
    grid.sync();
    if (grid.thread_rank() == 0) {
        float total = 0.0f;
        for (unsigned b = 0; b < gridDim.x; ++b) total += partial[b];
        out[0] = total + 0.0f * cuda::std::numeric_limits<float>::epsilon();
    }
}
template <typename T>
__global__ void block_max(const T* x, T* out, cuda::std::int32_t n) {
    using Reduce = cub::BlockReduce<T, 128>;
    __shared__ typename Reduce::TempStorage temp;
    int i = blockIdx.x * 128 + threadIdx.x;
    T v = i < n ? x[i] : cuda::std::numeric_limits<T>::lowest();
    T m = Reduce(temp).Reduce(v, cuda::maximum<>{});
    if (threadIdx.x == 0) out[blockIdx.x] = m;
}
"""


def test_cooperative_groups_cub_and_cuda_std_compile():
    assert toolchain._cccl_include_dir() is not None, "the nvidia-cuda-cccl wheel is a dependency of cuda-python"
    ks = lp.compile_cuda_module(CCCL_SOURCE, ["grid_sum", "block_max<float>", "block_max<int>"], arch=90)
    assert [p.type for p in ks["grid_sum"].params] == ["*fp32", "*fp32", "*fp32", "i32"]
    assert [p.type for p in ks["block_max<int>"].params] == ["*i32", "*i32", "i32"]


def test_a_missing_header_names_its_package():
    # (NVSHMEM's headers ship in their own wheel, never in the CUDA toolkit's include directory)
    with pytest.raises(lp.CompileError) as err:
        lp.compile_cuda('#include <nvshmem.h>\nextern "C" __global__ void k() {}', "k", arch=90)
    assert "'nvshmem.h' comes with the nvidia-nvshmem-cu13 package (pip install nvidia-nvshmem-cu13)" in str(err.value)
    with pytest.raises(lp.CompileError) as err:
        lp.compile_cuda('#include <stdint.h>\nextern "C" __global__ void k() {}', "k", arch=90)
    assert "'stdint.h' is a host C/C++ library header, which NVRTC does not have: for device code include CCCL's " \
           "<cuda/std/cstdint>" in str(err.value)  # fmt: skip
    with pytest.raises(lp.CompileError) as err:
        lp.compile_cuda('#include "my_local_header.cuh"\nextern "C" __global__ void k() {}', "k", arch=90)
    assert "'my_local_header.cuh' is on no include path launchpad knows (pass include_dirs=)" in str(err.value)


def test_code_that_does_not_compile_reports_its_own_errors():
    with pytest.raises(lp.CompileError) as err:
        lp.compile_cuda('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }', "k", arch=90)
    assert "undefined_name" in err.value.log and "probe" not in str(err.value) + err.value.log


def test_numpy_scalars_into_compiler_typed_parameters(kernels, fake_gpu):
    k = fake_gpu.install(kernels["c_kernel"])
    out = torch.rand(2, dtype=torch.float64)
    k.launch(1, 1, out, np.int64(-7), np.uint8(9), np.bool_(True), np.uint64(2**64 - 1))
    p = fake_gpu.last.params
    assert p[1] == struct.pack("<q", -7) and p[2] == b"\x09" and p[3] == b"\x01" and p[4] == b"\xff" * 8


def test_vector_pointers_need_their_alignment(kernels, fake_gpu):
    k = fake_gpu.install(kernels["mixed"])
    assert (k.args[0].name, k.args[0].align, k.args[11].align) == ("v", 16, 4)  # float4*, __half2*
    storage = torch.rand(64)
    aligned = storage[(-storage.data_ptr() % 16) // 4 :][:16]
    rest = [torch.rand(2).half(), 1.5, b"\1" * 8, 1, b"\2" * 12, torch.empty(3, dtype=torch.uint8), torch.empty(1),
            torch.empty(1, dtype=torch.int64), torch.empty(2, dtype=torch.int32), b"\3" * 12,
            torch.rand(4).half(), -5, -300, 65535, 2**32 - 1]  # fmt: skip
    k.launch(1, 1, aligned, *rest)
    with pytest.raises(lp.ArgumentError) as err:
        k.launch(1, 1, aligned[1:], *rest)  # 4 bytes past a 16-byte boundary: a float4 load would fault
    assert str(err.value) == (
        f"kernel 'mixed', argument 0 ('v'), param 0 (*fp32): pointer {aligned[1:].data_ptr():#x} is not 16-byte "
        "aligned, but the kernel was compiled assuming it is"
    )
