"""``@triton.autotune`` and ``@triton.heuristics`` kernels through ``triton_launcher``.

:func:`wrap` turns a Triton kernel object into a launcher of the same shape: a JIT function
into a :class:`~launchpad.TritonLauncher`, an ``Autotuner`` into an :class:`AutotunedLauncher`
and a ``Heuristics`` into a :class:`HeuristicsLauncher`, each around the launcher of what it
wraps, so the decorators stack in any order as they do in Triton. They follow Triton's semantics
(``triton/runtime/autotuner.py``). A call ``launcher[grid](*args)`` goes in four steps:

1. A heuristics launcher computes each heuristic's value from the arguments, on every call, and
   passes the values on to the launcher it wraps.
2. An autotuned launcher computes the call's key: the values of the ``key`` arguments, then the
   dtype of every tensor argument. A key tuned before gives its config with one dictionary
   lookup; an autotuner of one config uses it without a key.
3. A new key is tuned. The configs are pruned by ``prune_configs_by`` (``early_config_prune``,
   then the ``perf_model``'s ``top_k``), and each config left is timed with the autotuner's own
   ``do_bench`` (its ``warmup`` and ``rep`` included), with ``reset_to_zero``/``restore_value``
   and the pre and post hooks around every timed launch. A config the device cannot run (out of
   resources) times as infinite, so it is skipped as Triton skips it. The fastest config is kept
   for the key.
4. The config's own launcher launches, after the config's ``pre_hook`` where it has one. Each
   config gets a launcher with its compile options fixed, so the timed launches and every launch
   after tuning go through launchpad, and a tuned call is a key lookup and the compiled dispatch.

Triton's autotuning knobs act as under Triton: ``cache_results=True`` (or
``TRITON_CACHE_AUTOTUNING``) keeps the timings in Triton's cache through the autotuner's own
``check_disk_cache``, so another process (Triton's or launchpad's) reads them in step 3 instead of
timing again; ``knobs.autotuning.print`` prints what Triton prints; ``knobs.autotuning.listener``
(Triton 3.9) hears of every tuning. Under torch.compile, ``launcher[grid]`` is that of the Triton
object it wraps (the ``Autotuner`` or ``Heuristics``), which Dynamo traces as a user kernel.
"""

from __future__ import annotations

import builtins
import functools
import time
from collections.abc import Callable
from typing import Any

from ...errors import CompileError, OutOfResources
from ...launch.traced import dynamo_compiling

__all__ = ["AutotunedLauncher", "HeuristicsLauncher", "wrap"]


def wrap(fn: Any, target: Any, launcher: Callable[[Any, Any], Any]) -> Any:
    """The launcher of a JIT function, or of an autotuned or heuristics-wrapped one: the wrappers
    around ``launcher(jit_fn, target)`` (a :class:`~launchpad.TritonLauncher`) for the JIT
    function at the bottom."""
    kind = type(fn).__name__
    if kind == "Autotuner" and hasattr(fn, "configs"):
        return AutotunedLauncher(fn, wrap(fn.fn, target, launcher))
    if kind == "Heuristics" and hasattr(fn, "values"):
        return HeuristicsLauncher(fn, wrap(fn.fn, target, launcher))
    return launcher(fn, target)


