"""``python -m launchpad``: info, demo, inspect, cache and bench, checked on their output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import launchpad
from launchpad import cli
from launchpad.reporting import format as _format
from launchpad.reporting.environment import gpu_status

HAS_GPU = torch.cuda.is_available()
ROOT = Path(__file__).resolve().parents[1]

SOURCE = r"""
template <typename T>
__global__ void scale(T* __restrict__ y, const T* __restrict__ x, T a, int n) {
    __shared__ T tile[64];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { tile[threadIdx.x % 64] = x[i]; y[i] = a * tile[threadIdx.x % 64]; }
}
"""

PTX = """
.version 8.0
.target sm_90
.address_size 64

.visible .entry axpy(
\t.param .f32 axpy_param_0,
\t.param .u64 .ptr .global .align 4 axpy_param_1,
\t.param .u32 axpy_param_2
)
{
\tret;
}
"""


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m launchpad ARGS`` from the repository root, as a user would run it."""
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "launchpad", *args], capture_output=True, text=True, cwd=ROOT,
                          env=full_env, timeout=300)  # fmt: skip


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache directory of this test alone (subprocesses inherit it)."""
    d = tmp_path / "lpcache"
    monkeypatch.setenv("LAUNCHPAD_CACHE_DIR", str(d))
    return d


# --- info ----------------------------------------------------------------------------------------


def test_info(cache):
    proc = run_cli("info")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith(f"launchpad {launchpad.__version__}\n")
    for name in ("python", "torch", "triton", "numba-cuda", "cuda-core", "cuda-bindings", "driver"):
        assert f"\n  {name} " in out, name
    assert f"  torch          {torch.__version__.split('+')[0]}" in out  # the package version, without the local tag
    assert f"cache: {cache} (0 entries, 0 B)" in out
    path, why = launchpad.launch_path()
    assert ("\nlaunch path: compiled\n" if path == "compiled" else f"\nlaunch path: python ({why})\n") in out
    forced = run_cli("info", env={"LAUNCHPAD_PYTHON_LAUNCH": "1"}).stdout
    assert "\nlaunch path: python (LAUNCHPAD_PYTHON_LAUNCH is set)\n" in forced
    if HAS_GPU:
        assert f"devices: {torch.cuda.device_count()}" in out
        major, minor = torch.cuda.get_device_capability(0)
        assert f"cuda:0  {torch.cuda.get_device_name(0)}  sm_{major}{minor}" in out
        assert "max threads/block 1024" in out and "opt-in" in out
    else:
        assert "devices: none" in out
        assert "no GPU: " in out and "launching needs a GPU" in out


def test_info_json(capsys, cache):
    assert cli.main(["info", "--json"]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["launchpad"] == launchpad.__version__
    assert env["packages"]["torch"] is not None and "cuda-bindings" in env["packages"]
    assert env["cache"] == {"dir": str(cache), "entries": 0, "bytes": 0}
    assert env["gpu_available"] == HAS_GPU and (env["no_gpu_reason"] == "") == HAS_GPU
    assert len(env["devices"]) == (torch.cuda.device_count() if HAS_GPU else 0)


# --- demo ----------------------------------------------------------------------------------------


def test_demo(cache):
    proc = run_cli("demo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "saxpy<float> for sm_" in out and "compiled with NVRTC in" in out
    assert "entry           _Z5saxpyIfEvT_PKS0_PS0_i" in out
    # the parameter layout read from the cubin, typed by the signature
    rows = [line.split() for line in out.splitlines() if line.startswith("    ")]
    assert rows[0] == ["index", "offset", "size", "align", "type", "name"] and set("".join(rows[1])) == {"-"}
    assert rows[2:6] == [["0", "0", "4", "4", "fp32", "a"], ["1", "8", "8", "8", "*fp32", "x"],
                         ["2", "16", "8", "8", "*fp32", "y"], ["3", "24", "4", "4", "i32", "n"]]  # fmt: skip
    if HAS_GPU:
        assert "OK: matches torch" in out
    else:
        assert "saxpy<float> for sm_90" in out
        ok, reason = gpu_status()
        assert not ok and out.endswith(NOT_LAUNCHED.format(reason=reason))
    again = run_cli("demo")  # the second run finds the cubin in the cache
    assert again.returncode == 0 and "loaded from the disk cache" in again.stdout


#: How the demo ends without a GPU: why (one clause), what works here, what launching needs.
NOT_LAUNCHED = """not launched: {reason}.
  Works here: compiling and inspecting kernels (as above; `python -m launchpad inspect FILE`),
  and `python -m launchpad bench --only compile,import`.
  Launching needs an NVIDIA GPU with its driver, and a CUDA build of torch.
