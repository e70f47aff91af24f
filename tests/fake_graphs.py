"""Captures and graph updates on the fake GPU (tests/conftest.py's ``fake_gpu``), for recorded
sequences without a GPU.

A fake capture runs the function as it is: each launch of a launchpad kernel (packed by the real
executors) becomes a kernel node with that launch's parameter bytes; :meth:`FakeGraphs.foreign`
adds a kernel node launchpad did not make (a torch operation, as the driver would show it: a
layout and a parameter block); launchpad's own copies (``copy_device_to_device``) become memcpy
nodes. A fake driver keeps each node's parameters as the instantiated graph holds them: host-side
updates (``cuGraphExec*SetParams``, from Python or from the compiled replay through C function
pointers) replace them, and each graph launch first applies the ring slot of its launch to the
device-updatable nodes, as launchpad's updater node does on a GPU. :meth:`FakeGraphs.reads` gives
what each node reads now, so tests check behaviour, whichever way the nodes were updated.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import struct
import threading
import time
import types

import torch

import launchpad as lp
from launchpad.core import driver as _driver
from launchpad.launch import checks as _checks
from launchpad.sequences import capture as _capture
from launchpad.sequences import sequence as _sequence
from launchpad.sequences import updates as _updates
from launchpad.sequences.allocations import Blocks, lifetimes
from launchpad.sequences.capture import Capture, Node

UPDATER = 0xAB00  # the fake updater's function handle
CLOCK = "launchpad-node-clock-fake:"  # the fake node clock's metadata token
COPIER = 0xAC00  # the fake copy kernel's (launchpad_copy_bytes), where nodes are updated from the device


class _NodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [("func", ctypes.c_void_p), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("shared_mem", ctypes.c_uint), ("kernel_params", ctypes.c_void_p), ("extra", ctypes.c_void_p),
                ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]  # fmt: skip


SET_PARAMS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(_NodeParams))
SET_COPY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
GRAPH_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
IS_CAPTURING = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))
CTX_GET_DEVICE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))


class FakeCopyParams:
    """A memcpy's driver struct (``CUDA_MEMCPY3D``): the fields the sequence reads, over a blob."""

    SIZE, FIELDS = 200, (48, 136)

    def __init__(self, addresses: tuple[int, ...] = (), _ptr: int = 0):
        self._buffer = None if _ptr else ctypes.create_string_buffer(self.SIZE)
        self._ptr = _ptr or ctypes.addressof(self._buffer)
        for offset, address in zip(self.FIELDS, addresses):
            ctypes.c_uint64.from_address(self._ptr + offset).value = address

    def getPtr(self) -> int:
        return self._ptr

    @property
    def srcDevice(self) -> int:
        return ctypes.c_uint64.from_address(self._ptr + 48).value

    @property
    def dstDevice(self) -> int:
        return ctypes.c_uint64.from_address(self._ptr + 136).value