class _Wrapper:
    """What the wrapping launchers share: ``launcher[grid](...)`` and a child per compile options."""

    def __init__(self, wrapped: Any, inner: Any):
        self.wrapped = wrapped  # Triton's Autotuner or Heuristics
        self.inner = inner  # the launcher of what it wraps
        self.fn = inner.fn  # the JIT function at the bottom
        self.arg_names = list(wrapped.arg_names)
        self._children: dict[tuple, Any] = {}

    def __getitem__(self, grid: Any) -> Callable[..., None]:
        if dynamo_compiling():  # under torch.compile: Triton's own, traced as a user kernel
            options = getattr(self.inner, "options", None)
            return functools.partial(self.wrapped[grid], **options) if options else self.wrapped[grid]
        return functools.partial(self.run, grid)

    def with_options(self, options: dict) -> Any:
        key = tuple(sorted(options.items(), key=lambda kv: kv[0]))
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._copy(self.inner.with_options(options))
        return child

    def _copy(self, inner: Any) -> Any:
        return type(self)(self.wrapped, inner)

    def run(self, grid: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError


class HeuristicsLauncher(_Wrapper):
    """``@triton.heuristics``: each value computed from the arguments, then the wrapped launch."""

    def run(self, grid: Any, *args: Any, **kwargs: Any) -> None:
        for name, heuristic in self.wrapped.values.items():  # as Heuristics.run: each sees those before it
            kwargs[name] = heuristic({**dict(zip(self.arg_names, args)), **kwargs})
        return self.inner.run(grid, *args, **kwargs)

    def warmup(self, *args: Any, **kwargs: Any) -> Any:
        for name, heuristic in self.wrapped.values.items():
            kwargs[name] = heuristic({**dict(zip(self.arg_names, args)), **kwargs})
        return self.inner.warmup(*args, **kwargs)


class AutotunedLauncher(_Wrapper):
    """``@triton.autotune``: the best config per key, found by timing launchpad launches.

    Attributes
    ----------
    cache : dict
        The chosen ``triton.Config`` per key, as tuned so far.
    best_config
        The config of the last launch.
    configs_timings : dict
        The timings of the last tuning: config -> [median, p20, p80] ms.
    """

    def __init__(self, wrapped: Any, inner: Any):
        super().__init__(wrapped, inner)
        self.cache: dict[tuple, Any] = {}
        self.best_config: Any = None
        self.configs_timings: dict[Any, list[float]] = {}
        self._per_config: dict[Any, Any] = {}

    def _copy(self, inner: Any) -> Any:
        child = type(self)(self.wrapped, inner)
        child.cache = self.cache  # tuning results hold whatever options the caller adds
        return child

    def _launcher(self, config: Any) -> Any:
        """The launcher of one config: its compile options fixed (made once per config)."""
        launcher = self._per_config.get(config)
        if launcher is None:
            options = {k: v for k, v in config.all_kwargs().items() if k not in config.kwargs}
            launcher = self._per_config[config] = self.inner.with_options(options)
        return launcher

    def _key(self, args: tuple, kwargs: dict) -> tuple:
        """Autotuner.run's key: the key arguments' values, then the dtype of every tensor argument."""
        named = {k: v for k, v in {**dict(zip(self.arg_names, args)), **kwargs}.items() if k in self.arg_names}
        key = [named[k] for k in self.wrapped.keys if k in named]
        key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
        return tuple(key)

    def run(self, grid: Any, *args: Any, **kwargs: Any) -> None:
        tuner = self.wrapped
        if len(tuner.configs) > 1:
            key = self._key(args, kwargs)
            config = self.cache.get(key)
            if config is None:
                config = self._tune(key, grid, args, kwargs)
        else:
            config = tuner.configs[0]
        self.best_config = config
        if config.pre_hook is not None:
            config.pre_hook({**dict(zip(self.arg_names, args)), **kwargs, **config.all_kwargs()})
        return self._launcher(config).run(grid, *args, **kwargs, **config.kwargs)

    def prune(self, args: tuple, kwargs: dict) -> list[Any]:
        """``prune_configs_by``: ``early_config_prune``, then the ``perf_model``'s ``top_k``."""
        tuner = self.wrapped
        nargs = dict(zip(self.arg_names, args))
        configs = tuner.configs
        if tuner.early_config_prune:
            configs = tuner.early_config_prune(configs, nargs, **kwargs)
            if not configs:
                raise ValueError("no autotuning config is left after early_config_prune; it must return at least one")
        if tuner.perf_model:
            top_k = tuner.configs_top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = max(1, int(len(configs) * top_k))
            if len(configs) > top_k:
                estimate = {c: tuner.perf_model(**nargs, **kwargs, **c.all_kwargs()) for c in configs}
                configs = sorted(estimate, key=estimate.__getitem__)[:top_k]
        return list(configs)

    def _tune(self, key: tuple, grid: Any, args: tuple, kwargs: dict) -> Any:
        """Autotuner.run's tuning of a new key, with the timed launches through launchpad: the
        configs left after pruning timed (or their timings read from Triton's disk cache), the
        best one kept per key, then the listener and the print knobs as Triton calls them."""
        from triton import knobs

        tuner = self.wrapped
        configs = self.prune(args, kwargs)
        cached = True
        if len(configs) == 1:  # nothing to time
            best = configs[0]
        else:
            nargs = dict(zip(self.arg_names, args))

            def benchmark() -> None:  # what Triton's check_disk_cache calls on a miss
                start = time.time()
                timings = {config: self._bench(config, grid, args, kwargs, nargs) for config in configs}
                tuner.bench_time = time.time() - start
                tuner.cache[key] = builtins.min(timings, key=timings.__getitem__)
                tuner.configs_timings = timings
                tuner.pre_hook({**nargs, **kwargs, **tuner.cache[key].all_kwargs()}, reset_only=True)

            if tuner.cache_results:  # Triton's own rule, for this release, of when to use the disk
                cached = tuner.check_disk_cache(key, configs, benchmark)
            else:
                benchmark()
                cached = False
            best = tuner.cache[key]
            self.configs_timings = tuner.configs_timings
        self.cache[key] = best
        autotuning = getattr(knobs, "autotuning", None)
        listener = getattr(autotuning, "listener", None)
        if listener is not None:
            listener(fn=self.fn, key=key, best_config=best, configs_timings=getattr(tuner, "configs_timings", None),
                     duration=getattr(tuner, "bench_time", None) if not cached else None, cache_hit=cached)  # fmt: skip
        if getattr(autotuning, "print", False) and not cached:
            print(f"Triton autotuning for function {tuner.base_fn.__name__},\nwith key as {key},\n"
                  f"finished after {tuner.bench_time:.2f}s,\nbest config selected: {best};")  # fmt: skip
        return best

    def _bench(self, config: Any, grid: Any, args: tuple, kwargs: dict, nargs: dict) -> list[float]:
        from triton import knobs

        tuner = self.wrapped
        if getattr(getattr(knobs, "autotuning", None), "print", False):
            print(f"Autotuning kernel {tuner.base_fn.__name__} with config {config}")
        conflicts = kwargs.keys() & config.kwargs.keys()
        if conflicts:
            raise ValueError(f"Conflicting meta-parameters: {', '.join(sorted(conflicts))}. "
                             "Make sure that you don't re-define auto-tuned symbols.")  # fmt: skip
        full = {**nargs, **kwargs, **config.all_kwargs()}
        launch = self._launcher(config).run

        def kernel_call() -> None:
            if config.pre_hook:
                config.pre_hook(full)
            tuner.pre_hook(full)
            try:
                launch(grid, *args, **kwargs, **config.kwargs)
            except Exception as exc:
                try:
                    tuner.post_hook(full, exception=exc)
                finally:
                    raise
            tuner.post_hook(full, exception=None)

        try:
            return tuner.do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))
        except (OutOfResources, CompileError) as exc:
            if _is_resource_error(exc):
                return [float("inf")] * 3
            raise
        except Exception as exc:  # Triton's OutOfResources, PTXASError, CompileTimeAssertionFailure
            if type(exc).__name__ in ("OutOfResources", "PTXASError", "CompileTimeAssertionFailure"):
                return [float("inf")] * 3
            raise

    def warmup(self, *args: Any, **kwargs: Any) -> list[Any]:
        """Compile every config that pruning keeps, without launching."""
        return [self._launcher(c).warmup(*args, **kwargs, **c.kwargs) for c in self.prune(args, kwargs)]


def _is_resource_error(exc: Exception) -> bool:
    """A config this device cannot run (too much shared memory, a ptxas resource error): it is
    skipped while tuning, as Triton's autotuner skips it."""
    if isinstance(exc, OutOfResources):
        return True
    cause = exc.__cause__
    return type(cause).__name__ in ("OutOfResources", "PTXASError", "CompileTimeAssertionFailure")
