"""Where this process's torch keeps a plain tensor's address, dtype and device, for the compiled executor.

A pointer argument needs three facts of a tensor. The compiled executor used to ask torch's DLPack
exchange API for them, which goes through pybind11 per tensor (a type cast, a ``Tensor`` copy and
its refcount: 40-150 ns, most of a tensor argument's cost). torch's objects hold the same facts at
fixed offsets: the ``THPVariable`` points to its ``TensorImpl``, which holds the dispatch key set,
the storage, the storage offset, the element count, the dtype's ``TypeMeta`` index and the device;
the ``StorageImpl`` holds the data pointer and its deleter. Those offsets are not a public ABI, so
nothing is assumed: :func:`learn` finds each one in probe tensors made here (each field must sit at
exactly one offset that holds the expected value in every probe), and the result is kept only if
the compiled reader then gives exactly what the exchange API gives on every probe, and refuses the
tensors it must not read (copy-on-write, conjugate, empty).

What the reader then checks per tensor is in ``_claunch/torch_fields.c``: anything unlike a probe
(another ``TensorImpl`` class, key set, storage class or allocator) is read through the exchange
API as before, so this changes how fast a pointer is read, never what it is.

The CPU part is learned when the first compiled launcher is built; the CUDA part when a launch
first needs a device's module (CUDA is then in use: probes never initialize it), outside any
stream capture. :func:`state` says what is in use and why; ``LAUNCHPAD_TORCH_FIELDS=0`` keeps the
exchange API for every tensor (how the benchmarks measure the difference).
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .layouts import TorchFields

__all__ = ["current", "ensure", "learn", "state"]

# Bytes read from a probe's TensorImpl and StorageImpl (only probes: a launch reads the learned offsets
# alone): at most these, and never past the object's heap block (malloc_usable_size: the fields of
# interest lie in a TensorImpl's first 180 bytes, a StorageImpl's DataPtr and flags in its first 64).
_IMPL_BYTES = 256
_STORAGE_BYTES = 64
_INLINE_DIMS = 5  # c10::SizesAndStrides keeps up to 5 dimensions in the TensorImpl, more out of line

_lock = threading.Lock()
_tried: set[str] = set()  # "cpu", "cuda": learned, or failed, once per process
_state: dict[str, Any] = {"fields": None, "why": "no compiled launcher built yet"}


def _raw(address: int, nbytes: int) -> bytes:
    return ctypes.string_at(address, nbytes)


def _heap_object(address: int, most: int) -> bytes:
    """Up to ``most`` bytes of a C++ object torch made with ``new``, never past its heap block."""
    usable = _malloc_usable_size()
    if usable is None:
        raise _NotLearned("this C library has no malloc_usable_size to size torch's objects with")
    return _raw(address, min(most, usable(address)))


@functools.cache
def _malloc_usable_size() -> Callable[[int], int] | None:
    try:
        function = ctypes.CDLL(None).malloc_usable_size
    except (AttributeError, OSError):
        return None
    function.restype, function.argtypes = ctypes.c_size_t, [ctypes.c_void_p]
    return function


class _Probe:
    """One probe tensor and what torch's Python API says of it."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor
        self.obj = _raw(id(tensor), torch.Tensor.__basicsize__)  # the THPVariable's own bytes
        self.impl_address = tensor._cdata
        self.impl = _heap_object(self.impl_address, _IMPL_BYTES)
        storage = tensor.untyped_storage()
        self.storage_address = storage._cdata
        self.storage = _heap_object(self.storage_address, _STORAGE_BYTES)
        self.data = storage.data_ptr()
        self.keys = torch._C._dispatch_keys(tensor).raw_repr()
        self.device = -1 if tensor.device.type == "cpu" else tensor.device.index
        self.offset, self.numel = int(tensor.storage_offset()), int(tensor.numel())
        self.sizes, self.strides = [int(n) for n in tensor.shape], [int(n) for n in tensor.stride()]


