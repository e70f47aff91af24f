"""The training step's tables (:mod:`launchpad.bench.sequence_training`): per model, host and wall
time per step, their ratios to torch's graph after ``copy_``, and each variant's check."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import harness
from .report import ratio_text, us

__all__ = ["check_text", "determinism_text", "training_tables"]


def check_text(check: dict[str, Any] | None) -> str:
    """A check's outcome in a table cell: ``"= eager, bit for bit"`` or ``"3.1e-07 from eager"``, and
    for the recorded sequence whether its bits are torch's graph's."""
    if not check:
        return ""
    text = "= eager, bit for bit" if check["bit_identical"] else f"{check['max_rel_diff']:.1e} from eager"
    if "bit_identical_to_torch_graph" in check:
        same = check["bit_identical_to_torch_graph"]
        text += "; = torch graph, bit for bit" if same else "; torch graph's bits differ"
    return text


def determinism_text(deterministic: bool | None) -> str:
    return {None: "not run", True: "bit-identical (the step is deterministic)",
            False: "the bits differ (kernels with atomics): no variant can be expected to match bit for bit"}[
        deterministic]  # fmt: skip


def _row(rec: dict[str, Any]) -> list[str]:
    if rec.get("status") != "ok" or "stats" not in rec:
        return [rec["label"], f"{rec.get('status', 'missing')}: {rec.get('reason', '')}".split(" / ")[0]]
    e2e = rec.get("e2e", {})
    wall = harness.median_of(rec, "e2e")
    return [rec["label"], us(rec["stats"]["median"], 1), us(wall, 1) if wall else "error" if "error" in e2e else "",
            ratio_text((rec.get("ratio") or {}).get("median")), ratio_text((e2e.get("ratio") or {}).get("median")),
            check_text(rec.get("check"))]  # fmt: skip


def training_tables(training: dict[str, Any], head: str, table: Callable[..., str]) -> list[str]:
    """A table per model: host and wall time per step, their ratios to torch's graph after
    ``copy_``, and the correctness check; a model that failed, or the whole part, as a line."""
    if "error" in training:
        return [f"{head}A training step\n\nnot measured: {training['error']}"]
    parts = []
    for name, m in training.get("models", {}).items():
        if "error" in m:
            parts.append(f"{head}A training step: {name}\n\n{m['description']}. Not measured: {m['error']}")
            continue
        caption = (f"{m['description']}; AdamW(capturable=True, foreach=True), MSE loss, a new batch each step. "
                   f"Host: us per step of the host's work (median over {training['rounds']} batches of "
                   f"{training['batch']} steps, no synchronization inside a batch). Wall: us per step of "
                   f"{training['steps']} back-to-back steps closed by one synchronization (median over loops). "
                   "x graph: the figure's ratio to torch's CUDAGraph after copy_ in the same run. Check: the losses "
                   f"of {training['check_steps']} steps from the same initial weights on the same batches against "
                   f"eager's (relative tolerance {training['rtol']:g}, {training['compile_rtol']:g} for torch.compile);"
                   f" eager run twice: {determinism_text(m.get('deterministic'))}.")  # fmt: skip
        header = ["variant", "host us/step", "wall us/step", "host x graph", "wall x graph", "check"]
        notes = [f"{rec['label']}: {rec['note']}" for rec in m["results"].values() if rec.get("note")]
        parts.append(f"{head}A training step: {name}\n\n{caption}\n\n"
                     + table(header, [_row(rec) for rec in m["results"].values()], align="lrrrrl")
                     + ("\n\nnotes: " + "; ".join(notes) if notes else ""))  # fmt: skip
    return parts
