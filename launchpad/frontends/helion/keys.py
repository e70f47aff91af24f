"""Helion's specialization key, computed cheaply: which compiled host function a call may reuse.

Helion (1.0) binds a call to a ``BoundKernel`` keyed on ``Kernel._base_specialization_key(args)``
and on the values of the extractors that ``hl.specialize`` registered for that key
(``Kernel._specialize_extra``); the bound kernel's config, and so its compiled host function, is
fixed by then. The base key is one entry per positional argument, from
``helion.runtime.kernel._specialization_extractors``:

=================================  ==========================================================
argument                           Helion's key (1.0)
=================================  ==========================================================
``hl.constexpr(v)``, or annotated  the value itself
``hl.constexpr``
tensor, ``static_shapes=True``     dtype, device type, sizes, strides, ``mark_static`` dims
tensor, ``static_shapes=False``    dtype, device type, each size as ``min(size, 2)``, whether
                                   ``numel`` passes int32 (only when ``index_dtype`` is unset),
                                   ``mark_static`` dims
int, float, bool                   the type only (a value is specialized by ``hl.specialize``)
None                               None
anything else (a list, a           Helion's own extractor, called here too
function, a dtype, a dataclass)
=================================  ==========================================================

then the kernel's ``key=`` function of all the arguments, when given. :func:`make_key` returns a
function giving, for the types in the table, a key that partitions calls exactly as Helion's does
(``tests/test_helion.py`` checks that against ``Kernel._base_specialization_key`` over generated
arguments) from the cheapest reads: the device type as ``Tensor.is_cuda`` (``Tensor.device``
makes an object per call), ``Tensor.shape`` as it is (a tuple), and no per-dimension Python
loop for static shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

import torch

__all__ = ["make_key"]

_INT32_MAX = 2**31 - 1
# Heads every tensor's entry: no constexpr value (keyed as itself) can equal a tensor's key.
_TENSOR = object()


def make_key(kernel: Any) -> Callable[[tuple], tuple]:
    """The base-key function of a ``helion.Kernel``: ``key(args)`` for positional ``args`` (as
    Helion's ``Kernel.__call__`` passes them to ``bind``, defaults not applied)."""
    from helion.language.constexpr import ConstExpr

    constexpr = tuple(annotation is ConstExpr for annotation in kernel._annotations)
    key_fn = kernel._key_fn
    helion_key = kernel._specialization_key  # Helion's own extractor, for every other type
    tensor, parameter = torch.Tensor, torch.nn.Parameter

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
                device = value.is_cuda or value.device.type  # True stands for "cuda"
                if static:
                    append((_TENSOR, value.dtype, device, value.shape, value.stride(), marked))
                elif settings.index_dtype is None:
                    sizes = tuple([s if s < 2 else 2 for s in value.shape])
                    append((_TENSOR, value.dtype, device, sizes, value.numel() > _INT32_MAX, marked))
                else:
                    append((_TENSOR, value.dtype, device, tuple([s if s < 2 else 2 for s in value.shape]), marked))
            elif c is int or c is float or c is bool:
                append(c)
            elif value is None:
                append(None)
            else:
                append(other(value))
        if key_fn is not None:
            append(key_fn(*args))
        return tuple(out)

    return key
