"""What launchpad learns about a C++ kernel's parameters: their types, read from a name the compiler
mangled, and their names, read from the kernel's declaration in the source.

NVRTC tells the type of any expression through a name expression: compiling
``__launchpad_probe<decltype(+(kernel))>`` (an empty kernel template instantiated on the kernel's
function-pointer type) gives a lowered name such as ``_Z17__launchpad_probeIPFvPfPKffiEEvv``, whose
template argument ``PFvPfPKffiE`` is ``void (*)(float*, const float*, float, int)``. This module
parses that much of the Itanium C++ ABI mangling: builtin types, cv-qualifiers, pointers, named and
nested class types with template arguments, and substitutions (``S_``, ``S0_``...). Anything else
raises :class:`ValueError`; the caller then keeps size-only parameters.

:func:`kernel_parameter_types` gives one :class:`CType` per parameter; :func:`type_word` the
launchpad type word of each (``"*fp32"``, ``"i32"``, ``"bf16"``), or None where only the size says
how to pack it (a struct by value, an enum).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...core.binary import TYPE_PROBE as PROBE
from ...core.params import POINTER_DTYPES

__all__ = [
    "PROBE",
    "CType",
    "kernel_parameter_types",
    "parameter_names",
    "pointee_alignment",
    "probe_expression",
    "type_word",
]

#: Declared after the user's code: a kernel template to instantiate on a kernel's pointer type.
PROBE_SOURCE = f"\ntemplate <typename KernelPointer> __global__ void {PROBE}() {{}}\n"

_BUILTINS = {
    "v": "void", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char", "s": "short",
    "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long", "m": "unsigned long",
    "x": "long long", "y": "unsigned long long", "n": "__int128", "o": "unsigned __int128", "f": "float",
    "d": "double", "e": "long double", "g": "__float128", "w": "wchar_t",
}  # fmt: skip
_BUILTINS_D = {"Dh": "half", "Ds": "char16_t", "Di": "char32_t", "Du": "char8_t", "Dn": "decltype(nullptr)"}

#: Words of the types a kernel parameter or a pointee may be (64-bit Linux: long is 64 bits, char signed).
_WORDS = {
    "bool": "i1", "char": "i8", "signed char": "i8", "unsigned char": "u8", "short": "i16",
    "unsigned short": "u16", "int": "i32", "unsigned int": "u32", "long": "i64", "unsigned long": "u64",
    "long long": "i64", "unsigned long long": "u64", "float": "fp32", "double": "fp64", "half": "fp16",
    "__half": "fp16", "__nv_bfloat16": "bf16", "__nv_fp8_e4m3": "fp8e4nv", "__nv_fp8_e5m2": "fp8e5",
}  # fmt: skip
#: CUDA's vector types, as pointees: a ``float4*`` reads a float32 tensor four at a time.
_VECTOR_POINTEES = {
    **{f"float{n}": "fp32" for n in (1, 2, 3, 4)}, **{f"double{n}": "fp64" for n in (1, 2, 3, 4)},
    **{f"int{n}": "i32" for n in (1, 2, 3, 4)}, **{f"uint{n}": "u32" for n in (1, 2, 3, 4)},
    **{f"longlong{n}": "i64" for n in (1, 2, 3, 4)}, **{f"ulonglong{n}": "u64" for n in (1, 2, 3, 4)},
    **{f"short{n}": "i16" for n in (1, 2, 3, 4)}, **{f"ushort{n}": "u16" for n in (1, 2, 3, 4)},
    **{f"char{n}": "i8" for n in (1, 2, 3, 4)}, **{f"uchar{n}": "u8" for n in (1, 2, 3, 4)},
    "__half2": "fp16", "__nv_bfloat162": "bf16",
}  # fmt: skip
#: The alignment CUDA's ``vector_types.h`` gives each vector type: a kernel reading a ``float4*``
#: at an address that is not a multiple of 16 faults (and poisons the context), so it is checked.
_VECTOR_ALIGN = {
    **{f"{t}{n}": a * (2 if n == 2 else 4 if n == 4 else 1) for t, a in
       (("char", 1), ("uchar", 1), ("short", 2), ("ushort", 2), ("int", 4), ("uint", 4), ("float", 4))
       for n in (1, 2, 3, 4)},
    **{f"{t}{n}": 16 if n in (2, 4) else 8 for t in ("double", "longlong", "ulonglong") for n in (1, 2, 3, 4)},
    "__half2": 4, "__nv_bfloat162": 4,
}  # fmt: skip


@dataclass(frozen=True)
class CType:
    """A parsed type: ``kind`` is ``builtin``, ``class`` or ``pointer`` (``pointee`` set);
    ``name`` the builtin's or class's name; ``const``/``volatile`` its qualifiers."""

    kind: str
    name: str = ""
    pointee: CType | None = None
    const: bool = False
    volatile: bool = False

    def __str__(self) -> str:
        if self.kind == "pointer":
            return f"{self.pointee}*"
        return ("const " if self.const else "") + ("volatile " if self.volatile else "") + self.name


def probe_expression(kernel: str) -> str:
    """The name expression whose lowered name carries ``kernel``'s parameter types."""
    return f"{PROBE}<decltype(+({kernel}))>"  # unary + decays a function (or a cast to one) to its pointer


