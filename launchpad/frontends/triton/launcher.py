"""``triton_launcher``: a drop-in for ``jit_fn[grid](...)`` that launches through launchpad.

Per call, a dispatcher binds the arguments to the JIT function's parameters, computes Triton's
specialization key (tensor dtype and 16-byte alignment, int width, ``== 1`` and divisibility by
16, constexpr values), finds the :class:`~launchpad.Kernel` built for it and launches it; it
compiles through Triton only for a new key (see :mod:`launchpad.frontends.triton.frontend` for how a compiled
kernel becomes a Kernel). Where the compiled module is built, that dispatcher is C
(``_claunch.Dispatcher``) and the kernel launches without a Python frame; the Python dispatcher
here takes every call it hands back (tuples, descriptors, compile options, new keys) and is the
whole path otherwise. ``@triton.autotune`` and ``@triton.heuristics`` wrappers are
:mod:`launchpad.frontends.triton.autotune`'s.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

import torch

from ...errors import ArgumentError
from ...kernel import Kernel
from ...launch import executor as _executor
from ...launch.traced import dynamo_compiling
from .autotune import wrap
from .frontend import _from_compiled, _run_options, _target, source_class, with_source
from .versions import check_installed

__all__ = ["TritonLauncher", "triton_launcher"]

_REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "<required>"})()
_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _value_key(x: Any) -> Any:
    """The specialization key of one runtime value (at least as fine as Triton's), or raise
    TypeError for a value only Triton's own binder can key."""
    c = x.__class__
    if c in _TENSORS:
        return (x.dtype, x.data_ptr() % 16 == 0)
    if c is int:
        width = "i32" if -(2**31) <= x < 2**31 else "i64" if -(2**63) <= x < 2**63 else "u64"
        return (width, x == 1, x % 16 == 0)
    if x is None or c is bool or c is float:
        return (c,)
    if c is tuple:
        return (c, tuple(_value_key(v) for v in x))
    if c.__name__ in ("TensorDescriptor", "TensorDescriptorIm2Col") and hasattr(x, "block_shape"):
        base = x.base
        return (c, base.dtype, base.data_ptr() % 16 == 0, tuple(x.block_shape), len(x.shape),
                getattr(x, "padding", None), getattr(x, "round_f32_to_tf32", None))  # fmt: skip
    raise TypeError(c)


class TritonLauncher:
    """A drop-in for ``jit_fn[grid](*args, **kwargs)`` that launches through launchpad.

    ``launcher[grid](*args, **kwargs)`` takes the JIT function's own call (positional or by
    name, defaults applied, compile options such as ``num_warps`` as keywords) and ``grid`` as
    Triton does: a tuple, or a callable given the dict of the arguments. It returns None rather
    than the CompiledKernel. Triton's launch hooks run as Triton runs them; its pre-run hooks and
    changed-global checks do not; changing ``TRITON_DEBUG``-style knobs after a specialization's
    first launch does not recompile it; a process whose GPUs differ in architecture needs one
    launcher per architecture (``target``).

    Attributes
    ----------
    fn
        The jit function.
    options
        Compile options every launch uses (an autotuning config's ``num_warps``...).
    kernels : dict
        Kernel per Triton cache key (specialization and options), as compiled so far.
    run : callable
        ``run(grid, *args, **kwargs)``: the dispatcher (compiled where built).
    """

    def __init__(self, jit_fn: Any, target: Any = None, options: dict | None = None):
        check_installed()
        if not hasattr(jit_fn, "arg_names") or not hasattr(jit_fn, "params") or not hasattr(jit_fn, "signature"):
            raise ArgumentError(
                f"triton_launcher needs a @triton.jit function (or one wrapped by @triton.autotune or "
                f"@triton.heuristics), got {type(jit_fn).__name__}"
            )
        self.fn = jit_fn
        self.target = target
        self.options = dict(options or {})
        self.kernels: dict[str, Kernel] = {}
        self._keyed: dict[Any, Kernel] = {}  # the Python dispatcher's table
        self._children: dict[tuple, TritonLauncher] = {}  # per set of compile options
        self._lock = threading.RLock()
        self._state: tuple | None = None  # (target, backend, binder), made on the first miss
        params = list(jit_fn.params)
        self._names = tuple(p.name for p in params)
        self._defaults = tuple(p.default if p.has_default else _REQUIRED for p in params)
        self._constexpr = tuple(bool(p.is_constexpr) for p in params)
        self._index = {name: i for i, name in enumerate(self._names)}
        self.run: Callable[..., None] = self._dispatch
        if _executor.launch_path()[0] == "compiled":
            self.run = _executor._claunch.Dispatcher(
                self._names, self._defaults, _REQUIRED, self._constexpr, self._variant, self._dispatch,
                _executor._exchange_api_types(),
            )  # fmt: skip

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        if dynamo_compiling():  # under torch.compile: Triton's own launch, which Dynamo traces as a user kernel
            return functools.partial(self.fn[grid], **self.options) if self.options else self.fn[grid]
        return functools.partial(self.run, grid)

    def __repr__(self) -> str:
        return f"<launchpad.TritonLauncher {self.fn.__name__} ({len(self.kernels)} kernels)>"

    def with_options(self, options: dict) -> TritonLauncher:
        """The launcher of this function with compile options fixed (made once per set)."""
        key = tuple(sorted(options.items(), key=lambda kv: kv[0]))
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children.get(key)
                if child is None:
                    child = self._children[key] = TritonLauncher(self.fn, self.target, {**self.options, **options})
                    child.kernels = self.kernels  # one table: Triton's cache key includes the options
                    child._lock = self._lock
        return child

    def warmup(self, *args: Any, grid: Any = None, **kwargs: Any) -> Kernel:
        """Compile (or find) the kernel for these arguments without launching; return it.

        Takes the arguments of a launch (``grid`` is accepted, as Triton's ``warmup`` takes it,
        and ignored).
        """
        values, options = self._bind(args, kwargs)
        if options:
            return self.with_options(options).warmup(*values)
        return self._kernel(values)

    # --- the Python dispatcher ---------------------------------------------------------------------

    def _bind(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The value of every parameter (defaults applied), and the compile options given."""
        names = self._names
        if len(args) > len(names):
            self._binding_error(args, kwargs)
        values = list(args) + [_REQUIRED] * (len(names) - len(args))
        options = {}
        for key, value in kwargs.items():
            i = self._index.get(key)
            if i is None:
                options[key] = value
            elif values[i] is not _REQUIRED:
                self._binding_error(args, kwargs)
            else:
                values[i] = value
        for i, v in enumerate(values):
            if v is _REQUIRED:
                if self._defaults[i] is _REQUIRED:
                    self._binding_error(args, kwargs)
                values[i] = self._defaults[i]
        return tuple(values), options

    def _binding_error(self, args: tuple, kwargs: dict) -> None:
        """Raise the TypeError Triton's own binder raises for this call (Python's wording)."""
        self._setup()[2](*args, **kwargs)
        raise TypeError(f"{self.fn.__name__}() cannot bind these arguments")  # (the binder raised already)

    def _dispatch(self, grid: Any, *args: Any, **kwargs: Any) -> None:
        values, options = self._bind(args, kwargs)
        if options:
            return self.with_options(options)._dispatch(grid, *values)
        kernel = self._kernel(values)
        if grid.__class__ is not tuple and callable(grid):
            grid = grid(dict(zip(self._names, values)))
        kernel.launch(grid, None, *values)

    def _kernel(self, values: tuple) -> Kernel:
        try:
            key = tuple(v if c else _value_key(v) for v, c in zip(values, self._constexpr))
            hash(key)
        except TypeError:  # a value only Triton's binder keys: it decides every time
            return self._resolve(values)
        kernel = self._keyed.get(key)
        if kernel is None:
            kernel = self._keyed[key] = self._resolve(values)
        return kernel

    def _variant(self, values: tuple) -> Any:
        """The compiled dispatcher's miss: the launch of the variant for these values."""
        return self._resolve(values)._executor.launch  # the executor's own (a Launcher), not the bound method

    # --- Triton's own specialization and compilation, on a miss --------------------------------

    def _setup(self) -> tuple:
        if self._state is None:
            from triton.compiler import make_backend
            from triton.runtime.jit import create_function_from_signature

            target = _target(self.target)
            backend = make_backend(target)
            binder = create_function_from_signature(self.fn.signature, self.fn.params, backend)
            self._state = (target, backend, binder)
        return self._state

    def _resolve(self, values: tuple) -> Kernel:
        with self._lock:
            target, backend, binder = self._setup()
            kwargs = _run_options(self.fn, self.options, backend)
            bound, specialization, options = binder(*values, **kwargs)
            cache_key = str(specialization) + str(options)  # Triton's own key (JITFunction.run)
            kernel = self.kernels.get(cache_key)
            if kernel is None:
                compiled = self._compile(target, backend, kwargs, bound, specialization, options)
                kernel = self.kernels[cache_key] = Kernel(with_source(_from_compiled(compiled), self.fn))
            return kernel

    def _compile(self, target, backend, kwargs, bound, specialization, options) -> Any:
        import triton
        from triton._utils import find_paths_if, get_iterable_path

        fn = self.fn
        if hasattr(fn, "_pack_args"):  # Triton 3.5+
            options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
        else:  # Triton 3.4: the same steps, inline in JITFunction.run
            options = backend.parse_options(kwargs)
            sigkeys = [p.name for p in fn.params]
            sigvals = [s[0] for s in specialization]
            signature = dict(zip(sigkeys, sigvals))
            for k in kwargs:
                if k not in options.__dict__ and k not in sigkeys:
                    raise KeyError(f"Keyword argument {k} was specified but unrecognised")
            paths = find_paths_if(sigvals, lambda _, v: v == "constexpr")
            constexprs = {p: get_iterable_path(list(bound.values()), p) for p in paths}
            attrvals = [s[1] for s in specialization]
            paths = find_paths_if(attrvals, lambda _, v: isinstance(v, str))
            attrs = {p: backend.parse_attr(get_iterable_path(attrvals, p)) for p in paths}
        source = source_class(fn)(fn, signature, constexprs, attrs)  # a Gluon function's is Gluon's
        return triton.compile(source, target=target, options=options.__dict__)


_LAUNCHERS_ATTR = "_launchpad_launcher"


def triton_launcher(fn: Any, *, target: Any = None) -> Any:
    """The launcher of a Triton kernel: ``triton_launcher(fn)[grid](...)``.

    ``fn`` is a ``@triton.jit`` function, or one wrapped by ``@triton.autotune`` and
    ``@triton.heuristics`` in any order (see :mod:`launchpad.frontends.triton.autotune`). One launcher is
    made per function (for the current device's target) and kept on it, so calling this in a
    loop is cheap. ``target`` (a ``GPUTarget`` or int arch) makes a separate launcher compiling
    for that target.
    """
    if target is None:
        launcher = getattr(fn, _LAUNCHERS_ATTR, None)
        if launcher is not None:
            return launcher
        launcher = wrap(fn, None, TritonLauncher)
        try:
            setattr(fn, _LAUNCHERS_ATTR, launcher)
        except AttributeError:
            pass
        return launcher
    return wrap(fn, target, TritonLauncher)
