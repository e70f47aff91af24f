"""What a bare install says: without NVRTC or nvJitLink (``pip install -e .`` on torch's CPU
wheel brings neither), compiling and linking fail naming the extra that fits the installed
cuda-bindings, as the exact pip command, and ``launchpad info`` lists both libraries with their
versions or that command.

The subprocess tests hide the two libraries from cuda.pathfinder (where cuda.bindings loads them
from) before anything loads them: cuda.core and cuda.bindings then fail as they do where the
libraries are not installed, and launchpad's words are checked on that real failure.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import launchpad
from launchpad import cli
from launchpad.core import driver as _driver
from launchpad.core import toolchain as _toolchain
from launchpad.reporting import environment as _environment

ROOT = Path(__file__).resolve().parents[1]
MAJOR = _driver.bindings_version().split(".")[0]
EXTRA = f"cu{MAJOR}" if MAJOR in ("12", "13") else "cu13"
HINT = (f'pip install "cuda-toolkit[nvrtc,nvjitlink,nvfatbin,cccl,cudart]=={EXTRA[2:]}.*" (NVRTC, nvJitLink and the '
        f"CUDA {EXTRA[2:]} headers, for the installed cuda-bindings {_driver.bindings_version()}: what the {EXTRA} extra of launchpad-kernels "
        f"brings), or install a CUDA {EXTRA[2:]} toolkit")  # fmt: skip

HIDE = """
import cuda.pathfinder as pathfinder

found = pathfinder.load_nvidia_dynamic_lib


def hidden(libname):
    if libname in ("nvrtc", "nvJitLink"):
        raise pathfinder.DynamicLibNotFoundError(f'Failure finding "lib{libname}.so": not installed')
    return found(libname)


pathfinder.load_nvidia_dynamic_lib = hidden
"""

PTX = """.version 8.0
.target sm_90
.address_size 64
.visible .entry axpy(.param .u32 axpy_param_0)
{
\tret;
}
"""


def python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, LAUNCHPAD_CACHE_DIR=str(tmp_path / "cache"))  # an empty cache: nothing compiled yet
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", HIDE + textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)  # fmt: skip


def test_compiling_without_nvrtc_names_the_extra(tmp_path):
    done = python("""
        import launchpad as lp
        try:
            lp.compile_cuda('extern "C" __global__ void k(int* p) { p[0] = 1; }', "k", arch="sm_90")
        except lp.CompileError as exc:
            print(str(exc).splitlines()[0])
            print("log:", exc.log)
    """, tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, log = done.stdout.splitlines()[:2]
    assert first == f"NVRTC could not compile kernel 'k' for sm_90: NVRTC is not installed: {HINT}"
    assert 'Failure finding "libnvrtc.so": not installed' in log  # what cuda.core said, kept as the log


def test_linking_without_nvjitlink_names_the_extra(tmp_path):
    done = python(f"""
        import warnings
        import launchpad as lp
        warnings.simplefilter("ignore")  # cuda.core's own warning that it falls back to the driver's linker
        try:
            lp.link([{PTX!r}.encode()], "axpy", arch="sm_90")
        except lp.CompileError as exc:
            print(str(exc).splitlines()[0])
    """, tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        f"nvJitLink could not link kernel 'axpy' (linked for sm_90): nvJitLink is not installed: {HINT}"
    )


def test_the_demo_and_info_of_a_bare_install(tmp_path):
    done = python("""
        import sys
        from launchpad.cli import main
        print("demo exit", main(["demo"]))
        print("info exit", main(["info"]))
    """, tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "launchpad demo: CompileError: NVRTC could not compile kernel 'saxpy<float>' for sm_" in done.stderr
    assert f"NVRTC is not installed: {HINT}" in done.stderr
    assert "demo exit 1" in done.stdout and "info exit 0" in done.stdout
    for library in ("NVRTC", "nvJitLink"):
        assert f"\n  {library:<14} not found; {HINT}\n" in done.stdout


def test_info_lists_nvrtc_and_nvjitlink_with_their_versions(capsys):
    versions = {library: _toolchain.library_version(library) for library in _toolchain.LIBRARIES}
    assert all(v and re.fullmatch(r"\d+\.\d+", v) for v in versions.values()), versions  # installed here
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    for library, version in versions.items():
        assert f"\n  {library:<14} {version}\n" in out
    assert _environment.environment()["toolchain"] == {k: {"version": v, "install": None} for k, v in versions.items()}


@pytest.mark.parametrize(("bindings", "extra"), [("12.9.2", "cu12"), ("13.0.1", "cu13"), ("13.5.0", "cu13")])
def test_the_extra_fits_the_installed_bindings(monkeypatch, bindings, extra):
    monkeypatch.setattr(_driver, "bindings_version", lambda: bindings)
    hint = _toolchain.install_hint()
    cuda = extra[2:]
    assert hint.startswith(f'pip install "cuda-toolkit[nvrtc,nvjitlink,nvfatbin,cccl,cudart]=={cuda}.*" (')
    assert f"cuda-bindings {bindings}: what the {extra} extra of launchpad-kernels brings" in hint
    assert hint.endswith(f"or install a CUDA {cuda} toolkit")


def test_the_hint_installs_what_the_extras_do():
    """The hint names the packages themselves (the distribution is not published yet, and a
    clone's editable install must stay); they are the extras' own, as pyproject.toml lists them."""
    try:  # the installed distribution's requirements (a wheel installed outside the source tree too)
        requires = importlib.metadata.requires("launchpad-kernels") or []
    except importlib.metadata.PackageNotFoundError:  # a source tree on PYTHONPATH: its pyproject.toml
        if not (ROOT / "pyproject.toml").is_file():
            pytest.skip("launchpad is neither installed nor beside its pyproject.toml")
        pyproject = (ROOT / "pyproject.toml").read_text()
        requires = [f"{r}; extra == 'cu{cuda}'" for cuda in ("12", "13")
                    for r in re.findall(r'"([^"]+)"', re.search(rf"^cu{cuda} = \[(.*)\]$", pyproject, re.M).group(1))]  # fmt: skip

    def normal(requirement: str) -> tuple:  # name, extras in any order, version
        name, extras, version = re.fullmatch(r"\s*([\w.-]+)\s*(?:\[([^\]]*)\])?\s*(.*?)\s*", requirement).groups()
        return name, sorted(e.strip() for e in (extras or "").split(",") if e.strip()), version.replace(" ", "")

    for cuda in ("12", "13"):
        wanted = normal(f"{_toolchain.TOOLKIT_WHEELS}=={cuda}.*")
        extra = [normal(r.split(";")[0]) for r in requires if re.search(rf"extra\s*==\s*['\"]cu{cuda}['\"]", r)]
        assert wanted in extra, (cuda, extra)


def test_info_warns_of_another_import_package_launchpad(monkeypatch, capsys):
    """dm-launchpad (and PyPI's project named launchpad) install a package ``launchpad`` too."""
    owners = _environment.import_package_owners()
    if not owners:
        pytest.skip("launchpad is imported from a source tree on PYTHONPATH, not installed")
    assert owners[0] == "launchpad-kernels"  # this one, installed
    monkeypatch.setattr(_environment, "import_package_owners", lambda: ["launchpad-kernels", "dm-launchpad"])
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"launchpad {launchpad.__version__}\n  warning: dm-launchpad also installed an import "
                          "package 'launchpad' into this environment")  # fmt: skip
