"""Whether two captures launched the same work, and nodes whose inputs launchpad cannot see.

Every capture :func:`launchpad.record` compares must have launched the same kernels, grids and
nodes as the base (:func:`same_structure`): where one does not, an input decides what the function
launches, which a replay cannot follow. Host and conditional nodes, and child graphs that an input
reaches, are refused by name.
"""

from __future__ import annotations

from typing import Any

from ..errors import RecordError
from .capture import Capture, Node

__all__ = ["compare_child", "refuse_opaque", "same_structure"]


def refuse_opaque(nodes: list[Node], values: dict[str, Any]) -> None:
    """Host and conditional nodes: launchpad cannot see what they read."""
    for i, node in enumerate(nodes):
        if node.kind in ("host", "conditional") and values:
            raise RecordError(
                f"the function's graph has {node.describe(i)}, which launchpad cannot look into: an input read "
                f"there would replay stale. Keep {node.kind} work outside the recorded function"
            )


def compare_child(i: int, node: Node, control: Node, probes: dict[str, Capture]) -> None:
    """A child graph: no input may reach into it (its nodes are not updated)."""
    for name, capture in probes.items():
        if _flat(capture.nodes[i]) != _flat(node) and _flat(control) == _flat(node):
            raise RecordError(
                f"sequence input {name!r} is read inside a child graph ({node.describe(i)}), whose nodes launchpad "
                "does not update: launch that work directly in the recorded function"
            )


def _flat(node: Node) -> list:
    return [(c.kind, c.function, c.block, c.addresses, _flat(c)) for c in node.children]


def same_structure(name: str, base: list[Node], nodes: list[Node]) -> None:
    """Raise :class:`RecordError` unless a capture with another value of input ``name`` (with the
    same values: ``name`` is "") launched the same kernels, grids and nodes."""

    def fail(detail: str) -> None:
        if not name:
            raise RecordError(
                f"the function launched different work on two captures with the same inputs ({detail}): it depends on "
                "something besides its inputs (a random choice, a counter), which a recording cannot follow"
            )
        raise RecordError(
            f"sequence input {name!r} decides what the function launches ({detail}); a sequence input may only "
            "change values its launches read. Leave it out of the inputs (it then stays at its recorded value), or "
            "record one sequence per value"
        )

    if len(base) != len(nodes):
        fail(f"{len(base)} graph nodes with the recorded value, {len(nodes)} with another")
    for i, (a, b) in enumerate(zip(base, nodes)):
        if a.kind != b.kind:
            fail(f"node {i} is a {a.kind} with the recorded value, a {b.kind} with another")
        if a.kind == "kernel" and (a.function, a.grid, a.block_dim, a.shared_mem) != (b.function, b.grid, b.block_dim,
                                                                                     b.shared_mem):  # fmt: skip
            what = "another kernel" if a.function != b.function else f"grid {b.grid}, block {b.block_dim}"
            fail(f"{a.describe(i)} has grid {a.grid}, block {a.block_dim}; with another value, {what}")
        if a.kind == "graph":
            same_structure(name, a.children, b.children)