def _dtypes(device: torch.device) -> list[torch.dtype]:
    """Every dtype a plain tensor can have here (on CUDA, a few: the CPU's probes map them all)."""
    if device.type != "cpu":
        return [torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool]
    return list(dict.fromkeys(value for value in vars(torch).values() if isinstance(value, torch.dtype)))


def _probe_tensors(device: torch.device) -> Iterator[torch.Tensor]:
    """Plain tensors whose fields differ from one another wherever a field can."""
    for i, dtype in enumerate(_dtypes(device)):
        if re.fullmatch(r"torch\.(q.*|bits.*|u?int[1-7])", str(dtype)):
            continue  # quantized, raw bits and sub-byte dtypes: no DLPack export (and its refusal costs 1 ms)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # quantized dtypes' deprecation
                base = torch.empty(61 + 7 * i, dtype=dtype, device=device)
        except (RuntimeError, TypeError):  # dtypes no plain tensor has
            continue
        if base.is_quantized:
            continue
        yield base[i % 3 :]  # each dtype once (its TypeMeta index); views of every kind below
    for i in range(4):
        base = torch.empty(53 + 5 * i, dtype=(torch.float32, torch.int64, torch.float16, torch.uint8)[i], device=device)
        yield base[3 + i :]
        yield base[1 + i :: 2]
    yield torch.empty((), device=device)
    yield torch.empty(2, 3, 2, 5, 1, 2, device=device)  # six dimensions: sizes out of line
    yield torch.empty(3, 1, 4, 2, 5, device=device).transpose(1, 3)
    grid = torch.empty(9, 11, device=device)
    yield grid
    yield grid[2:, 5:]
    yield grid.t()[1:]
    yield torch.empty(3, 5, 7, device=device).permute(2, 0, 1)[1:]
    yield torch.empty(13, device=device, requires_grad=True)
    yield torch.nn.Parameter(torch.empty(4, 6, device=device))
    yield torch.empty(5, 3, device=device, requires_grad=True)[1:]
    with torch.inference_mode():
        made = torch.empty(29, device=device)
    yield made
    yield made[4:]


def _refused_tensors(device: torch.device) -> Iterator[torch.Tensor]:
    """Tensors the reader must hand to the exchange API: their address is not the storage's data."""
    base = torch.empty(17, dtype=torch.complex64, device=device)
    yield base.conj()  # conjugate bit: a view torch resolves, or refuses, before export
    yield torch.empty(0, device=device)  # torch gives an empty tensor no address
    yield torch.empty(5, 0, device=device)
    yield from _policy_variants(torch.empty(9, device=device)[2:])
    for setter in (torch._C._set_throw_on_mutable_data_ptr, torch._C._set_warn_deprecated_on_mutable_data_ptr):
        checked = torch.empty(6, device=device)
        setter(checked)  # its data_ptr() throws or warns first
        yield checked
    lazy_clone = getattr(torch, "_lazy_clone", None)
    if lazy_clone is not None:
        yield lazy_clone(torch.empty(9, device=device))  # copy-on-write: its first write copies


def _one_offset(candidates: list[int], what: str) -> int:
    if len(candidates) != 1:
        raise _NotLearned(f"the {what} is at {len(candidates)} offsets of the probes, not exactly one")
    return candidates[0]


class _NotLearned(Exception):
    pass


def _word(raw: bytes, at: int) -> int:
    return int.from_bytes(raw[at : at + 8], "little")


def _words_where(probes: list[_Probe], region: str, value: Callable[[_Probe], int]) -> list[int]:
    nbytes = min(len(getattr(p, region)) for p in probes)
    return [at for at in range(8, nbytes - 7, 8) if all(_word(getattr(p, region), at) == value(p) for p in probes)]


