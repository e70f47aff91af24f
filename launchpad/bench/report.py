"""Output of the benchmarks: text and markdown tables, the JSON report and the chart.

Everything here reads the records :mod:`launchpad.bench.harness` fills; nothing measures.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..reporting.format import format_table  # the one text-table formatter (the CLI's)
from .harness import median_of

__all__ = [
    "LAUNCH_HEADER",
    "format_table",
    "launch_rows",
    "markdown_table",
    "ratio_text",
    "us",
    "write_json",
    "write_png",
]


def us(ns: float | None, digits: int = 2) -> str:
    return "" if ns is None else f"{ns / 1000:.{digits}f}"


def ratio_text(r: float | None) -> str:
    return "" if r is None else f"{r:.2f}x"


def launch_rows(results: dict[str, dict[str, Any]]) -> list[list[str]]:
    """One row per launcher: label, median/p10/p90 us, x floor, e2e us, e2e x floor, or why missing."""
    rows = []
    for rec in results.values():
        if rec.get("status") != "ok" or "stats" not in rec:
            rows.append([rec["label"], f"{rec.get('status', 'missing')}: {rec.get('reason', '')}"])
            continue
        s = rec["stats"]
        ratio = (rec.get("ratio") or {}).get("median")
        e2e = rec.get("e2e", {})
        e2e_med = e2e.get("stats", {}).get("median")
        e2e_ratio = (e2e.get("ratio") or {}).get("median")
        rows.append([
            rec["label"], us(s["median"]), f"{us(s['p10'])}-{us(s['p90'])}", ratio_text(ratio),
            us(e2e_med), ratio_text(e2e_ratio),
        ])  # fmt: skip
    return rows


LAUNCH_HEADER = ["launcher", "us/launch", "p10-p90", "x floor", "e2e us", "e2e x floor"]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A GitHub markdown table (``align`` as for :func:`format_table`); a short row leaves the
    remaining columns empty."""
    align = align or "l" + "r" * (len(header) - 1)

    def esc(c: str) -> str:
        return c.replace("|", "\\|")

    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    for row in rows:
        cells = [esc(c) for c in row] + [""] * (len(header) - len(row))
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def write_json(path: Path, report: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str) + "\n")
    tmp.replace(path)
    return path