class FakeGraphs:
    """See the module documentation."""

    def __init__(self, fake_gpu, monkeypatch, device_updates: bool = True):
        self.fake = fake_gpu
        self.handles = itertools.count(0x100)
        self.nodes: dict[int, Node] = {}  # every node captured, by handle
        self.state: dict[int, bytearray] = {}  # what each node of the instantiated graph reads
        self.devnodes: dict[int, int] = {}  # device node -> node handle
        self.refuse_device: set[int] = set()  # node handles the "driver" will not make device-updatable
        self.host_updates: list[int] = []  # node handles, in the order the host updated them
        self.device_updates = device_updates
        self.launched: list[tuple[int, int]] = []  # (graph exec, stream)
        self.uploads = 0
        self.fail_update: int | None = None  # a node handle whose host updates fail (until cleared)
        self.fail_launch = False  # graph launches fail (until cleared)
        self.delay = 0.0
        self._capturing: list[Node] | None = None
        self._captured_ring = None
        self._execs = itertools.count(0xE000)
        self.rings: dict[int, list] = {}  # graph exec -> [its ring, its launches so far]
        monkeypatch.setattr(_updates, "updater", lambda device: (UPDATER, "") if device_updates else
                            (0, "the fake driver has no device-side updates"))  # fmt: skip
        monkeypatch.setattr(_updates, "copier", lambda device: COPIER if device_updates else 0)
        monkeypatch.setattr(_updates, "copy_bytes", self._copy_kernel)
        monkeypatch.setattr(_updates.Ring, "prologue", lambda ring, function: self._prologue(ring, function))
        monkeypatch.setattr(_updates.Ring, "launch", lambda ring, function, stream: self._run_updater(ring, function))
        self.captures = 0  # captures made so far
        self.holes: tuple[int, ...] = ()  # the holes of the capture being made (capture.capture's)
        self.replays: list[int] = []  # graphs launched through torch's CUDAGraph.replay() (random numbers)
        self._pools: dict = {}  # a capture's graph -> the tensors of its pool (a later capture may share it)
        self.history = True  # whether captures come with their allocations (torch's allocator history)
        self.timed = True  # whether a timed capture gets its allocations' lifetimes (torch's allocator metadata)
        self.untimed_frees = False  # frees without a tick (another thread's, or one between ops of autograd's)
        monkeypatch.setattr(_capture, "capture", self.capture)
        monkeypatch.setattr(_sequence, "_no_host_sync", contextlib.nullcontext)
        monkeypatch.setattr(_sequence, "_random_offset", lambda device: self.random_offset)
        self.random_offset = 0  # torch's generator: a step that draws random numbers moves it
        monkeypatch.setattr(_driver, "copy_device_to_device", self._copy)
        monkeypatch.setattr(_driver, "make_device_updatable", self._make_updatable)
        monkeypatch.setattr(_driver, "graph_upload", lambda exec_, stream: setattr(self, "uploads", self.uploads + 1))
        monkeypatch.setattr(_driver, "set_kernel_node_params", self._set_kernel)
        monkeypatch.setattr(_driver, "set_copy_node", self._set_copy)
        monkeypatch.setattr(_driver, "graph_launch", lambda exec_, stream: self._launch(exec_, stream))
        # device memory: the fake GPU's CPU addresses (user space, under 2**48); a TMA-like encoding is not
        monkeypatch.setattr(_driver, "pointer_device", lambda address: -1 if 0 < address < 1 << 48 else None)
        monkeypatch.setattr(_driver, "primary_context", lambda device: 0xC0)
        monkeypatch.setattr(_driver, "synchronize", lambda stream: None)
        monkeypatch.setattr(_driver, "synchronize_device", lambda device: None)
        monkeypatch.setattr(_driver, "stream_is_capturing", lambda stream: bool(getattr(self, "stream_capturing", 0)))
        monkeypatch.setattr(_checks, "current_raw_stream", lambda device: 0x5000)
        monkeypatch.setattr(_checks, "current_device", lambda: -1)  # the fake GPU (CPU tensors)
        monkeypatch.setattr(_sequence.Sequence, "_get_stream", staticmethod(lambda device: 0x5000))
        fake_gpu.emulate = self._on_launch
        # the same driver for the compiled replay: C functions at the addresses it calls
        me = self
        self._c = [SET_PARAMS(lambda e, n, p: me._c_set_kernel(n, p)), GRAPH_LAUNCH(lambda e, s: me._c_launch(e, s)),
                   SET_COPY(lambda e, n, p, c: me._c_set_copy(n, p, "memcpy")),
                   SET_COPY(lambda e, n, p, c: me._c_set_copy(n, p, "memset")), IS_CAPTURING(lambda s, out: me._c_capturing(out)),
                   CTX_GET_DEVICE(lambda out: me._device(out))]  # fmt: skip
        address = functools.partial(ctypes.cast, typ=ctypes.c_void_p)
        monkeypatch.setattr(_driver, "graph_entry_points", lambda: tuple(address(f).value for f in self._c[:5]))
        monkeypatch.setattr(_driver, "launch_entry_points", lambda: (0, 0, address(self._c[5]).value))

    # --- recording -----------------------------------------------------------------------------

    def record(self, fn, *args, **kwargs):
        """``launchpad.record`` with the replay of the fake GPU's executor (compiled or Python)."""
        seq = lp.record(fn, *args, compiled=self.fake.executor == "compiled", **kwargs)
        assert seq.replay_path == self.fake.executor
        return seq

    def capture(self, fn, values, skip=frozenset(), pool=None, relaxed=False, generators=(), timed=False,
                holes=()):  # fmt: skip
        self.holes = holes  # (a function may place its blocks apart where the capture's pool has holes)
        self._capturing, self._kept, self._blocks, self._captured_ring = [], [], [], None
        self._entries, self._ticks = [], []  # torch's history (allocations, frees) and a node clock's ticks
        self._shared = list(self._pools.get(pool, ()))  # a shared pool: the same blocks again, in order
        self.captures += 1
        try:
            result = fn(**values)
        finally:
            nodes, self._capturing = self._capturing, None
        for node in nodes:
            self.nodes[node.handle] = node
        exec_, ring, kept = next(self._execs), self._captured_ring, self._kept
        self._pools[exec_] = kept
        graph = types.SimpleNamespace(instantiate=lambda: self._instantiate(nodes, exec_, ring),
                                      raw_cuda_graph_exec=lambda: exec_, pool=lambda: exec_, kept=kept,
                                      replay=lambda: self.replays.append(exec_) or self._launch(exec_, 0x5000))  # fmt: skip
        spans = lifetimes(self._entries, CLOCK, self._ticks) if timed and self.timed else None
        blocks = Blocks(self._blocks, spans) if self.history else None
        return Capture(graph, nodes, result, blocks)

    def _history(self, action: str, address: int, size: int, ticked: bool = True) -> None:
        """An entry of torch's allocator history, with the tick a node clock would give it (the
        node count then: the allocation or free comes between the nodes made before and after)."""
        if action == "alloc":
            self._blocks.append((address, size))
        label = ""
        if ticked:
            self._ticks.append((len(self._capturing), threading.get_ident()))
            label = f"{CLOCK}{len(self._ticks) - 1}"
            self._ticks.append((len(self._capturing), threading.get_ident()))  # (the thread's next tick)
        self._entries.append({"action": action, "addr": address, "size": size, "user_metadata": label})

    def pool(self, tensor: torch.Tensor) -> torch.Tensor:
        """An intermediate the function allocates: kept as long as its capture's graph, as memory of
        that graph's private pool is (so two captures alive at once never share an address), and
        recorded as an allocation of the capture, as torch's allocator history records it."""
        if self._capturing is not None:
            if self._shared and self._shared[0].untyped_storage().nbytes() == tensor.untyped_storage().nbytes():
                storage = self._shared.pop(0).untyped_storage()  # captured into another capture's pool
                tensor = torch.empty(0, dtype=tensor.dtype).set_(storage, 0, tensor.shape, tensor.stride())
            self._kept.append(tensor)
            self._history("alloc", tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())
        return tensor

    def reuse(self, freed: torch.Tensor, *shape: int) -> torch.Tensor:
        """A new allocation of the function at the start of ``freed``'s memory (a temporary it freed
        earlier in the same capture), as torch's caching allocator hands out a freed block again."""
        storage = freed.untyped_storage()
        tensor = torch.empty(0, dtype=freed.dtype).set_(storage, 0, shape)
        if self._capturing is not None:
            self._history("free_requested", storage.data_ptr(), storage.nbytes(), ticked=not self.untimed_frees)
            self._history("alloc", storage.data_ptr(), tensor.numel() * tensor.element_size())
        return tensor

    def _add(self, node: Node) -> None:
        if self._capturing is not None:
            self._capturing.append(node)

    def _on_launch(self, launch) -> None:
        spec = self.fake._kernels[launch.function].spec
        layout = tuple((p.offset, p.size) for p in spec.params)
        block = bytearray(max((o + s for o, s in layout), default=0))
        for (offset, size), data in zip(layout, launch.params):
            block[offset : offset + size] = data
        self._add(Node(next(self.handles), "kernel", launch.function, launch.grid, launch.block, launch.shared_mem, 0,
                       layout, bytes(block), types.SimpleNamespace(spec=spec), spec.display_name))  # fmt: skip

    def foreign(self, name: str, *params: tuple[int, bytes | int]) -> None:
        """A kernel launchpad did not make, inside the function: ``(size, bytes or address)`` per
        parameter, laid out naturally aligned (pointers and arrays of them at 8 bytes)."""
        layout, block, pos = [], bytearray(), 0
        for size, value in params:
            data = value if isinstance(value, bytes) else struct.pack("<Q", value)
            align = min(8, size) if size <= 8 else 8
            pos = (pos + align - 1) // align * align
            layout.append((pos, size))
            block[len(block) :] = bytes(pos - len(block)) + data
            pos += size
        self._add(Node(next(self.handles), "kernel", 0xF000 + len(name), (1, 1, 1), (128, 1, 1), 0, 0, tuple(layout),
                       bytes(block), None, name))  # fmt: skip

    def node(self, kind: str, **fields) -> None:
        """A node of another kind inside the function (a host function, a child graph)."""
        self._add(Node(next(self.handles), kind, **fields))

    def _copy(self, destination, source, nbytes, stream) -> None:
        assert self._capturing is not None, "launchpad copies only inside its capture"
        params = FakeCopyParams((source, destination))
        self._add(Node(next(self.handles), "memcpy", addresses=(source, destination), params=params))

    def _copy_kernel(self, function, destination, source, nbytes, stream) -> None:
        assert function == COPIER and self._capturing is not None, "launchpad copies only inside its capture"
        self._add(Node(next(self.handles), "kernel", COPIER, (1, 1, 1), (256, 1, 1), 0, 0, ((0, 8), (8, 8), (16, 8)),
                       struct.pack("<QQQ", destination, source, nbytes), None, "launchpad_copy_bytes"))  # fmt: skip

    def _prologue(self, ring, function) -> None:
        assert function == UPDATER and self._capturing is not None
        self._captured_ring = ring  # (the updater node itself is left out of the snapshot, as on a GPU)

    # --- the instantiated graph ---------------------------------------------------------------

    def _instantiate(self, nodes, exec_, ring) -> None:
        if ring is not None:
            self.rings[exec_] = [ring, 0]
        for node in nodes:
            if node.kind == "kernel" and node.block is not None:
                self.state[node.handle] = bytearray(node.block)
            elif node.kind in ("memcpy", "memset"):
                self.state[node.handle] = bytearray(ctypes.string_at(node.params.getPtr(), 200 if node.kind ==
                                                                     "memcpy" else 40))  # fmt: skip

    def _make_updatable(self, handle: int) -> int | None:
        if handle in self.refuse_device:
            return None
        self.devnodes[handle + 0xD0000] = handle
        return handle + 0xD0000

    def _set_kernel(self, exec_, handle, function, grid, block, shared_mem, params, context) -> None:
        if self.delay:
            time.sleep(self.delay)  # the GIL is released meanwhile: another thread may run
        if self.fail_update == handle:
            raise lp.CudaError(1, "CUDA_ERROR_INVALID_VALUE", "invalid argument", "cuGraphExecKernelNodeSetParams")
        layout = self.nodes[handle].layout
        pointers = (ctypes.c_void_p * len(layout)).from_address(params)
        for (offset, size), pointer in zip(layout, pointers):
            self.state[handle][offset : offset + size] = ctypes.string_at(pointer, size)
        self.host_updates.append(handle)

    def _set_copy(self, exec_, handle, kind, params, context) -> None:
        if self.fail_update == handle:
            raise lp.CudaError(1, "CUDA_ERROR_INVALID_VALUE", "invalid argument", "cuGraphExecMemcpyNodeSetParams")
        self.state[handle][:] = ctypes.string_at(params.getPtr(), len(self.state[handle]))
        self.host_updates.append(handle)

    def _launch(self, exec_, stream) -> None:
        if self.fail_launch:
            raise lp.CudaError(700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access", "cuGraphLaunch")
        if exec_ in self.rings and getattr(self, "defer", False):  # the device is behind: the launch waits
            self.__dict__.setdefault("pending", []).append(exec_)
        elif exec_ in self.rings:
            self._updater(exec_)
        self.launched.append((exec_, stream))

    def _updater(self, exec_) -> None:
        """launchpad's updater node, as it runs on the device (see :meth:`_apply_slot`)."""
        ring, launches = self.rings[exec_]
        self._apply_slot(ring, launches)
        self.rings[exec_][1] = launches + 1

    def _run_updater(self, ring, function) -> None:
        """The updater launched outside a graph (the check of every device-side update before the first
        replay), on a ring of its own, whose counter is its tensor."""
        assert function == UPDATER and self._capturing is None
        launches = int(ring.counter[0])
        self._apply_slot(ring, launches)
        ring.counter[0] = launches + 1

    def _apply_slot(self, ring, launches) -> None:
        """What the updater does: applies launch ``launches``'s slot unless an update failed before (the
        ring's second word: entry << 32 | error, the third the launch) or the slot was written for another
        launch (its head's stamp), then gives the slot back. ``fail_device`` (a node handle) makes that
        node's updates fail, as the device runtime may; ``refuse_device_updates`` (node handles) likewise,
        from the first update on (a node the driver cannot update from the device)."""
        header = _updates.HEADER
        base = header + (launches % ring.slots) * (1 + 3 * ring.capacity)
        head, words = ring.words[base], ring.words[base + 1 :]
        failing = {getattr(self, "fail_device", None), *getattr(self, "refuse_device_updates", ())}
        if not ring.words[1] and head >> 32 != launches & 0xFFFFFFFF:
            ring.words[1], ring.words[2] = _updates.DRIFT << 32, launches
        for k in range(head & 0xFFFFFFFF if not ring.words[1] else 0):
            devnode, where, value = words[3 * k], words[3 * k + 1], words[3 * k + 2]
            offset, size = where & 0xFFFFFFFF, where >> 32
            if self.devnodes[devnode] in failing:
                ring.words[1], ring.words[2] = k << 32 | 801, launches  # cudaErrorNotSupported
                break
            self.state[self.devnodes[devnode]][offset : offset + size] = value.to_bytes(8, "little")[:size]
        ring.words[0] = launches + 1

    def run_pending(self, count: int | None = None) -> None:
        """Let the device run ``count`` (default: all) of the launches ``defer`` held back, in order."""
        pending = self.__dict__.setdefault("pending", [])
        for _ in range(len(pending) if count is None else count):
            self._updater(pending.pop(0))

    def reset_device_nodes(self) -> None:
        """Put every device-updatable node back as it was instantiated, as the driver may drop the
        device-side changes of a graph (a host-side update of its nodes, say)."""
        for handle in self.devnodes.values():
            if handle in self.state:
                self.state[handle][:] = self.nodes[handle].block

    # --- the compiled replay's calls -----------------------------------------------------------

    def _c_set_kernel(self, handle, params) -> int:
        p = params.contents
        try:
            self._set_kernel(0, handle, p.func, tuple(p.grid), tuple(p.block), p.shared_mem, p.kernel_params,
                             p.ctx)  # fmt: skip
        except lp.CudaError as exc:
            return exc.code
        return 0

    def _c_set_copy(self, handle, params, kind) -> int:
        try:
            self._set_copy(0, handle, kind, types.SimpleNamespace(getPtr=lambda: params), 0)
        except lp.CudaError as exc:
            return exc.code
        return 0

    def _c_launch(self, exec_, stream) -> int:
        try:
            self._launch(exec_, stream or 0)
        except lp.CudaError as exc:
            return exc.code
        return 0

    def _c_capturing(self, out) -> int:
        out[0] = 1 if getattr(self, "stream_capturing", False) else 0  # (cuStreamIsCapturing's status)
        return 0

    def _device(self, out) -> int:
        out[0] = -1  # the fake GPU's device (CPU tensors)
        return 0

    # --- what tests read ------------------------------------------------------------------------

    def reads(self, seq, index: int) -> bytes:
        """The parameter block (or copy struct) node ``index`` of ``seq``'s graph holds now."""
        return bytes(self.state[seq._state.plan.nodes[index].handle])

    def copied_from(self, seq, index: int) -> int:
        """The source address launchpad's copy node ``index`` reads now (a memcpy node, or its copy kernel's)."""
        kind = seq._state.plan.nodes[index].kind
        return struct.unpack_from("<Q", self.reads(seq, index), 48 if kind == "memcpy" else 8)[0]

    def copied_to(self, seq, index: int) -> int:
        """The destination address launchpad's copy node ``index`` writes now."""
        kind = seq._state.plan.nodes[index].kind
        return struct.unpack_from("<Q", self.reads(seq, index), 136 if kind == "memcpy" else 0)[0]

    def words(self, seq, index: int) -> list[int]:
        """Node ``index``'s 8-byte words now (its pointers)."""
        data = self.reads(seq, index)
        return [int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data) - 7, 8)]


def run_threads(target, args_list):
    threads = [threading.Thread(target=target, args=args) for args in args_list]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
