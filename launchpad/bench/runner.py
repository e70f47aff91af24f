"""``python -m launchpad bench``: run the benchmark sections and write the results.

Sections: :data:`SECTION_HELP` says what each measures (``sequence``: :mod:`launchpad.bench.sequences`,
``helion``: :mod:`launchpad.bench.helion`); :data:`GPU_SECTIONS` need a GPU.

Results go to ``<out>/latest.json`` (versions, configuration and every sample), ``latest.md``
(tables for the README) and ``latest.png`` (chart), in ``./launchpad-bench`` unless ``--out``
says (:func:`default_out`); tables, the targets' verdicts and where the files went are printed.
"""

from __future__ import annotations

import datetime
import fnmatch
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from . import harness
from . import report as _report
from .compiled import compiled_section, compiled_tables
from .harness import add_ratios, measure, measure_e2e, record_e2e, record_samples, set_up
from .helion import helion_section, helion_tables
from .report import LAUNCH_HEADER, format_table, launch_rows, markdown_table, ratio_text, us, write_json, write_png
from .sequence_section import sequence_section, sequence_tables
from .targets import evaluate, targets_table

SCHEMA = "launchpad.bench/1"
#: What each section measures, in the order they run (``bench --help`` prints it).
SECTION_HELP = {
    "compile": "compile and load times: NVRTC through launchpad.compile_cuda (a cache miss), a saved "
    "artifact, Triton and Numba kernels through launchpad",
    "import": "`import launchpad` on top of torch, and (with compile) a disk-cache hit, in fresh processes",
    "launch": "launch overhead of launchpad's launchers and the installed peers' (Triton, cuda.core, CuPy, "
    "Numba, torch, tvm-ffi) against a C loop of cuLaunchKernel, and end to end",
    "sweep": "per-launch cost against the number of pointer arguments (1 to 32)",
    "sequence": "recorded sequences (launchpad.record) against the launches one by one and torch's CUDA graphs",
    "helion": "Helion kernels through launchpad.helion_kernel against Helion's own call",
    "compiled": "a block under torch.compile: launchpad's launches against Triton's fn[grid] and torch_op",
}
SECTIONS = tuple(SECTION_HELP)
GPU_SECTIONS = ("launch", "sweep", "sequence", "helion", "compiled")


def default_out() -> Path:
    """``./launchpad-bench``, from a checkout too: its recorded results (``benchmarks/results``,
    what the README shows) are only written when asked, ``--out benchmarks/results``."""
    return Path.cwd() / "launchpad-bench"


@dataclass
class Config:
    """How much to measure; :meth:`make` gives the full and the ``--quick`` settings."""

    quick: bool = False
    rounds: int = 150  # timed batches per launcher
    batch: int = 200  # launches per batch
    warmup: int = 200  # launches per launcher before timing
    e2e_launches: int = 2000  # back-to-back launches per end-to-end sample
    e2e_repeats: int = 5
    graph_kernels: int = 100  # launches captured in the CUDA graph
    sweep_ks: tuple[int, ...] = (1, 3, 4, 8, 16, 32)
    sweep_rounds: int = 60
    sweep_batch: int = 200
    sequence_rounds: int = 60
    sequence_batch: int = 50  # steps (of 20 kernels) per batch
    compile_repeats: int = 5
    fresh_repeats: int = 5  # fresh processes for the import and cache-hit times
    load_inline: bool = False

    @classmethod
    def make(cls, *, quick: bool = False, rounds: int | None = None, batch: int | None = None,
             load_inline: bool = False) -> Config:  # fmt: skip
        c = cls(quick=quick, load_inline=load_inline)
        if quick:  # under a minute on the H200, Triton's first compiles included
            c.rounds, c.warmup, c.e2e_launches, c.e2e_repeats = 30, 100, 1000, 3
            c.sweep_ks, c.sweep_rounds, c.sweep_batch = (1, 3, 16, 32), 15, 100
            c.compile_repeats, c.fresh_repeats = 2, 2
            c.sequence_rounds, c.sequence_batch = 25, 20
        if rounds is not None:
            c.rounds = c.sweep_rounds = max(1, rounds)
        if batch is not None:
            c.batch = c.sweep_batch = max(1, batch)
        return c


class UsageError(Exception):
    pass