def _fields(claunch: Any, cpu: list[_Probe], cuda: list[_Probe]) -> TorchFields:
    probes = cpu + cuda
    impl_at = _one_offset([at for at in range(16, torch.Tensor.__basicsize__ - 7, 8)
                           if all(_word(p.obj, at) == p.impl_address for p in probes)], "TensorImpl pointer")  # fmt: skip
    guard = tuple(_word(cpu[0].obj, at) for at in range(16, impl_at, 8))
    if any(tuple(_word(p.obj, at) for at in range(16, impl_at, 8)) != guard for p in probes):
        raise _NotLearned("the words before the TensorImpl pointer differ between plain tensors")
    impl_type, storage_type = _word(cpu[0].impl, 0), _word(cpu[0].storage, 0)
    if any(_word(p.impl, 0) != impl_type or _word(p.storage, 0) != storage_type for p in probes):
        raise _NotLearned("plain tensors have TensorImpls or StorageImpls of different classes")
    keys_at = _one_offset(_words_where(probes, "impl", lambda p: p.keys), "dispatch key set")
    storage_at = _one_offset(_words_where(probes, "impl", lambda p: p.storage_address), "storage")
    offset_at = _one_offset(_words_where(probes, "impl", lambda p: p.offset),
                            "storage offset")  # fmt: skip
    numel_at = _one_offset(_words_where(probes, "impl", lambda p: p.numel), "element count")
    ndim_at = _one_offset(_words_where(probes, "impl", lambda p: len(p.sizes)), "rank")
    sizes_at = _one_offset(_inline(probes, lambda p: p.sizes), "inline sizes")
    strides_at = _one_offset(_inline(probes, lambda p: p.strides), "inline strides")
    dtype_at, dtypes = _dtype_index(claunch, probes)
    device_at, device_types = _device(cpu, cuda)
    data_at = _words_where(probes, "storage", lambda p: p.data)
    if not data_at:
        raise _NotLearned("no word of the StorageImpl holds its data pointer")
    deleter_at = _one_offset([at for at in (data_at[0] + 8, data_at[0] + 16)
                              if all(len({_word(p.storage, at) for p in group}) == 1 for group in (cpu, cuda) if group)
                              and all(_word(p.storage, at) != p.data for p in probes)], "data deleter")  # fmt: skip
    check_at = _data_check_flag(data_at[0])
    taken = {keys_at, storage_at, offset_at, numel_at, ndim_at, *range(sizes_at, strides_at + 8 * _INLINE_DIMS, 8)}
    policy_at, policy_mask = _policy_bits(probes, device_at + 2, taken)
    return TorchFields(
        impl_at=impl_at, guard=guard, impl_type=impl_type, keys_at=keys_at,
        keys=tuple(sorted({p.keys for p in probes})), storage_at=storage_at, offset_at=offset_at,
        numel_at=numel_at, dtype_at=dtype_at, device_at=device_at, dtypes=dtypes, storage_type=storage_type,
        data_at=data_at[0], deleter_at=deleter_at, deleters=tuple(sorted({_word(p.storage, deleter_at) for p in probes})),
        device_types=device_types, ndim_at=ndim_at, sizes_at=sizes_at, strides_at=strides_at, check_at=check_at,
        policy_at=policy_at, policy_mask=policy_mask,
    )  # fmt: skip


def _policy_variants(base: torch.Tensor) -> list[torch.Tensor]:
    """Plain-looking tensors (no Python key) whose sizes, strides, device or layout torch asks Python for."""
    made: Any = torch.Tensor._make_subclass  # its stub lacks the dispatch_* arguments it takes
    return [made(torch.Tensor, base, False, dispatch_sizes_strides_policy="sizes"),
            made(torch.Tensor, base, False, dispatch_sizes_strides_policy="strides"),
            made(torch.Tensor, base, False, dispatch_device=True),
            made(torch.Tensor, base, False, dispatch_layout=True)]  # fmt: skip


