"""The launch core on a real GPU: C++ kernels on torch tensors, checked against torch."""

from __future__ import annotations

import struct
import threading

import numpy as np
import pytest
import torch

import launchpad as lp

pytestmark = pytest.mark.gpu

SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}

template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

struct alignas(64) Blob { unsigned char b[128]; };

// Writes the bits of every scalar parameter back, so packing is checked on the device.
extern "C" __global__ void scalars(unsigned long long* out, signed char i8, unsigned char u8, short i16,
                                   unsigned short u16, int i32, unsigned u32, long long i64,
                                   unsigned long long u64, __half f16, __nv_bfloat16 bf16, float f32,
                                   double f64, bool b, Blob blob, unsigned char* blob_out) {
    out[0] = (unsigned long long)(long long)i8;  out[1] = u8;  out[2] = (unsigned long long)(long long)i16;
    out[3] = u16;  out[4] = (unsigned long long)(long long)i32;  out[5] = u32;
    out[6] = (unsigned long long)i64;  out[7] = u64;  out[8] = __half_as_ushort(f16);
    out[9] = __bfloat16_as_ushort(bf16);  out[10] = __float_as_uint(f32);
    out[11] = (unsigned long long)__double_as_longlong(f64);  out[12] = b;
    for (int k = 0; k < 128; ++k) blob_out[k] = blob.b[k];
}

// Reverses each block's chunk through dynamic shared memory of any size.
extern "C" __global__ void reverse_shared(const float* x, float* y, int per_block) {
    extern __shared__ float tile[];
    const float* src = x + (size_t)blockIdx.x * per_block;
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) tile[i] = src[i];
    __syncthreads();
    float* dst = y + (size_t)blockIdx.x * per_block;
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) dst[i] = tile[per_block - 1 - i];
}