"""


def test_demo_without_a_gpu_says_why_what_works_and_what_launching_needs(cache, capsys, monkeypatch):
    reason = "torch 2.13.0+cpu is a CPU-only build, and no NVIDIA driver was found"
    monkeypatch.setattr(cli, "gpu_status", lambda: (False, reason))
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "saxpy<float> for sm_90: compiled with NVRTC" in out
    assert out.endswith("    3      24     4      4  i32    n\n" + NOT_LAUNCHED.format(reason=reason))


def _no_driver(exc_text: str):
    def init():
        raise launchpad.NoDeviceError(exc_text)

    return init


def test_gpu_status_says_what_is_missing_in_one_clause_each(monkeypatch):
    """Why there is no GPU, in words to act on: never the driver bindings' own text, no brackets."""
    from launchpad.core import driver as _driver

    bindings_text = (f"{_driver.NO_DRIVER} (\"cuda\" is an NVIDIA driver library and can only be found via system "
                     "search. Ensure the NVIDIA display driver is installed.); launching needs one")  # fmt: skip
    monkeypatch.setattr(torch, "__version__", "2.13.0+cpu")
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(_driver, "init", _no_driver(bindings_text))
    assert gpu_status() == (False, "torch 2.13.0+cpu is a CPU-only build, and no NVIDIA driver was found")
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(_driver, "init", _no_driver("the CUDA driver reports no GPU; launching needs one"))
    assert gpu_status() == (False, "torch 2.11.0+cu130 sees no CUDA device, and the NVIDIA driver reports no GPU")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(_driver, "init", lambda: None)
    monkeypatch.setattr(_driver, "device_count", lambda: 0)
    assert gpu_status() == (False, "the NVIDIA driver reports no GPU")
    monkeypatch.setattr(_driver, "device_count", lambda: 1)
    assert gpu_status() == (True, "")


# --- inspect -------------------------------------------------------------------------------------


def _layout_rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.startswith("    ") and line.split()[0].isdigit()]


def test_inspect_cubin(tmp_path, capsys, cache):
    kernel = launchpad.compile_cuda(SOURCE, "scale<float>", arch=90)
    path = tmp_path / "scale.cubin"
    path.write_bytes(kernel.image)
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: cubin, {len(kernel.image)} bytes, 1 kernel\n")
    assert f"kernel {kernel.name}\n" in out
    binary = kernel.binary
    # the tile's 256 B plus sm_90's 1 KB system reservation, as `cuobjdump -res-usage` reports it
    assert binary.static_shared >= 256 and binary.registers > 0
    assert f"arch sm_90, registers {binary.registers}, static shared {binary.static_shared} B, 4 parameters" in out
    assert _layout_rows(out) == [["0", "0", "8", "8", "?"], ["1", "8", "8", "8", "?"],
                                 ["2", "16", "4", "4", "?"], ["3", "20", "4", "4", "?"]]  # fmt: skip


def test_inspect_artifact(tmp_path, capsys, cache):
    kernel = launchpad.compile_cuda(SOURCE, "scale<float>", arch=90, signature="*fp32, *fp32, fp32, i32")
    path = kernel.save(tmp_path / "scale.json")
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: launchpad kernel artifact, cubin image of {len(kernel.image)} bytes\n")
    assert "kernel scale<float>\n" in out and f"  entry           {kernel.name}\n" in out
    assert "  frontend        cpp\n" in out and "  arch            sm_90\n" in out
    assert f"  registers       {kernel.binary.registers}\n" in out
    assert f"  static shared   {kernel.binary.static_shared} B\n" in out
    assert _layout_rows(out) == [["0", "0", "8", "8", "*fp32", "y"], ["1", "8", "8", "8", "*fp32", "x"],
                                 ["2", "16", "4", "4", "fp32", "a"], ["3", "20", "4", "4", "i32", "n"]]  # fmt: skip
    assert "launch plan" not in out  # nothing but defaults


def test_inspect_ptx(tmp_path, capsys):
    path = tmp_path / "axpy.ptx"
    path.write_text(PTX)
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: ptx, ") and "1 kernel\n" in out
    assert "kernel axpy\n" in out and "registers ?" in out
    assert _layout_rows(out) == [["0", "0", "4", "4", "fp32"], ["1", "8", "8", "8", "?"], ["2", "16", "4", "4", "?"]]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build a fatbin")
