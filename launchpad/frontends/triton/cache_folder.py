"""Triton kernels from Triton's cache folder, without importing Triton: :func:`load_triton`.

A cache entry holds the cubin, the metadata JSON and the TTIR (``NAME.source`` or ``NAME.ttir``),
but no constexpr values. The TTIR names the runtime arguments (from Triton 3.5; 3.4's are
unnamed), its ``tt.divisibility`` hints give the specializations, and its recorded location
leads to the kernel's ``def``, whose parameter list gives the JIT function's own call.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...errors import ArgumentError, BinaryError, MissingFileError
from ...kernel import Kernel
from .spec import TENSORDESC, Leaf, build_spec, with_writes
from .versions import Convention, convention

__all__ = ["load_triton", "ttir_leaves", "ttir_type"]


_ELEMENT_TYPES = {
    "f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64", "f8E4M3FN": "fp8e4nv", "f8E5M2": "fp8e5",
    "f8E4M3FNUZ": "fp8e4b8", "f8E5M2FNUZ": "fp8e5b16", "f8E4M3B11FNUZ": "fp8e4b15", "i1": "u1",
}  # fmt: skip
_INT_TYPE = re.compile(r"i(8|16|32|64)")


def ttir_type(ty: str, where: str) -> str:
    """A TTIR argument type as a Triton type word.

    MLIR integers are signless: an unsigned argument (``u32``, ``u64``) reads as ``i32``/``i64``
    here, and a pointer to ints as ``*void`` (its dtype is not checked, which Triton does not
    either). Descriptors read ``!tt.tensordesc<tensor<64x64xf16>>`` up to Triton 3.7 and
    ``!tt.tensordesc<64x64xf16>`` from 3.8.
    """
    ty = ty.strip()
    m = re.fullmatch(r"!tt\.ptr<([^,>]+)(?:,\s*\d+)?>", ty)
    if m:
        elem = m.group(1).strip()
        if elem in _ELEMENT_TYPES:
            return "*" + _ELEMENT_TYPES[elem]
        if _INT_TYPE.fullmatch(elem):
            return "*void"
        raise BinaryError(f"{where}: unsupported pointer type {ty!r}")
    m = re.fullmatch(r"!tt\.tensordesc<(?:tensor<)?([\dx]+)x(\w+)(?:,[^>]*)?>?>", ty)
    if m:
        block = [int(d) for d in m.group(1).split("x")]
        elem = _ELEMENT_TYPES.get(m.group(2)) or ("void" if _INT_TYPE.fullmatch(m.group(2)) else m.group(2))
        return f"tensordesc<{elem}[{', '.join(map(str, block))}]>"
    if ty in _ELEMENT_TYPES:
        return _ELEMENT_TYPES[ty]
    if _INT_TYPE.fullmatch(ty):
        return ty
    raise BinaryError(f"{where}: unsupported argument type {ty!r}")


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside (), <>, {}, [] and quotes."""
    out, depth, start, quoted = [], 0, 0, False
    for i, c in enumerate(text):
        if c == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif c in "(<{[":
            depth += 1
        elif c in ")>}]":
            depth -= 1
        elif c == sep and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [s.strip() for s in out if s.strip()]


def _ttir_arguments(ttir: str, name: str) -> list[tuple[str, str, bool]]:
    """``(loc name, type, divisible)`` of each argument of the public function ``name``."""
    aliases = dict(re.findall(r'^(#loc\d*)\s*=\s*loc\("([^"]*)"\(', ttir, re.M))
    m = re.search(rf"tt\.func\s+public\s+@{re.escape(name)}\s*\(", ttir) or re.search(
        r"tt\.func\s+public\s+@[\w$.]+\s*\(", ttir
    )
    if m is None:
        raise BinaryError(f"no public tt.func in the TTIR of {name!r}")
    depth, end = 1, m.end()
    while depth and end < len(ttir):
        depth += {"(": 1, ")": -1}.get(ttir[end], 0)
        end += 1
    out = []
    for i, piece in enumerate(_split_top(ttir[m.end() : end - 1])):
        am = re.match(r"%[\w$.-]+\s*:\s*", piece)
        rest = piece[am.end() :] if am else piece
        cut = min((k for k in (rest.find(" {"), rest.find(" loc(")) if k >= 0), default=len(rest))
        ty, tail = rest[:cut], rest[cut:]
        # a named argument is loc("x_ptr"(#loc)); Triton 3.4 gives only the file position, loc("f.py":16:0)
        lm = re.search(r'loc\("([^"]*)"\(', tail) or re.search(r"loc\((#loc\d*)\)", tail)
        loc = str(lm.group(1)) if lm else ""
        loc = aliases.get(loc, loc) if loc.startswith("#") else loc
        dm = re.search(r"tt\.divisibility\s*=\s*(\d+)", tail)
        out.append((loc, ttir_type(ty, f"kernel {name!r}, argument {i}"), bool(dm and int(dm.group(1)) % 16 == 0)))
    return out


