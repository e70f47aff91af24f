"""The performance targets, evaluated on a benchmark report (the dict written as JSON).

Each target is PASS or FAIL with the measured ratio or time, or N/A when something it needs was
not measured (with what and why). Evaluation reads only the report, so a saved ``latest.json``
can be evaluated again.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .harness import median_of

__all__ = ["TARGETS", "TargetResult", "evaluate", "targets_table"]


@dataclass
class TargetResult:
    name: str
    status: str  # "PASS", "FAIL" or "N/A"
    measured: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return asdict(self)


class _NA(Exception):
    """Something a target needs is not in the report."""


def _launch(report: dict[str, Any], key: str) -> tuple[float, str]:
    record = report.get("launch", {}).get("results", {}).get(key)
    return _median(record, key, "launch")


def _sweep(report: dict[str, Any], key: str, k: int) -> tuple[float, str]:
    record = report.get("sweep", {}).get("results", {}).get(key)
    point = None
    if record is not None:
        point = dict(record.get("per_k", {}).get(str(k), {}), label=record.get("label", key))
    return _median(point, key, f"sweep k={k}")


def _median(record: dict[str, Any] | None, key: str, where: str) -> tuple[float, str]:
    if record is None:
        raise _NA(f"{key} not measured ({where} not run or filtered out)")
    value = median_of(record)
    if value is None:
        raise _NA(
            f"{record.get('label', key)}: {record.get('status', 'missing')} ({record.get('reason', 'no samples')})"
        )
    return value, record.get("label", key)


def _seconds(report: dict[str, Any], key: str) -> float:
    record = report.get("compile", {}).get(key)
    if record is None:
        raise _NA(f"{key} not measured (section not run)")
    if record.get("status") != "ok":
        raise _NA(f"{record.get('label', key)}: {record.get('status')} ({record.get('reason', '')})")
    return record["stats"]["median"]


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


class _Failed(Exception):
    """A launchpad launcher a target measures did not run: the target FAILs with its error."""


def _ours(report: dict[str, Any], key: str, section: str = "launch", k: int | None = None) -> float:
    """A launchpad figure: its absence is a failure of launchpad, not a missing peer."""
    try:
        return (_launch(report, key) if section == "launch" else _sweep(report, key, k or 0))[0]
    except _NA:
        record = report.get(section, {}).get("results", {}).get(key)
        if record is not None and record.get("status") in ("error", "missing"):
            raise _Failed(f"{record.get('label', key)} failed: {record.get('reason', '')}") from None
        raise


def _launch_target(
    key: str, limit: float, peers: tuple[str, ...] = ()
) -> Callable[[dict[str, Any]], tuple[str, str, str]]:
    """``key`` within ``limit`` of the floor, and faster than each of ``peers`` measured in the run."""

    def evaluate_one(report: dict[str, Any]) -> tuple[str, str, str]:
        value = _ours(report, key)
        floor, _ = _launch(report, "c_floor")
        ok = value / floor <= limit
        parts = [f"{value / floor:.3f}x floor (limit {limit:.2f}x)"]
        missing = []
        for peer in peers:
            try:
                other, label = _launch(report, peer)
            except _NA as exc:
                missing.append(str(exc))
                continue
            ok = ok and value < other
            parts.append(f"{other / value:.2f}x faster than {label}")
        return _verdict(ok), "; ".join(parts), ("not measured: " + "; ".join(missing)) if missing else ""

    return evaluate_one


def _speedup(
    fast: str, slow: str, factor: float, limit: float | None = None
) -> Callable[[dict[str, Any]], tuple[str, str, str]]:
    def evaluate_one(report: dict[str, Any]) -> tuple[str, str, str]:
        f = _ours(report, fast)
        s, slow_label = _launch(report, slow)
        ok, measured = s / f >= factor, f"{s / f:.2f}x faster than {slow_label} (needs {factor:g}x)"
        if limit is not None:
            floor, _ = _launch(report, "c_floor")
            ok = ok and f / floor <= limit
            measured = f"{f / floor:.3f}x floor (limit {limit:.2f}x); " + measured
        return _verdict(ok), measured, ""

    return evaluate_one


def _many_args(key: str, limit: float, factor: float) -> Callable[[dict[str, Any]], tuple[str, str, str]]:
    def evaluate_one(report: dict[str, Any]) -> tuple[str, str, str]:
        value = _ours(report, key, "sweep", 32)
        floor, _ = _sweep(report, "c_floor", 32)
        bare, _ = _sweep(report, "triton_bare", 32)
        ok = value / floor <= limit and bare / value >= factor
        return _verdict(ok), (f"{value / floor:.3f}x floor (limit {limit:.2f}x); {bare / value:.2f}x faster than "
                              f"Triton's bare launcher (needs {factor:g}x)"), ""  # fmt: skip

    return evaluate_one


def _time_limit(key: str, limit_s: float) -> Callable[[dict[str, Any]], tuple[str, str, str]]:
    def evaluate_one(report: dict[str, Any]) -> tuple[str, str, str]:
        value = _seconds(report, key)
        return _verdict(value <= limit_s), f"{value * 1000:.1f} ms (limit {limit_s * 1000:g} ms)", ""

    return evaluate_one


def _sequence_target(limit: float, factor: float) -> Callable[[dict[str, Any]], tuple[str, str, str]]:
    """A replay with new inputs in every node: within ``limit`` of the floor per kernel, ``factor``
    times faster than the launches one by one, faster than torch's graph after copies."""

    def evaluate_one(report: dict[str, Any]) -> tuple[str, str, str]:
        results = report.get("sequence", {}).get("results", {})
        kernels = report.get("sequence", {}).get("kernels", 20)
        record = results.get(f"seq_new_{kernels}")
        if record is not None and record.get("status") in ("error", "missing"):
            raise _Failed(f"{record.get('label')} failed: {record.get('reason', '')}")
        value, _ = _median(record, f"seq_new_{kernels}", "sequence")
        floor, _ = _median(results.get("c_floor"), "c_floor", "sequence")
        one, _ = _median(results.get("seq_one_by_one"), "seq_one_by_one", "sequence")
        graph, _ = _median(results.get("seq_torch_graph"), "seq_torch_graph", "sequence")
        ok = value / floor <= limit and one / value >= factor and value < graph
        return _verdict(ok), (f"{value / floor:.3f}x of {kernels} floor launches (limit {limit:.2f}x); "
                              f"{one / value:.2f}x faster than the launches one by one (needs {factor:g}x); "
                              f"{graph / value:.2f}x faster than torch's CUDAGraph after copy_"), ""  # fmt: skip

    return evaluate_one


