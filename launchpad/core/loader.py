"""A kernel's per-device state: its module loaded into each device it launches on.

The launch executors read :attr:`Loader.entries`, one tuple per device, without a lock (a dict
read is atomic); everything that changes an entry (the first load, raising the shared-memory
limit) runs under the loader's lock and replaces the whole tuple. A compiled launcher keeps the
entry it last launched with and does not look it up again while the device is the same: the
entries are an :class:`EntryTable`, which tells every such reader of each change. An entry holds the
:class:`LoadedModule` its function belongs to, and a launch holds its entry until the driver
call returns; the module is unloaded when the last reference goes. So :meth:`Loader.unload`
(``Kernel.close``) never unloads a module that a launch on another thread is still using: it
drops the loader's references, and the module goes once those launches return.
"""

from __future__ import annotations

import functools
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from ..errors import (
    ArgumentError,
    ArgumentTypeError,
    BinaryError,
    CudaError,
    LaunchpadError,
    NoDeviceError,
    OutOfResources,
)
from . import driver as _driver
from .binary import CLASSIC_PARAM_BYTES, MAX_PARAM_BYTES, arch_runs_on, image_arch
from .spec import KernelSpec

__all__ = ["Entry", "EntryTable", "LoadedModule", "Loader", "loaded_function"]


class Entry(NamedTuple):
    """A kernel's entry on one device. The compiled executor reads its fields by name when an entry
    is new (``_claunch.LAYOUTS["Entry"]``: all but ``function`` and ``module``, which only Python
    reads; ``tests/test_layouts.py`` checks both); the generated Python executor indexes it with
    the ``E_*`` positions below."""

    function: Any  # the CUfunction (cuda.bindings)
    max_threads: int
    shared_limit: int  # the dynamic shared memory a launch may ask for
    address: int  # the function's address
    launch: int  # cuLaunchKernel
    launch_ex: int  # cuLaunchKernelEx
    ctx_get_device: int  # cuCtxGetDevice (0: none; the executor asks torch)
    visible_devices: int  # the devices the driver shows this process (1: the current device is always 0)
    module: LoadedModule  # what the entry keeps loaded


# The positions of Entry's fields, for the generated Python executor (an index, not an attribute).
E_FUNCTION, E_MAX_THREADS, E_SHARED_LIMIT = (
    Entry._fields.index(name) for name in ("function", "max_threads", "shared_limit")
)


class EntryTable(dict):
    """A kernel's entries, device -> :class:`Entry`: a dict that calls ``forget()`` on each of its
    readers after every change, whoever makes it (the loader, a test's fake device). A reader is
    what keeps an entry between launches: a compiled launcher (``_claunch.Launcher``), held weakly.
    Reads are the dict's own, at its speed."""

    __slots__ = ("_readers",)

    def __init__(self) -> None:
        super().__init__()
        # weak references, replaced whole on each addition: a change told on one thread iterates a
        # tuple no other thread changes
        self._readers: tuple[weakref.ref, ...] = ()

    def add_reader(self, reader: Any) -> None:
        """Tell ``reader`` (its ``forget()``) of every later change, while it lives."""
        self._readers = (*(r for r in self._readers if r() is not None), weakref.ref(reader))

    def _changed(self) -> None:
        for ref in self._readers:
            reader = ref()
            if reader is not None:
                reader.forget()

    def __setitem__(self, device: int, entry: Entry) -> None:
        super().__setitem__(device, entry)
        self._changed()

    def __delitem__(self, device: int) -> None:
        super().__delitem__(device)
        self._changed()

    def clear(self) -> None:
        super().clear()
        self._changed()

    def pop(self, *args: Any) -> Any:
        try:
            return super().pop(*args)
        finally:
            self._changed()

    def popitem(self) -> tuple[int, Entry]:
        try:
            return super().popitem()
        finally:
            self._changed()

    def setdefault(self, device: int, entry: Any = None) -> Any:
        try:
            return super().setdefault(device, entry)
        finally:
            self._changed()

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._changed()

    def __ior__(self, other: Any) -> EntryTable:  # type: ignore[misc]  # (dict types | with other dicts only)
        super().update(other)
        self._changed()
        return self


#: Driver results of loading a module that mean the image itself cannot be used on the device.
_IMAGE_ERRORS = frozenset({
    "CUDA_ERROR_INVALID_IMAGE",
    "CUDA_ERROR_NO_BINARY_FOR_GPU",
    "CUDA_ERROR_INVALID_PTX",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
    "CUDA_ERROR_INVALID_SOURCE",
    "CUDA_ERROR_NOT_FOUND",
    "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
})  # fmt: skip


