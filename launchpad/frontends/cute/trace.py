"""What CuTe DSL traced while compiling a host function: each kernel launch's arguments (their CuTe
types, as :mod:`.layout` reads them) and its configuration (block, cluster, dynamic shared memory).

:func:`recording` hooks CuTe's ``KernelLauncher.launch`` for one compile; :func:`_describe` says
what each kernel argument is to launchpad: a tensor (its ``!cute.memref`` type; a ``cutlass.Array``
as the static tensor of its layout), a scalar, a constant compiled in, a value fully known when
compiling (no bytes at run time), or something the host function builds that launchpad cannot
(a TMA atom), which the front end refuses by name.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Iterator
from typing import Any

from .layout import SCALAR_WORDS

__all__ = ["recording"]

_lock = threading.Lock()  # one recorded compile at a time: the launch hook is process-wide


@contextlib.contextmanager
def recording() -> Iterator[list[dict]]:
    """Record every kernel launch CuTe traces (its arguments' types, its configuration)."""
    from cutlass.cutlass_dsl import cutlass as _cc

    launches: list[dict] = []
    original = _cc.KernelLauncher.launch

    def launch(self: Any, *a: Any, **kw: Any) -> Any:
        launches.append(_record(self, a, kw))
        return original(self, *a, **kw)

    with _lock:
        setattr(_cc.KernelLauncher, "launch", launch)  # noqa: B010  (the hook, undone below)
        try:
            yield launches
        finally:
            setattr(_cc.KernelLauncher, "launch", original)  # noqa: B010


def _record(launcher: Any, a: tuple, kw: dict) -> dict:
    """One traced launch: the kernel's name, each argument's description, the configuration."""
    body = launcher.funcBody
    bound = inspect.signature(body).bind(*launcher.func_args, **launcher.func_kwargs)
    params = [(pname, _describe(value)) for pname, value in bound.arguments.items()]
    if params and params[0][0] == "self" and not hasattr(bound.arguments["self"], "__extract_mlir_values__"):
        params = params[1:]  # a method's object (a class-based kernel): Python's, no kernel parameter
    kw = dict(kw)
    preprocess = getattr(launcher.dsl, "_preprocess_launch_config_args", None)
    if preprocess is not None:  # CuTe's own: ``stream=`` is its ``async_deps`` (launchpad launches on torch's stream)
        preprocess(a, kw)
    config = launcher.dsl.LaunchConfig(*a, **kw)
    return {
        "name": getattr(body, "__name__", "kernel"), "params": params,
        "block": _static(config.block), "cluster": _static(config.cluster) if config.has_cluster else None,
        "smem": config.smem if isinstance(config.smem, int) else None if config.smem is None else "dynamic",
    }  # fmt: skip


def _static(dims: Any) -> tuple[int, ...] | str:
    values = [1 if d is None else d for d in dims]
    return tuple(values) if all(isinstance(d, int) for d in values) else "dynamic"


def _describe(value: Any) -> tuple[str, Any]:
    """``("tensor", type)``, ``("scalar", word)``, ``("const", value)`` or ``("other", what)``."""
    import cutlass

    if value is None or isinstance(value, (bool, int, float, str)):
        return ("const", value)
    if isinstance(value, tuple) and all(_describe(v)[0] == "const" for v in value):
        return ("const", list(value))  # a Constexpr tuple (a cluster shape), compiled in; a list, as saved (JSON)
    if isinstance(value, cutlass.Numeric):
        word = SCALAR_WORDS.get(type(value).__name__)
        return ("scalar", word) if word else ("other", f"a {type(value).__name__} scalar")
    if isinstance(value, cutlass.Array):
        return _describe_array(value)
    text = ""
    with contextlib.suppress(Exception):
        text = str(value.type)
    if text.startswith("!cute.memref"):
        return ("tensor", text)
    static = _static_types(value)
    if static:  # a layout, tiled copy or MMA fully known when compiling: no bytes at run time
        return ("static", f"a {type(value).__name__} ({static})")
    return ("other", f"a {type(value).__name__}" + (f" ({text})" if text else ""))


def _static_types(value: Any) -> str:
    """The CuTe types of a value that holds nothing at run time (its MLIR values are CuTe layout-like
    types with no dynamic mode, ``?``), or ""."""
    types = []
    with contextlib.suppress(Exception):
        types = [str(v.type) for v in value.__extract_mlir_values__()]
    static = ("!cute.tiled_copy<", "!cute.tiled_mma<", "!cute.layout<", "!cute.composed_layout<", "!cute.shape<")
    if types and all(t.startswith(static) and "?" not in t for t in types):
        return ", ".join(t.split("<", 1)[0] for t in types)
    return ""


#: CuTe DSL's numeric classes and the element type a memref names them by (:data:`ELEMENT_TYPES`).
_ARRAY_ELEMENTS = {
    "Int8": "i8", "Int16": "i16", "Int32": "i32", "Int64": "i64", "Uint8": "ui8", "Uint16": "ui16",
    "Uint32": "ui32", "Uint64": "ui64", "Float16": "f16", "BFloat16": "bf16", "Float32": "f32", "Float64": "f64",
    "Float8E4M3FN": "f8E4M3FN", "Float8E5M2": "f8E5M2",
}  # fmt: skip


def _describe_array(value: Any) -> tuple[str, Any]:
    """A ``cutlass.Array`` in global memory: one MLIR value, its data pointer (the kernel's parameter
    is that pointer); its element type, shape, strides (in elements) and alignment are static, so it
    is the fully static tensor of the same layout, whose memref type says so and is checked the same."""
    what = f"a cutlass.Array ({getattr(value, 'space', '?')} memory)"
    element = _ARRAY_ELEMENTS.get(getattr(getattr(value, "dtype", None), "__name__", ""))
    shape, strides = getattr(value, "shape", None), getattr(value, "strides", None)
    space = str(getattr(value, "space", ""))
    if space not in ("gmem", "generic") or element is None or not shape or not strides or len(shape) != len(strides):
        return ("other", what)
    if not all(type(v) is int for v in (*shape, *strides)):
        return ("other", what)
    layout = f"({','.join(map(str, shape))}):({','.join(map(str, strides))})"
    align = getattr(value, "align", None)
    return ("tensor", f'!cute.memref<{element}, {space}, {f"align<{int(align)}>, " if align else ""}"{layout}">')
