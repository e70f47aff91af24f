"""Kernels with large parameter blocks (CUDA 12.1+: up to 32,764 bytes on Volta and newer), on CPU.

Every form a binary records its layout in is read: the cubin's ``EIATTR_KPARAM_INFO`` records
(4 KB and less), its ``EIATTR_KPARAM_INFO_V2`` records (above), PTX and a fatbin. Both executors
and a bound launch send the driver every byte; above the limit, or where the device or driver
cannot take a large block, the error names the limit.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

import launchpad as lp
from launchpad.core import binary as _binary
from launchpad.core import driver as _driver
from launchpad.core.params import layout_from_signature
from launchpad.core.spec import KernelSpec

SIZES = (2048, 4096, 8192, 32000)


def source(nbytes: int) -> str:
    return f"""
struct Big {{ int v[{nbytes // 4}]; }};
extern "C" __global__ void big(const Big s, float* out, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = s.v[i] * 2.0f + s.v[{nbytes // 4} - 1 - i];
}}
"""


@pytest.fixture(scope="module")
def kernels() -> dict[int, lp.Kernel]:
    return {n: lp.compile_cuda(source(n), "big", arch="sm_90") for n in SIZES}


def kparam_attributes(cubin: bytes, name: str) -> set[int]:
    """The attribute ids of the records in a kernel's ``.nv.info`` section."""
    header, sections = _binary._elf_sections(cubin)
    names = cubin[sections[header[13]][4] :]
    for s in sections:
        if names[s[0] : names.index(b"\0", s[0])].decode() == f".nv.info.{name}":
            info, pos, found = cubin[s[4] : s[4] + s[5]], 0, set()
            while pos + 4 <= len(info):
                fmt, attr, value = struct.unpack_from("<BBH", info, pos)
                pos += 4 + (value if fmt == 4 else 0)
                found.add(attr)
            return found
    raise AssertionError(f"no .nv.info.{name}")


@pytest.mark.parametrize("nbytes", SIZES)
def test_the_cubin_layout_in_either_record_form(kernels, nbytes):
    k = kernels[nbytes]
    records = kparam_attributes(k.image, k.name)
    # the compiler writes the second form once the block no longer fits the first's 14-bit sizes
    assert (0x45 in records) == (nbytes > 4096) and (0x17 in records) == (nbytes <= 4096)
    assert [(p.name, p.type, p.offset, p.size) for p in k.params] == [
        ("s", f"bytes{nbytes}", 0, nbytes),
        ("out", "*fp32", nbytes, 8),
        ("n", "i32", nbytes + 8, 4),
    ]
    assert k.spec.param_bytes == nbytes + 12


@pytest.mark.parametrize("nbytes", [8192, 32000])
def test_ptx_and_fatbin_give_the_same_layout(kernels, nbytes):
    from cuda.bindings import nvrtc  # PTX needs no driver through NVRTC directly

    _, prog = nvrtc.nvrtcCreateProgram(source(nbytes).encode(), b"big.cu", 0, [], [])
    assert nvrtc.nvrtcCompileProgram(prog, 1, [b"-arch=compute_90"])[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    ptx = b" " * nvrtc.nvrtcGetPTXSize(prog)[1]
    nvrtc.nvrtcGetPTX(prog, ptx)
    nvrtc.nvrtcDestroyProgram(prog)
    assert b".param .align 4 .b8 big_param_0[" + str(nbytes).encode() + b"]" in ptx
    k = kernels[nbytes]
    from_ptx = _binary.kernels_in_image(_binary.read_image(ptx)[0], "ptx")[k.name]
    assert [(p.offset, p.size) for p in from_ptx.params] == [(p.offset, p.size) for p in k.params]
    try:
        from cuda.bindings import nvfatbin

        handle = nvfatbin.create([], 0)
    except Exception as exc:  # the nvidia-nvfatbin wheel is a test extra
        pytest.skip(f"libnvfatbin is not installed: {type(exc).__name__}")
    nvfatbin.add_cubin(handle, k.image, len(k.image), "90", "big")
    fatbin = bytearray(nvfatbin.size(handle))
    nvfatbin.get(handle, fatbin)
    nvfatbin.destroy(handle)
    from_fatbin = _binary.kernels_in_image(bytes(fatbin), "fatbin")[k.name]
    assert from_fatbin.params == _binary.kernels_in_image(k.image, "cubin")[k.name].params


def record(nbytes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-(2**31), 2**31, nbytes // 4, dtype=np.int32)


@pytest.mark.parametrize("nbytes", SIZES)
def test_both_executors_and_a_bound_launch_send_every_byte(kernels, fake_gpu, nbytes):
    k = fake_gpu.install(lp.Kernel(kernels[nbytes].spec))
    out = torch.empty(16)
    values = record(nbytes, nbytes)
    k.launch(1, 16, values.tobytes(), out, 16)
    sent = fake_gpu.last.params
    assert sent[0] == values.tobytes() and len(sent[0]) == nbytes
    assert sent[1] == out.data_ptr().to_bytes(8, "little") and sent[2] == (16).to_bytes(4, "little")
    other = record(nbytes, nbytes + 1)
    k[1, 16](other, out, 16)  # a numpy array of the struct's bytes (any object with tobytes())
    assert fake_gpu.last.params[0] == other.tobytes()
    bound = k.bind(1, 16, values.tobytes(), out, 16)
    bound()
    assert fake_gpu.last.params == sent
    bound(other.tobytes())
    assert fake_gpu.last.params[0] == other.tobytes()
    with pytest.raises(lp.ArgumentError, match=rf"param 0 \(bytes{nbytes}\): expected {nbytes} bytes, got 4"):
        k.launch(1, 16, b"1234", out, 16)


@pytest.mark.parametrize("fake_gpu", ["compiled"], indirect=True)
def test_the_compiled_executor_takes_the_largest_block_itself(kernels, fake_gpu, monkeypatch):
    """No fixed stack array: a 32,000-byte block is packed by the C launcher (on the heap) and
    reaches the driver from there, not through the Python executor."""
    k = fake_gpu.install(lp.Kernel(kernels[32000].spec))
    from_c = []
    record_c = fake_gpu._record_c
    monkeypatch.setattr(fake_gpu, "_record_c", lambda *a: from_c.append(1) or record_c(*a))
    out = torch.empty(4)
    for seed in range(3):  # repeated: each launch packs its own buffer
        values = record(32000, seed).tobytes()
        k.launch(1, 4, values, out, 4)
        assert fake_gpu.last.params[0] == values
    assert len(from_c) == 3 == len(fake_gpu.launches)


def test_above_the_limit_the_error_names_it():
    words = ["bytes32760", "*fp32", "i32"]  # 32,772 bytes with the padding
    with pytest.raises(lp.OutOfResources, match=r"kernel 'k' takes 32772 bytes of parameters; CUDA allows at most "
                       r"32764 \(from CUDA 12\.1, on Volta and newer GPUs\)"):  # fmt: skip
        KernelSpec(b"", "cubin", "k", tuple(layout_from_signature(words)))
    with pytest.raises(lp.CompileError, match="32764 bytes allowed"):  # NVRTC refuses it first
        lp.compile_cuda(source(32768), "big", arch="sm_90")


@pytest.mark.parametrize(("capability", "version", "ok"), [((9, 0), 13000, True), ((7, 0), 12010, True),
                                                           ((9, 0), 12000, False), ((6, 1), 12080, False)])  # fmt: skip
def test_a_device_or_driver_that_cannot_take_a_large_block_is_refused_before_the_driver(
    kernels, monkeypatch, capability, version, ok
):
    loaded = []
    monkeypatch.setattr(_driver, "compute_capability", lambda device: capability)
    monkeypatch.setattr(_driver, "driver_version", lambda: version)
    monkeypatch.setattr(_driver, "load_function", lambda image, name, device: loaded.append(name) or ("m", 1))
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(_driver, "unload_module", lambda module, device: None)  # "m" is no real module
    monkeypatch.setattr(_binary, "arch_runs_on", lambda *a: True)
    from launchpad.core import loader as _loader

    monkeypatch.setattr(_loader, "arch_runs_on", lambda *a: True)
    k = lp.Kernel(kernels[8192].spec)
    if ok:
        assert k._loader._load(0).handle == "m" and loaded == ["big"]
        return
    major, minor = capability
    with pytest.raises(lp.OutOfResources) as e:
        k._loader._load(0)
    assert str(e.value) == (
        f"kernel 'big' takes 8204 bytes of parameters, more than the 4096 every GPU and driver take: cuda:0 "
        f"(sm_{major}{minor}, compute capability {major}.{minor}) with a driver for CUDA {version // 1000}."
        f"{version % 1000 // 10} cannot launch it (up to 32764 bytes need a Volta or newer GPU and a driver for "
        "CUDA 12.1 or newer)"
    )
    assert not loaded
    with pytest.raises(lp.OutOfResources, match="4108 bytes"):  # the first record form, but over 4096 bytes
        lp.Kernel(kernels[4096].spec)._loader._load(0)
    lp.Kernel(kernels[2048].spec)._loader._load(0)  # 2,060 bytes: every device and driver
    assert loaded == ["big"]
