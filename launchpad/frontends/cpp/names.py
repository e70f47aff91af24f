"""Which kernels a CUDA C++ source defines, for the error a kernel name that is not among them gets.

A name NVRTC cannot resolve (``"scal"`` for ``scale``, ``"scale<float>"`` for a template inside
``namespace ops``) fails as a name expression, with NVRTC's internal words for it. Only then,
off the path of every compile that succeeds, this module finds what the source does define: the
kernels of the source compiled without name expressions (the cubin's entry symbols, demangled:
every kernel that is not a template, and the template instances the source itself instantiates)
and the kernel templates the source declares (read from the text, with the namespaces around
them), and words :class:`~launchpad.BinaryError` with the closest name.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .demangle import _Parser, _strip_comments

__all__ = ["Declared", "declared_kernels", "failed_names", "kernel_name", "not_defined_message"]


@dataclass(frozen=True)
class Declared:
    """A kernel the source defines: its qualified name (``"ops::scale"``) and, for a template,
    its template parameters as a name expression would fill them (``"<T>"``)."""

    name: str
    template: str = ""

    def __str__(self) -> str:
        return self.name + self.template


def kernel_name(symbol: str) -> str:
    """The C++ name of a kernel's entry symbol: ``"ops::scale<float>"`` from
    ``_ZN3ops5scaleIfEEvPT_PKS1_S1_i``; an ``extern "C"`` symbol (or one this cannot read) as it is."""
    if not symbol.startswith("_Z"):
        return symbol
    parser = _Parser(symbol)
    parser.expect("_Z")
    try:
        return parser.class_name().name
    except (ValueError, IndexError):
        return symbol


#: What ends a kernel's declaration head before its name: attributes and qualifiers it may carry.
_NOT_NAMES = {"__launch_bounds__", "__attribute__", "__declspec", "alignas", "__cluster_dims__", "__maxnreg__"}
_SCOPE = re.compile(r"\b(?:inline\s+)?namespace\s+([A-Za-z_][\w:]*)?\s*\{|[{}]|__global__")


def _template_parameters(head: str) -> str | None:
    """``"<T, N>"`` from the ``template <typename T, int N>`` that ``head`` ends with; None where
    ``head`` has no template (an explicit instantiation, ``template __global__ ...``, has none)."""
    m = re.search(r"\btemplate\s*<(.*)>\s*(?:extern\s*\"C\"\s*)?$", head, re.S)
    if m is None:
        return None
    names = [re.findall(r"[A-Za-z_]\w*", p.split("=")[0])[-1:] for p in m.group(1).split(",") if p.strip()]
    return "<" + ", ".join(n[0] for n in names if n) + ">"


def _declared_in_text(source: str) -> list[Declared]:
    """The ``__global__`` functions the text declares, qualified by their namespaces."""
    text = _strip_comments(source)
    scopes: list[str | None] = []  # one per open brace: a namespace's name, or None
    found: list[Declared] = []
    for m in _SCOPE.finditer(text):
        token = m.group(0)
        if token == "}":
            if scopes:
                scopes.pop()
        elif token == "{":
            scopes.append(None)
        elif token != "__global__":
            scopes.append(m.group(1) or "")  # "" for an anonymous namespace: nothing to qualify with
        elif not any(s is None for s in scopes):  # a kernel declared in a function body is none
            rest = text[m.end() : m.end() + 400]
            name = next(
                (n.group(1) for n in re.finditer(r"([A-Za-z_]\w*)\s*\(", rest) if n.group(1) not in _NOT_NAMES), None
            )
            head = text[max(text.rfind(";", 0, m.start()), text.rfind("}", 0, m.start())) + 1 : m.start()]
            template = _template_parameters(head)
            if name is None or (template is None and re.search(r"\btemplate\b", head)):
                continue  # an explicit instantiation: the cubin has it
            qualified = "::".join([s for s in scopes if s] + [name])
            found.append(Declared(qualified, template or ""))
    return found


def declared_kernels(source: str, symbols: Iterable[str]) -> list[Declared]:
    """The kernels ``source`` defines: those the text declares (templates with their parameters)
    and the entry symbols of its cubin (``symbols``, compiled without name expressions), which add
    template instances and kernels the text hides (a macro that declares one)."""
    declared = _declared_in_text(source)
    plain = {d.name.split("::")[-1] for d in declared if not d.template}
    for symbol in symbols:
        name = kernel_name(symbol)
        if "<" not in name and name.split("::")[-1] in plain:
            continue  # declared already, with its namespace (an extern "C" symbol has none)
        declared.append(Declared(name))
    unique = {str(d): d for d in declared}
    return sorted(unique.values(), key=lambda d: (str(d).lower(), str(d)))


def failed_names(log: str, names: Sequence[str]) -> dict[str, list[str]]:
    """The name expressions NVRTC's log refuses, each with NVRTC's messages about it (the log
    echoes each refused expression as ``#pragma nv_mangled_name`` after its errors); every one of
    ``names``, with no messages, where the log does not say."""
    said: dict[str, list[str]] = {}
    pending: list[str] = []
    for line in log.splitlines():
        error = re.match(r"__nv_name_map\(\d+\): (?:error|note[^:]*): (.*)", line)
        if error:
            pending.append(error.group(1).strip())
            continue
        echoed = re.match(r"\s*#pragma nv_mangled_name (.+)", line)
        if echoed and pending:
            said.setdefault(echoed.group(1).strip(), []).extend(pending)
            pending = []
    bad = {n: said[n.strip()] for n in names if n.strip() in said}
    return bad or {n: [] for n in names}


def _split(name: str) -> tuple[str, str]:
    """``("ops::scale", "<float>")`` from ``"::ops::scale<float>"``."""
    name = name.strip()
    at = name.find("<")
    base, args = (name, "") if at < 0 else (name[:at], name[at:])
    return re.sub(r"\s+", "", base).lstrip(":"), args


def closest(name: str, kernels: Sequence[Declared]) -> tuple[str, bool] | None:
    """The name to suggest for ``name`` and whether it is ``name`` with its namespace added (the
    same kernel); None where nothing is close."""
    base, args = _split(name)
    last = base.split("::")[-1]

    def named(d: Declared) -> str:  # a template takes the instance asked for, else its parameters
        return d.name + (args or d.template) if d.template else str(d)

    same = [d for d in kernels if _split(d.name)[0].split("::")[-1] == last and _split(d.name)[0] != base]
    if same and "::" not in base:
        return named(min(same, key=lambda d: (not d.template and bool(args), str(d)))), True
    by_last: dict[str, list[Declared]] = {}
    for d in kernels:
        by_last.setdefault(_split(d.name)[0].split("::")[-1], []).append(d)
    match = difflib.get_close_matches(last, list(by_last), n=1, cutoff=0.6)
    if not match:
        return None
    options = by_last[match[0]]
    return named(min(options, key=lambda d: (bool(d.template) != bool(args), str(d)))), False


def not_defined_message(bad: dict[str, list[str]], kernels: Sequence[Declared]) -> str:
    """The :class:`~launchpad.BinaryError` message for names the source does not define (``bad``:
    each with NVRTC's messages about it)."""
    parts = []
    for name, messages in bad.items():
        hint = closest(name, kernels)
        if hint is not None and _split(hint[0]) == _split(name):
            hint = None  # the name itself (an overload, an undefined template argument): NVRTC says why
        suggestion = ""
        if hint is not None:  # a template named without its arguments gets the template, not an echo
            bare = not _split(name)[1] and "<" in hint[0]
            suggestion = (
                f"an instance of the template {hint[0]!r} (its template arguments in <>)" if bare else repr(hint[0])
            )
        if any("non-__global__" in s for s in messages):
            parts.append(f"{name!r} is not a kernel (a __global__ function) of the source")
        elif hint is not None and hint[1]:
            parts.append(
                f"kernel {name!r} is not defined at global scope; did you mean {suggestion}, in its namespace?"
            )
        elif hint is not None:
            parts.append(f"kernel {name!r} is not defined in the source; did you mean {suggestion}?")
        else:
            own = f'"{_split(name)[0].split("::")[-1]}"'  # "identifier <the name> is undefined" says nothing new
            why = "; ".join(
                s
                for s in messages
                if not (own in s and "is undefined" in s) and not s.startswith(("Error in", "Name expr"))
            )
            last = _split(name)[0].split("::")[-1]
            known = any(_split(d.name)[0].split("::")[-1] == last for d in kernels)
            said = "is not usable as named" if known else "is not defined in the source"
            parts.append(f"kernel {name!r} {said}" + (f" (NVRTC: {why[:300]})" if why else ""))
    plain = [str(d) for d in kernels if not d.template]
    templates = [str(d) for d in kernels if d.template]
    said = "; ".join(parts)
    said += " " if said.endswith("?") else ". "
    if not kernels:
        return said + "It defines no __global__ function"
    listing = ", ".join(plain)
    if templates:
        s = "s" if len(templates) > 1 else ""
        listing += f"{', and ' if plain else ''}the kernel template{s} {', '.join(templates)} (name an instance: its " \
                   "template arguments in <>)"  # fmt: skip
    return said + f"It defines: {listing}"