def write_png(path: Path, report: dict[str, Any]) -> Path:
    """Per-launch time per launcher (bar: median, whiskers: p10-p90), the argument sweep (lines) and
    the recorded sequences' cost per kernel against the nodes a replay updates.

    Uses matplotlib's object API with the Agg canvas: no global backend, no display needed.
    """
    from matplotlib.figure import Figure

    launch = report.get("launch", {}).get("results", {})
    measured = [r for r in launch.values() if r.get("status") == "ok" and r.get("stats", {}).get("n")]
    measured.sort(key=lambda r: r["stats"]["median"], reverse=True)
    sweep = report.get("sweep", {})
    has_sweep = any(
        v.get("stats", {}).get("n") for r in sweep.get("results", {}).values() for v in r.get("per_k", {}).values()
    )
    seq = report.get("sequence", {})
    seq_results = seq.get("results", {})
    has_seq = any(median_of(seq_results.get(f"seq_new_{n}")) for n in seq.get("updated", ()))
    panels = int(bool(measured)) + int(has_sweep) + int(has_seq)
    fig = Figure(figsize=(7 * max(panels, 1), max(4.0, 0.38 * len(measured) + 1.5)), layout="constrained")
    gpu = report.get("versions", {}).get("gpu") or "no GPU"
    fig.suptitle(f"launchpad launch overhead ({gpu})")
    col = 1
    if measured:
        ax = fig.add_subplot(1, panels, col)
        col += 1
        names = [r["label"] for r in measured]
        med = [r["stats"]["median"] / 1000 for r in measured]
        lo = [m - r["stats"]["p10"] / 1000 for m, r in zip(med, measured)]
        hi = [r["stats"]["p90"] / 1000 - m for m, r in zip(med, measured)]
        colors = {"floor": "#555555", "launchpad": "#d62728", "peer": "#1f77b4", "graph": "#2ca02c"}
        ax.barh(names, med, xerr=[lo, hi], color=[colors.get(r["group"], "#999999") for r in measured], capsize=3)
        for y, (m, h, r) in enumerate(zip(med, hi, measured)):  # near the floor, bars alone do not tell
            ratio = (r.get("ratio") or {}).get("median")
            text = f" {m:.2f} us" + (f" ({ratio:.2f}x)" if ratio else "")
            ax.text(m + h, y, text, va="center", fontsize=7)
        ax.set_xlim(right=max(m + h for m, h in zip(med, hi)) * 1.22)
        floor = median_of(launch.get(report["launch"].get("floor", "")))
        if floor:
            ax.axvline(floor / 1000, color="#555555", linestyle="--", linewidth=1, label="C floor")
            ax.legend(loc="upper right")
        ax.set_xlabel("us per launch (median, p10-p90)")
        ax.tick_params(axis="y", labelsize=8)
    if has_sweep:
        ax = fig.add_subplot(1, panels, col)
        ks = sweep.get("ks", [])
        for rec in sweep["results"].values():
            pts = [(k, rec["per_k"][str(k)]["stats"]["median"] / 1000) for k in ks
                   if rec.get("per_k", {}).get(str(k), {}).get("stats", {}).get("n")]  # fmt: skip
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=rec["label"])
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("pointer arguments")
        ax.set_ylabel("us per launch (median)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    if has_seq:
        ax = fig.add_subplot(1, panels, panels)
        points = [(n, median_of(seq_results.get(f"seq_new_{n}"))) for n in seq["updated"]]
        ns = [n for n, value in points if value]
        ax.plot(ns, [value / 1000 for _, value in points if value], marker="o", color="#d62728",
                label="launchpad.record, new inputs")  # fmt: skip
        for key, style in (("c_floor", "#555555"), ("seq_one_by_one", "#ff7f0e"), ("seq_torch_graph", "#1f77b4"),
                           ("seq_plain", "#2ca02c")):  # fmt: skip
            value = median_of(seq_results.get(key))
            if value:
                ax.axhline(value / 1000, color=style, linestyle="--", linewidth=1, label=seq_results[key]["label"])
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set_xlabel(f"nodes a replay updates (of {seq.get('kernels', 20)})")
        ax.set_ylabel("us per kernel (median)")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
    if not panels:
        fig.text(0.5, 0.5, "no launch measurements in this run", ha="center", va="center")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


# --- what a run could not measure: one line, not a row each ------------------------------------


def compile_skipped(results: dict[str, Any]) -> str:
    """One line naming the compile and import measurements not made, each with why ("" if none)."""
    missing = [
        f"{r['label']} ({r.get('reason', r.get('status'))})" for r in results.values() if r.get("status") != "ok"
    ]
    return "not measured: " + "; ".join(missing) if missing else ""


def listed(words: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + " and " + words[-1]


def skipped_targets(
    report: dict[str, Any], sections: Sequence[str], gpu_sections: Sequence[str]
) -> tuple[list[dict[str, str]], str]:
    """The targets to print, and one line for those left out: the ones that need a section this run
    did not run (each says so in its detail), rather than a row of N/A per target."""
    if "sections" not in report:  # (a report of an older layout: every target, as it was)
        return list(report["targets"]), ""
    not_run = [s for s in sections if s not in report["sections"]]
    shown, skipped = [], []
    for t in report["targets"]:
        if t["status"] == "N/A" and "not run" in f"{t['measured']} {t['detail']}":
            skipped.append(t)
        else:
            shown.append(t)
    if not skipped:
        return shown, ""
    needed = [s for s in not_run if s in gpu_sections or s == "compile"] or not_run
    gpu_only = [s for s in needed if s in gpu_sections]
    why = (
        "they need a GPU and there is none here"
        if gpu_only and not report["versions"].get("gpu")
        else ("not selected by --only")
    )
    return shown, (f"skipped {len(skipped)} target{'s' if len(skipped) > 1 else ''}: the {listed(needed)} "
                   f"benchmark{'s' if len(needed) > 1 else ''} did not run ({why})")  # fmt: skip