def ttir_leaves(ttir: str, name: str, conv: Convention) -> list[Leaf]:
    """The runtime arguments a TTIR function takes, as leaves.

    Constexprs and specialized values are compiled away and absent from the TTIR. The parts of
    one Python argument (the items of a tuple, a tensor descriptor's shape and strides) are
    consecutive and carry the argument's name: all of them the bare name in Triton 3.5 to 3.7,
    and ``t.0``, ``d.shape.0``, ``d.padding`` ... from 3.8 (see :mod:`launchpad.frontends.triton.versions`).
    Triton 3.4 names none: names then come from the kernel's ``def`` where the source is readable
    and the count fits, and tuple items read as separate arguments.
    """
    arguments = _ttir_arguments(ttir, name)
    if not any(loc for loc, _, _ in arguments):
        names = _source_parameter_names(ttir, _fold_descriptors(arguments, conv), len(arguments))
        arguments = [(n, ty, divisible) for n, (_, ty, divisible) in zip(names, arguments)]
    root_of = (lambda loc: loc.split(".")[0]) if conv.dotted_ttir_names else (lambda loc: loc)
    groups: list[tuple[str, list[tuple[str, str, bool]]]] = []  # (argument name, its values)
    for i, (loc, ty, divisible) in _fold_descriptors(arguments, conv):
        if loc and groups and groups[-1][0] == root_of(loc):
            groups[-1][1].append((loc, ty, divisible))
        else:
            groups.append((root_of(loc) if loc else f"arg{i}", [(loc or f"arg{i}", ty, divisible)]))
    leaves: list[Leaf] = []
    for position, (root, items) in enumerate(groups):
        single = len(items) == 1 and items[0][0] == root
        for j, (loc, ty, divisible) in enumerate(items):
            if single:
                path: tuple[int, ...] = (position,)
            elif conv.dotted_ttir_names:
                path = (position, *(int(k) for k in loc.split(".")[1:]))
            else:
                path = (position, j)
            leaves.append(Leaf(root, path, ty, divisible=divisible))
    return leaves


def _fold_descriptors(
    arguments: list[tuple[str, str, bool]], conv: Convention
) -> list[tuple[int, tuple[str, str, bool]]]:
    """``(index, argument)`` of each TTIR argument that is a Python value: a descriptor's shape,
    strides and flags are folded into it (a pointer-form descriptor's type becomes
    ``tensordesc<fp16[?, ?]>``)."""
    out, i = [], 0
    while i < len(arguments):
        loc, ty, divisible = arguments[i]
        m = TENSORDESC.match(ty)
        if m:  # TMA form: the descriptor, then its shape (i32) and strides (i64)
            rank = len([d for d in m.group(2).split(",") if d.strip()])
            if [t for _, t, _ in arguments[i + 1 : i + 1 + 2 * rank]] == ["i32"] * rank + ["i64"] * rank:
                out.append((i, (loc, ty, divisible)))
                i += 1 + 2 * rank
                continue
        elif ty.startswith("*") and (rank := _pointer_descriptor_rank(arguments, i, conv)):
            out.append((i, (loc, f"tensordesc<{ty[1:]}[{', '.join(['?'] * rank)}]>", False)))
            i += 1 + 4 * rank + len(conv.descriptor_flags)
            continue
        out.append((i, (loc, ty, divisible)))
        i += 1
    return out