class LoadedModule:
    """A module loaded into one device, unloaded when the last reference to this object goes;
    ``spec`` is the kernel whose function it holds."""

    __slots__ = ("__weakref__", "device", "function", "handle", "spec")

    def __init__(self, handle: Any, function: Any, device: int, release: Callable[[Any, int], None] | None = None):
        self.handle = handle
        self.function = function
        self.device = device
        self.spec: KernelSpec | None = None  # set with the loader's entry
        finalizer = weakref.finalize(self, release or _unload, handle, device)
        finalizer.atexit = False  # the driver may be gone at exit; the process frees it all


#: Every function launchpad has loaded and not yet unloaded, by its address: what a recorded
#: sequence (:mod:`launchpad.sequences.sequence`) reads its captured kernel nodes with.
_FUNCTIONS: weakref.WeakValueDictionary[int, LoadedModule] = weakref.WeakValueDictionary()


def loaded_function(address: int) -> LoadedModule | None:
    """The module of a function launchpad loaded (its spec, keeping it loaded), or None."""
    return _FUNCTIONS.get(address)


def _unload(handle: Any, device: int) -> None:
    _driver.unload_module(handle, device)  # looked up at the time: raises nothing, takes no lock


def _tear_down(teardown: tuple, library: Any, device: int) -> None:
    """Run teardown callbacks, then let cuda.core unload the library. A finalizer: raises nothing."""
    for callback in teardown:
        try:
            with _driver.device_context(device):
                callback(library)
        except Exception as exc:
            warnings.warn(f"a module teardown callback failed on cuda:{device}: {exc!r}", ResourceWarning, stacklevel=2)


