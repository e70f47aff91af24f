"""Which arguments a Triton kernel may write, from its TTIR: for ``torch.compile``'s schema.

A store, an atomic or a descriptor store writes through its first operand. Each SSA value is
followed back to the function arguments it is computed from (an over-approximation: every value an
operation defines takes the arguments of all its operands; a loop's or branch's values also take
everything its regions yield), so a written argument is never missed; an argument that only offsets
a pointer (``n``, a stride) may be counted and is dropped later, as it is not a tensor. A loaded
value is data, not an address, unless it is itself a pointer.

What cannot be followed gives None (every tensor argument then counts as written): an operation
this module does not know (a call, a barrier, inline assembly not declared pure), a pointer made
from an int or loaded from memory, unstructured branches.
"""

from __future__ import annotations

import re

from ...core.taint import Instruction, written

__all__ = ["written_arguments"]

_WRITES = ("tt.store", "tt.atomic_rmw", "tt.atomic_cas", "tt.descriptor_store", "tt.descriptor_reduce",
           "tt.descriptor_scatter", "tt.experimental_descriptor_store")  # fmt: skip
# Operations that write no memory an argument points to (shared memory is the kernel's own).
_READS_ONLY = frozenset({
    "tt.func", "tt.return", "tt.load", "tt.addptr", "tt.splat", "tt.unsplat", "tt.broadcast", "tt.expand_dims",
    "tt.reshape", "tt.make_range", "tt.get_program_id", "tt.get_num_programs", "tt.dot", "tt.dot_scaled",
    "tt.reduce", "tt.reduce.return", "tt.scan", "tt.scan.return", "tt.trans", "tt.cat", "tt.join", "tt.split",
    "tt.fp_to_fp", "tt.bitcast", "tt.ptr_to_int", "tt.mulhiui", "tt.clampf", "tt.precise_sqrt", "tt.precise_divf",
    "tt.extern_elementwise", "tt.histogram", "tt.gather", "tt.make_tensor_ptr", "tt.advance", "tt.assert",
    "tt.print", "tt.descriptor_load", "tt.descriptor_gather", "tt.experimental_descriptor_load",
    "tt.make_tensor_descriptor", "tt.map_elementwise", "tt.map_elementwise.return", "ub.poison",
    "scf.for", "scf.if", "scf.while", "scf.yield", "scf.condition", "scf.execute_region",
})  # fmt: skip
_PREFIXES = ("arith.", "math.")
_YIELDS = ("scf.yield", "scf.condition", "tt.reduce.return", "tt.scan.return", "tt.map_elementwise.return")
_VALUE = re.compile(r"%([\w$.-]+)(?:#\d+|:\d+)?")
_OP = re.compile(r'^\s*(?:%[^=]*?=\s*)?"?([a-z_]+\.[\w.]+)"?')


def written_arguments(ttir: str, name: str) -> tuple[bool, ...] | None:
    """For each argument of the TTIR function ``name``, whether the kernel may write through it;
    None where its TTIR cannot say (see the module documentation)."""
    found = _function(ttir, name)
    if found is None:
        return None
    arguments, lines = found
    ops: list[Instruction] = [("define", [a], [k]) for k, a in enumerate(arguments)]  # (each argument is itself)
    regions: list[list[str]] = []  # the values each open region's operation defines, block arguments too
    for line in lines:
        text = line.split(" loc(")[0].strip()
        if not text:
            continue
        if text.startswith("}"):  # a region ends ("} else {" and "} do {" go on with the same operation)
            if not regions:
                break  # the function's own end
            if not text.endswith("{"):
                regions.pop()
            continue
        if text.startswith("^"):  # a block's arguments: as if its region's operation defined them
            if regions:
                regions[-1].extend(_VALUE.findall(text))
            continue
        m = _OP.match(text)
        op = m.group(1) if m else ""
        pure_asm = op == "tt.elementwise_inline_asm" and "pure = true" in text  # (no side effects, declared)
        if op not in _READS_ONLY and op not in _WRITES and not op.startswith(_PREFIXES) and not pure_asm:
            return None  # an operation whose effects are not known here (a call, inline asm, a branch ...)
        if op == "tt.load" and "!tt.ptr<!tt.ptr" in text:
            return None  # a pointer read from memory: where it points is not known here
        lhs, _, rhs = text.partition("=") if text.startswith("%") else ("", "", text)
        defined, used = _VALUE.findall(lhs), _VALUE.findall(rhs)
        if text.endswith("{"):  # it opens a region: its block arguments (scf.for's) are named on this line
            defined += used
            regions.append(defined)
        if op in _YIELDS:  # what a region yields flows to its operation's values and block arguments
            defined = [v for region in regions for v in region]
        if op in _WRITES:
            if not used:
                return None  # (a write through nothing this reads)
            ops.append(("write", [], [used[0]]))
        elif op != "tt.load":  # (a loaded value is data: a loaded pointer was refused above)
            ops.append(("define", defined, used))
    return written(len(arguments), ops)


def _function(ttir: str, name: str) -> tuple[list[str], list[str]] | None:
    """The public function's argument names and the lines of its body; None where the module has
    other functions (a call's effects are not followed) or none of that name."""
    if len(re.findall(r"\btt\.func\b", ttir)) != 1:
        return None
    m = re.search(rf"tt\.func\s+public\s+@{re.escape(name)}\s*\(", ttir)
    if m is None:
        return None
    depth, end = 1, m.end()
    while depth and end < len(ttir):
        depth += {"(": 1, ")": -1}.get(ttir[end], 0)
        end += 1
    arguments = re.findall(r"%([\w$.-]+)\s*:", ttir[m.end() : end - 1])
    return arguments, ttir[end:].splitlines()[1:]  # (the first line: the rest of the function's own)
