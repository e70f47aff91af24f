"""The documentation's examples run: every ```python block of each page in docs/ and of the README,
in order, in one namespace per page (a page reads as one session). Blocks whose first line is
``# needs a GPU`` run only where there is one (the ``gpu`` test of the page); the others run
everywhere."""

from __future__ import annotations

import linecache
import re
import sys
import types
from pathlib import Path

import pytest
import torch

DOCS = Path(__file__).resolve().parents[1] / "docs"
README = DOCS.parent / "README.md"
PAGES = (sorted(DOCS.glob("*.md")) if DOCS.is_dir() else []) + ([README] if README.is_file() else [])
NEEDS = {
    "triton.md": "triton",
    "numba.md": "numba.cuda",
    "cutile.md": "cuda.tile",
    "cute.md": "cutlass.cute",
    "warp.md": "warp",
    "helion.md": "helion",
}  # pages whose examples need a front end
HAS_GPU = torch.cuda.is_available()


def blocks(page: Path) -> list[tuple[bool, str]]:
    """``(needs_gpu, source)`` of each python block."""
    found = re.findall(r"^```python\n(.*?)^```", page.read_text(), re.M | re.S)
    return [(code.startswith("# needs a GPU"), code) for code in found]


#: Each page's namespace after its blocks without a GPU ran: the GPU blocks go on from there (a
#: page's examples register torch operators, which a process can define only once).
_AFTER_CPU: dict[str, dict] = {}


def run(page: Path, gpu: bool) -> None:
    if page.name in NEEDS:
        pytest.importorskip(NEEDS[page.name])
    if page.name == "cutile.md":  # its examples compile: cuTile's compiler must run here
        from launchpad import UnsupportedVersion
        from launchpad.frontends.cutile.versions import check_tileiras

        try:
            check_tileiras("sm_90")
        except UnsupportedVersion as exc:
            pytest.skip(f"cuTile cannot compile here: {exc}")
    if page.name == "numba.md":
        import numpy as np

        if not hasattr(np, "row_stack"):  # numba-cuda 0.30's random module under NumPy 2.5 needs it
            np.row_stack = np.vstack
    namespace = _AFTER_CPU.get(page.name) if gpu else None
    resumed = namespace is not None
    if not resumed:  # a real module, so code that looks its globals up by module name (torch.compile) finds them
        module = types.ModuleType(f"launchpad_docs_{page.stem}")
        sys.modules[module.__name__] = module
        namespace = module.__dict__
    for i, (needs_gpu, code) in enumerate(blocks(page)):
        if needs_gpu != gpu and (needs_gpu or resumed):  # GPU blocks need one; CPU blocks ran already
            continue
        where = f"{page.name} block {i + 1}"
        linecache.cache[where] = (len(code), None, code.splitlines(True), where)  # inspect.getsource finds it (cuTile)
        exec(compile(code, where, "exec"), namespace)
    if not gpu:
        _AFTER_CPU[page.name] = namespace


def test_docs_exist_with_examples():
    assert DOCS.is_dir(), "docs/ is not next to tests/"
    names = {p.name for p in PAGES}
    assert {"index.md", "cpp.md", "triton.md", "numba.md", "pytorch.md", "errors.md", "benchmarks.md",
            "versions.md", "api.md"} <= names  # fmt: skip
    with_code = [p.name for p in PAGES if blocks(p)]
    assert {"index.md", "cpp.md", "triton.md", "numba.md", "pytorch.md", "errors.md"} <= set(with_code)
    if README.is_file():  # the front page's quickstart runs as written, on a GPU and without one
        assert [gpu for gpu, _ in blocks(README)] == [False, True, True]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_examples_run_without_a_gpu(page, tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_CACHE_DIR", str(tmp_path / "cache"))
    run(page, gpu=False)


@pytest.mark.gpu
@pytest.mark.parametrize("page", [p for p in PAGES if any(g for g, _ in blocks(p))], ids=lambda p: p.stem)
def test_examples_run_on_a_gpu(page, tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_CACHE_DIR", str(tmp_path / "cache"))
    run(page, gpu=True)


def prose(page: Path) -> str:
    """A page without its code: fenced blocks and inline code spans (which may wrap a line)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    return re.sub(r"`[^`]*`", "", text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.stem)
def test_links_lead_somewhere(page):
    """Every ``[text](target)`` outside code is a link to a web page or to a file beside the page:
    code such as ``k[grid](...)`` left unquoted would render as a link to ``...`` (on the site and
    on GitHub), so code goes in backticks."""
    broken = [
        f"[{text}]({target})"
        for text, target in re.findall(r"\[([^\]]*)\]\(([^)]*)\)", prose(page))
        if not re.match(r"https?://", target) and not (page.parent / target.split("#")[0]).exists()
    ]
    assert not broken, f"{page.name}: links to nothing (code not in backticks?): {broken}"


def test_the_readme_gives_the_cpu_install_with_the_test_command():
    """Where the README says how to run the tests, it says first how to install torch's CPU build
    (the registry's default is the CUDA one, several GB), as CI does."""
    if not README.is_file():
        pytest.skip("no README beside the tests")
    with_tests = [b for b in re.findall(r"^```bash\n(.*?)^```", README.read_text(), re.M | re.S) if "pytest" in b]
    assert len(with_tests) == 1, "the README gives its test command in one bash block"
    lines = with_tests[0].splitlines()
    cpu = [i for i, line in enumerate(lines) if "torch==2.13.0" in line and "download.pytorch.org/whl/cpu" in line]
    tests = [i for i, line in enumerate(lines) if "python -m pytest" in line]
    assert cpu and tests and cpu[0] < tests[0]


def test_the_triton_page_has_gluon():
    page = DOCS / "triton.md"
    if not page.is_file():
        pytest.skip("no docs/ beside the tests")
    text = page.read_text()
    assert "## Gluon kernels" in text and "`triton.experimental.gluon`" in text
    assert any("@gluon.jit" in code and "triton_launcher" in code for gpu, code in blocks(page) if not gpu)