def test_inspect_fatbin(tmp_path, capsys):
    (tmp_path / "twice.cu").write_text(
        'extern "C" __global__ void twice(float* x, int n) { if (threadIdx.x < n) x[threadIdx.x] *= 2; }'
    )
    for name, extra in (("plain", []), ("compressed", ["-Xfatbin", "-compress-all"])):
        out_path = tmp_path / f"{name}.fatbin"
        subprocess.run(["nvcc", "-fatbin", "-arch=sm_90", *extra, "-o", str(out_path), str(tmp_path / "twice.cu")],
                       check=True, capture_output=True)  # fmt: skip
        assert cli.main(["inspect", str(out_path)]) == 0
        out = capsys.readouterr().out
        if name == "plain":
            assert f"{out_path}: fatbin, " in out and "1 kernel\nkernel twice\n" in out
            assert "arch sm_90" in out and _layout_rows(out) == [["0", "0", "8", "8", "?"], ["1", "8", "4", "4", "?"]]
        else:  # compressed entries cannot be read without the driver: said, not an error
            assert "0 kernels" in out and "no kernel could be read (its entries may be compressed" in out


def test_inspect_errors(tmp_path, capsys):
    assert cli.main(["inspect", str(tmp_path / "absent.cubin")]) == 2
    assert "cannot read" in capsys.readouterr().err
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01 not a kernel image")
    assert cli.main(["inspect", str(junk)]) == 2
    assert "not a cubin, fatbin or PTX image" in capsys.readouterr().err
    other = tmp_path / "meta.json"
    other.write_text(json.dumps({"name": "kernel", "num_warps": 4}))
    assert cli.main(["inspect", str(other)]) == 2
    assert "not a launchpad kernel artifact" in capsys.readouterr().err


# --- cache ---------------------------------------------------------------------------------------


def test_cache_list_and_clear(cache, capsys):
    assert cli.main(["cache", "list"]) == 0
    assert capsys.readouterr().out == f"cache: {cache} (does not exist yet)\n"
    launchpad.compile_cuda(SOURCE, "scale<float>", arch=90)
    launchpad.compile_cuda(SOURCE, "scale<double>", arch=90)
    entries = sorted(cache.glob("*.lpc"))
    assert len(entries) == 2
    assert cli.main(["cache"]) == 0  # list is the default
    out = capsys.readouterr().out
    assert out.startswith(f"cache: {cache}\n")
    for e in entries:
        assert e.stem[:16] in out
    total = sum(e.stat().st_size for e in entries)
    assert out.rstrip().endswith(f"total: 2 entries, {_format.human_bytes(total)}")
    assert cli.main(["cache", "clear"]) == 0
    assert capsys.readouterr().out == f"removed 2 entries ({_format.human_bytes(total)}) from {cache}\n"
    assert not list(cache.glob("*.lpc"))
    assert cli.main(["cache", "list"]) == 0
    assert capsys.readouterr().out == f"cache: {cache} (empty)\n"


def test_cache_subprocess_uses_the_environment(cache):
    launchpad.compile_cuda(SOURCE, "scale<float>", arch=90)
    proc = run_cli("cache", "list")
    assert proc.returncode == 0 and f"cache: {cache}\n" in proc.stdout and "total: 1 entries" in proc.stdout


# --- bench and usage -----------------------------------------------------------------------------


