"""The words of every refused launch, off the hot path: the generated launch functions call these when a
cheap check fails, and each raises the :class:`~launchpad.ArgumentError` (or
:class:`~launchpad.ArgumentTypeError`) that names the kernel, the argument and what was wrong."""

from __future__ import annotations

import numbers
import struct
from collections.abc import Sequence
from typing import Any

import torch

from ..core.params import Param
from ..core.spec import Arg, LaunchPlan, constexpr_positions, names_by_position
from ..errors import ArgumentError, ArgumentTypeError
from . import checks as _checks
from . import config as _config
from .checks import MISSING, Context

__all__ = ["LAUNCH_OPTIONS", "MISSING", "Fail", "place_named"]

#: Keyword options of a launch; a kernel argument of the same name takes the keyword instead.
LAUNCH_OPTIONS = ("shared_mem", "stream", "cluster", "cooperative", "pdl")


class Fail:
    """Diagnoses, off the hot path; each raises an ``ArgumentError`` naming what was wrong."""

    @staticmethod
    def count(ctx: Context, given: tuple, extra: tuple, block: Any = None) -> None:
        names = names_by_position(ctx.args)[: len(given)]
        optional = constexpr_positions(ctx.args)
        n = sum(1 for v in given if v is not MISSING) + len(extra)
        named = names and all(a.name for a in ctx.args if a.path)  # (else ``arg3``s: no list)
        listed = f" ({', '.join(names)})" if named else ""
        missing = [name for i, (name, v) in enumerate(zip(names, given)) if v is MISSING and i not in optional]
        detail = f"; missing: {', '.join(missing)}" if listed and missing and not extra else ""
        if isinstance(block, torch.Tensor) or hasattr(block, "__cuda_array_interface__"):
            detail += (f"; the block given is a {type(block).__name__}: was it left out? launch(grid, block, *args) "
                       "takes the block second (None: the kernel's own, for a kernel with a fixed block)")  # fmt: skip
        raise ArgumentTypeError(f"kernel {ctx.kernel_name!r} takes {len(given)} arguments{listed}, got {n}{detail}")

    @staticmethod
    def no_config(ctx: Context, plan: LaunchPlan, grid: Any, block: Any, call: str) -> None:
        """Refuse ``launch`` or ``bind`` called without its grid or its block (Python's own TypeError
        would name neither the kernel nor what comes first). The arguments listed are those to give:
        not a constexpr the binary fixed (Triton's ``BLOCK``), which may be left out."""
        lacks = " and ".join(w for w, v in (("the grid", grid), ("the block", block)) if v is MISSING)
        left_out = constexpr_positions(ctx.args)
        names = [n for i, n in enumerate(names_by_position(ctx.args)) if i not in left_out]
        own = f" (None: the kernel's own, {plan.block})" if plan.block else ""
        takes = f"then the kernel's arguments ({', '.join(names)})" if names else "and no arguments"
        raise ArgumentTypeError(
            f"kernel {ctx.kernel_name!r}: {call}(grid, block, *args) was called without {lacks}: it takes the grid, "
            f"the block{own}, {takes}; or write kernel[grid, block](*args)"
        )

    @staticmethod
    def block(ctx: Context, block: Any, max_threads: int) -> None:
        x, y, z = _config.dims(block, "block", ctx)
        raise ArgumentError(
            f"kernel {ctx.kernel_name!r}: block {block!r} has {x * y * z} threads, "
            f"the kernel allows at most {max_threads} per block"
        )

    @staticmethod
    def grid_limit(ctx: Context, grid: Any, plan: LaunchPlan) -> None:
        """Refuse a grid dimension above the plan's ``max_grid`` (cuTile's limit); return where every
        dimension is within it. The first check of a launch, as ``ct.launch`` makes it: any integer
        (numpy's too) is compared as given, before the device's limits; anything else the launch
        checks after."""
        for axis, n in zip("xyz", grid if isinstance(grid, (tuple, list)) else (grid,)):
            if isinstance(n, numbers.Integral) and int(n) > plan.max_grid:
                words = plan.max_grid_words or f"the kernel's limit of {plan.max_grid} blocks"
                raise ArgumentError(
                    f"kernel {ctx.kernel_name!r}: grid dimension {axis} = {n} is above {words}; launch the work in "
                    "several launches"
                )

    @staticmethod
    def fixed_block(ctx: Context, block: Any, fixed: tuple) -> None:
        raise ArgumentError(f"kernel {ctx.kernel_name!r} was compiled for block {fixed}, got block {block!r}")

    @staticmethod
    def const(ctx: Context, arg: Arg, value: Any) -> None:
        raise ctx.error(arg, f"the kernel was specialized for {arg.value!r}, got {_checks.describe(value)}")

    @staticmethod
    def unknown(ctx: Context, arg: Arg, value: Any) -> None:
        if arg.options.get("one_or_none"):
            raise ctx.error(arg, f"the kernel was specialized for 1 or None (Triton compiles either into the kernel), "
                            f"got {_checks.describe(value)}")  # fmt: skip
        raise ctx.error(
            arg, f"got {_checks.describe(value)}, but the value this kernel was compiled for is not recorded "
            "(a Triton cache folder keeps no constexpr values), so it cannot be checked; leave the argument out, "
            "or save the kernel with Kernel.save, which keeps them"
        )  # fmt: skip

    @staticmethod
    def multiple(ctx: Context, arg: Arg, value: Any) -> None:
        raise ctx.error(
            arg, f"{value!r} is not a multiple of {arg.multiple_of}, but the kernel was compiled assuming it is"
        )

    @staticmethod
    def pack(ctx: Context, error: Exception, values: tuple) -> None:
        """Find which value struct refused and say why."""
        by_param = {a.param: a for a in ctx.args if a.kind == "param"}
        for p, value in zip(sorted(ctx.params, key=lambda p: p.offset), values):
            try:
                struct.pack("<" + p.code, value)
            except Exception as exc:
                Fail.value(ctx, by_param.get(p.index, Arg(f"param {p.index}", "param", (), p.index)), p, value, exc)
        raise ArgumentError(f"kernel {ctx.kernel_name!r}: packing the arguments failed: {error}") from error

    @staticmethod
    def scalar_tensor(ctx: Context, arg: Arg, value: torch.Tensor) -> None:
        """Refuse a tensor for a scalar parameter: struct would read its value, a wait for the device."""
        p = ctx.params[arg.param]
        raise ctx.error(arg, f"expected a Python {p.kind} for this {p.type or p.kind} value, got "
                             f"{_checks.describe(value)}: pass its value (t.item()), or make the parameter a pointer",
                        ArgumentTypeError)  # fmt: skip

    @staticmethod
    def value(ctx: Context, arg: Arg, p: Param, value: Any, exc: Exception) -> None:
        """Say why ``value`` cannot be packed as parameter ``p`` (``exc``: struct's refusal)."""
        number = hasattr(value, "__index__") and not isinstance(value, (bool, torch.Tensor))
        if p.kind in ("int", "untyped") and number:  # (numpy's ints too: struct's words name its format)
            raise ctx.error(arg, f"{int(value)} is out of range for {p.type or f'{p.size} bytes'}") from None
        if p.kind == "float" and isinstance(exc, OverflowError):
            raise ctx.error(arg, f"{value!r} is out of range for {p.type or f'a {p.size}-byte float'}") from None
        raise ctx.error(
            arg, f"cannot pack {_checks.describe(value)} as {p.type or p.kind}: {exc}", ArgumentTypeError
        ) from None


