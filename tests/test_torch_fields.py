"""The compiled executor's read of a tensor pointer from torch's own fields
(launchpad/launch/torch_fields.py, _claunch/torch_fields.c), against torch's DLPack exchange API.

Differential, on the CPU: thousands of random tensors (dtypes, views, strides, offsets, autograd,
inference mode, storages changed in place) must read exactly what the exchange API exports, or be
handed to it; the tensors whose address is not their storage's data (copy-on-write, conjugate,
negative and zero views, functional and batched wrappers, subclasses, foreign memory, empty) must
always be handed to it. On a GPU, the last test does the same with CUDA tensors.
"""

from __future__ import annotations

import ctypes
import random
import warnings

import numpy as np
import pytest
import torch
from conftest import why_executor_unavailable

from launchpad.launch import executor as _executor
from launchpad.launch import torch_fields

pytestmark = pytest.mark.skipif(bool(why_executor_unavailable("compiled")),
                                reason=why_executor_unavailable("compiled") or "")  # fmt: skip

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128, torch.uint16, torch.uint32,
          torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2]  # fmt: skip


@pytest.fixture(scope="module")
def claunch():
    return _executor._claunch


@pytest.fixture(scope="module")
def fields(claunch):
    learned, why = torch_fields.learn(claunch)
    assert learned is not None, why
    return learned


def random_tensor(rng: random.Random) -> torch.Tensor:
    """A tensor as a program has them: made, viewed, reshaped, with history in its storage."""
    dtype = rng.choice(DTYPES)
    shape = [rng.randint(1, 9) for _ in range(rng.randint(1, 4))]
    base = torch.empty(*shape, dtype=dtype)
    grads = dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64)
    if grads and rng.random() < 0.3:
        base.requires_grad_(True)
        base = base * 1 if rng.random() < 0.5 else base
    t = base
    for _ in range(rng.randint(0, 3)):
        op = rng.randrange(8)
        if op == 0 and t.dim() > 0 and t.shape[0] > 1:
            t = t[rng.randrange(1, t.shape[0]) :]
        elif op == 1 and t.dim() > 1:
            t = t.transpose(0, t.dim() - 1)
        elif op == 2:
            t = t.unsqueeze(rng.randint(0, t.dim()))
        elif op == 3 and t.dim() > 0 and t.shape[-1] > 2:
            t = t[..., :: rng.randint(2, 3)]
        elif op == 4:
            t = t.detach()
        elif op == 5 and t.dim() > 0 and t.shape[0] == 1:
            t = t.expand(rng.randint(2, 4), *t.shape[1:])
        elif op == 6 and not t.requires_grad:
            t = torch.nn.Parameter(t.detach().clone(), requires_grad=grads and rng.random() < 0.5)
        elif op == 7 and not t.requires_grad:
            t = t.detach().clone().resize_(rng.randint(1, 200))  # a storage that grew in place
    return t


def test_learned_fields_read_what_the_exchange_api_exports_on_random_tensors(claunch, fields):
    rng = random.Random(20261128)
    fast = 0
    for _ in range(3000):
        t = random_tensor(rng)
        pointer = claunch.torch_tensor(fields, t, False)
        assert pointer == claunch.dlpack_tensor(t, False), (t.dtype, t.shape, t.stride(), t.storage_offset())
        assert pointer[0] == t.data_ptr()
        read = claunch.torch_tensor(fields, t, True)
        if t.dim() > 5:
            assert read is None  # torch keeps six or more sizes out of line: the exchange API reads them
            continue
        assert read == claunch.dlpack_tensor(t, True), (t.dtype, t.shape, t.stride(), t.storage_offset())
        assert read[6:] == (tuple(t.shape), t.stride())
        fast += 1
    assert fast > 2900


def test_more_than_five_dimensions_read_the_pointer_alone(claunch, fields):
    t = torch.randn(2, 3, 1, 2, 2, 3)[1:]
    assert claunch.torch_tensor(fields, t, False) == claunch.dlpack_tensor(t, False)
    assert claunch.torch_tensor(fields, t, True) is None  # torch keeps six sizes out of line


def test_an_inference_tensor_and_a_changed_storage_are_read_as_they_are_now(claunch, fields):
    with torch.inference_mode():
        made = torch.arange(40.0)[3:]
    assert claunch.torch_tensor(fields, made, True) == claunch.dlpack_tensor(made, True)
    t = torch.randn(64)
    before = claunch.torch_tensor(fields, t, True)
    t.set_(torch.randn(8, dtype=torch.float32).untyped_storage(), 2, (5,))
    assert claunch.torch_tensor(fields, t, True) == claunch.dlpack_tensor(t, True) != before
    t.data = torch.randn(9, 9)
    assert claunch.torch_tensor(fields, t, True) == claunch.dlpack_tensor(t, True)
    t.resize_(4096)  # reallocates
    assert claunch.torch_tensor(fields, t, True) == claunch.dlpack_tensor(t, True)


