"""``Kernel``: a :class:`~launchpad.core.spec.KernelSpec` made launchable.

Every front end (C++, Triton, Numba) turns its input into a finished spec; ``Kernel(spec)`` owns
the per-device loader (:mod:`launchpad.core.loader`) and the launch path built for that spec once
(:mod:`launchpad.launch.executor`: the compiled executor where it is built, the generated Python one
otherwise). The image is loaded into a device on the first launch there. The ways to a Kernel
that need no front end live here too: a binary (:func:`load_cubin`, :func:`from_image`) and a
saved artifact (:func:`load`).
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import torch

from .core import artifact as _artifact
from .core import driver as _driver
from .core.binary import BinaryKernel, kernels_in_image, read_image
from .core.loader import Loader
from .core.spec import KernelSpec, ModuleCallbacks, spec_from_image
from .errors import ArgumentError, ArgumentTypeError, BinaryError, MissingFileError, NoDeviceError
from .launch import config as _config
from .launch import executor as _executor
from .launch.checks import Context
from .launch.refusals import MISSING, Fail
from .launch.traced import TRACED, BoundLaunch, LaunchFunction, Traced, dynamo_compiling, launch_first, new_key

__all__ = ["KERNEL_TYPES", "Kernel", "from_image", "load", "load_cubin"]

#: ``kernel[...]`` configurations kept per kernel; a loop over ever-new grids does not grow it
#: further (the cache is emptied when full).
_CONFIG_CACHE_SIZE = 256

#: Kernel classes by ``spec.metadata["frontend"]`` for front ends whose launches are configured their
#: own way (Warp's ``kernel[dim]``), registered by them on import: what :func:`load` makes of their
#: artifacts.
KERNEL_TYPES: dict[str, type[Kernel]] = {}


class Kernel:
    """A GPU kernel with its parameter layout and a launch path specialized for it.

    Make one with :func:`load_cubin`, :func:`launchpad.compile_cuda`, :func:`launchpad.from_triton`,
    :func:`launchpad.from_numba`, :func:`launchpad.load`, or from a
    :class:`~launchpad.KernelSpec`. The image is loaded into a device on the first launch there.

    Parameters
    ----------
    spec : KernelSpec
        The kernel.
    compiled : bool, optional
        Which executor launches it: the compiled one (True), the Python one (False), or the
        compiled one where it is built and not switched off by ``LAUNCHPAD_PYTHON_LAUNCH=1``
        (None, the default). Both give the same launches and errors.
    callbacks : ModuleCallbacks, optional
        Functions to run with each module loaded and before it is unloaded (what numba-cuda's
        linked files ask for), in place of the spec's own ``callbacks``; a kernel with callbacks
        cannot be saved.

    Attributes
    ----------
    spec : KernelSpec
        Everything about the kernel, as one value (what :meth:`save` writes).
    name, display_name, params, args, plan, image, image_kind, metadata
        The spec's fields: the entry symbol, how messages name the kernel, the binary's exact
        parameter list (:class:`~launchpad.Param`; ``type`` None where only the size is known),
        how the arguments map onto it, what every launch fixes, the binary and front-end facts.
    """

    def __init__(self, spec: KernelSpec, *, compiled: bool | None = None, callbacks: ModuleCallbacks | None = None):
        if not isinstance(spec, KernelSpec):
            raise ArgumentTypeError(f"Kernel(spec) takes a launchpad.KernelSpec, got {type(spec).__name__}")
        if callbacks is not None:
            spec = spec.replace(callbacks=callbacks)
        self.spec = spec
        self._loader = Loader(spec)
        self._context = Context(spec.display_name, spec.params, spec.args)
        self._executor = _executor.build(spec, self._loader, compiled=compiled)
        self._trace(None)
        self._configs: dict[Any, Callable[..., None]] = {}
        self._configs_lock = threading.Lock()
        self._fixed_block = spec.plan.block  # (see _config)

    name = property(lambda self: self.spec.name, doc="The entry symbol in the binary.")
    display_name = property(lambda self: self.spec.display_name, doc="How messages name the kernel.")
    params = property(lambda self: self.spec.params, doc="The binary's parameters (tuple of Param).")
    args = property(lambda self: self.spec.args, doc="How the arguments map onto the parameters.")
    plan = property(lambda self: self.spec.plan, doc="What every launch fixes (LaunchPlan).")
    image = property(lambda self: self.spec.image, doc="The binary image.")
    image_kind = property(lambda self: self.spec.image_kind, doc="``cubin``, ``fatbin`` or ``ptx``.")
    metadata = property(lambda self: self.spec.metadata, doc="Front-end facts (JSON), not used to launch.")

    def _trace(self, writes: tuple[str, ...] | None) -> None:
        traced = Traced(new_key(), self.spec, self._executor.launch, writes)
        TRACED[traced.key] = traced
        self._traced = traced
        # launch_first bound to the pair: no Python frame in eager; Dynamo traces its stand-in
        self.launch = cast(LaunchFunction, types.MethodType(launch_first, (traced.launch, traced)))

    @property
    def writes(self) -> tuple[str, ...] | None:
        """The tensor arguments declared written, by name, for ``torch.compile``; None (default):
        derived from the kernel (docs/pytorch.md: a C++ pointer to ``const`` is read, every other
        pointer written). Set it to tell the compiler exactly which it writes; a tensor it writes
        that is not declared is a wrong result under torch.compile."""
        return self.launch.__self__[1].writes  # type: ignore[attr-defined]

    @writes.setter
    def writes(self, names: Sequence[str] | None) -> None:
        if names is not None:
            if isinstance(names, str) or not all(isinstance(n, str) for n in names):
                raise ArgumentError(f"kernel {self.display_name!r}: writes takes a sequence of argument names, "
                                    f"got {names!r}")  # fmt: skip
            known = {a.name for a in self.args}
            unknown = [n for n in names if n not in known]
            if unknown:
                raise ArgumentError(f"kernel {self.display_name!r}: writes names {unknown[0]!r}, no argument of it; "
                                    f"its arguments: {', '.join(a.name for a in self.args)}")  # fmt: skip
            names = tuple(names)
        self._trace(names)

    @functools.cached_property
    def binary(self) -> BinaryKernel | None:
        """What the binary says about the kernel: registers, static shared memory, architecture."""
        return kernels_in_image(self.image, self.image_kind).get(self.name)

    @property
    def launch_path(self) -> str:
        """``"compiled"`` or ``"python"``: which executor this kernel's launches take."""
        return "compiled" if self._executor.compiled is not None else "python"

    @property
    def fallbacks(self) -> int:
        """How many launches the compiled executor handed to the Python one (0 on the Python path).

        It counts every handoff, including those by design: a launch the Python executor refuses
        (it words every refusal), one with arguments by name or options other than ``stream`` and
        ``shared_mem``, a set launch hook. ``LAUNCHPAD_NO_FALLBACK=1`` makes a handoff the Python
        executor then completes (a silent slow path) raise :class:`~launchpad.errors.LaunchpadError`
        after that launch, so a test can assert there was none; a refusal raises its own error.
        """
        compiled = self._executor.compiled
        return compiled.fallbacks if compiled is not None else 0

    # An attribute set per instance (in _trace), not a method: a method of that name on the class
    # would send every ``k.launch`` read down Python's slower attribute path (found on the class,
    # then shadowed by the instance's); on the GPU machine up to ~100 ns in one run, within the
    # noise in another (docs/benchmarks.md).
    launch: LaunchFunction
    """Launch the kernel: ``k.launch(grid, block, *args, shared_mem=0, stream=None, cluster=None,
    cooperative=False, pdl=False, **named)``.

    Parameters
    ----------
    grid, block : int or tuple of 1-3 ints
        Blocks in the grid and threads in a block. Kernels whose block is fixed at compile
        time (Triton) take ``block=None``. A grid with a zero dimension launches nothing.
    *args, **named
        The kernel's arguments, positional or by name: tensors (or objects with
        ``data_ptr()`` or ``__cuda_array_interface__``, pinned CPU tensors, int addresses,
        None) for pointers; ints, floats, bools and numpy scalars for scalars; ``bytes`` or
        numpy structured scalars for by-value structs. Arguments the kernel was specialized
        on (Triton constexprs) may be left out; when given they must match.
    shared_mem : int
        Bytes of dynamic shared memory; above 48 KB the kernel's limit is raised once.
    stream : optional
        torch.cuda.Stream, cuda.core Stream, int handle (0: the legacy default stream) or
        object with ``__cuda_stream__``; None (default): torch's current stream on the
        current device.
    cluster, cooperative, pdl
        Launch attributes (thread block cluster dims, cooperative launch, programmatic
        dependent launch); any of them makes the launch go through ``cuLaunchKernelEx``.

    Raises
    ------
    ArgumentError
        Before any driver call, for any invalid argument or configuration.
    """

    def __call__(self, *args: Any, **named: Any) -> None:
        """A kernel is launched, not called: refused with the ways to launch it (a ``TypeError``)."""
        fixed = self._fixed_block is not None  # Triton: the block is compiled in, k[grid] takes the grid alone
        config, block = ("grid", "None") if fixed else ("grid, block", "block")
        raise ArgumentTypeError(
            f"kernel {self.display_name!r} is launched, not called like a function: write k[{config}](...) with "
            f"the same {len(args) + len(named)} arguments, or k.launch(grid, {block}, ...)"
            + (
                ""
                if fixed
                else "; k[grid, block, stream, shared_mem](...) also picks the stream and dynamic shared memory"
            )
        )

    def __getitem__(self, config: Any) -> Callable[..., None]:
        """A launch with its configuration fixed, as Numba and Triton spell it.

        Kernels with a compiled-in block (Triton) take the grid alone, as Triton does:
        ``kernel[grid](*args)``, where ``kernel[4, 2]`` is the grid (4, 2, 1). Others take
        ``kernel[grid, block]``, ``kernel[grid, block, stream]`` or
        ``kernel[grid, block, stream, shared_mem]`` (Numba's syntax); a stream of None is torch's
        current stream and an int a raw handle (0: the legacy default stream), as in
        :meth:`launch`. The callable for each configuration is made once and reused.
        """
        if dynamo_compiling():  # under torch.compile: Kernel.launch, which Dynamo traces as the operator
            return self._traced_config(config)
        try:
            return self._configs[config]
        except KeyError:
            pass
        except TypeError:  # unhashable (a list): not cached
            return self._configure(config)
        launch = self._configure(config)
        if not _config.cacheable(config):  # (its refusal, made at the call, would answer an equal config of ints)
            return launch
        with self._configs_lock:
            if len(self._configs) >= _CONFIG_CACHE_SIZE:  # grids that change every call: stay bounded
                self._configs.clear()
            self._configs[config] = launch
        return launch

    def _traced_config(self, config: Any) -> Callable[..., None]:
        """``kernel[config]`` as a partial of :meth:`launch`, which Dynamo traces (:mod:`launchpad.tracing`)."""
        grid, block, options = self._config(config)
        return functools.partial(self.launch, grid, block, **options)

    def _configure(self, config: Any) -> Callable[..., None]:
        grid, block, options = self._config(config)
        return self._executor.configure(grid, block, options)

    def _config(self, config: Any) -> tuple[Any, Any, dict[str, Any]]:
        """``kernel[config]``'s grid, block and options (see :meth:`__getitem__`). Reads the plain
        attribute ``_fixed_block``: under torch.compile every attribute read is a guard checked on
        each call of the compiled function, a property's a Python call."""
        if self._fixed_block is not None:
            return config, None, {}
        if not isinstance(config, (tuple, list)) or not 2 <= len(config) <= 4:
            raise ArgumentError(f"kernel {self.spec.display_name!r}: use kernel[grid, block(, stream(, shared_mem))]")
        options: dict[str, Any] = {}
        if len(config) > 2 and config[2] is not None:
            options["stream"] = config[2]
        if len(config) > 3:
            options["shared_mem"] = config[3]
        return config[0], config[1], options

    def bind(self, grid: Any = MISSING, block: Any = MISSING, *args: Any, **options: Any) -> Callable[..., None]:
        """Validate and pack one launch now; return a function that repeats it.

        The returned ``bound()`` issues exactly that launch (same arguments, grid, block, shared
        memory and stream, the stream resolved now) with nothing left to compute.
        ``bound(*args, **named)`` launches with the leading arguments, or those named,
        replaced for that call only; it is checked like :meth:`launch`. Called inside a function
        compiled by ``torch.compile``, it is traced as :meth:`launch` with the bound arguments,
        on torch's current stream then (binding with ``stream=`` is refused there).
        """
        if grid is MISSING or block is MISSING:
            Fail.no_config(self._context, self.spec.plan, grid, block, "bind")
        bound = self._executor.bind(self, grid, block, args, options)
        # (launch_first, as Kernel.launch: in eager one C call more; Dynamo traces its stand-in)
        return types.MethodType(launch_first, (bound, BoundLaunch(self._traced, grid, block, args, options)))

    # --- introspection and resources -------------------------------------------------------------

    def _device(self, device: int | None) -> int:
        if device is not None:
            return int(device)
        try:
            return torch.cuda.current_device()
        except (AssertionError, RuntimeError) as exc:  # a CPU build of torch, no GPU
            raise NoDeviceError(
                f"kernel {self.display_name!r} cannot be loaded: torch cannot use CUDA ({exc})"
            ) from None

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
        """Unload the kernel from every device it was loaded into.

        A module is unloaded at once unless a launch on another thread is using it, then as soon
        as that launch returns (or a ``bind(...)`` launch that holds it goes). Without ``close``,
        the modules are unloaded when the Kernel and every launch function taken from it are
        dropped. A launch after ``close`` loads the kernel again.
        """
        self._loader.unload()
        self._executor.forget()

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        fallbacks = self.fallbacks
        extra = f", {fallbacks} fallbacks to the Python executor" if fallbacks else ""
        return f"<launchpad.Kernel {self.display_name!r} ({len(self.params)} params, {self.image_kind}{extra})>"

    # --- artifacts --------------------------------------------------------------------------------

    def to_json(self) -> dict:
        """The artifact :meth:`save` writes, without its ``sha256`` field."""
        return _artifact.body(self.spec)

    def save(self, path: str | Path) -> Path:
        """Write a self-contained JSON artifact (binary plus launch description, no pickle).

        The artifact records the SHA-256 of its content, which :func:`launchpad.load` checks. It
        is written to a unique temporary file in the same directory and renamed over ``path``,
        so processes saving to the same path at once each leave a whole artifact, never a mix.

        Raises
        ------
        LaunchpadError
            The kernel runs module callbacks when it loads (an artifact holds no Python code).
        """
        return _artifact.save(self.spec, path)


