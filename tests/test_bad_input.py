"""Bad input across the three front ends, as one table.

Each case gives an input launchpad must refuse, the exact exception (or warning) class it
documents for it, and a regular expression its message must match; every expression names the
kernel and, for an argument, the argument. The table covers wrong argument counts and types,
CPU tensors and tensors on another device, wrong dtypes, misaligned pointers for aligned
specializations, ints out of range, grid/block/shared memory over the limits, zero-size grids
(which still check their arguments), corrupt and truncated binaries, missing kernel names,
compile errors of NVRTC, nvJitLink, Triton and Numba, damaged cache entries and an unusable cache
directory, binaries and saved artifacts for another architecture, damaged artifacts and wrong
Numba array layouts.

It runs twice. ``test_bad_input_without_gpu`` runs every case that needs no GPU (most of them)
through the real generated launch path with the driver faked (``fake_gpu``, a device of compute
capability 9.0) and checks nothing reached the driver. ``test_bad_input_on_gpu`` runs every case
on a GPU and after each one launches each front end's kernel on random inputs and compares with
torch, so no refused input left a sticky error in the process's CUDA context.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

import launchpad as lp
from launchpad.core import cache as _cache
from launchpad.core import driver as _driver
from launchpad.core.binary import arch_runs_on, cubin_arch, kernels_in_image
from launchpad.launch import checks as _checks

try:
    import triton
    import triton.language as tl
    import triton_kernels as TK
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
except ImportError:  # the Triton cases skip
    triton = None

try:
    from numba import cuda
except ImportError:  # the Numba cases skip
    cuda = None

HAS_GPU = torch.cuda.is_available()
N = 4096

CPP_SOURCE = r"""
extern "C" __global__ void scale(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
"""
CPP_SIG = "*fp32, *fp32, fp32, i32"
TRITON_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
DIVISIBLE = [["tt.divisibility", 16]]
AXPY_SIG = "void(float32[::1], float32[::1], float32[::1], float32)"
SCALE2D_SIG = "void(float32[:, ::1], float32[:, ::1], float32)"


# --- the kernels --------------------------------------------------------------------------------


def lp_axpy(out, x, y, a):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


def lp_scale2d(out, x, s):
    i, j = cuda.grid(2)
    if i < out.shape[0] and j < out.shape[1]:
        out[i, j] = s * x[i, j]


def lp_bad_numba(a):
    a[0] = "text"  # a typing error


if triton is not None:

    @triton.jit
    def lp_bad_triton(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, undefined_name, mask=offs < n)  # noqa: F821  (the compile error)


def _triton_compiled(target: Any) -> Any:
    src = ASTSource(TK.add_kernel, TRITON_SIG, {"BLOCK": 1024}, {(i,): DIVISIBLE for i in range(4)})
    return triton.compile(src, target=target, options={"num_warps": 4})


def build_kernels(gpu: bool, cache_dir: Any) -> dict[str, Any]:
    """Each front end's kernel, compiled for the current GPU (``gpu``) or for sm_90 without one."""
    arch = None if gpu else "sm_90"
    out: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LAUNCHPAD_CACHE_DIR", str(cache_dir))
        out["cpp"] = lp.compile_cuda(CPP_SOURCE, "scale", arch=arch, signature=CPP_SIG)
        if triton is not None:
            target = triton.runtime.driver.active.get_current_target() if gpu else GPUTarget("cuda", 90, 32)
            out["triton_compiled"] = _triton_compiled(target)
            out["triton"] = lp.from_triton(out["triton_compiled"])
        if cuda is not None:
            out["numba"] = lp.from_numba(lp_axpy, AXPY_SIG, arch=arch)
            out["numba2d"] = lp.from_numba(lp_scale2d, SCALE2D_SIG, arch=arch)
    return out


@pytest.fixture(scope="module")
def cpu_kernels(tmp_path_factory):
    return build_kernels(False, tmp_path_factory.getbasetemp() / "cache")


@pytest.fixture(scope="module")
def gpu_kernels(tmp_path_factory):
    return build_kernels(True, tmp_path_factory.getbasetemp() / "cache")


class Env:
    """What a case needs: the kernels, tensors on the launch device, and where to write files."""

    def __init__(self, gpu: bool, kernels: dict, tmp_path: Any, monkeypatch: pytest.MonkeyPatch):
        self.gpu = gpu
        self.kernels = kernels
        self.tmp_path = tmp_path
        self.mp = monkeypatch
        self.device = torch.cuda.current_device() if gpu else 0
        self.cc = _driver.compute_capability(self.device) if gpu else (9, 0)
        self.arch = None if gpu else "sm_90"  # what compiles for "this device"
        self.own_arch = f"sm_{self.cc[0]}{self.cc[1]}"
        self.other_arch = "sm_80" if self.cc[0] != 8 else "sm_90"  # a cubin this device cannot run
        self.newer_arch = "sm_100" if self.cc < (10, 0) else "sm_120" if self.cc < (12, 0) else None  # PTX too new
        self.triton_target = None if gpu else GPUTarget("cuda", 90, 32) if triton is not None else None

    def kernel(self, name: str) -> lp.Kernel:
        if name not in self.kernels:
            pytest.skip(f"{name} is not installed")
        return self.kernels[name]

    def t(self, *shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Random values (never zeros) on the launch device."""
        return torch.randn(*shape, device="cuda" if self.gpu else "cpu").to(dtype)

    def host(self, t: torch.Tensor) -> torch.Tensor:
        """A CPU tensor (without a GPU the launch device is faked as cuda:0 for these cases)."""
        return t.cpu()


# --- the table -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    frontend: str  # "cpp", "triton" or "numba"
    category: str
    exc: type  # the exact class raised (or warned)
    match: str  # searched in the message
    run: Callable[[Env], Any] = field(repr=False)
    kernel: str  # the kernel the message names
    arg: str | None = None  # how the message names the argument, for argument errors
    where: str = "any"  # "any": also without a GPU; "gpu": needs one; "2gpu": needs two
    fake_device: int = -1  # without a GPU: the faked launch device (-1 takes CPU tensors as device tensors)


CASES: list[Case] = []


def case(id: str, frontend: str, category: str, exc: type, match: str, *, kernel: str, arg: str | None = None,
         where: str = "any", fake_device: int = -1) -> Callable:  # fmt: skip
    def register(run: Callable[[Env], Any]) -> Callable[[Env], Any]:
        CASES.append(Case(id, frontend, category, exc, match, run, kernel, arg, where, fake_device))
        return run

    return register


def _cpp(env: Env) -> tuple[lp.Kernel, torch.Tensor, torch.Tensor]:
    x = env.t(N)
    return env.kernel("cpp"), x, torch.empty_like(x)


def _tri(env: Env) -> tuple[lp.Kernel, torch.Tensor, torch.Tensor, torch.Tensor]:
    x, y = env.t(N), env.t(N)
    return env.kernel("triton"), x, y, torch.empty_like(x)


def _nb(env: Env) -> tuple[lp.Kernel, torch.Tensor, torch.Tensor, torch.Tensor]:
    x, y = env.t(N), env.t(N)
    return env.kernel("numba"), torch.empty_like(x), x, y


def _fresh_source() -> str:
    """A kernel no cache has seen, so each cache case starts from a miss."""
    return CPP_SOURCE.replace("scale(", "lp_cached(").replace("a * x[i]", f"a * x[i] + {uuid.uuid4().int % 10**6}")


def _flip_artifact_image(path: Any) -> None:
    d = json.loads(path.read_text())
    image = bytearray(base64.b64decode(d["image"]))
    image[len(image) // 2] ^= 0x10
    d["image"] = base64.b64encode(bytes(image)).decode()
    path.write_text(json.dumps(d))


def _ptx(source: str, arch: str) -> bytes:
    """PTX for ``.target arch``, through NVRTC directly (no driver needed)."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), b"lp_bad_input.cu", 0, [], [])
    assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    try:
        opts = [f"-arch=compute_{arch.removeprefix('sm_')}".encode()]
        assert nvrtc.nvrtcCompileProgram(prog, len(opts), opts)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
        ptx = b" " * nvrtc.nvrtcGetPTXSize(prog)[1]
        assert nvrtc.nvrtcGetPTX(prog, ptx)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return ptx


CPP_NAMES = ("x", "y", "a", "n")  # as the kernel's declaration names them


class _CppArg(str):
    """``kernel 'scale', argument i ('name'), param i (type)``: the C++ kernel's parameters carry the
    names of its declaration."""

    def format(self, i: int, t: str) -> str:  # type: ignore[override]
        return rf"kernel 'scale', argument {i} \('{CPP_NAMES[i]}'\), param {i} \({t}\)"


CPP_ARG = _CppArg()

# C++: wrong counts and types


@case(
    "cpp-count-too-few",
    "cpp",
    "count",
    lp.ArgumentTypeError,
    r"^kernel 'scale' takes 4 arguments \(x, y, a, n\), got 3; missing: n$",
    kernel="scale",
)
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x, y, 2.0)


@case(
    "cpp-count-too-many",
    "cpp",
    "count",
    lp.ArgumentTypeError,
    r"^kernel 'scale' takes 4 arguments \(x, y, a, n\), got 5$",
    kernel="scale",
)
def _(env):
    k, x, y = _cpp(env)
    k[16, 256](x, y, 2.0, N, 7)


@case("cpp-pointer-is-str", "cpp", "type", lp.ArgumentTypeError,
      "^" + CPP_ARG.format(i=0, t=r"\*fp32") + r": expected a tensor or device pointer, got str 'x'$",
      kernel="scale", arg="argument 0")  # fmt: skip
def _(env):
    k, _, y = _cpp(env)
    k.launch(16, 256, "x", y, 2.0, N)


@case("cpp-pointer-is-float", "cpp", "type", lp.ArgumentTypeError,
      "^" + CPP_ARG.format(i=1, t=r"\*fp32") + r": expected a device pointer \(tensor\), got float 1\.5$",
      kernel="scale", arg="argument 1")  # fmt: skip
def _(env):
    k, x, _ = _cpp(env)
    k.launch(16, 256, x, 1.5, 2.0, N)


@case("cpp-pointer-is-bool", "cpp", "type", lp.ArgumentTypeError,
      "^" + CPP_ARG.format(i=1, t=r"\*fp32") + r": expected a device pointer \(tensor\), got bool True$",
      kernel="scale", arg="argument 1")  # fmt: skip
def _(env):
    k, x, _ = _cpp(env)
    k.launch(16, 256, x, True, 2.0, N)


@case(
    "cpp-float-is-str",
    "cpp",
    "type",
    lp.ArgumentTypeError,
    "^" + CPP_ARG.format(i=2, t="fp32") + r": cannot pack str '2' as fp32",
    kernel="scale",
    arg="argument 2",
)
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x, y, "2", N)


