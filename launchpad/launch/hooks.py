"""Launch hooks: callbacks a framework runs around each launch of its kernels.

Triton's ``knobs.runtime.launch_enter_hook``/``launch_exit_hook`` (which profilers such as proton
set) are the one case today. A front end registers a factory that, for a spec of its own, returns
an object with:

``check``
    ``(dict, names, calls)``: what the compiled executor polls per launch. A hook is set when the
    dict (the ``__dict__`` of the object that holds the hooks) has it and it is not None (a hook
    chain: its ``calls`` list not empty), or else when the class's hook chain (its ``calls`` list
    given in ``calls``, None if the class holds none) has calls. Unset, the launch takes the fast
    path with nothing more done; set, it goes to the Python executor.
``wrap(launch, devices)``
    The Python executor's launch with the hooks called around it when they are set (``devices``:
    where the executor's launches go, :class:`launchpad.launch.executor.Devices`).

So an unset hook costs the compiled executor a look at the dict's size and at each class chain's
list (the dict lookups only where the dict holds something), and a set one works in both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.spec import KernelSpec

__all__ = ["FACTORIES", "for_spec"]

#: ``factory(spec, loader)`` -> hooks object or None, registered by the front ends that have hooks.
FACTORIES: list[Callable[[KernelSpec, Any], Any]] = []


def for_spec(spec: KernelSpec, loader: Any) -> Any:
    """The hooks of a kernel, or None."""
    for factory in FACTORIES:
        hooks = factory(spec, loader)
        if hooks is not None:
            return hooks
    return None
