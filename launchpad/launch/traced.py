"""What torch.compile needs of a kernel's launch, kept beside it (:mod:`launchpad.tracing` turns it into
an operator and has Dynamo trace :func:`launch_first` as that operator's call)."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..core.spec import KernelSpec
from .executor import _claunch

__all__ = ["TRACED", "BoundLaunch", "LaunchFunction", "Traced", "dynamo_compiling", "launch_first", "new_key"]


def _launch_first(pair: tuple, /, *args: Any, **named: Any) -> Any:
    return pair[0](*args, **named)


class LaunchFunction(Protocol):
    """The type of :attr:`Kernel.launch <launchpad.Kernel.launch>` (:func:`launch_first` bound to its pair)."""

    def __call__(
        self,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...] | None,
        *args: Any,
        shared_mem: int = 0,
        stream: Any = None,
        cluster: tuple[int, int, int] | None = None,
        cooperative: bool = False,
        pdl: bool = False,
        **named: Any,
    ) -> None: ...


#: ``Kernel.launch`` is this function bound to ``(the executor's launch, the kernel's Traced)``: in
#: eager one C call more (the compiled module's), no Python frame; under torch.compile,
#: :mod:`launchpad.tracing` has Dynamo trace a stand-in for it that launches through the kernel's
#: operator, since Dynamo cannot trace into the executor's C function.
launch_first: Callable[..., Any] = getattr(_claunch, "launch_first", None) or _launch_first

#: Whether Dynamo is tracing: False in eager (one C call where the compiled module is built,
#: torch's Python function otherwise), True to Dynamo (:mod:`launchpad.tracing` has it trace a
#: stand-in for the C function; it knows torch's).
dynamo_compiling: Callable[[], bool] = getattr(_claunch, "dynamo_compiling", None) or torch.compiler.is_dynamo_compiling


@dataclass(eq=False)
class Traced:
    """What torch.compile needs of one kernel: :mod:`launchpad.tracing` registers its operator from
    this. ``key`` names it (a new key, a new operator: declared ``writes`` changed); ``launch`` is
    the executor's, which the operator's implementation calls."""

    key: str  # a str: Dynamo treats an int attribute as a size that may vary
    spec: KernelSpec
    launch: Callable[..., None]
    writes: tuple[str, ...] | None = None  # the tensors declared written; None: derived

    def __repr__(self) -> str:  # what repr(k.launch) shows of it: the kernel, not its whole spec
        return f"Traced({self.key!r}, kernel {self.spec.display_name!r})"


@dataclass(eq=False)
class BoundLaunch:
    """What torch.compile needs of a bound launch (``Kernel.bind``), which is :func:`launch_first`
    bound to ``(the executor's bound launch, this)``: the kernel's Traced and the launch it fixed."""

    traced: Traced
    grid: Any
    block: Any
    args: tuple
    options: dict

    def __repr__(self) -> str:
        return f"BoundLaunch(kernel {self.traced.spec.display_name!r}, grid {self.grid!r}, block {self.block!r})"


#: Each kernel's Traced by key, while the kernel lives: how the operator's registration, which
#: Dynamo runs with the key alone (a constant), finds it.
TRACED: weakref.WeakValueDictionary[str, Traced] = weakref.WeakValueDictionary()
_KEYS = itertools.count(1)


def new_key() -> str:
    """A key no Traced had before: ``k1``, ``k2``..."""
    return f"k{next(_KEYS)}"