def place_named(ctx: Context, names: Sequence[str], given: Sequence[Any], kw: dict[str, Any],
                call: str) -> tuple[list[Any], dict[str, Any]]:  # fmt: skip
    """``[grid, block, *args]`` of a call given ``given`` by position (MISSING where left out) and
    ``kw`` by name (the grid, the block, the kernel's arguments), and its launch options; a name given
    twice or unknown is refused, in the words Python would use but naming the kernel."""
    values = list(given)
    while values and values[-1] is MISSING:  # (the fast launch's defaults)
        values.pop()
    values += [MISSING] * (2 + len(names) - len(values))
    position = {"grid": 0, "block": 1, **{n: 2 + i for i, n in enumerate(names)}}
    options = {}
    for key, value in kw.items():
        i = position.get(key)
        if i is not None:
            if values[i] is not MISSING:
                raise ArgumentTypeError(f"kernel {ctx.kernel_name!r}: {call}() got multiple values for argument "
                                        f"{key!r}")  # fmt: skip
            values[i] = value
        elif key in LAUNCH_OPTIONS:
            options[key] = value
        else:
            raise ArgumentTypeError(
                f"kernel {ctx.kernel_name!r}: {call}() got an unexpected keyword argument {key!r} (arguments: "
                f"{', '.join(names) or 'none'}; options: {', '.join(LAUNCH_OPTIONS)})"
            )
    return values, options
