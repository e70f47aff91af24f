"""The benchmark harness, targets and outputs, driven by fake launchers and a fake clock.

What needs a GPU (the launchers themselves) is covered by the ``gpu`` tests at the end; the
generated kernel sources and the C floor are compiled here without one.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import launchpad
import launchpad.cli
from launchpad import Arg
from launchpad.bench import context, harness, launchers, report, runner, sequence_section, sweep, targets
from launchpad.bench import sequence_training as training
from launchpad.bench.harness import Entry, Launcher, Missing, Timed, WrongResult

HAS_GPU = torch.cuda.is_available()


class FakeClock:
    """A nanosecond clock that only the fake launchers (and a fake sync) advance."""

    def __init__(self) -> None:
        self.now = 0
        self.log: list[str] = []

    def __call__(self) -> int:
        return self.now

    def launcher(self, key: str, cost_ns: int, *, group: str = "peer", per_call: int = 1,
                 sync_in_timing: bool = False) -> Launcher:  # fmt: skip
        def call() -> None:
            self.now += cost_ns
            self.log.append(key)

        return Launcher(key, key.upper(), group, Timed(call, per_call=per_call, sync_in_timing=sync_in_timing))


# --- timing ----------------------------------------------------------------------------------------


def test_measure_reports_per_launch_time_of_each_batch():
    clock = FakeClock()
    syncs = []
    fast, slow = clock.launcher("fast", 1000), clock.launcher("slow", 2500)
    samples, errors = harness.measure(
        [fast, slow], rounds=7, batch=50, warmup=10, sync=lambda: syncs.append(1), clock=clock
    )
    assert errors == {}
    assert samples == {"fast": [1000.0] * 7, "slow": [2500.0] * 7}
    # warm-up 10 calls each, then 7 batches of 50 each
    assert clock.log.count("fast") == 10 + 7 * 50 and clock.log.count("slow") == 10 + 7 * 50
    assert len(syncs) >= 2 * 7 * 2  # a sync before and after every timed batch


def test_measure_interleaves_launchers_round_robin_with_rotating_start():
    clock = FakeClock()
    ls = [clock.launcher(k, 10) for k in "abc"]
    harness.measure(ls, rounds=3, batch=1, warmup=0, sync=lambda: None, clock=clock)
    warm = ["a", "b", "c"]  # warm-up of at least one call each
    assert clock.log == warm + ["a", "b", "c", "b", "c", "a", "c", "a", "b"]


def test_measure_native_batch_and_graph_launchers():
    clock = FakeClock()
    calls = []

    def batch(n: int) -> None:  # the C loop: one call issues n launches at 100 ns each
        calls.append(n)
        clock.now += 100 * n

    c_loop = Launcher("c_floor", "C", "floor", Timed(batch=batch))
    # a graph of 10 kernels; the GPU paces it, so the closing sync (which takes 5000 ns here) counts
    graph = clock.launcher("graph", 20, per_call=10, sync_in_timing=True)

    def sync() -> None:
        clock.now += 5000

    samples, _ = harness.measure([c_loop, graph], rounds=2, batch=200, warmup=0, sync=sync, clock=clock)
    assert calls[-1] == 200
    assert samples["c_floor"] == [100.0, 100.0]
    # 20 replays of 10 kernels: (20 * 20 ns + one 5000 ns sync) / 200 kernels
    assert samples["graph"] == [(20 * 20 + 5000) / 200] * 2


def test_measure_drops_a_launcher_that_fails_and_keeps_the_others():
    clock = FakeClock()
    state = {"n": 0}

    def flaky() -> None:
        state["n"] += 1
        if state["n"] > 3:
            raise RuntimeError("CUDA_ERROR_LAUNCH_FAILED")

    good = clock.launcher("good", 7)
    bad = Launcher("bad", "BAD", "peer", Timed(flaky))
    samples, errors = harness.measure([good, bad], rounds=4, batch=2, warmup=1, sync=lambda: None, clock=clock)
    assert errors == {"bad": "RuntimeError: CUDA_ERROR_LAUNCH_FAILED"}
    assert samples["good"] == [7.0] * 4
    assert len(samples["bad"]) == 1  # one batch succeeded before the failure


def test_measure_e2e_includes_the_closing_sync():
    clock = FakeClock()
    lc = clock.launcher("x", 100)

    def sync() -> None:
        clock.now += 10_000

    samples, errors = harness.measure_e2e([lc], launches=1000, repeats=3, sync=sync, clock=clock)
    assert errors == {}
    # the opening sync is before t0; the closing one is inside: (1000 * 100 + 10000) / 1000
    assert samples["x"] == [110.0] * 3


# --- statistics ------------------------------------------------------------------------------------


@pytest.mark.parametrize("q", [0, 10, 25, 50, 75, 90, 100])
def test_percentile_matches_numpy(q):
    values = [5.0, 1.0, 9.0, 3.5, 7.25, 2.0, 8.0]
    assert harness.percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_summarize_and_empty_input():
    s = harness.summarize([4.0, 1.0, 3.0, 2.0])
    assert s["n"] == 4 and s["median"] == 2.5 and s["min"] == 1.0 and s["max"] == 4.0 and s["mean"] == 2.5
    assert s["p10"] == pytest.approx(1.3) and s["p90"] == pytest.approx(3.7)
    assert harness.summarize([]) == {"n": 0}
    with pytest.raises(ValueError):
        harness.percentile([], 50)


def _record(key: str, samples: list[float], group: str = "peer", status: str = "ok") -> dict:
    rec = {"key": key, "label": key, "group": group, "status": status}
    harness.record_samples(rec, samples, None)
    return rec


def test_ratios_to_the_floor_of_the_same_run():
    results = {
        "c_floor": _record("c_floor", [1000.0, 1000.0, 1000.0], "floor"),
        "lp": _record("lp", [1040.0, 1050.0, 1060.0], "launchpad"),
        "peer": _record("peer", [2000.0, 2500.0, 3000.0]),
    }
    harness.record_e2e(results["c_floor"], [2000.0], None)
    harness.record_e2e(results["peer"], [5000.0], None)
    harness.add_ratios(results, "c_floor")
    assert results["c_floor"]["ratio"]["median"] == 1.0
    assert results["lp"]["ratio"]["median"] == pytest.approx(1.05)
    assert results["peer"]["ratio"] == {"median": 2.5, "p10": pytest.approx(2.1), "p90": pytest.approx(2.9)}
    assert results["peer"]["e2e"]["ratio"]["median"] == 2.5


def test_no_ratios_without_a_floor():
    results = {
        "c_floor": {"key": "c_floor", "label": "C", "group": "floor", "status": "missing", "reason": "no compiler"},
        "lp": _record("lp", [1.0, 2.0]),
    }
    harness.add_ratios(results, "c_floor")
    assert results["lp"]["ratio"] is None
    assert "ratio" not in results["c_floor"]


# --- setup: missing peers are reported, never faked --------------------------------------------------


def test_set_up_reports_missing_and_wrong_launchers():
    def ok(ctx):
        return Timed(lambda: None, note="fine")

    def absent(ctx):
        raise Missing("cupy: ModuleNotFoundError: No module named 'cupy'")

    def broken(ctx):
        raise NotImplementedError("launchpad.from_triton is being written")

    def wrong(ctx):
        raise WrongResult("wrong result: 1024 of 1024 elements differ from torch")

    entries = [Entry("a", "A", "peer", ok), Entry("cupy", "CuPy", "peer", absent),
               Entry("lp", "LP", "launchpad", broken), Entry("w", "W", "peer", wrong)]  # fmt: skip
    lines: list[str] = []
    ready, results = harness.set_up(entries, None, log=lines.append)
    assert [lc.key for lc in ready] == ["a"]
    assert results["a"]["status"] == "ok" and results["a"]["note"] == "fine"
    assert results["cupy"] == {"key": "cupy", "label": "CuPy", "group": "peer", "status": "missing",
                               "reason": "cupy: ModuleNotFoundError: No module named 'cupy'"}  # fmt: skip
    assert results["lp"]["status"] == "error"  # launchpad failing is never "missing"
    assert results["lp"]["reason"] == "NotImplementedError: launchpad.from_triton is being written"
    assert results["w"]["status"] == "error" and "differ from torch" in results["w"]["reason"]
    assert any("CuPy" in line and "missing: cupy" in line for line in lines)


def test_set_up_stops_when_the_device_fails():
    def ok(ctx):
        return Timed(lambda: None)

    def sync():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(RuntimeError, match="may be unusable"):
        harness.set_up([Entry("a", "A", "peer", ok)], None, sync=sync, log=lambda _: None)


def test_describe_keeps_the_first_lines_of_a_compiler_log():
    exc = launchpad.CompileError("NVRTC could not compile for sm_90: 6: NVRTC_ERROR_COMPILATION,",
                                 'default_program(3): error: identifier "INFINITY" is undefined\n\n1 error')  # fmt: skip
    text = harness.describe(exc)
    assert text.startswith("CompileError: NVRTC could not compile")
    assert 'identifier "INFINITY" is undefined' in text
    assert harness.describe(Missing("x" * 500), limit=50) == "x" * 47 + "..."


# --- targets -----------------------------------------------------------------------------------------


def make_report(launch: dict[str, float] | None = None, sweep32: dict[str, float] | None = None,
                compile_s: dict[str, float] | None = None, missing: dict[str, str] | None = None,
                sequence: dict[str, float] | None = None,
                helion: dict[str, dict[str, float]] | None = None) -> dict:  # fmt: skip
    """A report with the given medians (ns for launches and per kernel of a sequence, s for compile times)."""
    groups = {
        k: ("floor" if k == "c_floor" else "launchpad" if k.startswith("lp_") else "peer")
        for k in launchers.LAUNCH_KEYS
    }
    report: dict = {}
    if launch is not None:
        results = {k: _record(k, [v], groups[k]) for k, v in launch.items()}
        for k, why in (missing or {}).items():
            status = "error" if groups[k] == "launchpad" else "missing"
            results[k] = {"key": k, "label": k, "group": groups[k], "status": status, "reason": why}
        harness.add_ratios(results, "c_floor")
        report["launch"] = {"floor": "c_floor", "results": results}
    if sweep32 is not None:
        report["sweep"] = {"ks": [32], "results": {
            k: {"key": k, "label": k, "group": groups[k], "per_k": {"32": _record(k, [v])}} for k, v in sweep32.items()
        }}  # fmt: skip
    if sequence is not None:
        results = {k: _record(k, [v], "floor" if k == "c_floor" else "launchpad") for k, v in sequence.items()}
        harness.add_ratios(results, "c_floor")
        report["sequence"] = {"floor": "c_floor", "kernels": 20, "updated": [1, 4, 20], "results": results}
    if helion is not None:
        groups = {}
        for name, medians in helion.items():
            results = {k: _record(k, [v], "launchpad" if k.startswith("lp_") else "peer") for k, v in medians.items()}
            harness.add_ratios(results, f"helion_{name}")
            groups[name] = {"kernel": name, "floor": f"helion_{name}", "results": results}
        report["helion"] = {"groups": groups}
    if compile_s is not None:
        report["compile"] = {
            k: {"label": k, "status": "ok", "stats": harness.summarize([v])} for k, v in compile_s.items()
        }
    return report


def by_prefix(report: dict, prefix: str) -> targets.TargetResult:
    (hit,) = [t for t in targets.evaluate(report) if t.name.startswith(prefix)]
    return hit


GOOD_LAUNCH = {
    "c_floor": 3690, "lp_triton": 3900, "lp_triton_getitem": 3950, "lp_cpp": 3880, "lp_bound": 3750,
    "lp_numba": 4000, "lp_numba_getitem": 4100, "lp_triton_launcher": 4500, "triton_jit": 11970,
    "triton_bare": 4440, "cuda_core": 4050, "torch_static": 4200, "tvm_ffi": 4300, "numba_devarray": 22600,
    "numba_torch": 54400, "torch_mul": 5140,
}  # fmt: skip


def test_targets_pass_on_good_figures():
    report = make_report(
        GOOD_LAUNCH,
        sweep32={"c_floor": 8100, "lp_triton": 12600, "triton_bare": 23000},
        compile_s={"nvrtc_small": 0.07, "cache_hit": 0.012, "import_launchpad": 0.05, "import_first_use": 0.09},
        sequence=GOOD_SEQUENCE,
        helion=GOOD_HELION,
    )
    report["sequence"]["sizes"] = {"16 KB": {"seq_new": 28.0, "torch_copy": 30.0, "ratio": 28 / 30}}
    results = targets.evaluate(report)
    assert [t.status for t in results] == ["PASS"] * len(targets.TARGETS), results
    first = by_prefix(report, "Kernel.launch, 3-arg")
    assert first.measured == (
        "1.057x floor (limit 1.10x); 1.14x faster than triton_bare; 1.04x faster than cuda_core; "
        "1.08x faster than torch_static; 1.10x faster than tvm_ffi"
    )


GOOD_SEQUENCE = {"c_floor": 3600, "seq_one_by_one": 4300, "seq_torch_graph": 2100, "seq_plain": 700,
                 "seq_new_1": 750, "seq_new_4": 780, "seq_new_20": 850}  # ns per kernel  # fmt: skip


GOOD_HELION = {"add": {"helion_add": 67000, "lp_helion_add": 15000}, "matmul": {"helion_matmul": 60000,
                                                                                "lp_helion_matmul": 14000}}  # fmt: skip


def test_the_helion_targets():
    t = by_prefix(make_report(helion=GOOD_HELION), "Helion add")
    assert t.status == "PASS" and t.measured == "15.0 us against 67.0 us: 4.47x fewer (needs 2x)"
    slow = {**GOOD_HELION, "matmul": {"helion_matmul": 60000, "lp_helion_matmul": 31000}}
    assert by_prefix(make_report(helion=slow), "Helion matmul").status == "FAIL"
    assert by_prefix(make_report(), "Helion add").status == "N/A"
    missing = by_prefix({"helion": {"missing": "helion is not installed"}}, "Helion matmul")
    assert (missing.status, missing.detail) == ("N/A", "helion is not installed")
    broken = make_report(helion=GOOD_HELION)
    broken["helion"]["groups"]["add"]["results"]["lp_helion_add"] = {"label": "lp", "status": "error", "reason": "boom"}
    assert by_prefix(broken, "Helion add").status == "FAIL"


def test_helion_tables_render_each_kernel():
    from launchpad.bench.helion import helion_tables

    text = helion_tables(make_report(helion=GOOD_HELION)["helion"], report.format_table, "")
    assert "15.00" in text and "0.22x" in text and "67.00" in text and text.count("us/call") == 2
    assert helion_tables({"missing": "helion is not installed"}, report.format_table, "### ") == (
        "### Helion\n\nnot measured: helion is not installed"
    )


def test_the_sequence_target():
    t = by_prefix(make_report(sequence=GOOD_SEQUENCE), "recorded sequence of 20")
    assert t.status == "PASS" and t.measured == (
        "0.236x of 20 floor launches (limit 0.25x); 5.06x faster than the launches one by one (needs 2.5x); 2.47x "
        "faster than torch's CUDAGraph after copy_"
    )
    for slower in ({"seq_new_20": 950}, {"seq_one_by_one": 2000}, {"seq_torch_graph": 800}):
        assert (
            by_prefix(make_report(sequence=dict(GOOD_SEQUENCE, **slower)), "recorded sequence of 20").status == "FAIL"
        )
    missing = make_report(sequence={k: v for k, v in GOOD_SEQUENCE.items() if k != "seq_torch_graph"})
    assert by_prefix(missing, "recorded sequence of 20").status == "N/A"


def test_the_sizes_target():
    report = make_report(sequence=GOOD_SEQUENCE)
    sizes = {"16 KB": {"seq_new": 28.0, "torch_copy": 30.0, "ratio": 28 / 30},
             "256 MB": {"seq_new": 5835.0, "torch_copy": 6200.0, "ratio": 5835 / 6200}}  # fmt: skip
    report["sequence"]["sizes"] = sizes
    t = by_prefix(report, "recorded sequence, GPU-bound")
    assert t.status == "PASS" and t.measured == "record / torch graph + copy_: 16 KB 0.933x, 256 MB 0.941x"
    sizes["16 KB"] = {"seq_new": 32.0, "torch_copy": 30.0, "ratio": 32 / 30}
    assert by_prefix(report, "recorded sequence, GPU-bound").status == "FAIL"
    sizes["16 KB"] = {"error": "CudaError: out of memory"}
    assert by_prefix(report, "recorded sequence, GPU-bound").status == "FAIL"
    del report["sequence"]["sizes"]
    assert by_prefix(report, "recorded sequence, GPU-bound").status == "N/A"


def test_targets_fail_on_each_bound():
    # just above 1.10x floor
    assert by_prefix(make_report(dict(GOOD_LAUNCH, lp_triton=4070)), "Kernel.launch, 3-arg").status == "FAIL"
    # below 1.10x but a peer is faster
    assert by_prefix(make_report(dict(GOOD_LAUNCH, tvm_ffi=3800)), "Kernel.launch, 3-arg").status == "FAIL"
    assert by_prefix(make_report(dict(GOOD_LAUNCH, lp_triton_getitem=4100)), "k[grid], 3-arg").status == "FAIL"
    assert by_prefix(make_report(dict(GOOD_LAUNCH, lp_bound=3880)), "bound launch").status == "FAIL"  # 1.0515x
    assert by_prefix(make_report(dict(GOOD_LAUNCH, lp_triton_launcher=5600)), "triton_launcher").status == "FAIL"
    assert by_prefix(make_report(dict(GOOD_LAUNCH, triton_jit=11000)), "triton_launcher").status == "FAIL"  # 2.4x
    assert by_prefix(make_report(dict(GOOD_LAUNCH, lp_numba_getitem=4800)), "Numba kernel k[grid").status == "FAIL"
    assert by_prefix(make_report(dict(GOOD_LAUNCH, lp_cpp=4100)), "C++ kernel, 3 args").status == "FAIL"
    numba = make_report(dict(GOOD_LAUNCH, lp_numba=8000))
    assert by_prefix(numba, "Numba via launchpad: >= 3x").status == "FAIL"  # 22600 / 8000 = 2.8
    assert by_prefix(numba, "Numba via launchpad: >= 6x").status == "PASS"  # 54400 / 8000 = 6.8
    too_slow = make_report(sweep32={"c_floor": 8000, "lp_triton": 12900, "triton_bare": 30000})
    assert by_prefix(too_slow, "32 tensor args").status == "FAIL"  # 1.61x floor
    assert by_prefix(make_report(sweep32={"c_floor": 8000, "lp_triton": 12700, "triton_bare": 30000}),
                     "32 tensor args").status == "PASS"  # 1.59x floor  # fmt: skip
    not_ahead = make_report(sweep32={"c_floor": 8000, "lp_triton": 12000, "triton_bare": 17900})
    assert by_prefix(not_ahead, "32 tensor args").status == "FAIL"  # only 1.49x faster
    slow = make_report(compile_s={"nvrtc_small": 0.16, "cache_hit": 0.021, "import_launchpad": 0.061,
                                  "import_first_use": 0.151})  # fmt: skip
    assert [
        by_prefix(slow, p).status for p in ("NVRTC", "disk-cache", "import launchpad on", "import launchpad and")
    ] == ["FAIL"] * 4


def test_targets_fail_with_the_error_when_launchpad_fails_and_are_na_only_for_what_was_not_run():
    report = make_report(
        {k: v for k, v in GOOD_LAUNCH.items() if k != "lp_triton"},
        missing={"lp_triton": "NotImplementedError: launchpad.from_triton is being written"},
    )
    t = by_prefix(report, "Kernel.launch, 3-arg")
    assert t.status == "FAIL" and "from_triton is being written" in t.detail
    assert by_prefix(report, "bound launch").status == "PASS"
    assert by_prefix(report, "NVRTC").status == "N/A" and "not measured" in by_prefix(report, "NVRTC").detail
    no_peer = make_report({k: v for k, v in GOOD_LAUNCH.items() if k != "tvm_ffi"}, missing={"tvm_ffi": "no tvm-ffi"})
    t = by_prefix(no_peer, "Kernel.launch, 3-arg")
    assert t.status == "PASS" and "no tvm-ffi" in t.detail  # a peer absent here is said, not fatal
    no_floor = make_report({k: v for k, v in GOOD_LAUNCH.items() if k != "c_floor"}, missing={"c_floor": "no gcc"})
    assert (
        by_prefix(no_floor, "bound launch").status == "N/A" and "no gcc" in by_prefix(no_floor, "bound launch").detail
    )


# --- output ------------------------------------------------------------------------------------------


def test_format_table_aligns_columns_and_spans_missing_rows():
    rows = report.launch_rows({
        "c_floor": dict(_record("c_floor", [3690.0, 3700.0]), ratio={"median": 1.0}),
        "cupy": {"key": "cupy", "label": "CuPy RawKernel", "status": "missing", "reason": "cupy: not installed"},
    })  # fmt: skip
    text = report.format_table(report.LAUNCH_HEADER, rows)
    lines = text.splitlines()
    assert lines[0].startswith("launcher") and set(lines[1]) <= {"-", " "}
    assert "3.69" in lines[2] and "1.00x" in lines[2]
    assert lines[3].startswith("CuPy RawKernel") and lines[3].endswith("missing: cupy: not installed")
    # numbers are right-aligned under their headers
    assert lines[0].index("us/launch") + len("us/launch") == lines[2].index("3.69") + len("3.69")
    md = report.markdown_table(["a", "b"], [["x|y", "1"], ["only"]])
    assert md.splitlines() == ["| a | b |", "| --- | ---: |", "| x\\|y | 1 |", "| only |  |"]


def test_format_table_prints_a_cell_of_several_lines_in_its_column():
    text = report.format_table(["a", "b", "c"], [["x\nlonger", "1", "p\nq\nr"], ["y", "22", "s"]], "lrl")
    assert text.splitlines() == ["a        b  c", "------  --  -", "x        1  p", "longer      q", "            r",
                                 "y       22  s"]  # fmt: skip


def test_the_printed_targets_table_wraps_its_long_cells():
    """No printed line of the Targets table runs past 200 characters: a target's name and what was
    measured wrap, each in its column, the verdict on the first line; markdown keeps one row a line."""
    full = make_report(GOOD_LAUNCH, sweep32={"c_floor": 8100, "lp_triton": 12600, "triton_bare": 23000},
                       compile_s={"nvrtc_small": 0.07, "cache_hit": 0.012, "import_launchpad": 0.05, "import_first_use": 0.09},
                       sequence=GOOD_SEQUENCE)  # fmt: skip
    results = [t.to_json() for t in targets.evaluate(full)]  # helion: N/A, with why
    results[0]["detail"] = "not measured: " + "; ".join(
        f"peer_{i}: not installed (pip install peer-{i})" for i in range(9)
    )
    assert max(len(t["name"]) + len(t["measured"] or t["detail"]) for t in results) > 200  # as they were printed
    rep = {"versions": {"launchpad": launchpad.__version__, "python": "3.11"}, "created": "now",
           "config": {"quick": True}, "targets": results}  # fmt: skip
    text = runner.render(rep, report.format_table, markdown=False)
    lines = text.split("Targets\n\n")[1].splitlines()
    assert lines[0].split() == ["target", "verdict", "measured"] and max(len(line) for line in lines) <= 200
    column = lines[0].index("verdict")
    firsts = [i for i, line in enumerate(lines[2:], 2) if line[column : column + 1].strip()]
    assert [lines[i][column:].split()[0] for i in firsts] == [t["status"] for t in results]
    for t, start, end in zip(results, firsts, [*firsts[1:], len(lines)]):  # each cell's lines, read back
        assert " ".join(" ".join(line[:column] for line in lines[start:end]).split()) == t["name"]
        measured = " ".join(line[column + len("verdict") + 2 :] for line in lines[start:end])
        assert " ".join(measured.split()) == (t["measured"] or t["detail"])
    md = runner.render(rep, report.markdown_table, markdown=True)
    for t in results:
        assert f"| {t['name']} | {t['status']} | {t['measured'] or t['detail']} |" in md


def _fake_entries(costs: dict[str, int]) -> list[Entry]:
    """Entries whose launches spin for a fixed number of loop iterations (a known relative cost)."""

    def make(n: int):
        def factory(ctx):
            return Timed(lambda: sum(range(n)), note=f"{n} iterations")

        return factory

    return [Entry(k, k.replace("_", " "), "floor" if k == "c_floor" else "launchpad" if k.startswith("lp_") else "peer",
                  make(v)) for k, v in costs.items()]  # fmt: skip


@pytest.fixture
def fake_gpu_bench(monkeypatch):
    """The bench runner with fake launchers, no GPU and no fresh-process measurements."""
    env = launchpad.reporting.environment.environment()
    env.update(gpu_available=True, no_gpu_reason="", devices=[{"name": "Fake GPU", "arch": "sm_90"}])
    monkeypatch.setattr(launchpad.reporting.environment, "environment", lambda: env)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(context, "Context", lambda workdir, graph_kernels: SimpleNamespace(workdir=workdir))

    def no_cupy(ctx):
        raise Missing("cupy: not installed")

    fake = _fake_entries({"c_floor": 50, "lp_triton": 55, "triton_jit": 300}) + [
        Entry("cupy", "CuPy RawKernel", "peer", no_cupy)
    ]
    monkeypatch.setattr(launchers, "LAUNCHERS", fake)
    monkeypatch.setattr(sweep, "sweep_entries", lambda k: _fake_entries(
        {"c_floor": 50 + k, "lp_triton": 55 + k, "triton_bare": 80 + 2 * k}))  # fmt: skip


def test_runner_writes_json_markdown_and_png(fake_gpu_bench, tmp_path, capsys):
    status = runner.run(quick=True, out=tmp_path, only=["launch", "sweep"], rounds=5, batch=20, argv=["x"],
                        log=lambda _: None)  # fmt: skip
    assert status == 0
    report = json.loads((tmp_path / "latest.json").read_text())
    assert report["schema"] == runner.SCHEMA and report["sections"] == ["launch", "sweep"]
    v = report["versions"]
    for key in ("python", "launchpad", "torch", "triton", "cuda-core", "cuda-bindings", "numba-cuda", "cupy",
                "driver", "gpu", "cpu"):  # fmt: skip
        assert key in v
    assert v["gpu"] == "Fake GPU" and v["torch"] == importlib.metadata.version("torch")
    results = report["launch"]["results"]
    floor = results["c_floor"]
    assert floor["status"] == "ok" and len(floor["samples_ns"]) == 5 and floor["stats"]["n"] == 5
    assert floor["ratio"]["median"] == 1.0 and len(floor["e2e"]["samples_ns"]) == 3
    assert results["triton_jit"]["ratio"]["median"] > 1.0
    assert results["cupy"] == {"key": "cupy", "label": "CuPy RawKernel", "group": "peer", "status": "missing",
                               "reason": "cupy: not installed"}  # fmt: skip
    sweep = report["sweep"]
    assert sweep["ks"] == [1, 3, 16, 32]
    assert set(sweep["results"]["lp_triton"]["per_k"]) == {"1", "3", "16", "32"}
    assert sweep["results"]["c_floor"]["per_k"]["32"]["ratio"]["median"] == 1.0
    names = {t["name"]: t for t in report["targets"]}
    assert len(names) == len(targets.TARGETS)
    assert names[targets.TARGETS[0][0]]["status"] in ("PASS", "FAIL")
    assert all(t["status"] == "N/A" for t in report["targets"] if "Numba" in t["name"])
    png = (tmp_path / "latest.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    md = (tmp_path / "latest.md").read_text()
    assert "| launcher | us/launch |" in md and "CuPy RawKernel | missing: cupy: not installed" in md
    assert "### Argument-count sweep" in md and "### Targets" in md
    out = capsys.readouterr().out
    assert "Launch overhead" in out and "c floor" in out and "missing: cupy: not installed" in out


def test_runner_writes_to_the_current_directory_unless_asked(fake_gpu_bench, tmp_path, monkeypatch):
    """A run without --out never touches a checkout's recorded results (benchmarks/results, what
    the README shows): it writes ./launchpad-bench, from a checkout too, and says where."""
    recorded = Path(runner.__file__).resolve().parents[2] / "benchmarks" / "results"
    before = {p.name: p.stat().st_mtime_ns for p in recorded.glob("latest.*")} if recorded.is_dir() else {}
    monkeypatch.chdir(tmp_path)
    said: list[str] = []
    assert runner.run(only=["triton_*"], rounds=2, batch=5, log=said.append) == 0
    written = tmp_path / "launchpad-bench"
    assert json.loads((written / "latest.json").read_text())["sections"] == ["launch", "sweep"]
    assert (written / "latest.md").is_file() and str(written / "latest.json") in said[-1]
    after = {p.name: p.stat().st_mtime_ns for p in recorded.glob("latest.*")} if recorded.is_dir() else {}
    assert after == before
    assert runner.default_out() == tmp_path / "launchpad-bench"


def test_bench_help_lists_every_section(capsys):
    from launchpad.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"sections ({', '.join(runner.SECTIONS)})" in text and "sequence" in runner.SECTIONS
    assert "default: ./launchpad-bench" in text


def test_runner_only_filters_launchers_but_keeps_the_floor(fake_gpu_bench, tmp_path):
    assert runner.run(out=tmp_path, only=["triton_*"], rounds=2, batch=5, log=lambda _: None) == 0
    report = json.loads((tmp_path / "latest.json").read_text())
    assert set(report["launch"]["results"]) == {"c_floor", "triton_jit"}
    assert report["sections"] == ["launch", "sweep"]


def test_runner_keeps_going_when_a_section_fails(fake_gpu_bench, tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise KeyError("per_k")

    monkeypatch.setattr(runner, "sweep_section", broken)
    assert runner.run(out=tmp_path, only=["launch", "sweep"], rounds=2, batch=5, log=lambda _: None) == 1
    report = json.loads((tmp_path / "latest.json").read_text())
    assert report["launch"]["results"]["c_floor"]["status"] == "ok"
    assert report["sweep"] == {"error": "KeyError: 'per_k'"}
    assert "sweep: failed\n\nKeyError: 'per_k'" in (tmp_path / "latest.md").read_text()
    assert "Traceback" in capsys.readouterr().err  # an unexpected failure shows where it happened


def test_parse_only():
    keys = launchers.LAUNCH_KEYS
    assert runner.parse_only([], keys) == (set(runner.SECTIONS), [])
    assert runner.parse_only(["compile", "import"], keys) == ({"compile", "import"}, [])
    assert runner.parse_only(["lp_*", "sweep"], keys) == ({"sweep"}, ["lp_*"])
    assert runner.parse_only(["cupy"], keys) == ({"launch", "sweep"}, ["cupy"])
    with pytest.raises(runner.UsageError, match="unknown name in --only: nope"):
        runner.parse_only(["nope"], keys)
    assert runner.selected("c_floor", ["cupy"]) and runner.selected("cupy", ["cu*"])
    assert not runner.selected("lp_cpp", ["cupy"]) and runner.selected("lp_cpp", [])


def test_config_quick_and_overrides():
    full, quick = runner.Config.make(), runner.Config.make(quick=True)
    assert full.sweep_ks == context.SWEEP_KS and 32 in quick.sweep_ks and 1 in quick.sweep_ks
    assert quick.rounds < full.rounds and quick.fresh_repeats < full.fresh_repeats
    over = runner.Config.make(quick=True, rounds=7, batch=300)
    assert (over.rounds, over.sweep_rounds, over.batch, over.sweep_batch) == (7, 7, 300, 300)


# --- the training step (sequence section): what runs without a GPU --------------------------------


@pytest.mark.parametrize("model", list(training.MODELS))
def test_training_check_resets_and_compares_with_eager_on_cpu(model):
    work = training.Workload(model, device="cpu")
    t = training.Trainer(work)
    check = work.check("eager", t, t.step, training.RTOL)
    assert work.deterministic is True  # eager twice from the reset state: the same bits
    assert check["bit_identical"] and check["max_rel_diff"] == 0.0 and len(check["losses"]) == training.CHECK_STEPS
    assert training.check_text(check) == "= eager, bit for bit"
    graph = training.Trainer(work)
    work.check("torch_graph", graph, graph.step, training.RTOL)
    again = training.Trainer(work)
    assert work.check("record", again, again.step, training.RTOL)["bit_identical_to_torch_graph"] is True
    assert training.check_text(work.checks["record"]) == "= eager, bit for bit; = torch graph, bit for bit"
    off = training.Trainer(work)
    with pytest.raises(WrongResult, match=r"differ from eager's by 1\.0e-02 relative \(tolerance 0\.001\)"):
        work.check("compile_step", off, lambda x, y: off.step(x, y) * 1.01, training.COMPILE_RTOL)
    assert training.check_text(work.checks["compile_step"]).startswith("1.0e-02 from eager; torch graph's bits differ")
    timed = work.timed(t.step, "note")
    timed.run(training.POOL + 1)  # the rotation wraps around


def test_training_first_line_of_an_error():
    compile_error = RuntimeError("backend='inductor' raised:\nRuntimeError: Triton is not installed\n\nmore")
    assert training.first_line(compile_error) == "RuntimeError: backend='inductor' raised: RuntimeError: Triton is " \
        "not installed"  # fmt: skip
    record_error = launchpad.RecordError("sequence input 'x' reaches no node\n  details")
    assert training.first_line(record_error) == "RecordError: sequence input 'x' reaches no node"
    assert training.first_line(Missing("already said\nmore")) == "already said"
    assert training.first_line(KeyError()) == "KeyError"


def test_training_entries_report_each_failure_as_a_row(monkeypatch):
    def fails(exc):
        def build(work):
            raise exc

        return build

    variants = (
        ("eager", "eager", "peer", lambda work: Timed(lambda: None, note="ok")),
        ("torch_graph", "graph", "peer", fails(RuntimeError("capture failed\nat node 3"))),
        ("record", "record", "launchpad", fails(launchpad.RecordError("input 'x' decides a grid\n(more)"))),
        ("compile_step", "compile", "peer", fails(WrongResult("wrong result: off"))),
    )
    monkeypatch.setattr(training, "VARIANTS", variants)
    work = SimpleNamespace(name="mlp")
    ready, results = harness.set_up(training.training_entries(work), None, log=lambda _: None)
    assert [lc.key for lc in ready] == ["train_mlp_eager"]
    assert results["train_mlp_torch_graph"]["status"] == "missing"
    assert results["train_mlp_torch_graph"]["reason"] == "RuntimeError: capture failed"
    assert results["train_mlp_record"] == {"key": "train_mlp_record", "label": "record", "group": "launchpad",
                                           "status": "error", "reason": "RecordError: input 'x' decides a grid"}  # fmt: skip
    assert results["train_mlp_compile_step"]["status"] == "error"


def _fake_training(spins: dict[str, int], fail_model: str = ""):
    """``workload`` and ``entries`` stand-ins for :func:`training.measure_training`."""

    def workload(name):
        if name == fail_model:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory.\nTried to allocate 2 GiB")
        checks = {"eager": {"bit_identical": True, "max_rel_diff": 0.0},
                  "record": {"bit_identical": True, "max_rel_diff": 0.0, "bit_identical_to_torch_graph": True},
                  "compile_step": {"bit_identical": False, "max_rel_diff": 3.1e-7}}  # fmt: skip
        return SimpleNamespace(name=name, checks=checks, deterministic=True)

    def entries(work):
        def make(n):
            return lambda ctx: Timed(lambda: sum(range(n)), note=f"{n} iterations")

        def broken(ctx):
            raise Missing("RuntimeError: torch.compile is not available here")

        return [Entry(f"train_{work.name}_{v}", v.replace("_", " "), "launchpad" if v == "record" else "peer", make(n))
                for v, n in spins.items()] + [Entry(f"train_{work.name}_compile_forward", "compile forward", "peer",
                                                    broken)]  # fmt: skip

    return workload, entries


def test_measure_training_and_its_tables(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    workload, entries = _fake_training({"eager": 3000, "torch_graph": 300, "record": 100, "compile_step": 600},
                                       fail_model="transformer")  # fmt: skip
    lines: list[str] = []
    out = training.measure_training(3, 4, lines.append, workload=workload, entries=entries)
    assert (out["rounds"], out["batch"], out["steps"], out["check_steps"]) == (3, 4, 20, training.CHECK_STEPS)
    mlp = out["models"]["mlp"]
    assert mlp["deterministic"] is True and set(mlp["results"]) == {f"train_mlp_{v}" for v in (
        "eager", "torch_graph", "record", "compile_step", "compile_forward")}  # fmt: skip
    graph = mlp["results"]["train_mlp_torch_graph"]
    assert graph["ratio"]["median"] == 1.0 and graph["e2e"]["ratio"]["median"] == 1.0 and graph["stats"]["n"] == 3
    assert mlp["results"]["train_mlp_record"]["check"]["bit_identical_to_torch_graph"] is True
    assert out["models"]["transformer"] == {"description": training.MODELS["transformer"],
                                            "error": "OutOfMemoryError: CUDA out of memory."}  # fmt: skip
    assert any("check: = eager, bit for bit; = torch graph, bit for bit" in line for line in lines)
    text = "\n\n".join(training.training_tables(out, "", report.format_table))
    assert "A training step: mlp" in text and "Not measured: OutOfMemoryError: CUDA out of memory." in text
    rows = {line.split("  ")[0]: line for line in text.splitlines()}
    assert rows["torch graph"].split()[-2:] == ["1.00x", "1.00x"]  # host and wall x graph; no check faked for it
    assert "3.1e-07 from eager" in rows["compile step"]
    assert rows["compile forward"].endswith("missing: RuntimeError: torch.compile is not available here")
    assert "x graph: the figure's ratio to torch's CUDAGraph after copy_" in text
    assert "eager run twice: bit-identical (the step is deterministic)" in text
    md = training.training_tables(out, "### ", report.markdown_table)[0]
    assert md.startswith("### A training step: mlp") and "| variant | host us/step | wall us/step |" in md
    assert training.training_tables({"error": "KeyError: 'x'"}, "", report.format_table) == [
        "A training step\n\nnot measured: KeyError: 'x'"]  # fmt: skip


def test_the_sequence_section_runs_the_training_step_last(fake_gpu_bench, monkeypatch, tmp_path):
    """``--only sequence`` runs and renders the training tables; a training part that fails leaves
    the section's other figures."""
    monkeypatch.setattr(sequence_section, "sequence_entries", lambda: _fake_entries({"c_floor": 50, "seq_new_20": 5}))
    monkeypatch.setattr(sequence_section, "decode_entries", lambda: [])
    monkeypatch.setattr(sequence_section, "measure_sizes", lambda log: {})
    monkeypatch.setattr(sequence_section, "measure_training", sequence_section.training_here)  # not a process apart
    monkeypatch.setattr(sequence_section, "measure_models", lambda rounds, batch, log: {"missing": "no transformers"})
    workload, entries = _fake_training({"eager": 300, "torch_graph": 30, "record": 10})
    monkeypatch.setattr(training, "Workload", workload)
    monkeypatch.setattr(training, "training_entries", entries)
    assert runner.run(quick=True, out=tmp_path, only=["sequence"], log=lambda _: None) == 0
    report_ = json.loads((tmp_path / "latest.json").read_text())
    assert report_["sections"] == ["sequence"]
    models = report_["sequence"]["training"]["models"]
    assert set(models) == set(training.MODELS) and models["mlp"]["results"]["train_mlp_record"]["status"] == "ok"
    md = (tmp_path / "latest.md").read_text()
    assert (
        "### Recorded sequences" in md and "### A training step: mlp" in md and "### A training step: transformer" in md
    )
    assert md.index("### A training step: mlp") > md.index("### Recorded sequences")
    assert md.index("### Real models\n\nmissing: no transformers") > md.index("### A training step: transformer")

    def broken(*args, **kwargs):
        raise RuntimeError("no training today")

    monkeypatch.setattr(training, "measure_training", broken)
    assert runner.run(quick=True, out=tmp_path, only=["sequence"], log=lambda _: None) == 0
    seq = json.loads((tmp_path / "latest.json").read_text())["sequence"]
    assert (
        seq["training"] == {"error": "RuntimeError: no training today"} and seq["results"]["c_floor"]["status"] == "ok"
    )
    assert (
        "### A training step\n\nnot measured: RuntimeError: no training today" in (tmp_path / "latest.md").read_text()
    )


