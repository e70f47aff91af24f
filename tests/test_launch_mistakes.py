"""Launch-side mistakes a first user makes (found by trying them, 2026-12-03), on the fake GPU with
both executors: each is refused before the launch with launchpad's exception, naming the kernel and
the argument, where Python's raw TypeError, struct's words or a silent wrong launch came before."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
import torch

import launchpad as lp
from launchpad.core import driver as _driver

SOURCE = 'extern "C" __global__ void fill(float* y, float v, int n) { }'


@pytest.fixture(scope="module")
def fill_kernel():
    return lp.compile_cuda(SOURCE, "fill", arch="sm_90")


@pytest.fixture
def k(fake_gpu, fill_kernel):
    return fake_gpu.install(fill_kernel)


def test_a_refused_config_never_answers_an_equal_valid_one(k, fake_gpu):
    """``kernel[config]`` callables are cached by the config; 32.0 == np.int64(32) == 32 in a dict.
    A float block refused at the call must not be what a later valid numpy block finds."""
    y = torch.randn(64)
    with pytest.raises(
        lp.ArgumentTypeError, match=re.escape("block must be an int or a tuple of 1-3 ints, got float 32.0")
    ):
        k[1, 32.0](y, 1.0, 4)
    k[1, np.int64(32)](y, 1.0, 4)
    assert fake_gpu.last.block == (32, 1, 1)
    with pytest.raises(lp.ArgumentTypeError, match=re.escape("got float 16.0")):  # and the other way round
        k[1, 16.0](y, 1.0, 4)


def test_an_argument_given_by_position_and_by_name_is_named(k, fake_gpu):
    y = torch.randn(64)
    with pytest.raises(TypeError) as e:
        k[1, 64](y, 1.0, 64, n=64)
    assert isinstance(e.value, lp.ArgumentTypeError)
    assert str(e.value) == "kernel 'fill': launch() got multiple values for argument 'n'"
    with pytest.raises(lp.ArgumentTypeError, match=r"'fill': launch\(\) got multiple values for argument 'grid'"):
        k.launch(1, 64, y, 1.0, 4, grid=2)
    k.launch(grid=2, block=64, y=y, v=1.5, n=4)  # everything by name still launches
    assert fake_gpu.last.grid == (2, 1, 1) and struct.unpack("<f", fake_gpu.last.params[1])[0] == 1.5
    assert not [launch for launch in fake_gpu.launches[:-1]]


def test_a_bound_launch_takes_named_replacements_as_its_docstring_says(k, fake_gpu):
    y, z = torch.randn(64), torch.randn(64)
    bound = k.bind(1, 64, y, 1.0, 64)
    bound(n=32)
    assert struct.unpack("<i", fake_gpu.last.params[2])[0] == 32
    bound(z, v=2.0)
    params = fake_gpu.last.params
    assert struct.unpack("<Q", params[0])[0] == z.data_ptr() and struct.unpack("<f", params[1])[0] == 2.0
    assert struct.unpack("<i", params[2])[0] == 64  # (the bound value again: a replacement is for that call)
    with pytest.raises(lp.ArgumentTypeError, match=r"'fill': launch\(\) got multiple values for argument 'y'"):
        bound(z, y=z)
    with pytest.raises(lp.ArgumentTypeError) as e:
        k.bind(1, 64, y, 1.0, 64, foo=3)
    assert str(e.value).startswith("kernel 'fill': bind() got an unexpected keyword argument 'foo' (arguments: y, v, n")
    k.bind(1, 64, y=y, v=1.0, n=8)()
    assert struct.unpack("<i", fake_gpu.last.params[2])[0] == 8


def test_launch_attributes_of_the_wrong_kind_are_refused(fake_gpu, fill_kernel, monkeypatch):
    sent = []
    monkeypatch.setattr(_driver, "launch_ex", lambda *a, **kw: sent.append(kw))
    k = fake_gpu.install(fill_kernel, real_checks=True)
    y = torch.randn(64)
    for cluster, words in [(2.0, "cluster must be an int or a tuple of 1-3 ints, got float 2.0"),
                           ("2", "cluster must be an int or a tuple of 1-3 ints, got str '2'"),
                           ((0,), "cluster (0,) must have 1-3 dimensions, each at least 1"),
                           ((2, 1, 1, 7), "cluster (2, 1, 1, 7) must have 1-3 dimensions")]:  # fmt: skip
        with pytest.raises(lp.ArgumentError, match=re.escape(words)):
            k.launch(4, 32, y, 1.0, 4, cluster=cluster)
    for option in ("cooperative", "pdl"):
        with pytest.raises(lp.ArgumentTypeError, match=f"kernel 'fill': {option} takes a bool, got str 'no'"):
            k.launch(2, 32, y, 1.0, 4, **{option: "no"})
    assert not sent and not fake_gpu.launches
    k.launch(4, 32, y, 1.0, 4, cluster=2)  # an int is one dimension, as a grid's is
    assert sent[-1]["cluster"] == (2, 1, 1)


def test_a_bool_parameter_takes_a_bool_or_an_int(fake_gpu):
    b = fake_gpu.install(lp.compile_cuda('extern "C" __global__ void flag(bool f) { }', "flag", arch="sm_90"))
    for value, packed in [(True, b"\x01"), (False, b"\x00"), (0, b"\x00"), (1, b"\x01"), (np.bool_(True), b"\x01")]:
        b[1, 32](value)
        assert fake_gpu.last.params[0] == packed
    count = len(fake_gpu.launches)
    for value in ("false", None, 1.0):
        with pytest.raises(lp.ArgumentTypeError, match=r"kernel 'flag', argument 0 \('f'\).*expected a bool"):
            b[1, 32](value)
    assert len(fake_gpu.launches) == count


def test_a_tensor_for_a_scalar_parameter_is_refused(k, fake_gpu):
    """struct reads a one-element tensor's value: a wait for the device at every launch, and under
    ``lp.record`` a value the two replays treated differently."""
    y = torch.randn(4)
    with pytest.raises(lp.ArgumentTypeError) as e:
        k[1, 32](y, torch.tensor([3.5]), 4)
    assert str(e.value).startswith("kernel 'fill', argument 1 ('v')")
    assert "expected a Python float for this fp32 value, got a torch.float32 tensor on cpu: pass its value" in str(
        e.value
    )
    with pytest.raises(lp.ArgumentTypeError, match=r"argument 2 \('n'\).*expected a Python int"):
        k[1, 32](y, 1.0, torch.tensor(7))
    k[1, 32](y, np.float32(2.5), np.int32(7))  # numpy scalars are values
    assert struct.unpack("<fi", b"".join(fake_gpu.last.params[1:])) == (2.5, 7)


def test_values_out_of_range_are_said_in_launchpads_words(k, fake_gpu):
    y = torch.randn(4)
    with pytest.raises(lp.ArgumentError, match=r"argument 2 \('n'\).*1099511627776 is out of range for i32"):
        k[1, 32](y, 1.0, np.int64(2**40))
    with pytest.raises(lp.ArgumentError, match=r"argument 1 \('v'\).*1e\+300 is out of range for fp32"):
        k[1, 32](y, 1e300, 4)
    assert not fake_gpu.launches


def test_a_stream_handle_out_of_range_is_refused(k, fake_gpu):
    y = torch.randn(4)
    for handle in (-1, 2**64):
        with pytest.raises(lp.ArgumentError, match=f"kernel 'fill': stream {handle} is not a CUstream handle"):
            k.launch(1, 32, y, 1.0, 4, stream=handle)
    assert not fake_gpu.launches
    k.launch(1, 32, y, 1.0, 4, stream=2**64 - 1)
    assert fake_gpu.last.stream == 2**64 - 1


def test_a_struct_by_value_given_as_a_tuple_says_what_to_give(fake_gpu):
    s = fake_gpu.install(lp.compile_cuda('struct P { float a; int b; }; extern "C" __global__ void s(P p) {}', "s",
                                         arch="sm_90"))  # fmt: skip
    with pytest.raises(lp.ArgumentTypeError, match=r"a type launchpad cannot see \(a struct by value\?\): give its "
                                                   r"bytes \(struct.pack"):  # fmt: skip
        s[1, 32]((1.0, 2))
    s[1, 32](struct.pack("<fi", 1.0, 2))
    assert fake_gpu.last.params[0] == struct.pack("<fi", 1.0, 2)


def test_a_grid_function_says_to_compute_the_grid(k):
    with pytest.raises(lp.ArgumentTypeError, match=r"got function .*: compute it before the launch, "
                                                   r"kernel\[\(triton.cdiv\(n, BLOCK\),\)\]"):  # fmt: skip
        k[lambda meta: (2,), 32](torch.randn(4), 1.0, 4)