def _pointer_descriptor_rank(arguments: list[tuple[str, str, bool]], i: int, conv: Convention) -> int:
    """The rank of the pointer-form descriptor starting at ``arguments[i]``, or 0 when it is none.

    Its parts: base pointer, rank i64 shape and strides, the flags (u1), rank i32 shape and i64
    strides. From Triton 3.8 they are named ``d.shape.0``...; in 3.5 to 3.7 they all carry the
    descriptor's name, and the pattern of types is what tells it from a tuple argument; Triton
    3.4's unnamed arguments cannot be told apart from separate ones, so none is taken there.
    """
    loc = arguments[i][0]
    if not loc:
        return 0
    parts = arguments[i + 1 :]
    for rank in range(1, 6):
        expected = ["i64"] * (2 * rank) + ["u1"] * len(conv.descriptor_flags) + ["i32"] * rank + ["i64"] * rank
        if [t for _, t, _ in parts[: len(expected)]] != expected:
            continue
        names = [n for n, _, _ in parts[: len(expected)]]
        if conv.dotted_ttir_names:
            if names[0] == f"{loc}.shape.0" and all(n.startswith(f"{loc}.") for n in names):
                return rank
        elif all(n == loc for n in names) and (len(parts) == len(expected) or parts[len(expected)][0] != loc):
            return rank  # the whole argument: a tuple of exactly these types would read the same
    return 0


def _source_parameter_names(ttir: str, values: list[tuple[int, Any]], count: int) -> list[str]:
    """Names for ``count`` unnamed TTIR arguments (Triton 3.4), from the kernel's ``def``.

    ``values`` are the Python values among them (:func:`_fold_descriptors`). The TTIR's own
    location (``#loc = loc("file.py":16:0)``) leads to the ``def``; when it is readable and has
    as many runtime parameters (not annotated ``tl.constexpr``) as there are values, each value's
    parts take its parameter's name. Otherwise every name is ``""`` (unnamed).
    """
    names = [""] * count
    parameters = _source_parameters(ttir)
    if parameters is None:
        return names
    runtime = [name for name, constexpr in parameters if not constexpr]
    if len(runtime) == len(values):
        starts = [i for i, _ in values] + [count]
        for k, param in enumerate(runtime):
            names[starts[k] : starts[k + 1]] = [param] * (starts[k + 1] - starts[k])
    return names


def _source_parameters(ttir: str) -> list[tuple[str, bool]] | None:
    """The kernel's ``def`` parameters, ``(name, annotated tl.constexpr)``, found through the TTIR's
    own location (``#loc = loc("file.py":16:0)``); None where that source cannot be read."""
    import ast

    m = re.search(r'^#loc\s*=\s*loc\("([^"]+)":(\d+):\d+\)', ttir, re.M)
    if m is None:
        return None
    try:
        tree = ast.parse(Path(m.group(1)).read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    line = int(m.group(2))
    node = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.lineno == line), None)
    if node is None:
        return None
    return [(a.arg, "constexpr" in ast.unparse(a.annotation or ast.Constant(""))) for a in node.args.args]


def _full_call(leaves: list[Leaf], parameters: list[tuple[str, bool]], constexprs: dict) -> list[Leaf]:
    """The runtime leaves placed at their ``def`` positions, with a constant leaf for every
    parameter the TTIR lacks: a constexpr (its value from ``constexprs``, or unknown) or an
    argument Triton specialized away (an int equal to 1, or None). Unchanged where the TTIR's
    names are not the ``def``'s (an unnamed Triton 3.4 TTIR whose source did not fit)."""
    names = [name for name, _ in parameters]
    if not {leaf.name for leaf in leaves} <= set(names):
        return leaves
    out: list[Leaf] = []
    for i, (name, constexpr) in enumerate(parameters):
        mine = [leaf for leaf in leaves if leaf.name == name]
        if mine:
            out += [replace(leaf, path=(i, *leaf.path[1:])) for leaf in mine]
        elif name in constexprs:
            out.append(Leaf(name, (i,), "constexpr", constexprs[name]))
        else:
            options = (("unknown", True),) if constexpr else (("unknown", True), ("one_or_none", True))
            out.append(Leaf(name, (i,), "constexpr", options=options))
    return out


