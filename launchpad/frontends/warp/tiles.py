"""Which Warp kernels are tile kernels, and what their launches need: ``wp.launch_tiled``'s.

A tile kernel calls Warp's tile builtins (``wp.tile_load``, ``wp.tile_sum``, ``wp.tile_matmul``,
``wp.tile``, ``wp.untile``...), itself or through a ``@wp.func``. Its user launches it with
``wp.launch_tiled(kernel, dim, block_dim=...)``: the block's threads appended to ``dim`` as its
last dimension, the module compiled for that block (``WP_TILE_BLOCK_DIM``), and the dynamic shared
memory Warp's ``.meta`` gives its entry. :class:`~launchpad.WarpKernel` launches it so.

Whether a kernel calls tile builtins is read from its Python syntax tree and those of the user
functions it calls, each call's target resolved in the function's globals and closure as Warp's
code generation resolves it (a builtin reached through the ``warp`` module, a user function
followed): comments, strings and user functions of tile-like names do not count. The compiled
module's evidence counts too: shared memory in its ``.meta``, tile code in the entry's own body.
A tile kernel given as a cubin needs the ``.meta`` Warp wrote beside it, of this very module and
block (its shared memory is known from there alone); anything less is refused.

Warp is imported by the caller (:func:`launchpad.from_warp`).
"""

from __future__ import annotations

import ast
import re
import types
from pathlib import Path
from typing import Any

from ...errors import BinaryError
from .compile import beside, module_files

__all__ = ["calls_tiles", "tiles_of_cubin", "tiles_of_module"]

_TILE_CODE = re.compile(r"wp::tile(?!_shared_storage_t)")  # (every kernel's body declares tile storage)
_BLOCK = re.compile(r"#define\s+WP_TILE_BLOCK_DIM\s+(\d+)")


def tiles_of_module(kernel: Any, entry: str, meta: dict, source: str) -> tuple[bool, int]:
    """Whether the kernel is a tile kernel, and its dynamic shared memory, for the module launchpad
    compiled (its ``.meta`` and ``.cu``, written for the module's own block)."""
    compiled, shared = _compiled_evidence(entry, meta, source)
    return compiled or calls_tiles(kernel.adj), shared


def _compiled_evidence(entry: str, meta: dict, source: str) -> tuple[bool, int]:
    """Whether a compiled module shows the entry to be a tile kernel (shared memory in its ``.meta``,
    tile code in its own body), and that shared memory."""
    shared = int(meta.get(f"{entry}_smem_bytes", 0) or 0)
    return bool(shared or _TILE_CODE.search(_body(source, entry))), shared


def tiles_of_cubin(kernel: Any, name: str, entry: str, cubin: Any, block_dim: int) -> tuple[bool, int]:
    """:func:`tiles_of_module` for a cubin compiled earlier (bytes, or a path with Warp's ``.meta``
    and ``.cu`` beside it); a tile kernel whose shared memory or block cannot be known is refused."""
    calls = calls_tiles(kernel.adj)
    path = Path(cubin) if isinstance(cubin, (str, Path)) else None
    if path is None or not beside(path, ".meta").is_file():
        if calls:
            raise BinaryError(f"kernel {name!r} uses tiles, whose shared memory Warp writes in the module's .meta "
                              "file: pass the cubin's path with its .meta beside it (as wp.compile_aot_module "
                              "writes them), or let from_warp compile the kernel")  # fmt: skip
        return False, 0
    meta, source = module_files(path)
    compiled, shared = _compiled_evidence(entry, meta, source)
    if not (compiled or calls):
        return False, 0
    if f"{entry}_smem_bytes" not in meta:
        raise BinaryError(f"kernel {name!r} uses tiles, and the .meta beside {path.name} has no entry for it "
                          "(another module's file): pass the cubin with its own .meta, or let from_warp compile the "
                          "kernel")  # fmt: skip
    found = _BLOCK.search(source)
    if found is None and path.name.startswith(kernel.module.get_module_identifier(block_dim) + "."):
        return True, shared  # (no source, but the file name carries this module's hash for this block)
    if found is None or int(found.group(1)) != block_dim:
        block = f"block_dim {found.group(1)}" if found else "a block launchpad cannot tell (no .cu beside it)"
        raise BinaryError(f"kernel {name!r} is a tile kernel compiled for {block}, and the module's block_dim "
                          f"is {block_dim}: launch_tiled's block must be the one it was compiled for; set the "
                          "module's block_dim option to it, or let from_warp compile the kernel")  # fmt: skip
    return True, shared


def calls_tiles(adj: Any, seen: set[int] | None = None) -> bool:
    """Whether a kernel's or ``@wp.func``'s body (``adj``: Warp's adjoint, with its syntax tree)
    calls a Warp tile builtin, itself or through a user function it calls."""
    from warp._src.context import builtin_functions

    seen = set() if seen is None else seen
    if id(adj) in seen or getattr(adj, "tree", None) is None:
        return False
    seen.add(id(adj))
    for node in ast.walk(adj.tree):
        if not isinstance(node, ast.Call):
            continue
        target = node.func
        if isinstance(target, ast.Attribute):
            base = _resolve(adj, target.value)
            if isinstance(base, types.ModuleType) and base.__name__.partition(".")[0] == "warp":
                name = target.attr
                if name in builtin_functions and (name == "tile" or name.startswith("tile_") or name == "untile"):
                    return True
        callee = _resolve(adj, target)
        functions = [callee, *getattr(callee, "user_overloads", {}).values()] if callee is not None else []
        if any(getattr(f, "adj", None) is not None and calls_tiles(f.adj, seen) for f in functions):
            return True
    return False


def _resolve(adj: Any, expr: ast.expr) -> Any:
    """What a name or dotted name of a function's body is bound to in its closure and globals (None:
    a local, or anything else)."""
    if isinstance(expr, ast.Name):
        return adj.resolve_external_reference(expr.id)
    if isinstance(expr, ast.Attribute):
        base = _resolve(adj, expr.value)
        return getattr(base, expr.attr, None) if base is not None else None
    return None


def _body(source: str, entry: str) -> str:
    """The entry's own body in a module's ``.cu`` source ("" where there is none)."""
    return source.split(f"{entry}(", 1)[-1].split('extern "C"', 1)[0] if source else ""
