"""``Kernel``: one loaded-on-demand GPU kernel with a specialized launch path.

Every front end (C++, Triton, Numba) turns its input into the same description: a binary image,
the entry name, the parameter layout (:class:`~launchpad._layout.Param`), how user arguments map
onto parameters (:class:`~launchpad._launcher.Arg`) and what each launch fixes
(:class:`~launchpad._launcher.LaunchPlan`). :class:`Kernel` loads the image lazily into each
device it is launched on and launches it through a function generated for it once.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import functools
import hashlib
import json
import os
import re
import secrets
import threading
import weakref
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from . import _driver
from ._launcher import Arg, Context, LaunchPlan, RawStream, _kernel_launch_failed, build_launch, plain_args
from ._layout import (
    BinaryKernel,
    Param,
    apply_signature,
    arch_runs_on,
    image_arch,
    kernels_in_image,
    layout_from_signature,
    parse_signature,
    read_image,
)
from .errors import ArgumentError, BinaryError, CudaError, LaunchpadError, NoDeviceError, OutOfResources

__all__ = ["Kernel", "from_image", "load", "load_cubin"]

ARTIFACT_FORMAT = "launchpad.kernel"
#: Version 2 added the ``sha256`` field; version 1 artifacts are refused (save them again).
ARTIFACT_VERSION = 2
_DEFAULT_SHARED_LIMIT = 48 * 1024

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


class _Loader:
    """Per-device module and function handles of one image; unloads them when finalized.

    The generated launch functions reference the loader, not the :class:`Kernel`. So the
    modules stay loaded exactly as long as anything can still launch them (the Kernel, or a
    ``kernel.launch``, ``kernel[grid, block]`` or ``kernel.bind(...)`` kept on its own), and are
    unloaded when the last of those goes: they never form a reference cycle (see
    :func:`~launchpad._launcher.build_launch`), so that happens at once, not at the next
    garbage collection.
    """

    def __init__(self, image: bytes, kind: str, name: str, display_name: str, plan: LaunchPlan):
        self.image = image
        self.kind = kind
        self.name = name
        self.display_name = display_name
        self.plan = plan
        self.modules: dict[int, tuple[Any, Any]] = {}  # device -> (module, function)
        self.entries: dict[int, tuple[Any, int, int]] = {}  # shared with the generated launchers
        self.coresident: dict[tuple[int, int, int], int] = {}  # (device, threads, smem) -> max blocks
        self.lock = threading.Lock()
        # The finalizer holds the modules dict, not the loader, which it must not keep alive.
        finalizer = weakref.finalize(self, _unload_modules, self.modules)
        finalizer.atexit = False  # the driver may be gone at exit; the process frees it all

    def function(self, device: int) -> Any:
        if device not in self.modules:
            self.entry(device)
        return self.modules[device][1]

    def entry(self, device: int) -> tuple[Any, int, int]:
        """Load into ``device`` if needed; return ``(function, max threads, shared limit)``."""
        with self.lock:
            if device in self.entries:
                return self.entries[device]
            if device not in self.modules:
                self.modules[device] = self._load(device)
            function = self.modules[device][1]
            max_threads = _driver.function_attribute(function, "max_threads_per_block")
            limit = _driver.function_attribute(function, "max_dynamic_shared_size_bytes")
            plan = self.plan
            if plan.block is not None and plan.block[0] * plan.block[1] * plan.block[2] > max_threads:
                raise OutOfResources(
                    f"kernel {self.display_name!r} needs {plan.block[0] * plan.block[1] * plan.block[2]} threads "
                    f"per block but allows at most {max_threads} on cuda:{device}"
                )
            if plan.shared_mem > limit:
                limit = self._raise_shared(device, function, plan.shared_mem)
            if plan.non_portable_cluster:
                _driver.allow_non_portable_cluster(function)
            self.entries[device] = (function, max_threads, limit)
            return self.entries[device]

    def _load(self, device: int) -> tuple[Any, Any]:
        """Load the image into ``device`` after checking that the device can run it.

        Raises :class:`BinaryError` (before any module is loaded) for a cubin or PTX built for
        an architecture the device cannot run, and for an image the driver refuses; other
        driver failures are :class:`CudaError`. Every message names the kernel and the device.
        """
        what = f"kernel {self.display_name!r}"
        try:
            major, minor = _driver.compute_capability(device)
        except NoDeviceError as exc:
            raise NoDeviceError(f"{what} cannot be loaded: {exc}") from None
        except CudaError as exc:
            raise exc.within(f"{what}, cuda:{device}") from None
        here = f"cuda:{device} (sm_{major}{minor}, compute capability {major}.{minor})"
        arch = image_arch(self.image, self.kind)
        if arch is not None and not arch_runs_on(arch, self.kind, (major, minor)):
            raise BinaryError(
                f"{what} was built for {arch} ({self.kind}), which {here} cannot run; "
                f"compile it for sm_{major}{minor}"
            )
        try:
            torch.cuda.init()  # torch's context is the primary context launchpad shares
        except (AssertionError, RuntimeError) as exc:
            raise NoDeviceError(f"{what} cannot be loaded: torch cannot use CUDA ({exc})") from None
        try:
            return _driver.load_function(self.image, self.name, device)
        except CudaError as exc:
            if exc.name in _IMAGE_ERRORS:
                built = f" built for {arch}" if arch else ""
                raise BinaryError(f"{what}: {here} cannot load its {self.kind}{built}: {exc}") from exc
            raise exc.within(f"{what}, loading into {here}") from None

    def available_shared(self, device: int, function: Any) -> tuple[int, int, int]:
        optin = _driver.device_attribute(device, "max_shared_memory_per_block_optin")
        static = _driver.function_attribute(function, "shared_size_bytes")
        return optin - static, optin, static

    def _raise_shared(self, device: int, function: Any, nbytes: int) -> int:
        if self.plan.oversized_shared:  # Triton 3.8+: the oversized mode first, where the driver has it
            limit = _driver.oversized_shared_limit(device) - _driver.function_attribute(function, "shared_size_bytes")
            if nbytes <= limit and _driver.set_oversized_shared(function):
                return limit
        available, optin, static = self.available_shared(device, function)
        if nbytes > available:
            raise OutOfResources(
                f"kernel {self.display_name!r} asks for {nbytes} bytes of dynamic shared memory but cuda:{device} "
                f"allows at most {available} ({optin} opt-in limit minus {static} static)"
            )
        _driver.set_max_dynamic_shared(function, available)
        return available

    def raise_shared(self, device: int, nbytes: int) -> int:
        """Raise the dynamic shared memory limit to the opt-in maximum, once per device."""
        with self.lock:
            function, max_threads, limit = self.entries[device]
            if nbytes > limit:
                limit = self._raise_shared(device, function, nbytes)
                self.entries[device] = (function, max_threads, limit)
            return limit

    def set_shared(self, device: int, nbytes: int | None) -> int:
        self.entry(device)
        with self.lock:
            function, max_threads, _ = self.entries[device]
            available, optin, static = self.available_shared(device, function)
            nbytes = available if nbytes is None else nbytes
            if nbytes > available:
                raise OutOfResources(
                    f"kernel {self.display_name!r}: {nbytes} bytes of dynamic shared memory requested but cuda:{device} "
                    f"allows at most {available} ({optin} opt-in limit minus {static} static)"
                )
            _driver.set_max_dynamic_shared(function, nbytes)
            self.entries[device] = (function, max_threads, nbytes)
            return nbytes

    def launch_ex(self, function, device, grid, block, shared_mem, stream, params, cluster, cooperative, pdl) -> None:
        plan = self.plan
        cluster = cluster if cluster is not None else plan.cluster
        cooperative = cooperative or plan.cooperative
        if cluster is not None:
            cluster = (tuple(cluster) + (1, 1))[:3]
            if any(g % c for g, c in zip(grid, cluster)):
                raise ArgumentError(f"kernel {self.display_name!r}: grid {grid} is not a multiple of cluster {cluster}")
        if cooperative:
            threads = block[0] * block[1] * block[2]
            key = (device, threads, shared_mem)
            capacity = self.coresident.get(key)
            if capacity is None:  # two driver queries: once per configuration, not per launch
                per_sm = _driver.max_active_blocks_per_sm(function, threads, shared_mem)
                capacity = self.coresident[key] = per_sm * _driver.device_attribute(device, "multiprocessor_count")
            if grid[0] * grid[1] * grid[2] > capacity:
                raise ArgumentError(
                    f"kernel {self.display_name!r}: a cooperative launch of {grid[0] * grid[1] * grid[2]} blocks "
                    f"exceeds the {capacity} blocks that can be resident at once on cuda:{device}"
                )
        try:
            _driver.launch_ex(
                function, grid, block, shared_mem, stream, params, device,
                cluster=cluster, cooperative=cooperative, pdl=pdl or plan.pdl, spread=plan.cluster_spread,
                oversized=plan.oversized_shared,
            )  # fmt: skip
        except CudaError as exc:  # as a plain launch's failure does, name the kernel and device
            raise exc.within(f"kernel {self.display_name!r} on cuda:{device}") from None

    def unload(self) -> None:
        with self.lock:
            self.entries.clear()
            self.coresident.clear()
            _unload_modules(self.modules)


def _unload_modules(modules: dict[int, tuple[Any, Any]]) -> None:
    """Unload every module of a loader and empty its dict (in place: the finalizer shares it)."""
    loaded = list(modules.items())
    modules.clear()
    for device, (module, _) in loaded:
        _driver.unload_module(module, device)


class Kernel:
    """A GPU kernel with its parameter layout and a launch path specialized for it.

    Make one with :func:`load_cubin`, :func:`launchpad.compile_cuda`, :func:`launchpad.from_triton`,
    :func:`launchpad.from_numba` or :func:`load`. The image is loaded into a device on the first
    launch there.

    Attributes
    ----------
    name : str
        The entry symbol in the binary.
    display_name : str
        How messages name the kernel (a template expression, a Triton function name).
    params : tuple of Param
        The exact parameter list of the binary.
    args : tuple of Arg
        How the launch's arguments map onto ``params``.
    plan : LaunchPlan
        What every launch fixes (block, shared memory, cluster, ...).
    """

    def __init__(
        self,
        image: bytes,
        image_kind: str,
        name: str,
        params: tuple[Param, ...] | list[Param],
        *,
        args: tuple[Arg, ...] | None = None,
        plan: LaunchPlan | None = None,
        display_name: str | None = None,
        metadata: dict | None = None,
        binary: BinaryKernel | None = None,
    ):
        self.image = image
        self.image_kind = image_kind
        self.name = name
        self.display_name = display_name or name
        self.params = tuple(params)
        self.args = tuple(args) if args is not None else plain_args(self.params)
        self.plan = plan or LaunchPlan()
        self.metadata = dict(metadata or {})
        self.binary = binary
        self._loader = _Loader(image, image_kind, name, self.display_name, self.plan)
        self._context = Context(self.display_name, self.params, self.args)
        self._configs: dict[Any, Callable[..., None]] = {}  # kernel[...] launch configurations
        # The instance attribute shadows the documented method below: one call, no extra frame.
        self.launch, self._prepare = build_launch(
            self._context, self.plan, self._loader.entry, self._loader.raise_shared, self._loader.launch_ex,
            entries=self._loader.entries,
        )

    # The generated function replaces this per instance; this is its documentation.
    def launch(  # type: ignore[no-redef]
        self,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...] | None,
        *args: Any,
        shared_mem: int = 0,
        stream: Any = None,
        cluster: tuple[int, int, int] | None = None,
        cooperative: bool = False,
        pdl: bool = False,
    ) -> None:
        """Launch the kernel.

        Parameters
        ----------
        grid, block : int or tuple of 1-3 ints
            Blocks in the grid and threads in a block. Kernels whose block is fixed at compile
            time (Triton) take ``block=None``. A grid with a zero dimension launches nothing.
        *args
            One per kernel argument: tensors (or objects with ``data_ptr()`` or
            ``__cuda_array_interface__``, or int addresses, or None) for pointers; ints, floats,
            bools and numpy scalars for scalars; ``bytes`` or numpy structured scalars for
            by-value structs.
        shared_mem : int
            Bytes of dynamic shared memory; above 48 KB the kernel's limit is raised once.
        stream : optional
            torch.cuda.Stream, cuda.core Stream, int handle or object with ``__cuda_stream__``;
            default: torch's current stream on the current device.
        cluster, cooperative, pdl
            Launch attributes (thread block cluster dims, cooperative launch, programmatic
            dependent launch); any of them makes the launch go through ``cuLaunchKernelEx``.

        Raises
        ------
        ArgumentError
            Before any driver call, for any invalid argument or configuration.
        """
        raise NotImplementedError  # replaced per instance in __init__

    def __getitem__(self, config: Any) -> Callable[..., None]:
        """``kernel[grid](*args)`` for kernels with a fixed block (Triton), otherwise
        ``kernel[grid, block]``, ``kernel[grid, block, stream]`` or
        ``kernel[grid, block, stream, shared_mem]`` (Numba's launch syntax).

        The callable for each configuration is made once and reused: code that writes
        ``kernel[grid, block](...)`` in a loop pays one dict lookup for it.
        """
        try:
            return self._configs[config]
        except KeyError:
            pass
        except TypeError:  # unhashable (a list): not cached
            return self._configure(config)
        if len(self._configs) >= 256:  # grids that change every call: keep the cache bounded
            self._configs.clear()
        self._configs[config] = launch = self._configure(config)
        return launch

    def _configure(self, config: Any) -> Callable[..., None]:
        if self.plan.block is not None:
            return functools.partial(self.launch, config, None)
        if not isinstance(config, (tuple, list)) or not 2 <= len(config) <= 4:
            raise ArgumentError(f"kernel {self.display_name!r}: use kernel[grid, block(, stream(, shared_mem))]")
        grid, block, *rest = config
        options: dict[str, Any] = {}
        if rest and rest[0] is not None and not (isinstance(rest[0], int) and rest[0] == 0):
            options["stream"] = rest[0]
        if len(rest) > 1:
            options["shared_mem"] = rest[1]
        return functools.partial(self.launch, grid, block, **options)

    def bind(self, grid: Any, block: Any, *args: Any, **launch_options: Any) -> Callable[..., None]:
        """Validate and pack one launch now; return a function that repeats it.

        The returned ``bound()`` issues exactly that launch (same arguments, grid, block, shared
        memory and stream, the stream resolved now) with nothing left to compute.
        ``bound(*args, **named)`` launches with the leading arguments, or those named,
        replaced for that call only; it is checked like :meth:`launch`.
        """
        device, function, g, b, shared_mem, stream, packed, keep = self._prepare(grid, block, *args, **launch_options)
        options = dict(launch_options, shared_mem=shared_mem, stream=RawStream(stream, device))
        names = [a.name for a in self.args if len(a.path) == 1]
        launch = self.launch

        def relaunch(new_args: tuple, named: dict) -> None:
            merged = list(args)
            merged[: len(new_args)] = new_args
            for key, value in named.items():
                if key not in names:
                    raise ArgumentError(f"kernel {self.display_name!r} has no argument {key!r}")
                merged[names.index(key)] = value
            launch(grid, block, *merged, **options)

        has_scratch = any(a.kind == "scratch" and a.options.get("size") for a in self.args)
        uses_ex = any(launch_options.get(k) for k in ("cluster", "cooperative", "pdl")) or (
            self.plan.cluster is not None or self.plan.cooperative or self.plan.pdl
        )
        if has_scratch or uses_ex or not (g[0] and g[1] and g[2]):
            def bound(*new_args: Any, **named: Any) -> None:
                relaunch(new_args, named)
        else:
            buf = ctypes.create_string_buffer(packed, max(len(packed), 1))
            base = ctypes.addressof(buf)
            pointers = (ctypes.c_void_p * max(len(self.params), 1))(*[base + p.offset for p in self.params])
            call = (function, *g, *b, shared_mem, stream, ctypes.addressof(pointers) if self.params else 0, 0)
            cu_launch, failed = _driver.cuLaunchKernel, _kernel_launch_failed(self._context)

            def bound(*new_args: Any, **named: Any) -> None:
                if new_args or named:
                    return relaunch(new_args, named)
                err, = cu_launch(*call)
                if err:
                    failed(err, device, cu_launch, call)

            bound._keep = (buf, pointers, keep)  # type: ignore[attr-defined]
        bound.kernel = self  # type: ignore[attr-defined]
        return bound

    # --- introspection and resources -------------------------------------------------------------

    def _device(self, device: int | None) -> int:
        if device is not None:
            return int(device)
        try:
            return torch.cuda.current_device()
        except (AssertionError, RuntimeError) as exc:  # a CPU build of torch, no GPU
            raise NoDeviceError(f"kernel {self.display_name!r} cannot be loaded: torch cannot use CUDA ({exc})") from None

    def load(self, device: int | None = None) -> Kernel:
        """Load into a device now rather than at its first launch there.

        Raises
        ------
        BinaryError
            The binary was built for an architecture the device cannot run (checked before the
            driver sees it), or the driver refuses the image; the message names the kernel, the
            binary's architecture, the device and its compute capability.
        OutOfResources
            The kernel's fixed block or shared memory exceeds what the device allows.
        NoDeviceError
            There is no GPU (or no CUDA build of torch) to load into.
        """
        self._loader.entry(self._device(device))
        return self

    def attributes(self, device: int | None = None) -> dict[str, int]:
        """Registers, static/dynamic/local/constant memory, max threads per block, PTX and
        binary versions, as the driver reports them for ``device`` (default: current)."""
        function = self._loader.function(self._device(device))
        return {name: _driver.function_attribute(function, name) for name in _driver.FUNCTION_ATTRIBUTES}

    def set_max_dynamic_shared_memory(self, nbytes: int | None = None, device: int | None = None) -> int:
        """Raise the kernel's dynamic shared memory limit on a device; return the new limit.

        With no size the limit becomes the device's opt-in maximum minus the kernel's static
        shared memory. A larger size raises :class:`OutOfResources`.
        """
        return self._loader.set_shared(self._device(device), nbytes)

    def close(self) -> None:
        """Unload the kernel from every device it was loaded into, now.

        Without it, the modules are unloaded when the Kernel and every launch function taken
        from it are dropped. A launch after ``close`` loads the kernel again.
        """
        self._loader.unload()

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<launchpad.Kernel {self.display_name!r} ({len(self.params)} params, {self.image_kind})>"

    # --- artifacts --------------------------------------------------------------------------------

    def to_json(self) -> dict:
        """The artifact :meth:`save` writes, without its ``sha256`` field."""
        return {
            "format": ARTIFACT_FORMAT,
            "version": ARTIFACT_VERSION,
            "name": self.name,
            "display_name": self.display_name,
            "image_kind": self.image_kind,
            "image": base64.b64encode(self.image).decode(),
            "params": [asdict(p) for p in self.params],
            "args": [a.to_json() for a in self.args],
            "plan": self.plan.to_json(),
            "metadata": self.metadata,
        }

    def save(self, path: str | Path) -> Path:
        """Write a self-contained JSON artifact (binary plus launch description, no pickle).

        The artifact records the SHA-256 of its content, which :func:`load` checks. It is
        written to a unique temporary file in the same directory and renamed over ``path``, so
        processes saving to the same path at once each leave a whole artifact, never a mix.
        """
        path = Path(path)
        body = json.loads(json.dumps(self.to_json()))  # as load() will read it back
        text = json.dumps({**body, "sha256": _artifact_digest(body)})
        # a name no other writer uses; created like any file (0o666 less the umask), unlike mkstemp's 0o600
        tmp = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(8)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return path


def _artifact_digest(body: dict) -> str:
    """SHA-256 of an artifact's content in canonical JSON (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _name_in(text: str) -> str:
    """`` (kernel 'name')`` from the start of an artifact that does not parse, or ``""``.

    :meth:`Kernel.save` writes the kernel's names first, so a truncated artifact usually has them.
    """
    m = re.search(r'"display_name": ("(?:[^"\\]|\\.)*")', text[:4096])
    try:
        return f" (kernel {json.loads(m.group(1))!r})" if m else ""
    except ValueError:
        return ""


def load(path: str | Path) -> Kernel:
    """Load an artifact written by :meth:`Kernel.save`; needs neither Triton nor Numba.

    Raises
    ------
    BinaryError
        The file is not a launchpad artifact, is of another format version, or is damaged:
        truncated, or modified after it was written (its SHA-256 does not match). Nothing of
        it is used then.
    LaunchpadError
        The file cannot be read.
    """
    where = f"launchpad artifact {str(path)!r}"
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise LaunchpadError(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        d = json.loads(text)
    except ValueError as exc:
        raise BinaryError(f"{where}{_name_in(text)} is damaged or truncated: it is not valid JSON ({exc})") from None
    if not isinstance(d, dict) or d.get("format") != ARTIFACT_FORMAT:
        raise BinaryError(f"{str(path)!r} is not a launchpad kernel artifact (format {ARTIFACT_FORMAT!r})")
    kernel = d.get("display_name") or d.get("name")
    what = f"{where} (kernel {kernel!r})" if isinstance(kernel, str) else where
    if d.get("version") != ARTIFACT_VERSION:
        raise BinaryError(
            f"{what} has format version {d.get('version')!r}, this launchpad reads version {ARTIFACT_VERSION} "
            "only; save the kernel again with this version"
        )
    digest = d.pop("sha256", None)
    if digest != _artifact_digest(d):
        raise BinaryError(f"{what} was modified or damaged after it was saved: its SHA-256 does not match its content")
    try:
        image = base64.b64decode(d["image"], validate=True)
        return Kernel(
            image,
            d["image_kind"],
            d["name"],
            [Param(**p) for p in d["params"]],
            args=tuple(Arg.from_json(a) for a in d["args"]),
            plan=LaunchPlan.from_json(d["plan"]),
            display_name=d["display_name"],
            metadata=d.get("metadata", {}),
        )
    except (KeyError, TypeError, ValueError) as exc:  # consistent but not what save() writes
        raise BinaryError(f"{what} is not a valid artifact: {type(exc).__name__}: {exc}") from None


def load_cubin(
    data_or_path: bytes | str | Path,
    name: str,
    *,
    signature: str | list[str] | None = None,
) -> Kernel:
    """Make a :class:`Kernel` from a cubin, fatbin or PTX (bytes or path) and the kernel's name.

    The parameter layout is read from the binary; ``signature`` (Triton type words such as
    ``"*fp32, *fp32, i32"``) adds types and must agree with it in count and sizes.

    Raises
    ------
    BinaryError
        The bytes are not a cubin, fatbin or PTX image, are truncated or damaged where that can
        be told without a GPU, or hold no kernel ``name``. (Whether the device can run the
        binary is checked when it is loaded into one, before the driver sees it.)
    ArgumentError
        ``signature`` does not agree with the binary.
    """
    try:
        image, kind = read_image(data_or_path)
    except BinaryError as exc:
        raise BinaryError(f"kernel {name!r}: {exc}") from None
    return from_image(image, kind, name, signature=signature)


def from_image(
    image: bytes,
    kind: str,
    name: str,
    *,
    signature: str | list[str] | tuple[str, ...] | None = None,
    display_name: str | None = None,
    metadata: dict | None = None,
) -> Kernel:
    """A :class:`Kernel` for entry ``name`` of an image whose kind is already known.

    Raises
    ------
    BinaryError
        The image is damaged where that can be told without a GPU, or has no kernel ``name``.
    """
    label = repr(display_name or name) + (f" (symbol {name})" if display_name and display_name != name else "")
    try:
        kernels = kernels_in_image(image, kind)
    except BinaryError as exc:
        raise BinaryError(f"kernel {label}: {exc}") from None
    words = parse_signature(signature) if signature is not None else None
    binary = kernels.get(name)
    if binary is None:
        if kernels or words is None or kind == "cubin":
            known = ", ".join(sorted(kernels)) or "none readable"
            raise BinaryError(f"kernel {label} is not in this {kind} (kernels: {known})")
        params = layout_from_signature(words)  # e.g. a compressed fatbin: trust the signature
    else:
        params = list(binary.params)
        if words is not None:
            params = apply_signature(params, words, display_name or name)
    return Kernel(image, kind, name, params, display_name=display_name, metadata=metadata, binary=binary)