def load(path: str | Path) -> Kernel:
    """Load an artifact written by :meth:`Kernel.save <launchpad.Kernel.save>` as a
    :class:`~launchpad.Kernel`; needs neither Triton nor Numba.

    Raises
    ------
    MissingFileError
        There is no file at ``path`` (also a ``FileNotFoundError``).
    BinaryError
        The file is not a launchpad artifact (the message says what one is and how to make one),
        is of another format version, or is damaged.
    LaunchpadError
        The file cannot be read.
    """
    spec = _artifact.read(path)
    return KERNEL_TYPES.get(str(spec.metadata.get("frontend", "")), Kernel)(spec)


def load_cubin(
    data_or_path: bytes | str | Path,
    name: str,
    *,
    signature: str | list[str] | None = None,
) -> Kernel:
    """Make a :class:`Kernel` from a cubin, fatbin or PTX (bytes or path) and the kernel's name.

    The parameter layout is read from the binary; ``signature`` (Triton type words such as
    ``"*fp32, *fp32, i32"``) adds types and must agree with it in count and sizes. Without one,
    only sizes are known: ``Kernel.params`` has ``type=None`` and values are packed by size.

    Raises
    ------
    BinaryError
        The bytes are not a cubin, fatbin or PTX image, are truncated or damaged where that can
        be told without a GPU, or hold no kernel ``name``.
    MissingFileError
        ``data_or_path`` is a path and there is no file there. (Whether the device can run the
        binary is checked when it is loaded into one, before the driver sees it.)
    ArgumentError
        ``signature`` does not agree with the binary.
    """
    try:
        image, kind = read_image(data_or_path)
    except BinaryError as exc:
        raise BinaryError(f"kernel {name!r}: {exc}") from None
    except MissingFileError as exc:
        raise MissingFileError(f"kernel {name!r}: {exc}", exc.path) from None
    return Kernel(spec_from_image(image, kind, name, signature=signature))


def from_image(
    image: bytes,
    kind: str,
    name: str,
    *,
    signature: str | Sequence[str] | None = None,
    display_name: str | None = None,
) -> Kernel:
    """A :class:`Kernel` for entry ``name`` of an image whose kind (``cubin``, ``fatbin``, ``ptx``)
    is known; see :func:`load_cubin`."""
    return Kernel(spec_from_image(image, kind, name, signature=signature, display_name=display_name))
