"""``triton_launcher`` on CPU: its fast specialization key and dispatch against Triton's own binder.

Kernels are compiled for sm_90 (``target=``) and launched through the real generated launch
path with ``fake_gpu``; every kernel the launcher builds gets its own fake function handle, so
each recorded launch tells which specialization ran.
"""

from __future__ import annotations

import struct

import pytest
import torch

import launchpad
from launchpad.core import driver as _driver
from launchpad.frontends.triton import launcher as lpt
from launchpad.frontends.triton import tensordesc as _tensordesc

triton = pytest.importorskip("triton")
import triton_kernels as K  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402
from triton_abi import NULL_SCRATCH  # noqa: E402

SM90 = GPUTarget("cuda", 90, 32)


pytestmark = pytest.mark.usefixtures("private_triton_cache")


class Launchers:
    """Launchers whose new kernels are installed on the fake GPU, each with its own function."""

    def __init__(self, fake_gpu, monkeypatch):
        self.fake = fake_gpu
        self.function_of: dict[int, int] = {}
        real = lpt.Kernel

        def build(spec):
            kernel = fake_gpu.install(real(spec))  # each kernel gets a fake function of its own
            self.function_of[id(kernel)] = kernel._loader.entries[-1][0]
            return kernel

        monkeypatch.setattr(lpt, "Kernel", build)

    def ran(self, kernel) -> bool:
        """Whether the last launch ran ``kernel``."""
        return self.fake.last.function == self.function_of[id(kernel)]


@pytest.fixture
def env(fake_gpu, monkeypatch) -> Launchers:
    return Launchers(fake_gpu, monkeypatch)


def aligned(n: int, dtype=torch.float32, offset: int = 0) -> torch.Tensor:
    t = torch.randn(n + 32).to(dtype)
    start = (-t.data_ptr() % 16) // t.element_size() + offset
    return t[start : start + n]


def spec(kernel) -> list:
    """What a kernel was specialized on: (kind, type, align, multiple_of, value) per Python argument."""
    out = []
    for a in kernel.args:
        if a.path:
            ty = kernel.params[a.param].type if a.kind == "param" else None
            out.append((a.name, a.kind, ty, a.align, a.multiple_of, a.value))
    return out


def test_dispatch_specializes_like_triton(env):
    launcher = lpt.TritonLauncher(K.add_kernel, target=SM90)
    x, y, out = aligned(4096), aligned(4096), aligned(4096)
    launcher[(4,)](x, y, out, 4096, 1024)
    (first,) = launcher.kernels.values()
    assert env.ran(first)
    assert env.fake.last.params == [struct.pack("<Q", t.data_ptr()) for t in (x, y, out)] + [
        struct.pack("<i", 4096), *NULL_SCRATCH]  # fmt: skip
    assert spec(first) == [
        ("x_ptr", "param", "*fp32", 16, 0, None), ("y_ptr", "param", "*fp32", 16, 0, None),
        ("out_ptr", "param", "*fp32", 16, 0, None), ("n", "param", "i32", 0, 16, None),
        ("BLOCK", "const", None, 0, 0, 1024)]  # fmt: skip
    # by keyword and again: no new compile
    launcher[(4,)](x, y, out, n=4096, BLOCK=1024)
    launcher[(4,)](x_ptr=x, y_ptr=y, out_ptr=out, n=2048, BLOCK=1024)
    assert len(launcher.kernels) == 1 and env.ran(first)
    assert env.fake.last.params[3] == struct.pack("<i", 2048)

    def kernel_after(*args, **kwargs):
        launcher[(4,)](*args, **kwargs)
        kernel = launcher.warmup(*args, **kwargs)  # the kernel Triton's own binder picks
        assert env.ran(kernel)
        return kernel

    k = kernel_after(aligned(4096, offset=1), y, out, 4096, 1024)
    assert spec(k)[0] == ("x_ptr", "param", "*fp32", 0, 0, None) and spec(k)[1][3] == 16
    k = kernel_after(x, y, out, 1000, 1024)
    assert spec(k)[3] == ("n", "param", "i32", 0, 0, None)
    k = kernel_after(x, y, out, 1, 1024)
    assert spec(k)[3] == ("n", "const", None, 0, 0, 1)
    k = kernel_after(x, y, out, 2**31 + 16, 1024)
    assert spec(k)[3] == ("n", "param", "i64", 0, 16, None)
    k = kernel_after(x.half(), y.half(), out.half(), 4096, 1024)
    assert [s[2] for s in spec(k)[:3]] == ["*fp16"] * 3
    k = kernel_after(x, y, out, 4096, 1024, num_warps=8)
    assert k.plan.block == (256, 1, 1) and env.fake.last.block == (256, 1, 1)
    assert len(launcher.kernels) == 7
    # every earlier specialization still dispatches to its kernel
    launcher[(4,)](x, y, out, 4096, 1024)
    assert env.ran(first)


