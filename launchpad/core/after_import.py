"""Run a callback once a module has been imported, without importing it.

``import launchpad`` registers its launches with torch.compile only once Dynamo is imported
(:mod:`launchpad.tracing`), as torch imports it lazily: a finder first on ``sys.meta_path`` wraps
that module's loader, so the callback runs right after the module's own code.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings
from collections.abc import Callable
from typing import Any

from ..errors import LaunchpadWarning

__all__ = ["after_import"]


class _LoaderThen(importlib.abc.Loader):
    """A module's loader, then ``then()``."""

    def __init__(self, loader: Any, then: Callable[[], None]):
        self.loader, self.then = loader, then

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        try:
            self.then()
        except Exception as exc:  # never the import itself: launches then break the graph, as they did
            warnings.warn(f"launchpad: kernels will not be traced by torch.compile here ({exc})", LaunchpadWarning,
                          stacklevel=2)  # fmt: skip


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then()`` once module ``name`` has been imported."""

    def __init__(self, name: str, then: Callable[[], None]):
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderThen(spec.loader, self.then)
        return spec


def after_import(name: str, then: Callable[[], None]) -> bool:
    """Run ``then()`` once module ``name`` is imported; False (and nothing done) where it already is."""
    if name in sys.modules:
        return False
    sys.meta_path.insert(0, _AfterImport(name, then))
    return True