// Each block writes its cluster rank (Hopper thread block clusters).
extern "C" __global__ void cluster_rank(int* out) {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    if (threadIdx.x == 0) out[blockIdx.x] = (int)r;
}
"""

SCALARS_SIG = "*u64, i8, u8, i16, u16, i32, u32, i64, u64, fp16, bf16, fp32, fp64, i1, bytes128, *u8"


@pytest.fixture(scope="module")
def kernels():
    names = ["scale", "axpy<float>", "axpy<double>", "scalars", "reverse_shared", "cluster_rank"]
    ks = lp.compile_cuda_module(SOURCE, names, signatures={"scalars": SCALARS_SIG, "scale": "*fp32, *fp32, fp32, i32"})
    ks["scalars_typed_by_compiler"] = lp.compile_cuda(SOURCE, "scalars")  # no signature: the compiler's types
    ks["scalars_untyped"] = lp.load_cubin(ks["scalars"].image, "scalars")  # a bare cubin: sizes only
    return ks


def rand(n, dtype=torch.float32):
    return torch.randn(n, device="cuda", dtype=dtype)


def test_extern_c_kernel_matches_torch(kernels):
    x, y = rand(10_000), torch.full((10_000,), float("nan"), device="cuda")
    kernels["scale"].launch((10_000 + 255) // 256, 256, x, y, 1.5, 10_000)
    torch.testing.assert_close(y, 1.5 * x)


@pytest.mark.parametrize("name,dtype", [("axpy<float>", torch.float32), ("axpy<double>", torch.float64)])
def test_template_instance_matches_torch(kernels, name, dtype):
    x, y = rand(5000, dtype), rand(5000, dtype)
    expected = 0.75 * x + y
    kernels[name][(5000 + 127) // 128, 128](0.75, x, y, 5000)
    torch.testing.assert_close(y, expected)


def _scalar_values():
    rng = np.random.default_rng()
    blob = rng.integers(0, 256, 128, dtype=np.uint8).tobytes()
    f = float(rng.standard_normal())
    return [
        int(rng.integers(-128, 128)), int(rng.integers(0, 256)), int(rng.integers(-(2**15), 2**15)),
        int(rng.integers(0, 2**16)), int(rng.integers(-(2**31), 2**31)), int(rng.integers(0, 2**32)),
        int(rng.integers(-(2**63), 2**63)), int(rng.integers(0, 2**64, dtype=np.uint64)), f * 3, f * 5, f * 7,
        f * 11, True, blob,
    ]  # fmt: skip


def _expected_bits(values):
    i8, u8, i16, u16, i32, u32, i64, u64, f16, bf16, f32, f64, b, _ = values
    bits = lambda code, v: int.from_bytes(struct.pack("<" + code, v), "little")
    bf16_bits = int(torch.tensor(bf16, dtype=torch.float32).to(torch.bfloat16).view(torch.int16)) % 2**16  # RNE
    return [i8 % 2**64, u8, i16 % 2**64, u16, i32 % 2**64, u32, i64 % 2**64, u64, bits("e", f16),
            bf16_bits, bits("f", f32), bits("d", f64), int(b)]  # fmt: skip


@pytest.mark.parametrize("name", ["scalars", "scalars_typed_by_compiler"])
def test_every_scalar_type_reaches_the_kernel(kernels, name):
    assert [p.type for p in kernels[name].params] == [w.strip() for w in SCALARS_SIG.split(",")]
    for _ in range(3):
        values = _scalar_values()
        out = torch.zeros(13, dtype=torch.uint64, device="cuda")
        blob_out = torch.zeros(128, dtype=torch.uint8, device="cuda")
        kernels[name].launch(1, 1, out, *values, blob_out)
        assert [int(v) % 2**64 for v in out.cpu().tolist()] == _expected_bits(values)
        assert bytes(blob_out.cpu().numpy()) == values[-1]


def test_untyped_scalars_pack_by_python_type(kernels):
    values = _scalar_values()
    # without a signature a 2-byte float is taken as fp16, so bf16 goes as its raw bits
    values[9] = struct.unpack("<I", struct.pack("<f", values[9]))[0] >> 16
    out = torch.zeros(13, dtype=torch.uint64, device="cuda")
    blob_out = torch.zeros(128, dtype=torch.uint8, device="cuda")
    blob = np.frombuffer(values[-1], dtype=np.dtype([("b", np.uint8, 128)]))[0]  # a numpy struct scalar
    kernels["scalars_untyped"].launch(1, 1, out, *values[:-1], blob, blob_out)
    expected = _expected_bits(values[:-1] + [values[-1]])
    expected[9] = values[9]
    assert [int(v) % 2**64 for v in out.cpu().tolist()] == expected
    assert bytes(blob_out.cpu().numpy()) == values[-1]


def test_more_than_100kb_of_dynamic_shared_memory(kernels):
    k = kernels["reverse_shared"]
    per_block = 120 * 1024 // 4
    x = rand(per_block * 4)
    y = torch.full_like(x, float("nan"))
    k.launch(4, 256, x, y, per_block, shared_mem=per_block * 4)
    torch.testing.assert_close(y, x.view(4, per_block).flip(1).reshape(-1))
    attrs = k.attributes()
    optin = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    assert attrs["max_dynamic_shared_size_bytes"] == optin - attrs["shared_size_bytes"]


def test_set_max_dynamic_shared_memory_and_its_limit(kernels):
    k = lp.compile_cuda(SOURCE, "reverse_shared")
    optin = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    assert k.set_max_dynamic_shared_memory() == optin
    assert k.set_max_dynamic_shared_memory(64 * 1024) == 64 * 1024
    with pytest.raises(lp.OutOfResources, match=rf"{optin + 1} bytes .* at most {optin}"):
        k.set_max_dynamic_shared_memory(optin + 1)
    with pytest.raises(lp.OutOfResources):
        k.launch(1, 32, rand(8), rand(8), 8, shared_mem=optin + 4)


def test_attributes(kernels):
    attrs = kernels["scale"].attributes()
    assert attrs["num_regs"] > 0 and attrs["max_threads_per_block"] == 1024
    assert attrs["binary_version"] == 90 and attrs["local_size_bytes"] == 0


def test_launches_follow_torch_stream_order(kernels):
    s = torch.cuda.Stream()
    n = 1 << 24
    with torch.cuda.stream(s):
        x = rand(n)
        for _ in range(4):
            x = x * 1.0001 + 0.5  # long torch work queued on s before the launch reads x
        y = torch.empty_like(x)
        kernels["scale"].launch((n + 255) // 256, 256, x, y, 2.0, n)
        z = y - 2.0 * x  # torch work after the launch, same stream
    s.synchronize()
    assert torch.count_nonzero(z).item() == 0


@pytest.mark.parametrize("kind", ["torch", "int", "protocol", "cuda.core"])
def test_explicit_stream_kinds(kernels, kind):
    s = torch.cuda.Stream()
    if kind == "torch":
        stream = s
    elif kind == "int":
        stream = s.cuda_stream
    elif kind == "protocol":
        stream = type("S", (), {"__cuda_stream__": lambda self: (0, s.cuda_stream)})()
    else:
        from cuda.core import Device

        dev = Device(0)
        dev.set_current()
        stream = dev.create_stream()
        s = None
    x = rand(4096)
    y = torch.empty_like(x)
    torch.cuda.synchronize()
    kernels["scale"].launch(16, 256, x, y, 3.0, 4096, stream=stream)
    if s is not None:
        s.synchronize()
    else:
        stream.sync()
    torch.testing.assert_close(y, 3 * x)


def test_graph_capture_and_replay(kernels):
    x, y = rand(8192), torch.empty(8192, device="cuda")
    k = kernels["scale"]
    k.launch(32, 256, x, y, 2.0, 8192)  # load outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        k.launch(32, 256, x, y, 2.0, 8192)
    for _ in range(3):
        x.copy_(rand(8192))
        g.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(y, 2 * x)


def test_eight_threads_never_share_an_argument_buffer(kernels):
    k = kernels["scale"]
    n, iters = 256, 2000
    errors: list[BaseException] = []
    outs: dict[int, torch.Tensor] = {}
    xs = {t: rand(n) for t in range(8)}

    def work(t: int) -> None:
        try:
            out = torch.empty(iters, n, device="cuda")
            x = xs[t]
            for i in range(iters):
                k.launch(1, n, x, out[i], float(t * 10_000 + i), n)
            torch.cuda.synchronize()
            outs[t] = out
        except BaseException as exc:  # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for t in range(8):
        factors = torch.arange(iters, device="cuda", dtype=torch.float32)[:, None] + t * 10_000
        torch.testing.assert_close(outs[t], factors * xs[t][None, :])


def test_a_fresh_thread_can_launch(kernels):
    x, y = rand(1024), torch.empty(1024, device="cuda")
    errors = []
    th = threading.Thread(target=lambda: _guard(errors, kernels["scale"].launch, 4, 256, x, y, 4.0, 1024))
    th.start()
    th.join()
    assert not errors, errors
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 4 * x)


def _guard(errors, fn, *args):
    try:
        fn(*args)
    except BaseException as exc:
        errors.append(exc)


def test_bind_repeats_and_replaces(kernels):
    k = kernels["scale"]
    x, y, x2 = rand(4096), torch.empty(4096, device="cuda"), rand(4096)
    bound = k.bind(16, 256, x, y, 2.0, 4096)
    bound()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 2 * x)
    bound(x2)  # replaces the first argument for this call only
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 2 * x2)
    bound(x, y, 5.0)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 5 * x)
    x.copy_(rand(4096))
    bound()  # the original launch again, reading x's new values
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 2 * x)


def test_each_rejected_input_leaves_the_context_usable(kernels):
    k = kernels["scale"]
    x, y = rand(4096), torch.empty(4096, device="cuda")
    bad = [
        (lambda: k.launch(16, 256, x, y, 2.0), lp.ArgumentError, "takes 4 arguments"),
        (lambda: k.launch(16, 256, x.cpu(), y, 2.0, 4096), lp.ArgumentError, "expected a CUDA tensor"),
        (lambda: k.launch(16, 256, x.double(), y, 2.0, 4096), lp.ArgumentError, "expected a torch.float32"),
        (lambda: k.launch(16, 256, x, y, 2.0, 2**31), lp.ArgumentError, "out of range for i32"),
        (lambda: k.launch(2**31, 256, x, y, 2.0, 4096), lp.ArgumentError, "grid dimension x"),
        (lambda: k.launch((1, 70_000), 256, x, y, 2.0, 4096), lp.ArgumentError, "grid dimension y"),
        (lambda: k.launch(16, 2048, x, y, 2.0, 4096), lp.ArgumentError, r"block dimension x = 2048 .* \[1, 1024\]"),
        (
            lambda: k.launch(16, (32, 32, 2), x, y, 2.0, 4096),
            lp.ArgumentError,
            "2048 threads, .* at most 1024 per block",
        ),
        (lambda: k.launch(16, (8, 8, 128), x, y, 2.0, 4096), lp.ArgumentError, "block dimension z"),
        (lambda: k.launch(16, 256, x, y, 2.0, 4096, shared_mem=10**6), lp.OutOfResources, "at most"),
        (lambda: k.launch(16, 256, x, y, "2", 4096), lp.ArgumentError, "fp32"),
    ]
    for fn, exc, message in bad:
        with pytest.raises(exc, match=message):
            fn()
        fresh = rand(4096)
        k.launch(16, 256, fresh, y, 2.0, 4096)
        torch.cuda.synchronize()
        torch.testing.assert_close(y, 2 * fresh)


def test_tensor_on_another_device_is_refused(kernels):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    x = rand(16).to("cuda:1")
    with pytest.raises(lp.ArgumentError, match="on cuda:1 but the launch is on cuda:0"):
        kernels["scale"].launch(1, 16, x, rand(16), 1.0, 16)


def test_cluster_launch_sets_cluster_ranks(kernels):
    out = torch.full((8,), -1, dtype=torch.int32, device="cuda")
    kernels["cluster_rank"].launch(8, 32, out, cluster=(2, 1, 1))
    assert out.tolist() == [0, 1] * 4
    with pytest.raises(lp.ArgumentError, match="not a multiple of cluster"):
        kernels["cluster_rank"].launch(7, 32, out, cluster=(2, 1, 1))


def test_cooperative_and_pdl_launches(kernels):
    x, y = rand(4096), torch.empty(4096, device="cuda")
    kernels["scale"].launch(16, 256, x, y, 2.0, 4096, cooperative=True)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 2 * x)
    kernels["scale"].launch(16, 256, x, y, 3.0, 4096, pdl=True)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 3 * x)
    with pytest.raises(lp.ArgumentError, match="cooperative launch of"):
        kernels["scale"].launch(10**6, 1024, x, y, 2.0, 4096, cooperative=True)


def test_ptx_and_cubin_files_load(kernels, tmp_path):
    from cuda.core import Program, ProgramOptions

    from launchpad.core.toolchain import _cuda_include_dir

    ptx = Program(SOURCE, "c++", ProgramOptions(arch="sm_90", include_path=[_cuda_include_dir()])).compile("ptx").code
    (tmp_path / "k.ptx").write_bytes(ptx)
    (tmp_path / "k.cubin").write_bytes(kernels["scale"].image)
    for path in (tmp_path / "k.ptx", tmp_path / "k.cubin"):
        k = lp.load_cubin(path, "scale", signature="*fp32, *fp32, fp32, i32")
        x, y = rand(1000), torch.empty(1000, device="cuda")
        k.launch(4, 256, x, y, -1.5, 1000)
        torch.testing.assert_close(y, -1.5 * x)
        k.close()


def test_saved_artifact_launches(kernels, tmp_path):
    k = lp.load(kernels["scale"].save(tmp_path / "scale.json"))
    x, y = rand(1000), torch.empty(1000, device="cuda")
    k.launch(4, 256, x, y, 0.5, 1000)
    torch.testing.assert_close(y, 0.5 * x)


def test_zero_grid_launches_nothing(kernels):
    y = rand(16)
    before = y.clone()
    kernels["scale"].launch(0, 16, rand(16), y, 2.0, 16)
    kernels["scale"].launch((4, 0), 16, rand(16), y, 2.0, 16)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, before)
