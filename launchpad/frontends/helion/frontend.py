"""A Helion kernel called through launchpad: :class:`HelionKernel`.

``hk = launchpad.helion_kernel(k)`` for a ``@helion.kernel`` ``k``; ``hk(*args)`` returns what
``k(*args)`` returns, computed by the same generated code. Per call it computes Helion's
specialization key (:mod:`launchpad.frontends.helion.keys`), finds the host function Helion
compiled for that key and calls it with a launchpad launcher as ``_launcher``
(:mod:`launchpad.frontends.helion.launch`). Helion's own per-call binding (``Kernel.bind``, a
new key object and cache lookup per call) and its Triton launches (``JITFunction.run``) are the
costs this removes; Helion's host code (output allocation, grid arithmetic) still runs.

Helion 1.5 is followed by asking it, not by a copy of its key (:mod:`.versions`): each call binds
with Helion's own ``Kernel.bind`` (re-binding as ``BoundKernel.__call__`` does while Helion's
late specializations and compiler seeds move it), then runs that bound kernel's compiled host
function with launchpad's ``_launcher``; only Helion's Triton launches are removed there.

On a new key everything is Helion's: ``Kernel.bind`` traces the kernel, the bound kernel's config
comes from the kernel's ``config=``, its single entry of ``configs=``, the default config
(``autotune_effort="none"``) or Helion's autotuner (timed with Helion's own launches, on the
first call, as Helion does), and ``BoundKernel.compile_config`` generates the host function.

Under ``torch.compile`` (while Dynamo traces a call) a :class:`HelionKernel` calls the Helion
kernel itself, so it is traced as that kernel is: with torch 2.11 or newer, Helion registers its
``Kernel`` with Dynamo, which puts the kernel into the graph as one higher-order op (Inductor
then runs Helion's generated code, fused with its neighbours under ``torch_compile_fusion``);
with an older torch, Dynamo traces into Helion's Python as into any object's. launchpad's
launcher, C code Dynamo cannot trace, is left to eager calls.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from typing import Any

import torch

from ...errors import ArgumentError, ArgumentTypeError
from .keys import make_key
from .launch import Launcher, refusals
from .versions import check_installed, rules_of

__all__ = ["HelionKernel"]


# One lock for every Helion kernel of the process, held while Helion binds (a new key traces the
# kernel), autotunes or generates code. Tracing writes torch.fx's node metadata, a process-wide
# dict (torch.fx.traceback.current_meta), and parses Python's ast: two threads doing it at once,
# even for two different kernels, lose a node's source location (KeyError 'location' in code
# generation) or trip CPython's ast constructor (SystemError). Launches run outside it.
_HELION_LOCK = threading.RLock()
# True while Dynamo traces (a constant in its graph), False in eager calls, at about 50 ns a call.
_compiling = torch.compiler.is_compiling


def _dist_initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


class _ByExtras:
    """The host functions of one base key whose kernel calls ``hl.specialize``: one per value of
    Helion's extractors (``Kernel._specialize_extra``) for that key."""

    __slots__ = ("entries", "extractors")

    def __init__(self, extractors: list[Callable[[tuple], Any]]):
        self.extractors = extractors
        self.entries: dict[tuple, tuple] = {}


