"""The two launch executors agree: the same bytes, grid, block, shared memory and stream reach the
driver, and the same exception (type and message) comes out, for every packing case and every bad
input. Values come from Hypothesis; each launch runs on a kernel made twice from one spec, once per
executor, both launching into one fake device. Also: every way the compiled executor hands a call
to the Python one, and no growth in references or memory over many launches.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import sys
import tracemalloc

import numpy as np
import pytest
import torch
from conftest import FakeGPU, why_executor_unavailable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import launchpad as lp
from launchpad.launch import pylaunch as _pylaunch

pytestmark = pytest.mark.skipif(
    bool(why_executor_unavailable("compiled")), reason=why_executor_unavailable("compiled") or ""
)

SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
struct alignas(16) Blob { unsigned char b[32]; };
extern "C" __global__ void scalars(unsigned long long* out, signed char i8, unsigned char u8, short i16,
                                   unsigned short u16, int i32, unsigned u32, long long i64, unsigned long long u64,
                                   __half f16, __nv_bfloat16 bf16, float f32, double f64, bool b, Blob blob) {}
extern "C" __global__ void pointers(const float* x, double* y, const void* z, int n) {}
"""
SCALARS = "*u64, i8, u8, i16, u16, i32, u32, i64, u64, fp16, bf16, fp32, fp64, i1, bytes32"
ARCH = "sm_90"


@pytest.fixture(scope="module")
def specs():
    kernels = lp.compile_cuda_module(SOURCE, ["scalars", "pointers"], arch=ARCH,
                                     signatures={"scalars": SCALARS, "pointers": "*fp32, *fp64, *void, i32"})  # fmt: skip
    untyped = lp.compile_cuda(SOURCE, "scalars", arch=ARCH)
    return {"scalars": kernels["scalars"].spec, "pointers": kernels["pointers"].spec, "untyped": untyped.spec}


def outcome(gpu: FakeGPU, kernel: lp.Kernel, call) -> tuple:
    """What one launch did: the driver call it made, or the exception it raised."""
    before = len(gpu.launches)
    try:
        call(kernel)
    except Exception as exc:
        if not isinstance(exc, lp.CudaError):  # the driver's own refusals come after it was called
            assert len(gpu.launches) == before, "a refused launch reached the driver"
        return ("raised", type(exc), str(exc))
    launch = gpu.launches[-1]
    return ("launched", launch.grid, launch.block, launch.shared_mem, launch.stream, launch.params, launch.ex)


def both(spec, monkeypatch, **install):
    """The kernel of ``spec`` once per executor, on one fake device."""
    gpu = FakeGPU(monkeypatch, "python")
    python = gpu.install(lp.Kernel(spec, compiled=False), **install)
    gpu.executor = "compiled"
    compiled = gpu.install(lp.Kernel(spec, compiled=True), **install)
    assert type(compiled.launch).__name__ == "Launcher" and type(python.launch).__name__ == "function"
    return gpu, compiled, python


def agree(gpu, compiled, python, call) -> tuple:
    got = outcome(gpu, compiled, call), outcome(gpu, python, call)
    assert got[0] == got[1]
    return got[0]


INT_RANGES = {"i8": 8, "u8": 8, "i16": 16, "u16": 16, "i32": 32, "u32": 32, "i64": 64, "u64": 64}
ints = st.one_of(
    st.integers(-(2**64), 2**65),
    # 2**30 and -(2**30): where an int stops having one digit (common_values.h reads those inline)
    st.sampled_from(
        [0, 1, -1, 2**7, 2**8, 2**15, 2**30 - 1, 2**30, -(2**30) + 1, -(2**30), 2**31, 2**32, 2**63, 2**64]
    ),
)
floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e39, -1e39, 65520.0, 1e-46]))
any_value = st.one_of(ints, floats, st.booleans(), st.none(), st.text(max_size=3), st.binary(max_size=30),
                      st.builds(np.int32, st.integers(-(2**31), 2**31 - 1)), st.builds(np.float16, st.floats(width=16)))  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(ints, floats, st.booleans()), min_size=12, max_size=12), blob=st.binary(min_size=32, max_size=32),
       grid=st.one_of(st.integers(-1, 2**31), st.sampled_from([2**30 - 1, 2**30, 2**31 - 1])), block=st.integers(0, 2048))  # fmt: skip