@case(
    "cpp-int-is-float",
    "cpp",
    "type",
    lp.ArgumentTypeError,
    "^" + CPP_ARG.format(i=3, t="i32") + r": cannot pack float 4096\.0 as i32",
    kernel="scale",
    arg="argument 3",
)
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x, y, 2.0, float(N))


# C++: devices and dtypes


@case("cpp-cpu-tensor", "cpp", "cpu-tensor", lp.ArgumentError,
      "^" + CPP_ARG.format(i=0, t=r"\*fp32") + r": expected a CUDA tensor, got a torch\.float32 tensor on cpu; a pinned CPU tensor \(\.pin_memory\(\)\) would be readable by the device$",
      kernel="scale", arg="argument 0", fake_device=0)  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, env.host(x), y, 2.0, N)


@case("cpp-other-device-tensor", "cpp", "other-device", lp.ArgumentError,
      "^" + CPP_ARG.format(i=0, t=r"\*fp32") + r": tensor is on cuda:\d+ but the launch is on cuda:\d+$",
      kernel="scale", arg="argument 0", where="2gpu")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x.to(f"cuda:{1 - env.device if env.device < 2 else 0}"), y, 2.0, N)


@case("cpp-dtype-float64", "cpp", "dtype", lp.ArgumentTypeError,
      "^" + CPP_ARG.format(i=0, t=r"\*fp32") + r": expected a torch\.float32 tensor, got a torch\.float64 tensor",
      kernel="scale", arg="argument 0")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x.double(), y, 2.0, N)


@case("cpp-dtype-int32-output", "cpp", "dtype", lp.ArgumentTypeError,
      "^" + CPP_ARG.format(i=1, t=r"\*fp32") + r": expected a torch\.float32 tensor, got a torch\.int32 tensor",
      kernel="scale", arg="argument 1")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x, y.int(), 2.0, N)


# C++: ints out of range


@case(
    "cpp-int-above-i32",
    "cpp",
    "int-range",
    lp.ArgumentError,
    "^" + CPP_ARG.format(i=3, t="i32") + r": 2147483648 is out of range for i32$",
    kernel="scale",
    arg="argument 3",
)
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x, y, 2.0, 2**31)


@case(
    "cpp-int-below-i32",
    "cpp",
    "int-range",
    lp.ArgumentError,
    "^" + CPP_ARG.format(i=3, t="i32") + r": -2147483649 is out of range for i32$",
    kernel="scale",
    arg="argument 3",
)
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x, y, 2.0, -(2**31) - 1)


# C++: grid, block, shared memory and launch options

GRID = r"^kernel 'scale': grid dimension {axis} = {v} is outside the device limit \[0, {limit}\]$"
BLOCK = r"^kernel 'scale': block dimension {axis} = {v} is outside the device limit \[1, {limit}\]$"


@case(
    "cpp-grid-x-too-large",
    "cpp",
    "grid",
    lp.ArgumentError,
    GRID.format(axis="x", v=2**31, limit=2**31 - 1),
    kernel="scale",
)
def _(env):
    k, x, y = _cpp(env)
    k.launch(2**31, 256, x, y, 2.0, N)


@case(
    "cpp-grid-y-too-large", "cpp", "grid", lp.ArgumentError, GRID.format(axis="y", v=70000, limit=65535), kernel="scale"
)
def _(env):
    k, x, y = _cpp(env)
    k.launch((1, 70_000), 256, x, y, 2.0, N)


@case(
    "cpp-grid-negative", "cpp", "grid", lp.ArgumentError, GRID.format(axis="x", v=-1, limit=2**31 - 1), kernel="scale"
)
def _(env):
    k, x, y = _cpp(env)
    k.launch(-1, 256, x, y, 2.0, N)


@case("cpp-grid-4d", "cpp", "grid", lp.ArgumentError,
      r"^kernel 'scale': grid must have 1-3 dimensions, got \(1, 1, 1, 1\)$", kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch((1, 1, 1, 1), 256, x, y, 2.0, N)


@case("cpp-grid-is-str", "cpp", "grid", lp.ArgumentTypeError,
      r"^kernel 'scale': grid must be an int or a tuple of 1-3 ints, got str '16'$", kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch("16", 256, x, y, 2.0, N)  # not read as the digits (1, 6)


@case("cpp-grid-has-float", "cpp", "grid", lp.ArgumentTypeError,
      r"^kernel 'scale': grid must be an int or a tuple of 1-3 ints, got tuple \(16\.5, 1\)$", kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch((16.5, 1), 256, x, y, 2.0, N)  # not truncated to 16


@case(
    "cpp-block-x-too-large",
    "cpp",
    "block",
    lp.ArgumentError,
    BLOCK.format(axis="x", v=2048, limit=1024),
    kernel="scale",
)
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 2048, x, y, 2.0, N)


@case(
    "cpp-block-z-too-large", "cpp", "block", lp.ArgumentError, BLOCK.format(axis="z", v=128, limit=64), kernel="scale"
)
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, (8, 8, 128), x, y, 2.0, N)


@case("cpp-block-zero", "cpp", "block", lp.ArgumentError, BLOCK.format(axis="x", v=0, limit=1024), kernel="scale")
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 0, x, y, 2.0, N)


@case("cpp-block-too-many-threads", "cpp", "block", lp.ArgumentError,
      r"^kernel 'scale': block \(32, 32, 2\) has 2048 threads, the kernel allows at most 1024 per block$",
      kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, (32, 32, 2), x, y, 2.0, N)


@case("cpp-block-is-float", "cpp", "block", lp.ArgumentTypeError,
      r"^kernel 'scale': block must be an int or a tuple of 1-3 ints, got float 256\.0$", kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256.0, x, y, 2.0, N)


