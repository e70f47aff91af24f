"""``Kernel``: one loaded-on-demand GPU kernel with a specialized launch path.

Every front end (C++, Triton, Numba) turns its input into the same description: a binary image,
the entry name, the parameter layout (:class:`~launchpad._layout.Param`), how user arguments map
onto parameters (:class:`~launchpad._launcher.Arg`) and what each launch fixes
(:class:`~launchpad._launcher.LaunchPlan`). :class:`Kernel` loads the image lazily into each
device it is launched on and launches it through a function generated for it once.
"""

from __future__ import annotations

import base64
import ctypes
import functools
import json
import threading
import weakref
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from . import _driver
from ._launcher import Arg, Context, LaunchPlan, RawStream, build_launch, plain_args
from ._layout import (
    BinaryKernel,
    Param,
    apply_signature,
    kernels_in_image,
    layout_from_signature,
    parse_signature,
    read_image,
)
from .errors import ArgumentError, LaunchpadError, OutOfResources

__all__ = ["Kernel", "from_image", "load", "load_cubin"]

ARTIFACT_FORMAT = "launchpad.kernel"
ARTIFACT_VERSION = 1
_DEFAULT_SHARED_LIMIT = 48 * 1024


class _Loader:
    """Per-device module and function handles of one image; unloads them when finalized.

    Kept apart from :class:`Kernel` so that the generated launch functions, which reference it,
    do not keep the Kernel itself alive.
    """

    def __init__(self, image: bytes, name: str, display_name: str, plan: LaunchPlan):
        self.image = image
        self.name = name
        self.display_name = display_name
        self.plan = plan
        self.modules: dict[int, tuple[Any, Any]] = {}  # device -> (module, function)
        self.entries: dict[int, tuple[Any, int, int]] = {}  # shared with the generated launchers
        self.coresident: dict[tuple[int, int, int], int] = {}  # (device, threads, smem) -> max blocks
        self.lock = threading.Lock()

    def function(self, device: int) -> Any:
        if device not in self.modules:
            self.entry(device)
        return self.modules[device][1]

    def entry(self, device: int) -> tuple[Any, int, int]:
        """Load into ``device`` if needed; return ``(function, max threads, shared limit)``."""
        with self.lock:
            if device in self.entries:
                return self.entries[device]
            torch.cuda.init()  # torch's context is the primary context launchpad shares
            if device not in self.modules:
                self.modules[device] = _driver.load_function(self.image, self.name, device)
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

    def available_shared(self, device: int, function: Any) -> tuple[int, int, int]:
        optin = _driver.device_attribute(device, "max_shared_memory_per_block_optin")
        static = _driver.function_attribute(function, "shared_size_bytes")
        return optin - static, optin, static

    def _raise_shared(self, device: int, function: Any, nbytes: int) -> int:
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
        _driver.launch_ex(
            function, grid, block, shared_mem, stream, params, device,
            cluster=cluster, cooperative=cooperative, pdl=pdl or plan.pdl, spread=plan.cluster_spread,
        )  # fmt: skip

    def unload(self) -> None:
        with self.lock:
            self.entries.clear()
            self.coresident.clear()
            modules, self.modules = self.modules, {}
        for device, (module, _) in modules.items():
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
        self._loader = _Loader(image, name, self.display_name, self.plan)
        self._finalizer = weakref.finalize(self, self._loader.unload)
        self._finalizer.atexit = False  # the driver may be gone at exit; the process frees it all
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
            cu_launch, failed = _driver.cuLaunchKernel, _driver.launch_failed

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
        return torch.cuda.current_device() if device is None else int(device)

    def load(self, device: int | None = None) -> Kernel:
        """Load into a device now rather than at its first launch there."""
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
        """Unload the kernel from every device it was loaded into."""
        self._finalizer()

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<launchpad.Kernel {self.display_name!r} ({len(self.params)} params, {self.image_kind})>"

    # --- artifacts --------------------------------------------------------------------------------

    def to_json(self) -> dict:
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
        """Write a self-contained JSON artifact (binary plus launch description, no pickle)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json()))
        tmp.replace(path)
        return path


def load(path: str | Path) -> Kernel:
    """Load an artifact written by :meth:`Kernel.save`; needs neither Triton nor Numba."""
    try:
        d = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise LaunchpadError(f"cannot read launchpad artifact {str(path)!r}: {exc}") from None
    if d.get("format") != ARTIFACT_FORMAT or d.get("version") != ARTIFACT_VERSION:
        raise LaunchpadError(f"{str(path)!r} is not a launchpad kernel artifact (version {ARTIFACT_VERSION})")
    return Kernel(
        base64.b64decode(d["image"]),
        d["image_kind"],
        d["name"],
        [Param(**p) for p in d["params"]],
        args=tuple(Arg.from_json(a) for a in d["args"]),
        plan=LaunchPlan.from_json(d["plan"]),
        display_name=d["display_name"],
        metadata=d.get("metadata", {}),
    )


def load_cubin(
    data_or_path: bytes | str | Path,
    name: str,
    *,
    signature: str | list[str] | None = None,
) -> Kernel:
    """Make a :class:`Kernel` from a cubin, fatbin or PTX (bytes or path) and the kernel's name.

    The parameter layout is read from the binary; ``signature`` (Triton type words such as
    ``"*fp32, *fp32, i32"``) adds types and must agree with it in count and sizes.
    """
    image, kind = read_image(data_or_path)
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
    """A :class:`Kernel` for entry ``name`` of an image whose kind is already known."""
    kernels = kernels_in_image(image, kind)
    words = parse_signature(signature) if signature is not None else None
    binary = kernels.get(name)
    if binary is None:
        if kernels or words is None:
            known = ", ".join(sorted(kernels)) or "none readable"
            raise LaunchpadError(f"kernel {name!r} is not in this {kind} (kernels: {known})")
        params = layout_from_signature(words)  # e.g. a compressed fatbin: trust the signature
    else:
        params = list(binary.params)
        if words is not None:
            params = apply_signature(params, words, display_name or name)
    return Kernel(image, kind, name, params, display_name=display_name, metadata=metadata, binary=binary)
