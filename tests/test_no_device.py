"""Without a GPU a launch checks what it can before saying there is no device.

A user on a laptop (a CPU build of torch) or a login node (a CUDA build, no driver) learns the
mistakes in a launch: a wrong dtype, a string for a float, an int out of range, a grid or block
no device takes all raise the error a GPU would give, naming the kernel and the argument, through
either executor and however the launch is spelled. Only a launch that would pass on a GPU gets
:class:`~launchpad.NoDeviceError`, which says what was checked and what a GPU would take but may
not be meant (a None pointer, a grid that launches nothing). On a GPU none of this runs: the
checks live on the path of the exception that says there is no device.

``mode`` runs each test against this machine's own torch where it has no GPU (``this-torch``)
and, everywhere, against a CUDA build of torch whose current-device call raises as it does
without a driver (``no-driver``).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

import launchpad as lp
from launchpad.launch import checks as _checks
from launchpad.launch import offline as _offline

AXPY = r"""
template <typename T>
__global__ void axpy(T a, const T* x, T* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}"""
NAME = re.escape("kernel 'axpy<float>'")
NO_DRIVER = "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver"
CHECKED = r" \(its grid, block and arguments were checked and fit the kernel"

#: Each bad input of the issue: (grid, block, arguments), the exact exception class, its message.
BAD: dict[str, tuple[Any, Any, Any, type, str]] = {
    "float64 tensor for float*": (16, 256, lambda x, y: (2.0, x.double(), y, 4096), lp.ArgumentTypeError,
        rf"^{NAME}, argument 1 \('x'\), param 1 \(\*fp32\): expected a torch\.float32 tensor, got a torch\.float64 "
        r"tensor on cpu$"),
    "'2.0' for a float": (16, 256, lambda x, y: ("2.0", x, y, 4096), lp.ArgumentTypeError,
        rf"^{NAME}, argument 0 \('a'\), param 0 \(fp32\): cannot pack str '2\.0' as fp32: required argument is not "
        r"a float$"),
    "2**31 for an int": (16, 256, lambda x, y: (2.0, x, y, 2**31), lp.ArgumentError,
        rf"^{NAME}, argument 3 \('n'\), param 3 \(i32\): 2147483648 is out of range for i32$"),
    "block 4096": (16, 4096, lambda x, y: (2.0, x, y, 4096), lp.ArgumentError,
        rf"^{NAME}: block dimension x = 4096 is outside the device limit \[1, 1024\]$"),
    "block (64, 64)": (16, (64, 64), lambda x, y: (2.0, x, y, 4096), lp.ArgumentError,
        rf"^{NAME}: block \(64, 64\) has 4096 threads, more than the 1024 a block has on any CUDA device$"),
    "grid -1": (-1, 256, lambda x, y: (2.0, x, y, 4096), lp.ArgumentError,
        rf"^{NAME}: grid dimension x = -1 is outside the device limit \[0, 2147483647\]$"),
    # what a GPU takes (None is a NULL pointer, a zero grid launches nothing): said, then no device
    "None for a pointer": (16, 256, lambda x, y: (2.0, None, y, 4096), lp.NoDeviceError,
        rf"^{NAME}: .*{CHECKED}; argument 1 \('x'\) is None, a NULL pointer\)$"),
    "grid 0": (0, 256, lambda x, y: (2.0, x, y, 4096), lp.NoDeviceError,
        rf"^{NAME}: .*{CHECKED}; grid 0 launches nothing\)$"),
    "nothing wrong": (16, 256, lambda x, y: (2.0, x, y, 4096), lp.NoDeviceError, rf"^{NAME}: .*{CHECKED}\)$"),
}  # fmt: skip

#: The ways to spell a launch; each goes through its own generated function (launch, full, prepare).
SPELLINGS = {
    "launch": lambda k, g, b, a: k.launch(g, b, *a),
    "k[grid, block]": lambda k, g, b, a: k[g, b](*a),
    "keywords": lambda k, g, b, a: k.launch(g, b, **dict(zip(("a", "x", "y", "n"), a))),
    "shared_mem": lambda k, g, b, a: k.launch(g, b, *a, shared_mem=0),
    "stream": lambda k, g, b, a: k.launch(g, b, *a, stream=0),
    "bind": lambda k, g, b, a: k.bind(g, b, *a),
}


def _raise_no_driver(*_: Any) -> int:
    raise RuntimeError(NO_DRIVER)  # what a CUDA build of torch raises for its current device without a driver


@pytest.fixture(params=["this-torch", "no-driver"])
def no_device(request, monkeypatch) -> str:
    """No device to launch on: this machine's torch as it is, or a CUDA build without a driver."""
    if request.param == "this-torch":
        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
        return request.param
    monkeypatch.setattr(_checks, "current_device", _raise_no_driver)  # before the kernel's executors are made
    monkeypatch.setattr(_checks, "current_raw_stream", _raise_no_driver)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return request.param


