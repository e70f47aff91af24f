"""The ``_launcher`` launchpad hands Helion's generated host functions, and what it refuses.

A Helion host function launches each of its Triton kernels with one generated statement,
``_launcher(_helion_k, grid, *args, num_warps=4, num_stages=2, **options)``, whose keywords are
literals of the config it was compiled for (the same statement and keywords from Helion 1.0 to
1.5, whose ``launcher_keyword_args`` do not change; 1.5 adds the runtime keywords below, and
``launch_pdl=True``, a Triton compile option). Helion's default
launcher passes them all to ``triton_kernel.run``, where every one is a Triton compile option (``num_warps``,
``num_stages``, ``maxnreg``, ``num_ctas``, ``launch_cooperative_grid``, ``ptx_options``...).
:class:`Launcher` passes them to the Triton launcher it is given (``with_options``), so each
config compiles with its own options and the launch uses what the compiled kernel's metadata
says (a cooperative grid included); per call it is one dictionary lookup and the launcher's
compiled dispatch.

Refused by name, before anything launches (:func:`refusals` reads the host function's source
when it is first called; the launcher checks again on each kernel's first launch):

- keywords starting with ``_``: Helion's own runtime arguments (1.5's distributed copies'
  ``_remote_copy_*``, ``_remote_barrier_*``, ``_persistent_state_*``), which make its default
  launcher allocate signal pads and append arguments, and 1.5's ``_minimum_resident_programs``
  (cross-loop scheduling), which makes it compile the kernel, ask CUDA for its occupancy and
  refuse a grid whose programs cannot all be resident at once: passing the kernel through without
  that check could deadlock a kernel whose programs wait for one another;
- keywords the installed Triton has no compile option for (``CUDAOptions``), which Triton would
  refuse too, after Helion's host code had already run.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import ArgumentError

__all__ = ["Launcher", "refusals"]


def _triton_options() -> frozenset[str] | None:
    """The compile options the installed Triton's CUDA backend takes (None: not found)."""
    try:
        import dataclasses

        from triton.backends.nvidia.compiler import CUDAOptions
    except ImportError:
        return None
    return frozenset(f.name for f in dataclasses.fields(CUDAOptions))


def _why_refused(name: str, options: frozenset[str] | None) -> str:
    if name == "_minimum_resident_programs":  # Helion 1.5's cross-loop scheduling
        return (f"{name}= is a Helion runtime argument: its default launcher compiles the kernel first and "
                "refuses a grid whose programs cannot all be resident at once (its CUDA occupancy), a check "
                "launchpad does not make")  # fmt: skip
    if name.startswith("_"):
        return (f"{name}= is a Helion runtime argument (distributed copies, persistent state) that its default "
                "launcher turns into allocations and extra kernel arguments")  # fmt: skip
    if options is not None and name not in options:
        return f"{name}= is no compile option of the installed Triton"
    return ""


def refusals(host_function: Callable[..., Any], kernel_name: str) -> None:
    """Refuse a compiled host function whose launches launchpad cannot honour.

    Reads the module Helion generated (``host_function.__globals__['__file__']``) and checks the
    keywords of every ``_launcher(...)`` call in it. A source that cannot be read is left to the
    launcher's own check at the first launch.

    Raises
    ------
    ArgumentError
        Naming the kernel, the Triton kernel the call launches, and each keyword refused.
    """
    path = getattr(host_function, "__globals__", {}).get("__file__")
    try:
        tree = ast.parse(Path(path).read_text()) if path else None
    except (OSError, SyntaxError, ValueError):
        tree = None
    if tree is None:
        return
    options = _triton_options()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_launcher":
            target = ast.unparse(node.args[0]) if node.args else "?"
            why = [w for w in (_why_refused(k.arg or "**", options) for k in node.keywords) if w]
            if why:
                raise ArgumentError(_message(kernel_name, target, why))


def _message(kernel_name: str, target: str, why: list[str]) -> str:
    return (f"Helion kernel {kernel_name!r}: its host function launches {target} with options launchpad cannot "
            f"honour: {'; '.join(why)}; call the Helion kernel itself")  # fmt: skip


class Launcher:
    """The ``_launcher`` of one Helion kernel's host functions.

    Parameters
    ----------
    launcher_of
        ``launcher_of(jit_fn)`` gives the Triton launcher of a ``@triton.jit`` function (what
        ``launchpad.triton_launcher`` returns): ``.with_options(dict)`` fixes compile options,
        ``.run(grid, *args)`` launches.
    kernel_name
        The Helion kernel's name, for messages.
    """

    def __init__(self, launcher_of: Callable[[Any], Any], kernel_name: str):
        self._launcher_of = launcher_of
        self._name = kernel_name
        self._options = _triton_options()
        self._lock = threading.Lock()
        # per Triton kernel, by id (a JITFunction hashes its source under a lock): the kernel (kept
        # alive, so its id stays its own), num_warps, num_stages, the other options, and its run
        self._last: dict[int, tuple[Any, int, int, dict, Callable[..., Any]]] = {}
        self._runs: dict[tuple, Callable[..., Any]] = {}  # every set of options seen, by value
        last = self._last

        def _launcher(
            triton_kernel: Any, grid: Any, *args: Any, num_warps: int, num_stages: int, **options: Any
        ) -> None:
            known = last.get(id(triton_kernel))
            if (
                known is None
                or known[0] is not triton_kernel
                or known[1] != num_warps
                or known[2] != num_stages
                or known[3] != options
            ):
                known = self._resolve(triton_kernel, num_warps, num_stages, options)
            known[4](grid, *args)

        self.launch = _launcher  # what host functions are called with as _launcher

    def reset(self) -> None:
        """Forget every Triton kernel and launcher seen (what :meth:`HelionKernel.reset` asks)."""
        with self._lock:
            self._last.clear()
            self._runs.clear()

    def _resolve(self, triton_kernel: Any, num_warps: int, num_stages: int, options: dict) -> tuple:
        why = [w for w in (_why_refused(k, self._options) for k in options) if w]
        if why:
            raise ArgumentError(_message(self._name, getattr(triton_kernel, "__name__", "?"), why))
        with self._lock:
            by_value = (id(triton_kernel), num_warps, num_stages, tuple(sorted(options.items())))
            run = self._runs.get(by_value)
            if run is None:
                launcher = self._launcher_of(triton_kernel)
                run = launcher.with_options({"num_warps": num_warps, "num_stages": num_stages, **options}).run
                self._runs[by_value] = run
            known = (triton_kernel, num_warps, num_stages, dict(options), run)
            self._last[id(triton_kernel)] = known
            return known
