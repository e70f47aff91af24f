"""The one description of a kernel that every front end produces: :class:`KernelSpec`.

A spec is a frozen value: the binary image, the entry symbol, the exact parameter layout
(:class:`~launchpad.core.params.Param`), how the launch's arguments map onto those parameters
(:class:`Arg`) and what every launch of it fixes (:class:`LaunchPlan`). Front ends (C++,
Triton, Numba) only turn their input into a spec, finished before any Kernel exists;
:class:`~launchpad.Kernel` loads and launches any spec; saved artifacts store a spec as JSON. Both
launch executors (the compiled one and the generated Python one) take their instructions from the
spec alone. A spec may also hold Python objects a kernel needs while it lives (module callbacks,
objects to keep alive, a launch-metadata function for launch hooks): they are part of the value,
but not of its JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import BinaryError, OutOfResources
from .binary import MAX_PARAM_BYTES, kernels_in_image
from .params import Param, apply_signature, layout_from_signature, parse_signature

__all__ = [
    "Arg",
    "KernelSpec",
    "LaunchPlan",
    "ModuleCallbacks",
    "constexpr_positions",
    "names_by_position",
    "plain_args",
    "spec_from_image",
]


@dataclass(frozen=True)
class Arg:
    """How one user-visible argument (or a part of one) reaches the kernel's parameters.

    kind
        ``param``: the value fills parameter ``param``; for an int parameter,
        ``options={"wrap": True}`` takes any int whose bits fit it, signed or unsigned, as Numba
        does (``0xFFFFFFFF`` for an ``int32`` is -1).
        ``const``: a value the kernel was specialized on (a Triton constexpr, an int equal to 1,
        a None); the argument may be left out, and when given must equal ``value``; it fills
        nothing. ``options={"unknown": True}``: the value was not recorded (a Triton cache
        folder), so the argument must be left out; with ``"one_or_none": True`` as well, it
        was an argument Triton specialized (an int equal to 1, or None), and may be either.
        ``expand``: ``CONVERTERS[converter]`` turns the value into the values of the consecutive
        parameters ``params`` (a Numba array, a tensor descriptor, a complex number).
        ``scratch``: a hidden parameter, a per-launch allocation of ``options["size"]`` bytes
        per launched block (0 gives NULL; ``options["zero"]`` zero-fills it); it takes no
        user argument.
    path
        Where the value is: ``(argument position, *indices into nested tuples)``.
    align, multiple_of
        Specialization promises to check: pointer divisible by ``align``, int by ``multiple_of``.
    """

    name: str
    kind: str = "param"
    path: tuple[int, ...] = ()
    param: int = -1
    params: tuple[int, ...] = ()
    value: Any = None
    converter: str = ""
    options: dict = field(default_factory=dict)
    align: int = 0
    multiple_of: int = 0

    def to_json(self) -> dict:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "path": list(self.path)}
        for f in fields(self)[3:]:
            v = getattr(self, f.name)
            default = f.default_factory() if callable(f.default_factory) else f.default
            if v != default:
                out[f.name] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_json(cls, d: dict) -> Arg:
        d = dict(d)
        d["path"] = tuple(d.get("path", ()))
        d["params"] = tuple(d.get("params", ()))
        return cls(**d)


def names_by_position(args: Sequence[Arg]) -> tuple[str, ...]:
    """The name of each argument of a launch, by position (``arg3`` where the front end knows none)."""
    names = [f"arg{i}" for i in range(1 + max((a.path[0] for a in args if a.path), default=-1))]
    for a in args:
        if a.path and a.name:  # every part of a tuple argument carries the argument's name
            names[a.path[0]] = a.name
    return tuple(names)


def constexpr_positions(args: Sequence[Arg]) -> frozenset[int]:
    """The positions that hold only constexprs the binary fixed (Triton's ``BLOCK``): a launch may
    leave them out (or give the value compiled), and a message that lists what to give omits them."""
    fixed = {a.path[0] for a in args if a.path and a.kind == "const"}
    return frozenset(fixed - {a.path[0] for a in args if a.path and a.kind != "const"})


def plain_args(params: tuple[Param, ...] | list[Param]) -> tuple[Arg, ...]:
    """One argument per parameter, in order: the mapping of a C++ kernel."""
    return tuple(Arg(p.name or "", "param", (p.index,), p.index) for p in params)


@dataclass(frozen=True)
class LaunchPlan:
    """What every launch of a kernel fixes.

    block
        A block size the kernel was compiled for (Triton's ``32 * num_warps``); None lets each
        launch choose.
    shared_mem
        Dynamic shared memory of every launch that does not ask for another amount (with a
        fixed block: what the kernel needs).
    cluster, grid_in_clusters, cluster_spread
        Thread block clusters: their shape, whether the launch's grid counts clusters rather
        than blocks (each grid dimension is multiplied by the cluster's), and whether to ask
        the scheduler to spread clusters over the GPU.
    cooperative, pdl
        Cooperative launch (grid-wide synchronization), programmatic dependent launch.
    oversized_shared
        Ask for the driver's oversized shared-memory mode before the opt-in limit (Triton 3.8+).
    max_grid, max_grid_words
        The largest grid dimension a launch takes, where the kernel's own is below the device's
        (cuTile's ``2**24 - 1`` tile blocks); 0: the device's limits alone. Both executors refuse a
        larger one before any driver call, the refusal naming the limit as ``max_grid_words``
        says (``"cuTile's limit of 16777215 tile blocks (...)"``). In the plan, not in a front
        end's Kernel class, so a saved and loaded kernel keeps it.
    """

    block: tuple[int, int, int] | None = None
    shared_mem: int = 0
    cluster: tuple[int, int, int] | None = None
    grid_in_clusters: bool = False
    cluster_spread: bool = False
    cooperative: bool = False
    pdl: bool = False
    oversized_shared: bool = False
    max_grid: int = 0
    max_grid_words: str = ""

    @property
    def grid_scale(self) -> tuple[int, int, int]:
        """What each grid dimension is multiplied by."""
        return self.cluster if self.grid_in_clusters and self.cluster is not None else (1, 1, 1)

    @property
    def non_portable_cluster(self) -> bool:
        """Whether the cluster is larger than the 8 blocks every GPU supports (needs an opt-in)."""
        c = self.cluster
        return c is not None and c[0] * c[1] * c[2] > 8

    def to_json(self) -> dict:
        out = {f.name: (list(v) if isinstance(v, tuple) else v) for f in fields(self) for v in [getattr(self, f.name)]}
        # only where set: other kernels' artifacts stay readable by earlier launchpads, which refuse
        # a cuTile one (an unknown field) rather than launch it without its limit
        if not self.max_grid:
            del out["max_grid"], out["max_grid_words"]
        return out

    @classmethod
    def from_json(cls, d: dict) -> LaunchPlan:
        d = dict(d)
        # launchpad 0.1 (artifact version 2): grid_multiplier for a cluster along x, a stored
        # non_portable_cluster (now derived)
        multiplier = d.pop("grid_multiplier", 1)
        d.pop("non_portable_cluster", None)
        if multiplier != 1:
            d["grid_in_clusters"] = True
        fields_: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()}
        return cls(**fields_)


@dataclass(frozen=True)
class ModuleCallbacks:
    """Functions to run with each module a kernel loads, as numba-cuda runs a linked file's
    ``setup_callback`` / ``teardown_callback``: each gets the loaded cuda.core ``ObjectCode``
    (its ``handle`` is the ``CUlibrary``), setup right after the load on that device (before the
    first launch), teardown before the module is unloaded."""

    setup: tuple[Callable[[Any], Any], ...] = ()
    teardown: tuple[Callable[[Any], Any], ...] = ()


@dataclass(frozen=True)
class KernelSpec:
    """Everything about a kernel that launching it needs, as one serializable value.

    Attributes
    ----------
    image, image_kind
        The binary (``"cubin"``, ``"fatbin"`` or ``"ptx"``).
    name
        The entry symbol in the binary.
    display_name
        How messages name the kernel (a template expression, a Triton function's name).
    params
        The binary's exact parameter list.
    args
        How the launch's arguments map onto ``params``.
    plan
        What every launch fixes.
    metadata
        Front-end facts kept with the kernel (JSON only); not used to launch.
    callbacks
        Functions to run with each module loaded and before it is unloaded (what numba-cuda's
        linked files ask for); a spec with callbacks cannot be saved.
    keepalive
        Objects the compiled code refers to by address (device arrays a Numba kernel captured
        from globals), kept alive as long as the kernel.
    launch_metadata
        The function launch hooks call for a launch's metadata (a Triton JIT function's
        ``launch_metadata``), or None.

    ``callbacks``, ``keepalive`` and ``launch_metadata`` are Python objects: they are not part of
    the JSON an artifact stores, nor of equality. The image is left out of the repr (it is the
    binary, often hundreds of KB).
    """

    image: bytes = field(repr=False)
    image_kind: str
    name: str
    params: tuple[Param, ...]
    args: tuple[Arg, ...] = ()
    plan: LaunchPlan = LaunchPlan()
    display_name: str = ""
    metadata: dict = field(default_factory=dict, compare=False)
    callbacks: ModuleCallbacks | None = field(default=None, compare=False)
    keepalive: tuple = field(default=(), compare=False)
    launch_metadata: Callable[..., Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "args", tuple(self.args) or plain_args(self.params))
        object.__setattr__(self, "display_name", self.display_name or self.name)
        object.__setattr__(self, "metadata", dict(self.metadata))
        if self.param_bytes > MAX_PARAM_BYTES:
            raise OutOfResources(
                f"kernel {self.display_name!r} takes {self.param_bytes} bytes of parameters; CUDA allows at most "
                f"{MAX_PARAM_BYTES} (from CUDA 12.1, on Volta and newer GPUs)"
            )

    @property
    def param_bytes(self) -> int:
        """The size of the kernel's parameter block, in bytes."""
        return max((p.offset + p.size for p in self.params), default=0)

    @property
    def arg_count(self) -> int:
        """How many arguments a launch takes."""
        return 1 + max((a.path[0] for a in self.args if a.path), default=-1)

    @property
    def arg_names(self) -> tuple[str, ...]:
        """The name of each argument, by position (``arg3`` where the front end knows none)."""
        return names_by_position(self.args)

    def replace(self, **changes: Any) -> KernelSpec:
        return replace(self, **changes)

    def to_json(self) -> dict:
        """The spec as JSON-able data (the image as base64), what artifacts store."""
        import base64

        return {
            "name": self.name,
            "display_name": self.display_name,
            "image_kind": self.image_kind,
            "image": base64.b64encode(self.image).decode(),
            "params": [p.to_json() for p in self.params],
            "args": [a.to_json() for a in self.args],
            "plan": self.plan.to_json(),
            "metadata": self.metadata,
        }

    @classmethod
    def from_json(cls, d: dict) -> KernelSpec:
        """The inverse of :meth:`to_json`; raises KeyError, TypeError or ValueError for bad data."""
        import base64

        return cls(
            image=base64.b64decode(d["image"], validate=True),
            image_kind=d["image_kind"],
            name=d["name"],
            params=tuple(Param(**p) for p in d["params"]),
            args=tuple(Arg.from_json(a) for a in d["args"]),
            plan=LaunchPlan.from_json(d["plan"]),
            display_name=d["display_name"],
            metadata=d.get("metadata", {}),
        )


def spec_from_image(
    image: bytes,
    kind: str,
    name: str,
    *,
    signature: str | Sequence[str] | None = None,
    display_name: str | None = None,
    metadata: dict | None = None,
) -> KernelSpec:
    """The spec of entry ``name`` of an image: its parameters read from the binary, typed by
    ``signature``, one argument per parameter (front ends replace what they know better).

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
        found = layout_from_signature(words)  # e.g. a compressed fatbin: trust the signature
    else:
        found = list(binary.params)
        if words is not None:
            found = apply_signature(found, words, display_name or name)
    return KernelSpec(image, kind, name, tuple(found), display_name=display_name or name, metadata=metadata or {})
