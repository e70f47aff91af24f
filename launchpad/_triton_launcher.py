"""``triton_launcher``: a drop-in for ``jit_fn[grid](...)`` that launches through launchpad.

Per call it computes Triton's specialization key cheaply (tensor dtype and 16-byte alignment,
int width, ``== 1`` and divisibility by 16, constexpr values) in a dispatcher generated once per
function, finds the launchpad :class:`~launchpad.Kernel` built for that key, and compiles
through Triton only on a miss (see :mod:`launchpad._triton` for how a compiled kernel becomes
a Kernel).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from ._triton import _from_compiled, _run_options, _target
from ._triton_versions import check_installed
from .errors import ArgumentError
from .kernel import Kernel

__all__ = ["TritonLauncher", "triton_launcher"]


# --- triton_launcher --------------------------------------------------------------------------------


class _NoCache:
    """A key part for values whose specialization this module does not compute: unhashable, so
    the fast lookup always misses and Triton's own specialization decides."""

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "<not cached>"


_NOCACHE = _NoCache()
_I32 = "i32"


def _wide(x: int) -> str:
    return "u64" if x >= 1 << 63 else "i64"


def _value_key(x: Any) -> tuple:
    """The fast-path key of one value that is not a plain tensor or int (see :class:`TritonLauncher`)."""
    if x is None:
        return (None, None)
    c = x.__class__
    if c is bool:
        return (bool, None)
    if c is float:
        return (float, None)
    if isinstance(x, int) and not isinstance(x, bool):
        return (c, "i32" if -0x80000000 <= x <= 0x7FFFFFFF else _wide(x), x & 15 if x != 1 else 16)
    if isinstance(x, float):
        return (float, None)
    if isinstance(x, tuple):
        return (c, tuple(_value_key(v) if v.__class__ is not torch.Tensor else (v.dtype, v.data_ptr() & 15) for v in x))
    if c.__name__ == "TensorDescriptor" and c.__module__ == "triton.tools.tensor_descriptor":
        return (c, x.base.dtype, tuple(x.block_shape))  # Triton's key: tensordesc<dtype[block]>
    if hasattr(x, "data_ptr") and not isinstance(x, type):
        return (c, x.dtype, x.data_ptr() & 15)
    if c.__name__ == "constexpr" or hasattr(x, "cache_key"):  # tl.constexpr, a jit function
        return (c, x)
    return (_NOCACHE, None)