class HelionKernel:
    """A ``helion.Kernel`` whose launches go through launchpad (see the module documentation).

    Parameters
    ----------
    kernel
        A ``@helion.kernel`` (``helion.Kernel``) of a supported Helion release.
    launcher_of
        ``launcher_of(jit_fn)``: the Triton launcher of a ``@triton.jit`` function
        (``launchpad.triton_launcher``; :func:`launchpad.helion_kernel` passes it).

    Attributes
    ----------
    kernel
        The Helion kernel.
    host_functions : dict
        ``{key: (bound_kernel, compiled_host_function, host_function_called)}`` of the
        specializations called so far (the last is Helion's compiled function with launchpad's
        ``_launcher``); a key whose kernel specializes on values (``hl.specialize``) holds a table
        of its own. With Helion 1.5 the key is the bound kernel ``Kernel.bind`` returns (two bound
        kernels may share one compiled function: Helion caches generated code by its source).

    Raises
    ------
    UnsupportedVersion
        The installed Helion is not a release launchpad follows.
    ArgumentError
        ``kernel`` is not a Helion kernel.
    """

    def __init__(self, kernel: Any, launcher_of: Callable[[Any], Any]):
        rules = rules_of(check_installed())
        from helion.runtime.kernel import Kernel as _HelionKernel

        if not isinstance(kernel, _HelionKernel):
            what = getattr(kernel, "__qualname__", None) or type(kernel).__name__
            raise ArgumentError(
                f"helion_kernel needs a @helion.kernel function (helion.Kernel), got {what!r} "
                f"({type(kernel).__name__}): decorate it with @helion.kernel"
            )
        self.kernel = kernel
        self.__name__ = kernel.name
        self.__doc__ = kernel.fn.__doc__
        self._arity = kernel._num_params
        self._key = make_key(kernel, rules)
        self._bind_per_call = rules.bind_per_call  # 1.5: host_functions keyed by Helion's bound kernel
        self._launcher = Launcher(launcher_of, kernel.name)
        self.host_functions: dict[Any, Any] = {}

    def __repr__(self) -> str:
        return f"<launchpad.HelionKernel {self.kernel.name} ({len(self.host_functions)} specializations)>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the kernel on ``args`` as ``kernel(*args, **kwargs)`` would, launching through launchpad."""
        if _compiling():  # Dynamo tracing: the Helion kernel itself, as Dynamo knows it (module documentation)
            return self.kernel(*args, **kwargs)
        try:
            if kwargs:
                args = self.kernel.normalize_args(*args, **kwargs)  # as Helion's Kernel.__call__
            elif len(args) > self._arity:
                self._bind(args)  # raises Helion's own TypeError
            # 1.5: Helion's own binding is the key (module documentation)
            key = self._bind(args) if self._bind_per_call else self._key(args)
        except TypeError as exc:  # Helion's refusal of the arguments, said with the kernel's name
            raise self._refusal(args, exc) from exc
        if self._bind_per_call:
            return self._call_bound(args, key)
        entry = self.host_functions.get(key)
        if entry is None:
            entry = self._miss(key, args)
        elif entry.__class__ is _ByExtras:
            entry = entry.entries.get(tuple([f(args) for f in entry.extractors])) or self._miss(key, args)
        bound, compiled, call = entry
        if bound._run is not compiled:  # its config changed (kernel.autotune, set_config): follow it
            entry = self._miss(key, args)
            call = entry[2]
        return call(*args)

    def reset(self) -> None:
        """Forget every specialization, here, in the launcher and in Helion (``kernel.reset()``):
        the next calls bind, compile and autotune again."""
        with _HELION_LOCK:
            self.kernel.reset()
            self.host_functions = {}
            self._launcher.reset()

    def _bind(self, args: tuple) -> Any:
        """Helion's ``Kernel.bind``: a cache lookup, or on a new key a trace of the kernel, which
        must not run beside another thread's tracing or code generation (``_HELION_LOCK``). While
        another thread holds the lock (autotuning may take minutes), a key Helion has bound already
        binds at once: it traces nothing."""
        if _HELION_LOCK.acquire(blocking=False):
            try:
                return self.kernel.bind(args)
            finally:
                _HELION_LOCK.release()
        bound = self._bound_already(args)
        if bound is not None:
            return bound
        with _HELION_LOCK:
            return self.kernel.bind(args)

    def _bound_already(self, args: tuple) -> Any | None:
        """The bound kernel Helion's table holds for ``args`` (the lookup ``Kernel._bind`` makes
        first, under Helion's own lock), else None: a new key, or a kernel whose binding does more
        than the lookup (a ``key=`` function, which Helion runs once per call; late
        specializations), or a Helion whose internals differ. Those wait for the lock."""
        kernel = self.kernel
        try:
            with kernel._bind_lock:
                if kernel._key_fn is not None or kernel._has_specialization_extras:
                    return None
                kernel._validate_structural_policy()
                checked = kernel._validate_bind_args(args)
                distributed = kernel._compute_is_distributed(checked, dist_initialized=_dist_initialized())
                signature = kernel._base_specialization_key(checked, is_distributed=distributed)
                key = kernel._get_bound_kernel_cache_key(checked, signature)
                return None if key is None else kernel._bound_kernels.get(key)
        except (AttributeError, TypeError):  # (another Helion's internals, or arguments it refuses: the lock)
            return None

    def _refusal(self, args: tuple, exc: TypeError) -> ArgumentTypeError:
        """``exc`` (Helion's TypeError for these arguments) as launchpad's error: the kernel named,
        and the argument whose type Helion cannot key where one is."""
        names = list(self.kernel.signature.parameters)
        for name, value in zip(names, args):
            try:
                self.kernel._specialization_key(value)
            except TypeError:
                return ArgumentTypeError(
                    f"Helion kernel {self.kernel.name!r}, argument {name!r}: Helion cannot take "
                    f"{type(value).__name__} ({exc})"
                )
        return ArgumentTypeError(f"Helion kernel {self.kernel.name!r}: {exc}")

    # --- Helion 1.5: Helion's own binding on every call ---------------------------------------------

    def _settle(self, bound: Any, args: tuple) -> Any:
        """The bound kernel Helion runs for ``args``, from the one ``Kernel.bind`` returned: 1.5's
        ``BoundKernel.__call__`` binds again while the kernel was reset, or has compiler-seed
        extractors or late specializations, and runs the bound kernel that second bind returns."""
        kernel = self.kernel
        for _ in range(8):  # bind settles at once (a cache hit) unless compiling re-keyed the kernel
            if not bound._cache_managed or not (
                bound._reset_generation != kernel._reset_generation
                or bound._compiler_seed_specialization_extractors
                or kernel._has_specialization_extras
            ):
                return bound
            rebound = self._bind(args)
            if rebound is bound:
                return bound
            bound = rebound
        raise ArgumentError(
            f"Helion kernel {kernel.name!r}: Helion's binding of these arguments did not settle (each "
            "Kernel.bind returned another bound kernel); call the Helion kernel itself"
        )

    def _call_bound(self, args: tuple, bound: Any) -> Any:
        bound = self._settle(bound, args)
        entry = self.host_functions.get(bound)
        if entry is None or entry[1] is not bound._run:  # new, or its config changed (set_config, autotune)
            entry = self._compile_bound(args)
        return entry[2](*args)

    def _compile_bound(self, args: tuple) -> tuple:
        """Compile (or adopt) the host function of the bound kernel Helion 1.5 runs for ``args``, as
        its ``BoundKernel.__call__`` compiles a first call: the config made with the call's tensors
        as runtime argument values. Compiling may publish extractors that retire the bound kernel
        (its ``_run`` reset): then bind again, as Helion's next call would."""
        names = self.kernel.signature.parameters
        runtime_args = {n: v for n, v in zip(names, args) if isinstance(v, torch.Tensor)}
        with _HELION_LOCK:
            for _ in range(8):
                bound = self._settle(self._bind(args), args)
                with bound._first_compile_lock:
                    if bound._run is None:
                        self._check(bound)
                        with bound.env.use_runtime_arg_values(runtime_args):
                            bound.ensure_config_exists(args)
                    if bound._run is not None:
                        entry = self._entry(bound)
                        self.host_functions = {**self.host_functions, bound: entry}
                        return entry
        raise ArgumentError(
            f"Helion kernel {self.kernel.name!r}: compiling these arguments left Helion no host function to run; "
            "call the Helion kernel itself"
        )

    # --- a new specialization: Helion's own binding, config and compilation -------------------------

    def _check(self, bound: Any | None) -> None:
        """Refuse a kernel in ref mode, or ``bound`` (None: not bound yet) generated for a backend
        other than Triton."""
        from helion.runtime.ref_mode import is_ref_mode_enabled

        kernel = self.kernel
        if is_ref_mode_enabled(kernel.settings):
            raise ArgumentError(
                f"Helion kernel {kernel.name!r} is in ref mode (HELION_INTERPRET=1 or ref_mode=), which runs it "
                "eagerly in torch without launching: call the Helion kernel itself"
            )
        backend = "triton" if bound is None else bound.env.backend.name
        if backend != "triton":
            raise ArgumentError(
                f"Helion kernel {kernel.name!r} generates code for the {backend!r} backend; launchpad launches "
                "the Triton backend's kernels only"
            )

    def _entry(self, bound: Any) -> tuple:
        """``(bound, compiled, call)``: the bound kernel's host function, and it with our ``_launcher``."""
        self._check(bound)
        compiled = bound._run
        refusals(compiled, self.kernel.name)
        call = types.FunctionType(
            compiled.__code__, compiled.__globals__, compiled.__name__, compiled.__defaults__, compiled.__closure__
        )  # the host function, its _launcher default ours: no keyword to pass per call
        call.__kwdefaults__ = {**(compiled.__kwdefaults__ or {}), "_launcher": self._launcher.launch}
        return (bound, compiled, call)

    def _miss(self, key: tuple, args: tuple) -> tuple:
        kernel = self.kernel
        with _HELION_LOCK:
            self._check(None)  # ref mode, before binding
            bound = kernel.bind(args)
            self._check(bound)
            bound.ensure_config_exists(args)  # the given config, the default one, or Helion's autotuning
            entry = self._entry(bound)
            extractors = kernel._specialize_extra.get(kernel._base_specialization_key(args)) or []
            if extractors:
                slot = self.host_functions.get(key)
                if slot.__class__ is not _ByExtras:
                    slot = _ByExtras(list(extractors))
                slot.entries[tuple([f(args) for f in slot.extractors])] = entry
                self.host_functions = {**self.host_functions, key: slot}
            else:
                self.host_functions = {**self.host_functions, key: entry}
            return entry
