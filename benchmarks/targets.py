"""The performance targets, evaluated on a benchmark report (the dict written as JSON).

Each target is PASS or FAIL with the measured ratio or time, or N/A when something it needs was
not measured (with what and why). Evaluation reads only the report, so a saved ``latest.json``
can be evaluated again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from .harness import median_of

__all__ = ["TARGETS", "TargetResult", "evaluate"]


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
        raise _NA(f"{record.get('label', key)}: {record.get('status', 'missing')} ({record.get('reason', 'no samples')})")
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


def _triton_launch(report: dict[str, Any]) -> tuple[str, str, str]:
    lp, _ = _launch(report, "lp_triton")
    floor, _ = _launch(report, "c_floor")
    ratio = lp / floor
    peers = {
        rec["label"]: median_of(rec)
        for rec in report["launch"]["results"].values()
        if rec.get("group") == "peer" and median_of(rec) is not None
    }
    missing = sorted(
        rec["label"] for rec in report["launch"]["results"].values()
        if rec.get("group") == "peer" and median_of(rec) is None
    )  # fmt: skip
    if not peers:
        raise _NA("no peer was measured")
    fastest = min(peers, key=peers.__getitem__)
    ok = ratio <= 1.08 and lp < peers[fastest]
    measured = f"{ratio:.3f}x floor; fastest peer ({fastest}) {peers[fastest] / lp:.2f}x slower"
    detail = f"peers not measured: {', '.join(missing)}" if missing else ""
    return _verdict(ok), measured, detail


def _ratio_to_floor(key: str, limit: float) -> Callable[[dict[str, Any]], tuple[str, str, str]]:
    def evaluate_one(report: dict[str, Any]) -> tuple[str, str, str]:
        value, _ = _launch(report, key)
        floor, _ = _launch(report, "c_floor")
        return _verdict(value / floor <= limit), f"{value / floor:.3f}x floor (limit {limit:.2f}x)", ""

    return evaluate_one


def _speedup(fast: str, slow: str, factor: float) -> Callable[[dict[str, Any]], tuple[str, str, str]]:
    def evaluate_one(report: dict[str, Any]) -> tuple[str, str, str]:
        f, _ = _launch(report, fast)
        s, slow_label = _launch(report, slow)
        return _verdict(s / f >= factor), f"{s / f:.2f}x faster than {slow_label} (needs {factor:g}x)", ""

    return evaluate_one


def _many_args(key: str) -> Callable[[dict[str, Any]], tuple[str, str, str]]:
    def evaluate_one(report: dict[str, Any]) -> tuple[str, str, str]:
        value, _ = _sweep(report, key, 32)
        floor, _ = _sweep(report, "c_floor", 32)
        bare, _ = _sweep(report, "triton_bare", 32)
        ok = value / floor <= 1.20 and bare / value >= 1.25
        return _verdict(ok), f"{value / floor:.3f}x floor (limit 1.20x); {bare / value:.2f}x faster than Triton's bare launcher (needs 1.25x)", ""

    return evaluate_one


def _time_limit(key: str, limit_s: float) -> Callable[[dict[str, Any]], tuple[str, str, str]]:
    def evaluate_one(report: dict[str, Any]) -> tuple[str, str, str]:
        value = _seconds(report, key)
        return _verdict(value <= limit_s), f"{value * 1000:.1f} ms (limit {limit_s * 1000:g} ms)", ""

    return evaluate_one


#: (name, evaluation) of every target, in the order the report prints them.
TARGETS: list[tuple[str, Callable[[dict[str, Any]], tuple[str, str, str]]]] = [
    ("Kernel.launch, 3-param Triton cubin: <= 1.08x floor and faster than every peer", _triton_launch),
    ("bound launch (Kernel.bind): <= 1.03x floor", _ratio_to_floor("lp_bound", 1.03)),
    ("triton_launcher: >= 2x faster than Triton fn[grid]", _speedup("lp_triton_launcher", "triton_jit", 2.0)),
    ("32 pointer args, Kernel.launch (Triton cubin): <= 1.20x floor, >= 1.25x faster than bare launcher", _many_args("lp_triton")),
    ("32 pointer args, Kernel.launch (C++): <= 1.20x floor, >= 1.25x faster than bare launcher", _many_args("lp_cpp")),
    ("Numba via launchpad: >= 3x faster than Numba's dispatcher (device arrays)", _speedup("lp_numba", "numba_devarray", 3.0)),
    ("Numba via launchpad: >= 6x faster than Numba's dispatcher (torch tensors)", _speedup("lp_numba", "numba_torch", 6.0)),
    ("NVRTC compile of a small kernel: <= 0.15 s", _time_limit("nvrtc_small", 0.15)),
    ("disk-cache hit in a fresh process: <= 20 ms", _time_limit("cache_hit", 0.020)),
    ("import launchpad on top of torch: <= 0.15 s", _time_limit("import_launchpad", 0.15)),
]  # fmt: skip


def evaluate(report: dict[str, Any]) -> list[TargetResult]:
    """Every target's verdict on ``report``."""
    out = []
    for name, fn in TARGETS:
        try:
            status, measured, detail = fn(report)
        except _NA as exc:
            status, measured, detail = "N/A", "", str(exc)
        except ZeroDivisionError:
            status, measured, detail = "N/A", "", "a median of zero"
        out.append(TargetResult(name, status, measured, detail))
    return out