class TritonLauncher:
    """A drop-in for ``jit_fn[grid](*args, **kwargs)`` that launches through launchpad.

    ``launcher[grid](*args, **kwargs)`` computes Triton's specialization key from the arguments
    with code generated for this function (tensor dtype and ``data_ptr() % 16``, int value 1, %16
    and width, bool, float, None, constexpr values), finds the :class:`~launchpad.Kernel` built
    for it, and launches it with launchpad's generated launch path. On a miss it asks Triton's
    own binder for the exact specialization and compiles through ``triton.compile`` (sharing
    Triton's on-disk cache), once per specialization.

    ``grid`` is a tuple or a callable taking the dict of argument values (with defaults), as for
    Triton. Differences from ``jit_fn[grid]``: it returns None rather than the CompiledKernel;
    Triton's launch hooks, pre-run hooks and changed-global checks are not run; changing
    ``TRITON_DEBUG`` knobs after the first launch of a specialization does not recompile it; a
    process whose GPUs differ in architecture needs one launcher per architecture (``target``).

    Attributes
    ----------
    fn
        The jit function.
    kernels : dict
        Kernel per Triton cache key (specialization and options), as compiled so far.
    run : callable
        ``run(grid, *args, **kwargs)``, the generated dispatcher; ``run.__source__`` is its code.
    """

    def __init__(self, jit_fn: Any, target: Any = None):
        check_installed()
        if not hasattr(jit_fn, "arg_names") or not hasattr(jit_fn, "params") or not hasattr(jit_fn, "signature"):
            raise ArgumentError(
                f"triton_launcher needs a @triton.jit function, got {type(jit_fn).__name__} "
                "(autotuned and heuristics-wrapped kernels are not supported)"
            )
        self.fn = jit_fn
        self.target = target
        self.kernels: dict[str, Kernel] = {}
        self._fast: dict[Any, Callable[..., None]] = {}
        self._lock = threading.RLock()
        self._state: tuple | None = None  # (target, backend, binder), made on the first miss
        self.run = self._generate()

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        return partial(self.run, grid)

    def __repr__(self) -> str:
        return f"<launchpad.TritonLauncher {self.fn.__name__} ({len(self.kernels)} kernels)>"

    def warmup(self, *args: Any, grid: Any = None, **kwargs: Any) -> Kernel:
        """Compile (or find) the kernel for these arguments without launching; return it.

        Takes the arguments of a launch (``grid`` is accepted, as Triton's ``warmup`` takes
        it, and ignored).
        """
        params = list(self.fn.params)
        if len(args) > len(params):
            raise TypeError(f"{self.fn.__name__} takes {len(params)} arguments, got {len(args)}")
        bound = {p.name: v for p, v in zip(params, args)}
        for key in list(kwargs):
            if key in bound:
                raise TypeError(f"{self.fn.__name__} got multiple values for argument {key!r}")
            if any(p.name == key for p in params):
                bound[key] = kwargs.pop(key)
        missing = [p.name for p in params if p.name not in bound and not p.has_default]
        if missing:
            raise TypeError(f"{self.fn.__name__} is missing arguments {missing}")
        values = tuple(bound[p.name] if p.name in bound else p.default for p in params)
        return self._resolve(values, kwargs)

    # --- the generated dispatcher --------------------------------------------------------------

    def _generate(self) -> Callable[..., None]:
        params = list(self.fn.params)
        names = [p.name for p in params]
        if any(n.startswith("_lp_") for n in names):
            raise ArgumentError(f"{self.fn.__name__}: argument names starting with '_lp_' are reserved")
        ns: dict[str, Any] = {
            "_lp_Tensor": torch.Tensor, "_lp_I32": _I32, "_lp_wide": _wide, "_lp_value_key": _value_key,
            "_lp_fast": self._fast, "_lp_miss": self._miss,
        }  # fmt: skip
        header = []
        for p in params:
            if p.has_default:
                ns[f"_lp_d_{p.name}"] = p.default
                header.append(f"{p.name}=_lp_d_{p.name}")
            else:
                header.append(p.name)
        lines = [f"def run(_lp_grid, {', '.join(header)}, **_lp_kw):"]
        keys = []
        for i, p in enumerate(params):
            x, k, s = p.name, f"_lp_k{i}", f"_lp_s{i}"
            keys += [k, s]
            if p.is_constexpr:  # the value itself is the key (its class too: 1 and True differ)
                lines.append(f"    {k} = {x}.__class__; {s} = {x}")
                continue
            lines += [
                f"    if {x}.__class__ is _lp_Tensor:",
                f"        {k} = {x}.dtype; {s} = {x}.data_ptr() & 15",
                f"    elif {x}.__class__ is int:",
                f"        {k} = _lp_I32 if -2147483648 <= {x} <= 2147483647 else _lp_wide({x})",
                f"        {s} = {x} & 15 if {x} != 1 else 16",
                "    else:",
                f"        {k} = _lp_value_key({x}); {s} = None",
            ]
        values = ", ".join(names)
        lines += [
            f"    _lp_key = ({', '.join(keys)},)",
            "    if _lp_kw:",
            "        _lp_key = (_lp_key, tuple(_lp_kw.items()))",
            "    try:",
            "        _lp_launch = _lp_fast[_lp_key]",
            "    except Exception:  # a new specialization, or a value this key cannot hash",
            f"        _lp_launch = _lp_miss(_lp_key, ({values},), _lp_kw)",
            "    if _lp_grid.__class__ is not tuple and callable(_lp_grid):",
            f"        _lp_grid = _lp_grid({{{', '.join(f'{n!r}: {n}' for n in names)}}})",
            f"    return _lp_launch(_lp_grid, None, {values})",
        ]
        source = "\n".join(lines) + "\n"
        exec(compile(source, f"<launchpad triton_launcher {self.fn.__name__}>", "exec"), ns)
        run = ns["run"]
        run.__source__ = source
        return run

    def _miss(self, key: Any, values: tuple, kwargs: dict) -> Callable[..., None]:
        launch = self._resolve(values, kwargs).launch
        try:
            self._fast[key] = launch
        except TypeError:  # unhashable (a value Triton specializes in ways this key does not see)
            pass
        return launch

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

    def _resolve(self, values: tuple, kwargs: dict) -> Kernel:
        with self._lock:
            target, backend, binder = self._setup()
            kwargs = _run_options(self.fn, kwargs, backend)
            bound, specialization, options = binder(*values, **kwargs)
            cache_key = str(specialization) + str(options)  # Triton's own key (JITFunction.run)
            kernel = self.kernels.get(cache_key)
            if kernel is None:
                kernel = _from_compiled(self._compile(target, backend, kwargs, bound, specialization, options))
                self.kernels[cache_key] = kernel
            return kernel

    def _compile(self, target, backend, kwargs, bound, specialization, options) -> Any:
        import triton
        from triton._utils import find_paths_if, get_iterable_path
        from triton.compiler import ASTSource

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
        return triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)


_LAUNCHERS_ATTR = "_launchpad_launcher"


def triton_launcher(jit_fn: Any, *, target: Any = None) -> TritonLauncher:
    """The :class:`TritonLauncher` of a ``@triton.jit`` function: ``triton_launcher(fn)[grid](...)``.

    One launcher is made per function (for the current device's target) and kept on it, so
    calling this in a loop is cheap. ``target`` (a ``GPUTarget`` or int arch) makes a separate
    launcher compiling for that target.
    """
    if target is None:
        launcher = getattr(jit_fn, _LAUNCHERS_ATTR, None)
        if launcher is not None:
            return launcher
        launcher = TritonLauncher(jit_fn)
        try:
            setattr(jit_fn, _LAUNCHERS_ATTR, launcher)
        except AttributeError:
            pass
        return launcher
    return TritonLauncher(jit_fn, target)