def parse_only(tokens: Sequence[str], launcher_keys: Sequence[str]) -> tuple[set[str], list[str]]:
    """Split ``--only`` tokens into sections and launcher-name patterns.

    With no section named, every section runs (only the launch ones when launcher names are
    given). Every pattern must match a launcher.
    """
    sections = {t for t in tokens if t in SECTIONS}
    patterns = [t for t in tokens if t not in SECTIONS]
    unknown = [p for p in patterns if not any(fnmatch.fnmatchcase(k, p) for k in launcher_keys)]
    if unknown:
        raise UsageError(
            f"unknown name{'s' if len(unknown) > 1 else ''} in --only: {', '.join(unknown)}\n"
            f"  sections: {', '.join(SECTIONS)}\n  launchers: {', '.join(launcher_keys)}"
        )
    if not sections:  # launcher names select among the launch and sweep launchers
        sections = {"launch", "sweep"} if patterns else set(SECTIONS)
    return sections, patterns


def selected(key: str, patterns: Sequence[str]) -> bool:
    """Whether a launcher runs: all without patterns; the floor always (ratios need it)."""
    return not patterns or key == "c_floor" or any(fnmatch.fnmatchcase(key, p) for p in patterns)


def versions(env: dict[str, Any]) -> dict[str, Any]:
    """The flat version record of a report, from :func:`launchpad.reporting.environment.environment`."""
    dev = env["devices"][0] if env["devices"] else {}
    return {
        "python": env["python"],
        "launchpad": env["launchpad"],
        **env["packages"],
        "torch_cuda": env["torch_cuda"],
        "driver": env["driver"],
        "gpu": dev.get("name"),
        "gpu_arch": dev.get("arch"),
        "gpu_count": len(env["devices"]),
        "cpu": env["cpu"],
        "platform": env["platform"],
    }


# --- sections ------------------------------------------------------------------------------------


def launch_section(ctx: Any, cfg: Config, patterns: Sequence[str], log: Callable[[str], None]) -> dict[str, Any]:
    import torch

    from .context import N
    from .launchers import LAUNCHERS

    sync = torch.cuda.synchronize
    log("launch overhead: setting up launchers")
    launchers, results = set_up([e for e in LAUNCHERS if selected(e.key, patterns)], ctx, sync=sync, log=log)
    log(f"launch overhead: {cfg.rounds} rounds of {cfg.batch} launches per launcher")
    samples, errors = measure(launchers, rounds=cfg.rounds, batch=cfg.batch, warmup=cfg.warmup, sync=sync)
    for lc in launchers:
        record_samples(results[lc.key], samples[lc.key], errors.get(lc.key))
    good = [lc for lc in launchers if results[lc.key]["status"] == "ok"]
    log(f"end to end: {cfg.e2e_repeats} x {cfg.e2e_launches} launches + one sync per launcher")
    e2e, e2e_errors = measure_e2e(good, launches=cfg.e2e_launches, repeats=cfg.e2e_repeats, sync=sync)
    for lc in good:
        record_e2e(results[lc.key], e2e[lc.key], e2e_errors.get(lc.key))
    add_ratios(results, "c_floor")
    return {
        "floor": "c_floor",
        "kernel": f"y[i] = 2 * x[i], {N} floats, grid 1, block {N}: two pointers and an int",
        "results": results,
    }


def sweep_section(ctx: Any, cfg: Config, patterns: Sequence[str], log: Callable[[str], None]) -> dict[str, Any]:
    import torch

    from .context import SWEEP_N
    from .sweep import sweep_entries

    sync = torch.cuda.synchronize
    merged: dict[str, dict[str, Any]] = {}
    for k in cfg.sweep_ks:
        log(f"argument sweep: {k} pointer argument{'s' if k > 1 else ''}")
        launchers, results = set_up([e for e in sweep_entries(k) if selected(e.key, patterns)], ctx, sync=sync, log=log)
        samples, errors = measure(
            launchers, rounds=cfg.sweep_rounds, batch=cfg.sweep_batch, warmup=cfg.warmup, sync=sync
        )
        for lc in launchers:
            record_samples(results[lc.key], samples[lc.key], errors.get(lc.key))
        add_ratios(results, "c_floor")
        for key, rec in results.items():
            entry = merged.setdefault(key, {"key": key, "label": rec["label"], "group": rec["group"], "per_k": {}})
            entry["per_k"][str(k)] = {f: v for f, v in rec.items() if f not in ("key", "label", "group")}
    return {
        "ks": list(cfg.sweep_ks),
        "floor": "c_floor",
        "kernel": f"p0[i] = 1 + p1[i] + ... + p(k-1)[i], {SWEEP_N} floats, grid 1, block {SWEEP_N}: k pointers and an int",
        "results": merged,
    }