@case(
    "cpp-zero-grid-still-checks-arguments",
    "cpp",
    "zero-grid",
    lp.ArgumentError,
    "^" + CPP_ARG.format(i=3, t="i32") + r": 2147483648 is out of range for i32$",
    kernel="scale",
    arg="argument 3",
)
def _(env):
    k, x, y = _cpp(env)
    k.launch(0, 256, x, y, 2.0, 2**31)


@case("cpp-zero-grid-still-checks-the-count", "cpp", "zero-grid", lp.ArgumentTypeError,
      r"^kernel 'scale' takes 4 arguments \(x, y, a, n\), got 2; missing: a, n$", kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch((4, 0), 256, x, y)


@case("cpp-shared-memory-over-the-limit", "cpp", "shared-mem", lp.OutOfResources,
      r"^kernel 'scale' asks for 1000000 bytes of dynamic shared memory but cuda:-?\d+ allows at most \d+ ",
      kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x, y, 2.0, N, shared_mem=10**6)


@case("cpp-shared-memory-negative", "cpp", "shared-mem", lp.ArgumentError,
      r"^kernel 'scale': shared_mem must not be negative, got -1$", kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x, y, 2.0, N, shared_mem=-1)


@case("cpp-shared-memory-is-float", "cpp", "shared-mem", lp.ArgumentTypeError,
      r"^kernel 'scale': shared_mem must be an int number of bytes, got float 1024\.0$", kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x, y, 2.0, N, shared_mem=1024.0)


@case("cpp-stream-of-wrong-type", "cpp", "launch-config", lp.ArgumentTypeError,
      r"^kernel 'scale': stream must be a torch\.cuda\.Stream, .* got str 's'$", kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(16, 256, x, y, 2.0, N, stream="s")


@case("cpp-grid-not-a-multiple-of-the-cluster", "cpp", "launch-config", lp.ArgumentError,
      r"^kernel 'scale': grid \(7, 1, 1\) is not a multiple of cluster \(2, 1, 1\)$", kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(7, 32, x, y, 2.0, N, cluster=(2, 1, 1))


@case("cpp-cooperative-grid-too-large", "cpp", "launch-config", lp.ArgumentError,
      r"^kernel 'scale': a cooperative launch of 1000000 blocks exceeds the \d+ blocks that can be resident at once "
      r"on cuda:-?\d+$", kernel="scale")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.launch(10**6, 1024, x, y, 2.0, N, cooperative=True)


@case("cpp-bound-launch-unknown-argument", "cpp", "launch-config", lp.ArgumentTypeError,
      r"^kernel 'scale': launch\(\) got an unexpected keyword argument 'zz' \(arguments: x, y, a, n; "
      r"options: shared_mem, stream, cluster, cooperative, pdl\)$", kernel="scale", arg="'zz'")  # fmt: skip
def _(env):
    k, x, y = _cpp(env)
    k.bind(16, 256, x, y, 2.0, N)(zz=1)


@case("cpp-launch-syntax", "cpp", "launch-config", lp.ArgumentError,
      r"^kernel 'scale': use kernel\[grid, block\(, stream\(, shared_mem\)\)\]$", kernel="scale")  # fmt: skip
def _(env):
    env.kernel("cpp")[16]


# C++: binaries


@case("cpp-bytes-are-no-image", "cpp", "corrupt-binary", lp.BinaryError,
      r"^kernel 'scale': not a cubin, fatbin or PTX image \(72 bytes starting b'\\x00garbage'\)$", kernel="scale")  # fmt: skip
def _(env):
    lp.load_cubin(b"\x00garbage\x01" * 8, "scale")


@case(
    "cpp-truncated-cubin",
    "cpp",
    "corrupt-binary",
    lp.BinaryError,
    r"^kernel 'scale': truncated cubin: its section headers end at byte \d+ but it has \d+ bytes$",
    kernel="scale",
)
def _(env):
    image = env.kernel("cpp").image
    lp.load_cubin(image[: len(image) // 2], "scale")


@case("cpp-cubin-shorter-than-its-header", "cpp", "corrupt-binary", lp.BinaryError,
      r"^kernel 'scale': truncated cubin: 40 bytes, less than an ELF header$", kernel="scale")  # fmt: skip
def _(env):
    lp.load_cubin(env.kernel("cpp").image[:40], "scale")


@case("cpp-section-past-the-end", "cpp", "corrupt-binary", lp.BinaryError,
      r"^kernel 'scale': truncated cubin: section 1 ends at byte \d+ but it has \d+ bytes$", kernel="scale")  # fmt: skip
def _(env):
    image = bytearray(env.kernel("cpp").image)
    shoff = int.from_bytes(image[0x28:0x30], "little")
    image[shoff + 64 + 24 : shoff + 64 + 32] = len(image).to_bytes(8, "little")  # section 1's sh_offset
    lp.load_cubin(bytes(image), "scale")


@case("cpp-elf-for-another-machine", "cpp", "corrupt-binary", lp.BinaryError,
      r"^kernel 'scale': not a cubin: an ELF file for machine 62, not CUDA \(190\)$", kernel="scale")  # fmt: skip
def _(env):
    image = bytearray(env.kernel("cpp").image)
    image[18:20] = (62).to_bytes(2, "little")  # EM_X86_64
    lp.load_cubin(bytes(image), "scale")


@case("cpp-missing-kernel-name", "cpp", "missing-kernel", lp.BinaryError,
      r"^kernel 'lp_nope' is not in this cubin \(kernels: scale\)$", kernel="lp_nope")  # fmt: skip
def _(env):
    lp.load_cubin(env.kernel("cpp").image, "lp_nope")


@case("cpp-missing-kernel-name-with-signature", "cpp", "missing-kernel", lp.BinaryError,
      r"^kernel 'lp_nope' is not in this cubin \(kernels: scale\)$", kernel="lp_nope")  # fmt: skip
def _(env):
    lp.load_cubin(env.kernel("cpp").image, "lp_nope", signature="*fp32")


@case("cpp-corrupt-ptx-refused-by-the-driver", "cpp", "corrupt-binary", lp.BinaryError,
      r"^kernel 'scale': cuda:\d+ \(sm_\d+, compute capability \d+\.\d+\) cannot load its ptx built for sm_\d+a?: "
      r"cuModuleLoadData failed: CUDA_ERROR_(INVALID_PTX|INVALID_IMAGE|UNSUPPORTED_PTX_VERSION) ", kernel="scale",
      where="gpu")  # fmt: skip
def _(env):
    ptx = _ptx(CPP_SOURCE, env.own_arch)
    bad = ptx.replace(b"ret;", b"lp_not_an_instruction;", 1)
    assert bad != ptx
    # a PTX ISA version any CUDA 12+ driver reads, so what it refuses is the instruction
    bad = re.sub(rb"\.version \d+\.\d+", b".version 8.0", bad, count=1)
    lp.load_cubin(bad, "scale").load(env.device)


@case("cpp-cubin-for-another-arch", "cpp", "other-arch", lp.BinaryError,
      r"^kernel 'scale' was built for sm_\d+ \(cubin\), which cuda:\d+ \(sm_\d+, compute capability \d+\.\d+\) "
      r"cannot run; compile it for sm_\d+$", kernel="scale")  # fmt: skip
def _(env):
    lp.compile_cuda(CPP_SOURCE, "scale", arch=env.other_arch, signature=CPP_SIG).load(env.device)


@case("cpp-ptx-for-a-newer-arch", "cpp", "other-arch", lp.BinaryError,
      r"^kernel 'scale' was built for sm_\d+ \(ptx\), which cuda:\d+ \(sm_\d+, compute capability \d+\.\d+\) "
      r"cannot run", kernel="scale")  # fmt: skip
def _(env):
    if env.newer_arch is None:
        pytest.skip("no newer architecture than this device's to compile for")
    lp.load_cubin(_ptx(CPP_SOURCE, env.newer_arch), "scale").load(env.device)


@case("cpp-artifact-for-another-arch", "cpp", "other-arch", lp.BinaryError,
      r"^kernel 'scale' was built for sm_\d+ \(cubin\), which cuda:\d+ \(sm_\d+, compute capability \d+\.\d+\) "
      r"cannot run", kernel="scale")  # fmt: skip
def _(env):
    k = lp.compile_cuda(CPP_SOURCE, "scale", arch=env.other_arch, signature=CPP_SIG)
    lp.load(k.save(env.tmp_path / "scale.json")).load(env.device)


@case("cpp-artifact-modified", "cpp", "artifact", lp.BinaryError,
      r"^launchpad artifact '.*scale\.json' \(kernel 'scale'\) was modified or damaged after it was saved: its "
      r"SHA-256 does not match its content$", kernel="scale")  # fmt: skip
def _(env):
    path = env.kernel("cpp").save(env.tmp_path / "scale.json")
    _flip_artifact_image(path)
    lp.load(path)


@case("cpp-artifact-truncated", "cpp", "artifact", lp.BinaryError,
      r"^launchpad artifact '.*scale\.json' \(kernel 'scale'\) is damaged or truncated: it is not valid JSON",
      kernel="scale")  # fmt: skip
def _(env):
    path = env.kernel("cpp").save(env.tmp_path / "scale.json")
    path.write_text(path.read_text()[:1000])
    lp.load(path)


@case("cpp-artifact-of-the-old-format", "cpp", "artifact", lp.BinaryError,
      r"^launchpad artifact '.*scale\.json' \(kernel 'scale'\) has format version 1, this launchpad reads versions 2, 3",
      kernel="scale")  # fmt: skip
def _(env):
    path = env.kernel("cpp").save(env.tmp_path / "scale.json")
    d = json.loads(path.read_text())
    del d["sha256"]
    d["version"] = 1
    path.write_text(json.dumps(d))
    lp.load(path)


# C++: compiling and linking


@case("cpp-nvrtc-syntax-error", "cpp", "compile-error", lp.CompileError,
      r"^NVRTC could not compile kernel 'lp_syntax' for sm_\d+: .*NVRTC_ERROR_COMPILATION.*\n(.*\n)*.*expected a \";\"",
      kernel="lp_syntax")  # fmt: skip
def _(env):
    lp.compile_cuda('extern "C" __global__ void lp_syntax(int* p) { p[0] = 1 }', "lp_syntax", arch=env.arch)


@case("cpp-unknown-kernel-name", "cpp", "missing-kernel", lp.BinaryError,
      r"^kernel 'lp_nope' is not defined in the source\. It defines: scale$", kernel="lp_nope")  # fmt: skip
def _(env):
    lp.compile_cuda(CPP_SOURCE, "lp_nope", arch=env.arch)


@case("cpp-kernel-name-misspelt", "cpp", "missing-kernel", lp.BinaryError,
      r"^kernel 'scal' is not defined in the source; did you mean 'scale'\? It defines: scale$", kernel="scal")  # fmt: skip
def _(env):
    lp.compile_cuda(CPP_SOURCE, "scal", arch=env.arch)


@case("cpp-kernel-name-without-its-namespace", "cpp", "missing-kernel", lp.BinaryError,
      r"^kernel 'scale<float>' is not defined at global scope; did you mean 'ops::scale<float>', in its namespace\? "
      r"It defines: the kernel template ops::scale<T> \(name an instance: its template arguments in <>\)$",
      kernel="scale<float>")  # fmt: skip
def _(env):
    source = (
        "namespace ops {\n" + CPP_SOURCE.replace('extern "C" ', "template <typename T> ").replace("float", "T") + "}"
    )
    lp.compile_cuda(source, "scale<float>", arch=env.arch)


TEMPLATE_SOURCE = "template <typename T> __global__ void axpy(T a, T* y) { y[0] += a; }"


@case("cpp-template-named-without-its-arguments", "cpp", "missing-kernel", lp.BinaryError,
      r"^kernel 'axpy' is not defined in the source; did you mean an instance of the template 'axpy<T>' \(its "
      r"template arguments in <>\)\? It defines: the kernel template axpy<T>", kernel="axpy")  # fmt: skip
def _(env):
    lp.compile_cuda(TEMPLATE_SOURCE, "axpy", arch=env.arch)


@case("cpp-template-argument-undefined", "cpp", "missing-kernel", lp.BinaryError,
      r"^kernel 'axpy<T>' is not usable as named \(NVRTC: identifier \"T\" is undefined\)\. It defines: the "
      r"kernel template axpy<T>", kernel="axpy<T>")  # fmt: skip
def _(env):
    lp.compile_cuda(TEMPLATE_SOURCE, "axpy<T>", arch=env.arch)  # never "did you mean 'axpy<T>'?": no loop


@case("cpp-overloaded-kernel-name", "cpp", "missing-kernel", lp.BinaryError,
      r"^kernel 'k' is not usable as named \(NVRTC: cannot determine which instance of overloaded function \"k\" "
      r"is intended\)\. It defines: k$", kernel="k")  # fmt: skip
def _(env):
    lp.compile_cuda("__global__ void k(float* x) {}\n__global__ void k(int* x) {}", "k", arch=env.arch)


@case(
    "cpp-signature-disagrees-with-the-binary",
    "cpp",
    "type",
    lp.ArgumentError,
    r"^kernel 'scale': the signature has 3 parameters but the binary has 4 \(8, 8, 4, 4 bytes\)$",
    kernel="scale",
)
def _(env):
    lp.compile_cuda(CPP_SOURCE, "scale", arch=env.arch, signature="*fp32, *fp32, fp32")


@case(
    "cpp-nvjitlink-undefined-symbol",
    "cpp",
    "compile-error",
    lp.CompileError,
    r"^nvJitLink could not link kernel 'lp_use' \(linked for sm_\d+\)\n(.*\n)*.*lp_undefined_twice",
    kernel="lp_use",
)
def _(env):
    src = 'extern "C" __device__ float lp_undefined_twice(float);\n' \
          'extern "C" __global__ void lp_use(float* y) { y[0] = lp_undefined_twice(y[0]); }'  # fmt: skip
    lp.link([lp.compile_cuda_object(src, arch=env.arch)], "lp_use", arch=env.arch)


# C++: the disk cache (warnings: compiling goes on)


@case("cache-truncated-entry", "cpp", "cache", lp.CacheWarning,
      r"^launchpad cache entry '.*\.lpc' \(kernel 'lp_cached' for sm_\d+\) is corrupt: .*; it was deleted and will be "
      r"rebuilt$", kernel="lp_cached")  # fmt: skip
def _(env):
    env.mp.setenv("LAUNCHPAD_CACHE_DIR", str(env.tmp_path / "cache-truncated"))
    src = _fresh_source()
    first = lp.compile_cuda(src, "lp_cached", arch=env.arch)
    [entry] = _cache.entries()
    entry.write_bytes(entry.read_bytes()[:100])
    assert lp.compile_cuda(src, "lp_cached", arch=env.arch).image == first.image
    assert _cache.get(entry.stem)[1] == first.image  # rebuilt


@case("cache-modified-entry", "cpp", "cache", lp.CacheWarning,
      r"^launchpad cache entry '.*\.lpc' \(kernel 'lp_cached' for sm_\d+\) is corrupt: its SHA-256 does not match its "
      r"content", kernel="lp_cached")  # fmt: skip
def _(env):
    env.mp.setenv("LAUNCHPAD_CACHE_DIR", str(env.tmp_path / "cache-modified"))
    src = _fresh_source()
    first = lp.compile_cuda(src, "lp_cached", arch=env.arch)
    [entry] = _cache.entries()
    raw = bytearray(entry.read_bytes())
    raw[-64] ^= 0x01
    entry.write_bytes(bytes(raw))
    assert lp.compile_cuda(src, "lp_cached", arch=env.arch).image == first.image


@case("cache-directory-below-a-file", "cpp", "unwritable-cache", lp.CacheWarning,
      r"^launchpad cache directory '.*' is not used \(caching kernel 'lp_cached' for sm_\d+\): it cannot be created or "
      r"read \(Not a directory\)\..*set LAUNCHPAD_CACHE_DIR", kernel="lp_cached")  # fmt: skip
def _(env):
    blocker = env.tmp_path / "file"
    blocker.write_text("a file, so nothing can be created below it, even by root")
    env.mp.setenv("LAUNCHPAD_CACHE_DIR", str(blocker / "cache"))
    k = lp.compile_cuda(_fresh_source(), "lp_cached", arch=env.arch, signature=CPP_SIG)
    assert k.params[1].type == "*fp32"


@case("cache-directory-writable-by-group", "cpp", "unwritable-cache", lp.CacheWarning,
      r"^launchpad cache directory '.*' is not used \(caching kernel 'lp_cached' for sm_\d+\): it is writable by group "
      r"\(mode 0o770\)", kernel="lp_cached")  # fmt: skip
def _(env):
    directory = env.tmp_path / "shared-cache"
    directory.mkdir()
    directory.chmod(0o770)
    env.mp.setenv("LAUNCHPAD_CACHE_DIR", str(directory))
    lp.compile_cuda(_fresh_source(), "lp_cached", arch=env.arch)
    assert list(directory.iterdir()) == []


# Triton

TRI_ARG = r"^kernel 'add_kernel', argument {i} \('{name}'\), param {i} \({t}\)"


@case(
    "triton-count",
    "triton",
    "count",
    lp.ArgumentTypeError,
    r"^kernel 'add_kernel' takes 5 arguments \(x_ptr, y_ptr, out_ptr, n, BLOCK\), got 3; missing: n$",
    kernel="add_kernel",
)
def _(env):
    k, x, y, out = _tri(env)
    k[(N // 1024,)](x, y, out)  # BLOCK, a constexpr, may be left out; n may not


@case("triton-pointer-is-str", "triton", "type", lp.ArgumentTypeError,
      TRI_ARG.format(i=0, name="x_ptr", t=r"\*fp32") + r": expected a tensor or device pointer, got str 'x'$",
      kernel="add_kernel", arg="'x_ptr'")  # fmt: skip
def _(env):
    k, _, y, out = _tri(env)
    k[(N // 1024,)]("x", y, out, N, 1024)


@case("triton-dtype", "triton", "dtype", lp.ArgumentTypeError,
      TRI_ARG.format(i=1, name="y_ptr", t=r"\*fp32") + r": expected a torch\.float32 tensor, got a torch\.float16 tensor",
      kernel="add_kernel", arg="'y_ptr'")  # fmt: skip
def _(env):
    k, x, y, out = _tri(env)
    k[(N // 1024,)](x, y.half(), out, N, 1024)


@case("triton-misaligned-pointer", "triton", "misaligned", lp.ArgumentError,
      TRI_ARG.format(i=0, name="x_ptr", t=r"\*fp32") + r": pointer 0x[0-9a-f]+ is not 16-byte aligned, but the kernel "
      r"was compiled assuming it is$", kernel="add_kernel", arg="'x_ptr'")  # fmt: skip
def _(env):
    k, _, y, out = _tri(env)
    k[(N // 1024,)](env.t(N + 4)[1 : N + 1], y, out, N, 1024)


@case("triton-misaligned-output", "triton", "misaligned", lp.ArgumentError,
      TRI_ARG.format(i=2, name="out_ptr", t=r"\*fp32") + r": pointer 0x[0-9a-f]+ is not 16-byte aligned",
      kernel="add_kernel", arg="'out_ptr'")  # fmt: skip
def _(env):
    k, x, y, _ = _tri(env)
    k[(N // 1024,)](x, y, env.t(N + 4)[2 : N + 2], N, 1024)


@case("triton-int-not-a-multiple-of-16", "triton", "misaligned", lp.ArgumentError,
      TRI_ARG.format(i=3, name="n", t="i32") + r": 1000 is not a multiple of 16, but the kernel was compiled assuming it is$",
      kernel="add_kernel", arg="'n'")  # fmt: skip
def _(env):
    k, x, y, out = _tri(env)
    k[(1,)](x, y, out, 1000, 1024)


@case(
    "triton-int-above-i32",
    "triton",
    "int-range",
    lp.ArgumentError,
    TRI_ARG.format(i=3, name="n", t="i32") + r": 2147483648 is out of range for i32$",
    kernel="add_kernel",
    arg="'n'",
)
def _(env):
    k, x, y, out = _tri(env)
    k[(N // 1024,)](x, y, out, 2**31, 1024)


@case("triton-constexpr-differs", "triton", "type", lp.ArgumentError,
      r"^kernel 'add_kernel', argument 4 \('BLOCK'\): the kernel was specialized for 1024, got int 512$",
      kernel="add_kernel", arg="'BLOCK'")  # fmt: skip
def _(env):
    k, x, y, out = _tri(env)
    k[(N // 1024,)](x, y, out, N, 512)


@case("triton-cpu-tensor", "triton", "cpu-tensor", lp.ArgumentError,
      TRI_ARG.format(i=0, name="x_ptr", t=r"\*fp32") + r": expected a CUDA tensor, got a torch\.float32 tensor on cpu; a pinned CPU tensor \(\.pin_memory\(\)\) would be readable by the device$",
      kernel="add_kernel", arg="'x_ptr'", fake_device=0)  # fmt: skip
def _(env):
    k, x, y, out = _tri(env)
    k[(N // 1024,)](env.host(x), y, out, N, 1024)


@case("triton-other-device-tensor", "triton", "other-device", lp.ArgumentError,
      TRI_ARG.format(i=1, name="y_ptr", t=r"\*fp32") + r": tensor is on cuda:\d+ but the launch is on cuda:\d+$",
      kernel="add_kernel", arg="'y_ptr'", where="2gpu")  # fmt: skip
def _(env):
    k, x, y, out = _tri(env)
    k[(N // 1024,)](x, y.to(f"cuda:{1 - env.device if env.device < 2 else 0}"), out, N, 1024)


@case("triton-block-given-for-a-fixed-block", "triton", "block", lp.ArgumentError,
      r"^kernel 'add_kernel' was compiled for block \(128, 1, 1\), got block 256$", kernel="add_kernel")  # fmt: skip
def _(env):
    k, x, y, out = _tri(env)
    k.launch(N // 1024, 256, x, y, out, N, 1024)


@case(
    "triton-grid-y-too-large",
    "triton",
    "grid",
    lp.ArgumentError,
    r"^kernel 'add_kernel': grid dimension y = 70000 is outside the device limit \[0, 65535\]$",
    kernel="add_kernel",
)
def _(env):
    k, x, y, out = _tri(env)
    k[(1, 70_000)](x, y, out, N, 1024)


@case("triton-shared-memory-over-the-limit", "triton", "shared-mem", lp.OutOfResources,
      r"^kernel 'add_kernel' asks for 1000000 bytes of dynamic shared memory but cuda:-?\d+ allows at most \d+ ",
      kernel="add_kernel")  # fmt: skip
def _(env):
    k, x, y, out = _tri(env)
    k.launch(N // 1024, None, x, y, out, N, 1024, shared_mem=10**6)


@case("triton-compile-error", "triton", "compile-error", lp.CompileError,
      r"^Triton could not compile kernel 'lp_bad_triton' for cuda \d+: CompilationError\n(.*\n)*.*undefined_name",
      kernel="lp_bad_triton")  # fmt: skip
def _(env):
    env.kernel("triton")
    lp.from_triton(lp_bad_triton, signature={"x_ptr": "*fp32", "n": "i32"}, constexprs={"BLOCK": 128},
                   target=env.triton_target)  # fmt: skip


@case("triton-signature-count", "triton", "compile-error", lp.ArgumentError,
      r"^kernel 'add_kernel': 3 signature types for 4 runtime arguments \['x_ptr', 'y_ptr', 'out_ptr', 'n'\]$",
      kernel="add_kernel")  # fmt: skip
def _(env):
    env.kernel("triton")
    lp.from_triton(TK.add_kernel, signature="*fp32, *fp32, *fp32", constexprs={"BLOCK": 1024}, target=env.triton_target)


@case("triton-cache-entry-names-a-missing-kernel", "triton", "missing-kernel", lp.BinaryError,
      r"^kernel 'lp_missing_kernel' is not in the cubin$", kernel="lp_missing_kernel")  # fmt: skip
def _(env):
    k = env.kernel("triton")
    (env.tmp_path / "lp_missing_kernel.cubin").write_bytes(k.image)
    (env.tmp_path / "lp_missing_kernel.json").write_text(json.dumps({**k.metadata, "name": "lp_missing_kernel"}))
    lp.load_triton(env.tmp_path / "lp_missing_kernel.json")


@case("triton-cache-entry-truncated-cubin", "triton", "corrupt-binary", lp.BinaryError,
      r"^kernel 'add_kernel': truncated cubin: ", kernel="add_kernel")  # fmt: skip
def _(env):
    k = env.kernel("triton")
    (env.tmp_path / "add_kernel.cubin").write_bytes(k.image[: len(k.image) // 3])
    (env.tmp_path / "add_kernel.json").write_text(json.dumps(k.metadata))
    lp.load_triton(env.tmp_path / "add_kernel.json")


@case("triton-cubin-for-another-arch", "triton", "other-arch", lp.BinaryError,
      r"^kernel 'add_kernel' was built for sm_\d+a? \(cubin\), which cuda:\d+ \(sm_\d+, compute capability "
      r"\d+\.\d+\) cannot run", kernel="add_kernel")  # fmt: skip
def _(env):
    env.kernel("triton")
    major = 8 if env.cc[0] != 8 else 9
    lp.from_triton(_triton_compiled(GPUTarget("cuda", major * 10, 32))).load(env.device)


@case("triton-artifact-modified", "triton", "artifact", lp.BinaryError,
      r"^launchpad artifact '.*add\.json' \(kernel 'add_kernel'\) was modified or damaged after it was saved",
      kernel="add_kernel")  # fmt: skip
def _(env):
    path = env.kernel("triton").save(env.tmp_path / "add.json")
    d = json.loads(path.read_text())
    d["plan"]["block"] = [256, 1, 1]  # a launch with this block would run a different kernel than compiled
    path.write_text(json.dumps(d))
    lp.load(path)


# Numba

NB_ARG = r"^kernel '{k}', argument {i} \('{name}'\)"


@case("numba-count", "numba", "count", lp.ArgumentTypeError,
      r"^kernel 'lp_axpy' takes 4 arguments \(out, x, y, a\), got 3; missing: a$", kernel="lp_axpy")  # fmt: skip
def _(env):
    k, out, x, y = _nb(env)
    k[N // 256, 256](out, x, y)


@case("numba-dtype", "numba", "dtype", lp.ArgumentTypeError,
      NB_ARG.format(k="lp_axpy", i=1, name="x") + r": expected float32 elements \(array\(float32, 1d, C\)\), got a "
      r"torch\.float64 tensor$", kernel="lp_axpy", arg="'x'")  # fmt: skip
def _(env):
    k, out, x, y = _nb(env)
    k[N // 256, 256](out, x.double(), y, 2.0)


@case("numba-ndim", "numba", "layout", lp.ArgumentError,
      NB_ARG.format(k="lp_axpy", i=2, name="y") + r": expected a 1-d array \(array\(float32, 1d, C\)\), got a "
      r"torch\.float32 tensor of shape \(64, 64\)$", kernel="lp_axpy", arg="'y'")  # fmt: skip
def _(env):
    k, out, x, y = _nb(env)
    k[N // 256, 256](out, x, y.view(64, 64), 2.0)


@case("numba-strided-view-for-contiguous", "numba", "layout", lp.ArgumentError,
      NB_ARG.format(k="lp_axpy", i=1, name="x") + r": the kernel was compiled for a C-contiguous array "
      r"\(array\(float32, 1d, C\)\), got a torch\.float32 tensor of shape \(4096,\) with strides \(2,\) \(in elements\)",
      kernel="lp_axpy", arg="'x'")  # fmt: skip
def _(env):
    k, out, _, y = _nb(env)
    k[N // 256, 256](out, env.t(2 * N)[::2], y, 2.0)


@case("numba-transposed-for-c-order", "numba", "layout", lp.ArgumentError,
      NB_ARG.format(k="lp_scale2d", i=1, name="x") + r": the kernel was compiled for a C-contiguous array "
      r"\(array\(float32, 2d, C\)\), got a torch\.float32 tensor of shape \(64, 32\) with strides \(1, 64\) "
      r"\(in elements\); \.contiguous\(\) makes one$", kernel="lp_scale2d", arg="'x'")  # fmt: skip
def _(env):
    k = env.kernel("numba2d")
    x = env.t(32, 64)
    k[(4, 2), (16, 16)](torch.empty(64, 32, device=x.device), x.t(), 1.5)


@case("numba-strided-host-array", "numba", "layout", lp.ArgumentError,
      NB_ARG.format(k="lp_axpy", i=1, name="x") + r": a host NumPy array is copied to the device whole, so it must "
      r"be contiguous \(Numba's dispatcher refuses it too\)", kernel="lp_axpy", arg="'x'")  # fmt: skip
def _(env):
    k, out, _, y = _nb(env)
    k[N // 256, 256](out, np.ones(2 * N, dtype=np.float32)[::2], y, 2.0)


@case("numba-cpu-tensor", "numba", "cpu-tensor", lp.ArgumentError,
      NB_ARG.format(k="lp_axpy", i=0, name="out") + r": expected a CUDA tensor, got a torch\.float32 tensor on cpu; a pinned CPU tensor \(\.pin_memory\(\)\) would be readable by the device$",
      kernel="lp_axpy", arg="'out'", fake_device=0)  # fmt: skip
def _(env):
    k, out, x, y = _nb(env)
    k[N // 256, 256](env.host(out), x, y, 2.0)


@case("numba-other-device-tensor", "numba", "other-device", lp.ArgumentError,
      NB_ARG.format(k="lp_axpy", i=2, name="y") + r": tensor is on cuda:\d+ but the launch is on cuda:\d+$",
      kernel="lp_axpy", arg="'y'", where="2gpu")  # fmt: skip
def _(env):
    k, out, x, y = _nb(env)
    k[N // 256, 256](out, x, y.to(f"cuda:{1 - env.device if env.device < 2 else 0}"), 2.0)


@case("numba-scalar-is-str", "numba", "type", lp.ArgumentTypeError,
      NB_ARG.format(k="lp_axpy", i=3, name="a") + r", param \d+ \(fp32\): cannot pack str '2' as fp32",
      kernel="lp_axpy", arg="'a'")  # fmt: skip
def _(env):
    k, out, x, y = _nb(env)
    k[N // 256, 256](out, x, y, "2")


@case(
    "numba-block-too-large",
    "numba",
    "block",
    lp.ArgumentError,
    r"^kernel 'lp_axpy': block dimension x = 2048 is outside the device limit \[1, 1024\]$",
    kernel="lp_axpy",
)
def _(env):
    k, out, x, y = _nb(env)
    k[2, 2048](out, x, y, 2.0)


@case("numba-grid-negative", "numba", "grid", lp.ArgumentError,
      r"^kernel 'lp_axpy': grid dimension x = -1 is outside the device limit", kernel="lp_axpy")  # fmt: skip
def _(env):
    k, out, x, y = _nb(env)
    k[-1, 256](out, x, y, 2.0)


@case("numba-shared-memory-over-the-limit", "numba", "shared-mem", lp.OutOfResources,
      r"^kernel 'lp_axpy' asks for 1000000 bytes of dynamic shared memory", kernel="lp_axpy")  # fmt: skip
def _(env):
    k, out, x, y = _nb(env)
    k[N // 256, 256, 0, 10**6](out, x, y, 2.0)


@case(
    "numba-zero-grid-still-checks-arguments",
    "numba",
    "zero-grid",
    lp.ArgumentTypeError,
    NB_ARG.format(k="lp_axpy", i=1, name="x") + r": expected float32 elements",
    kernel="lp_axpy",
    arg="'x'",
)
def _(env):
    k, out, x, y = _nb(env)
    k[0, 256](out, x.double(), y, 2.0)


@case("numba-typing-error", "numba", "compile-error", lp.CompileError,
      r"^Numba could not compile kernel 'lp_bad_numba' for \(array\(float32, 1d, C\)\)\n(.*\n)*.*No implementation of "
      r"function", kernel="lp_bad_numba")  # fmt: skip
def _(env):
    env.kernel("numba")
    lp.from_numba(lp_bad_numba, "void(float32[::1])", arch=env.arch)


@case("numba-invalid-signature", "numba", "compile-error", lp.ArgumentError,
      r"^kernel 'lp_axpy': invalid Numba signature 'void\(float32\[::1\]'", kernel="lp_axpy")  # fmt: skip
def _(env):
    env.kernel("numba")
    lp.from_numba(lp_axpy, "void(float32[::1]", arch=env.arch)


@case("numba-kernel-returns-a-value", "numba", "compile-error", lp.ArgumentError,
      r"^kernel 'lp_axpy': a kernel returns nothing, the signature returns int32$", kernel="lp_axpy")  # fmt: skip
def _(env):
    env.kernel("numba")
    lp.from_numba(lp_axpy, "int32(float32[::1], float32[::1], float32[::1], float32)", arch=env.arch)


@case("numba-type-launchpad-cannot-pass", "numba", "type", lp.ArgumentTypeError,
      r"^kernel 'lp_bad_numba', argument 'a': launchpad cannot pass Numba type datetime64\[s\]", kernel="lp_bad_numba",
      arg="'a'")  # fmt: skip
def _(env):
    env.kernel("numba")
    from numba.cuda import types

    lp.from_numba(lp_bad_numba, (types.NPDatetime("s"),), arch=env.arch)


@case("numba-artifact-layout-modified", "numba", "artifact", lp.BinaryError,
      r"^launchpad artifact '.*axpy\.json' \(kernel 'lp_axpy'\) was modified or damaged after it was saved",
      kernel="lp_axpy")  # fmt: skip
def _(env):
    path = env.kernel("numba").save(env.tmp_path / "axpy.json")
    d = json.loads(path.read_text())
    d["args"][1]["options"]["layout"] = "A"  # would let strided views into code that indexes contiguously
    path.write_text(json.dumps(d))
    lp.load(path)


# --- running the table ---------------------------------------------------------------------------


def check_case(c: Case, env: Env) -> None:
    """Run a case; it must raise (or warn) exactly ``c.exc`` with a message matching ``c.match``."""
    if issubclass(c.exc, Warning):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            c.run(env)  # compiling goes on: no exception
        found = [str(w.message) for w in record if w.category is c.exc]
        assert len(found) == 1, [str(w.message) for w in record]
        assert re.search(c.match, found[0]), found[0]
        return
    with pytest.raises(lp.LaunchpadError) as info:
        c.run(env)
    assert type(info.value) is c.exc, repr(info.value)
    assert re.search(c.match, str(info.value)), str(info.value)


def _reached_the_driver(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("a refused input reached the driver")


def fake_driver(env: Env, fake_gpu: Any, monkeypatch: pytest.MonkeyPatch, device: int) -> None:
    """Without a GPU: the kernels launch into ``fake_gpu`` on ``device``; the driver queries behind the
    shared-memory, cluster, cooperative and architecture checks answer like an H100/H200 (compute
    capability 9.0, 227 KB opt-in shared memory, 132 SMs); loading a module or a launch with
    attributes would fail the test."""
    for name in ("cpp", "triton", "numba", "numba2d"):
        if name not in env.kernels:
            continue
        fake_gpu.install(env.kernels[name], device=device, real_checks=True)  # the loader's own checks
    # an H100's driver 580 knows no oversized shared-memory mode: 0
    device_attrs = {
        "max_shared_memory_per_block_optin": 227 * 1024,
        "multiprocessor_count": 132,
        "max_oversized_shared_memory_per_block": 0,
    }
    for where in (_driver, _driver.device):  # the package's name, and the one the driver's own queries call
        monkeypatch.setattr(where, "device_attribute", lambda device, name: device_attrs[name])
    monkeypatch.setattr(_driver, "function_attribute", lambda function, name: {"shared_size_bytes": 0}[name])
    monkeypatch.setattr(_driver, "set_max_dynamic_shared", _reached_the_driver)
    monkeypatch.setattr(_driver, "max_active_blocks_per_sm", lambda function, threads, shared: 2)
    monkeypatch.setattr(_driver, "compute_capability", lambda device: (9, 0))
    monkeypatch.setattr(_driver, "launch_ex", _reached_the_driver)
    monkeypatch.setattr(_driver, "load_function", _reached_the_driver)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)


CPU_CASES = [c for c in CASES if c.where == "any"]


@pytest.mark.parametrize("c", CPU_CASES, ids=[c.id for c in CPU_CASES])
def test_bad_input_without_gpu(c, cpu_kernels, fake_gpu, monkeypatch, tmp_path):
    env = Env(False, cpu_kernels, tmp_path, monkeypatch)
    fake_driver(env, fake_gpu, monkeypatch, c.fake_device)
    check_case(c, env)
    assert fake_gpu.launches == [] or issubclass(c.exc, Warning)  # nothing refused reached the (fake) driver
    assert fake_gpu.launches == []  # refused before anything reached the (fake) driver


def check_launches(env: Env) -> None:
    """Each front end's kernel on random inputs matches torch: the context still works."""
    rng = np.random.default_rng()
    x, y = env.t(N), env.t(N)
    a = float(rng.uniform(0.5, 2.0))
    out = torch.full_like(x, float("nan"))
    env.kernels["cpp"].launch(N // 256, 256, x, out, a, N)
    torch.testing.assert_close(out, a * x)
    if "triton" in env.kernels:
        out = torch.full_like(x, float("nan"))
        env.kernels["triton"][(N // 1024,)](x, y, out, N, 1024)
        torch.testing.assert_close(out, x + y)
    if "numba" in env.kernels:
        out = torch.full_like(x, float("nan"))
        env.kernels["numba"][N // 256, 256](out, x, y, a)
        torch.testing.assert_close(out, a * x + y)
    torch.cuda.synchronize()


@pytest.mark.gpu
@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_bad_input_on_gpu(c, gpu_kernels, monkeypatch, tmp_path):
    if c.where == "2gpu" and torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    env = Env(True, gpu_kernels, tmp_path, monkeypatch)
    check_launches(env)
    check_case(c, env)
    check_launches(env)  # no sticky error: the context still launches correctly


@pytest.mark.gpu
def test_the_context_works_after_the_whole_table(gpu_kernels, monkeypatch, tmp_path):
    """Every case in one go (as one process would meet them), then correct launches."""
    env = Env(True, gpu_kernels, tmp_path, monkeypatch)
    for c in CASES:
        if c.where == "2gpu" and torch.cuda.device_count() < 2:
            continue
        try:
            check_case(c, env)
        except pytest.skip.Exception:
            continue
    for _ in range(3):
        check_launches(env)


# --- the table itself --------------------------------------------------------------------------


def test_the_table_covers_the_issue():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)
    assert {c.frontend for c in CASES} == {"cpp", "triton", "numba"}
    assert {c.category for c in CASES} >= {
        "count", "type", "cpu-tensor", "other-device", "dtype", "misaligned", "int-range", "grid", "block",
        "shared-mem", "zero-grid", "corrupt-binary", "missing-kernel", "compile-error", "cache", "unwritable-cache",
        "other-arch", "artifact", "layout",
    }  # fmt: skip
    for c in CASES:
        assert f"'{c.kernel}'" in c.match, c.id  # every message names the kernel...
        if c.arg is not None:
            assert c.arg in c.match, c.id  # ... and the argument, when there is one
        assert issubclass(c.exc, (lp.LaunchpadError, lp.LaunchpadWarning)), c.id
    assert len(CPU_CASES) >= 0.9 * len(CASES)


# --- architectures, and how a refused load is reported ------------------------------------------


@pytest.mark.parametrize("flags,abi,arch", [
    (0x500550, 7, "sm_80"),  # ptxas 12.8 (Triton's), sm_80
    (0x5A0D5A, 7, "sm_90a"),  # ptxas 12.8, sm_90a: EF_CUDA_ACCELERATORS_V1
    (0x0900640A, 8, "sm_100a"),  # ptxas 12.8 for Blackwell: the second layout, 0x8 marks "a"
    (0x06005A04, 8, "sm_90"),  # NVRTC 13: the second layout for every SM
    (0x06007902, 8, "sm_121"),
])  # fmt: skip
def test_cubin_arch_reads_both_e_flags_layouts(flags, abi, arch):
    header = bytearray(64)
    header[:4], header[8] = b"\x7fELF", abi
    header[48:52] = flags.to_bytes(4, "little")
    assert cubin_arch(bytes(header)) == arch


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100", "sm_120"])
def test_cubin_arch_of_real_nvrtc_cubins(arch):
    k = lp.compile_cuda(CPP_SOURCE, "scale", arch=arch)
    assert cubin_arch(k.image) == arch and kernels_in_image(k.image, "cubin")["scale"].arch == arch


def test_cubin_arch_of_real_triton_cubins(cpu_kernels):
    if "triton" not in cpu_kernels:
        pytest.skip("triton is not installed")
    image = cpu_kernels["triton"].image  # Triton compiles sm_90a for 9.0
    # its ptxas 12.8 writes the first layout (0x800 marks "a"); a ptxas 13 would write the second
    assert cubin_arch(image) == "sm_90a" if image[8] < 8 else cubin_arch(image) in ("sm_90", "sm_90a")
    assert cubin_arch(_triton_compiled(GPUTarget("cuda", 80, 32)).asm["cubin"]) == "sm_80"


@pytest.mark.parametrize("arch,kind,cc,runs", [
    ("sm_80", "cubin", (8, 0), True), ("sm_80", "cubin", (8, 6), True), ("sm_86", "cubin", (8, 0), False),
    ("sm_80", "cubin", (9, 0), False), ("sm_90", "cubin", (10, 0), False), ("sm_100", "cubin", (10, 3), True),
    ("sm_90a", "cubin", (9, 0), True), ("sm_90a", "cubin", (10, 0), False), ("sm_100a", "cubin", (10, 3), False),
    ("sm_80", "ptx", (9, 0), True), ("sm_90", "ptx", (8, 9), False), ("sm_90a", "ptx", (10, 0), False),
    ("sm_100f", "ptx", (10, 3), True), ("sm_100f", "ptx", (12, 0), False), ("compute_75", "ptx", (8, 0), True),
])  # fmt: skip
def test_which_architectures_a_device_runs(arch, kind, cc, runs):
    assert arch_runs_on(arch, kind, cc) is runs


@pytest.fixture
def loadable(cpu_kernels, monkeypatch):
    """The C++ kernel, freshly made, on a faked 9.0 device whose module load ``fail`` decides."""
    k = lp.load_cubin(cpu_kernels["cpp"].image, "scale", signature=CPP_SIG)
    monkeypatch.setattr(_driver, "compute_capability", lambda device: (9, 0))
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    return k


def test_a_driver_refusal_of_the_image_is_a_binary_error(loadable, monkeypatch):
    def refuse(image, name, device):
        raise lp.CudaError(218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed", "cuModuleLoadData")

    monkeypatch.setattr(_driver, "load_function", refuse)
    with pytest.raises(lp.BinaryError) as e:
        loadable.load(0)
    assert str(e.value) == (
        "kernel 'scale': cuda:0 (sm_90, compute capability 9.0) cannot load its cubin built for sm_90: "
        "cuModuleLoadData failed: CUDA_ERROR_INVALID_PTX (218): a PTX JIT compilation failed"
    )
    assert isinstance(e.value.__cause__, lp.CudaError) and e.value.__cause__.code == 218


def test_other_load_failures_stay_cuda_errors_naming_the_kernel(loadable, monkeypatch):
    def out_of_memory(image, name, device):
        raise lp.CudaError(2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "cuModuleLoadData")

    monkeypatch.setattr(_driver, "load_function", out_of_memory)
    with pytest.raises(lp.CudaError) as e:
        loadable.load(0)
    assert type(e.value) is lp.CudaError and e.value.name == "CUDA_ERROR_OUT_OF_MEMORY"
    assert str(e.value) == (
        "kernel 'scale', loading into cuda:0 (sm_90, compute capability 9.0): cuModuleLoadData failed: "
        "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"
    )


def test_a_failed_launch_with_attributes_names_the_kernel(loadable, monkeypatch):
    def refused(*args, **kwargs):
        raise lp.CudaError(1, "CUDA_ERROR_INVALID_VALUE", "invalid argument", "cuLaunchKernelEx")

    monkeypatch.setattr(_driver, "launch_ex", refused)
    with pytest.raises(lp.CudaError) as e:
        loadable._loader.launch_ex("f", 0, (1, 1, 1), (32, 1, 1), 0, 0, 0, None, False, True)
    assert str(e.value) == (
        "kernel 'scale' on cuda:0: cuLaunchKernelEx failed: CUDA_ERROR_INVALID_VALUE (1): invalid argument"
    )
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE" and e.value.call == "cuLaunchKernelEx"


def test_a_binary_the_device_can_run_reaches_the_driver(loadable, monkeypatch):
    loaded = []
    monkeypatch.setattr(_driver, "load_function", lambda image, name, device: loaded.append(device) or ("m", 0xF))
    monkeypatch.setattr(
        _driver, "function_attribute", lambda function, name: 1024 if name == "max_threads_per_block" else 48 * 1024
    )
    monkeypatch.setattr(_driver, "launch_entry_points", lambda: (1, 2, 3))
    monkeypatch.setattr(_driver, "unload_module", lambda module, device: None)  # "m" is no real module
    loadable.load(0)
    assert loaded == [0]
    loadable._loader.entries.clear()  # "m" is no module for the real driver to unload later
    loadable._loader.modules.clear()


@pytest.mark.skipif(_checks.current_device is not _checks._no_cuda, reason="this torch has CUDA")
def test_without_cuda_the_errors_name_the_kernel(cpu_kernels):
    k = cpu_kernels["cpp"]
    with pytest.raises(lp.NoDeviceError, match=r"^kernel 'scale': this torch build has no CUDA support"):
        k.launch(1, 32, None, None, 1.0, 1)
    with pytest.raises(lp.NoDeviceError, match=r"^kernel 'scale': this torch build has no CUDA support"):
        k.launch(1, 32, None, None, 1.0, 1, stream=0)
    with pytest.raises(lp.NoDeviceError, match=r"^kernel 'scale' cannot be loaded: "):
        k.load()


NO_DRIVER = (
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from "
    "http://www.nvidia.com/Download/index.aspx"
)
NO_GPU_MESSAGE = (
    r"^kernel 'scale': torch finds no usable GPU \(Found no NVIDIA driver on your system\. .*\); launching needs a "
    r"GPU and its driver, compiling and inspecting kernels do not \(its grid, block and arguments were checked and "
    r"fit the kernel\)$"
)


def _raise_no_driver(*_: Any) -> int:
    raise RuntimeError(NO_DRIVER)  # what a CUDA build of torch raises for its current device without a driver


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_cuda_torch_without_a_driver_raises_no_device_error(executor, monkeypatch):
    """A CUDA build of torch on a machine without a GPU (a login node, a CI runner): every launch,
    however it is spelled and by either executor, raises NoDeviceError with launchpad's message,
    not torch's RuntimeError; compiling and inspecting work."""
    monkeypatch.setattr(_checks, "current_device", _raise_no_driver)  # before the kernel's executors are made
    monkeypatch.setattr(_checks, "current_raw_stream", _raise_no_driver)
    k = lp.compile_cuda(CPP_SOURCE, "scale", arch="sm_90")
    k = lp.Kernel(k.spec, compiled=executor == "compiled")
    assert [p.type for p in k.params] == ["*fp32", "*fp32", "fp32", "i32"] and k.binary is not None
    x = torch.ones(4)
    for launch in (
        lambda: k.launch(1, 32, x, x, 1.0, 4),
        lambda: k[1, 32](x, x, 1.0, 4),
        lambda: k.launch(1, 32, x, x, 1.0, 4, stream=0),
        lambda: k.launch(1, 32, x, x, 1.0, 4, shared_mem=16),
        lambda: k.bind(1, 32, x, x, 1.0, 4),
    ):
        with pytest.raises(lp.NoDeviceError, match=NO_GPU_MESSAGE):
            launch()


@pytest.mark.skipif(torch.version.cuda is None or torch.cuda.is_available(), reason="needs a CUDA torch, no GPU")
def test_this_cuda_torch_without_a_gpu_raises_no_device_error(cpu_kernels):
    """The same, unpatched: what this machine's CUDA build of torch really raises (CI's leg with
    the registry's torch)."""
    k = cpu_kernels["cpp"]
    with pytest.raises(lp.NoDeviceError, match=r"^kernel 'scale': torch finds no usable GPU"):
        k.launch(1, 32, None, None, 1.0, 1)
    with pytest.raises(lp.NoDeviceError, match=r"^kernel 'scale': torch finds no usable GPU"):
        k[1, 32](None, None, 1.0, 1)
    with pytest.raises(lp.NoDeviceError, match=r"^kernel 'scale' cannot be loaded: "):
        k.load()
