"""numba-cuda's own test suite as launchpad's conformance test (GPU only, opt in).

Runs numba-cuda's shipped ``numba.cuda.tests.cudapy`` modules twice with pytest: once as they are
(Numba's dispatcher launches every kernel: the reference), once with every launch routed through
:func:`launchpad.from_numba` (the ``numba_launchpad`` plugin beside this file). Then it compares
the outcome of every test, counts the launches that went through launchpad, and lists every
launch launchpad refused, by reason. It exits 1 if any test's outcome differs.

    PYTHONPATH=. python3 tests/conformance/run_numba.py            # the default modules
    PYTHONPATH=. python3 tests/conformance/run_numba.py test_record_dtype test_atomics -n 8

``--out DIR`` keeps each run's raw results and writes ``report.md`` and ``report.json`` there.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: The modules run by default: those whose kernels take data and launch (arrays, records,
#: scalars, atomics, warp and cooperative-group operations, streams, the classic examples).
#: Left out: compile-only tests (typing, IR, debug info, caching), the simulator's, tests of
#: dispatcher internals that launch nothing, and multi-GPU or IPC tests.
MODULES = (
    "test_alignment", "test_array", "test_array_args", "test_array_methods", "test_atomics", "test_blackscholes",
    "test_boolean", "test_casting", "test_complex", "test_complex_kernel", "test_constmem", "test_cooperative_groups",
    "test_cuda_array_interface", "test_device_array_capture", "test_device_func", "test_enums", "test_exception",
    "test_forall", "test_freevar", "test_frexp_ldexp", "test_globals", "test_idiv", "test_intrinsics",
    "test_iterators", "test_lang", "test_laplace", "test_localmem", "test_mandel", "test_math", "test_matmul",
    "test_minmax", "test_montecarlo", "test_operator", "test_powi", "test_py2_div_issue", "test_random",
    "test_record_dtype", "test_reduction", "test_retrieve_autoconverted_arrays", "test_slicing", "test_sm",
    "test_sm_creation", "test_stream_api", "test_sync", "test_transpose", "test_vector_type", "test_warp_ops",
    "test_bfloat16", "test_userexc",
)  # fmt: skip
MODES = ("dispatcher", "launchpad")

#: Tests whose outcome differs by design, and why: each asserts how Numba does something rather
#: than what comes of it. Listed apart in the report; any other difference fails the run.
BY_DESIGN = {
    "test_cuda_array_interface.py::TestCudaArrayInterface::test_launch_sync": (
        "asserts that Numba synchronizes the host with the stream a __cuda_array_interface__ names "
        "(a mocked Stream.synchronize); launchpad orders the launch after that stream's work with an event, "
        "as CAI v3 allows, without blocking the host: the kernel reads the same data"
    ),
    "test_cuda_array_interface.py::TestCudaArrayInterface::test_launch_sync_two_streams": (
        "the same, for two arrays on two streams"
    ),
}


def run(mode: str, modules: list[str], out: Path, workers: int, timeout: float) -> int:
    """One pytest run of the modules in ``mode``; its results land in ``out``."""
    env = dict(os.environ, LAUNCHPAD_CONFORMANCE=mode, LAUNCHPAD_CONFORMANCE_OUT=str(out / "raw"))
    # absolute: pytest runs in ``out``, where a relative entry (PYTHONPATH=.) would point elsewhere
    paths = [str(HERE), *(str(Path(p).resolve()) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "numba_launchpad", "-p", "no:cacheprovider",
               "--rootdir", str(out), "-o", "addopts=", *shims(modules, out)]  # fmt: skip
    if workers > 1:
        command += ["-n", str(workers)]
    print(f"== {mode}: {' '.join(command[3:8])} ... ({len(modules)} modules)", flush=True)
    with (out / f"{mode}.log").open("w") as log:
        done = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout, cwd=out)
    print((out / f"{mode}.log").read_text().strip().splitlines()[-1] if (out / f"{mode}.log").stat().st_size else "")
    return done.returncode


def shims(modules: list[str], out: Path) -> list[str]:
    """One file per module that imports its tests, for pytest to collect: numba-cuda's test files
    live under ``numba_cuda/numba/cuda`` (``numba.cuda`` only through an import redirector), so
    pytest importing them by their path would name them ``cuda.tests...`` and fail."""
    folder = out / "shims"
    folder.mkdir(exist_ok=True)
    paths = []
    for module in modules:
        path = folder / f"{module}.py"
        path.write_text(f"from numba.cuda.tests.cudapy.{module} import *  # noqa: F403\n")
        paths.append(str(path))
    return paths


def merged(out: Path, mode: str) -> dict[str, Any]:
    """The outcomes, launch counts and refusals of every process of one run."""
    result: dict[str, Any] = {"outcomes": {}, "stats": collections.Counter(), "refusals": []}
    for path in sorted((out / "raw").glob(f"{mode}-*.json")):
        record = json.loads(path.read_text())
        result["outcomes"].update(record["outcomes"])
        result["stats"].update(record["stats"])
        result["refusals"] += record["refusals"]
    return result


def compare(reference: dict[str, dict], routed: dict[str, dict]) -> dict[str, Any]:
    """Tests whose outcome differs between the runs (a test in one run only differs too), those
    listed in :data:`BY_DESIGN` apart."""
    differ, by_design = {}, {}
    for test in sorted(reference.keys() | routed.keys()):
        a, b = reference.get(test), routed.get(test)
        if a is None or b is None or a["outcome"] != b["outcome"]:
            why = next((reason for name, reason in BY_DESIGN.items() if test.endswith(name)), None)
            (by_design if why else differ)[test] = {"dispatcher": a, "launchpad": b, "why": why}
    counts = collections.Counter(o["outcome"] for o in reference.values())
    return {"tests": len(reference), "reference": dict(counts), "differ": differ, "by_design": by_design}


def report(comparison: dict[str, Any], routed: dict[str, Any]) -> str:
    """The comparison as markdown."""
    stats = routed["stats"]
    lines = [
        "# numba-cuda's tests through launchpad",
        "",
        f"- tests: {comparison['tests']} ({', '.join(f'{n} {k}' for k, n in sorted(comparison['reference'].items()))} "
        "under Numba's dispatcher)",
        f"- same outcome under launchpad: {comparison['tests'] - len(comparison['differ']) - len(comparison['by_design'])}"
        f"; different: {len(comparison['differ'])}; different by design: {len(comparison['by_design'])}",
        f"- kernel launches: {stats.get('launches', 0)}, through launchpad: {stats.get('through launchpad', 0)} "
        f"({stats.get('kernels', 0)} kernels compiled by launchpad.from_numba)",
        f"- refused by launchpad (then launched by Numba): {stats.get('refused at compile', 0)} at compile, "
        f"{stats.get('refused at launch', 0)} at launch",
    ]
    if comparison["differ"]:
        lines += ["", "## Tests whose outcome differs", "", "| test | dispatcher | launchpad |", "| --- | --- | --- |"]
        for test, pair in comparison["differ"].items():
            cells = [
                f"{o['outcome']}: {o['message']}" if o else "not run" for o in (pair["dispatcher"], pair["launchpad"])
            ]
            lines.append(f"| `{test}` | {cells[0].replace('|', '/')} | {cells[1].replace('|', '/')} |")
    if comparison["by_design"]:
        lines += [
            "",
            "## Tests whose outcome differs by design",
            "",
            "| test | launchpad | why |",
            "| --- | --- | --- |",
        ]
        for test, pair in comparison["by_design"].items():
            got = pair["launchpad"]["outcome"] if pair["launchpad"] else "not run"
            lines.append(f"| `{test}` | {got} | {pair['why']} |")
    by_reason = collections.defaultdict(list)
    for r in routed["refusals"]:
        by_reason[(r["when"], r["reason"])].append(r)
    if by_reason:
        lines += ["", "## Launches launchpad refused, by reason", "", "| refused at | launches | kernels | reason |",
                  "| --- | ---: | --- | --- |"]  # fmt: skip
        for (when, reason), rs in sorted(by_reason.items(), key=lambda kv: -len(kv[1])):
            kernels = ", ".join(sorted({r["kernel"] for r in rs}))[:120]
            lines.append(f"| {when} | {len(rs)} | {kernels} | {reason.replace('|', '/')[:400]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="cudapy test modules (default: the conformance set)")
    parser.add_argument("-n", "--workers", type=int, default=min(8, os.cpu_count() or 1), help="pytest-xdist workers")
    parser.add_argument("--out", type=Path, help="where to keep the raw results and the report")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds each run may take")
    args = parser.parse_args(argv)
    try:
        import xdist  # noqa: F401
    except ImportError:
        args.workers = 1
    out = args.out or Path(tempfile.mkdtemp(prefix="numba-conformance-"))
    out.mkdir(parents=True, exist_ok=True)
    for stale in (out / "raw").glob("*-*.json"):
        stale.unlink()
    for mode in MODES:
        try:
            run(mode, list(args.modules or MODULES), out, args.workers, args.timeout)
        except subprocess.TimeoutExpired:
            print(f"the {mode} run took more than {args.timeout:.0f} s and was stopped", file=sys.stderr)
            return 2
    reference, routed = merged(out, "dispatcher"), merged(out, "launchpad")
    comparison = compare(reference["outcomes"], routed["outcomes"])
    text = report(comparison, routed)
    (out / "report.md").write_text(text)
    (out / "report.json").write_text(json.dumps({**comparison, "stats": dict(routed["stats"]),
                                                 "refusals": routed["refusals"]}, indent=1))  # fmt: skip
    print(text)
    if not reference["outcomes"]:
        print("no test ran under Numba's dispatcher: is there a GPU and numba-cuda?", file=sys.stderr)
        return 2
    return 1 if comparison["differ"] else 0


if __name__ == "__main__":
    sys.exit(main())