def _sizes_target() -> Callable[[dict[str, Any]], tuple[str, str, str]]:
    """The size sweep: the replay's wall time per step against torch's graph after copies, at every size
    (within 1%, the spread of one GPU-bound figure between rounds)."""

    def evaluate_one(report: dict[str, Any]) -> tuple[str, str, str]:
        sizes = report.get("sequence", {}).get("sizes")
        if not sizes:
            raise _NA("the size sweep was not run")
        failed = [f"{size}: {row['error']}" for size, row in sizes.items() if "error" in row]
        if failed:
            raise _Failed("; ".join(failed))
        ratios = {size: row["ratio"] for size, row in sizes.items()}
        worst = max(ratios, key=lambda k: ratios[k])
        text = ", ".join(f"{size} {r:.3f}x" for size, r in ratios.items())
        return _verdict(ratios[worst] <= 1.01), f"record / torch graph + copy_: {text}", ""

    return evaluate_one


def _helion_target(name: str, factor: float) -> Callable[[dict[str, Any]], tuple[str, str, str]]:
    """``launchpad.helion_kernel(k)(...)`` ``factor`` times faster per call than ``k(...)`` itself."""

    def evaluate_one(report: dict[str, Any]) -> tuple[str, str, str]:
        section = report.get("helion") or {}
        if "missing" in section or "groups" not in section:
            raise _NA(section.get("missing") or "the helion section was not run")
        results = section["groups"].get(name, {}).get("results", {})
        record = results.get(f"lp_helion_{name}")
        if record is not None and record.get("status") in ("error", "missing"):
            raise _Failed(f"{record.get('label')} failed: {record.get('reason', '')}")
        ours, _ = _median(record, f"lp_helion_{name}", "helion")
        theirs, _ = _median(results.get(f"helion_{name}"), f"helion_{name}", "helion")
        return _verdict(theirs / ours >= factor), (f"{ours / 1000:.1f} us against {theirs / 1000:.1f} us: "
                                                   f"{theirs / ours:.2f}x fewer (needs {factor:g}x)"), ""  # fmt: skip

    return evaluate_one


_PEERS = ("triton_bare", "cuda_core", "torch_static", "tvm_ffi")

