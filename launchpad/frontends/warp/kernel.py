"""``WarpKernel``: a Warp kernel launched as ``kernel[dim](*args)``, with Warp's launch semantics.

A Warp launch is given its threads (``dim``, 1-4 extents), not its grid: the kernel's first
parameter is ``launch_bounds_t<N>``, and the grid is ``min(ceil(size / block), max_blocks)`` blocks
of the module's ``block_dim`` (:mod:`.args`). A tile kernel's ``dim`` is ``wp.launch_tiled``'s: the
block's threads are appended to it as its last dimension. ``kernel[dim]`` computes both once per
``dim`` (the Kernel's cache of configurations keeps them) and returns the compiled executor's
configured launch with the bounds bound before the arguments: per launch nothing is computed that
``dim`` fixes.

The class is registered for ``metadata["frontend"] == "warp"`` (``launchpad.kernel.KERNEL_TYPES``),
so :func:`launchpad.load` of a saved Warp kernel gives one, without Warp installed.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import Any

from ...errors import ArgumentError, ArgumentTypeError
from ...kernel import KERNEL_TYPES, Kernel
from .args import MAX_DIMS, MAX_EXTENT, grid_of, pack_bounds

__all__ = ["WarpKernel"]


class WarpKernel(Kernel):
    """A Warp kernel (:func:`launchpad.from_warp`, or :func:`launchpad.load` of a saved one).

    Launch it as ``wp.launch`` does, with torch tensors for arrays: ``kernel[dim](*args)``, where
    ``dim`` is an int or a tuple of 1-4 ints (the threads; ``wp.tid()`` their coordinates), or
    ``kernel.configure(dim, max_blocks=..., stream=...)(*args)``. ``kernel.bounds(dim)`` gives the
    grid and the launch-bounds value that :meth:`~launchpad.Kernel.launch` and
    :meth:`~launchpad.Kernel.bind` take as the first argument: ``kernel.launch(grid, None, bounds,
    *args)``.
    """

    def __init__(self, spec: Any, **options: Any):
        super().__init__(spec, **options)
        # plain attributes: under torch.compile each attribute read is a guard (a property's a call)
        self.kernel_dim = int(spec.metadata["kernel_dim"])
        self.block_dim = spec.plan.block[0] if spec.plan.block is not None else 256
        self.tiled = bool(spec.metadata.get("tiled"))  # launched as wp.launch_tiled: block_dim appended to dim

    def _words(self, dim: Any, max_blocks: Any = 0) -> tuple[int, list[int]]:
        """The grid and ``launch_bounds_t``'s words ``[*shape, size, coord_mult]`` of a launch of
        ``dim`` threads: plain arithmetic, which Dynamo traces (see :meth:`bounds`)."""
        name = self.spec.display_name
        try:
            extents = [operator.index(dim)] if not isinstance(dim, (tuple, list)) else [operator.index(n) for n in dim]
            blocks = operator.index(max_blocks)
        except TypeError:
            raise ArgumentTypeError(f"kernel {name!r}: dim must be an int or a tuple of 1-{MAX_DIMS} ints (the "
                                    f"threads, as wp.launch takes them), got {dim!r}") from None  # fmt: skip
        if self.tiled:  # wp.launch_tiled: the block's threads are the launch's last dimension
            if not 1 <= len(extents) < MAX_DIMS:
                raise ArgumentError(f"kernel {name!r} is a tile kernel: dim must have 1-{MAX_DIMS - 1} dimensions "
                                    f"(wp.launch_tiled appends block_dim {self.block_dim}), got {dim!r}")  # fmt: skip
            extents.append(self.block_dim)
        if not 1 <= len(extents) <= MAX_DIMS:
            raise ArgumentError(f"kernel {name!r}: dim must have 1-{MAX_DIMS} dimensions (Warp's LAUNCH_MAX_DIMS), "
                                f"got {dim!r}")  # fmt: skip
        for axis, n in enumerate(extents):
            if not 0 <= n <= MAX_EXTENT:
                raise ArgumentError(f"kernel {name!r}: dim[{axis}] = {n} is outside [0, {MAX_EXTENT}] (wp.tid() "
                                    "gives signed 32-bit coordinates; wp.launch refuses it too)")  # fmt: skip
        n = self.kernel_dim
        padded = extents + [1] * (n - len(extents))
        coord_mult = 1
        for extent in padded[n:]:  # dimensions beyond the kernel's wp.tid() share its coordinates
            coord_mult *= extent
        size = coord_mult
        for extent in padded[:n]:
            size *= extent
        return grid_of(size, self.block_dim, blocks), [*padded[:n], size, coord_mult]

    def bounds(self, dim: Any, max_blocks: int = 0) -> tuple[int, bytes]:
        """The grid (blocks) and ``launch_bounds_t`` bytes of a launch of ``dim`` threads, as
        ``wp.launch`` makes them (dimensions past the kernel's ``wp.tid()`` fold into ``coord_mult``,
        missing ones are 1).

        Raises
        ------
        ArgumentTypeError
            ``dim`` is not an int or a sequence of ints.
        ArgumentError
            ``dim`` has more than 4 dimensions, or a negative or too large extent.
        """
        grid, words = self._words(dim, max_blocks)
        return grid, pack_bounds(words, self.kernel_dim)

    def configure(self, dim: Any, *, max_blocks: int = 0, stream: Any = None) -> Callable[..., None]:
        """``kernel[dim]`` with ``wp.launch``'s ``max_blocks`` (0: no cap) and a stream (None:
        torch's current stream)."""
        grid, data = self.bounds(dim, max_blocks)
        options = {} if stream is None else {"stream": stream}
        return functools.partial(self._executor.configure(grid, None, options), data)

    def _configure(self, config: Any) -> Callable[..., None]:
        return self.configure(config)

    def _traced_config(self, config: Any) -> Callable[..., None]:
        """``kernel[dim]`` under torch.compile: :meth:`launch` with the bounds as the words the
        operator's ``int[]`` takes."""
        grid, words = self._words(config)
        return functools.partial(self.launch, grid, None, words)

    def __call__(self, *args: Any, **named: Any) -> None:
        """A kernel is launched, not called: refused with the way to launch it (a ``TypeError``)."""
        raise ArgumentTypeError(f"kernel {self.display_name!r} is launched, not called like a function: write "
                                f"k[dim](...) with the same {len(args) + len(named)} arguments, dim the threads "
                                "as wp.launch takes it")  # fmt: skip

    def __repr__(self) -> str:
        return f"<launchpad.WarpKernel {self.display_name!r} ({len(self.params)} params, block {self.block_dim})>"


KERNEL_TYPES["warp"] = WarpKernel
