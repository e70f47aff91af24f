"""Launch hooks: callbacks a framework runs around each launch of its kernels.

Triton's ``knobs.runtime.launch_enter_hook``/``launch_exit_hook`` (which profilers such as proton
set) are the one case today. A front end registers a factory that, for a spec of its own, returns
an object with:

``check``
    ``(obj, name, ...)``: the attributes of ``obj`` the compiled executor polls per launch; each
    None (or a hook chain whose ``calls`` list is empty) means unset, and then the launch takes
    the fast path with nothing more done. When one is set, the launch goes to the Python executor.
``wrap(launch)``
    The Python executor's launch with the hooks called around it when they are set.

So an unset hook costs the compiled executor two attribute reads, and a set one works in both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._spec import KernelSpec

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
