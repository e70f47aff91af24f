"""How a replay changes the nodes of an instantiated graph: from the device, or from the host.

**From the device** (where it can), in four steps:

1. The kept graph starts with launchpad's updater node, and every kernel node a replay changes is
   made device-updatable before instantiation.
2. Every slot of a ring in pinned host memory holds one ``(device node, offset | size << 32,
   value)`` entry per word the host ever changes in those nodes. The nodes and places are written
   once, when the sequence is built.
3. A replay writes every entry's value into the slot of its launch, and launches the graph. It
   writes the full state: what this replay changes, and the last value of everything else, so that
   nothing that resets the device-side changes (such as a host-side update of another node) can
   bring a recorded value back.
4. The updater node reads the slot of its launch and applies it with
   ``cudaGraphKernelNodeSetParam`` before any other node starts.

The host makes no driver call besides ``cuGraphLaunch``, and the GPU pays one small kernel instead
of the re-upload of every node changed from the host. An experiment measured it on an H100
(``benchmarks/experiments/graph_updates.py`` at f9f7baf, since removed): a 20-node step with new
tensors took 27.9 against 32.0 us per step.

The ring's header is three words:

1. the number of launches the updater has consumed: a replay that finds its slot's last launch
   not started waits for it by polling that word (never by synchronizing the context or the
   device, which would invalidate another thread's stream capture);
2. zero, or the first failed update (its entry << 32 | the ``cudaError_t``; entry
   :data:`DRIFT` where a slot was written for another launch than the one that read it): the
   updater then applies nothing more (a trap would kill the process's CUDA context), and every
   later replay refuses;
3. the launch that failed.

Each slot's first word is its entry count | the launch it was written for << 32 (the low 32 bits
of the launch number): the updater applies a slot only where that stamp is its own launch's, so
a host whose count of launches drifted from the device's (a launch the host did not count, or
counted twice) is a failure, never another launch's values applied.

Before a sequence's first replay, :func:`refused_nodes` runs the updater once outside the graph on
a ring of its own holding the recorded values (an update that changes nothing) and reads its
status: a node the driver will not update from the device (a cuTile kernel's, on CUDA 13.0) is
updated from the host instead, so that no replay depends on an update never tried. The updater
is compiled once per process (NVRTC, then nvJitLink with CUDA's device runtime,
``libcudadevrt.a``).

**From the host** (a copy or memset node, a kernel node the driver will not make device-updatable,
or no device runtime): the node's whole parameter block (or ``CUDA_MEMCPY3D``,
``CUDA_MEMSET_NODE_PARAMS``) is kept, patched, and handed to ``cuGraphExecKernelNodeSetParams``
(``...MemcpyNodeSetParams``, ``...MemsetNodeSetParams``). A failed update restores the bytes.
"""

from __future__ import annotations

import ctypes
import functools
import time
from dataclasses import dataclass
from typing import Any

import torch

from ..core import driver as _driver
from ..core import toolchain as _toolchain
from ..core.params import parameter_block
from ..errors import LaunchpadError
from ..launch import checks as _checks

__all__ = [
    "COPY_SOURCE",
    "DEVICE",
    "DRIFT",
    "HEADER",
    "KERNEL",
    "MEMCPY",
    "MEMSET",
    "SLOTS",
    "Ring",
    "Target",
    "copier",
    "copy_bytes",
    "refused_nodes",
    "updater",
]

#: Target kinds, as ``replay.c`` numbers them.
DEVICE, KERNEL, MEMCPY, MEMSET = range(4)
#: Slots of the ring: how many replays the host may run ahead of the GPU's updater.
SLOTS = 128
#: Words of the ring before its first slot: launches consumed, the first failure, the launch that failed.
HEADER = 3
#: The failure's entry where a slot was written for another launch (its stamp is not the updater's launch).
DRIFT = 0xFFFFFFFF
#: Sizes of the copy nodes' parameter structs (``CUDA_MEMCPY3D``, ``CUDA_MEMSET_NODE_PARAMS``).
_COPY_PARAMS = {"memcpy": 200, "memset": 40}