class Loader:
    """Per-device module handles and launch limits of one kernel (see the module documentation)."""

    def __init__(self, spec: KernelSpec):
        self.spec = spec
        self.callbacks = spec.callbacks
        self.name = spec.display_name
        self.modules: dict[int, LoadedModule] = {}
        self.entries = EntryTable()  # device -> entry, read by the executors
        self.coresident: dict[tuple[int, int, int], int] = {}  # (device, threads, smem) -> max blocks
        self.lock = threading.Lock()

    def entry(self, device: int) -> Entry:
        """Load into ``device`` if needed; return its entry tuple."""
        with self.lock:
            found = self.entries.get(device)
            if found is not None:
                return found
            module = self.modules.get(device)
            if module is None:
                module = self.modules[device] = self._load(device)
            function = module.function
            max_threads = _driver.function_attribute(function, "max_threads_per_block")
            limit = _driver.function_attribute(function, "max_dynamic_shared_size_bytes")
            plan = self.spec.plan
            if plan.block is not None and plan.block[0] * plan.block[1] * plan.block[2] > max_threads:
                raise OutOfResources(
                    f"kernel {self.name!r} needs {plan.block[0] * plan.block[1] * plan.block[2]} threads "
                    f"per block but allows at most {max_threads} on cuda:{device}"
                )
            if plan.shared_mem > limit:
                limit = self._raise_shared(device, function, plan.shared_mem)
            if plan.non_portable_cluster:
                _driver.allow_non_portable_cluster(function)
            return self._set_entry(device, module, max_threads, limit)

    def _set_entry(self, device: int, module: LoadedModule, max_threads: int, limit: int) -> Entry:
        launch, launch_ex, ctx_get_device = _driver.launch_entry_points()
        module.spec = self.spec
        _FUNCTIONS[int(module.function)] = module
        entry = Entry(function=module.function, max_threads=max_threads, shared_limit=limit,
                      address=int(module.function), launch=launch, launch_ex=launch_ex,
                      ctx_get_device=ctx_get_device, visible_devices=_driver.device_count(), module=module)  # fmt: skip
        self.entries[device] = entry
        return entry

    def function(self, device: int) -> Any:
        return self.entry(device)[E_FUNCTION]

    def _load(self, device: int) -> LoadedModule:
        """Load the image into ``device`` after checking that the device can run it.

        Raises :class:`BinaryError` (before any module is loaded) for a cubin or PTX built for
        an architecture the device cannot run, and for an image the driver refuses; other
        driver failures are :class:`CudaError`. Every message names the kernel and the device.
        """
        spec, what = self.spec, f"kernel {self.name!r}"
        try:
            major, minor = _driver.compute_capability(device)
        except NoDeviceError as exc:
            raise NoDeviceError(f"{what} cannot be loaded: {exc}") from None
        except CudaError as exc:
            raise exc.within(f"{what}, cuda:{device}") from None
        here = f"cuda:{device} (sm_{major}{minor}, compute capability {major}.{minor})"
        if spec.param_bytes > CLASSIC_PARAM_BYTES:
            self._check_large_parameters(major, here)
        arch = image_arch(spec.image, spec.image_kind)
        if arch is not None and not arch_runs_on(arch, spec.image_kind, (major, minor)):
            raise BinaryError(
                f"{what} was built for {arch} ({spec.image_kind}), which {here} cannot run; "
                f"compile it for sm_{major}{minor}"
            )
        try:
            torch.cuda.init()  # torch's context is the primary context launchpad shares
        except (AssertionError, RuntimeError) as exc:
            raise NoDeviceError(f"{what} cannot be loaded: torch cannot use CUDA ({exc})") from None
        try:
            if self.callbacks is not None:
                return self._load_library(device)
            handle, function = _driver.load_function(spec.image, spec.name, device)
        except CudaError as exc:
            if exc.name in _IMAGE_ERRORS:
                built = f" built for {arch}" if arch else ""
                raise BinaryError(f"{what}: {here} cannot load its {spec.image_kind}{built}: {exc}") from exc
            raise exc.within(f"{what}, loading into {here}") from None
        return LoadedModule(handle, function, device)

    def _check_large_parameters(self, major: int, here: str) -> None:
        """Parameters beyond the classic 4 KB need CUDA 12.1+ and a Volta or newer GPU: refuse
        them elsewhere before the driver sees the launch (OutOfResources naming the limit)."""
        version = _driver.driver_version()
        if major >= 7 and version >= 12010:
            return
        driver = f"a driver for CUDA {version // 1000}.{version % 1000 // 10}"
        raise OutOfResources(
            f"kernel {self.name!r} takes {self.spec.param_bytes} bytes of parameters, more than the "
            f"{CLASSIC_PARAM_BYTES} every GPU and driver take: {here} with {driver} cannot launch it (up to "
            f"{MAX_PARAM_BYTES} bytes need a Volta or newer GPU and a driver for CUDA 12.1 or newer)"
        )

    def _load_library(self, device: int) -> LoadedModule:
        """Load through cuda.core (a ``CUlibrary``, what numba-cuda's callbacks are written for)
        and run the setup callbacks with it."""
        spec, callbacks = self.spec, self.callbacks
        assert callbacks is not None
        library, function = _driver.load_library(spec.image, spec.image_kind, spec.name, device)
        module = LoadedModule(library, function, device, release=functools.partial(_tear_down, callbacks.teardown))
        for callback in callbacks.setup:
            try:
                with _driver.device_context(device):
                    callback(library)
            except Exception as exc:
                name = getattr(callback, "__qualname__", repr(callback))
                raise LaunchpadError(f"kernel {self.name!r}: the module setup callback {name} failed on cuda:{device}: "
                                     f"{exc!r}") from exc  # fmt: skip
        return module

    # --- dynamic shared memory ------------------------------------------------------------------

    def available_shared(self, device: int, function: Any) -> tuple[int, int, int]:
        optin = _driver.device_attribute(device, "max_shared_memory_per_block_optin")
        static = _driver.function_attribute(function, "shared_size_bytes")
        return optin - static, optin, static

    def _raise_shared(self, device: int, function: Any, nbytes: int) -> int:
        if self.spec.plan.oversized_shared:  # Triton 3.8+: the oversized mode first, where the driver has it
            limit = _driver.oversized_shared_limit(device) - _driver.function_attribute(function, "shared_size_bytes")
            if nbytes <= limit and _driver.set_oversized_shared(function):
                return limit
        available, optin, static = self.available_shared(device, function)
        if nbytes > available:
            raise OutOfResources(
                f"kernel {self.name!r} asks for {nbytes} bytes of dynamic shared memory but cuda:{device} "
                f"allows at most {available} ({optin} opt-in limit minus {static} static)"
            )
        _driver.set_max_dynamic_shared(function, available)
        return available

    def raise_shared(self, device: int, nbytes: int) -> int:
        """Raise the dynamic shared memory limit to the opt-in maximum, once per device."""
        self.entry(device)
        with self.lock:
            function, max_threads, limit, *_, module = self.entries[device]
            if nbytes > limit:
                limit = self._raise_shared(device, function, nbytes)
                self._set_entry(device, module, max_threads, limit)
            return limit

    def set_shared(self, device: int, nbytes: int | None) -> int:
        self.entry(device)
        with self.lock:
            function, max_threads, *_, module = self.entries[device]
            available, optin, static = self.available_shared(device, function)
            nbytes = available if nbytes is None else nbytes
            if nbytes > available:
                raise OutOfResources(
                    f"kernel {self.name!r}: {nbytes} bytes of dynamic shared memory requested but cuda:{device} "
                    f"allows at most {available} ({optin} opt-in limit minus {static} static)"
                )
            _driver.set_max_dynamic_shared(function, nbytes)
            self._set_entry(device, module, max_threads, nbytes)
            return nbytes

    # --- launches with attributes ----------------------------------------------------------------

    def coresident_blocks(self, device: int, threads: int, shared_mem: int) -> int:
        """How many blocks of this shape can be resident at once (the cooperative launch limit);
        two driver queries once per configuration, not per launch."""
        key = (device, threads, shared_mem)
        capacity = self.coresident.get(key)
        if capacity is None:
            per_sm = _driver.max_active_blocks_per_sm(self.function(device), threads, shared_mem)
            capacity = self.coresident[key] = per_sm * _driver.device_attribute(device, "multiprocessor_count")
        return capacity

    def check_attributes(self, device: int, grid: tuple, block: tuple, shared_mem: int,
                         cluster: Any, cooperative: bool) -> tuple | None:  # fmt: skip
        """The cluster a launch uses after checking it and the cooperative limit (ArgumentError)."""
        if cluster is not None:
            cluster = self._cluster_dims(cluster)
            if any(g % c for g, c in zip(grid, cluster)):
                raise ArgumentError(f"kernel {self.name!r}: grid {grid} is not a multiple of cluster {cluster}")
        if cooperative:
            capacity = self.coresident_blocks(device, block[0] * block[1] * block[2], shared_mem)
            if grid[0] * grid[1] * grid[2] > capacity:
                raise ArgumentError(
                    f"kernel {self.name!r}: a cooperative launch of {grid[0] * grid[1] * grid[2]} blocks "
                    f"exceeds the {capacity} blocks that can be resident at once on cuda:{device}"
                )
        return cluster

    def _cluster_dims(self, cluster: Any) -> tuple[int, int, int]:
        """A launch's ``cluster=`` as three dimensions: an int or 1-3 of them, each at least 1."""
        single = hasattr(cluster, "__index__") and not isinstance(cluster, bool)
        items = (cluster,) if single else tuple(cluster) if isinstance(cluster, (tuple, list)) else None
        if items is None or not all(hasattr(c, "__index__") and not isinstance(c, bool) for c in items):
            raise ArgumentTypeError(f"kernel {self.name!r}: cluster must be an int or a tuple of 1-3 ints, got "
                                    f"{type(cluster).__name__} {cluster!r}")  # fmt: skip
        dims = tuple(int(c) for c in items)
        if not 1 <= len(dims) <= 3 or min(dims) < 1:
            raise ArgumentError(f"kernel {self.name!r}: cluster {cluster!r} must have 1-3 dimensions, each at least 1")
        return (*dims, 1, 1)[:3]  # type: ignore[return-value]

    def launch_ex(self, entry: tuple, device: int, grid: tuple, block: tuple, shared_mem: int, stream: int,
                  params: int, cluster: Any, cooperative: bool, pdl: bool) -> None:  # fmt: skip
        """A launch through ``cuLaunchKernelEx``: the plan's attributes and the launch's own."""
        for option, value in (("cooperative", cooperative), ("pdl", pdl)):
            if not isinstance(value, (bool, np.bool_)):  # (a str such as "no" would be true)
                raise ArgumentTypeError(f"kernel {self.name!r}: {option} takes a bool, got {type(value).__name__} "
                                        f"{value!r}")  # fmt: skip
        plan = self.spec.plan
        cooperative = cooperative or plan.cooperative
        cluster = self.check_attributes(device, grid, block, shared_mem,
                                        cluster if cluster is not None else plan.cluster, cooperative)  # fmt: skip
        try:
            _driver.launch_ex(
                entry[E_FUNCTION], grid, block, shared_mem, stream, params, device,
                cluster=cluster, cooperative=cooperative, pdl=pdl or plan.pdl, spread=plan.cluster_spread,
                oversized=plan.oversized_shared,
            )  # fmt: skip
        except CudaError as exc:  # as a plain launch's failure does, name the kernel and device
            raise exc.within(f"kernel {self.name!r} on cuda:{device}") from None

    def unload(self) -> None:
        """Drop this loader's modules: each is unloaded once no launch in flight still holds it."""
        with self.lock:
            self.entries.clear()
            self.coresident.clear()
            self.modules.clear()
