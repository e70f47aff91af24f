"""A pytest plugin that runs numba-cuda's own tests with every kernel launch routed through launchpad.

Loaded by ``run_numba.py`` (``-p numba_launchpad``) into a pytest run of numba-cuda's shipped
``numba.cuda.tests.cudapy`` modules. With ``LAUNCHPAD_CONFORMANCE=launchpad`` it replaces the
launch of every kernel Numba's dispatcher has compiled (``_Kernel.launch``): the kernel is
compiled again by :func:`launchpad.from_numba` for the same argument types and target options
(once per Numba kernel) and launched by launchpad with the test's own arguments, grid, block,
stream and shared memory. Where launchpad refuses a kernel or a launch (a ``LaunchpadError``
before any driver call) the refusal is recorded with its reason and the launch goes to Numba, so
the test goes on and the report lists it. With ``LAUNCHPAD_CONFORMANCE=dispatcher`` nothing is
replaced: that run is the reference.

Each process writes ``<mode>-<worker>.json`` into ``LAUNCHPAD_CONFORMANCE_OUT``: every test's
outcome (from the controlling process) and the launch counts and refusals (from every process).
"""

from __future__ import annotations

import collections
import json
import os
import threading
import traceback
from pathlib import Path
from typing import Any

import pytest

MODE = os.environ.get("LAUNCHPAD_CONFORMANCE", "dispatcher")
OUT = Path(os.environ.get("LAUNCHPAD_CONFORMANCE_OUT", "conformance-out"))

_outcomes: dict[str, dict[str, str]] = {}
_stats: collections.Counter = collections.Counter()
_refusals: list[dict[str, str]] = []
_local = threading.local()


def pytest_configure(config: Any) -> None:
    import numpy as np

    for marker in ("requires_cc_min(cc, feature)", "requires_cc_exact(cc, feature)"):
        config.addinivalue_line("markers", f"{marker}: skip below / off that compute capability")

    # numba-cuda 0.30 registers an overload of np.row_stack when its array module loads; NumPy 2.5
    # removed the alias, so its dispatcher fails without it, in both runs alike
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    if MODE == "launchpad":
        _route_launches()


# What numba-cuda's repository-level conftest.py (not shipped in its wheel) gives its tests.


@pytest.fixture(scope="class")
def initialize_from_pytest_config(request: Any) -> None:
    """The class fixture numba-cuda's ``CUDATestCase`` asks for: no FileCheck reproducer dumps."""
    request.cls._dump_failed_filechecks = False


def pytest_runtest_setup(item: Any) -> None:
    """numba-cuda's compute-capability markers: skip where the current GPU does not qualify."""
    markers = [(m, m.args) for name in ("requires_cc_min", "requires_cc_exact") for m in item.iter_markers(name)]
    if not markers:
        return
    from numba import cuda

    cc = cuda.get_current_device().compute_capability
    for marker, args in markers:
        wanted = tuple(args[0])
        if (cc < wanted) if marker.name == "requires_cc_min" else (cc != wanted):
            pytest.skip(f"{args[1] if len(args) > 1 else 'this'} needs compute capability {wanted}")


def _current_test() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]


def _refused(kind: str, kernel: Any, exc: Exception) -> None:
    _stats[f"refused at {kind}"] += 1
    _refusals.append({"test": _current_test(), "kernel": getattr(kernel.py_func, "__qualname__", "?"),
                      "when": kind, "reason": str(exc)})  # fmt: skip


def _route_launches() -> None:
    """Launch every kernel Numba's dispatcher made through launchpad instead (see the module docs)."""
    from numba.cuda import dispatcher as nd

    import launchpad

    original_call = nd.CUDADispatcher.call
    original_launch = nd._Kernel.launch

    def call(self: Any, args: Any, launch_config: Any) -> Any:
        outer = getattr(_local, "dispatcher", None)
        _local.dispatcher = self  # the target options of the kernel this call launches
        try:
            return original_call(self, args, launch_config)
        finally:
            _local.dispatcher = outer

    def launch(self: Any, args: Any, griddim: Any, blockdim: Any, stream: Any = 0, sharedmem: Any = 0) -> Any:
        _stats["launches"] += 1
        kernel = self.__dict__.get("_launchpad")
        if kernel is None:
            dispatcher = getattr(_local, "dispatcher", None)
            try:
                kernel = launchpad.from_numba(dispatcher if dispatcher is not None else self.py_func,
                                              tuple(self.argument_types))  # fmt: skip
                _stats["kernels"] += 1
            except launchpad.LaunchpadError as exc:
                kernel = exc
            self.__dict__["_launchpad"] = kernel
        if isinstance(kernel, Exception):
            _refused("compile", self, kernel)
            return original_launch(self, args, griddim, blockdim, stream, sharedmem)
        handle = 0 if not stream else stream  # 0: the legacy default stream, as Numba's 0 is
        try:
            kernel[griddim, blockdim, handle, sharedmem](*args)
        except launchpad.LaunchpadError as exc:
            if isinstance(exc, launchpad.CudaError):  # the driver refused a launch: a real difference
                raise
            _refused("launch", self, exc)
            return original_launch(self, args, griddim, blockdim, stream, sharedmem)
        _stats["through launchpad"] += 1
        return None

    nd.CUDADispatcher.call = call
    nd._Kernel.launch = launch


def pytest_runtest_logreport(report: Any) -> None:
    entry = _outcomes.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.skipped and entry["outcome"] == "passed" and report.when in ("setup", "call"):
        entry["outcome"] = "skipped"
    elif report.failed:
        entry["outcome"] = "failed" if report.when == "call" else "error"
        if not entry["message"]:
            text = str(report.longrepr) if report.longrepr is not None else ""
            lines = [line for line in text.splitlines() if line.startswith("E ")]
            entry["message"] = (lines[-1] if lines else text.splitlines()[-1] if text else "")[:300]


def pytest_sessionfinish(session: Any) -> None:
    worker = getattr(session.config, "workerinput", {}).get("workerid", "main")
    OUT.mkdir(parents=True, exist_ok=True)
    record = {
        "mode": MODE,
        "worker": worker,
        "outcomes": _outcomes if worker == "main" else {},  # the controller sees every worker's reports
        "stats": dict(_stats),
        "refusals": _refusals,
    }
    try:
        (OUT / f"{MODE}-{worker}.json").write_text(json.dumps(record, indent=1))
    except OSError:
        traceback.print_exc()