def _policy_bits(probes: list[_Probe], after_device: int, taken: set[int]) -> tuple[int, int]:
    """The TensorImpl word and bits that each policy variant sets (made twice) and no plain tensor has:
    torch keeps them in the bitfields that follow the device, so in the word holding the device's last
    byte or the next (``after_device``), unless another field is there (``taken``). A bit that differs
    between plain tensors (an unset bitfield) is none of them."""
    base = torch.empty(7)
    plains = [torch.Tensor._make_subclass(torch.Tensor, base) for _ in range(4)]
    plain = [_heap_object(t._cdata, _IMPL_BYTES) for t in plains]
    words = [at for at in (after_device // 8 * 8, after_device // 8 * 8 + 8) if at not in taken]
    bits: dict[int, int] = {}
    for variants in zip(_policy_variants(base), _policy_variants(base)):
        raws = [_heap_object(v._cdata, _IMPL_BYTES) for v in variants]
        for at in words:
            set_by_policy = _word(raws[0], at) & _word(raws[1], at)
            for raw in plain:
                set_by_policy &= ~_word(raw, at)
            if set_by_policy:
                bits[at] = bits.get(at, 0) | set_by_policy
    policy_at = _one_offset(sorted(bits), "sizes policy bits")
    mask = bits[policy_at]
    for p in probes:
        mask &= ~_word(p.impl, policy_at)  # a bit some plain tensor has is no policy
    if not mask:
        raise _NotLearned("no policy bit is clear on every plain tensor")
    return policy_at, mask


def _data_check_flag(data_at: int) -> int:
    """The StorageImpl's ``has_mutable_data_ptr_check_`` byte: set, torch's ``data_ptr()`` first runs a
    check, a warning or a materializer (a lazily made storage) that a read of the pointer would skip.
    Found as the one byte after the DataPtr that both of torch's setters of such checks change."""
    changed = []
    for setter in (torch._C._set_throw_on_mutable_data_ptr, torch._C._set_warn_deprecated_on_mutable_data_ptr):
        t = torch.empty(5)
        address = t.untyped_storage()._cdata
        before = _heap_object(address, _STORAGE_BYTES)
        setter(t)
        after = _heap_object(address, _STORAGE_BYTES)
        changed.append({at for at in range(data_at + 8, len(before)) if before[at] != after[at]})
    return _one_offset(sorted(changed[0] & changed[1]), "data pointer check flag")


def _inline(probes: list[_Probe], values: Callable[[_Probe], list[int]]) -> list[int]:
    """Offsets where every probe of rank 1 to 5 holds its sizes (or strides) as consecutive words."""
    ranked = [p for p in probes if 1 <= len(p.sizes) <= _INLINE_DIMS]
    nbytes = min(len(p.impl) for p in probes)
    return [at for at in range(8, nbytes - 8 * _INLINE_DIMS + 1, 8)
            if all(_word(p.impl, at + 8 * d) == v for p in ranked for d, v in enumerate(values(p)))]  # fmt: skip


def _dtype_index(claunch: Any, probes: list[_Probe]) -> tuple[int, tuple[tuple[int, int, int], ...]]:
    """Where the TypeMeta index is (the 2-byte field equal within a dtype, distinct across dtypes)."""
    candidates = []
    for at in range(8, min(len(p.impl) for p in probes) - 1, 2):
        by_dtype: dict[torch.dtype, set[int]] = {}
        for p in probes:
            by_dtype.setdefault(p.tensor.dtype, set()).add(int.from_bytes(p.impl[at : at + 2], "little"))
        if all(len(v) == 1 for v in by_dtype.values()) and len({next(iter(v)) for v in by_dtype.values()}) == len(
            by_dtype
        ):
            candidates.append(at)
    dtype_at = _one_offset(candidates, "dtype's TypeMeta index")
    table = {}
    for p in probes:
        index = int.from_bytes(p.impl[dtype_at : dtype_at + 2], "little")
        exported = _exported(claunch, p.tensor, False)  # (address, device type, device id, dtype word)
        if index < 64 and exported is not None:
            table[index] = (index, exported[3], p.tensor.element_size())
    return dtype_at, tuple(sorted(table.values()))


def _device(cpu: list[_Probe], cuda: list[_Probe]) -> tuple[int, tuple[int, int]]:
    """Where c10::optional<c10::Device> is: (type, index, engaged = 1), a CPU's index -1."""
    candidates = []
    for at in range(8, min(len(p.impl) for p in cpu + cuda) - 2):
        cpu_type = {p.impl[at] for p in cpu}
        cuda_type = {p.impl[at] for p in cuda}
        if len(cpu_type) != 1 or len(cuda_type) > 1 or cpu_type == cuda_type:
            continue
        if all(p.impl[at + 1] == p.device % 256 and p.impl[at + 2] == 1 for p in cpu + cuda):
            candidates.append(at)
    at = _one_offset(candidates, "device")
    return at, (cpu[0].impl[at], cuda[0].impl[at] if cuda else -1)


def _exported(claunch: Any, tensor: torch.Tensor, dims: bool) -> tuple | None:
    """What the exchange API exports (as ``_claunch.dlpack_tensor``), or None where it does not."""
    try:
        return claunch.dlpack_tensor(tensor, dims)
    except (RuntimeError, TypeError, ValueError, BufferError):
        return None


def learn(claunch: Any, cuda_device: int | None = None) -> tuple[TorchFields | None, str]:
    """Learn the fields from probes on the CPU (and on ``cuda_device``) and check them with the
    compiled module ``claunch``; ``(fields, "")`` or ``(None, why)``, never an exception. Sets nothing:
    :func:`ensure` does."""
    if not hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        return None, f"torch {torch.__version__} has no DLPack exchange API to check the fields against"
    try:
        return _learn(claunch, cuda_device), ""
    except _NotLearned as exc:
        return None, f"torch {torch.__version__}: {exc}"
    except Exception as exc:  # a torch without what a probe reads, a device out of memory: the exchange API
        return None, f"torch {torch.__version__}: a probe failed: {exc!r}"


def _learn(claunch: Any, cuda_device: int | None) -> TorchFields:
    devices = [torch.device("cpu")] + ([torch.device("cuda", cuda_device)] if cuda_device is not None else [])
    kept = [[*_probe_tensors(d)] for d in devices]  # alive until every read is done
    refused = [t for d in devices for t in _refused_tensors(d)]
    probes = [[_Probe(t) for t in group] for group in kept]
    fields = _fields(claunch, probes[0], probes[1] if len(probes) > 1 else [])
    for t in (t for group in kept for t in group):
        for dims in (False, True):
            read, exported = claunch.torch_tensor(fields, t, dims), _exported(claunch, t, dims)
            if dims and t.dim() > _INLINE_DIMS:
                exported = None  # read through the exchange API: torch keeps these sizes out of line
            if read != exported:
                raise _NotLearned(f"a probe read {read}, its DLPack export {exported}")
    for t in refused:
        if claunch.torch_tensor(fields, t, False) is not None or claunch.torch_tensor(fields, t, True) is not None:
            raise _NotLearned(f"the fields would read a {t.dtype} tensor they must refuse")
    return fields


def ensure(claunch: Any, device: int) -> None:
    """Learn and set the fields for the CPU (``device`` -1) or for CUDA (``device`` >= 0), once per
    process each; a failure leaves the exchange API in use for those tensors, and :func:`state` says why."""
    kind = "cpu" if device < 0 else "cuda"
    if kind in _tried:
        return
    if os.environ.get("LAUNCHPAD_TORCH_FIELDS", "") == "0":
        _state["why"] = "LAUNCHPAD_TORCH_FIELDS=0"
        return
    if kind == "cuda" and torch.cuda.is_current_stream_capturing():
        return  # a probe would allocate from the capture's pool: at a later first launch instead

    with _lock:
        if kind in _tried:
            return
        _tried.add(kind)
        fields, why = learn(claunch, device if kind == "cuda" else None)
        if fields is None:
            _state["why"] = why
            return
        _state["fields"], _state["why"] = fields, ""
        claunch.set_torch_fields(fields)


def current() -> TorchFields | None:
    """The fields in use (None: every tensor goes through the exchange API)."""
    return _state["fields"]


def state() -> str:
    """How the compiled executor reads tensor pointers: from torch's fields (for which tensors), or
    through the DLPack exchange API and why."""
    fields = _state["fields"]
    if fields is None:
        return f"through torch's DLPack exchange API ({_state['why']})"
    where = "CPU and CUDA" if fields.device_types[1] >= 0 else "CPU"
    note = f"; CUDA: {_state['why']}" if _state["why"] else ""
    return f"from torch's tensor fields ({where} tensors; any other through the DLPack exchange API{note})"