class Wrapper(torch.Tensor):
    """A wrapper subclass (as DTensor and FakeTensor are): no memory of its own."""

    @staticmethod
    def __new__(cls, inner):
        return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(func)


def refused() -> list[tuple[str, torch.Tensor]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors' "prototype" warning
        nested = torch.nested.nested_tensor([torch.randn(2), torch.randn(3)])
    throwing, warning = torch.randn(7), torch.randn(7)
    torch._C._set_throw_on_mutable_data_ptr(throwing)
    torch._C._set_warn_deprecated_on_mutable_data_ptr(warning)
    cases = [
        ("conjugate view", torch.randn(8, dtype=torch.complex64).conj()),
        ("negative view", torch._neg_view(torch.randn(8, dtype=torch.complex64).conj())),
        ("zero tensor", torch._efficientzerotensor(6)),
        ("empty", torch.empty(0)),
        ("empty view", torch.randn(4, 5)[:, 5:]),
        ("copy-on-write", torch._lazy_clone(torch.randn(9))),
        ("data_ptr() throws", throwing),
        ("data_ptr() warns", warning),
        ("numpy's memory", torch.from_numpy(np.arange(12, dtype=np.float32))),
        ("meta", torch.empty(7, device="meta")),
        ("a wrapper subclass", Wrapper(torch.randn(5))),
        ("sparse", torch.randn(3, 3).to_sparse()),
        ("nested", nested),
    ]
    seen: list[torch.Tensor] = []
    torch.func.vmap(lambda row: seen.append(row) or row)(torch.randn(3, 4))
    cases.append(("vmap's batched tensor", seen[0]))
    functional: list[torch.Tensor] = []
    torch.func.functionalize(lambda x: functional.append(x.add(1)) or x)(torch.randn(5))
    cases.append(("functionalize's wrapper", functional[0]))
    made = torch.Tensor._make_subclass
    x = torch.randn(10)[1:]
    cases += [("sizes from Python", made(torch.Tensor, x, False, dispatch_sizes_strides_policy="sizes")),
              ("strides from Python", made(torch.Tensor, x, False, dispatch_sizes_strides_policy="strides")),
              ("device from Python", made(torch.Tensor, x, False, dispatch_device=True)),
              ("layout from Python", made(torch.Tensor, x, False, dispatch_layout=True))]  # fmt: skip
    return cases


@pytest.mark.parametrize("name, tensor", refused(), ids=[name for name, _ in refused()])
def test_a_tensor_whose_address_is_not_its_storages_data_goes_to_the_exchange_api(claunch, fields, name, tensor):
    assert claunch.torch_tensor(fields, tensor, False) is None, name
    assert claunch.torch_tensor(fields, tensor, True) is None, name


def test_copy_on_write_is_read_after_torch_copies_it(claunch, fields):
    shared = torch._lazy_clone(torch.randn(9))
    assert claunch.torch_tensor(fields, shared, False) is None
    exported = claunch.dlpack_tensor(shared, False)  # the export materializes its own copy, as a launch must
    assert exported[0] == shared.data_ptr()


@pytest.mark.parametrize("field", ["impl_type", "storage_type", "keys", "deleters", "policy_mask", "check_at"])
def test_each_check_alone_refuses_a_tensor_it_does_not_know(claunch, fields, field):
    """Each check of the reader, made to fail on its own, hands every tensor to the exchange API."""
    t = torch.randn(8)
    storage = ctypes.string_at(t.untyped_storage()._cdata, 64)
    set_byte = next(at for at in range(8, 64) if storage[at])  # a byte "the check flag" would find set
    wrong = {"impl_type": fields.impl_type + 8, "storage_type": fields.storage_type + 8, "keys": (1,),
             "deleters": (1,), "policy_mask": (1 << 64) - 1, "check_at": set_byte}[field]  # fmt: skip
    assert claunch.torch_tensor(fields, t, True) is not None
    assert claunch.torch_tensor(fields._replace(**{field: wrong}), t, True) is None


def test_the_reader_reads_nothing_but_a_tensor_where_its_fields_say(claunch, fields):
    for thing in [(1 << 200) + 12345, object(), "text", torch.randn(3).numpy()]:
        assert claunch.torch_tensor(fields, thing, True) is None


@pytest.mark.parametrize("field, value", [("keys_at", -4), ("keys_at", 2**32 - 4), ("sizes_at", 2**32 - 24),
                                          ("data_at", 64), ("check_at", 64), ("impl_at", 64)])  # fmt: skip
def test_an_offset_outside_its_object_is_refused(claunch, fields, field, value):
    with pytest.raises((ValueError, OverflowError)):
        claunch.torch_tensor(fields._replace(**{field: value}), torch.randn(3), True)


def test_learning_never_raises(claunch, monkeypatch):
    def out_of_memory(device):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(torch_fields, "_probe_tensors", out_of_memory)
    learned, why = torch_fields.learn(claunch)
    assert learned is None and "out of memory" in why


def test_learning_refuses_fields_that_read_a_probe_wrong(claunch, monkeypatch):
    real = torch_fields._fields

    def off_by_one_element(*args):
        fields = real(*args)
        return fields._replace(offset_at=fields.numel_at)  # reads the element count as the offset

    monkeypatch.setattr(torch_fields, "_fields", off_by_one_element)
    learned, why = torch_fields.learn(claunch)
    assert learned is None and "a probe read" in why


def test_learning_refuses_a_field_found_at_two_offsets(claunch, monkeypatch):
    monkeypatch.setattr(torch_fields, "_probe_tensors", lambda device: iter([torch.empty(8, device=device)] * 3))
    learned, why = torch_fields.learn(claunch)
    assert learned is None and "not exactly one" in why


def test_a_failed_learning_leaves_the_exchange_api_and_says_why(claunch, monkeypatch):
    monkeypatch.setattr(torch_fields, "_tried", set())
    monkeypatch.setattr(torch_fields, "_state", {"fields": None, "why": ""})
    monkeypatch.setattr(torch_fields, "learn", lambda claunch, device=None: (None, "torch 9.9: no such field"))
    set_to = []
    monkeypatch.setattr(claunch, "set_torch_fields", set_to.append, raising=False)
    torch_fields.ensure(claunch, -1)
    assert set_to == [] and torch_fields.state() == "through torch's DLPack exchange API (torch 9.9: no such field)"


def test_building_a_compiled_launcher_sets_the_fields(fake_gpu):
    import launchpad as lp

    k = fake_gpu.install(lp.compile_cuda('extern "C" __global__ void k(float* y, int n) {}', "k", arch=90))
    y = torch.randn(16)[3:]
    k[1, 1](y, 5)
    if fake_gpu.executor == "compiled":
        assert torch_fields.state().startswith("from torch's tensor fields (CPU")
        assert _executor._claunch.torch_tensor(None, y, False) is not None  # the fields in use read it
    assert int.from_bytes(fake_gpu.last.params[0], "little") == y.data_ptr()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_tensors_read_what_the_exchange_api_exports(claunch):
    """On the device: CUDA's fields learned, then random CUDA tensors (caching allocator, a graph's
    pool) read as exported; pinned host memory and other allocators go to the exchange API."""
    import launchpad as lp

    k = lp.compile_cuda('extern "C" __global__ void k(float* y, int n) { if (threadIdx.x < n) y[threadIdx.x] += 1; }',
                        "k")  # fmt: skip
    y = torch.randn(64, device="cuda")
    expected = y[3:].clone() + 1
    k[1, 32](y[3:], 32)  # its first launch learns CUDA's fields
    torch.cuda.synchronize()
    assert torch.equal(y[3:35], expected[:32])
    assert "CUDA" in torch_fields.state(), torch_fields.state()
    rng = random.Random(20261129)
    fast = 0
    for _ in range(2000):
        t = random_tensor(rng).to("cuda")[..., :]
        for dims in (False, True):
            read = claunch.torch_tensor(None, t, dims)
            assert read is None or read == claunch.dlpack_tensor(t, dims)
        fast += read is not None
    assert fast > 1900
    graph_pool = torch.cuda.graph_pool_handle()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=graph_pool, stream=stream):
            made = torch.empty(100, device="cuda")[7:]
    assert claunch.torch_tensor(None, made, True) == claunch.dlpack_tensor(made, True)
    pinned = torch.randn(16).pin_memory()
    assert claunch.torch_tensor(None, pinned, False) is None  # the pinned allocator: not a probe's


def test_a_refused_tensor_launches_as_before_the_fields(fake_gpu):
    """Through a launch: a copy-on-write tensor gets its own copy's address (torch's export makes it),
    a tensor whose sizes torch asks Python for goes to the Python executor, where torch refuses it as
    before (its data_ptr() asserts)."""
    import launchpad as lp

    k = fake_gpu.install(lp.compile_cuda('extern "C" __global__ void k(float* y, int n) {}', "k", arch=90))
    original = torch.randn(9)
    shared = torch._lazy_clone(original)
    k[1, 1](shared, 9)
    address = int.from_bytes(fake_gpu.last.params[0], "little")
    assert address == shared.data_ptr() != original.data_ptr()  # the launch may write it: its own copy
    policy = torch.Tensor._make_subclass(torch.Tensor, torch.randn(9)[1:], False, dispatch_sizes_strides_policy="sizes")
    before = k.fallbacks
    with pytest.raises(RuntimeError, match="is_python_dispatch"):  # torch's own refusal of its data_ptr()
        k[1, 1](policy, 8)
    if fake_gpu.executor == "compiled":
        assert k.fallbacks == before + 1  # handed over, not read from its fields
