"""Triton's launch hooks for launchpad's launches of Triton kernels (see :mod:`launchpad.launch.hooks`).

When ``triton.knobs.runtime.launch_enter_hook`` or ``launch_exit_hook`` is set, launchpad calls
them as Triton's launcher does: with a ``LazyDict`` of the kernel's ``name``, ``function`` handle
and ``stream``, extended by the JIT function's ``launch_metadata(grid, metadata, args)`` where the
kernel came from one (proton reads flops and bytes there). Triton 3.4 keeps each hook as None or a
callable; 3.5 and later as a ``HookChain`` whose ``calls`` list is empty when none is set.
Hooks are found when the kernel is made: a kernel made (say, loaded from an artifact) before
anything imported Triton never calls them, as nothing could have set them; loading a kernel does
not import Triton just to look.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from ...core.spec import KernelSpec
from ...launch import checks as _checks
from ...launch import config as _config
from ...launch import hooks as _hooks

__all__ = ["TritonHooks"]

_NAMES = ("launch_enter_hook", "launch_exit_hook")


class TritonHooks:
    """The hooks of one Triton kernel."""

    def __init__(self, spec: KernelSpec, loader: Any, runtime: Any):
        self.spec = spec
        self.loader = loader
        self.runtime = runtime
        # what the compiled executor polls: hooks set on the knobs object, and the class's hook chains
        self.check = (
            vars(runtime),
            _NAMES,
            tuple(getattr(getattr(type(runtime), n, None), "calls", None) for n in _NAMES),
        )
        self.launch_metadata = spec.launch_metadata  # the JIT function's, where the kernel came from one
        self.arg_names = spec.arg_names

    def hooks(self) -> tuple[Any, Any] | None:
        """``(enter, exit)`` when either is set, else None."""
        found = [getattr(self.runtime, name, None) for name in _NAMES]
        set_ = [h is not None and (not isinstance(getattr(h, "calls", None), list) or h.calls) for h in found]
        return (found[0], found[1]) if any(set_) else None

    def metadata(self, grid: Any, args: tuple, stream: Any, devices: Any, named_args: dict | None = None) -> Any:
        from triton.compiler.compiler import LazyDict

        device = devices.current_device()
        if stream is None:
            stream = (devices.current_stream or _checks.current_raw_stream)(device)
        elif not isinstance(stream, int):
            stream = _config.stream_of(stream)[0]
        function = self.loader.entry(device)[3]
        data = LazyDict({"name": self.spec.name, "function": function, "stream": stream})
        if self.launch_metadata is not None:
            # the grid as the caller gave it (Triton passes its launch_metadata the tuple unpadded)
            grid = grid if isinstance(grid, tuple) else (grid,) if isinstance(grid, int) else tuple(grid)
            named = dict(zip(self.arg_names, args))
            named.update({k: v for k, v in (named_args or {}).items() if k in self.arg_names})  # those given by name
            data.add(self.launch_metadata, (grid, types.SimpleNamespace(**self.spec.metadata), named))
        return data

    def wrap(self, launch: Any, devices: Any) -> Any:
        """``launch`` with the hooks called around it whenever they are set."""

        def hooked(*call: Any, **kw: Any) -> None:
            found = self.hooks()
            grid = call[0] if call else kw.get("grid")
            if found is None or grid is None or (len(call) < 2 and "block" not in kw):
                return launch(*call, **kw)  # (no grid or block: the launch refuses it, naming the kernel)
            enter, exit_ = found
            metadata = self.metadata(grid, call[2:], kw.get("stream"), devices, kw)
            if enter is not None:
                enter(metadata)
            launch(*call, **kw)
            if exit_ is not None:
                exit_(metadata)

        hooked.__wrapped__ = launch  # type: ignore[attr-defined]
        return hooked


def _factory(spec: KernelSpec, loader: Any) -> TritonHooks | None:
    if "triton_version" not in spec.metadata and spec.metadata.get("frontend") != "triton":
        return None
    triton = sys.modules.get("triton")  # hooks can only be set where Triton is imported
    knobs = getattr(triton, "knobs", None)
    runtime = getattr(knobs, "runtime", None)
    return TritonHooks(spec, loader, runtime) if runtime is not None else None


_hooks.FACTORIES.append(_factory)
