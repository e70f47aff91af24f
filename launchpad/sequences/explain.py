"""What :meth:`launchpad.Sequence.explain` prints: for each input and output of a recorded sequence,
where a replay writes it and how (re-pointed nodes, copies and why), and whether the graph's nodes
are updated from the device or the host (and which nodes the driver would not update from the
device)."""

from __future__ import annotations

from .state import SequenceState
from .updates import DEVICE

__all__ = ["explain"]


def explain(st: SequenceState, title: str) -> str:
    """What :meth:`Sequence.explain` prints, under ``title`` (the sequence's ``repr``)."""
    plan = st.plan
    kinds = {t.kind for t in st.targets.values()}
    how = "from the device (launchpad's updater node reads each replay's changes)" if DEVICE in kinds else \
        "from the host (cuGraphExec*SetParams)"  # fmt: skip
    lines = [title, f"nodes are updated {how}" + (f"; no device-side updates: {st.note}"
                                                  if st.note and DEVICE not in kinds else "")]  # fmt: skip
    for index, error in st.refused:
        lines.append(f"{plan.nodes[index].describe(index)}: updated from the host (the driver refused a device-side "
                     f"update of it when the sequence was made: cudaError_t {error})")  # fmt: skip
    for name, p in plan.inputs.items():
        places = "; ".join(f"{st.targets[u.node].name}, {u.label}" for u in p.uses)
        if p.copy:
            lines.append(f"input {name!r}: copied into the sequence's own buffer before each replay"
                         + (" and back after it" if p.writes else "") + f", because {p.copy}")  # fmt: skip
        else:
            lines.append(f"input {name!r}: written into {len(p.uses)} place(s): {places}")
    for k, leaf in enumerate(plan.leaves):
        if leaf.kind == "storage":
            s = plan.storages[leaf.storage]
            why = f"copied there at the graph's end, because {s.copy}" if s.copy else \
                f"written there by {len(s.uses)} re-pointed place(s)"  # fmt: skip
            lines.append(f"output {k}: new memory each replay, {why}")
        elif leaf.kind == "input":
            lines.append(f"output {k}: input {leaf.input!r} (or a view of it)")
        else:
            lines.append(f"output {k}: memory the function was given (the same tensor each replay)")
    return "\n".join(lines)