def test_fast_key_agrees_with_tritons_binder(env):
    """Interleaved calls over values that Triton specializes differently: the fast key must never
    hand one specialization's kernel to another's arguments."""
    launcher = lpt.TritonLauncher(K.add_kernel, target=SM90)
    x0, x4, y, out = aligned(64), aligned(64, offset=1), aligned(64), aligned(64)
    ns = [16, 17, 1, -16, 2**31, 2**63, 2.5, True, 0, 16]
    calls = [(x, n) for n in ns for x in (x0, x4)]
    for x, n in calls + calls[::-1]:
        launcher[(1,)](x, y, out, n, 64)
        assert env.ran(launcher.warmup(x, y, out, n, 64)), (x.data_ptr() % 16, n)
    types_ = {spec(k)[3][2] for k in launcher.kernels.values()}
    assert types_ == {"i32", "i64", "u64", "fp32", "u1", None}  # None: n == 1 compiled away
    table = max(getattr(launcher.run, "variants", 0), len(launcher._keyed))  # the compiled and the Python table
    assert table >= len(launcher.kernels)  # the fast key is at least as fine as Triton's


def test_do_not_specialize(env):
    launcher = lpt.TritonLauncher(K.add_no_spec_kernel, target=SM90)
    x, y, out = aligned(64), aligned(64), aligned(64)
    launcher[(1,)](x, y, out, 1, 64)
    launcher[(1,)](x, y, out, 32, 64)
    (k,) = launcher.kernels.values()  # n == 1 and n % 16 == 0 are not specialized
    assert spec(k)[0][3] == 0 and spec(k)[1][3] == 16
    assert spec(k)[3] == ("n", "param", "i32", 0, 0, None)
    assert env.fake.last.params[3] == struct.pack("<i", 32)


def test_callable_grid_gets_the_bound_arguments(env):
    launcher = lpt.TritonLauncher(K.add_kernel, target=SM90)
    x, y, out = aligned(5000), aligned(5000), aligned(5000)
    seen = []

    def grid(meta):
        seen.append(dict(meta))
        return (triton.cdiv(meta["n"], meta["BLOCK"]),)

    launcher[grid](x, y, out, 5000, BLOCK=512)
    assert env.fake.last.grid == (10, 1, 1)
    assert seen == [{"x_ptr": x, "y_ptr": y, "out_ptr": out, "n": 5000, "BLOCK": 512}]
    launcher[lambda meta: [2, 3]](x, y, out, 5000, 512)
    assert env.fake.last.grid == (2, 3, 1)


def test_tensor_descriptor_arguments_dispatch(env, monkeypatch):
    monkeypatch.setattr(_driver, "encode_tensor_map_tiled", lambda *a: bytes(128))
    monkeypatch.setattr(_tensordesc, "_MAP_CACHE", {})
    launcher = lpt.TritonLauncher(K.host_desc_kernel, target=SM90)
    base = aligned(128 * 128, torch.float16).view(128, 128)
    out = aligned(128 * 128, torch.float16)
    launcher[(2, 2)](TensorDescriptor.from_tensor(base, [64, 64]), out, 128, 128, 64, 64)
    launcher[(2, 2)](TensorDescriptor.from_tensor(base, [64, 64]), out, 128, 128, 64, 64)
    assert len(launcher.kernels) == 1
    launcher[(4, 4)](TensorDescriptor.from_tensor(base, [32, 32]), out, 128, 128, 32, 32)
    assert len(launcher.kernels) == 2
    assert env.fake.last.params[0] == bytes(128) and env.fake.last.grid == (4, 4, 1)


def test_errors_match_triton(env):
    launcher = lpt.TritonLauncher(K.add_kernel, target=SM90)
    x = aligned(64)
    with pytest.raises(KeyError, match="Keyword argument bogus was specified but unrecognised"):
        launcher[(1,)](x, x, x, 64, 64, bogus=1)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'BLOCK'"):
        launcher[(1,)](x, x, x, 64)
    with pytest.raises(launchpad.ArgumentError, match=r"triton_launcher needs a @triton.jit function \(or one wrapped"):
        lpt.TritonLauncher(lambda x: x)
    assert env.fake.launches == []


def test_one_launcher_per_function():
    assert launchpad.triton_launcher(K.rowsum_kernel) is launchpad.triton_launcher(K.rowsum_kernel)
    other = launchpad.triton_launcher(K.rowsum_kernel, target=SM90)
    assert isinstance(
        other, launchpad.frontends.triton.launcher.TritonLauncher
    ) and other is not launchpad.triton_launcher(K.rowsum_kernel)
    run = launchpad.triton_launcher(K.rowsum_kernel).run
    compiled = launchpad.launch_path()[0] == "compiled"
    assert type(run).__name__ == ("Dispatcher" if compiled else "method")


def test_annotated_scalars_keep_their_types(env):
    launcher = lpt.TritonLauncher(K.scalars_kernel, target=SM90)
    out = aligned(8, torch.float64)
    b = struct.unpack("<f", struct.pack("<I", 0x3F80FFFF))[0]
    launcher[(1,)](out, 0.1, b, 1 / 3, 0.5, -(2**40) + 5, True)
    (k,) = launcher.kernels.values()
    assert [s[2] for s in spec(k)] == ["*fp64", "fp16", "bf16", "fp32", "fp64", "i64", "u1"]
    assert env.fake.last.params[1:7] == [struct.pack("<e", 0.1), b"\x81\x3f", struct.pack("<f", 1 / 3),
                                         struct.pack("<d", 0.5), struct.pack("<q", -(2**40) + 5), b"\x01"]  # fmt: skip
    launcher[(1,)](out, 1.0, 2.0, 3.0, 4.0, 5, False)  # annotated floats and bools are not specialized on value
    assert len(launcher.kernels) == 1 and env.fake.last.params[6] == b"\x00"