# --- launchers without a GPU: sources, the C floor, argument mapping ----------------------------------


@pytest.mark.parametrize("k", [1, 4, 32])
def test_generated_cpp_sweep_kernels_have_k_pointers_and_n(k):
    kernel = launchpad.compile_cuda(context.sweep_cpp_source(k), f"ptrs{k}", arch=90)
    assert [p.size for p in kernel.params] == [8] * k + [4]


def test_generated_triton_sweep_kernel_compiles(tmp_path, monkeypatch):
    pytest.importorskip("triton")
    import importlib.util

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton_abi import SCRATCH_WORDS

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    path = tmp_path / "lp_bench_sweep_test4.py"
    path.write_text(context.sweep_triton_source(4))
    spec = importlib.util.spec_from_file_location("lp_bench_sweep_test4", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    signature = {**{f"p{j}": "*fp32" for j in range(4)}, "n": "i32", "BLOCK": "constexpr"}
    compiled = triton.compile(ASTSource(module.ptrs4, signature, {"BLOCK": 128}), target=GPUTarget("cuda", 90, 32))
    # the 4 pointers and n, then Triton's scratch pointers
    assert [p.size for p in launchpad.load_cubin(compiled.asm["cubin"], compiled.metadata.name).params] == [8] * 4 + [
        4
    ] + [8] * len(SCRATCH_WORDS)


def test_user_args_follow_the_kernels_argument_list():
    with_constexpr = SimpleNamespace(args=[Arg("x", path=(0,), param=0), Arg("n", path=(1,), param=1),
                                           Arg("BLOCK", "const", (2,), value=64)])  # fmt: skip
    without = SimpleNamespace(args=[Arg("x", path=(0,), param=0), Arg("n", path=(1,), param=1)])
    assert context.user_args(with_constexpr, ("x", 5, 64), 1) == ("x", 5, 64)
    assert context.user_args(without, ("x", 5, 64), 1) == ("x", 5)
    with pytest.raises(Missing, match="takes 2 arguments; expected 4 or 3"):
        context.user_args(without, ("x", "y", 5, 64), 1)


def test_user_args_of_a_real_triton_kernel():
    pytest.importorskip("triton")
    from launchpad.bench import _triton_kernels

    try:
        k = launchpad.from_triton(_triton_kernels.double_it, signature="*fp32, *fp32, i32", constexprs={"BLOCK": 1024},
                                  target=90)  # fmt: skip
    except NotImplementedError:
        pytest.skip("launchpad.from_triton is not written yet")
    assert context.user_args(k, ("x", "y", 1024, 1024), 1) in (("x", "y", 1024, 1024), ("x", "y", 1024))


_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)  # fmt: skip


