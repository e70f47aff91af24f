"""Which parameters a kernel may write through, once its instructions are read: the fixpoint that
both readers share (:mod:`launchpad.frontends.triton.writes` over TTIR, :mod:`launchpad.core.ptx_writes`
over PTX).

Each reader turns its IR into :data:`Instruction` triples. A value takes the parameters of every
source of every instruction that defines it (the union over all of them: PTX registers are
reassigned in loops, and a region's yields flow back), repeated until nothing changes, so a
written parameter is never missed; a value read from memory is marked :data:`LOADED` instead, and
a write through such a value cannot be followed.
"""

from __future__ import annotations

__all__ = ["LOADED", "Instruction", "written"]

#: The mark of a value read from memory (an index, or a pointer: which, the IR does not say).
LOADED = -1
#: ``(kind, values it defines, its sources)``: kind ``"define"`` (the values take the sources'
#: parameters), ``"load"`` (the values are :data:`LOADED`) or ``"write"`` (memory is written through
#: the sources); a source is a value's name or a parameter's index.
Instruction = tuple[str, list[str], list]


def written(count: int, instructions: list[Instruction]) -> tuple[bool, ...] | None:
    """For each of ``count`` parameters, whether a write may go through it; None where a write goes
    through a value read from memory."""
    taint: dict[str, set[int]] = {}
    through: set[int] = set()
    changed = True
    while changed:
        changed = False
        for kind, defined, sources in instructions:
            found = {LOADED} if kind == "load" else set()
            if kind != "load":
                for s in sources:
                    found |= {s} if isinstance(s, int) else taint.get(s, set())
            if kind == "write":
                if not found <= through:
                    through |= found
                    changed = True
                continue
            for value in defined:
                have = taint.setdefault(value, set())
                if not found <= have:
                    have |= found
                    changed = True
    if LOADED in through:
        return None
    return tuple(k in through for k in range(count))