UPDATER_SOURCE = r"""
// launchpad's updater node: applies one ring slot's entries to the graph's device-updatable nodes.
// ring: [launches consumed, the first failure (entry << 32 | error; 0: none), the launch that failed, then a
// slot per launch: its entry count | the launch it was written for << 32, and `capacity` entries of three
// words: the device node, offset | size << 32, the value (up to 8 bytes)]. counter: launches so far. Each
// thread loads its entry and the slot's head together (one round trip to host memory), then applies it.
extern "C" __global__ void launchpad_apply_updates(unsigned long long* ring, unsigned long long* counter,
                                                   unsigned int slots, unsigned int capacity) {
    unsigned long long launch = *counter;
    const unsigned long long* slot = ring + 3 + (launch % slots) * (1 + 3ull * capacity);
    volatile unsigned long long* failure = ring + 1;
    for (unsigned int i = threadIdx.x; i < capacity; i += blockDim.x) {
        const unsigned long long* e = slot + 1 + 3ull * i;
        unsigned long long node = e[0], where = e[1], value = e[2], head = slot[0], failed = *failure;
        // after a failure nothing more is applied: the host refuses every later replay (a trap would kill
        // the process's CUDA context)
        if (failed) break;
        if (head >> 32 != (launch & 0xffffffffull)) {  // written for another launch: the host's count drifted
            if (threadIdx.x == 0) {
                ring[2] = launch;
                *failure = 0xffffffffull << 32;
                __threadfence_system();
            }
            break;
        }
        if (i >= (head & 0xffffffffull)) break;
        cudaError_t err = cudaGraphKernelNodeSetParam((cudaGraphDeviceNode_t)node, where & 0xffffffffull, &value,
                                                      where >> 32);
        if (err != cudaSuccess) {  // (several threads may fail at once: any one of them is recorded)
            ring[2] = launch;
            *failure = (unsigned long long)i << 32 | (unsigned int)err;
            __threadfence_system();  // seen by the host before the slot is given back
            break;
        }
    }
    __threadfence();  // the nodes' new parameters visible before any node starts (a programmatic dependent too)
    __syncthreads();
    if (threadIdx.x == 0) {
        *counter = launch + 1;
        *(volatile unsigned long long*)ring = launch + 1;  // the host may reuse this slot
    }
}

"""


def updater(device: int) -> tuple[int, str]:
    """The updater's function on ``device`` (0 where it cannot run) and why not."""
    functions, note = _functions(device)
    return functions[0], note


def copier(device: int) -> int:
    """The copy kernel's function on ``device`` (``launchpad_copy_bytes``; 0 where the updater cannot run)."""
    return _functions(device)[0][1]


