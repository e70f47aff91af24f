"""The Numba conformance harness (tests/conformance/), on CPU: the modules it names exist in the
installed numba-cuda, outcomes are merged and compared as it reports them, and a differing test or
a refused launch cannot go unreported. (The harness itself runs on a GPU machine.)"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "conformance"))
import numba_launchpad
import run_numba


def test_the_default_modules_are_numba_cudas():
    pytest.importorskip("numba.cuda")
    import numba.cuda.tests.cudapy as cudapy

    folder = Path(cudapy.__file__).parent
    missing = [m for m in run_numba.MODULES if not (folder / f"{m}.py").is_file()]
    assert not missing, f"not in numba-cuda's cudapy tests: {missing}"
    assert len(set(run_numba.MODULES)) == len(run_numba.MODULES) >= 40


def _report(nodeid: str, when: str, outcome: str, message: str = "") -> types.SimpleNamespace:
    return types.SimpleNamespace(nodeid=nodeid, when=when, skipped=outcome == "skipped",
                                 failed=outcome == "failed", longrepr=message or None)  # fmt: skip


def test_outcomes_are_recorded_per_test(monkeypatch, tmp_path):
    monkeypatch.setattr(numba_launchpad, "_outcomes", {})
    for phase in ("setup", "call", "teardown"):
        numba_launchpad.pytest_runtest_logreport(_report("a::ok", phase, "passed"))
    numba_launchpad.pytest_runtest_logreport(_report("a::skip", "setup", "skipped"))
    numba_launchpad.pytest_runtest_logreport(_report("a::bad", "setup", "passed"))
    numba_launchpad.pytest_runtest_logreport(_report("a::bad", "call", "failed", "trace\nE   AssertionError: 1 != 2"))
    numba_launchpad.pytest_runtest_logreport(_report("a::err", "setup", "failed", "E   RuntimeError: no"))
    assert numba_launchpad._outcomes == {
        "a::ok": {"outcome": "passed", "message": ""},
        "a::skip": {"outcome": "skipped", "message": ""},
        "a::bad": {"outcome": "failed", "message": "E   AssertionError: 1 != 2"},
        "a::err": {"outcome": "error", "message": "E   RuntimeError: no"},
    }
    monkeypatch.setattr(numba_launchpad, "OUT", tmp_path)
    monkeypatch.setattr(numba_launchpad, "MODE", "launchpad")
    monkeypatch.setattr(numba_launchpad, "_stats", {"launches": 3, "through launchpad": 2, "refused at launch": 1})
    numba_launchpad.pytest_sessionfinish(types.SimpleNamespace(config=types.SimpleNamespace()))
    saved = json.loads((tmp_path / "launchpad-main.json").read_text())
    assert saved["outcomes"]["a::bad"]["outcome"] == "failed" and saved["stats"]["launches"] == 3


def test_a_differing_outcome_and_every_refusal_are_reported(tmp_path):
    for mode, outcomes, stats, refusals in (
        ("dispatcher", {"t::a": "passed", "t::b": "passed", "t::c": "skipped"}, {}, []),
        ("launchpad", {"t::a": "passed", "t::b": "failed"}, {"launches": 5, "through launchpad": 4, "kernels": 2,
                                                           "refused at launch": 1},
         [{"test": "t::a", "kernel": "k", "when": "launch", "reason": "kernel 'k', argument 0: bad"}]),
    ):  # fmt: skip
        record = {"outcomes": {t: {"outcome": o, "message": "E x" if o == "failed" else ""} for t, o in outcomes.items()},
                  "stats": stats, "refusals": refusals}  # fmt: skip
        (tmp_path / "raw").mkdir(exist_ok=True)
        (tmp_path / "raw" / f"{mode}-main.json").write_text(json.dumps(record))
    reference, routed = run_numba.merged(tmp_path, "dispatcher"), run_numba.merged(tmp_path, "launchpad")
    comparison = run_numba.compare(reference["outcomes"], routed["outcomes"])
    assert sorted(comparison["differ"]) == ["t::b", "t::c"] and comparison["tests"] == 3
    text = run_numba.report(comparison, routed)
    assert "different: 2;" in text and "| `t::b` | passed:  | failed: E x |" in text
    assert "| `t::c` | skipped:  | not run |" in text
    assert "kernel launches: 5, through launchpad: 4" in text
    assert "| launch | 1 | k | kernel 'k', argument 0: bad |" in text


def test_differences_by_design_are_reported_apart_with_their_reason():
    name = next(iter(run_numba.BY_DESIGN))
    reference = {f"shims/{name}": {"outcome": "passed", "message": ""}, "shims/t.py::x": {"outcome": "passed",
                                                                                         "message": ""}}  # fmt: skip
    routed = {f"shims/{name}": {"outcome": "failed", "message": "E mock"}, "shims/t.py::x": {"outcome": "passed",
                                                                                           "message": ""}}  # fmt: skip
    comparison = run_numba.compare(reference, routed)
    assert comparison["differ"] == {} and list(comparison["by_design"]) == [f"shims/{name}"]
    text = run_numba.report(comparison, {"stats": {}, "refusals": []})
    assert "different: 0; different by design: 1" in text and run_numba.BY_DESIGN[name] in text
