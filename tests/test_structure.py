"""The shape of the code base, checked: no import cycles inside launchpad, the library never imports
the benchmark results package or the tests, and no module grows past ~400 lines without saying why
at its top."""

from __future__ import annotations

import ast
from pathlib import Path

import launchpad

PACKAGE = Path(launchpad.__file__).resolve().parent
LIMIT = 420  # "about 400 lines"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path) -> set[str]:
    """The launchpad modules a module imports at its top level (imports inside functions are lazy
    on purpose, and do not make a cycle at import time)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("launchpad")}


def test_no_import_cycles():
    modules = _modules()
    graph = {name: {m for m in _imports(name, path) if m in modules and m != name} for name, path in modules.items()}
    # a package's __init__ importing its submodules is not a cycle through them
    graph = {n: {m for m in deps if not (n.startswith(m + ".") and m in modules)} for n, deps in graph.items()}
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
            assert "400 lines" in doc, f"{path.relative_to(PACKAGE)} has {lines} lines and no reason at its top"


def test_one_version():
    import pytest

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"] if (
        PACKAGE.parent / "pyproject.toml").is_file() else None  # fmt: skip
    if project is None:  # an installed wheel: its metadata is the pyproject's
        import importlib.metadata

        assert importlib.metadata.version("launchpad") == launchpad.__version__
    else:
        assert project["version"] == launchpad.__version__