class RecordingDriver:
    """A ``cuLaunchKernel`` stand-in the C loop calls through its address; fails from launch ``fail_at``."""

    def __init__(self, fail_at: int = 0, error: int = 0):
        self.calls: list[tuple] = []
        self.fail_at, self.error = fail_at, error

        def launch(f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
            p = [ctypes.cast(params[i], ctypes.POINTER(t)).contents.value for i, t in
                 enumerate((ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32))]  # fmt: skip
            self.calls.append((f, (gx, gy, gz), (bx, by, bz), smem, stream, tuple(p), extra))
            return self.error if self.fail_at and len(self.calls) >= self.fail_at else 0

        self.fn = _LAUNCH(launch)
        self.address = ctypes.cast(self.fn, ctypes.c_void_p).value


def _floor_values():
    return [ctypes.c_uint64(0x7F0000001000), ctypes.c_uint64(0x7F0000002000), ctypes.c_int32(1024)]


@pytest.mark.skipif(launchpad.launch_path()[0] != "compiled", reason="the C floor is in the compiled module")
def test_c_floor_loop_passes_one_prepacked_launch(monkeypatch):
    from launchpad.core import driver as _driver

    drv = RecordingDriver()
    monkeypatch.setattr(_driver, "launch_entry_points", lambda: (drv.address, 0, 0))
    floor = context.CFloor(0)
    batch = floor.launcher(0x77, 3, 256, _floor_values(), 0x5000)
    batch(250)
    assert len(drv.calls) == 250
    assert set(drv.calls) == {(0x77, (3, 1, 1), (256, 1, 1), 0, 0x5000, (0x7F0000001000, 0x7F0000002000, 1024), None)}
    failing = RecordingDriver(fail_at=3, error=1)  # CUDA_ERROR_INVALID_VALUE at the third launch
    monkeypatch.setattr(_driver, "launch_entry_points", lambda: (failing.address, 0, 0))
    with pytest.raises(RuntimeError, match="cuLaunchKernel failed in the C loop: CUDA_ERROR_INVALID_VALUE"):
        context.CFloor(0).launcher(0x77, 1, 32, _floor_values(), 0)(10)
    assert len(failing.calls) == 3  # the loop stops at the first error


def test_the_breakdowns_dlpack_loop_reads_tensors_through_torchs_exchange_api():
    """What the breakdown times as torch's share of a tensor argument: torch.Tensor and Parameter are
    read (True), an object whose type has no DLPack C exchange API is not (False)."""
    from launchpad.launch import executor as _executor

    if _executor._claunch is None:
        pytest.skip("the compiled module is not built here")
    t = torch.randn(5, 3)
    assert _executor._claunch.dlpack_loop(t, 100) is True
    assert _executor._claunch.dlpack_loop(torch.nn.Parameter(t), 3) is True
    assert _executor._claunch.dlpack_loop(np.ones(3), 3) is False
    with pytest.raises(OverflowError):
        _executor._claunch.dlpack_loop(t, 1 << 70)


def test_c_floor_needs_the_compiled_module(monkeypatch):
    from launchpad.launch import executor as _executor

    monkeypatch.setattr(_executor, "_claunch", None)
    with pytest.raises(Missing, match="the C floor runs in launchpad's compiled module, which is unavailable"):
        context.CFloor(0)


# --- on a GPU: every launcher sets up, launches the right kernel, or is missing with a reason ---------


@pytest.mark.gpu
def test_every_launcher_sets_up_or_is_missing(tmp_path):
    ctx = context.Context(tmp_path, graph_kernels=10)
    ready, results = harness.set_up(launchers.LAUNCHERS, ctx, sync=torch.cuda.synchronize, log=lambda _: None)
    assert not [r for r in results.values() if r["status"] == "error"], results
    for key in ("c_floor", "lp_cpp", "lp_bound", "torch_mul", "cuda_graph", "cuda_core"):
        assert results[key]["status"] == "ok", results[key]
    samples, errors = harness.measure(ready, rounds=3, batch=20, warmup=5, sync=torch.cuda.synchronize)
    assert errors == {} and all(len(v) == 3 for v in samples.values())


@pytest.mark.gpu
def test_sweep_launchers_set_up(tmp_path):
    ctx = context.Context(tmp_path)
    _, results = harness.set_up(sweep.sweep_entries(4), ctx, sync=torch.cuda.synchronize, log=lambda _: None)
    assert not [r for r in results.values() if r["status"] == "error"], results
    assert results["c_floor"]["status"] == "ok" and results["lp_cpp"]["status"] == "ok"


def test_a_launchpad_launcher_whose_needs_are_absent_is_missing_and_a_failure_is_an_error():
    """cuTile not installed on the GPU machine: its launchpad launchers are missing, not errors (the
    device run of test_every_launcher_sets_up_or_is_missing); launchpad failing is an error."""

    def raising(exc):
        def factory(ctx):
            raise exc

        return factory

    entries = [Entry("lp_tile", "tile", "launchpad", raising(Missing("cuTile is not installed (no module)"))),
               Entry("lp_broken", "broken", "launchpad", raising(RuntimeError("bad launch")))]  # fmt: skip
    ready, results = harness.set_up(entries, None, log=lambda _: None)
    assert ready == []
    assert (results["lp_tile"]["status"], results["lp_tile"]["reason"]) == (
        "missing",
        "cuTile is not installed (no module)",
    )
    assert (results["lp_broken"]["status"], results["lp_broken"]["reason"]) == ("error", "RuntimeError: bad launch")


def test_the_breakdown_says_what_it_needs(monkeypatch, capsys):
    from launchpad.bench import breakdown
    from launchpad.launch import executor as _executor

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(_executor, "_claunch", None)
    assert breakdown.main() == 1
    assert "needs launchpad's compiled module" in capsys.readouterr().out
