"""Helion's specialization key, computed cheaply: which compiled host function a call may reuse.

Helion (1.0 to 1.4) binds a call to a ``BoundKernel`` keyed on
``Kernel._base_specialization_key(args)`` and on the values of the extractors that
``hl.specialize`` registered for that key (``Kernel._specialize_extra``); the bound kernel's
config, and so its compiled host function, is fixed by then. The base key is one entry per
positional argument, from ``helion.runtime.kernel._specialization_extractors``:

=================================  ==========================================================
argument                           Helion's key
=================================  ==========================================================
``hl.constexpr(v)``, or annotated  the value itself
``hl.constexpr``
tensor, ``static_shapes=True``     dtype, sizes, strides, ``mark_static`` dims (1.0: and the
                                   device type)
tensor, ``static_shapes=False``    dtype, each size as 2 (1.0: ``min(size, 2)``, and the
                                   device type), whether ``numel`` passes int32 (only when
                                   ``index_dtype`` is unset), ``mark_static`` dims
int, float, bool                   the type only (a value is specialized by ``hl.specialize``)
None                               None
anything else (a list, a           Helion's own extractor, called here too
function, a dtype, a dataclass)
=================================  ==========================================================

then, from 1.1, the device of the call (:class:`~.versions.Rules`: the first tensor argument's
type in 1.1; from 1.2 ``_find_device``'s type and CUDA compute capability), from 1.4 whether the
call is distributed, and the kernel's ``key=`` function of all the arguments, when given.
:func:`make_key` returns a function giving, for the types in the table, a key that partitions
calls exactly as the installed Helion's does (``tests/test_helion.py`` checks that against
``Kernel._base_specialization_key`` over generated arguments) from the cheapest reads: the
device as ``Tensor.is_cuda`` and ``Tensor.get_device()`` (``Tensor.device`` makes an object per
call), ``Tensor.shape`` as it is (a tuple), and no per-dimension Python loop for static shapes.

Helion 1.5 (``Rules.bind_per_call``) is not reproduced: its key adds input-tensor aliasing and a
hardware promotion key, and which bound kernel a key reaches changes as compiling publishes
extractors; :class:`~.kernel.HelionKernel` asks ``Kernel.bind`` on every call, and
:func:`make_key` gives Helion's own ``_base_specialization_key`` there.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

from .versions import Rules, rules_of

__all__ = ["make_key"]

_INT32_MAX = 2**31 - 1
# Heads every tensor's entry: no constexpr value (keyed as itself) can equal a tensor's key.
_TENSOR = object()
# Each CUDA device's compute capability, by index, as Helion reads it (it never changes in a process).
_CAPABILITY: dict[int, Any] = {}


def _capability(index: int) -> Any:
    cap = _CAPABILITY.get(index, _TENSOR)
    if cap is _TENSOR:
        from helion._compat import target_device_capability

        cap = _CAPABILITY[index] = target_device_capability(torch.device("cuda", index))
    return cap


def _device_entry(rules: Rules) -> Callable[[tuple, tuple[bool, ...]], tuple] | None:
    """The function giving the entries after the arguments that name the call's device (None: 1.0)."""
    if rules.device_entry is None:
        return None
    tensor, parameter = torch.Tensor, torch.nn.Parameter
    if rules.device_entry == "first_tensor":

        def first_tensor(args: tuple, constexpr: tuple[bool, ...]) -> tuple:
            for value, const in zip(args, constexpr):
                if not const and isinstance(value, tensor):
                    return (value.device.type,)
            return (None,)

        return first_tensor

    from helion.runtime.kernel import _device_specialization_key

    def find_device(args: tuple, constexpr: tuple[bool, ...]) -> tuple:
        first: Any = args[0] if args else None
        c = first.__class__
        if c is tensor or c is parameter:  # what _find_device returns first, read cheaply
            if first.is_cuda:
                return ("cuda", _capability(first.get_device()))
            return (first.device.type, None)
        return _device_specialization_key(args)  # lists, dicts, torch.device, ...: Helion's own search

    return find_device


def make_key(kernel: Any, rules: Rules | None = None) -> Callable[[tuple], tuple]:
    """The base-key function of a ``helion.Kernel``: ``key(args)`` for positional ``args`` (as
    Helion's ``Kernel.__call__`` passes them to ``bind``, defaults not applied).

    Parameters
    ----------
    kernel
        The Helion kernel.
    rules
        What the Helion release keys on; the installed release's when None.
    """
    from helion.language.constexpr import ConstExpr

    rules = rules if rules is not None else rules_of()
    if rules.bind_per_call:  # 1.5: Helion's own key, never a copy of it (module documentation)
        return kernel._base_specialization_key
    constexpr = tuple(annotation is ConstExpr for annotation in kernel._annotations)
    key_fn = kernel._key_fn
    helion_key = kernel._specialization_key  # Helion's own extractor, for every other type
    tensor, parameter = torch.Tensor, torch.nn.Parameter
    with_device, small_apart = rules.device_in_tensor, rules.small_sizes_apart
    device_entry = _device_entry(rules)
    distributed = _distributed(kernel) if rules.distributed else None

    def other(value: Any) -> Hashable:
        return value.value if isinstance(value, ConstExpr) else helion_key(value)

    def key(args: tuple) -> tuple:
        settings = kernel.settings
        static = settings.static_shapes
        out: list[Hashable] = []
        append = out.append
        for value, const in zip(args, constexpr):
            c = value.__class__
            if const:
                append(value.value if isinstance(value, ConstExpr) else value)
            elif c is tensor or c is parameter:
                marked = getattr(value, "_dynamo_static_indices", None)
                marked = frozenset(marked) if marked else None  # Helion: absent and empty alike
                device = (value.is_cuda or value.device.type) if with_device else None  # True: "cuda"
                if static:
                    append((_TENSOR, value.dtype, device, value.shape, value.stride(), marked))
                else:
                    # 1.0 keys sizes 0 and 1 apart; from 1.1 only the number of dimensions counts
                    sizes = tuple([s if s < 2 else 2 for s in value.shape]) if small_apart else value.ndim
                    if settings.index_dtype is None:
                        append((_TENSOR, value.dtype, device, sizes, value.numel() > _INT32_MAX, marked))
                    else:
                        append((_TENSOR, value.dtype, device, sizes, marked))
            elif c is int or c is float or c is bool:
                append(c)
            elif value is None:
                append(None)
            else:
                append(other(value))
        if device_entry is not None:
            out.extend(device_entry(args, constexpr))
        if distributed is not None:
            append(distributed(args))
        if key_fn is not None:
            append(key_fn(*args))
        return tuple(out)

    return key


def _distributed(kernel: Any) -> Callable[[tuple], bool]:
    """Helion 1.4's ``Kernel._compute_is_distributed``: always False outside an initialized
    ``torch.distributed`` (the one cheap read), Helion's own answer inside one."""
    import torch.distributed as dist

    initialized = dist.is_initialized if dist.is_available() else (lambda: False)
    compute = kernel._compute_is_distributed

    def distributed(args: tuple) -> bool:
        return bool(initialized() and compute(args))

    return distributed
