"""Timing method and statistics of the launch benchmarks (their output: :mod:`launchpad.bench.report`).

Method (the one the peers' figures in ``gpu-machine.md`` were measured with): each launcher is
warmed up, then timed in batches of a few hundred launches with ``time.perf_counter_ns`` and no
synchronization inside a batch; the device is synchronized between batches, outside the timed
region. Launchers take turns batch by batch (round-robin, the starting launcher rotating every
round) so that clock drift, thermal state and background noise fall on all of them alike. Each
launcher's figure is the median over many batches of the time per launch, with its spread, and
its ratio to the C floor measured in the same run.

Nothing here needs a GPU: the device synchronization and the clock are parameters, so tests
drive the harness with a fake clock and fake launchers.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .caller_loop import loop_of

__all__ = [
    "Entry",
    "Failed",
    "Launcher",
    "Missing",
    "Timed",
    "WrongResult",
    "add_ratios",
    "describe",
    "measure",
    "measure_e2e",
    "percentile",
    "set_up",
    "summarize",
]

Clock = Callable[[], int]


class Missing(Exception):
    """A launcher (or measurement) cannot run here; the message says why (a peer not installed...)."""


class WrongResult(Exception):
    """A launcher ran but its kernel did not compute the expected result."""


class Failed(Exception):
    """A launcher failed to set up; the message already names what failed (a peer's: it is missing here)."""


def describe(exc: BaseException, limit: int = 300) -> str:
    """One line naming an exception: ``"ImportError: No module named 'cupy'"``.

    The lines of a multi-line message (a compiler log) are joined with `` / ``, so the first
    error in the log survives; :class:`Missing` and :class:`WrongResult` are not named.
    """
    text = " / ".join(" ".join(line.split()) for line in str(exc).splitlines() if line.strip())
    if not isinstance(exc, (Missing, WrongResult, Failed)):
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- launchers -----------------------------------------------------------------------------------


@dataclass
class Timed:
    """How to issue launches of one launcher.

    Attributes
    ----------
    call
        Issues one call (normally one launch).
    batch
        Issues ``n`` launches in one call (the C loop); used instead of ``call`` when given.
    per_call
        Kernels one call launches (a CUDA graph replay launches many).
    sync_in_timing
        Include the closing device synchronization in the timed region: for work that the GPU,
        not the host, paces (graph replay), where the host returns long before the GPU is done.
    note
        How the launcher was called, for the report.
    through_lambda
        Call ``call`` itself per launch. By default a lambda's body is run in the loop instead
        (:mod:`launchpad.bench.caller_loop`: a caller's loop pays no frame per launch).
    """

    call: Callable[[], Any] | None = None
    batch: Callable[[int], Any] | None = None
    per_call: int = 1
    sync_in_timing: bool = False
    note: str = ""
    through_lambda: bool = False

    def __post_init__(self) -> None:
        self._loop = None if self.through_lambda or self.call is None else loop_of(self.call)

    @property
    def inlined(self) -> bool:
        """Whether ``call``'s body runs in the loop (not called through the lambda)."""
        return self.batch is None and self._loop is not None

    def run(self, calls: int) -> None:
        if self.batch is not None:
            self.batch(calls)
            return
        if self._loop is not None:
            self._loop(calls)
            return
        call = self.call
        assert call is not None
        for _ in itertools.repeat(None, calls):
            call()

    def calls_for(self, launches: int) -> int:
        """Calls that issue about ``launches`` launches (at least one call)."""
        return max(1, launches // self.per_call)


@dataclass
class Launcher:
    key: str
    label: str
    group: str
    timed: Timed


@dataclass
class Entry:
    """A launcher as the registry knows it; ``factory(context)`` sets it up and returns its
    :class:`Timed`, or raises :class:`Missing` (or anything else) when it cannot run."""

    key: str
    label: str
    group: str  # "floor", "launchpad", "peer" or "graph"
    factory: Callable[[Any], Timed]


def set_up(
    entries: Iterable[Entry],
    context: Any,
    *,
    sync: Callable[[], None] = lambda: None,
    log: Callable[[str], None] = print,
) -> tuple[list[Launcher], dict[str, dict[str, Any]]]:
    """Set up every launcher; return those that work and a result record for every entry.

    A launcher that raises while being set up is reported as ``missing`` with the reason; one
    whose kernel computes a wrong result as ``error``. A failed device synchronization after a
    setup means the CUDA context may be unusable: that is raised (``RuntimeError``) rather than
    blamed on the launchers that come after.
    """
    ready: list[Launcher] = []
    results: dict[str, dict[str, Any]] = {}
    for e in entries:
        record: dict[str, Any] = {"key": e.key, "label": e.label, "group": e.group}
        results[e.key] = record
        try:
            timed = e.factory(context)
        except WrongResult as exc:
            record.update(status="error", reason=describe(exc))
        except Missing as exc:  # what it needs is not here (cuTile not installed): launchpad's own too
            record.update(status="missing", reason=describe(exc))
        except Exception as exc:  # a peer may be absent here; launchpad itself failing is an error
            record.update(status="error" if e.group == "launchpad" else "missing", reason=describe(exc))
        else:
            record.update(status="ok", note=timed.note)
            ready.append(Launcher(e.key, e.label, e.group, timed))
        if record["status"] == "ok":
            log(f"  {e.label:<58} ready")
        else:
            log(f"  {e.label:<58} {record['status']}: {record['reason']}")
        try:
            sync()
        except Exception as exc:
            raise RuntimeError(
                f"the device failed after setting up {e.label!r} ({describe(exc)}); "
                "the CUDA context may be unusable, so the run stops here"
            ) from exc
    return ready, results


# --- timing --------------------------------------------------------------------------------------


def _rotations(launchers: Sequence[Launcher], rounds: int) -> Iterable[list[Launcher]]:
    """Round ``r`` starts with launcher ``r mod n``: none always runs right after another."""
    for r in range(rounds):
        shift = r % len(launchers) if launchers else 0
        yield list(launchers[shift:]) + list(launchers[:shift])


def measure(
    launchers: Sequence[Launcher],
    *,
    rounds: int,
    batch: int,
    warmup: int,
    sync: Callable[[], None],
    clock: Clock = time.perf_counter_ns,
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Time batches of ``batch`` launches, round-robin; return per-launch ns per batch and errors.

    A launcher that raises is dropped from the remaining rounds and its error returned.
    """
    samples: dict[str, list[float]] = {lc.key: [] for lc in launchers}
    errors: dict[str, str] = {}
    for lc in launchers:
        try:
            lc.timed.run(lc.timed.calls_for(warmup))
            sync()
        except Exception as exc:
            errors[lc.key] = describe(exc)
    active = [lc for lc in launchers if lc.key not in errors]
    for order in _rotations(active, rounds):
        for lc in order:
            if lc.key in errors:
                continue
            t = lc.timed
            calls = t.calls_for(batch)
            try:
                sync()  # start from an idle device, outside the timed region
                t0 = clock()
                t.run(calls)
                if t.sync_in_timing:
                    sync()
                t1 = clock()
                sync()
            except Exception as exc:
                errors[lc.key] = describe(exc)
                continue
            samples[lc.key].append((t1 - t0) / (calls * t.per_call))
    return samples, errors


def measure_e2e(
    launchers: Sequence[Launcher],
    *,
    launches: int,
    repeats: int,
    sync: Callable[[], None],
    clock: Clock = time.perf_counter_ns,
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """End to end: ``launches`` back-to-back launches plus one synchronization, timed as a whole;
    return per-launch ns per repeat and errors."""
    samples: dict[str, list[float]] = {lc.key: [] for lc in launchers}
    errors: dict[str, str] = {}
    for order in _rotations(list(launchers), repeats):
        for lc in order:
            if lc.key in errors:
                continue
            t = lc.timed
            calls = t.calls_for(launches)
            try:
                sync()
                t0 = clock()
                t.run(calls)
                sync()
                t1 = clock()
            except Exception as exc:
                errors[lc.key] = describe(exc)
                continue
            samples[lc.key].append((t1 - t0) / (calls * t.per_call))
    return samples, errors


# --- statistics ----------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile, linear between closest ranks (numpy's default method)."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarize(values: Sequence[float]) -> dict[str, float]:
    """Median, spread (p10/p90, quartiles), extremes and mean of a sample."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "median": percentile(values, 50),
        "p10": percentile(values, 10),
        "p25": percentile(values, 25),
        "p75": percentile(values, 75),
        "p90": percentile(values, 90),
        "min": min(values),
        "max": max(values),
        "mean": sum(values) / len(values),
    }


def median_of(record: dict[str, Any] | None, part: str = "stats") -> float | None:
    """The median of a result record (``part``: ``stats`` or ``e2e``), None when it has none."""
    if not record or record.get("status") != "ok":
        return None
    stats = record.get(part, {})
    if part == "e2e":
        stats = stats.get("stats", {})
    return stats.get("median")


def add_ratios(results: dict[str, dict[str, Any]], floor_key: str) -> None:
    """Give every measured record its figures as ratios to the floor's median (same run)."""
    floor = results.get(floor_key)
    for part in ("stats", "e2e"):
        base = median_of(floor, part)
        for record in results.values():
            stats = record.get(part, {})
            if part == "e2e":
                stats = stats.get("stats", {})
            if not stats.get("n"):
                continue
            target = record if part == "stats" else record["e2e"]
            target["ratio"] = {k: stats[k] / base for k in ("median", "p10", "p90")} if base else None


def record_samples(record: dict[str, Any], samples: list[float], error: str | None) -> None:
    """Store a launcher's samples and summary in its result record (or the error that stopped it)."""
    if error is not None:
        record.update(status="error", reason=error)
    if samples:
        record["samples_ns"] = [round(v, 2) for v in samples]
        record["stats"] = summarize(samples)
    elif record.get("status") == "ok":
        record.update(status="error", reason="no samples")


def record_e2e(record: dict[str, Any], samples: list[float], error: str | None) -> None:
    if samples:
        record["e2e"] = {"samples_ns": [round(v, 2) for v in samples], "stats": summarize(samples)}
    elif error is not None:
        record["e2e"] = {"error": error}


# --- output --------------------------------------------------------------------------------------
