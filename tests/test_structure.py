"""The shape of the code base, checked: the folders import one way (core below launch below the
Kernel below the front ends), no front end imports another, no import cycle anywhere (imports
inside functions count), the library never imports the tools (CLI, benchmarks) or the tests, and
no module grows past ~400 lines unless its top says why it belongs together (a module is split where
its parts divide, never by size alone)."""

from __future__ import annotations

import ast
from pathlib import Path

import launchpad

PACKAGE = Path(launchpad.__file__).resolve().parent
LIMIT = 420  # "about 400 lines"

#: Each part of the package and the parts it may import (besides itself and ``launchpad.errors``),
#: as each folder's ``__init__.py`` says. A module belongs to the longest prefix listed.
LIBRARY = ("launchpad.core", "launchpad.launch", "launchpad.kernel")
FRONT_ENDS = ("launchpad.frontends.cpp", "launchpad.frontends.triton", "launchpad.frontends.numba",
              "launchpad.frontends.cutile", "launchpad.frontends.helion", "launchpad.frontends.cute",
              "launchpad.frontends.warp")  # fmt: skip
ALLOWED: dict[str, tuple[str, ...]] = {
    "launchpad.errors": (),
    "launchpad.core": (),
    "launchpad.launch": ("launchpad.core",),
    "launchpad.kernel": ("launchpad.core", "launchpad.launch"),
    "launchpad.sequences": ("launchpad.core", "launchpad.launch"),
    **{front_end: LIBRARY for front_end in FRONT_ENDS},
    "launchpad.frontends": (),  # the folder's own __init__
    "launchpad.torch_ops": LIBRARY,
    "launchpad.tracing": (*LIBRARY, "launchpad.torch_ops"),
    "launchpad": ("launchpad.*",),  # the package's __init__: the public names of every part below
    "launchpad.reporting": ("launchpad.*",),
    "launchpad.bench": ("launchpad", "launchpad.*"),  # the tools: the library, and what they print
    "launchpad.cli": ("launchpad", "launchpad.*"),
    "launchpad.__main__": ("launchpad.cli",),
}
#: The tools: nothing imports them but their entry points (``__main__`` the CLI, the CLI the
#: benchmarks it runs).
TOOLS = {"launchpad.cli": ("launchpad.__main__",), "launchpad.bench": ("launchpad.cli",)}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path) -> set[str]:
    """The launchpad modules a module imports, anywhere in it (at the top or inside functions)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m == "launchpad" or m.startswith("launchpad.")}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph = {name: {m for m in _imports(name, path) if m in modules and m != name} for name, path in modules.items()}
    # a package's __init__ importing its submodules is not a cycle through them, nor is a
    # submodule's import of its own package (which Python runs first anyway)
    return {n: {m for m in deps if not (n.startswith(m + ".") or m.startswith(n + "."))} for n, deps in graph.items()}


def _part(module: str) -> str:
    return max((p for p in ALLOWED if module == p or module.startswith(p + ".")), key=len)


def _may_import(part: str, target: str) -> bool:
    target_part = _part(target)
    if target_part in (part, "launchpad.errors"):
        return True
    for allowed in ALLOWED[part]:
        if allowed == "launchpad.*" and target != "launchpad":
            return True
        if target_part == allowed or target_part.startswith(allowed + "."):
            return True
    return False


def test_every_module_belongs_to_a_part():
    for name in _modules():
        assert _part(name) in ALLOWED, name


def test_imports_run_one_way():
    wrong = []
    for module, deps in _graph().items():
        part = _part(module)
        for dep in sorted(deps):
            if not _may_import(part, dep):
                wrong.append(f"{module} ({part}) imports {dep} ({_part(dep)})")
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def test_front_ends_do_not_import_each_other():
    for module, deps in _graph().items():
        if _part(module) in FRONT_ENDS:
            others = {d for d in deps if _part(d) in FRONT_ENDS and _part(d) != _part(module)}
            assert not others, f"{module} imports another front end: {sorted(others)}"


def test_only_entry_points_import_the_tools():
    for module, deps in _graph().items():
        for tool, entry_points in TOOLS.items():
            if _part(module) != tool and any(_part(d) == tool for d in deps):
                assert _part(module) in entry_points, f"{module} imports {tool}"


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = stack[stack.index(dep) :] + [dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


def test_each_folder_says_what_it_may_import():
    for init in PACKAGE.rglob("__init__.py"):
        if init.parent == PACKAGE:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "Imports:" in doc or "imports" in doc.lower(), f"{init.relative_to(PACKAGE)} says nothing of its imports"


def test_the_library_imports_neither_benchmarks_nor_tests():
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])  # fmt: skip
            assert not [n for n in names if n.split(".")[0] in ("benchmarks", "tests")], path


def test_long_modules_say_why():
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text().count("\n")
        if lines > LIMIT:
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert "400 lines" in doc, (
                f"{path.relative_to(PACKAGE)} has {lines} lines: split it where its parts divide, or, if it belongs "
                'together, say so at the top of its docstring: "400 lines" and why it is one whole (what its parts '
                "share that would be lost apart), not that it is long"
            )


def test_one_version():
    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"] if (
        PACKAGE.parent / "pyproject.toml").is_file() else None  # fmt: skip
    if project is None:  # an installed wheel: its metadata is the pyproject's
        import importlib.metadata

        assert importlib.metadata.version("launchpad-kernels") == launchpad.__version__
    else:
        assert project["version"] == launchpad.__version__


def test_the_architecture_page_names_what_exists():
    """docs/architecture.md: every path, file and ``launchpad.`` name it gives exists."""
    import importlib
    import re

    root = PACKAGE.parent
    page = root / "docs" / "architecture.md"
    if not page.is_file():  # an installed wheel without the docs
        import pytest

        pytest.skip("no docs/ beside the package")
    tokens = re.findall(r"`([^`\s]+)`", page.read_text())
    files = {p.name for p in PACKAGE.rglob("*") if p.is_file()}
    checked = 0
    for token in tokens:
        if "/" in token:
            assert (root / token).exists(), f"{token} does not exist"
        elif re.fullmatch(r"\w+\.(py|c|h)", token):
            assert token in files, f"no {token} in the package"
        elif token.startswith("launchpad.") and re.fullmatch(r"[\w.]+", token):
            parts = token.split(".")
            for i in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
                try:
                    obj = importlib.import_module(".".join(parts[:i]))
                except ImportError:
                    continue
                for attr in parts[i:]:
                    assert hasattr(obj, attr), f"{token}: no {attr}"
                    obj = getattr(obj, attr)
                break
            else:
                raise AssertionError(f"{token} is not importable")
        else:
            continue
        checked += 1
    assert checked > 30  # the page names what it describes


def test_the_package_lists_only_its_public_names():
    """``dir(launchpad)``: the names of ``__all__`` (the parts of a spec, ``Arg``, ``LaunchPlan`` and
    ``Param``, among them) and the subpackages; nothing a module statement leaves behind
    (``annotations``, from ``from __future__ import annotations``)."""
    import types

    extra = {n for n in dir(launchpad) if not n.startswith("_") and n not in launchpad.__all__
             and not isinstance(getattr(launchpad, n), types.ModuleType)}  # fmt: skip
    assert extra == set()
    assert {"Arg", "LaunchPlan", "Param"} <= set(launchpad.__all__)
    assert all(hasattr(launchpad, n) for n in launchpad.__all__)