@pytest.mark.skipif(HAS_GPU, reason="checks the message given without a GPU")
def test_bench_without_gpu_explains_and_exits(tmp_path):
    proc = run_cli("bench", "--quick", "--out", str(tmp_path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "launchpad bench: no GPU here (" in proc.stderr and "need a CUDA GPU" in proc.stderr
    assert "--only compile,import" in proc.stderr
    assert not list(tmp_path.iterdir())  # nothing written


def test_bench_help_says_what_it_measures_and_what_needs_a_gpu(capsys, monkeypatch):
    from launchpad.bench.runner import GPU_SECTIONS, SECTION_HELP

    monkeypatch.setenv("COLUMNS", "80")  # argparse's own lines follow the terminal's width

    with pytest.raises(SystemExit):
        cli.main(["bench", "--help"])
    out = capsys.readouterr().out
    text = " ".join(out.split())
    assert "Measure what launching a kernel costs the host, for launchpad and for the installed peers" in text
    for name, what in SECTION_HELP.items():  # each section, and what it measures
        assert f" {name} {' '.join(what.split())}" in text, name
    for words in ("launch overhead", "compile and load times", "`import launchpad`", "recorded sequences"):
        assert words in text
    assert ("The launch, sweep, sequence, helion and compiled sections run kernels: they need an NVIDIA GPU with its driver "
            "and a CUDA build of torch. compile and import need none: `python -m launchpad bench --only "
            "compile,import` runs them on any machine.") in text  # fmt: skip
    assert GPU_SECTIONS == ("launch", "sweep", "sequence", "helion", "compiled")
    assert max(len(line) for line in out.splitlines()) <= 80  # the description is laid out, not re-wrapped
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    top = " ".join(capsys.readouterr().out.split())
    assert ("bench measure launch overhead against the installed peers, compile and import times (needs a GPU, "
            "except --only compile,import)") in top  # fmt: skip


def test_cache_subcommands_have_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["cache", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "usage: launchpad cache [-h] {list,clear} ..." in text
    assert "list each cached binary's key, size and when it was written (the default)" in text
    assert "clear delete every cached binary; kernels compile again at their next use" in text
    with pytest.raises(SystemExit):
        cli.main(["cache", "purge"])
    assert "invalid choice: 'purge'" in capsys.readouterr().err


def test_bench_rejects_unknown_names(capsys):
    assert cli.main(["bench", "--only", "launch,no_such_launcher"]) == 2
    err = capsys.readouterr().err
    assert "unknown name in --only: no_such_launcher" in err and "lp_triton" in err


@pytest.mark.parametrize(
    "argv, option, given",
    [(["bench", "--rounds", "0"], "--rounds", "0"), (["bench", "--rounds", "-3"], "--rounds", "-3"),
     (["bench", "--batch", "2.5"], "--batch", "2.5"), (["demo", "-n", "-5"], "-n", "-5"),
     (["demo", "-n", "0"], "-n", "0"), (["demo", "-n", "lots"], "-n", "lots")],
)  # fmt: skip
def test_counts_must_be_whole_numbers_of_at_least_one(argv, option, given, capsys, monkeypatch):
    # before: --rounds 0 and -3 ran one round each (Config.make's max(1, ...)) and said nothing;
    # demo -n -5 reached torch.randn(-5) on a GPU
    from launchpad.bench import runner

    monkeypatch.setattr(runner, "run", lambda **kw: pytest.fail("bench ran"))
    monkeypatch.setattr(cli, "cmd_demo", lambda args: pytest.fail("demo ran"))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert f"error: argument {option}: takes a whole number of at least 1, not {given!r}" in capsys.readouterr().err


def test_bench_out_names_a_folder(tmp_path, capsys, monkeypatch):
    # before: --out x.json made a folder named x.json and wrote latest.* in it
    from launchpad.bench import runner

    ran = []
    monkeypatch.setattr(runner, "run", lambda **kw: ran.append(kw["out"]) or 0)
    for out in (tmp_path / "x.json", tmp_path / "report.md"):
        with pytest.raises(SystemExit):
            cli.main(["bench", "--out", str(out)])
        err = capsys.readouterr().err
        assert "error: argument --out: names a folder, not a file: latest.json, latest.md and latest.png" in err
        assert f"(say --out {out.with_suffix('')})" in err and not out.exists()
    existing = tmp_path / "notes"
    existing.write_text("mine")
    with pytest.raises(SystemExit):
        cli.main(["bench", "--out", str(existing)])
    assert "names a folder, not a file" in capsys.readouterr().err and existing.read_text() == "mine"
    assert cli.main(["bench", "--out", str(tmp_path / "run.1"), "--rounds", "3"]) == 0  # a folder's name may hold a dot
    assert ran == [tmp_path / "run.1"]


def test_no_command_prints_usage(capsys):
    assert cli.main([]) == 2
    assert "usage: launchpad" in capsys.readouterr().out


def test_launchpad_errors_become_messages(tmp_path, capsys, monkeypatch):
    def fail(args):
        raise launchpad.CompileError("NVRTC could not compile for sm_90", "error: oops")

    monkeypatch.setattr(cli, "cmd_demo", fail)
    parser_main = cli.main(["demo"])
    assert parser_main == 1
    assert capsys.readouterr().err == "launchpad demo: CompileError: NVRTC could not compile for sm_90\nerror: oops\n"
