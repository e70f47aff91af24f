"""Which parameters a kernel may write through, from its PTX: for ``torch.compile``'s schema.

A store, a reduction, an atomic or a bulk copy to global memory writes through its address
operand. Each register is followed back to the parameters it is computed from, over every
instruction that defines it (PTX registers are not single-assignment, loops reuse them), so a
written parameter is never missed; a value loaded from memory is marked as such instead. A write
whose address holds a loaded value (an index or a pointer read from memory: which array it
reaches cannot be told) gives None, as does an instruction this module does not know to leave
memory alone (a call, a surface store, a tensor map's rewrite) and that then counts every
parameter as written. Shared, local and parameter memory are the kernel's own: writes there are
not the caller's tensors.
"""

from __future__ import annotations

import re
from typing import Any

from .taint import Instruction, written

__all__ = ["written_args", "written_params"]

_REGISTER = re.compile(r"%[A-Za-z_$][\w$]*")
_NAME = re.compile(r"[A-Za-z_$][\w$.]*")
_OWN_SPACES = ("shared", "local", "param")  # (memory the kernel owns; "shared::cta", "shared::cluster" too)
_WRITES = ("st", "red", "atom", "stmatrix")  # through their address operand (the first in brackets)
_UNKNOWN = ("call", "sust", "sured", "tensormap", "multimem", "discard", "tex", "suld")  # effects not followed
_READS = ("ld", "ldu", "ldmatrix", "wmma", "wgmma", "tcgen05")  # a destination read from memory: marked
_NO_DESTINATION = ("bra", "ret", "exit", "bar", "barrier", "membar", "fence", "trap", "brkpt", "prefetch",
                   "prefetchu", "applypriority", "griddepcontrol", "setmaxnreg", "nanosleep", "pmevent",
                   "mbarrier", "cp")  # fmt: skip


def written_args(args: Any, param_count: int, ptx: str, entry: str) -> list[int] | None:
    """The indices (into a spec's ``args``) of the arguments whose parameters the kernel ``entry``
    may write through, as its PTX says; None where it cannot say or the PTX's parameters are not
    the spec's ``param_count``."""
    found = written_params(ptx, entry)
    if found is None or len(found) != param_count:
        return None
    return [k for k, a in enumerate(args) if a.kind in ("param", "expand")
            and any(found[p] for p in (a.params or (a.param,)) if 0 <= p < param_count)]  # fmt: skip


def written_params(ptx: str, entry: str) -> tuple[bool, ...] | None:
    """For each parameter of the kernel ``entry``, whether it may write through it; None where its
    PTX cannot say (see the module documentation)."""
    found = _entry(ptx, entry)
    if found is None:
        return None
    names, body = found
    index = {name: k for k, name in enumerate(names)}
    instructions: list[Instruction] = []
    for statement in body:
        op, operands = statement
        head, spaces = op.split(".")[0], op.split(".")[1:]
        if head in _UNKNOWN or (head == "wmma" and "store" in spaces):
            return None
        if head in _WRITES or head == "cp":
            if head == "cp" and not _global_destination(spaces):
                continue  # into shared memory, or a prefetch
            if head != "cp" and any(s.split("::")[0] in _OWN_SPACES for s in spaces):
                if head == "atom":  # an atomic on shared memory still returns a value
                    instructions.append(("load", _registers(operands[:1]), []))
                continue
            address = next((o for o in operands if o.startswith("[")), None)
            if address is None:
                return None
            instructions.append(("write", [], _sources(address, index)))
            if head == "atom":
                instructions.append(("load", _registers(operands[:1]), []))
            continue
        if not operands or head in _NO_DESTINATION or operands[0].startswith("["):
            if operands and operands[0].startswith("[") and head not in _NO_DESTINATION:
                return None  # an instruction with an address first that is not known to leave it alone
            continue
        destination, sources = _registers(operands[:1]), [t for o in operands[1:] for t in _sources(o, index)]
        if head in _READS and not (head == "ld" and "param" in spaces):
            instructions.append(("load", destination, []))
        else:
            instructions.append(("define", destination, sources))
    return written(len(names), instructions)


def _sources(operand: str, index: dict[str, int]) -> list:
    """The registers an operand reads, and the parameters it names (as their indices)."""
    found: list = _registers([operand])
    found += [index[n] for n in _NAME.findall(operand.replace("%", " ")) if n in index]
    return found


def _registers(operands: list[str]) -> list[str]:
    return [r for o in operands for r in _REGISTER.findall(o)]


def _global_destination(spaces: list[str]) -> bool:
    """Whether a ``cp`` instruction writes global memory: its destination's state space comes first."""
    first = next((s.split("::")[0] for s in spaces if s.split("::")[0] in ("global", "shared", "local")), None)
    return first == "global" and "prefetch" not in spaces


def _entry(ptx: str, entry: str) -> tuple[list[str], list[tuple[str, list[str]]]] | None:
    """The entry's parameter names and its instructions (opcode, operands), or None."""
    m = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(", ptx)
    if m is None:
        return None
    end = ptx.index(")", m.end())
    names = [re.findall(r"([\w$]+)\s*(?:\[\d+\])?\s*$", piece)[0] for piece in ptx[m.end() : end].split(",")
             if piece.strip()]  # fmt: skip
    start = ptx.index("{", end)
    depth, stop = 0, start
    for stop in range(start, len(ptx)):
        depth += {"{": 1, "}": -1}.get(ptx[stop], 0)
        if depth == 0:
            break
    lines = []
    for line in re.sub(r"//[^\n]*", "", ptx[start + 1 : stop]).splitlines():
        line = re.sub(r"^\s*(?:[\w$]+:\s*)*", "", line).strip()  # (labels)
        if line and not line.startswith(".") and line not in ("{", "}"):  # (directives; a scope's braces)
            lines.append(line)
    statements = []
    for raw in " ".join(lines).split(";"):
        text = re.sub(r"^@!?%\w+\s+", "", raw.strip())  # (a guard predicate)
        if not text:
            continue
        op, rest = (text.split(None, 1) + [""])[:2]
        if not re.fullmatch(r"[a-z][\w.:]*", op):
            return None  # not an instruction this reads: say nothing rather than miss a write
        statements.append((op, _operands(rest)))
    return names, statements


def _operands(text: str) -> list[str]:
    """Operands split at commas outside brackets and braces."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    out.append(text[start:].strip())
    return [o for o in out if o]