@pytest.fixture(scope="module")
def axpy() -> lp.Kernel:
    return lp.compile_cuda(AXPY, "axpy<float>", arch="sm_90")


def _kernel(spec: Any, executor: str) -> lp.Kernel:
    return lp.Kernel(spec, compiled=executor == "compiled")


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("case", BAD)
def test_a_launch_without_a_device_checks_what_it_can(axpy, executor, no_device, case, spelling):
    grid, block, args, cls, message = BAD[case]
    k = _kernel(axpy.spec, executor)
    x, y = torch.randn(4096), torch.randn(4096)
    with pytest.raises(lp.LaunchpadError) as info:
        SPELLINGS[spelling](k, grid, block, args(x, y))
    assert type(info.value) is cls, f"{type(info.value).__name__}: {info.value}"
    assert re.search(message, str(info.value)), str(info.value)
    if cls is not lp.NoDeviceError:  # the launch's own error, not "during handling of" the missing device
        assert info.value.__suppress_context__ and info.value.__cause__ is None


def test_a_saved_grid_limit_is_checked_without_a_device(axpy, executor, no_device, tmp_path):
    """A cuTile-like plan (its grid limit, set by hand: no cuTile needed) saved and loaded: a grid
    above the limit is its error, one within it is what a GPU would take."""
    words = "cuTile's limit of 16777215 tile blocks (2**24 - 1; ct.launch refuses it too)"
    plan = lp.LaunchPlan(max_grid=(1 << 24) - 1, max_grid_words=words)
    path = lp.Kernel(axpy.spec.replace(plan=plan), compiled=False).save(tmp_path / "tiled.json")
    k = _kernel(lp.load(path).spec, executor)
    x, y = torch.randn(4096), torch.randn(4096)
    for spelling in SPELLINGS:
        with pytest.raises(lp.ArgumentError) as info:
            SPELLINGS[spelling](k, 1 << 24, 256, (2.0, x, y, 4096))
        assert str(info.value) == (f"kernel 'axpy<float>': grid dimension x = 16777216 is above {words}; launch the "
                                   "work in several launches"), spelling  # fmt: skip
    with pytest.raises(lp.NoDeviceError, match=CHECKED):
        k.launch((1 << 24) - 1, 256, 2.0, x, y, 4096)


BF16 = "#include <cuda_bf16.h>\n__global__ void shift(__nv_bfloat16 b, float* y) { y[0] += float(b); }"


@pytest.mark.parametrize(
    ("value", "cls", "message"),
    [
        (1e39, lp.ArgumentError, r"^kernel 'shift', argument 0 \('b'\), param 0 \(bf16\): 1e\+39 is out of range for bf16$"),
        ("x", lp.ArgumentTypeError, r"^kernel 'shift', argument 0 \('b'\), param 0 \(bf16\): expected a float for a bf16 "
         r"parameter, got str 'x'$"),
    ],
)  # fmt: skip
def test_a_bf16_value_is_refused_as_a_gpu_refuses_it(executor, no_device, value, cls, message):
    k = _kernel(lp.compile_cuda(BF16, "shift", arch="sm_90").spec, executor)
    with pytest.raises(lp.LaunchpadError) as info:
        k.launch(1, 1, value, torch.randn(4))
    assert type(info.value) is cls and re.search(message, str(info.value)), f"{type(info.value).__name__}: {info.value}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_triton_without_a_gpu_or_a_target_says_to_give_one():
    """Triton's own "0 active drivers" becomes what to do: compile for a target."""
    pytest.importorskip("triton")
    import triton_kernels as T

    x = torch.randn(1024)
    with pytest.raises(lp.NoDeviceError, match=r"^Triton finds no GPU to compile for \(.+\); pass "
                       r"target=GPUTarget\('cuda', 90, 32\) \(or target=90\) to compile for an H100 without one$"):  # fmt: skip
        lp.triton_launcher(T.add_kernel)[(4,)](x, x, x, 1024, BLOCK=256)