class _Parser:
    def __init__(self, text: str):
        self.text, self.pos = text, 0
        self.subs: list[object] = []  # substitution candidates, in the order the ABI numbers them

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos : self.pos + n]

    def take(self, s: str) -> bool:
        if self.text.startswith(s, self.pos):
            self.pos += len(s)
            return True
        return False

    def expect(self, s: str) -> None:
        if not self.take(s):
            raise ValueError(f"expected {s!r} at {self.pos} in {self.text!r}")

    def number(self) -> int:
        start = self.pos
        while self.peek().isdigit():
            self.pos += 1
        if start == self.pos:
            raise ValueError(f"expected a number at {start} in {self.text!r}")
        return int(self.text[start : self.pos])

    def source_name(self) -> str:
        n = self.number()
        name = self.text[self.pos : self.pos + n]
        self.pos += n
        return name

    def substitution(self) -> object:
        """``S_``, ``S<base-36>_``: a candidate seen before."""
        self.expect("S")
        if self.take("_"):
            return self.subs[0]
        digits = ""
        while self.peek() != "_":
            digits += self.peek()
            self.pos += 1
        self.expect("_")
        return self.subs[int(digits, 36) + 1]

    def template_args(self) -> str:
        self.expect("I")
        args = []
        while not self.take("E"):
            if self.take("L"):  # a literal: <type> <value> E
                self.type()
                start = self.pos
                while self.peek() != "E":
                    self.pos += 1
                args.append(self.text[start : self.pos].replace("n", "-", 1))
                self.expect("E")
            else:
                args.append(str(self.type()))
        return "<" + ", ".join(args) + ">"

    def class_name(self) -> CType:
        """An unscoped or nested (``N...E``) class name, with template arguments."""
        if self.take("N"):
            parts: list[str] = []
            while not self.take("E"):
                if self.peek() == "S":
                    found = self.substitution()
                    parts = [found.name if isinstance(found, CType) else str(found)]
                elif self.peek() == "I":
                    parts[-1] += self.template_args()
                    self.subs.append(CType("class", "::".join(parts)))
                else:
                    parts.append(self.source_name())
                    self.subs.append(CType("class", "::".join(parts)))
            return CType("class", "::".join(parts))
        name = self.source_name()
        result = CType("class", name)
        self.subs.append(result)
        if self.peek() == "I":
            result = CType("class", name + self.template_args())
            self.subs.append(result)
        return result

    def type(self) -> CType:
        c = self.peek()
        if c in "rVK":  # cv-qualifiers (restrict dropped): the qualified type is a candidate
            const = volatile = False
            while self.peek() in ("r", "V", "K") and self.peek():
                q = self.text[self.pos]
                self.pos += 1
                const |= q == "K"
                volatile |= q == "V"
            inner = self.type()
            qualified = CType(inner.kind, inner.name, inner.pointee, const or inner.const, volatile or inner.volatile)
            self.subs.append(qualified)
            return qualified
        if c == "P":
            self.pos += 1
            pointer = CType("pointer", pointee=self.type())
            self.subs.append(pointer)
            return pointer
        if c in ("R", "O"):
            raise ValueError("a reference parameter")
        if c == "F":  # a function type: return type, parameters, E
            self.pos += 1
            self.type()
            while not self.take("E"):
                self.type()
            function = CType("class", "function")
            self.subs.append(function)
            return function
        if c == "S":
            found = self.substitution()
            if not isinstance(found, CType):
                raise ValueError(f"a substitution that is not a type in {self.text!r}")
            return found
        if c == "D" and self.peek(2) in _BUILTINS_D:
            self.pos += 2
            return CType("builtin", _BUILTINS_D[self.text[self.pos - 2 : self.pos]])
        if self.take("DF16_"):
            return CType("builtin", "half")
        if c in _BUILTINS:
            self.pos += 1
            return CType("builtin", _BUILTINS[c])
        if c.isdigit() or c == "N":
            return self.class_name()
        raise ValueError(f"unsupported mangling {self.text[self.pos :]!r} in {self.text!r}")