def copy_bytes(function: int, destination: int, source: int, nbytes: int, stream: int) -> None:
    """Launch the copy kernel (:func:`copier`'s ``function``) on ``stream``: ``nbytes`` from ``source`` to
    ``destination``, 4 KiB a block of 256 threads, 1024 blocks at most."""
    args = [ctypes.c_void_p(destination), ctypes.c_void_p(source), ctypes.c_uint64(nbytes)]
    params = (ctypes.c_void_p * 3)(*[ctypes.addressof(a) for a in args])
    grid = (min(max(-(-nbytes // 4096), 1), 1024), 1, 1)
    _driver.launch_kernel(function, grid, (256, 1, 1), 0, stream, ctypes.addressof(params))


#: launchpad's copy node where nodes are updated from the device (built with the updater): a kernel node,
#: whose addresses the updater changes as it changes any kernel's, where a memcpy node is changed only from
#: the host, a driver call per replay and copy.
COPY_SOURCE = r"""
// Copies n bytes with the widest words both ends allow: bytes up to dst's next word boundary, then
// words, then the bytes left, the words as wide as the addresses agree modulo 16 (8, 4, 2: 1 at
// worst). Any grid: every loop strides by the grid's threads.
template <typename Word>
__device__ void launchpad_copy_words(unsigned char* dst, const unsigned char* src, unsigned long long n,
                                     unsigned long long first, unsigned long long step) {
    const unsigned long long size = sizeof(Word);
    unsigned long long head = (size - ((unsigned long long)dst & (size - 1))) & (size - 1);
    if (head > n) head = n;
    const unsigned long long words = (n - head) / size, tail = head + words * size;
    for (unsigned long long k = first; k < head; k += step) dst[k] = src[k];
    Word* d = (Word*)(dst + head);
    const Word* s = (const Word*)(src + head);
    for (unsigned long long k = first; k < words; k += step) d[k] = s[k];
    for (unsigned long long k = tail + first; k < n; k += step) dst[k] = src[k];
}

extern "C" __global__ void launchpad_copy_bytes(unsigned char* dst, const unsigned char* src, unsigned long long n) {
    const unsigned long long first = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long skew = (unsigned long long)dst ^ (unsigned long long)src;
    if ((skew & 15) == 0) launchpad_copy_words<uint4>(dst, src, n, first, step);
    else if ((skew & 7) == 0) launchpad_copy_words<unsigned long long>(dst, src, n, first, step);
    else if ((skew & 3) == 0) launchpad_copy_words<unsigned int>(dst, src, n, first, step);
    else if ((skew & 1) == 0) launchpad_copy_words<unsigned short>(dst, src, n, first, step);
    else launchpad_copy_words<unsigned char>(dst, src, n, first, step);
}
"""


@functools.cache
def _functions(device: int) -> tuple[tuple[int, int], str]:
    """The updater's and the copy kernel's functions on ``device`` ((0, 0) where they cannot run) and why not."""
    try:
        if _driver.driver_version() < 12040:
            return (0, 0), "the driver is older than CUDA 12.4 (no device-side graph updates)"
        major, minor = _driver.compute_capability(device)
        if major < 7:
            return (0, 0), f"sm_{major}{minor} has no device-side graph updates"
        library = _toolchain.device_runtime()
        if library is None:
            runtime = "CUDA's device runtime (libcudadevrt.a) is not installed: install launchpad's cu12 or cu13 extra"
            return (0, 0), runtime
        arch = f"sm_{major}{minor}"
        obj = _toolchain.compile_object(UPDATER_SOURCE + COPY_SOURCE, arch=arch, output="ltoir")
        cubin = _toolchain.link([obj, library], arch, lto=True, what="launchpad's graph updater")
        module, function = _driver.load_function(cubin, "launchpad_apply_updates", device)
        copy = _driver.module_function(module, "launchpad_copy_bytes")
    except LaunchpadError as exc:
        return (0, 0), f"launchpad's updater could not be built: {str(exc).splitlines()[0]}"
    return (int(function), int(copy)), ""


class Ring:
    """The pinned ring the updater node reads (see the module documentation), and the device
    counter of its launches. ``capacity`` entries fit in each slot."""

    def __init__(self, device: int, capacity: int, slots: int = SLOTS):
        self.device = device
        self.slots, self.capacity = slots, max(capacity, 1)
        self.stride = 1 + 3 * self.capacity
        self.count = 0  # entries in each slot (fill)
        pinned = torch.cuda.is_available()  # (not in tests on the fake GPU, whose "device" is the CPU)
        self.memory = torch.zeros(HEADER + slots * self.stride, dtype=torch.int64, pin_memory=pinned)
        self.counter = torch.zeros(1, dtype=torch.int64, device=f"cuda:{device}" if device >= 0 else "cpu")
        self.words = (ctypes.c_uint64 * (HEADER + slots * self.stride)).from_address(self.memory.data_ptr())
        self._args = [ctypes.c_void_p(self.memory.data_ptr()), ctypes.c_void_p(self.counter.data_ptr()),
                      ctypes.c_uint32(slots), ctypes.c_uint32(self.capacity)]  # fmt: skip
        self._params = (ctypes.c_void_p * 4)(*[ctypes.addressof(a) for a in self._args])

    @property
    def consumed(self) -> int:
        return int(self.words[0])

    @property
    def failure(self) -> tuple[int, int, int] | None:
        """The first device-side update that failed: ``(entry, cudaError_t, launch)`` (entry
        :data:`DRIFT`: a slot written for another launch); None while none has."""
        word = int(self.words[1])
        return (word >> 32, word & 0xFFFFFFFF, int(self.words[2])) if word else None

    def prologue(self, function: int) -> None:
        """Launch the updater on torch's current stream (inside the capture: its first node)."""
        self.launch(function, _checks.current_raw_stream(self.device))

    def launch(self, function: int, stream: int) -> None:
        """Launch the updater on ``stream``: it applies the slot of its launch (the counter's)."""
        _driver.launch_kernel(function, (1, 1, 1), (128, 1, 1), 0, stream, ctypes.addressof(self._params))

    def slot(self, launch: int) -> int:
        """The word where launch ``launch``'s slot starts (its head; its entries follow)."""
        return HEADER + (launch % self.slots) * self.stride

    def fill(self, entries: list[tuple[int, int, int]]) -> None:
        """Write the ``(device node, offset, size)`` of every entry, and their count, into every slot,
        once: a replay then writes only the entries' values and the slot's head. Each slot's stamp
        is a launch before any that uses it (no slot is taken for its launch until it is written)."""
        if len(entries) > self.capacity:  # (a slot holds every use of every input and output at once)
            raise LaunchpadError(f"{len(entries)} node updates do not fit a ring slot of {self.capacity}")
        self.count = len(entries)
        for launch in range(self.slots):
            base = self.slot(launch)
            for k, (devnode, offset, size) in enumerate(entries):
                self.words[base + 1 + 3 * k] = devnode
                self.words[base + 2 + 3 * k] = offset | size << 32
            self.words[base] = self.head(launch - self.slots)

    def head(self, launch: int) -> int:
        """A slot's first word for launch ``launch``: the entry count, the launch's stamp."""
        return self.count | (launch & 0xFFFFFFFF) << 32

    def put(self, launch: int, values: list[Any]) -> None:
        """The value of every entry (as :meth:`fill` ordered them) into the slot of launch ``launch``,
        then its head (stamped with the launch)."""
        base = self.slot(launch)
        self.words[base + 3 : base + 3 + 3 * len(values) : 3] = values
        self.words[base] = self.head(launch)

    def wait(self, launch: int) -> None:
        """Until launch ``launch``'s slot is free (the updater has started the launch that used it
        last) or an update has failed. Polled: a context- or device-wide synchronization would
        invalidate another thread's stream capture."""
        pause = 0.0
        while launch - self.words[0] >= self.slots and not self.words[1]:
            time.sleep(pause)  # (the GIL goes: the thread that launches, and the device, go on)
            pause = min(2 * pause or 1e-6, 1e-3)


def refused_nodes(function: int, entries: list[tuple[int, int, int, int]], device: int,
                  stream: int) -> dict[int, int]:  # fmt: skip
    """The device nodes the driver will not update from the device, each with its ``cudaError_t``.

    ``entries`` are ``(device node, offset, size, recorded value)``: the updater applies them once,
    outside the graph, from a ring of one slot of its own (the sequence's ring and counter are left
    as they are), an update that changes nothing. The updater stops at the first failure: the
    failed node's entries go, and it runs again on the rest, until none fails. Synchronizes
    ``stream`` (where the graph was uploaded) after each run.
    """
    refused: dict[int, int] = {}
    while True:
        left = [e for e in entries if e[0] not in refused]
        if not left:
            return refused
        probe = Ring(device, len(left), slots=1)
        probe.fill([e[:3] for e in left])
        probe.put(0, [e[3] for e in left])
        probe.launch(function, stream)
        _driver.synchronize(stream)
        failure = probe.failure
        if failure is None:
            return refused
        entry, error, _ = failure
        if entry >= len(left):  # (a drift in a ring of one launch: not the nodes' doing)
            raise LaunchpadError(f"launchpad's updater failed its check before any replay (word {probe.words[1]:#x})")
        refused[left[entry][0]] = error


@dataclass
class Target:
    """A node a replay changes, and how: ``kind`` is :data:`DEVICE` (``devnode``), :data:`KERNEL`
    (the parameter block ``blob`` and its ``pointers`` array), :data:`MEMCPY` or :data:`MEMSET`
    (the parameter struct ``blob``)."""

    kind: int
    index: int
    name: str
    handle: int = 0
    devnode: int = 0
    function: int = 0
    grid: tuple = ()
    block_dim: tuple = ()
    shared_mem: int = 0
    context: int = 0
    blob: bytearray | None = None
    pointers: Any = None  # KERNEL: the address array; MEMCPY/MEMSET: the ctypes view pinning the blob
    params: Any = None  # MEMCPY/MEMSET: the driver's struct over ``blob``

    @property
    def address(self) -> int:
        return ctypes.addressof(self.pointers)

    def apply(self, exec_: int) -> None:
        """Hand the patched block to the driver (host targets)."""
        if self.kind == KERNEL:
            _driver.set_kernel_node_params(exec_, self.handle, self.function, self.grid, self.block_dim,
                                           self.shared_mem, self.address, self.context)  # fmt: skip
        else:
            _driver.set_copy_node(exec_, self.handle, "memset" if self.kind == MEMSET else "memcpy", self.params,
                                  self.context)  # fmt: skip


def host_target(index: int, node: Any, device: int) -> Target:
    """A host-updated target of a node (see :class:`Target`)."""
    if node.kind == "kernel":
        layout = list(node.layout or ())
        size = max((o + s for o, s in layout), default=0)
        from ..core.params import Param

        blob, pointers = parameter_block([Param(i, o, s, 1) for i, (o, s) in enumerate(layout)], size)
        blob[: len(node.block)] = node.block
        return Target(KERNEL, index, node.describe(index), node.handle, 0, node.function, node.grid, node.block_dim,
                      node.shared_mem, node.context, blob, pointers)  # fmt: skip
    size = _COPY_PARAMS[node.kind]
    blob = bytearray(ctypes.string_at(node.params.getPtr(), size))
    view = (ctypes.c_char * size).from_buffer(blob)
    params = type(node.params)(_ptr=ctypes.addressof(view))
    context = int(_driver.primary_context(device))
    return Target(MEMSET if node.kind == "memset" else MEMCPY, index, node.describe(index), node.handle,
                  context=context, blob=blob, pointers=view, params=params)  # fmt: skip