def test_the_no_device_message_says_why(axpy, executor, no_device):
    """The reason stays the one torch gives (a CPU build, or no driver), with the checks after it."""
    k = _kernel(axpy.spec, executor)
    with pytest.raises(lp.NoDeviceError) as info:
        k.launch(16, 256, 2.0, torch.randn(8), torch.randn(8), 8)
    if no_device == "no-driver":
        assert str(info.value).startswith("kernel 'axpy<float>': torch finds no usable GPU (Found no NVIDIA driver")
    elif torch.version.cuda is None:
        assert str(info.value).startswith("kernel 'axpy<float>': this torch build has no CUDA support")
    assert "launching needs" in str(info.value)


def test_triton_constexprs_are_checked_without_a_device(executor, no_device):
    """A Triton kernel's specialized value (a constexpr), checked as on a GPU."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton_kernels import add_kernel

    k = lp.from_triton(add_kernel, signature="*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 1024},
                       target=GPUTarget("cuda", 90, 32))  # fmt: skip
    k = _kernel(k.spec, executor)
    x = torch.randn(64)
    with pytest.raises(lp.ArgumentError, match=r"^kernel 'add_kernel', argument 4 \('BLOCK'\).*specialized for "
                       r"1024, got int 512$"):  # fmt: skip
        k[(1,)](x, x, x, 64, 512)
    with pytest.raises(lp.NoDeviceError, match=CHECKED):
        k[(1,)](x, x, x, 64, 1024)
    assert triton is not None


def test_numba_arrays_are_checked_without_a_device(executor, no_device):
    """A Numba array argument's dtype and layout: its converter's own checks, on the tensor's device."""
    cuda = pytest.importorskip("numba.cuda")

    def scale(out, x, a):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i]

    k = _kernel(lp.from_numba(scale, "void(float32[::1], float32[::1], float32)", arch="sm_90").spec, executor)
    x = torch.randn(64)
    with pytest.raises(lp.ArgumentTypeError, match=r"^kernel 'scale', argument 1 \('x'\).*expected float32 elements"):
        k[1, 64](x, x.double(), 2.0)
    with pytest.raises(lp.ArgumentError, match=r"^kernel 'scale', argument 0 \('out'\).*C-contiguous"):
        k[1, 64](torch.randn(128)[::2], x, 2.0)
    with pytest.raises(lp.NoDeviceError, match=CHECKED):
        k[1, 64](x, x, 2.0)


def test_a_launch_that_reaches_a_device_never_runs_the_offline_checks(axpy, fake_gpu, monkeypatch):
    """With a device (the fake one), good and bad launches alike take the launch path alone: the
    offline checks live only on the path of the exception that says there is no device."""
    calls: list[Any] = []
    monkeypatch.setattr(_offline, "check", lambda *a, **kw: calls.append(a))
    k = fake_gpu.install(lp.Kernel(axpy.spec))
    x, y = torch.randn(64), torch.randn(64)
    k.launch(1, 64, 2.0, x, y, 64)
    k[1, 64](2.0, x, y, 64)
    k.bind(1, 64, 2.0, x, y, 64)()
    for grid, block, args, _cls, _message in BAD.values():
        try:
            k.launch(grid, block, *args(x, y))
        except lp.ArgumentError:
            pass
    assert calls == [] and len(fake_gpu.launches) >= 3
    source = k._executor.python.source
    using = [line.strip() for line in source.splitlines() if "_offline" in line]
    assert using and all(line.startswith("except RuntimeError as _exc: _offline(") for line in using), using