def test_every_scalar_width_packs_or_refuses_alike(specs, monkeypatch, values, blob, grid, block):
    gpu, compiled, python = both(specs["scalars"], monkeypatch)
    out = torch.empty(1, dtype=torch.uint64)
    result = agree(gpu, compiled, python, lambda k: k.launch(grid, block, out, *values, blob))
    if result[0] == "launched":  # in range: the bytes are struct's (bf16: torch's rounding)
        params = result[5]
        for word, bits, value in zip(INT_RANGES, INT_RANGES.values(), values):
            assert params[1 + list(INT_RANGES).index(word)] == (value % (1 << bits)).to_bytes(bits // 8, "little")
        assert (
            params[10]
            == torch.tensor([values[9]], dtype=torch.float32).to(torch.bfloat16).view(torch.int16).numpy().tobytes()
        )
        assert params[14] == blob


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(any_value, min_size=14, max_size=14))
def test_untyped_parameters_pack_or_refuse_alike(specs, monkeypatch, values):
    gpu, compiled, python = both(specs["untyped"], monkeypatch)
    agree(gpu, compiled, python, lambda k: k.launch(1, 32, *values))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from([torch.float32, torch.float64, torch.int8, torch.float16]), offset=st.integers(0, 3),
       which=st.integers(0, 2), n=ints)  # fmt: skip
def test_pointers_dtypes_and_raw_addresses_alike(specs, monkeypatch, dtype, offset, which, n):
    gpu, compiled, python = both(specs["pointers"], monkeypatch)
    x, y, z = torch.randn(8), torch.randn(8, dtype=torch.float64), torch.randn(8)
    args = [x, y, z]
    args[which] = torch.randn(8).to(dtype)[offset:]
    agree(gpu, compiled, python, lambda k: k.launch(1, 32, *args, n))
    agree(gpu, compiled, python, lambda k: k.launch(1, 32, 0x1000, None, 2**64 - 16, n))