def kernel_parameter_types(lowered: str) -> list[CType]:
    """The parameters of the kernel pointer type a probe was instantiated on.

    ``lowered`` is NVRTC's lowered name of :func:`probe_expression`:
    ``_Z17__launchpad_probeIPF v <params> EEvv``.
    """
    p = _Parser(lowered)
    p.expect("_Z")
    if p.source_name() != PROBE:
        raise ValueError(f"not a probe: {lowered!r}")
    p.subs.append(PROBE)
    p.expect("I")
    p.expect("P")
    p.expect("F")
    p.type()  # the return type (void)
    params: list[CType] = []
    while not p.take("E"):
        params.append(p.type())
    if params == [CType("builtin", "void")]:  # f(void)
        return []
    return params


def pointee_alignment(t: CType) -> int:
    """The alignment a pointer parameter's address must have beyond its tensor's own (a vector
    pointee's, ``float4*``: 16), or 0."""
    if t.kind != "pointer" or t.pointee is None:
        return 0
    return _VECTOR_ALIGN.get(t.pointee.name, 0)


def type_word(t: CType) -> str | None:
    """The type word of a parameter type; None where its size alone says how to pack it."""
    if t.kind == "pointer":
        pointee = t.pointee
        name = pointee.name if pointee is not None and pointee.kind != "pointer" else ""
        word = _WORDS.get(name) or _VECTOR_POINTEES.get(name)
        return f"*{word}" if word in POINTER_DTYPES else "*void"
    word = _WORDS.get(t.name)
    if word is None or word.startswith("fp8"):  # a struct, an enum, an fp8 scalar: packed by size
        return None
    return word


# --- parameter names, from the source -----------------------------------------------------------

#: Words that end a parameter's type rather than name it (``unsigned int``, an unnamed ``int``).
_TYPE_WORDS = frozenset(
    "int float double char short long unsigned signed bool void const volatile restrict __restrict__ "
    "half __half __nv_bfloat16 size_t auto".split()
)


def _strip_comments(source: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)


def _split_parameters(text: str) -> list[str]:
    """A parameter list split at its top-level commas (not those inside ``<>``, ``()``, ``[]``)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch in "<([") - (ch in ">)]")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip() and p.strip() != "void"]


def _parameter_name(param: str) -> str | None:
    param = param.split("=")[0].strip()  # a default value
    m = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", param)
    if m is None or m.group(1) in _TYPE_WORDS or not param[: m.start()].strip():
        return None  # an unnamed parameter: the last word is its type
    return m.group(1)


def parameter_names(source: str, expression: str, count: int) -> list[str] | None:
    """The names of the ``count`` parameters of the kernel a name expression (``"axpy<float>"``,
    ``"scale"``, ``"(void(*)(float*))f"``) denotes, from its ``__global__`` declaration in
    ``source``; None where no declaration, or more than one disagreeing, has ``count`` named
    parameters (macros, unnamed parameters)."""
    base = re.sub(r"<.*$", "", expression.rsplit(")", 1)[-1]).split("::")[-1].strip()
    if not re.fullmatch(r"[A-Za-z_]\w*", base):
        return None
    text = _strip_comments(source)
    found: set[tuple[str, ...]] = set()
    for m in re.finditer(rf"\b{re.escape(base)}\s*\(", text):
        head = text[max(text.rfind(";", 0, m.start()), text.rfind("}", 0, m.start())) + 1 : m.start()]
        if "__global__" not in head:
            continue
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        names = [_parameter_name(p) for p in _split_parameters(text[m.end() : i - 1])]
        if len(names) == count and all(names):
            found.add(tuple(n for n in names if n))
    return list(found.pop()) if len(found) == 1 else None
