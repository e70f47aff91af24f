"""The layouts the Python side hands the compiled module (``launchpad.launch._claunch``) at build time.

1. Each layout is a :class:`~typing.NamedTuple` here (the module entry, ``Entry``, is in
   :mod:`launchpad.core.loader`, below this layer). Python builds it with names; the C side reads
   each field with ``PyObject_GetAttrString`` by the name in its own list of the fields it reads,
   once, when a Launcher or Replay is built (an entry: at the first launch on a device). Nothing is
   read by position, and nothing here is read per launch.
2. The C module exports those lists as ``_claunch.LAYOUTS`` (layout name -> field names), and
   ``tests/test_layouts.py`` checks each against the NamedTuple of the same name: a field one side
   adds that the other does not read fails it. So this file is the one description of each layout.
3. The field order is free: C never depends on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = [
    "CopyTarget",
    "DeviceTarget",
    "GraphEntryPoints",
    "HookCheck",
    "KernelTarget",
    "LauncherTable",
    "Op",
    "ReplayInput",
    "ReplayOutput",
    "ReplayTables",
    "ReplayUse",
    "Ring",
    "Slot",
    "Staged",
    "TorchFields",
]


# --- a Launcher (launcher_build.c) ------------------------------------------------------------------


class Slot(NamedTuple):
    """How one parameter slot is packed (``claunch.h``'s ``Slot``)."""

    offset: int  # byte offset in the parameter buffer
    size: int  # bytes; 0: a value OP_TILE_ARRAY checks but does not pass
    kind: int  # claunch.h's enum SlotKind (executor.SK_*)


class Op(NamedTuple):
    """One operation of the compiled executor, one per :class:`~launchpad.core.spec.Arg` (``claunch.h``'s ``Op``)."""

    kind: int  # claunch.h's enum OpKind (executor.OP_*)
    position: int  # argument position
    sub: tuple[int, ...]  # indices into nested tuples after the position
    slots: tuple[Slot, ...]
    dtype: int  # DLPack code | bits << 8 | lanes << 16 the tensor must have; 0: any
    align: int
    multiple_of: int
    size: int
    ndim: int
    layout: str  # Numba layout: "C", "F" or "A"
    flags: int
    obj: Any  # OP_CONST: the value; OP_EXPAND: the converter; OP_TILE_ARRAY, OP_WARP_ARRAY: their words
    arg: Any  # OP_EXPAND: the Arg, passed to the converter


class HookCheck(NamedTuple):
    """What the compiled executor polls per launch for launch hooks (:mod:`launchpad.launch.hooks`)."""

    dict: dict  # the __dict__ of the object that holds the hooks
    names: tuple[str, ...]
    calls: tuple[Any, ...]  # per name: the class's hook chain's ``calls`` list, or None


class LauncherTable(NamedTuple):
    """The one argument of ``_claunch.Launcher``: a kernel's plan and the Python it calls back."""

    ops: tuple[Op, ...]
    offsets: tuple[int, ...]  # parameter offsets, in parameter order
    buffer_size: int
    nargs_min: int
    nargs_max: int
    plan: Any  # the spec's LaunchPlan (launchpad.core.spec), read by name (LAYOUTS["LaunchPlan"])
    entries: dict  # the loader's EntryTable, device -> Entry: calls the launcher's forget() on each change
    entry_fn: Callable[[int], Any]  # loader.entry(device)
    new_entry: Callable[[int], None]  # called with the device when the launcher reads an entry it had not
    python_launch: Callable[..., None]  # the Python executor's launch: every fallback goes there
    get_device: Callable[[], int]
    get_stream: Callable[[int], int] | None  # None: DLPack's current_work_stream
    scratch: Callable[..., Any]  # (nbytes, align, device, stream, zero) -> (owner, address)
    same_value: Callable[[Any, Any], bool]
    coresident: Callable[[int, int, int], int]  # (device, threads, shared) -> blocks
    ctx: Any  # the kernel's checks Context (its kernel_name names a fallback's error)
    hooks: HookCheck | None
    tensor_types: tuple[type, ...]  # read through the DLPack exchange API


class TorchFields(NamedTuple):
    """Where this process's torch keeps a plain tensor's address, dtype and device
    (``_claunch.set_torch_fields``; learned and checked by :mod:`launchpad.launch.torch_fields`).
    Offsets are bytes into the object named."""

    impl_at: int  # THPVariable: the TensorImpl pointer
    guard: tuple[int, ...]  # THPVariable: the words from offset 16 to impl_at, as every plain tensor has them
    impl_type: int  # TensorImpl's first word (its vtable) in a plain TensorImpl
    keys_at: int  # TensorImpl: the dispatch key set
    keys: tuple[int, ...]  # the key sets plain dense tensors have
    storage_at: int  # TensorImpl: the StorageImpl pointer
    offset_at: int  # TensorImpl: the storage offset, in elements
    numel_at: int  # TensorImpl: the element count
    dtype_at: int  # TensorImpl: the dtype's TypeMeta index (2 bytes)
    device_at: int  # TensorImpl: optional<Device>: the type byte, the index byte, "engaged"
    dtypes: tuple[tuple[int, int, int], ...]  # (TypeMeta index, DLPack dtype word, itemsize)
    storage_type: int  # StorageImpl's first word (its vtable)
    data_at: int  # StorageImpl: the data pointer
    deleter_at: int  # StorageImpl: the data's deleter
    deleters: tuple[int, ...]  # the deleters of the allocators the probes used
    device_types: tuple[int, int]  # the device type bytes of the CPU and of CUDA (-1: not learned)
    ndim_at: int  # TensorImpl: SizesAndStrides' rank
    sizes_at: int  # TensorImpl: its inline sizes (up to 5 dimensions)
    strides_at: int  # TensorImpl: its inline strides
    check_at: int  # StorageImpl: the byte that says torch's data_ptr() checks, warns or materializes first
    policy_at: int  # TensorImpl: the word of the bits that send sizes, strides, device or layout to Python
    policy_mask: int  # those bits (clear on a plain tensor)


# --- a Replay (replay_build.c) ----------------------------------------------------------------------


class ReplayUse(NamedTuple):
    """Where one input's or output's value is written: a target's bytes (``replay.h``'s ``Use``)."""

    target: int  # index into ReplayTables.targets
    offset: int
    size: int
    kind: int  # claunch.h's enum SlotKind
    delta: int
    align: int
    multiple_of: int
    entry: int  # its entry in every ring slot (a device target's use), or -1


class ReplayInput(NamedTuple):
    name: str
    is_tensor: bool
    dtype: int  # DLPack word of the recorded tensor
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    uses: tuple[ReplayUse, ...]
    python_only: bool  # returned as a view a new value may misplace: the Python replay checks it


class ReplayOutput(NamedTuple):
    allocate: Callable[[], Any]  # () -> a tensor of new memory
    uses: tuple[ReplayUse, ...]
    refill: Callable[[], tuple] | None  # a Batch's: () -> new tensors, taken in turn on one stream; or None
    # (with a refill, ``allocate`` is for a replay on another stream than the batch's)


class DeviceTarget(NamedTuple):
    """A node updated from the device (``updates.DEVICE``)."""

    kind: int
    handle: int  # the device node
    size: int  # bytes a use may reach


class KernelTarget(NamedTuple):
    """A kernel node updated from the host (``updates.KERNEL``)."""

    kind: int
    handle: int
    function: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    context: int
    blob: bytearray  # the parameter block
    pointers: int  # the address of its void* array


class CopyTarget(NamedTuple):
    """A memcpy or memset node updated from the host."""

    kind: int
    handle: int
    blob: bytearray  # the driver's parameter struct
    context: int


class GraphEntryPoints(NamedTuple):
    """The driver functions a replay calls (``launchpad.core.driver.graph_entry_points``)."""

    set_params: int
    graph_launch: int
    set_memcpy: int
    set_memset: int
    is_capturing: int


class Ring(NamedTuple):
    address: int
    slots: int
    capacity: int


class Staged(NamedTuple):
    address: int  # SequenceState.words
    words: int  # how many: one per use


class ReplayTables(NamedTuple):
    """The one argument of ``_claunch.Replay`` (see :mod:`launchpad.sequences.creplay`)."""

    inputs: tuple[ReplayInput, ...]
    targets: tuple[DeviceTarget | KernelTarget | CopyTarget, ...]
    outputs: tuple[ReplayOutput, ...]
    exec: int  # the CUgraphExec
    device: int
    entry_points: GraphEntryPoints
    ctx_get_device: int  # cuCtxGetDevice
    counters: int  # the address of SequenceState.counters
    ring: Ring | None
    staged: Staged
    current: list  # the sequence's current values, shared with the Python replay
    fallback: Callable[..., Any]  # the Python replay
    build: Callable[[tuple, tuple | None], Any] | None
    lock: Any
    keep: Any  # what the targets' blobs, the ring and the staged words live in
    tensor_types: tuple[type, ...]
    get_stream: Callable[[int], int] | None
    positional: int
    snapshot: bool
    launch: Callable[[], None] | None