def compile_section(
    sections: set[str], cfg: Config, arch: str, gpu: bool, log: Callable[[str], None]
) -> dict[str, Any]:
    from .compile_times import measure_compile, measure_fresh_process

    results: dict[str, Any] = {}
    if "compile" in sections:
        log(f"compile and load times (arch {arch})")
        results.update(measure_compile(arch=arch, gpu=gpu, repeats=cfg.compile_repeats,
                                       load_inline=cfg.load_inline, log=log))  # fmt: skip
    log(f"fresh processes: {cfg.fresh_repeats} (+1 discarded)")
    results.update(
        measure_fresh_process(arch=arch, repeats=cfg.fresh_repeats, cache_hit="compile" in sections, log=log)
    )
    return results


# --- tables --------------------------------------------------------------------------------------


def sweep_table(sweep: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    ks = sweep["ks"]
    header = ["launcher", *(f"k={k} us (x floor)" for k in ks)]
    rows = []
    for rec in sweep["results"].values():
        row = [rec["label"]]
        for k in ks:
            p = rec["per_k"].get(str(k))
            if p is None:
                row.append("")
            elif p.get("status") == "ok" and p.get("stats", {}).get("n"):
                ratio = (p.get("ratio") or {}).get("median")
                row.append(f"{us(p['stats']['median'])} ({ratio_text(ratio) or '?'})")
            else:
                row.append(p.get("status", "missing"))
        rows.append(row)
    return header, rows


def sweep_notes(sweep: dict[str, Any]) -> list[str]:
    """Why each launcher that did not run in the sweep did not (once per launcher and reason)."""
    seen = {}
    for rec in sweep["results"].values():
        for k, p in rec["per_k"].items():
            if p.get("status") != "ok" and (rec["label"], p.get("reason")) not in seen:
                seen[(rec["label"], p.get("reason"))] = k
    return [f"{label} (k={k}): {reason}" for (label, reason), k in seen.items()]


def compile_table(results: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The measured rows; what could not be measured is in :func:`compile_skipped`, one line."""
    rows = []
    for r in results.values():
        if r.get("status") == "ok":
            s = r["stats"]
            rows.append([r["label"], f"{s['median'] * 1000:.1f}", f"{s['min'] * 1000:.1f}", str(s["n"])])
    return ["measurement", "median ms", "min ms", "n"], rows


def render(report: dict[str, Any], table: Callable[..., str], *, markdown: bool) -> str:
    """Every table of a report, as text or as markdown."""
    v = report["versions"]
    head = "#" * 3 + " " if markdown else ""
    parts = []
    stack = ", ".join(
        f"{name} {v.get(name) or 'missing'}"
        for name in ("torch", "triton", "cuda-core", "cuda-bindings", "numba-cuda", "cupy")
    )
    parts.append(
        f"{head}launchpad {v['launchpad']} benchmarks, {report['created']}"
        + (" (--quick)" if report["config"]["quick"] else "")
        + f"\n\nGPU: {v.get('gpu') or 'none'} ({v.get('gpu_arch') or '-'}), driver CUDA {v.get('driver') or '-'}, "
        f"CPU: {v.get('cpu')}, Python {v['python']}\n{stack}"
    )
    launch = report.get("launch")
    if launch and "results" in launch:
        c = report["config"]
        parts.append(
            f"{head}Launch overhead\n\n{launch['kernel']}. Median over {c['rounds']} batches of {c['batch']} "
            f"launches (no sync inside a batch), p10-p90 spread, ratio to the C floor of the same run; "
            f"e2e: {c['e2e_launches']} back-to-back launches plus one sync.\n\n"
            + table(LAUNCH_HEADER, launch_rows(launch["results"]))
        )
    sweep = report.get("sweep")
    if sweep and "results" in sweep:
        notes = sweep_notes(sweep)
        parts.append(
            f"{head}Argument-count sweep\n\n{sweep['kernel']}.\n\n"
            + table(*sweep_table(sweep))
            + ("\n\nnot measured: " + "; ".join(notes) if notes else "")
        )
    seq = report.get("sequence")
    if seq and "results" in seq:
        parts += sequence_tables(seq, head, table)
    if report.get("helion") and "error" not in report["helion"]:
        parts.append(helion_tables(report["helion"], table, head))
    if report.get("compiled") and "error" not in report["compiled"]:
        parts.append(compiled_tables(report["compiled"], table, head))
    comp = report.get("compile")
    if comp and "error" not in comp:
        skipped = _report.compile_skipped(comp)
        parts.append(f"{head}Compile, load and import times\n\n" + table(*compile_table(comp))
                     + (f"\n\n{skipped}" if skipped else ""))  # fmt: skip
    shown, skipped = _report.skipped_targets(report, SECTIONS, GPU_SECTIONS)
    parts.append(f"{head}Targets\n\n" + table(*targets_table(shown, wrap=not markdown), align="lll")
                 + (f"\n\n{skipped}" if skipped else ""))  # fmt: skip
    for name in ("compile", "launch", "sweep", "sequence", "helion", "compiled"):
        error = (report.get(name) or {}).get("error")
        if error:
            parts.append(f"{head}{name}: failed\n\n{error}")
    return "\n\n".join(parts) + "\n"


# --- entry point ---------------------------------------------------------------------------------


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(
    *,
    quick: bool = False,
    out: Path | str | None = None,
    only: Sequence[str] = (),
    load_inline: bool = False,
    rounds: int | None = None,
    batch: int | None = None,
    argv: Sequence[str] = (),
    log: Callable[[str], None] = _stderr,
) -> int:
    """Run the selected benchmarks; write ``latest.json``, ``latest.md`` and ``latest.png``
    into ``out``. Returns the exit status (2: nothing could run, 1: a section failed)."""
    from .launchers import GROUPS, LAUNCH_KEYS

    try:
        sections, patterns = parse_only([p for t in only for p in GROUPS.get(t, [t])], LAUNCH_KEYS)
    except UsageError as exc:
        print(f"launchpad bench: {exc}", file=sys.stderr)
        return 2
    # Numba warns on every launch of a grid under 128 blocks; the warning is not a launch cost.
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    # Triton 3.9 warns on each compile that leaves FP fusion to its default: take it explicitly (on).
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    from ..reporting.environment import environment

    env = environment()
    gpu = env["gpu_available"]
    wanted_gpu = [s for s in GPU_SECTIONS if s in sections]
    if wanted_gpu and not gpu:
        print(
            f"launchpad bench: no GPU here ({env['no_gpu_reason']}).\n"
            f"The {_report.listed(wanted_gpu)} benchmarks launch kernels and need a CUDA GPU; run this on a GPU "
            "machine. `--only compile,import` runs the parts that need none.",
            file=sys.stderr,
        )
        return 2
    cfg = Config.make(quick=quick, rounds=rounds, batch=batch, load_inline=load_inline)
    arch = env["devices"][0]["arch"] if gpu else "sm_90"
    started = time.perf_counter()
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "argv": list(argv),
        "sections": [s for s in SECTIONS if s in sections],
        "only": list(patterns),
        "config": asdict(cfg),
        "versions": versions(env),
        "devices": env["devices"],
    }
    failed = False

    def section(name: str, body: Callable[[], dict[str, Any]]) -> None:
        nonlocal failed
        t0 = time.perf_counter()
        try:
            report[name] = body()
        except Exception as exc:  # keep the other sections' results; show what broke this one
            failed = True
            traceback.print_exc()
            report[name] = {"error": harness.describe(exc, limit=1000)}
        report.setdefault("elapsed_s", {})[name] = round(time.perf_counter() - t0, 2)

    # compile first: its "first compile in the process" must really be the first
    if "compile" in sections or "import" in sections:
        section("compile", lambda: compile_section(sections, cfg, arch, gpu, log))
    if wanted_gpu:
        from .context import Context

        with tempfile.TemporaryDirectory(prefix="lp-bench-") as workdir:
            try:
                ctx = Context(Path(workdir), graph_kernels=cfg.graph_kernels)
            except Exception as exc:
                traceback.print_exc()
                print(f"launchpad bench: cannot set up the GPU benchmarks: {harness.describe(exc)}", file=sys.stderr)
                return 1
            if "launch" in sections:
                section("launch", lambda: launch_section(ctx, cfg, patterns, log))
            if "sweep" in sections:
                section("sweep", lambda: sweep_section(ctx, cfg, patterns, log))
            if "sequence" in sections:
                section("sequence", lambda: sequence_section(ctx, cfg.sequence_rounds, cfg.sequence_batch, log))
            if "helion" in sections:
                section("helion", lambda: helion_section(cfg, log))
            if "compiled" in sections:
                section("compiled", lambda: compiled_section(cfg.sequence_rounds, cfg.sequence_batch, log))
    report["targets"] = [t.to_json() for t in evaluate(report)]
    report.setdefault("elapsed_s", {})["total"] = round(time.perf_counter() - started, 2)

    print(render(report, format_table, markdown=False))
    out_dir = Path(out) if out is not None else default_out()
    written = [write_json(out_dir / "latest.json", report)]
    md = out_dir / "latest.md"
    md.write_text(render(report, markdown_table, markdown=True))
    written.append(md)
    try:
        written.append(write_png(out_dir / "latest.png", report))
    except ImportError as exc:
        log(f"chart skipped: {harness.describe(exc)} (pip install matplotlib)")
    log("wrote " + ", ".join(str(p) for p in written) + f" in {report['elapsed_s']['total']:.0f} s")
    return 1 if failed else 0