DIVISORS = [1, 2, 3, 6, 7, 16, 24, 64, 1000, 2**30, 2**32 + 16, 2**62, 2**63 - 1]  # (a plan's divisor is an int64)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(divisors=st.lists(st.sampled_from(DIVISORS), min_size=4, max_size=4), data=st.data())
def test_specialization_promises_hold_or_refuse_alike(specs, monkeypatch, divisors, data):
    """An int's ``multiple_of`` and a pointer's ``align``, powers of two (a mask in the compiled
    executor) or not (a division), on signed and unsigned widths: a value launches in both executors
    exactly where Python's ``%`` says it keeps the promise, and is refused alike elsewhere."""
    i32, i64, u64 = divisors[:3]
    promised = {5: i32 if i32 < 2**31 else 16, 7: i64, 8: u64}  # (an i32's divisor fits an i32)
    scalars = specs["scalars"]
    spec = dataclasses.replace(scalars, args=tuple(dataclasses.replace(a, multiple_of=promised.get(a.param, 0))
                                                   for a in scalars.args))  # fmt: skip
    gpu, compiled, python = both(spec, monkeypatch)
    out = torch.empty(1, dtype=torch.uint64)

    def value(param: int, lo: int, hi: int) -> int:  # a multiple, a near miss, or anything in range
        d = promised[param]
        k = data.draw(st.integers(-(-lo // d), (hi - 1) // d))  # (k * d within [lo, hi))
        near = [v for v in (k * d, k * d + 1, k * d - 1) if lo <= v < hi]
        return data.draw(st.sampled_from([*near, data.draw(st.integers(lo, hi - 1))]))

    ints = (value(5, -(2**31), 2**31), value(7, -(2**63), 2**63), value(8, 0, 2**64))
    plain = [1, 2, 3, 4] + [ints[0], 5, ints[1], ints[2]] + [0.5, 0.5, 0.5, 0.5, True]
    result = agree(gpu, compiled, python, lambda k: k.launch(1, 32, out, *plain, bytes(32)))
    kept = all(v % promised[p] == 0 for p, v in zip((5, 7, 8), ints))
    assert (result[0] == "launched") == kept, (ints, promised, result)
    if not kept:
        assert result[1] is lp.ArgumentError and "multiple of" in result[2]

    align = divisors[3] if divisors[3] < 2**32 else 16
    pointers = specs["pointers"]
    spec = dataclasses.replace(pointers, args=tuple(dataclasses.replace(a, align=align if a.param == 2 else 0)
                                                    for a in pointers.args))  # fmt: skip
    gpu, compiled, python = both(spec, monkeypatch)
    x, y = torch.randn(8), torch.randn(8, dtype=torch.float64)
    multiple = align * data.draw(st.integers(1, (2**64 - 1) // align))
    address = data.draw(st.sampled_from([multiple, multiple - 1, data.draw(st.integers(1, 2**64 - 1))]))
    result = agree(gpu, compiled, python, lambda k: k.launch(1, 32, x, y, address, 5))
    assert (result[0] == "launched") == (address % align == 0), (address, align, result)


def test_launch_options_configurations_and_streams_alike(specs, monkeypatch):
    gpu, compiled, python = both(specs["pointers"], monkeypatch)
    x, y, z = torch.randn(8), torch.randn(8, dtype=torch.float64), torch.randn(8)
    calls = [
        lambda k: k.launch((2, 3), (4, 4, 2), x, y, z, 5),
        lambda k: k.launch(1, 32, x, y, z, 5, stream=0x77),
        lambda k: k.launch(1, 32, x, y, z, 5, stream=0),
        lambda k: k.launch(1, 32, x, y, z, 5, shared_mem=1024),
        lambda k: k.launch(1, 32, x, y, z, 5, shared_mem=100 * 1024),  # the limit is raised first
        lambda k: k.launch(1, 32, x, y, z, 5, shared_mem=-1),
        lambda k: k.launch(1, 32, x, y, z, 5, shared_mem=1.5),
        lambda k: k.launch(1, 32, x, y, z, 5, stream="s"),
        lambda k: k.launch(1, 32, x, y, z, 5, pdl=True),
        lambda k: k.launch(1, 32, x, y, z, 5, cluster=(1, 1, 1)),
        lambda k: k.launch(1, 32, x, y, z, n=5),
        lambda k: k.launch(1, 32, x, y, z),
        lambda k: k.launch(1, 32, x, y, z, 5, 6),
        lambda k: k.launch(1, 32, x, y, z, 5, bogus=1),
        lambda k: k.launch((1, 2, 3, 4), 32, x, y, z, 5),
        lambda k: k.launch([2, 2], [8, 4], x, y, z, 5),
        lambda k: k.launch(np.int64(2), 32, x, y, z, 5),
        lambda k: k.launch(True, 32, x, y, z, 5),
        lambda k: k.launch(0, 32, x, y, z, 5),
        lambda k: k.launch((4, 0), 32, x, y, z, 2**40),
        lambda k: k.launch(1, 2048, x, y, z, 5),
        lambda k: k[2, 64](x, y, z, 5),
        lambda k: k[2, 64, 0x99](x, y, z, 5),
        lambda k: k[2, 64, None, 512](x, y, z, 5),
        lambda k: k[2, 64](x, y, z, n=5),
        lambda k: k.bind(3, 32, x, y, z, 5)(),
        lambda k: k.bind(3, 32, x, y, z, 5)(z, y),
        lambda k: k.bind(3, 32, x, y, z, 5)(x, y, z, 2**40),
    ]
    for call in calls:
        agree(gpu, compiled, python, call)


def test_a_failing_driver_raises_the_same_cuda_error(specs, monkeypatch):
    gpu, compiled, python = both(specs["pointers"], monkeypatch)
    gpu.result = 1  # CUDA_ERROR_INVALID_VALUE, from both the C and the Python side of the fake driver
    x, y, z = torch.randn(8), torch.randn(8, dtype=torch.float64), torch.randn(8)
    result = agree(gpu, compiled, python, lambda k: k.launch(1, 32, x, y, z, 5))
    assert result[1] is lp.CudaError and result[2].startswith("kernel 'pointers' on cuda:-1: ")
    assert "CUDA_ERROR_INVALID_VALUE (1)" in result[2]
    # the compiled executor's failed call did nothing; it handed the call over, whose retry failed too
    assert len(gpu.launches) == 3


@pytest.fixture
def fallbacks(monkeypatch):
    """Calls the compiled executor handed to the Python one (counted at the Python launch)."""
    counted: list[tuple] = []
    build = _pylaunch.build

    def counting_build(spec, runtime, devices):
        made = build(spec, runtime, devices)
        inner = made.launch

        def launch(*args, **kw):
            counted.append((args, kw))
            return inner(*args, **kw)

        made.launch = launch
        return made

    monkeypatch.setattr(_pylaunch, "build", counting_build)
    return counted


def test_each_unusual_call_goes_to_the_python_executor_and_plain_ones_do_not(specs, monkeypatch, fallbacks):
    gpu = FakeGPU(monkeypatch, "compiled")
    k = gpu.install(lp.Kernel(specs["pointers"], compiled=True))
    x, y, z = torch.randn(8), torch.randn(8, dtype=torch.float64), torch.randn(8)

    class Sub(torch.Tensor):
        pass

    plain = [lambda: k.launch(1, 32, x, y, z, 5), lambda: k.launch((2, 2), (8, 4), x, y, None, 5),
             lambda: k.launch(1, 32, 0x10, 0x20, 0x30, 5, stream=7), lambda: k[1, 32](x, y, z, 5)]  # fmt: skip
    for call in plain:
        call()
    assert fallbacks == []
    unusual = {
        "keyword argument": lambda: k.launch(1, 32, x, y, z, n=5),
        "a tensor subclass": lambda: k.launch(1, 32, x.as_subclass(Sub), y, z, 5),
        "a numpy int": lambda: k.launch(1, 32, x, y, z, np.int32(5)),
        "a list grid": lambda: k.launch([1], 32, x, y, z, 5),
        "a zero grid": lambda: k.launch(0, 32, x, y, z, 5),
        "shared memory above the limit": lambda: k.launch(1, 32, x, y, z, 5, shared_mem=60 * 1024),
        "launch attributes": lambda: k.launch(1, 32, x, y, z, 5, pdl=True),
        "a wrong dtype": lambda: wrong_dtype(),
    }

    def wrong_dtype():
        with pytest.raises(lp.ArgumentTypeError, match=r"expected a torch\.float64 tensor"):
            k.launch(1, 32, x, x, z, 5)

    for name, call in unusual.items():
        before = len(fallbacks)
        call()
        assert len(fallbacks) == before + 1, name


def test_no_growth_in_references_or_memory_over_many_launches(specs, monkeypatch):
    gpu = FakeGPU(monkeypatch, "compiled")
    k = gpu.install(lp.Kernel(specs["pointers"], compiled=True))
    gpu.record = lambda launch: None  # nothing kept per launch
    x, y, z = torch.randn(8), torch.randn(8, dtype=torch.float64), torch.randn(8)
    grid, n, configured = (2, 1), 12345678, k[2, 64]
    bound = k.bind(3, 32, x, y, z, 5)
    objects = (x, y, z, grid, n, k.launch, configured, bound)
    for _ in range(1000):
        k.launch(grid, 64, x, y, z, n)
    gc.collect()
    refs = [sys.getrefcount(o) for o in objects]
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(20000):
        k.launch(grid, 64, x, y, z, n)
        configured(x, y, z, n)
        bound()
        k.launch(grid, 64, x, y, z, n, stream=5)
    gc.collect()
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert [sys.getrefcount(o) for o in objects] == refs
    assert grown < 64 * 1024, f"{grown} bytes more after 80000 launches"


def test_tracebacks_show_the_generated_launch_functions_lines(fake_gpu):
    """The Python executor's generated function has a linecache entry and the kernel's own parameter
    names, so a traceback (or pdb) shows the line that refused an argument."""
    import linecache
    import traceback

    pytest.importorskip("numba.cuda")

    def scale(out, alpha, n):
        pass

    k = fake_gpu.install(lp.from_numba(scale, "void(float32[::1], float32, int32)", arch=90))
    try:
        k._executor.python.launch(1, 4, torch.rand(4), 1.0, 2**40)
    except lp.ArgumentError as exc:
        frames = traceback.extract_tb(exc.__traceback__)
    else:
        raise AssertionError("no error")
    generated = [f for f in frames if f.filename.startswith("<launchpad scale #")]
    assert generated and all(f.line for f in generated), [f.filename for f in frames]  # lines to show
    source = "".join(linecache.getlines(generated[0].filename))
    assert source.startswith("def launch(grid=_M, block=_M, out=_M, alpha=_M, n=_M,")  # the kernel's own names
    assert any("n" in f.line for f in generated)  # the refused argument's line


CUTILE_LIMIT = "cuTile's limit of 16777215 tile blocks (2**24 - 1; ct.launch refuses it too)"


def test_a_saved_grid_limit_is_kept_and_both_executors_refuse_above_it(specs, monkeypatch, tmp_path):
    """A cuTile-like spec (built by hand: no cuTile needed) keeps its grid limit in its plan, through
    an artifact, and both executors refuse a grid above it before any driver call, with the words
    cuTile's front end gives; without a device too (the offline checks)."""
    plan = lp.LaunchPlan(block=(1, 1, 1), max_grid=(1 << 24) - 1, max_grid_words=CUTILE_LIMIT)
    path = lp.Kernel(specs["pointers"].replace(plan=plan), compiled=False).save(tmp_path / "tiled.json")
    assert json.loads(path.read_text())["plan"]["max_grid"] == (1 << 24) - 1
    loaded = lp.load(path)
    assert type(loaded) is lp.Kernel and loaded.plan == plan  # a plain Kernel: the limit is the spec's
    x, y = torch.randn(8), torch.randn(8, dtype=torch.float64)
    big = 1 << 24
    refused = [  # (axis, the dimension as the message gives it, the launch)
        ("x", big, lambda k: k.launch(big, None, x, y, x, 5)), ("x", big, lambda k: k.launch((big,), None, x, y, x, 5)),
        ("x", big, lambda k: k.launch((np.int64(big), 1), None, x, y, x, 5)), ("x", big, lambda k: k[big](x, y, x, 5)),
        ("x", big, lambda k: k.bind(big, None, x, y, x, 5)), ("x", big, lambda k: k.launch(big, None, x=x, y=y, z=x, n=5)),
        ("x", 2**40, lambda k: k.launch(2**40, None, x, y, x, 5)),  # above the device's too: the plan's limit first
        ("y", big, lambda k: k.launch((1, big), None, x, y, x, 5)),
    ]  # fmt: skip
    gpu, compiled, python = both(loaded.spec, monkeypatch)
    for axis, n, call in refused:
        message = f"kernel 'pointers': grid dimension {axis} = {n} is above {CUTILE_LIMIT}; launch the work in several launches"
        assert agree(gpu, compiled, python, call) == ("raised", lp.ArgumentError, message)
    for k in (compiled, python):  # kernel[grid] refuses it as it is made, as the cuTile front end always did
        with pytest.raises(lp.ArgumentError, match=r"grid dimension x = 16777216 is above cuTile's limit"):
            k[big]
    assert not gpu.launches
    at_limit = agree(gpu, compiled, python, lambda k: k.launch((big - 1, 2), None, x, y, x, 5))
    assert at_limit[:2] == ("launched", (big - 1, 2, 1))
    assert agree(gpu, compiled, python, lambda k: k.launch((1, 70000), None, x, y, x, 5))[2].endswith(
        "grid dimension y = 70000 is outside the device limit [0, 65535]"
    )  # below the plan's limit, the device's own still holds
