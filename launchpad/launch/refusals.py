"""The words of every refused launch, off the hot path: the generated launch functions call these when a
cheap check fails, and each raises the :class:`~launchpad.ArgumentError` (or
:class:`~launchpad.ArgumentTypeError`) that names the kernel, the argument and what was wrong."""

from __future__ import annotations

import numbers
import struct
from typing import Any

import torch

from ..core.params import Param
from ..core.spec import Arg, LaunchPlan, constexpr_positions, names_by_position
from ..errors import ArgumentError, ArgumentTypeError
from . import checks as _checks
from .checks import MISSING, Context
from .describe import no_config

__all__ = ["MISSING", "Fail"]


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
        """Refuse ``launch`` or ``bind`` called without its grid or its block (see :func:`~launchpad.launch.describe.no_config`)."""
        lacks = " and ".join(w for w, v in (("the grid", grid), ("the block", block)) if v is MISSING)
        raise no_config(ctx, lacks, call, plan.block)

    @staticmethod
    def block(ctx: Context, block: Any, max_threads: int) -> None:
        x, y, z = _checks.dims(block, "block", ctx)
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
    def value(ctx: Context, arg: Arg, p: Param, value: Any, exc: Exception) -> None:
        """Say why ``value`` cannot be packed as parameter ``p`` (``exc``: struct's refusal)."""
        if p.kind in ("int", "untyped") and isinstance(value, int):
            raise ctx.error(arg, f"{value} is out of range for {p.type or f'{p.size} bytes'}") from None
        raise ctx.error(
            arg, f"cannot pack {_checks.describe(value)} as {p.type or p.kind}: {exc}", ArgumentTypeError
        ) from None