def _cache_files(path: Path) -> tuple[Path, dict]:
    """The metadata JSON of a cache entry (folder, ``NAME.json``, ``__grp__NAME.json`` or cubin)."""
    if not path.exists():
        raise MissingFileError(
            f"load_triton: {str(path)!r} does not exist; give a kernel's folder in Triton's cache "
            "(~/.triton/cache/<hash>, or $TRITON_CACHE_DIR/<hash>) or its NAME.json, __grp__NAME.json or NAME.cubin",
            str(path),
        )
    if path.is_dir():
        found = [p for p in sorted(path.glob("*.json")) if not p.name.startswith("__grp__")]
        if len(found) != 1:
            kind = ArgumentError if found else MissingFileError
            raise kind(
                f"{str(path)!r} should hold one Triton kernel's NAME.json, found {[p.name for p in found] or 'none'}"
            )
        path = found[0]
    elif path.suffix == ".cubin":
        path = path.with_suffix(".json")
    elif path.name.startswith("__grp__"):
        group = json.loads(path.read_text()).get("child_paths", {})
        sibling = path.with_name(path.name[len("__grp__") :])
        path = sibling if sibling.exists() else Path(next(p for c, p in group.items() if c.endswith(".json")))
    try:
        return path, json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise MissingFileError(f"cannot read Triton metadata {str(path)!r}: {exc}", str(path)) from None
    except (OSError, ValueError) as exc:
        raise BinaryError(f"cannot read Triton metadata {str(path)!r}: {exc}") from None


def load_triton(path: str | Path, *, constexprs: dict[str, Any] | None = None) -> Kernel:
    """A :class:`~launchpad.Kernel` from a Triton cache entry, without importing Triton.

    Parameters
    ----------
    path
        A kernel's folder in Triton's cache (``~/.triton/cache/<hash>``), or its ``NAME.json``,
        ``__grp__NAME.json`` or ``NAME.cubin``.
    constexprs : dict, optional
        The constexpr values the kernel was compiled with (``{"BLOCK_SIZE": 1024}``), which the
        cache does not record: given ones are then checked against them at each launch.

    Returns
    -------
    Kernel
        It takes the JIT function's own call (see "Calling a Triton kernel" in the README) where
        the kernel's source file is readable (the TTIR records where its ``def`` is): arguments
        by position or by the ``def``'s names, constexprs optional. A constexpr whose value was
        not given in ``constexprs`` must be left out (it cannot be checked); an argument Triton
        specialized away may be 1 or None. The TTIR's ``tt.divisibility = 16`` hints become
        alignment and multiple-of-16 checks. Without the source the kernel takes its runtime
        arguments only, in order; without a TTIR, one raw value per cubin parameter. A
        :func:`from_triton` kernel saved with :meth:`Kernel.save` keeps every constexpr value.
    """
    md_path, md = _cache_files(Path(path))
    stem = md_path.stem
    folder = md_path.parent
    cubin = folder / f"{stem}.cubin"
    if not cubin.exists():
        raise MissingFileError(f"no {cubin.name} next to {str(md_path)!r}", str(cubin))
    image = cubin.read_bytes()
    ttir_file = next((p for p in (folder / f"{stem}.source", folder / f"{stem}.ttir") if p.exists()), None)
    ttir = ttir_file.read_text() if ttir_file is not None else None
    leaves = ttir_leaves(ttir, md["name"], convention(md)) if ttir is not None else None
    parameters = _source_parameters(ttir) if ttir is not None else None
    constexprs = dict(constexprs or {})
    if leaves is not None and parameters is not None:
        runtime = {leaf.name for leaf in leaves}
        wrong = [n for n in constexprs if n in runtime or n not in {p for p, _ in parameters}]
        if wrong:
            raise ArgumentError(f"kernel {md['name']!r}: constexprs names {wrong}, which are not its constexpr "
                                f"parameters ({[p for p, c in parameters if c]})")  # fmt: skip
        leaves = _full_call(leaves, parameters, constexprs)
    elif constexprs:
        raise ArgumentError(f"kernel {md['name']!r}: constexprs= needs the kernel's source, which its TTIR does not "
                            "lead to (the file moved, or no TTIR is cached)")  # fmt: skip
    ptx_file = folder / f"{stem}.ptx"
    ptx = ptx_file.read_text() if ptx_file.exists() else None
    return Kernel(with_writes(build_spec(image, md, leaves, md["name"]), ttir, ptx))
