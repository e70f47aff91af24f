"""Command line: ``python -m launchpad`` (or the ``launchpad`` console script).

Commands
--------
info
    Versions of launchpad and its peers, the CUDA driver, each device's limits, the cache.
demo
    Compile a templated saxpy with NVRTC; launch it and check it against torch when there is
    a GPU, otherwise print its parameter layout and why it was not launched.
bench
    The benchmarks (:mod:`launchpad.bench`): launch overhead against the installed peers, the
    argument-count sweep, compile, cache and import times.
inspect FILE
    Kernels of a cubin, fatbin, PTX or saved launchpad artifact: parameter layout, registers,
    static shared memory. Needs no GPU.
cache list | cache clear
    The disk cache of compiled binaries.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .reporting.environment import environment, file_size, gpu_status
from .reporting.format import format_table, human_bytes, layout_table

__all__ = ["main"]

DEMO_SOURCE = r"""
template <typename T>
__global__ void saxpy(T a, const T* __restrict__ x, T* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""
DEMO_NAME = "saxpy<float>"
DEMO_SIGNATURE = "fp32, *fp32, *fp32, i32"
DEMO_ARCH = "sm_90"  # what the demo compiles for when there is no GPU to ask
#: What a machine without a GPU can do, and what launching needs: said wherever a command cannot
#: launch, so a newcomer on a laptop learns the next step instead of a driver library's error.
WORKS_WITHOUT_GPU = (
    "compiling and inspecting kernels (as above; `python -m launchpad inspect FILE`),\n"
    "  and `python -m launchpad bench --only compile,import`"
)
LAUNCHING_NEEDS = "an NVIDIA GPU with its driver, and a CUDA build of torch"


# --- info ----------------------------------------------------------------------------------------


def _helion_note(version: str) -> str:
    """What launchpad.helion_kernel makes of the installed Helion."""
    from .errors import UnsupportedVersion
    from .frontends.helion.versions import check_installed, supported_text

    try:
        check_installed(version)
    except UnsupportedVersion:
        return f" (launchpad.helion_kernel refuses it: it follows helion {supported_text()})"
    return " (launchpad.helion_kernel)"


def cmd_info(args: argparse.Namespace) -> int:
    env = environment()
    env["no_fallback"] = os.environ.get("LAUNCHPAD_NO_FALLBACK", "") not in ("", "0")
    if args.json:
        print(json.dumps(env, indent=2))
        return 0
    print(f"launchpad {env['launchpad']}")
    others = [name for name in env["launchpad_installed_by"] if name != "launchpad-kernels"]
    if others:
        print(f"  warning: {', '.join(others)} also installed an import package 'launchpad' into this environment: "
              "the two overwrite each other's files; use one environment for each (docs/versions.md)")  # fmt: skip
    print(f"  python         {env['python']} ({env['python_executable']})")
    print(f"  platform       {env['platform']}")
    print(f"  cpu            {env['cpu']}")
    packages = env["packages"]
    for name, version in packages.items():
        extra = ""
        if name == "torch" and version is not None:
            extra = f" (CUDA {env['torch_cuda']})" if env["torch_cuda"] else " (no CUDA support in this build)"
        elif name == "helion" and version is not None:
            extra = _helion_note(version)
        print(f"  {name:<14} {version or 'not installed'}{extra}")
    for library, found in env["toolchain"].items():
        print(f"  {library:<14} {found['version'] or 'not found; ' + str(found['install'])}")
    print(f"  {'driver':<14} {'CUDA ' + env['driver'] if env['driver'] else 'none (no CUDA driver found)'}")
    path, why = env["launch_path"]
    print(f"launch path: {path}" + (f" ({why})" if why else ""))
    print(f"  tensor arguments: read {env['tensor_reads']}")
    strict = env["no_fallback"]
    print(f"  fallbacks to the Python executor: counted per kernel and sequence (Kernel.fallbacks, Sequence.fallbacks, "
          f"their repr); LAUNCHPAD_NO_FALLBACK={'set: one completed raises' if strict else 'unset: allowed'}")  # fmt: skip
    print()
    if env["devices"]:
        print(f"devices: {len(env['devices'])}")
        for d in env["devices"]:
            mem = f", {d['total_memory'] / 2**30:.1f} GiB" if "total_memory" in d else ""
            print(
                f"  cuda:{d['index']}  {d['name']}  {d['arch']} (compute capability {d['compute_capability']}), "
                f"{d['sms']} SMs{mem}"
            )
            print(
                f"          max threads/block {d['max_threads_per_block']}, shared memory/block "
                f"{human_bytes(d['max_shared_per_block'])} ({human_bytes(d['max_shared_per_block_optin'])} opt-in), "
                f"shared memory/SM {human_bytes(d['max_shared_per_sm'])}"
            )
    else:
        print("devices: none")
    if not env["gpu_available"]:
        print(f"no GPU: {env['no_gpu_reason']}; compiling and inspecting work, launching needs a GPU with its "
              "driver and a CUDA build of torch")  # fmt: skip
    cache = env["cache"]
    print()
    print(f"cache: {cache['dir']} ({cache['entries']} entries, {human_bytes(cache['bytes'])})")
    return 0


# --- demo ----------------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    import launchpad

    from .core import cache as _cache

    ok, reason = gpu_status()
    arch = None if ok else DEMO_ARCH
    before = len(_cache.entries())
    t0 = time.perf_counter()
    kernel = launchpad.compile_cuda(DEMO_SOURCE, DEMO_NAME, arch=arch, signature=DEMO_SIGNATURE)
    elapsed = time.perf_counter() - t0
    how = "compiled with NVRTC" if len(_cache.entries()) > before else "loaded from the disk cache"
    print(
        f"{kernel.display_name} for {kernel.metadata.get('arch', arch)}: {how} in {elapsed:.3f} s "
        f"({kernel.image_kind}, {len(kernel.image)} bytes)"
    )
    binary = kernel.binary
    print(f"  entry           {kernel.name}")
    if binary is not None:
        print(f"  registers       {binary.registers if binary.registers is not None else '?'}")
        print(f"  static shared   {binary.static_shared if binary.static_shared is not None else '?'} B")
    print("  parameter layout:")
    print(layout_table(kernel.params))
    if not ok:
        print(f"not launched: {reason}.\n  Works here: {WORKS_WITHOUT_GPU}.\n  Launching needs {LAUNCHING_NEEDS}.")
        return 0
    return _demo_launch(kernel, args.n)


def _demo_launch(kernel: Any, n: int) -> int:
    import torch

    device = torch.cuda.current_device()
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = 2.5
    x = torch.randn(n, device="cuda", generator=gen)
    y = torch.randn(n, device="cuda", generator=gen)
    expected = a * x + y
    block = 256
    kernel.launch((n + block - 1) // block, block, a, x, y, n)
    torch.cuda.synchronize()
    error = (y - expected).abs().max().item() if n else 0.0
    good = torch.allclose(y, expected, rtol=1e-5, atol=1e-5)
    where = f"cuda:{device} ({torch.cuda.get_device_name(device)})"
    print(f"launched {kernel.display_name} on {where}: y = {a} * x + y over {n} floats, max |error| {error:.3g}")
    print("OK: matches torch" if good else "MISMATCH: the result differs from torch")
    return 0 if good else 1


# --- inspect -------------------------------------------------------------------------------------


def cmd_inspect(args: argparse.Namespace) -> int:
    from .core.binary import kernels_in_image, read_image
    from .errors import LaunchpadError

    path = Path(args.file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        print(f"launchpad inspect: cannot read {str(path)!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if data.lstrip()[:1] == b"{":  # a saved artifact: the same parser (and digest check) as launchpad.load
        return _inspect_artifact(path)
    try:
        image, kind = read_image(data)
        kernels = kernels_in_image(image, kind)
    except LaunchpadError as exc:
        print(f"launchpad inspect: {str(path)!r}: {exc}", file=sys.stderr)
        return 2
    print(f"{path}: {kind}, {len(image)} bytes, {len(kernels)} kernel{'s' if len(kernels) != 1 else ''}")
    if not kernels:
        note = " (its entries may be compressed; the driver can still load it)" if kind == "fatbin" else ""
        print(f"  no kernel could be read{note}")
    for k in kernels.values():
        _print_binary_kernel(k)
    return 0


def _print_binary_kernel(k: Any, params: Sequence[Any] | None = None) -> None:
    print(f"kernel {k.name}")
    facts = []
    if k.arch:
        facts.append(f"arch {k.arch}")
    facts.append(f"registers {k.registers if k.registers is not None else '?'}")
    facts.append(f"static shared {str(k.static_shared) + ' B' if k.static_shared is not None else '?'}")
    facts.append(f"{len(k.params)} parameters")
    print("  " + ", ".join(facts))
    print(layout_table(params if params is not None else k.params))


def _inspect_artifact(path: Path) -> int:
    from .core import artifact as _artifact
    from .core.binary import kernels_in_image
    from .core.spec import LaunchPlan
    from .errors import LaunchpadError

    try:
        spec = _artifact.read(path)
    except LaunchpadError as exc:
        print(f"launchpad inspect: {exc}", file=sys.stderr)
        return 2
    print(f"{path}: launchpad kernel artifact, {spec.image_kind} image of {len(spec.image)} bytes")
    meta = spec.metadata
    print(f"kernel {spec.display_name}")
    print(f"  entry           {spec.name}")
    for key in ("frontend", "arch", "triton_version"):
        if key in meta:
            print(f"  {key:<15} {meta[key]}")
    try:
        binary = kernels_in_image(spec.image, spec.image_kind).get(spec.name)
    except LaunchpadError:  # the layout recorded in the artifact is still worth showing
        binary = None
    if binary is not None:
        print(f"  registers       {binary.registers if binary.registers is not None else '?'}")
        print(f"  static shared   {binary.static_shared if binary.static_shared is not None else '?'} B")
    defaults = LaunchPlan().to_json()
    plan = {k: v for k, v in spec.plan.to_json().items() if v != defaults.get(k)}
    if plan:
        print("  launch plan     " + ", ".join(f"{k}={v}" for k, v in plan.items()))
    print("  parameter layout:")
    print(layout_table(spec.params))
    if any(a.kind != "param" or len(a.path) != 1 for a in spec.args):
        print("  arguments:")
        for i, a in enumerate(spec.args):
            rest = {k: v for k, v in a.to_json().items() if k not in ("name", "kind")}
            print(f"    {i}: {a.name or '?'} ({a.kind}) {json.dumps(rest)}")
    return 0


# --- cache ---------------------------------------------------------------------------------------


def cmd_cache(args: argparse.Namespace) -> int:
    from .core import cache as _cache

    directory = _cache.cache_dir()
    found = _cache.entries()
    total = sum(file_size(p) for p in found)
    if args.action == "clear":
        removed = _cache.clear()
        print(f"removed {removed} entries ({human_bytes(total)}) from {directory}")
        return 0
    if not found:
        state = "empty" if directory.is_dir() else "does not exist yet"
        print(f"cache: {directory} ({state})")
        return 0
    print(f"cache: {directory}")
    rows = []
    for p in found:
        st = p.stat()
        rows.append(
            [p.stem[:16], human_bytes(st.st_size), time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.st_mtime))]
        )
    print(format_table(["key", "size", "modified"], rows, "lrl", "  "))
    print(f"total: {len(found)} entries, {human_bytes(total)}")
    return 0


# --- bench ---------------------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import runner

    only = [t for item in (args.only or []) for t in item.replace(",", " ").split()]
    return runner.run(
        quick=args.quick,
        out=args.out,
        only=only,
        load_inline=args.load_inline,
        rounds=args.rounds,
        batch=args.batch,
        argv=["launchpad", *args.raw_argv],
    )


# --- entry point ---------------------------------------------------------------------------------


def _count(text: str) -> int:
    """A count argument (``-n``, ``--rounds``, ``--batch``): a whole number of at least 1."""
    if not text.strip().isdecimal() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"takes a whole number of at least 1, not {text!r}")
    return int(text)


def _results_folder(text: str) -> Path:
    """``bench --out``: the folder latest.json, latest.md and latest.png are written in."""
    path = Path(text)
    if path.is_file() or (not path.exists() and path.suffix in (".json", ".md", ".png")):
        raise argparse.ArgumentTypeError(f"names a folder, not a file: latest.json, latest.md and latest.png are "
                                         f"written in it (say --out {path.with_suffix('')})")  # fmt: skip
    return path


def _bench_description(width: int = 80) -> str:
    """``bench --help``'s text: what it measures, section by section, and which sections need a GPU."""
    from .bench.runner import GPU_SECTIONS, SECTION_HELP

    no_gpu = [name for name in SECTION_HELP if name not in GPU_SECTIONS]
    return "\n\n".join([
        textwrap.fill("Measure what launching a kernel costs the host, for launchpad and for the installed peers, "
                      "and write latest.json, latest.md and latest.png (docs/benchmarks.md says how).", width),
        "sections (all by default; --only picks some):\n" + "\n".join(
            textwrap.fill(text, width, initial_indent=f"  {name:<10}", subsequent_indent=" " * 12)
            for name, text in SECTION_HELP.items()),
        textwrap.fill(f"The {', '.join(GPU_SECTIONS[:-1])} and {GPU_SECTIONS[-1]} sections run kernels: they need an "
                      f"NVIDIA GPU with its driver and a CUDA build of torch. {' and '.join(no_gpu)} need none: "
                      f"`python -m launchpad bench --only {','.join(no_gpu)}` runs them on any machine.", width),
    ])  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="launchpad", description="Launch CUDA kernels from Python with the lowest overhead Python can reach."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("info", help="versions, devices and their limits, the cache")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("demo", help="compile a templated saxpy; launch and check it when there is a GPU")
    p.add_argument("-n", type=_count, default=1 << 20, help="number of elements (default 1048576)")
    p.set_defaults(func=cmd_demo)

    from .bench.runner import SECTION_HELP

    p = sub.add_parser(
        "bench",
        help="measure launch overhead against the installed peers, compile and import times (needs a GPU, "
        "except --only compile,import)",
        description=_bench_description(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="fewer rounds and sweep points (under a minute)")
    p.add_argument("--out", type=_results_folder, default=None, help="the folder results go in (default: "
                   "./launchpad-bench; a checkout's recorded results are written only when asked, --out benchmarks/results)")  # fmt: skip
    p.add_argument(
        "--only",
        action="append",
        metavar="NAMES",
        help=f"comma-separated sections ({', '.join(SECTION_HELP)}), groups (cutile) and/or launcher names (globs allowed)",
    )
    p.add_argument("--load-inline", action="store_true", help="also time torch load_inline (slow: tens of seconds)")
    p.add_argument("--rounds", type=_count, default=None, help="override the number of timed batches per launcher")
    p.add_argument("--batch", type=_count, default=None, help="override the launches per timed batch")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("inspect", help="kernels, parameter layout, registers of a cubin/fatbin/PTX/artifact")
    p.add_argument("file", help="a .cubin, .fatbin, .ptx or a .json artifact written by Kernel.save")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("cache", help="list or clear the disk cache of compiled binaries")
    actions = p.add_subparsers(dest="action")
    actions.add_parser("list", help="each cached binary's key, size and when it was written (the default)")
    actions.add_parser("clear", help="delete every cached binary; kernels compile again at their next use")
    p.set_defaults(func=cmd_cache, action="list")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw)
    args.raw_argv = raw
    if args.command is None:
        parser.print_help()
        return 2
    from .errors import LaunchpadError

    try:
        return int(args.func(args))
    except LaunchpadError as exc:  # launchpad's own errors say what went wrong; no traceback needed
        print(f"launchpad {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"launchpad {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        sys.stdout.flush()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