#: (name, evaluation) of every target, in the order the report prints them.
TARGETS: list[tuple[str, Callable[[dict[str, Any]], tuple[str, str, str]]]] = [
    ("Kernel.launch, 3-arg Triton cubin: <= 1.10x floor, faster than Triton's bare launcher, cuda.core, torch's static launcher, tvm-ffi",
     _launch_target("lp_triton", 1.10, _PEERS)),
    ("k[grid], 3-arg Triton cubin: <= 1.10x floor, faster than the same peers", _launch_target("lp_triton_getitem", 1.10, _PEERS)),
    ("bound launch (Kernel.bind): <= 1.05x floor", _launch_target("lp_bound", 1.05)),
    ("32 tensor args, Kernel.launch (Triton cubin): <= 1.6x floor, >= 1.5x faster than Triton's bare launcher",
     _many_args("lp_triton", 1.6, 1.5)),
    ("triton_launcher(fn)[grid]: <= 1.5x floor, >= 2.5x faster than Triton fn[grid]",
     _speedup("lp_triton_launcher", "triton_jit", 2.5, limit=1.5)),
    ("Numba kernel k[grid, block] on torch tensors: <= 1.3x floor", _launch_target("lp_numba_getitem", 1.3)),
    ("C++ kernel, 3 args, Kernel.launch: <= 1.10x floor", _launch_target("lp_cpp", 1.10)),
    ("Numba via launchpad: >= 3x faster than Numba's dispatcher (device arrays)", _speedup("lp_numba", "numba_devarray", 3.0)),
    ("Numba via launchpad: >= 6x faster than Numba's dispatcher (torch tensors)", _speedup("lp_numba", "numba_torch", 6.0)),
    ("NVRTC compile of a small kernel: <= 0.15 s", _time_limit("nvrtc_small", 0.15)),
    ("disk-cache hit in a fresh process: <= 20 ms", _time_limit("cache_hit", 0.020)),
    ("import launchpad on top of torch: <= 60 ms", _time_limit("import_launchpad", 0.060)),
    ("import launchpad and its first use (lp.compile_cuda) on top of torch: <= 0.15 s",
     _time_limit("import_first_use", 0.15)),
    ("recorded sequence of 20 kernels, 2 new tensors and 1 new scalar, host cost: <= 0.25x of one floor launch a "
     "kernel, >= 2.5x faster than the 20 launches, faster than torch's CUDAGraph after copy_", _sequence_target(0.25, 2.5)),
    ("recorded sequence, GPU-bound wall time per step with 2 new inputs: no worse than torch's CUDAGraph after copy_ "
     "at every input size from 16 KB to 256 MB", _sizes_target()),
    ("Helion add (4,096 floats) through launchpad.helion_kernel: >= 2x fewer us per call than the Helion kernel "
     "called itself", _helion_target("add", 2.0)),
    ("Helion matmul (256^3 fp16) through launchpad.helion_kernel: >= 2x fewer us per call than the Helion kernel "
     "called itself", _helion_target("matmul", 2.0)),
]  # fmt: skip


def evaluate(report: dict[str, Any]) -> list[TargetResult]:
    """Every target's verdict on ``report``: a launchpad launcher that failed makes its targets FAIL
    (with the error); N/A only when a section was not run or the floor could not be measured."""
    out = []
    for name, fn in TARGETS:
        try:
            status, measured, detail = fn(report)
        except _Failed as exc:
            status, measured, detail = "FAIL", "", str(exc)
        except _NA as exc:
            status, measured, detail = "N/A", "", str(exc)
        except ZeroDivisionError:
            status, measured, detail = "N/A", "", "a median of zero"
        out.append(TargetResult(name, status, measured, detail))
    return out


#: Widths of the printed Targets table's wrapped cells: with the verdict's column, at most 171
#: characters a line, where a target's name or its measurement alone runs past 200.
TARGET_WIDTH, MEASURED_WIDTH = 72, 88


def targets_table(targets: Sequence[dict[str, str]], *, wrap: bool = True) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the Targets table: each target, its verdict, and what was measured (or
    why not).

    ``wrap`` breaks the target and measured cells into lines, which
    :func:`launchpad.reporting.format.format_table` prints one under another; markdown keeps them
    whole (a markdown cell is one line; its renderer wraps it).
    """
    rows = []
    for t in targets:
        name, measured = t["name"], t["measured"] or t["detail"]
        if wrap:
            name = "\n".join(textwrap.wrap(name, TARGET_WIDTH, break_on_hyphens=False))
            measured = "\n".join(textwrap.wrap(measured, MEASURED_WIDTH, break_on_hyphens=False))
        rows.append([name, t["status"], measured])
    return ["target", "verdict", "measured"], rows
